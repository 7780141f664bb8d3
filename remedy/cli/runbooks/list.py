"""``remedy runbooks list``: the runbooks and their state in git."""

from __future__ import annotations

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
from remedy.console import console, err_console

# --------------------------------------------------------------------------- list


def _list_rows(project: Path) -> list[dict[str, Any]]:
    entries = core.discover(project)
    schema = core.load_schema(project)
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
        problem = entry.problem
        if problem is None and runbook is not None:  # parsed, but is it a valid runbook?
            problem = next(iter(core.validate_runbook(runbook, schema)), None)
        rows.append(
            {
                "id": entry.id,
                "file": entry.file,
                "title": runbook.title if runbook else None,
                "use_when": (runbook.data.get("use_when") or None) if runbook else None,
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
                "error": str(problem) if problem else None,
            }
        )
    return rows


@click.command("list", short_help="Each runbook: its id, title and issues.")
@_project_option
@_json_option
def list_(project_dir: Path | None, as_json: bool):
    """Id, title, when to use it, issues and last commit of each runbook; marks
    uncommitted ones. One block per runbook, at 80 columns."""
    project = _project(project_dir)
    rows = _list_rows(project)
    broken = [row for row in rows if row["error"]]
    if as_json:
        _echo_json(rows)
        if broken:
            raise SystemExit(1)
        return
    if not rows:
        err_console.print(f"no runbooks in {escape(str(project / core.RUNBOOKS_DIR))}")
        return
    for row in rows:
        _print_row(row)
    if broken:  # a list a person trusts at 3 a.m. does not exit 0 over a broken runbook
        err_console.print(
            f"[red]{len(broken)} runbook(s) broken: {escape(', '.join(r['file'] for r in broken))};"
            " `remedy runbooks check` lists what is wrong[/]"
        )
        raise SystemExit(1)


def _print_row(row: dict[str, Any]) -> None:
    """ID  TITLE, then 'use when', then issues, the last commit and the git state."""
    import textwrap

    def block(text: str, first: str, rest: str = "     ") -> str:
        return textwrap.fill(text, 80, initial_indent=first, subsequent_indent=rest,
                             break_on_hyphens=False, break_long_words=False)  # fmt: skip

    if row["error"]:
        console.print(block(f"{row['id']}  {row['error']}", ""), style="red", markup=False)
    else:
        console.print(block(f"{row['id']}  {row['title']}", ""), style="bold", markup=False)
    if row.get("use_when") and not row["error"]:
        console.print(block("use when: " + row["use_when"], "     "), markup=False)
    commit = row["commit"]
    last = f"{commit['short']} {commit['date'][:10]}" if commit else "not committed"
    state = row["state"]
    console.print(
        block(f"issues: {', '.join(row['issues']) or '-'}; last commit {last}; {state}", "     "),
        style=None if state in ("clean", "not tracked") else "bold yellow",
        markup=False,
        highlight=False,
    )
