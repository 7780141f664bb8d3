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


def test_a_converge_the_fleet_lock_refuses_writes_the_refusal_and_keeps_the_last_read(
    make_twin, tmp_path, monkeypatch
):
    """Issue 45: a converge refused by the fleet lock (exit 5) wrote no metrics. Now it
    writes what it knows, per host of the run: state locked, exit code 5, the run
    failed, and when; it read nothing of the host, so every series that a read found
    (here the twin's volatile parser) stays byte for byte: no alert resolves because
    another run held the lock."""
    from prometheus_client.parser import text_string_to_metric_families

    from remedy import lock
    from remedy.metrics import RUN_SERIES

    twin = make_twin(with_emergency_override=True)  # volatile: the /run override holds it
    inventory = fleet_inventory(tmp_path / "fleet.py", [twin])
    locks = tmp_path / "lock"
    locks.mkdir()
    monkeypatch.setenv("REMEDY_LOCK_DIR", str(locks))
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
           "XDG_STATE_HOME": str(tmp_path / "state")}  # fmt: skip
    prom = tmp_path / "textfile" / "remedy.prom"
    prom.parent.mkdir()

    def converge(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["remedy", "converge", inventory, "--textfile", str(prom),
                               "--interval", "10min", *argv], capture_output=True, text=True,
                              cwd=PROJECT, env=env, timeout=900)  # fmt: skip

    def samples() -> dict:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(prom.read_text())
                for s in f.samples if s.labels.get("host") == twin.name}  # fmt: skip

    def read_series() -> list[str]:
        lines = [x for x in prom.read_text().splitlines() if f'host="{twin.name}"' in x]
        return [x for x in lines if x.split("{")[0] not in RUN_SERIES]

    checked = converge("--check")
    assert checked.returncode == 3, checked.stdout + checked.stderr
    found, first = read_series(), samples()
    parser = ("remedy_setting_volatile", (("host", twin.name), ("setting", "tool_call_parser")))
    volatile = ("remedy_host_state", (("host", twin.name), ("state", "volatile")))
    assert first[parser] == 1 and first[volatile] == 1

    held = lock.acquire_fleet({twin.name: twin.inventory_data()}, 0, "pid 1 (the test)")
    try:
        refused = converge("--wait", "0", "--json")
    finally:
        held.release()
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "another run holds the fleet lock" in json.loads(refused.stdout)["hosts"][0]["verdict"]
    after = samples()
    assert read_series() == found  # what the read found: byte for byte
    assert after[parser] == 1  # the alert on it stays
    assert after[("remedy_host_state", (("host", twin.name), ("state", "locked")))] == 1
    assert after[volatile] == 0
    assert after[("remedy_host_exit_code", (("host", twin.name),))] == 5
    assert after[("remedy_last_run_success", (("host", twin.name),))] == 0
    stamp = ("remedy_last_run_timestamp_seconds", (("host", twin.name),))
    assert after[stamp] > first[stamp]
