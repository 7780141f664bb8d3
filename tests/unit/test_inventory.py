"""Reading pyinfra inventory files without connecting."""

from __future__ import annotations

import textwrap

import pytest

from remedy.errors import ConfigError
from remedy.inventory import (
    InventoryHost,
    environment_of,
    find_host,
    is_production,
    load_inventory,
)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_plain_names_tuples_and_data(tmp_path):
    inventory = write(
        tmp_path / "inventory" / "production.py",
        """\
        import os

        _ssh = {"ssh_user": "root"}
        hosts = [
            "plain.example",
            ("cfx-llm2", {"remedy_environment": "production", "flake_dir": "/etc/nixos", **_ssh}),
        ]
        THRESHOLD = 4
        _private = ["not-a-host"]
        """,
    )
    hosts = load_inventory(inventory)
    # pyinfra also groups every host under the inventory file's name
    assert hosts == [
        InventoryHost("plain.example", {}, ("hosts", "production")),
        InventoryHost(
            "cfx-llm2",
            {"remedy_environment": "production", "flake_dir": "/etc/nixos", "ssh_user": "root"},
            ("hosts", "production"),
        ),
    ]
    assert environment_of(hosts) == "production"
    assert is_production(hosts)


def test_group_data_and_precedence(tmp_path):
    inventory = write(
        tmp_path / "inventory" / "twin.py",
        """\
        twins = (
            ["twin-1", ("twin-2", {"min_mem_available_gb": 1})],
            {"remedy_environment": "twin", "min_mem_available_gb": 2},
        )
        probes = ["twin-1"]
        """,
    )
    write(
        tmp_path / "inventory" / "group_data" / "all.py",
        """\
        min_mem_available_gb = 4
        flake_dir = "/etc/nixos"
        """,
    )
    write(tmp_path / "inventory" / "group_data" / "probes.py", 'probe_url = "http://x"\n')
    one, two = load_inventory(inventory)
    assert one.name == "twin-1" and one.groups == ("twins", "probes", "twin")
    assert one.data == {
        "min_mem_available_gb": 2,
        "flake_dir": "/etc/nixos",
        "remedy_environment": "twin",
        "probe_url": "http://x",
    }
    assert two.data["min_mem_available_gb"] == 1  # host data beats group data
    assert environment_of([one, two]) == "twin"
    assert not is_production([one, two])


def test_environment_of():
    assert environment_of([InventoryHost("a", {})]) is None
    mixed = [
        InventoryHost("a", {"remedy_environment": "twin"}),
        InventoryHost("b", {"remedy_environment": "production"}),
    ]
    assert environment_of(mixed) == "production"  # any production host makes it production
    with pytest.raises(ConfigError, match="mixes environments"):
        environment_of(
            [
                InventoryHost("a", {"remedy_environment": "twin"}),
                InventoryHost("b", {"remedy_environment": "staging"}),
            ]
        )


def test_find_host_lists_the_hosts(tmp_path):
    hosts = [InventoryHost("a", {}), InventoryHost("b", {})]
    assert find_host(hosts, "b").name == "b"
    with pytest.raises(ConfigError, match="no host 'c' in the inventory; its hosts: a, b"):
        find_host(hosts, "c")


def test_bad_inventories_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="is not a file"):
        load_inventory(tmp_path / "missing.py")
    broken = write(tmp_path / "broken.py", "hosts = [\n")
    with pytest.raises(ConfigError, match="broken.py could not be loaded: SyntaxError"):
        load_inventory(broken)
    raising = write(tmp_path / "raising.py", "raise RuntimeError('no vault')\n")
    with pytest.raises(ConfigError, match="RuntimeError: no vault"):
        load_inventory(raising)
    bad_tuple = write(tmp_path / "bad.py", 'hosts = [("a", "b", "c")]\n')
    with pytest.raises(ConfigError, match=r"bad.py could not be loaded: .*a host is \"name\""):
        load_inventory(bad_tuple)
