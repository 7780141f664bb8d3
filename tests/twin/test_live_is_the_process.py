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
