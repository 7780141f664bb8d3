"""``remedy runbooks list|show|check|apply``: find, read, check and run the runbooks.

Every command acts on the project in the current directory (``--project``
points elsewhere) and takes ``--json``. The work is done by
``remedy.core.runbooks``, ``remedy.inventory`` and ``remedy.audit``; this
module parses options and renders.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from remedy import audit
from remedy.console import console, err_console
from remedy.core import runbooks as core
from remedy.errors import ConfigError
from remedy.inventory import find_host, is_production, load_inventory

#: Files whose uncommitted changes make ``apply`` refuse in production.
GUARDED_DIRS = ("deploys", "remedy/operations")


def _project_option(function):
    return click.option(
        "--project",
        "project_dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="The remedy project (its runbooks/, deploys/, inventory/). Default: the current "
        "directory.",
    )(function)


def _json_option(function):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(
        function
    )


def _project(project_dir: Path | None) -> Path:
    return (project_dir or Path.cwd()).resolve()


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))


@click.group()
def runbooks():
    """Find, read, check and apply the runbooks of the project."""


# --------------------------------------------------------------------------- list


def _list_rows(project: Path) -> list[dict[str, Any]]:
    entries = core.discover(project)
    tracked = audit.is_tracked(project)
    states = audit.uncommitted(project, [core.RUNBOOKS_DIR]) if tracked else None
    rows = []
    for entry in entries:
        runbook = entry.runbook
        commit = audit.last_commit(project, entry.file) if tracked else None
        if not tracked:
            state = "not tracked"
        else:
            state = (states or {}).get(entry.file, "clean")
        rows.append(
            {
                "id": entry.id,
                "file": entry.file,
                "title": runbook.title if runbook else None,
                "issues": runbook.issues if runbook else [],
                "commit": (
                    {
                        "sha": commit.sha,
                        "short": commit.short,
                        "date": commit.date,
                        "author": commit.author,
                    }
                    if commit
                    else None
                ),
                "state": state,
                "error": str(entry.problem) if entry.problem else None,
            }
        )
    return rows


@runbooks.command("list")
@_project_option
@_json_option
def list_(project_dir: Path | None, as_json: bool):
    """Id, title, issues and last commit of each runbook; marks uncommitted ones."""
    project = _project(project_dir)
    rows = _list_rows(project)
    if as_json:
        _echo_json(rows)
        return
    if not rows:
        err_console.print(f"no runbooks in {escape(str(project / core.RUNBOOKS_DIR))}")
        return
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("id", no_wrap=True)
    table.add_column("title")
    table.add_column("issues")
    table.add_column("last commit", no_wrap=True)
    table.add_column("state", no_wrap=True)
    styles = {"clean": "dim", "not tracked": "dim"}
    for row in rows:
        commit = row["commit"]
        last = (
            f"{commit['short']} {commit['date'][:10]} {escape(commit['author'])}" if commit else "-"
        )
        title = escape(row["title"]) if row["title"] else f"[red]{escape(row['error'] or '')}[/]"
        state = row["state"]
        table.add_row(
            row["id"],
            title,
            escape(", ".join(row["issues"])),
            last,
            f"[{styles.get(state, 'bold yellow')}]{state}[/]",
        )
    console.print(table)


# --------------------------------------------------------------------------- show


# A rendered line: (indent, rich markup, is a shell command). Prose wraps under
# its indent (under the text after a "- " or "1. " marker); commands are never
# wrapped, so they copy and paste as they are.
Line = tuple[int, str, bool]
_MARKER_RE = re.compile(r"^(- |\d+\. )")


def _text(indent: int, markup: str) -> Line:
    return (indent, markup, False)


def _print_line(indent: int, markup: str, is_command: bool) -> None:
    if is_command:
        console.print(" " * indent + markup, soft_wrap=True)
        return
    if not markup:
        console.print()
        return
    marker = _MARKER_RE.match(markup)
    if marker:
        grid = Table.grid()
        grid.add_column(no_wrap=True)
        grid.add_column()
        grid.add_row(marker.group(1), Text.from_markup(markup[marker.end() :]))
        console.print(Padding(grid, (0, 0, 0, indent), expand=False))
    else:
        console.print(Padding(Text.from_markup(markup), (0, 0, 0, indent), expand=False))


def _commands(commands: list[str], indent: int) -> list[Line]:
    lines = []
    for command in commands:
        first, *rest = command.splitlines() or [""]
        lines.append((indent, f"[cyan]$ {escape(first)}[/]", True))
        lines.extend((indent, f"[cyan]  {escape(line)}[/]", True) for line in rest)
    return lines


def _step_lines(number: int | None, step: dict[str, Any], indent: int = 2) -> list[Line]:
    label = f"{number}. " if number is not None else "- "
    head = label
    if step.get("id"):
        head += f"[bold]{escape(step['id'])}[/]: "
    head += escape(step.get("description", ""))
    lines = [_text(indent, head)]
    inner = indent + len(label)
    if step.get("when"):
        lines.append(_text(inner, f"[italic]when: {escape(step['when'])}[/]"))
    if step.get("issues"):
        lines.append(_text(inner, f"issues: {escape(', '.join(step['issues']))}"))
    if step.get("operation"):
        lines.append(_text(inner, f"operation: [green]{escape(step['operation'])}[/]"))
    manual = step.get("manual")
    if isinstance(manual, dict):
        lines.append(_text(inner, "[yellow]manual:[/]"))
        lines.extend(_commands(manual.get("commands", []), inner + 2))
        if manual.get("notes"):
            lines.append(_text(inner + 2, f"[dim]{escape(manual['notes'])}[/]"))
    return lines


def _render(runbook: core.Runbook) -> None:
    data = runbook.data
    risk = data.get("risk", {})
    survives = data.get("survives_reboot", {})
    risk_style = {"high": "bold red", "medium": "yellow", "low": "green"}.get(risk.get("level"), "")
    value = survives.get("value")
    survives_text = {True: "yes", False: "[bold red]no[/]"}.get(value, escape(str(value)))

    out: list[Line] = [
        _text(0, f"[bold]{escape(runbook.id)}  {escape(runbook.title)}[/]"),
        _text(0, f"[dim]{escape(runbook.file)}[/]"),
        _text(0, f"issues: {escape(', '.join(runbook.issues))}"),
        _text(
            0,
            f"risk: [{risk_style}]{escape(str(risk.get('level')))}[/]"
            f"   survives reboot: {survives_text}"
            f"   deploy: {escape(runbook.deploy or '-')}",
        ),
    ]
    if data.get("owner_decision_pending"):
        out.append(_text(0, "[bold yellow]owner decision pending[/]"))
    out += [_text(0, ""), _text(0, escape(data.get("summary", ""))), _text(0, "")]

    out.append(_text(0, "[bold]Symptoms[/]"))
    for symptom in data.get("symptoms", []):
        out.append(_text(2, f"- {escape(symptom['description'])}"))
        detect = symptom.get("detect", {})
        if detect.get("facts"):
            out.append(_text(4, f"[dim]facts: {escape(', '.join(detect['facts']))}[/]"))
        if detect.get("status_fields"):
            out.append(_text(4, f"[dim]status: {escape(', '.join(detect['status_fields']))}[/]"))

    out += [_text(0, ""), _text(0, "[bold]Risk[/]"), _text(2, escape(risk.get("notes", "")))]

    out += [_text(0, ""), _text(0, "[bold]Preconditions[/]")]
    for pre in data.get("preconditions", []) or []:
        out.append(_text(2, f"- {escape(pre['description'])}"))
        check = pre.get("check") or {}
        if check.get("operation"):
            out.append(_text(4, f"check: [green]{escape(check['operation'])}[/]"))
        if check.get("commands"):
            out.extend(_commands(check["commands"], 4))
    if not data.get("preconditions"):
        out.append(_text(2, "none"))

    out += [_text(0, ""), _text(0, "[bold]Steps[/]")]
    for number, step in enumerate(data.get("steps", []), start=1):
        out.extend(_step_lines(number, step))

    out += [_text(0, ""), _text(0, "[bold]Verification[/]")]
    for item in data.get("verification", []):
        out.append(_text(2, f"- {escape(item['description'])}"))
        if item.get("operation"):
            out.append(_text(4, f"operation: [green]{escape(item['operation'])}[/]"))
        if item.get("commands"):
            out.extend(_commands(item["commands"], 4))

    out += [_text(0, ""), _text(0, "[bold]Rollback[/]")]
    for item in data.get("rollback", []) or []:
        out.extend(_step_lines(None, item))
    if not data.get("rollback"):
        out.append(_text(2, "none"))

    out += [
        _text(0, ""),
        _text(0, f"[bold]Survives a reboot:[/] {survives_text}"),
        _text(2, escape(survives.get("explanation", ""))),
    ]
    for line in out:
        _print_line(*line)


def _manual_script(runbook: core.Runbook, inventory: Path | None, host_name: str | None) -> str:
    host_data: dict[str, Any] = {}
    if inventory is not None:
        hosts = load_inventory(inventory)
        if host_name is not None:
            host = find_host(hosts, host_name)
        elif len(hosts) == 1:
            host = hosts[0]
        else:
            names = ", ".join(h.name for h in hosts) or "none"
            raise ConfigError(f"{inventory} has several hosts ({names}); pick one with --host")
        host_data = dict(host.data)
        # flake_host defaults to the inventory name (restore deploy's documented default).
        host_data.setdefault("flake_host", host.name)
    elif host_name is not None:
        raise click.BadParameter("--host needs --inventory", param_hint="--host")
    from remedy.core import manual

    return manual.render(runbook, host_data)


@runbooks.command("show")
@click.argument("runbook_id")
@click.option(
    "--manual",
    is_flag=True,
    help="Print the exact shell commands for a person with only SSH (a POSIX sh script).",
)
@click.option(
    "--inventory",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="With --manual: take the values from this inventory's host data.",
)
@click.option("--host", "host_name", help="With --manual --inventory: the host to recover.")
@_project_option
@_json_option
def show(
    runbook_id: str,
    manual: bool,
    inventory: Path | None,
    host_name: str | None,
    project_dir: Path | None,
    as_json: bool,
):
    """Show runbook RUNBOOK_ID for a person (or, with --manual, as a shell script)."""
    project = _project(project_dir)
    runbook = core.load_valid_runbook(project, runbook_id)
    if manual:
        script = _manual_script(runbook, inventory, host_name)
        if as_json:
            _echo_json({"runbook": runbook.id, "script": script})
        else:
            click.echo(script, nl=not script.endswith("\n"))
        return
    if inventory is not None or host_name is not None:
        raise click.UsageError("--inventory and --host go with --manual")
    if as_json:
        _echo_json(runbook.to_dict())
    else:
        _render(runbook)


# --------------------------------------------------------------------------- check


@runbooks.command("check")
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


def _dirty_files(project: Path, runbook: core.Runbook) -> dict[str, str] | None:
    """Uncommitted runbook, deploy and operation files; None if not a git checkout."""
    states = audit.uncommitted(project, [runbook.file, *GUARDED_DIRS])
    if states is None:
        return None
    return {
        name: state
        for name, state in states.items()
        if name == runbook.file or name.endswith(".py")
    }


def _record_refusal(
    project: Path,
    runbook: core.Runbook,
    hosts: list,
    limits: tuple[str, ...],
    audit_log: Path | None,
    details: dict[str, Any],
) -> None:
    commits = audit.commits_of(project)
    chosen = [h for h in hosts if not limits or h.name in limits or set(h.groups) & set(limits)]
    for host in chosen or hosts:
        record = audit.AuditRecord(
            host=host.name,
            result="refused",
            runbook=runbook.id,
            commits=commits,
            issues=runbook.issues,
            path="noop",
            details=details,
        )
        path = audit_log or audit.log_path_for(host.data)
        try:
            audit.append(path, record)
        except OSError as exc:
            err_console.print(f"[yellow]warning:[/] could not write the audit log {path}: {exc}")


@runbooks.command("apply")
@click.argument("runbook_id")
@click.argument("inventory", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--dry", is_flag=True, help="Let pyinfra show what would change, change nothing.")
@click.option(
    "--force-dirty",
    is_flag=True,
    help="Run against production although runbook/deploy files have uncommitted changes "
    "(recorded in the audit log).",
)
@click.option("--limit", "limits", multiple=True, help="Only these hosts or groups (pyinfra).")
@click.option(
    "--audit-log",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Audit log file (default: host data audit_log, else the user's state dir).",
)
@_project_option
@_json_option
@click.pass_context
def apply(
    ctx: click.Context,
    runbook_id: str,
    inventory: Path,
    dry: bool,
    force_dirty: bool,
    limits: tuple[str, ...],
    audit_log: Path | None,
    project_dir: Path | None,
    as_json: bool,
):
    """Run the deploy of runbook RUNBOOK_ID against INVENTORY through pyinfra.

    In a production inventory (host data remedy_environment = "production") it
    refuses while the runbook, deploys/*.py or remedy/operations/*.py have
    uncommitted changes, unless --force-dirty.
    """
    project = _project(project_dir)
    inventory = inventory.resolve()
    audit_log = audit_log.resolve() if audit_log else None
    runbook = core.load_valid_runbook(project, runbook_id)
    if not runbook.deploy:
        raise ConfigError(
            f"{runbook.file}: runbook {runbook.id} has no `deploy`, so it cannot be applied; "
            f"follow its steps by hand (remedy runbooks show {runbook.id})"
        )

    report = core.check_project(project)
    own = {runbook.file, runbook.deploy}
    blocking = [p for p in report.problems if p.file in own]
    if blocking:
        raise core.RunbookInvalid(blocking)
    if report.problems:
        err_console.print(
            f"[yellow]warning:[/] `remedy runbooks check` reports {len(report.problems)} "
            "problem(s) in other files"
        )

    hosts = load_inventory(inventory)
    production = is_production(hosts)
    dirty_override = False
    if production:
        dirty = _dirty_files(project, runbook)
        if dirty is None:
            reason = f"{project} is not a git checkout, so the runbook and deploys are unverified"
            listing = ""
        else:
            reason = "uncommitted changes"
            listing = ", ".join(f"{name} ({state})" for name, state in sorted(dirty.items()))
        if dirty is None or dirty:
            if not force_dirty:
                _record_refusal(
                    project,
                    runbook,
                    hosts,
                    limits,
                    audit_log,
                    {"reason": reason, "dirty_files": dirty, "inventory": str(inventory)},
                )
                raise ConfigError(
                    f"refusing to apply runbook {runbook.id} to the production inventory "
                    f"{inventory}: {reason}"
                    + (f": {listing}" if listing else "")
                    + ". Commit them, or pass --force-dirty to run anyway (recorded in the "
                    "audit log)."
                )
            dirty_override = True
            err_console.print(
                f"[bold yellow]warning:[/] --force-dirty: applying to production with {reason}"
                + (f": {escape(listing)}" if listing else "")
                + "; the audit line records the override"
            )

    argv = [sys.executable, "-m", "pyinfra", str(inventory), runbook.deploy]
    argv.append("--dry" if dry else "-y")
    for limit in limits:
        argv += ["--limit", limit]
    env = dict(os.environ)
    env["REMEDY_RUNBOOK"] = runbook.id
    env.pop("REMEDY_FORCE_DIRTY", None)
    if dirty_override:
        env["REMEDY_FORCE_DIRTY"] = "1"
    if audit_log:
        env[audit.LOG_ENV] = str(audit_log)

    err_console.print(f"[dim]running (in {escape(str(project))}): {escape(shlex.join(argv))}[/]")
    # With --json, stdout carries only the JSON document; pyinfra talks on stderr.
    completed = subprocess.run(argv, cwd=project, env=env, stdout=2 if as_json else None)
    if as_json:
        _echo_json(
            {
                "runbook": runbook.id,
                "deploy": runbook.deploy,
                "inventory": str(inventory),
                "production": production,
                "dirty_override": dirty_override,
                "dry": dry,
                "argv": argv,
                "exit_code": completed.returncode,
            }
        )
    ctx.exit(completed.returncode)
