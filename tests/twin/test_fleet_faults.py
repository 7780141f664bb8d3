"""Issue 43 A on twins: one host or hook never holds the fleet.

A1: a rotation hook that exits but leaves a child running (``sleep 3600 &``) no longer
holds the run: the run ends, and the child is ended with its hook. A2: a twin frozen
mid-run (every process of it stopped with SIGSTOP during its proof's build) is given
up at its deadline and named, and the others are reported; a SIGTERM while a twin is
frozen ends the run within its bound (lifecycle.STOP_BOUND_S). A3: the audit says of
each host what is true of it: a host that finished has its own result, a host given
up or interrupted is recorded as such, in the step it was in, on the path it reached.

The caps below are generous bounds on an event (the run's end), not timings: today's
code never ends these runs at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from remedy import audit
from remedy.twin import machine
from tests.conftest import PROJECT, fleet_failure, twin_inventory

pytestmark = pytest.mark.twin

PROVE = "Prove the build holds the desired state (tt-stack#34)"
BEGIN = "Record where the run begins"
RUN_CAP_S = 1800  # a fleet converge on busy twins ends well within this


def fleet_inventory(path: Path, twins, per_host: dict | None = None, **data) -> str:
    hosts = [(t.name, {**t.inventory_data(), **data, **(per_host or {}).get(t.name, {})})
             for t in twins]  # fmt: skip
    path.write_text(f"hosts = {hosts!r}\n")
    return str(path)


def start_converge(inventory: str, tmp_path: Path, *argv: str) -> subprocess.Popen:
    """``remedy converge INVENTORY --restart now ARGV`` in a session of its own, with this
    test's own audit log and lock directory; its output in files."""
    env = {
        **os.environ,
        "REMEDY_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
        "REMEDY_LOCK_DIR": str(tmp_path / "locks"),
    }
    (tmp_path / "locks").mkdir(exist_ok=True)
    return subprocess.Popen(
        ["remedy", "converge", inventory, "--restart", "now", *argv],
        stdout=open(tmp_path / "stdout", "w"), stderr=open(tmp_path / "stderr", "w"),
        stdin=subprocess.DEVNULL, cwd=PROJECT, env=env, start_new_session=True,
    )  # fmt: skip


def ended(proc: subprocess.Popen, cap_s: float, tmp_path: Path) -> int:
    """PROC's exit code; it not ending within CAP_S fails the test (and ends it)."""
    try:
        return proc.wait(timeout=cap_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        tail = (tmp_path / "stderr").read_text()[-3000:]
        raise AssertionError(f"the run did not end (cap {cap_s:.0f}s); it said:\n{tail}") from None


def records(tmp_path: Path) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in audit.read(tmp_path / "audit.jsonl"):
        out.setdefault(r.host, []).append(r)
    return out


def twin_pids(twin) -> set[int]:
    """Every process of TWIN (its supervisor's cgroups, as remedy.twin.machine made them)."""
    pids = set()
    for top in machine._cgroup_dirs(twin.name):
        for path, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in Path(path, "cgroup.procs").read_text().split()}
    return pids


def signal_twin(twin, signum: int) -> None:
    """SIGNUM to every process of TWIN, again until no new one appears (a fork while
    the list is read)."""
    done: set[int] = set()
    for _ in range(10):
        pids = twin_pids(twin) - done
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        done |= pids


def proving(twin) -> bool:
    """TWIN's proof builds now: a nix of the scratch clone's configuration runs."""
    for pid in twin_pids(twin):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"remedy-bump." in cmdline and b"nixosConfigurations" in cmdline:
                return True
    return False


def freeze_when_proving(twin, proc: subprocess.Popen, cap_s: float = RUN_CAP_S) -> None:
    deadline = time.monotonic() + cap_s
    while not proving(twin):
        # (with a host_deadline_s: the host was given up before it reached its proof)
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before the proof"
        assert time.monotonic() < deadline, f"{twin.name} never started its proof"
        time.sleep(0.2)
    signal_twin(twin, signal.SIGSTOP)


def wait_said(tmp_path: Path, text: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + RUN_CAP_S
    while text not in (tmp_path / "stderr").read_text():
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before: {text}"
        assert time.monotonic() < deadline, f"the run never said: {text}"
        time.sleep(0.5)


def ran(record, name: str) -> bool:
    """Whether the step NAME (its title, without its issue) ran in RECORD's run, and
    succeeded."""
    for op in record.operations:
        if op["name"].split(" (")[0] == name.split(" (")[0]:
            return op.get("executed", True) and op["succeeded"]
    return False


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# -- A1 ---------------------------------------------------------------------------


def test_a_hook_that_leaves_a_child_running_does_not_hold_the_run(make_twin, tmp_path):
    twin = make_twin()
    pids = tmp_path / "children"
    # each hook exits at once, and leaves a child behind that holds its output
    hook = ["sh", "-c", f"sleep 3600 & echo $! >> {pids}; echo rotated $0", "{host}"]
    inventory = fleet_inventory(tmp_path / "fleet.py", [twin], rotation_out=hook,
                                rotation_in=hook)  # fmt: skip
    proc = start_converge(inventory, tmp_path, "--json")
    try:
        code = ended(proc, RUN_CAP_S, tmp_path)
        doc = json.loads((tmp_path / "stdout").read_text())
        assert code == 0, fleet_failure(doc, [twin])
        children = [int(p) for p in pids.read_text().split()]
        assert len(children) == 2, children  # rotation_out, then rotation_in: both ran
        assert not [p for p in children if alive(p)], children  # ended with their hooks
        (record,) = records(tmp_path)[twin.name]
        assert record.result == "ok" and record.path == "durable", record
    finally:
        for p in pids.read_text().split() if pids.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(p), signal.SIGKILL)


