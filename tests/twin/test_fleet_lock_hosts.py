"""Issue 43 B on twins: the restart budget belongs to the hosts, whatever file names them.

Two runs over the same twins, one through the inventory and one through a copy (or a
hard link) of it, each with --limit on another twin and max_restarting 1: before, each
file had a fleet lock of its own, so both restarted at once. Now the second run waits
for the first (or, with --wait 0, exits 5 and changes nothing), and the twins' own
journals show one restart window at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from tests.conftest import PROJECT, unit_props
from tests.twin.test_rollout import fleet_inventory, most_at_once, restart_window

pytestmark = pytest.mark.twin


def start(inventory: str, limit: str, wait_s: int, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        ["remedy", "converge", inventory, "--json", "--restart", "now", "--limit", limit,
         "--wait", str(wait_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT, env=env,
    )  # fmt: skip


def ended(proc: subprocess.Popen) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=1500)
    try:
        return proc.returncode, json.loads(out), err
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {err[-3000:]}") from None


def test_a_copy_of_the_inventory_shares_the_hosts_restart_budget(make_twin, tmp_path):
    one, two = make_twin(), make_twin()
    inventory = fleet_inventory(tmp_path / "fleet.py", [one, two], max_restarting=1)
    copy = tmp_path / "copy" / "fleet.py"
    copy.parent.mkdir()
    shutil.copy(inventory, copy)
    link = tmp_path / "link.py"
    os.link(inventory, link)
    locks = tmp_path / "lock"
    locks.mkdir()
    env = {**os.environ, "REMEDY_LOCK_DIR": str(locks),
           "REMEDY_AUDIT_LOG": str(tmp_path / "audit.jsonl")}  # fmt: skip
    pid_two = unit_props(two)["MainPID"]
    since = time.time()

    first = start(inventory, one.name, 30, env)
    deadline = time.monotonic() + 120
    while not list(locks.glob("*.holder")):  # the first run holds the fleet's lock
        assert first.poll() is None, ended(first)
        assert time.monotonic() < deadline, "the first run never took the fleet lock"
        time.sleep(0.2)

    # the hard link, --wait 0: exit 5, naming the holder, and the other twin untouched
    code, doc, _err = ended(start(str(link), two.name, 0, env))
    assert code == 5, doc
    (said,) = [h["verdict"] for h in doc["hosts"]]
    assert "another run holds the fleet lock" in said and f"pid {first.pid} " in said, said
    assert unit_props(two)["MainPID"] == pid_two

    # the copy waits for the first run, then restarts its host
    second = start(str(copy), two.name, 900, env)
    code_first, doc_first, err_first = ended(first)
    code_second, doc_second, err_second = ended(second)
    assert code_first == 0, err_first[-3000:]
    assert code_second == 0, err_second[-3000:]
    windows = {t.name: restart_window(t, since) for t in (one, two)}
    assert None not in windows.values(), windows  # each run restarted its twin
    assert most_at_once(windows.values()) == 1, windows  # never both at once
    assert windows[one.name][1] < windows[two.name][0], windows  # the copy's run waited
