"""Issue 46 item 1 on a twin: the memory guard on every start of the serving unit.

The twin's leak model (remedy/twin/files/twin-kernel) pins leak-kB per start of the
model-server double in the twin's own /proc/meminfo; only a reboot frees it. With the
knobs set so that the boot's start leaves MemAvailable just below the threshold, a
restart by hand is refused by the guard, once, with no restart loop; a forced start
goes through and is recorded; after a reboot the start goes through again.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from remedy.twin import machine
from tests.conftest import PROJECT, remedy_json, twin_inventory

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
THRESHOLD_KB = 3906250  # min_mem_available_gb 4, rounded up to kB
LEAK_KB = 4404019  # 4.2 GiB, the seed's leak (the twin's default)
LINE = re.compile(
    r"^remedy-memory-guard: (allowed|refused|forced): (.*) "
    r"\[MemAvailable_kB=(\d+) threshold_kB=(\d+)\]$"
)


def converge(inventory, locks) -> tuple[int, dict]:
    import os
    import subprocess

    env = {**os.environ, "REMEDY_LOCK_DIR": str(locks)}
    proc = subprocess.run(
        ["remedy", "converge", str(inventory), "--json"],
        capture_output=True, text=True, cwd=PROJECT, timeout=900, env=env,
    )  # fmt: skip
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stderr[-3000:]}") from None


def guard_lines(twin) -> list[re.Match]:
    """The guard's journal lines of the serving unit, this boot, in order."""
    out = twin.exec(["journalctl", "-q", "-b", "-u", UNIT, "-o", "cat"], check=False).stdout
    return [m for m in map(LINE.match, out.splitlines()) if m]


def props(twin, *names: str) -> dict:
    argv = ["systemctl", "show", UNIT] + [w for n in names for w in ("-p", n)]
    out = twin.exec(argv).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def meminfo_kb(twin) -> int:
    out = twin.exec(["sed", "-n", "s/^MemAvailable: *\\([0-9]*\\) kB/\\1/p", "/proc/meminfo"])
    return int(out.stdout.strip())


@pytest.mark.nix_cli  # the durable path end to end: Nix evaluates remedy's file
def test_the_guard_refuses_a_start_below_the_threshold_once_and_a_reboot_lets_it_start(
    make_twin, tmp_path
):
    twin = make_twin(with_emergency_override=True)  # production's seed state
    inventory = twin_inventory(tmp_path / "inv.py", twin, audit_log=str(tmp_path / "a.jsonl"))

    # a converge from the seed state installs the guard durably (boot pending: exit 6)
    code, doc = converge(inventory, tmp_path)
    assert code == 6, json.dumps(doc)[-3000:]
    unit_file = twin.exec(["cat", f"/nix/var/nix/profiles/system/etc/systemd/system/{UNIT}"]).stdout
    conditions = [ln for ln in unit_file.splitlines() if ln.startswith("ExecCondition=")]
    assert conditions and re.fullmatch(
        r"ExecCondition=\+/bin/sh /nix/store/[a-z0-9]{32}-remedy-memory-guard check 4 "
        + re.escape(UNIT),
        conditions[0],
    ), unit_file
    # and a second converge changes nothing
    code, doc = converge(inventory, tmp_path)
    assert code == 6, json.dumps(doc)[-3000:]
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    assert [op["name"] for op in json.loads(lines[-1])["operations"] if op["changed"]] == []

    # the knobs: the boot's own start leaves MemAvailable 1000 kB below the threshold
    twin.exec(["mkdir", "-p", "/etc/nixos-twin"])
    available = THRESHOLD_KB + LEAK_KB - 1000
    twin.exec(["sh", "-c", f"echo {available} > /etc/nixos-twin/mem-available-kB"])
    machine.reboot(twin.name, progress=lambda _m: None)
    machine.wait_serving(twin)
    (boot,) = guard_lines(twin)  # the boot's start, allowed
    assert boot.group(1) == "allowed" and int(boot.group(3)) == available, boot.group(0)
    assert int(boot.group(4)) == THRESHOLD_KB
    assert meminfo_kb(twin) == THRESHOLD_KB - 1000  # the boot's start pinned its leak
    status = props(twin, "ExecCondition")["ExecCondition"]
    assert "-remedy-memory-guard check 4 " in status

    # a restart by hand: refused by the guard, one line, and no restart loop
    before = props(twin, "NRestarts", "InvocationID")
    twin.exec(["systemctl", "restart", UNIT], check=False)
    restart_s = int(props(twin, "RestartUSec")["RestartUSec"].rstrip("s") or 0)
    window = 3 * max(restart_s, 1) + 2  # three RestartSec and more: room for a loop
    time.sleep(window)
    found = guard_lines(twin)
    assert [m.group(1) for m in found] == ["allowed", "refused"], [m.group(0) for m in found]
    refused = found[-1]
    assert (int(refused.group(3)), int(refused.group(4))) == (THRESHOLD_KB - 1000, THRESHOLD_KB)
    words = refused.group(2)
    assert "MemAvailable 3.9 GB is below min_mem_available_gb 4 GB" in words
    assert "reboot reclaims" in words and "a module reload does not" in words
    assert "systemctl start remedy-memory-guard-force@NAME.service" in words
    after = props(twin, "ActiveState", "Result", "NRestarts", "ConditionResult")
    assert after["ActiveState"] == "inactive" and after["ConditionResult"] == "no", after
    assert after["NRestarts"] == before["NRestarts"], (before, after)  # systemd restarted none
    assert meminfo_kb(twin) == THRESHOLD_KB - 1000  # a refused start pins nothing
    # status says the guard and its last refusal (the figure the journal line gave)
    code, doc = remedy_json("status", str(inventory), "--limit", twin.name)
    said = doc["hosts"][0]["memory_guard"]
    assert said["state"] == "durable", said
    assert said["last_refusal"]["mem_available_kb"] == THRESHOLD_KB - 1000, said
    assert said["last_refusal"]["threshold_kb"] == THRESHOLD_KB
    assert code == 4  # the server does not run: broken, as it is

    # a person starts it anyway, once: recorded with who
    forced = twin.exec(["systemctl", "start", "remedy-memory-guard-force@alice.service"],
                       check=False)  # fmt: skip
    assert forced.returncode == 0, forced.stdout + forced.stderr
    machine.wait_serving(twin)
    last = guard_lines(twin)[-1]
    assert last.group(1) == "forced" and "forced by alice" in last.group(2), last.group(0)
    assert props(twin, "ActiveState")["ActiveState"] == "active"

    # a reboot frees the pinned memory: the boot's start goes through
    machine.reboot(twin.name, progress=lambda _m: None)
    machine.wait_serving(twin)
    (boot,) = guard_lines(twin)
    assert boot.group(1) == "allowed" and int(boot.group(3)) == available, boot.group(0)


