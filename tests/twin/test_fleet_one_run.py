"""Issue 34 on twins: `remedy converge` runs the fleet in one pyinfra run, in its own
process, and reads each host once; a host whose lock another run holds fails alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import PROJECT, fleet_failure

pytestmark = pytest.mark.twin

# `remedy converge` in this process's Python, counting the HostSnapshot reads of each
# host that this process makes (the deploy's and the report's alike).
COUNTED = """
import atexit, collections, faulthandler, json, sys
faulthandler.dump_traceback_later(840)  # a hung run says where, before the test's cap
from pyinfra.api.host import Host
import facts.serving
reads = collections.Counter()
get_fact = Host.get_fact
def counted(self, fact, *args, **kwargs):
    if fact is facts.serving.HostSnapshot:
        reads[self.name] += 1
    return get_fact(self, fact, *args, **kwargs)
Host.get_fact = counted
atexit.register(lambda: sys.stderr.write("snapshot reads: " + json.dumps(reads) + "\\n"))
from remedy.cli.main import main
main(sys.argv[1:])
"""


def fleet_inventory(path, twins, **data) -> str:
    hosts = [(t.name, {**t.inventory_data(), **data}) for t in twins]
    path.write_text(f"hosts = {hosts!r}\n")
    return str(path)


def counted_converge(inventory: str, *argv: str, env=None) -> tuple[int, dict, dict]:
    """``remedy converge INVENTORY --json ARGV``: (exit code, document, reads per host)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", COUNTED, "converge", inventory, "--json", *argv],
            capture_output=True, text=True, cwd=PROJECT, timeout=900, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:  # what it said, and where it hung
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        tail = (said or "")[-6000:]
        raise AssertionError(f"the converge did not end in 900s; it said:\n{tail}") from None
    counted = [ln for ln in proc.stderr.splitlines() if ln.startswith("snapshot reads: ")]
    assert counted, proc.stderr[-3000:]
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stderr[-3000:]}") from None
    doc["stderr_tail"] = proc.stderr[-3000:]  # what pyinfra logged, for a failure's message
    return proc.returncode, doc, json.loads(counted[-1].removeprefix("snapshot reads: "))


def test_the_fleet_is_one_run_in_one_process_that_reads_each_host_once(make_twin, tmp_path):
    twins = [make_twin() for _ in range(2)]
    inventory = fleet_inventory(tmp_path / "fleet.py", twins)
    code, doc, reads = counted_converge(inventory, "--restart", "now", "--max-restarting", "2")
    assert code == 0, fleet_failure(doc, twins)
    # every host changed: the deploy's own read, and one after the change for the report
    assert reads == {t.name: 2 for t in twins}, reads
    code, doc, reads = counted_converge(inventory)
    assert code == 0, [h["verdict"] for h in doc["hosts"]]
    assert reads == {t.name: 1 for t in twins}, reads  # nothing to do: the deploy's read
    for host in doc["hosts"]:
        assert host["outcome"].startswith("nothing to do: "), host["outcome"]
        assert host["rollout"]["outcome"] == "unchanged"
        assert {s["state"] for s in host["settings"]} == {"in sync"}


def test_a_host_whose_lock_another_run_holds_fails_alone_and_is_audited(make_twin, tmp_path):
    held, free = make_twin(), make_twin()
    lock = "/run/lock/remedy-tenstorrent-serving.service.lock"
    held.exec(["systemd-run", "--unit", "hold-remedy-lock", "flock", lock, "sleep", "600"])
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    inventory = fleet_inventory(tmp_path / "fleet.py", [held, free])
    try:
        code, doc, _reads = counted_converge(inventory, "--wait", "0", "--restart", "now",
                                             env=env)  # fmt: skip
    finally:
        held.exec(["systemctl", "stop", "hold-remedy-lock"], check=False)
    by_host = {h["host"]: h for h in doc["hosts"]}
    assert code == 5, {n: h["verdict"] for n, h in by_host.items()}
    assert by_host[held.name]["exit_code"] == 5
    assert f"holds {lock} (waited 0s)" in by_host[held.name]["verdict"]
    assert by_host[free.name]["exit_code"] == 0, by_host[free.name]["verdict"]
    assert by_host[free.name]["rollout"]["outcome"] == "converged"
    records = {r["host"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert records[held.name]["result"] == "locked"
    assert "another remedy run holds" in records[held.name]["details"]["failed"]
    assert records[free.name]["result"] == "ok"
