"""Issue 44 item 6: a list-valued unit property (EnvironmentFile=) is added to the
serving module's list, never forced over it, and the proof checks the whole list.

remedy's file is rendered from setting files; the proof runs remedy/host/
system_lacks.sh with the machine's sh on unit files written here (the running
system's unit stands in a directory of the test's own)."""

from __future__ import annotations

import subprocess

import pytest

from remedy import host
from remedy.core.config import desired
from tests.unit.test_data_settings import host as host_data
from tests.unit.test_data_settings import managed  # noqa: F401

EXTRA = "issue: tt-stack#72\nkind: unit-property\nname: EnvironmentFile\n"
UNIT = "tenstorrent-serving.service"


def test_a_list_property_is_added_to_the_list_and_proven_whole(tmp_path, managed):  # noqa: F811
    managed(
        tmp_path,
        extra=EXTRA + "value: /etc/tt/extra.env\nurgency: now\n",
        limit="issue: tt-stack#63\nkind: unit-property\nname: LimitNOFILE\nvalue: 65536\n"
        "urgency: window\n",
    )
    s = host_data()
    text = desired.managed_nix(s, desired.ALL)
    service = "  systemd.services.tenstorrent-serving.serviceConfig"
    # a plain list at the module's priority: NixOS concatenates it with the module's
    assert f'{service}.EnvironmentFile = [ "/etc/tt/extra.env" ];' in text.splitlines()
    # a single-valued one is still forced
    assert f"{service}.LimitNOFILE = lib.mkForce 65536;" in text.splitlines()
    items = desired.proof_items(s, ("EnvironmentFile", "LimitNOFILE"))
    assert "prove:plist\tEnvironmentFile\tEnvironmentFile=/etc/tt/extra.env" in items, items
    assert "prove:prop\tLimitNOFILE\tLimitNOFILE=65536" in items, items


def lacks(tmp_path, was: str, built: str) -> str:
    """system_lacks of a built unit BUILT, the running system's being WAS."""
    top = tmp_path / "top"
    (top / "etc/systemd/system").mkdir(parents=True)
    (top / "etc/systemd/system" / UNIT).write_text(built)
    current = tmp_path / "current"
    (current / "etc/systemd/system").mkdir(parents=True)
    (current / "etc/systemd/system" / UNIT).write_text(was)
    # the start script is not read for a property (lib.sh's finders, stubbed)
    program = "exec_path() { :; }\nflags_script() { :; }\n" + host.text("system_lacks.sh").replace(
        "/run/current-system", str(current)
    )
    proofs = "plist\tEnvironmentFile\tEnvironmentFile=/etc/tt/extra.env"
    script = program + '\nsystem_lacks "$1" "$2" "$3"\n'
    done = subprocess.run(["sh", "-c", script, "sh", str(top), UNIT, proofs],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


MODULE_S = "EnvironmentFile=-/etc/tenstorrent-serving/env"


def test_the_proof_wants_the_item_and_every_item_the_running_unit_has(tmp_path):
    was = f"[Service]\n{MODULE_S}\nExecStart=/x\n"
    both = f"[Service]\n{MODULE_S}\nEnvironmentFile=/etc/tt/extra.env\nExecStart=/x\n"
    assert lacks(tmp_path / "a", was, both) == ""
    # a mkForce'd list: the module's own item is gone
    forced = "[Service]\nEnvironmentFile=/etc/tt/extra.env\nExecStart=/x\n"
    assert lacks(tmp_path / "b", was, forced) == f"EnvironmentFile (it drops {MODULE_S})"
    # the wanted item is not in
    assert lacks(tmp_path / "c", was, was) == "EnvironmentFile"


def test_adopting_a_list_item_adds_it_and_a_reset_of_the_list_is_refused():
    from remedy.core.config import adopt
    from tests.unit.test_data_settings import snapshot, with_dropin

    item = "[Service]\nEnvironmentFile=/etc/tt/extra.env\n"
    a = adopt.adoption(with_dropin(snapshot("runtime_debug"), item), host_data(),
                       "EnvironmentFile=/etc/tt/extra.env", "t#1", "window", "h")  # fmt: skip
    assert a.setting.is_list and a.setting.nix_value("h") == '[ "/etc/tt/extra.env" ]'
    # a drop-in that empties the list first replaces the module's items: refused
    reset = "[Service]\nEnvironmentFile=\nEnvironmentFile=/etc/tt/extra.env\n"
    with pytest.raises(adopt.AdoptRefused, match="resets EnvironmentFile= before") as refused:
        adopt.adoption(with_dropin(snapshot("runtime_debug"), reset), host_data(),
                       "EnvironmentFile=/etc/tt/extra.env", "t#1", "window", "h")  # fmt: skip
    assert "drop the module's own EnvironmentFile" in str(refused.value)