def test_the_fallback_dropin_carries_the_guard_and_a_reboot_removes_it(make_twin, tmp_path):
    twin = make_twin()  # fresh: hermes, tool calls unparsed
    inventory = twin_inventory(
        tmp_path / "inv.py", twin, durable=False, audit_log=str(tmp_path / "a.jsonl")
    )
    code, doc = converge(inventory, tmp_path)
    assert code == 3, json.dumps(doc)[-3000:]  # volatile: the /run fallback holds it
    dropin = f"/run/systemd/system/{UNIT}.d/override.conf"
    copy = "/run/tt-serving-override/remedy-memory-guard"
    lines = twin.exec(["cat", dropin]).stdout.splitlines()
    at = lines.index("ExecCondition=")
    assert lines[at + 1] == f"ExecCondition=+/bin/sh {copy} check 4 {UNIT}", lines
    assert twin.exec(["stat", "-c", "%a %U", copy]).stdout.strip() == "755 root"
    live = props(twin, "ExecCondition")["ExecCondition"]
    assert copy in live and "/nix/store/" not in live  # in place of the unit's own
    code, doc = remedy_json("status", str(inventory), "--limit", twin.name)
    assert doc["hosts"][0]["memory_guard"]["state"] == "volatile", doc["hosts"][0]["memory_guard"]

    # the fallback's guard decides a start by hand as the durable one does
    pinned = int(twin.exec(["cat", "/run/twin-kernel/pinned-kB"]).stdout)
    twin.exec(["mkdir", "-p", "/etc/nixos-twin"])
    twin.exec(["sh", "-c", f"echo {pinned + THRESHOLD_KB - 1} > /etc/nixos-twin/mem-available-kB"])
    twin.exec(["/usr/local/lib/nixos-twin/twin-kernel", "meminfo"])
    assert meminfo_kb(twin) == THRESHOLD_KB - 1
    twin.exec(["systemctl", "restart", UNIT], check=False)
    last = guard_lines(twin)[-1]
    assert last.group(1) == "refused" and int(last.group(3)) == THRESHOLD_KB - 1, last.group(0)
    assert props(twin, "ActiveState")["ActiveState"] == "inactive"

    # a reboot wipes /run: the fallback and its guard are gone, and nothing durable
    # carries one (durable=false)
    machine.reboot(twin.name, progress=lambda _m: None)
    assert twin.exec(["test", "-e", copy], check=False).returncode == 1
    code, doc = remedy_json("status", str(inventory), "--limit", twin.name)
    assert doc["hosts"][0]["memory_guard"]["state"] == "missing"
