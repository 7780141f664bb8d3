"""``remedy runbooks show``: a runbook for a person, or its manual script."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from remedy import runbooks as core
from remedy.cli.runbooks._common import (
    _echo_json,
    _json_option,
    _project,
    _project_option,
)
from remedy.console import console, err_console
from remedy.errors import ConfigError
from remedy.inventory import find_host, load_inventory

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


def _manual_script(
    runbook: core.Runbook, inventory: Path | None, host_name: str | None, read: bool
) -> str:
    host_data: dict[str, Any] = {}
    name = None
    if inventory is not None:
        hosts = load_inventory(inventory)
        if host_name is not None:
            host = find_host(hosts, host_name)
        elif len(hosts) == 1:
            host = hosts[0]
        else:
            names = ", ".join(h.name for h in hosts) or "none"
            raise ConfigError(f"{inventory} has several hosts ({names}); pick one with --host")
        host_data, name = dict(host.data), host.name
        # flake_host defaults to the inventory name (restore deploy's documented default).
        host_data.setdefault("flake_host", host.name)
    elif host_name is not None:
        raise click.BadParameter("--host needs --inventory", param_hint="--host")
    from remedy.core.render import manual

    snapshot, said = None, "the host was not read (no --inventory)"
    if inventory is not None and read:
        snapshot, said = _read_host(inventory, name)
    elif inventory is not None:
        said = "the host was not read (--no-read)"
    return manual.render(
        runbook, host_data, _allowed_signers(host_data), snapshot, name,
        str(inventory or ""), said,
    )  # fmt: skip


def _read_host(inventory: Path, name: str) -> tuple[Any, str]:
    """The host as remedy reads it, for the plan, and how: the time it was read, or why
    it could not be (the plan then leaves every decision to the host)."""
    import time

    from remedy import fleet

    err_console.print(f"[dim]reading {escape(name)} for the plan[/]")
    try:
        (found,) = fleet.read_hosts(str(inventory), [name])
    except Exception as exc:  # an unreachable host still gets its script
        return None, f"the host could not be read ({exc}): each step decides on the host"
    if found.snapshot is None:
        return None, f"the host could not be read ({found.error}): each step decides on it"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return found.snapshot, f"the plan is from a read of the host at {when}"


def _allowed_signers(host_data: dict[str, Any]) -> str | None:
    """The text of host data's trusted_signers file, read here (the machine that renders
    the script), checked as the deploy checks it; the script carries it to the host."""
    from remedy.core.programs.signers import check_allowed_signers

    path = host_data.get("trusted_signers")
    if not path:
        return None
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"trusted_signers {path}: {why}") from None
    check_allowed_signers(text, path)
    return text


@click.command("show", short_help="Show a runbook, or render it as a script.")
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
@click.option(
    "--read/--no-read",
    default=True,
    help="With --manual --inventory: plan from a read of the host (default), or leave "
    "every decision to the host (for a host this machine cannot reach).",
)
@_project_option
@_json_option
def show(
    runbook_id: str,
    manual: bool,
    inventory: Path | None,
    host_name: str | None,
    read: bool,
    project_dir: Path | None,
    as_json: bool,
):
    """Show runbook RUNBOOK_ID for a person (or, with --manual, as a shell script)."""
    project = _project(project_dir)
    runbook = core.load_valid_runbook(project, runbook_id)
    if manual:
        script = _manual_script(runbook, inventory, host_name, read)
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
