"""A pyinfra session outside a deploy: load an inventory, connect, read facts.

Used by reporting commands (``remedy status``). Deploys run under pyinfra's own
CLI and do not use this.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyinfra.api import Config, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_state

from remedy.errors import ConfigError


@contextmanager
def connected(inventory_path: str, limit: list[str] | None = None) -> Iterator[tuple]:
    """Yield (state, hosts, failed): connected hosts and the names that did not connect."""
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
        inventory = make_inventory(str(path), cwd=os.getcwd())
        names = [h.name for h in inventory]
        unknown = [n for n in limit or [] if n not in names]
        if unknown:
            raise ConfigError(
                f"--limit {', '.join(unknown)}: not in {inventory_path} "
                f"(hosts: {', '.join(names) or 'none'})"
            )
        if not names:
            raise ConfigError(f"{inventory_path} has no hosts (for twins: `remedy twin up`)")
        hosts = [h for h in inventory if not limit or h.name in limit]
        state.init(inventory, Config(), initial_limit=hosts)
        state.set_stage(StateStage.Connect)
        connect_all(state)
        failed = [h.name for h in hosts if h in state.failed_hosts or not h.connected]
        try:
            yield state, [h for h in hosts if h.name not in failed], failed
        finally:
            disconnect_all(state)
