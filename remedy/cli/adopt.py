"""``remedy adopt INVENTORY --host H SUBJECT --issue REF``: make runtime state a setting.

SUBJECT is an entry of the unmanaged volatile state as ``remedy status`` prints it.
The command reads the host once, writes ``settings/<slug>.yaml`` with the live value
as the desired one (``remedy.core.config.adopt``), checked with every other setting file,
and shows the diff. It changes nothing on the host: the next converge makes the
setting durable.
"""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path

import click

from remedy.cli.settings import dir_option
from remedy.console import console, said_folded
from remedy.core.config import data_settings as data
from remedy.errors import ConfigError, RemedyError

URGENCIES = ("now", "window", "reboot")


@click.command(short_help="Make an entry of the unmanaged volatile state a managed setting.")
@click.argument("inventory")
@click.argument("subject")
@click.option("--host", required=True, help="The inventory host whose live value is adopted.")
@click.option("--issue", required=True, help="The issue it answers: repo#N, e.g. tt-stack#60.")
@click.option(
    "--urgency",
    type=click.Choice(URGENCIES),
    default="window",
    show_default=True,
    help="What its drift justifies, as the restart policy reads it.",
)
@click.option(
    "--flag-option",
    help="For a flag: the option path the serving module reads its extra arguments from.",
)
@click.option("--label", help="Its name for people in the status table [default: its name].")
@click.option(
    "--adopt-secret",
    metavar="NAME",
    help="NAME's value looks like a secret (a URL with a password, a name like a key) but "
    "may go into the repository: adopt it anyway.",
)
@dir_option
@click.option("--dry", is_flag=True, help="Show the file it would write; write nothing.")
def adopt(inventory, subject, host, issue, urgency, flag_option, label, adopt_secret, where,
          dry):  # fmt: skip
    """SUBJECT as status prints it: Environment=NAME=VALUE (a /run drop-in's variable),
    LimitNOFILE=65536 (a property), --max-num-seqs (an extra server flag), vm.max_map_count
    (a sysctl that differs from the next boot), or a drop-in's path that sets one of them.
    Refused, with the reason, when no kind of setting can hold it or it looks like a
    secret (adopt its file reference, EnvironmentFile=/run/secrets/…, or --adopt-secret)."""
    from remedy.core.config.adopt import adoption

    where = where or data.directory()
    settings, snapshot = _read(inventory, host)
    a = adoption(snapshot, settings, subject, issue, urgency, host, flag_option, label,
                 adopt_secret)  # fmt: skip
    path = where / data.slug(a.found.name)
    _checked_with_the_others(where, path.name, a.text)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if old == a.text:
        said_folded("", f"{path}: already says so; nothing to write")
        return
    shown = _shown(path)
    diff = difflib.unified_diff(
        old.splitlines(keepends=True),
        a.text.splitlines(keepends=True),
        fromfile=f"a/{shown}" if old else "/dev/null",
        tofile=f"b/{shown}",
    )
    console.print("".join(diff), end="", markup=False, highlight=False, soft_wrap=True)
    if dry:
        said_folded("dry: ", f"nothing written; without --dry it writes {path}")
        return
    where.mkdir(parents=True, exist_ok=True)
    path.write_text(a.text, encoding="utf-8")
    said_folded(
        "next: ",
        f"commit {path} with its issue, then make it durable: `remedy converge "
        f"{inventory} --limit {host}`",
    )


def _shown(path: Path) -> str:
    """PATH as the diff names it: relative to here when it is below."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path).lstrip("/")


def _read(inventory: str, name: str):
    """(the host's settings, its snapshot): one remote read, nothing changed."""
    from facts.serving import HostSnapshot
    from remedy import session
    from remedy.core.config import host_data as settings_mod

    with session.connected(inventory, [name], limit_option="--host") as (_state, hosts, failed):
        if failed:
            raise RemedyError(f"{name}: could not connect over SSH: {failed[name]}")
        (host,) = hosts
        s = settings_mod.from_host_data(host.name, host.data)
        snap = host.get_fact(HostSnapshot, **s.snapshot_kwargs())
        if snap is None:
            raise RemedyError(f"{name}: the remote read failed")
    return s, snap


def _checked_with_the_others(where: Path, name: str, text: str) -> None:
    """TEXT as file NAME beside the setting files of WHERE passes `remedy settings
    check`: else ConfigError with its problems (another file for the same thing too)."""
    with tempfile.TemporaryDirectory() as tmp:
        for f in data.files(where):
            if f.name != name:
                (Path(tmp) / f.name).write_bytes(f.read_bytes())
        (Path(tmp) / name).write_text(text, encoding="utf-8")
        report = data.check(Path(tmp))
    mine = [p for p in report.problems if Path(p.file).name == name]
    if mine:
        lines = "\n".join(f"  {p}" for p in mine)
        raise ConfigError(f"{where / name} would not pass `remedy settings check`:\n{lines}")
