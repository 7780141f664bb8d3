"""``remedy twin``: bring host twins up, reboot them, list them, take them down."""

from __future__ import annotations

import dataclasses
import json
import shlex

import click
from rich import box
from rich.table import Table

from remedy.console import console, err_console, said_folded
from remedy.twin import fixtures, machine, rootfs

NAME = click.option(
    "--name",
    default=fixtures.FLAKE_HOST,
    show_default=True,
    help="Twin name (also its inventory host name).",
)


def _progress(message: str) -> None:
    err_console.print(f"[dim]…[/] {message}")


@click.group(short_help="A rebootable twin of the production host.")
def twin():
    """A twin of the production host: real systemd, SSH, Nix; rebootable."""


@twin.command(short_help="Boot a twin; wait until SSH and the server answer.")
@NAME
@click.option(
    "--with-emergency-override",
    is_flag=True,
    help="Start in the seed's state: the /run override present, tool calling working.",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Take an existing twin of this name down first (start from production's "
    "state, not from what was done to it).",
)
@click.option(
    "--suite",
    type=click.Choice(rootfs.SUITES),
    default=None,
    help="Debian base: trixie (Nix 2.26) or bookworm (Nix 2.8). "
    "[default: $REMEDY_TWIN_SUITE, else trixie]",
)
@click.option(
    "--role",
    type=click.Choice(machine.ROLES),
    default="serving",
    show_default=True,
    help="builder: serves nothing (its model server masked); has the unprivileged "
    f"user {machine.BUILDER_USER} that a serving host's root logs in to (see --for).",
)
@click.option(
    "--for",
    "serving",
    multiple=True,
    metavar="NAME",
    help="With --role builder: a serving twin, already up, whose root may log in to "
    "this builder (its key, the builder's host key). Repeatable.",
)
@click.option(
    "--with-git",
    is_flag=True,
    help="With --role builder: the builder has git (a stock NixOS builder has none, "
    "and a builder twin neither unless this is given).",
)
@click.option(
    "--unsigned",
    is_flag=True,
    help="With --role builder: its nix-daemon signs nothing (by default it signs what "
    "it builds, and --for makes the serving twins trust its key).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the twin as JSON.")
def up(name, with_emergency_override, fresh, suite, role, serving, with_git, unsigned, as_json):
    """Build or reuse the cached rootfs, boot a twin, wait until SSH and the server answer
    (a builder: SSH only)."""
    if serving and role != "builder":
        raise click.UsageError("--for pairs a builder with serving twins: add --role builder")
    if role == "builder" and with_emergency_override:
        raise click.UsageError("--with-emergency-override is for a serving twin, not a builder")
    if (with_git or unsigned) and role != "builder":
        raise click.UsageError("--with-git and --unsigned are for a builder: add --role builder")
    # the serving twins first: a name that is not up fails before anything boots
    pairs = [_serving_twin(s, name) for s in dict.fromkeys(serving)]
    if fresh and name in {t.name for t in machine.all_twins()}:
        machine.down(name, progress=_progress)
    t = machine.up(
        name,
        suite=suite,
        with_emergency_override=with_emergency_override,
        role=role,
        builder_git=with_git,
        builder_signs=not unsigned,
        progress=_progress,
    )
    for s in pairs:
        machine.pair_builder(s, t, progress=_progress)
    if as_json:
        doc = {"name": t.name, "suite": t.suite, "role": t.role, **t.inventory_data()}
        if t.role == "builder":
            doc["paired_with"] = [s.name for s in pairs]
            doc.update(git=t.git, signs=t.signs)
        click.echo(json.dumps(doc, indent=2))
        return
    if t.role == "builder":
        console.print(
            f"builder twin [bold]{t.name}[/] ({t.suite}) is up; it serves nothing; "
            f"its user {machine.BUILDER_USER}; {'git' if t.git else 'no git'}; "
            f"{'signs what it builds' if t.signs else 'signs nothing'}"
        )
        for s in pairs:
            console.print(f"root of [bold]{s.name}[/] logs in to it with (inside {s.name}):")
            login = f"{machine.BUILDER_USER}@127.0.0.1"
            click.echo(shlex.join(["ssh", "-i", machine.BUILDER_KEY, "-p", str(t.ssh_port), login]))
    else:
        console.print(f"twin [bold]{t.name}[/] ({t.suite}) is up; its server: {t.server_url}")
    console.print("log in with (its own key and known_hosts; one line, pasteable):")
    # never wrapped: a terminal folds it visually, and it pastes as one command
    click.echo(shlex.join(t.ssh_argv()))
    if t.role != "builder":
        said_folded(
            "next: ",
            f"see what is wrong and what a reboot would do: `remedy status "
            f"inventory/twin.py --limit {shlex.quote(t.name)}`",
        )


def _serving_twin(name: str, builder: str) -> machine.Twin:
    """The twin NAME given to --for: one that is up and serves."""
    if name == builder:
        raise click.UsageError(f"--for {name}: a builder is not paired with itself")
    t = machine.load(name)
    if t.role != "serving":
        raise click.UsageError(f"--for {name}: twin {name} is a {t.role}, not a serving twin")
    if not t.running:
        raise click.UsageError(
            f"--for {name}: twin {name} is not up; start it with `remedy twin up --name {name}`"
        )
    return t


@twin.command()
@NAME
def down(name):
    """Power a twin off and delete its overlay."""
    machine.down(name, progress=_progress)
    console.print(f"twin [bold]{name}[/] is down")


@twin.command(short_help="A real reboot: /run comes back empty.")
@NAME
def reboot(name):
    """A real reboot: /run comes back empty, units start from the booted generation."""
    t = machine.reboot(name, progress=_progress)
    if t.role == "builder":
        console.print(f"builder twin [bold]{t.name}[/] rebooted (it serves nothing)")
    else:
        console.print(f"twin [bold]{t.name}[/] rebooted and serving at {t.server_url}")


@twin.command("list")
@click.option("--json", "as_json", is_flag=True)
def list_(as_json):
    """The twins on this machine."""
    twins = machine.all_twins()
    rows = [
        {
            "name": t.name,
            "suite": t.suite,
            "role": t.role,
            "running": t.running,
            "ssh_port": t.ssh_port,
            "server_url": t.server_url if t.role == "serving" else None,
            "state_dir": str(t.dir),
        }
        for t in twins
    ]
    left = machine.leftovers()
    if as_json:
        click.echo(
            json.dumps(
                {"twins": rows, "leftovers": [dataclasses.asdict(p) for p in left]}, indent=2
            )
        )
        return
    for p in left:
        console.print(
            f"[red]leftover[/] of twin [bold]{p.name}[/]: {p.kind} pid {p.pid}, with no "
            f"running twin; `remedy twin down --name {p.name}` removes it"
        )
    if not rows:
        console.print("no twins; start one with `remedy twin up`")
        return
    # at 80 columns an address is never split: the state directory (its keys, its
    # known_hosts) is the same for every twin, under one root, said below the table
    # (a light box, no edges: six columns fit 80 with names up to 11 characters unfolded)
    table = Table(
        "name", "suite", "role", "state", "ssh", "server",
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
    )  # fmt: skip
    for column in table.columns:
        column.overflow = "fold"
    for column in table.columns[1:]:
        column.no_wrap = True
    for r in rows:
        table.add_row(
            r["name"],
            r["suite"],
            r["role"],
            "up" if r["running"] else "[red]down[/]",
            f"127.0.0.1:{r['ssh_port']}",
            r["server_url"] or "none",
        )
    console.print(table, width=80)
    console.print(
        f"each twin's state (keys, known_hosts, overlay): {machine.state_root()}/NAME; "
        "`remedy twin up --name NAME` prints its ssh command",
        width=80,
        markup=False,
        highlight=False,
    )


@twin.command(short_help="The hosts and data inventory/twin.py reads, as JSON.")
@click.option("--name", default=None, help="Only this twin (default: every twin that is up).")
def inventory(name):
    """Print, as JSON, the hosts and data that inventory/twin.py reads."""
    hosts = machine.inventory_hosts()
    if name is not None:
        machine.load(name)  # a clear error for an unknown name
        hosts = [h for h in hosts if h[0] == name]
    click.echo(json.dumps([{"name": n, "data": d} for n, d in hosts], indent=2))
