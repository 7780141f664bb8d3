"""Issue 43 E7 on a twin: live means what the serving process has.

After a postponed restart, `status` showed a data setting live at its new value (4)
while the running process had the old one (3); after a /run drop-in went with no
restart, it showed the variable unset while the process still had it. Both were the
unit's loaded configuration, not the process: live now reads the process's environment
(/proc/PID/environ) and argv. The setting file goes to a directory of the test's own
(REMEDY_SETTINGS_DIR).
"""

from __future__ import annotations

import pytest

from remedy.twin import machine
from tests.conftest import remedy_json, twin_inventory

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
DROPIN = f"/run/systemd/system/{UNIT}.d/zz-a.conf"
VLLM_A = "issue: tt-stack#70\nkind: environment\nname: VLLM_A\nvalue: '4'\nurgency: window\n"


def server_environ(twin) -> dict[str, str]:
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    raw = twin.exec(["sh", "-c", f"tr '\\0' '\\n' < /proc/{pid}/environ"]).stdout
    return dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)


def live_of(inventory, key: str) -> tuple[str, str]:
    """KEY's live value and state as `remedy status --json` says them."""
    _code, doc = remedy_json("status", str(inventory))
    (host,) = doc["hosts"]
    (found,) = [s for s in host["settings"] if s["key"] == key]
    return found["live"], found["state"]


def test_status_says_what_the_process_has_not_the_units_loaded_config(
    make_twin, tmp_path, monkeypatch
):
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "vllm-a.yaml").write_text(VLLM_A)
    monkeypatch.setenv("REMEDY_SETTINGS_DIR", str(settings))
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inventory.py", twin)
    twin.exec(["mkdir", "-p", DROPIN.rsplit("/", 1)[0]])
    twin.exec(["tee", DROPIN], input="[Service]\nEnvironment=VLLM_A=3\n")
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    assert server_environ(twin)["VLLM_A"] == "3"
    assert live_of(inventory, "VLLM_A") == ("3", "drifted")

    # the new value in the unit, its restart postponed: the process still has 3
    twin.exec(["tee", DROPIN], input="[Service]\nEnvironment=VLLM_A=4\n")
    twin.exec(["systemctl", "daemon-reload"])
    environment = twin.exec(["systemctl", "show", "-P", "Environment", UNIT]).stdout
    assert "VLLM_A=4" in environment, environment  # what the unit would start with
    assert server_environ(twin)["VLLM_A"] == "3"
    assert live_of(inventory, "VLLM_A") == ("3", "drifted")
    _code, doc = remedy_json("status", str(inventory))
    (row,) = [r for r in doc["hosts"][0]["rows"] if r["label"] == "VLLM_A"]
    assert row["now"] == "3" and "now:\nthe process; a restart gives 4" in row["where"], row

    # the drop-in gone with no restart: the process still has 3, not unset
    twin.exec(["rm", DROPIN])
    twin.exec(["systemctl", "daemon-reload"])
    assert server_environ(twin)["VLLM_A"] == "3"
    assert live_of(inventory, "VLLM_A") == ("3", "drifted")

    # a restart: the process has what the unit gives, none
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    assert "VLLM_A" not in server_environ(twin)
    assert live_of(inventory, "VLLM_A") == ("unset", "drifted")


LIMIT = "issue: tt-stack#73\nkind: unit-property\nname: LimitNOFILE\nvalue: 4096\nurgency: window\n"
LIMIT_DROPIN = f"/run/systemd/system/{UNIT}.d/zz-limit.conf"


def server_nofile(twin) -> str:
    """The serving process's hard open-files limit, as its /proc/PID/limits says."""
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    rows = twin.exec(["cat", f"/proc/{pid}/limits"]).stdout.splitlines()
    (row,) = [r for r in rows if r.startswith("Max open files")]
    return row[25:].split()[1]


def test_a_limit_is_what_the_process_has_not_the_units_loaded_config(
    make_twin, tmp_path, monkeypatch
):
    """The other half of E7: unit properties were read from the unit's loaded config
    (systemctl show); a LimitNOFILE changed with no restart showed the new value live
    while the process kept the old one."""
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "nofile.yaml").write_text(LIMIT)
    monkeypatch.setenv("REMEDY_SETTINGS_DIR", str(settings))
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inventory.py", twin)
    twin.exec(["mkdir", "-p", LIMIT_DROPIN.rsplit("/", 1)[0]])
    twin.exec(["tee", LIMIT_DROPIN], input="[Service]\nLimitNOFILE=3000\n")
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    assert server_nofile(twin) == "3000"
    assert live_of(inventory, "LimitNOFILE") == ("3000", "drifted")

    # the desired value in the unit, its restart not done: the process still has 3000
    twin.exec(["tee", LIMIT_DROPIN], input="[Service]\nLimitNOFILE=4096\n")
    twin.exec(["systemctl", "daemon-reload"])
    shown = twin.exec(["systemctl", "show", "-P", "LimitNOFILE", UNIT]).stdout.strip()
    assert shown == "4096"  # what the unit would start with
    assert server_nofile(twin) == "3000"
    assert live_of(inventory, "LimitNOFILE") == ("3000", "drifted")
    _code, doc = remedy_json("status", str(inventory))
    (row,) = [r for r in doc["hosts"][0]["rows"] if r["label"] == "LimitNOFILE"]
    assert row["now"] == "3000" and "now:\nthe process; a restart gives 4096" in row["where"], row

    # a restart: the process has what the unit gives (live; a reboot drops the /run
    # drop-in, so it is not in sync)
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    assert server_nofile(twin) == "4096"
    assert live_of(inventory, "LimitNOFILE")[0] == "4096"
