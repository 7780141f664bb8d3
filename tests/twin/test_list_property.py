"""Issue 44 item 6 on a twin: a list-valued unit property added, the module's own kept.

NixOS writes one [Service] section per unit (nixos/lib/systemd-lib.nix serviceToUnit),
and serviceConfig.NAME merges as nixos/lib/systemd-unit-options.nix unitOption does: the
highest-priority definitions only, lists concatenated. remedy's file forced
(lib.mkForce) ``EnvironmentFile``, which dropped the serving module's own
``EnvironmentFile=-/etc/tenstorrent-serving/env``; the twin's stand-in appended a
second [Service] section and kept both. A setting file that adds an EnvironmentFile
now adds it to the module's list: the built unit has one [Service] with both, and the
server reads both files. When the setting's value changes, the proof does not call
remedy's own earlier item a drop; status reads every item the process's unit
has. The setting file goes to the test's own REMEDY_SETTINGS_DIR.
"""

from __future__ import annotations

import subprocess

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, remedy_json, twin_inventory

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
EXTRA = "/etc/tenstorrent-serving/extra.env"
EXTRA2 = "/etc/tenstorrent-serving/extra2.env"
SETTING = (
    "issue: tt-stack#72\nkind: unit-property\nname: EnvironmentFile\n"
    f"value: {EXTRA}\nurgency: now\n"
)
REMEDY_NIX = f"{fixtures.NIXOS_DIR}/hosts/{fixtures.FLAKE_HOST}/remedy.nix"


def server_environ(twin) -> dict[str, str]:
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    raw = twin.exec(["sh", "-c", f"tr '\\0' '\\n' < /proc/{pid}/environ"]).stdout
    return dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)


def test_an_added_environment_file_keeps_the_modules_own(make_twin, tmp_path, monkeypatch):
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "extra-env-file.yaml").write_text(SETTING)
    monkeypatch.setenv("REMEDY_SETTINGS_DIR", str(settings))
    twin = make_twin()
    twin.exec(["mkdir", "-p", fixtures.ENV_FILE.rsplit("/", 1)[0]])
    twin.exec(["tee", fixtures.ENV_FILE], input="HF_HOME=/var/lib/hf\n")
    twin.exec(["tee", EXTRA], input="VLLM_EXTRA=1\n")
    # the serving module's own EnvironmentFile=-/etc/tenstorrent-serving/env (its
    # serviceConfig, a plain definition); its package compiles on the host
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.env_file_commit())
    inventory = twin_inventory(tmp_path / "inventory.py", twin, allow_local_build=True)
    proc = subprocess.run(
        ["remedy", "converge", str(inventory), "--restart", "now"],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]

    # the built unit: one [Service] section, the module's item and the added one
    unit = twin.exec(["cat", f"/run/current-system/etc/systemd/system/{UNIT}"]).stdout
    assert unit.count("[Service]") == 1, unit
    lines = unit.splitlines()
    assert f"EnvironmentFile=-{fixtures.ENV_FILE}" in lines, unit
    assert f"EnvironmentFile={EXTRA}" in lines, unit
    # remedy's file adds its item to the module's list: a plain list, never forced
    managed = twin.exec(["cat", REMEDY_NIX]).stdout
    line = f'serviceConfig.EnvironmentFile = [ "{EXTRA}" ];'
    assert any(x.strip().endswith(line) for x in managed.splitlines()), managed
    # and the server reads both files
    env = server_environ(twin)
    assert env.get("HF_HOME") == "/var/lib/hf" and env.get("VLLM_EXTRA") == "1", env
    # remedy's own item changes (extra.env to extra2.env): the proof knows extra.env was
    # remedy's earlier item (its file as the run found it), so the build that replaces
    # it is no drop; the module's own item stays
    twin.exec(["tee", EXTRA2], input="VLLM_EXTRA=2\n")
    (settings / "extra-env-file.yaml").write_text(SETTING.replace(EXTRA, EXTRA2))
    again = subprocess.run(
        ["remedy", "converge", str(inventory), "--restart", "now"],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
    )  # fmt: skip
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-4000:]
    assert "it drops" not in out, out[-4000:]
    lines = twin.exec(["cat", f"/run/current-system/etc/systemd/system/{UNIT}"]).stdout
    lines = lines.splitlines()
    assert f"EnvironmentFile=-{fixtures.ENV_FILE}" in lines, lines
    assert f"EnvironmentFile={EXTRA2}" in lines and f"EnvironmentFile={EXTRA}" not in lines
    env = server_environ(twin)
    assert env.get("HF_HOME") == "/var/lib/hf" and env.get("VLLM_EXTRA") == "2", env

    code, doc = remedy_json("status", str(inventory))
    (host,) = doc["hosts"]
    assert code == 0, (host["verdict"], host["problems"], host["unmanaged_volatile"])
    # status reads every item the process's unit has, in order (not the last only)
    (setting,) = [x for x in host["settings"] if x["key"] == "EnvironmentFile"]
    both = f"-{fixtures.ENV_FILE}, {EXTRA2}"
    assert (setting["live"], setting["next_boot"], setting["state"]) == (
        both, both, "in sync"), setting  # fmt: skip
