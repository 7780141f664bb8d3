"""``remedy runbooks apply``: run a runbook's deploy, audited."""

from __future__ import annotations

import fnmatch
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from remedy import audit
from remedy import runbooks as core
from remedy.cli.runbooks._common import (
    _echo_json,
    _json_option,
    _project,
    _project_option,
)
from remedy.console import err_console
from remedy.errors import ConfigError
from remedy.inventory import is_production, load_inventory
from remedy.runbooks.files import dangling_links

#: Files whose uncommitted changes make ``apply`` refuse in production.
GUARDED_DIRS = ("deploys", "remedy/operations")


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


def _check_limits(inventory: Path, hosts: list, limits: tuple[str, ...]) -> None:
    """Each --limit names a host or a group of INVENTORY, or is a pattern that matches a
    host's name, as pyinfra reads it: else ConfigError before anything connects (pyinfra
    itself only warns, and runs on no host with exit 0)."""
    groups = {g for h in hosts for g in h.groups}
    unknown = [
        limit
        for limit in limits
        if limit not in groups and not any(fnmatch.fnmatchcase(h.name, limit) for h in hosts)
    ]
    if unknown:
        raise ConfigError(
            f"--limit {', '.join(unknown)}: not in {inventory} (hosts: "
            f"{', '.join(h.name for h in hosts) or 'none'}"
            + (f"; groups: {', '.join(sorted(groups))}" if groups else "")
            + ")"
        )


@click.command("apply", short_help="Run a runbook's deploy against an inventory.")
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
    # a runbook link whose target is gone: the checkout is not what it says it is
    own = {runbook.file, runbook.deploy, *dangling_links(project)}
    blocking = [p for p in report.problems if p.file in own]
    if blocking:
        raise core.RunbookInvalid(blocking)
    if report.problems:
        err_console.print(
            f"[yellow]warning:[/] `remedy runbooks check` reports {len(report.problems)} "
            "problem(s) in other files"
        )

    hosts = load_inventory(inventory)
    _check_limits(inventory, hosts, limits)
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
