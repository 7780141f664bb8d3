"""A pyinfra session outside pyinfra's CLI: load an inventory, connect, read facts.

Used by reporting commands (``remedy status``, ``converge --check``) and by the fleet's
one pyinfra run (``remedy.fleet.converge_hosts``), which prepares and runs the deploy
of every host in it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gevent
from pyinfra.api import Config, State
from pyinfra.api.connect import disconnect_all
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_state

from remedy.errors import ConfigError


def _lookups_once() -> None:
    """pyinfra looks up, again and again, what does not change while remedy runs: its
    connectors in the installed packages' entry points for every host it makes (a scan
    of every installed distribution, about 10 ms a host), and the type hints of its
    global arguments for every operation on every host (about 1 ms each). Once each."""
    import functools

    from pyinfra.api import arguments, connectors, facts, inventory

    if not hasattr(connectors.get_all_connectors, "cache_info"):
        connectors.get_all_connectors = functools.cache(connectors.get_all_connectors)
        inventory.get_all_connectors = connectors.get_all_connectors
    if not hasattr(arguments.all_global_arguments, "cache_info"):
        arguments.all_global_arguments = functools.cache(arguments.all_global_arguments)
        facts.all_global_arguments = arguments.all_global_arguments


_lookups_once()


@contextmanager
def connected(
    inventory_path: str,
    limit: list[str] | None = None,
    data: dict | None = None,
    limit_option: str = "--limit",
) -> Iterator[tuple]:
    """Yield (state, hosts, failed): connected hosts, and {name: why} for the others.
    DATA overrides every host's data, as pyinfra's ``--data KEY=VALUE`` does; a LIMIT
    naming a host the inventory lacks is refused naming LIMIT_OPTION, before connecting."""
    from pyinfra_cli.inventory import make_inventory

    path = Path(inventory_path)
    if not path.is_file():
        raise ConfigError(
            f"inventory {inventory_path} does not exist (pyinfra inventories are "
            "files, e.g. inventory/twin.py)"
        )
    logging.getLogger("pyinfra").setLevel(logging.CRITICAL)
    state = State(check_for_changes=False)
    with ctx_state.use(state):  # the inventory file runs with a state in context
        try:
            inventory = make_inventory(str(path), override_data=data, cwd=os.getcwd())
        except PyinfraError as exc:
            raise ConfigError(f"inventory {inventory_path}: {exc}") from None
        names = [h.name for h in inventory]
        unknown = [n for n in limit or [] if n not in names]
        if unknown:
            raise ConfigError(
                f"{limit_option} {', '.join(unknown)}: not in {inventory_path} "
                f"(hosts: {', '.join(names) or 'none'})"
            )
        if not names:
            raise ConfigError(f"{inventory_path} has no hosts (for twins: `remedy twin up`)")
        hosts = serving_hosts(
            inventory_path, [h for h in inventory if not limit or h.name in limit], limit
        )
        state.init(inventory, Config(), initial_limit=hosts)
        state.set_stage(StateStage.Connect)
        failed = _connect(state, hosts)
        try:
            yield state, [h for h in hosts if h.name not in failed], failed
        finally:
            disconnect_all(state)


def serving_hosts(inventory_path: str, hosts: list, limit: list[str] | None) -> list:
    """HOSTS without the builders (remedy_role builder: they serve nothing); a --limit
    that names only builders is refused."""
    serving = [h for h in hosts if h.data.get("remedy_role") != "builder"]
    if not serving:
        named = ", ".join(h.name for h in hosts) or "none"
        raise ConfigError(
            f"{inventory_path}: no serving host to read"
            + (f" (--limit {named}: builders, remedy_role builder)" if limit else "")
        )
    return serving


def _connect(state: State, hosts: list) -> dict[str, str]:
    """Connect to HOSTS in parallel; {name: why} for those that could not be reached.

    Unlike pyinfra's connect_all this keeps each host's reason (the SSH error) and
    does not give up when every host fails: a report must say which host and why.
    """

    def attempt(host):
        try:
            host.connect(show_errors=False, raise_exceptions=True)
        except PyinfraError as exc:  # ConnectError, or e.g. "No such private key file"
            return str(exc) or type(exc).__name__
        return None if host.connected else "not connected"

    greenlets = {host: state.pool.spawn(attempt, host) for host in hosts}
    gevent.joinall(list(greenlets.values()))
    failed = {}
    for host, greenlet in greenlets.items():
        why = greenlet.get()
        if why is None:
            state.activate_host(host)
        else:
            failed[host.name] = why
    return failed
