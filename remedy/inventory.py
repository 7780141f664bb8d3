"""Read a pyinfra inventory file without connecting to anything.

pyinfra's own loader (``pyinfra_cli.inventory.make_inventory``) runs the file
and merges group data (``group_data/all.py``, ``group_data/<group>.py``) with
pyinfra's precedence; this only names what the runbook commands need: each
host's merged data and groups, and the inventory's environment. No connector
is involved, so nothing is contacted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from remedy.errors import ConfigError

#: Host data key saying which environment a host belongs to.
ENVIRONMENT_KEY = "remedy_environment"
PRODUCTION = "production"


@dataclass
class InventoryHost:
    name: str
    data: dict[str, Any]
    groups: tuple[str, ...] = field(default=())


def load_inventory(path: Path | str) -> list[InventoryHost]:
    """The hosts of an inventory file, in file order, each with its merged data."""
    from pyinfra.api import State
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra.context import ctx_state
    from pyinfra_cli.inventory import make_inventory

    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"inventory {path} is not a file; pass an inventory file such as "
            "inventory/production.py"
        )
    state = State(check_for_changes=False)
    with ctx_state.use(state):  # the inventory file runs with a state in context
        try:
            inventory = make_inventory(str(path), cwd=str(path.parent))
        except PyinfraError as exc:
            raise ConfigError(f"inventory {path}: {exc}") from None
        except Exception as exc:  # the file is user code: report, don't crash
            # pyinfra wraps what the file raised (UnexpectedExternalError(exc, path))
            cause = next((a for a in exc.args if isinstance(a, BaseException)), exc)
            hint = (
                '; a host is "name" or ("name", {data}), a group a list of hosts or '
                "([hosts], {group data})"
                if isinstance(cause, TypeError | ValueError)
                else ""
            )
            raise ConfigError(
                f"inventory {path} could not be loaded: {type(cause).__name__}: {cause}{hint}"
            ) from exc
        return [
            InventoryHost(
                host.name,
                {k: v for k, v in host.data.dict().items() if not k.startswith("_")},
                tuple(g for g in host.groups if g != "all"),
            )
            for host in inventory
        ]


def checked_hosts(hosts: list, argv: list[str] | None = None) -> list:
    """An inventory file's hosts, checked before pyinfra connects
    (``remedy.core.config.host_data.checked_hosts``), with remedy's connect guard installed: a
    host that cannot be reached (a missing ssh_key included) fails alone, in one line,
    and is audited (``remedy.connect``)."""
    from remedy import connect
    from remedy.core.config import host_data

    connect.guard()
    checked = host_data.checked_hosts(hosts, argv)
    _check_trusted_signers(checked, argv)
    return checked


def _check_trusted_signers(hosts: list, argv: list[str] | None) -> None:
    """Each host's trusted_signers file, on this machine, must be there and readable as
    git's allowed-signers format: bad input fails before anything connects."""
    import sys

    from pyinfra.api.exceptions import InventoryError

    from remedy.core.config import host_data
    from remedy.core.programs import signers

    extra = host_data.cli_data(sys.argv if argv is None else argv)
    for entry in hosts:
        name, data = (entry, {}) if isinstance(entry, str) else entry
        path = {**data, **extra}.get("trusted_signers")
        if not path:
            continue
        try:
            signers.check_allowed_signers(Path(path).read_text(), path)
        except OSError as exc:
            raise InventoryError(
                f"host {name}: data key 'trusted_signers' {path}: {exc.strerror}; name an "
                "allowed-signers file on this machine"
            ) from None
        except ConfigError as exc:
            raise InventoryError(f"host {name}: {exc}") from None


def find_host(hosts: list[InventoryHost], name: str) -> InventoryHost:
    """The host called ``name``; ConfigError listing the hosts there are."""
    for host in hosts:
        if host.name == name:
            return host
    known = ", ".join(h.name for h in hosts) or "none"
    raise ConfigError(f"no host {name!r} in the inventory; its hosts: {known}")


def environment_of(hosts: list[InventoryHost]) -> str | None:
    """The ``remedy_environment`` of the hosts ("production", "twin", ...).

    Any production host makes the whole inventory production. Hosts without
    the key do not count; None when no host says. Two different
    non-production values are a ConfigError: one inventory, one environment.
    """
    values = {str(host.data[ENVIRONMENT_KEY]) for host in hosts if host.data.get(ENVIRONMENT_KEY)}
    if PRODUCTION in values:
        return PRODUCTION
    if len(values) > 1:
        detail = ", ".join(
            f"{h.name}={h.data.get(ENVIRONMENT_KEY)}" for h in hosts if h.data.get(ENVIRONMENT_KEY)
        )
        raise ConfigError(
            f"the inventory mixes environments ({detail}); "
            f"give every host the same {ENVIRONMENT_KEY}"
        )
    return next(iter(values), None)


def is_production(hosts: list[InventoryHost]) -> bool:
    return environment_of(hosts) == PRODUCTION
