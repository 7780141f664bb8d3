"""``remedy settings check``: every managed setting file, and optionally each host's view.

Without an inventory it checks the files alone (CI runs it): the schema, each kind's
name and value, one setting for one thing. With ``--inventory`` it also asks each
host's configuration whether it takes remedy's managed file as the settings write
it (one ``nix eval`` per host, as the checkout's owner): an option path the host does
not declare is refused with NixOS's own message, naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from remedy.console import console, err_console
from remedy.core.config import data_settings as data
from remedy.errors import EXIT_ERROR, EXIT_OK

# The settings directory, for every command that reads or writes setting files.
dir_option = click.option(
    "--dir",
    "where",
    type=click.Path(file_okay=False, path_type=Path),
    help="The settings directory [default: $REMEDY_SETTINGS_DIR, else the project's settings/].",
)


@click.group()
def settings():
    """Check the managed settings of settings/ (one YAML file each)."""


@settings.command("check", short_help="Check every setting file (and each host's options).")
@dir_option
@click.option(
    "--inventory",
    help="Also evaluate each host's configuration with remedy's file as the settings write "
    "it (one nix eval per host): an option path it does not declare is a problem.",
)
@click.option("--limit", multiple=True, help="With --inventory: only this host (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def check(where: Path | None, inventory: str | None, limit, as_json: bool):
    """Each problem is printed as FILE[:LINE]: FIELD: problem. Exit 1 on any."""
    report = data.check(where)
    hosts: dict[str, str] = {}
    if inventory and not report.problems:
        report.problems += _on_hosts(inventory, list(limit) or None, report.settings, hosts)
    if as_json:
        doc = {
            "ok": not report.problems,
            "settings": [s.key for s in report.settings],
            "files": report.files,
            "problems": [p.to_dict() for p in report.problems],
            "hosts": hosts,
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        for line in [*map(str, report.problems), *(f"{n}: {s}" for n, s in hosts.items())]:
            console.print(line, width=80, markup=False, highlight=False)
        if not report.problems:
            console.print(f"{len(report.settings)} settings OK", markup=False)
        else:
            err_console.print(f"[bold red]{len(report.problems)} problem(s)[/]")
    raise SystemExit(EXIT_ERROR if report.problems else EXIT_OK)


def _on_hosts(inventory: str, limit, found, said: dict[str, str]) -> list[data.Problem]:
    """Each host's evaluation of remedy's file with FOUND (the data settings): the
    problems of the files whose option path a host does not declare; SAID gets what each
    host answered."""
    from facts.serving import HostSnapshot
    from facts.settings import ManagedFileEvaluated
    from remedy import session
    from remedy.core.config import desired
    from remedy.core.config import host_data as settings_mod
    from remedy.core.readings import memory as mem

    desired.use(tuple(found))
    problems: list[data.Problem] = []
    with session.connected(inventory, limit) as (_state, hosts, failed):
        for name, why in failed.items():
            problems.append(data.Problem(inventory, None, f"{name}: could not connect: {why}"))
        for host in hosts:
            s = settings_mod.from_host_data(host.name, host.data)
            if s.build_host != "serving":  # no nix evaluates on a host with a builder
                said[host.name] = (
                    f"not evaluated: its builder {s.build_host} builds (a converge proves "
                    "every setting there, before anything is copied)"
                )
                continue
            snap = host.get_fact(HostSnapshot, **s.snapshot_kwargs())
            bound = mem.nix_memory_bound(snap.memory, s.min_mem_available_gb, s.nix_memory_max_gb)
            answer = host.get_fact(
                ManagedFileEvaluated,
                flake_dir=s.flake_dir,
                flake_host=s.flake_host,
                managed_file=s.managed_file,
                text=desired.managed_nix(s, desired.ALL) or "{ }\n",
                owner=snap.checkout.owner,
                home=snap.checkout.home,
                memory_max=bound if snap.tools.systemd_run else None,
                timeout_s=s.nix_timeout_s,
            )
            if answer.ok:
                said[host.name] = "its configuration takes every setting's option path"
                continue
            named = data.evaluation_problems(found, s.unit, answer.error or "")
            said[host.name] = "does not evaluate with them (the problems above say why)"
            problems += named or [data.Problem(inventory, None, f"{host.name}: {answer.error}")]
    return problems
