"""``remedy status INVENTORY``: one table per host, from one remote read each."""

from __future__ import annotations

import json

import click
from rich.table import Table
from rich.text import Text

from remedy import fleet
from remedy.console import console, err_console, progress, said_folded
from remedy.core.config.secrets import masked_doc
from remedy.core.render.report import host_status, next_of, next_step, reboot_lines
from remedy.errors import EXIT_CODES_HELP, EXIT_ERROR, worst


@click.command(short_help="What is live, what a reboot gives, and what is wrong.",
               epilog=EXIT_CODES_HELP)  # fmt: skip
@click.argument("inventory")
@click.option("--limit", multiple=True, help="Only this host (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of tables.")
def status(inventory, limit, as_json):
    """Parser, SDPA streaming and merge guard now and after a reboot, drop-ins by origin,
    memory against the threshold, hugepages, the locked tt-stack rev and the probe."""
    results, errors, nexts = [], {}, {}
    say = progress if not as_json else (lambda m: None)
    for read in fleet.read_hosts(inventory, list(limit) or None, say):
        if read.error:
            errors[read.name] = read.error
            nexts[read.name] = next_step(EXIT_ERROR, read.name, inventory, ssh=read.ssh,
                                         error=read.error)  # fmt: skip
        else:
            r = host_status(read.name, read.host_data, read.snapshot)
            results.append(r)
            blocked = any(p.startswith("durable path not possible: ") for p in r.problems)
            nexts[r.host] = next_of(r, inventory, read.ssh, read.host_data.unit,
                                    blocked=blocked)  # fmt: skip
    # A host that cannot be read may be the frozen one: an incomplete report is an error.
    code = EXIT_ERROR if errors else worst([r.exit_code for r in results])
    errors = masked_doc(errors)  # why a read failed may quote what the host said
    if as_json:
        click.echo(
            json.dumps(
                masked_doc(
                    {
                        "exit_code": code,
                        "hosts": [{**r.to_json(), "next": nexts[r.host]} for r in results],
                        "errors": errors,
                        "next": {n: nexts[n] for n in errors},
                    }
                ),
                indent=2,
                default=str,
            )
        )
    else:
        for r in results:
            _print(r)
            said_folded("next: ", nexts[r.host])
            _print_where(r)  # the store paths last: problems and next stay on screen
        for name, why in errors.items():
            err_console.print(Text(f"{name}: {why}", style="bold red"))
            said_folded("next: ", nexts[name])
    raise SystemExit(code)


def _print(r) -> None:
    """One host at 80 columns: a table of short values, then the notes and what is
    wrong, in full (paths are never cut; a long one folds onto the next line)."""
    colour = {0: "green", 6: "green", 3: "yellow", 4: "red"}.get(r.exit_code, "red")
    table = Table(title=f"{r.host}: [{colour}]{r.verdict}[/]", title_justify="left", width=80)
    table.add_column("", no_wrap=True, min_width=len(max((x.label for x in r.rows), key=len)))
    table.add_column("now", overflow="fold")
    table.add_column("after a reboot", overflow="fold")
    for row in r.rows:
        style = "red" if row.bad else None
        table.add_row(row.label, row.now, row.after_reboot, style=style)
    console.print(table, markup=True)
    _print_reboot(r)
    if r.notes:
        _bullets(console, "notes:", r.notes)
    if r.unmanaged:
        _bullets(console, UNMANAGED_TITLE, r.unmanaged_lines, "yellow")
    if r.problems:
        _bullets(console, "problems:", r.problems, "red")
    if r.review:
        _bullets(console, REVIEW_TITLE, r.review)


def _print_reboot(r) -> None:
    """Whether a reboot is needed, and why (issue 46 item 2)."""
    if r.reboot is None:
        return
    title, lines = reboot_lines(r.reboot)
    _bullets(console, title, lines, "yellow" if r.reboot.needed else None)


def _print_where(r) -> None:
    """Where each value comes from, in full (store paths fold, never cut)."""
    details = [(row.label, w) for row in r.rows for w in row.where]
    if details:
        console.print("where:", width=80)
        for label, text in details:
            when, *paths = text.split("\n")
            console.print(f"  {label}, {when}", width=80, markup=False, highlight=False)
            for path in paths:  # a path longer than a line folds, never cut
                if path.startswith("via ") and len(path) + 4 > 80:
                    console.print("    via", width=80, highlight=False)
                    path = path[4:]
                console.print(
                    f"    {path}", width=80, markup=False, highlight=False, overflow="fold"
                )


UNMANAGED_TITLE = "unmanaged volatile state (a reboot reverts it):"
REVIEW_TITLE = "review before the switch or the reboot:"


def _bullets(console, title: str, items: list[str], style: str | None = None) -> None:
    """TITLE, then one bullet per item, folded at 80 columns (a path is never cut)."""
    console.print(title, width=80, style=style)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for item in items:
        grid.add_row("  •", item)
    console.print(grid, width=80, markup=False, highlight=False)