# -- A2, A3 -------------------------------------------------------------------------


# The frozen host's deadline: it only has to come after the host reached its proof (a
# few seconds into the run: 2.5 s measured with the machine's load at 5), and it counts
# from the run's start, beside the others' work. The run ends at the later of it and the
# others' end, so each second of it is a second of the test (420 s was 7 min of waiting).
FROZEN_DEADLINE_S = 90


def test_a_frozen_host_is_given_up_at_its_deadline_and_the_others_are_reported(make_twin, tmp_path):
    twins = [make_twin() for _ in range(3)]
    frozen = twins[2]  # not the canary: the others go on without it
    deadline = {frozen.name: {"host_deadline_s": FROZEN_DEADLINE_S}}
    inventory = fleet_inventory(tmp_path / "fleet.py", twins, deadline, max_failures=1)
    proc = start_converge(inventory, tmp_path, "--json")
    try:
        freeze_when_proving(frozen, proc)
        code = ended(proc, RUN_CAP_S, tmp_path)
    finally:
        signal_twin(frozen, signal.SIGCONT)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    doc = json.loads((tmp_path / "stdout").read_text())
    by_host = {h["host"]: h for h in doc["hosts"]}
    assert code == 1, fleet_failure(doc, twins)
    # the frozen host: named, given up at its deadline, during its proof
    why = f"given up at its deadline (host_deadline_s={FROZEN_DEADLINE_S}) during '{PROVE}'"
    assert why in by_host[frozen.name]["verdict"], by_host[frozen.name]["verdict"]
    assert by_host[frozen.name]["rollout"]["outcome"] == "failed"
    # the others: converged and reported from their own reads
    for t in twins[:2]:
        assert by_host[t.name]["exit_code"] == 0, by_host[t.name]["verdict"]
        assert by_host[t.name]["rollout"]["outcome"] == "converged"
    audited = records(tmp_path)
    for t in twins[:2]:
        (record,) = audited[t.name]
        assert record.result == "ok" and record.path == "durable", record
        assert not record.details.get("interrupted"), record.details
    (record,) = audited[frozen.name]
    assert record.result == "given up", record
    assert record.path == "none", record  # it never switched, nor wrote the override
    assert record.details["in_step"] == PROVE and why in record.details["failed"]
    assert ran(record, BEGIN) and not ran(record, PROVE), record.operations


def test_a_plain_pyinfra_run_gives_up_a_frozen_host_at_its_deadline(make_twin, tmp_path):
    """pyinfra's own CLI on one host (no fleet): the host's deadline holds there too (it
    had none: the run waited for the frozen host for ever)."""
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inv.py", twin, host_deadline_s=FROZEN_DEADLINE_S)
    env = {
        **os.environ,
        "REMEDY_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
        "REMEDY_LOCK_DIR": str(tmp_path / "locks"),
    }
    (tmp_path / "locks").mkdir()
    proc = subprocess.Popen(
        ["pyinfra", "-y", "--data", "restart=now", str(inventory),
         "deploys/restore_toolcalling.py"],
        stdout=open(tmp_path / "stdout", "w"), stderr=open(tmp_path / "stderr", "w"),
        stdin=subprocess.DEVNULL, cwd=PROJECT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        freeze_when_proving(twin, proc)
        code = ended(proc, RUN_CAP_S, tmp_path)
    finally:
        signal_twin(twin, signal.SIGCONT)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    said = (tmp_path / "stdout").read_text() + (tmp_path / "stderr").read_text()
    why = f"given up at its deadline (host_deadline_s={FROZEN_DEADLINE_S}) during '{PROVE}'"
    assert code != 0, said[-3000:]
    assert f"{twin.name}: {why}" in " ".join(said.split()), said[-3000:]  # folded at 80
    (record,) = records(tmp_path)[twin.name]
    assert record.result == "given up", record
    assert record.path == "none", record  # it never switched, nor wrote the override
    assert record.details["in_step"] == PROVE and why in record.details["failed"], record
    assert ran(record, BEGIN) and not ran(record, PROVE), record.operations


def test_sigterm_while_a_host_is_frozen_ends_the_run_and_each_record_is_true(make_twin, tmp_path):
    from remedy import lifecycle

    done, frozen = make_twin(), make_twin()
    inventory = fleet_inventory(tmp_path / "fleet.py", [done, frozen])
    proc = start_converge(inventory, tmp_path)  # text: its progress says who is done
    try:
        freeze_when_proving(frozen, proc)
        wait_said(tmp_path, f"{done.name}: its steps are over", proc)
        os.kill(proc.pid, signal.SIGTERM)
        # once: the run ends by itself within its bound (a cap, not a timing)
        code = ended(proc, lifecycle.STOP_BOUND_S + 60, tmp_path)
    finally:
        signal_twin(frozen, signal.SIGCONT)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 143, (tmp_path / "stderr").read_text()[-3000:]
    audited = records(tmp_path)
    (record,) = audited[done.name]  # it finished before the SIGTERM: its own result
    assert record.result == "ok" and record.path == "durable", record
    assert not record.details.get("interrupted"), record.details
    (record,) = audited[frozen.name]
    assert record.result == "interrupted", record
    assert record.details["interrupted"].startswith(f"interrupted by SIGTERM during '{PROVE}'")
    assert record.path == "none", record
    assert ran(record, BEGIN) and not ran(record, PROVE), record.operations
    stdout = (tmp_path / "stdout").read_text()
    assert done.name in stdout and frozen.name in stdout, stdout  # both reported
