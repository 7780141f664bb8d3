"""``remedy audit``: read the audit log (one JSON line per apply, restore or convergence)."""

from __future__ import annotations

import json
import warnings
from datetime import datetime
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from remedy import audit as audit_log
from remedy.console import console, err_console


def _since(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return audit_log.parse_since(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: use {audit_log.SINCE_FORMS}; naive times are UTC", ctx, param
        ) from None


@click.command("audit")
@click.option("--host", help="Only records for this inventory host.")
@click.option(
    "--since",
    callback=_since,
    metavar="T",
    help="Only records since T: 30m, 2h, 3d, 1w ago, or an ISO date/time (UTC if no zone).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of records.")
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The log file (default: $REMEDY_AUDIT_LOG, else ~/.local/state/remedy/audit.jsonl).",
)
def audit(host: str | None, since: datetime | None, as_json: bool, log_path: Path | None):
    """Show what remedy did: who, where, which runbook and commit, what changed, the result."""
    path = log_path or audit_log.default_log_path()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", audit_log.AuditLogWarning)
        records = audit_log.read(path, host=host, since=since)
    for warning in caught:
        err_console.print(f"[yellow]warning:[/] {escape(str(warning.message))}")

    if as_json:
        click.echo(json.dumps([r.to_dict() for r in records], indent=2))
        return
    if not records:
        err_console.print(f"no audit records in {escape(str(path))}")
        return
    table = Table(show_edge=False, pad_edge=False)
    # Short, fixed-shape columns stay whole; the others fold rather than lose text.
    # "ops" is changed/total operations.
    for column in ("time (UTC)", "host", "runbook", "issues", "path", "ops", "probe", "result"):
        table.add_column(
            column, no_wrap=column in ("time (UTC)", "host", "runbook", "ops"), overflow="fold"
        )
    result_style = {
        "ok": "green",
        "failed": "bold red",
        "refused": "yellow",
        "interrupted": "bold red",
        "crashed": "bold red",
    }
    for record in records:
        changed = sum(1 for op in record.operations if op.get("changed"))
        probe = f"{record.probe_before or '-'} → {record.probe_after or '-'}"
        result = f"[{result_style.get(record.result, '')}]{escape(record.result)}[/]"
        if record.dirty_override:
            result += " [bold yellow]dirty override[/]"
        table.add_row(
            escape(record.time.replace("T", " ")[:16]),
            escape(record.host),
            escape(record.runbook or "-"),
            escape(", ".join(record.issues)),
            escape(record.path),
            f"{changed}/{len(record.operations)}",
            escape(probe),
            result,
        )
    console.print(table)
