"""Read a pyinfra inventory file without connecting to anything.

An inventory is a Python file whose module-level lists are groups of hosts;
a host is ``"name"`` or ``("name", {data})``, and a group may be written
``([hosts], {group data})``. Names starting with ``_`` are ignored, as pyinfra
does. Group data files next to the inventory (``group_data/all.py``,
``group_data/<group>.py``) are merged under each host's own data, with
pyinfra's precedence: host data > group data > ``all``.

The file is executed (``runpy``), exactly as pyinfra would execute it; no
connector is involved, so nothing is contacted.
"""

from __future__ import annotations

import runpy
import types
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


def _run(path: Path) -> dict[str, Any]:
    try:
        return runpy.run_path(str(path), run_name="__remedy_inventory__")
    except FileNotFoundError as exc:
        raise ConfigError(f"inventory {path} does not exist") from exc
    except Exception as exc:  # the file is user code: report, don't crash
        raise ConfigError(
            f"inventory {path} could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc


def _group_data_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    return {
        key: value
        for key, value in _run(path).items()
        if not key.startswith("_")
        and not isinstance(value, types.ModuleType | types.FunctionType | type)
    }


def _group_members(name: str, value: Any, path: Path) -> tuple[list[Any], dict[str, Any]] | None:
    """``(hosts, group data)`` if the module-level ``value`` is a host group."""
    hosts, data = value, {}
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], list | tuple)
        and isinstance(value[1], dict)
    ):
        hosts, data = value
    elif not isinstance(value, list | tuple):
        return None
    if not all(isinstance(item, str | tuple) for item in hosts):
        return None
    for item in hosts:
        if isinstance(item, tuple) and not (
            len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], dict)
        ):
            raise ConfigError(
                f"inventory {path}: group {name!r} has {item!r}; "
                'a host is "name" or ("name", {data})'
            )
    return list(hosts), dict(data)


def load_inventory(path: Path | str) -> list[InventoryHost]:
    """The hosts of an inventory file, in file order, each with its merged data.

    A host listed in several groups appears once, in all its groups.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"inventory {path} is not a file; pass an inventory file such as "
            "inventory/production.py"
        )
    module = _run(path)
    group_data_dir = path.parent / "group_data"
    all_data = _group_data_file(group_data_dir / "all.py")

    order: list[str] = []
    host_data: dict[str, dict[str, Any]] = {}
    host_groups: dict[str, list[str]] = {}
    group_layers: dict[str, list[dict[str, Any]]] = {}
    for name, value in module.items():
        if name.startswith("_"):
            continue
        members = _group_members(name, value, path)
        if members is None:
            continue
        hosts, data = members
        layer = {**_group_data_file(group_data_dir / f"{name}.py"), **data}
        for item in hosts:
            host, own = (item, {}) if isinstance(item, str) else item
            if host not in host_data:
                order.append(host)
                host_data[host] = {}
                host_groups[host] = []
                group_layers[host] = []
            host_data[host].update(own)
            host_groups[host].append(name)
            group_layers[host].append(layer)

    result = []
    for host in order:
        merged = dict(all_data)
        for layer in group_layers[host]:
            merged.update(layer)
        merged.update(host_data[host])
        result.append(InventoryHost(host, merged, tuple(host_groups[host])))
    return result


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
