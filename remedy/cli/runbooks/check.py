"""``remedy runbooks check``: the runbooks against their schema, operations and deploys."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from remedy import runbooks as core
from remedy.cli.runbooks._common import (
    _echo_json,
    _json_option,
    _project,
    _project_option,
)
from remedy.console import err_console


@click.command("check", short_help="Validate every runbook against the code.")
@click.option(
    "--operations-package",
    default=core.OPERATIONS_PACKAGE,
    show_default=True,
    hidden=True,
    help="The package operations are resolved in (tests point it at a fixture).",
)
@_project_option
@_json_option
@click.pass_context
def check(ctx: click.Context, operations_package: str, project_dir: Path | None, as_json: bool):
    """Validate every runbook and the runbook <-> operation <-> deploy mapping.

    Each problem is printed as FILE:LINE: JSON_PATH: problem. Exit 1 on any.
    """
    project = _project(project_dir)
    report = core.check_project(project, operations_package)
    if as_json:
        _echo_json(
            {
                "ok": report.ok,
                "runbooks": [rb.id for rb in report.runbooks],
                "operations_source": report.operations_source,
                "problems": [p.to_dict() for p in report.problems],
            }
        )
    else:
        for problem in report.problems:
            click.echo(str(problem))
        source = report.operations_source
        if source and not str(Path(source).resolve()).startswith(str(project)):
            err_console.print(f"[dim]operations resolved from {escape(source)}[/]")
        if report.ok:
            click.echo(f"{len(report.runbooks)} runbooks OK")
        else:
            err_console.print(
                f"[bold red]{len(report.problems)} problem(s)[/] in "
                f"{escape(str(project / core.RUNBOOKS_DIR))} and "
                f"{escape(str(project / core.DEPLOYS_DIR))}"
            )
    ctx.exit(0 if report.ok else 1)


# --------------------------------------------------------------------------- apply
