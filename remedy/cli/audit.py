"""``remedy audit``: read the audit log (one JSON line per apply, restore or convergence)."""

from __future__ import annotations

import json
import warnings
from datetime import datetime
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

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


@click.command("audit", short_help="What remedy did on each host, and why.")
@click.option("--host", help="Only records for this inventory host.")
@click.option(
    "--since",
    callback=_since,
    metavar="T",
    help="Only records since T: 30m, 2h, 3d, 1w ago, or an ISO date/time (UTC if no zone).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of records.")
@click.option(
    "--last", is_flag=True, help="Only the newest record, in full (with --host: that host's)."
)
@click.option(
    "--log",
    "log_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The log file (default: $REMEDY_AUDIT_LOG, else ~/.local/state/remedy/audit.jsonl).",
)
def audit(
    host: str | None, since: datetime | None, as_json: bool, log_path: Path | None, last: bool
):
    """Show what remedy did: who, where, which runbook and commit, what changed, the
    result, how often it restarted the server and why."""
    path = log_path or audit_log.default_log_path()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", audit_log.AuditLogWarning)
        records = audit_log.read(path, host=host, since=since)
    for warning in caught:
        err_console.print(f"[yellow]warning:[/] {escape(str(warning.message))}")

    if last:
        records = records[-1:]
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in records], indent=2))
        return
    if not records:
        err_console.print(f"no audit records in {escape(str(path))}")
        return
    if last:
        _print_one(records[0])
        return
    _print(records)


RESULT_STYLE = {
    "ok": "green",
    "failed": "bold red",
    "refused": "yellow",
    "interrupted": "bold red",
    "crashed": "bold red",
    "killed": "bold red",
    "given up": "bold red",
    "locked": "yellow",
}


def _why(record) -> str | None:
    """The reason of a run that did not end ok, from its details."""
    details = record.details or {}
    for key in ("failed", "refused", "interrupted", "durable_failed", "rollback_failed"):
        if details.get(key):
            return str(details[key])
    notes = details.get("notes") or []
    return str(notes[-1]) if notes and record.result != "ok" else None


def _restarts(record) -> str | None:
    return audit_log.restarts_said(record.details or {})


def _print_one(record) -> None:
    """One record in full, at 80 columns: what a person asks after a run."""
    details = record.details or {}
    rows = [
        ("time (UTC)", record.time),
        ("host", record.host),
        ("operator", record.operator),
        ("runbook", f"{record.runbook or '-'} ({', '.join(record.issues) or 'no issue'})"),
        ("commit", ", ".join(f"{k} {(v or '-')[:12]}" for k, v in record.commits.items())),
        ("result", record.result + (" (dirty checkout forced)" if record.dirty_override else "")),
        ("path", record.path),
        ("outcome", details.get("outcome")),
        (
            "revs",
            " -> ".join(str(details.get(k) or "?")[:12] for k in ("old_rev", "new_rev"))
            if details.get("new_rev") and details.get("new_rev") != details.get("old_rev")
            else None,
        ),  # fmt: skip
        ("restarts", _restarts(record) or "none"),
        ("blocked", "; ".join(details.get("durable_blockers") or []) or None),
        ("why", _why(record)),
        ("probe", f"{record.probe_before or '-'} -> {record.probe_after or '-'}"),
    ]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    for label, value in rows:
        if value:
            grid.add_row(label, Text(str(value)))
    console.print(grid, width=80, markup=False, highlight=False)
    console.print("steps:", width=80)
    steps = Table.grid(padding=(0, 1))
    steps.add_column(no_wrap=True)
    steps.add_column(overflow="fold")
    for op in record.operations:
        mark = "changed" if op.get("changed") else "error" if not op.get("succeeded", True) else "-"
        if op.get("executed") is False:
            mark = "not run"
        text = str(op.get("name", "?")) + (f": {op['why']}" if op.get("why") else "")
        steps.add_row(f"  {mark:<7}", Text(text))
    console.print(steps, width=80, markup=False, highlight=False)


def _print(records) -> None:
    """At 80 columns: a table of short columns whose cells never wrap mid-word, then
    each runbook's issues once, then the reason of every run that did not end ok."""
    table = Table(box=None, padding=(0, 1, 0, 0), header_style="bold", width=80)
    # "rb" is the runbook id, "ops" changed/total operations. No cell folds mid-word:
    # the fixed-shape columns never wrap, the probe wraps at its arrow, a long host
    # name folds (it has no spaces).
    # "rs": how many times the run restarted the model server (why: below the table)
    for column, min_width in (("time (UTC)", 16), ("host", 8), ("rb", 3), ("path", 16),
                              ("ops", 5), ("rs", 2), ("probe", 12), ("result", 6)):  # fmt: skip
        table.add_column(
            column,
            no_wrap=column in ("time (UTC)", "rb", "path", "ops", "rs"),
            overflow="fold",
            min_width=min_width,
        )
    issues: dict[str, list[str]] = {}
    reasons = []
    for record in records:
        changed = sum(1 for op in record.operations if op.get("changed"))
        probe = f"{record.probe_before or '-'} → {record.probe_after or '-'}"
        # every field is text, never markup: a record may hold any string (issue 42)
        result = Text(str(record.result), style=RESULT_STYLE.get(str(record.result), ""))
        if record.dirty_override:
            result.append(" dirty", style="bold yellow")
        when = str(record.time).replace("T", " ")[:16]
        table.add_row(
            Text(when),
            Text(str(record.host)),
            Text(str(record.runbook or "-")),
            Text(str(record.path)),
            Text(f"{changed}/{len(record.operations)}"),
            Text(str((record.details or {}).get("restarts") or 0)),
            Text(probe),
            result,
        )
        issues.setdefault(record.runbook or "-", record.issues)
        if record.result != "ok" and (why := _why(record)):
            reasons.append((f"{when} {record.host} {record.result}", why))
        if restarted := _restarts(record):
            reasons.append((f"{when} {record.host} restarted", restarted))
    console.print(table)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for runbook, names in sorted(issues.items()):
        grid.add_row(Text(f"  runbook {runbook}:"), Text(", ".join(map(str, names)) or "-"))
    console.print("issues:", width=80)
    console.print(grid, width=80, markup=False, highlight=False)
    if reasons:
        console.print("why:", width=80)
        for head, why in reasons:
            console.print(f"  {head}:", width=80, markup=False, highlight=False)
            text = Table.grid()
            text.add_column(width=4)
            text.add_column(overflow="fold")
            text.add_row("", Text(str(why)))
            console.print(text, width=80, markup=False, highlight=False)
