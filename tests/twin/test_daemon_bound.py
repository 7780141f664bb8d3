"""Issue 44 item 7 on a twin: with a nix-daemon (the twin runs one, as NixOS does) the
owner's builds run in nix-daemon.service's cgroup, outside the owner's transient
scope. A run bounds nix-daemon.service for the run (a runtime MemoryMax, recorded
first), restores it afterwards, and a rerun restores what a killed run left.

The twin's cgroup v1 does not enforce MemoryMax (docs/twin.md): what is checked is
where the build runs and the property systemd holds, not an OOM kill.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from remedy.core.programs import hostlock
from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, probe_inside, run_deploy

pytestmark = pytest.mark.twin

UNIT = "nix-daemon.service"
RECORD = f"{hostlock.JOURNAL_DIR}/nix-daemon-bound"
DROPIN = f"/run/systemd/system.control/{UNIT}.d/50-MemoryMax.conf"


def memory_max(twin: machine.Twin) -> str:
    return twin.exec(["systemctl", "show", "-P", "MemoryMax", UNIT]).stdout.strip()


def exists(twin: machine.Twin, path: str) -> bool:
    return twin.exec(["test", "-e", path], check=False).returncode == 0


@pytest.mark.nix_cli
def test_the_daemons_builds_are_bounded_for_the_run_and_restored_after_a_kill(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    assert memory_max(twin) == "infinity"
    dry = run_deploy(twin, "converge", "--dry")
    said = " ".join((dry.stdout + dry.stderr).split())
    assert "nix-daemon.service's builds by a runtime MemoryMax for the run" in said, said[-3000:]
    assert memory_max(twin) == "infinity"  # --dry changes nothing

    # a check whose build never ends: the run is caught building
    for commit in (fixtures.checked_commit(), fixtures.hanging_check_commit()):
        machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, commit)
    argv = ["pyinfra", "-y", "--limit", twin.name, "--data", "restart=now",
            "inventory/twin.py", "deploys/converge.py"]  # fmt: skip
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    run = subprocess.Popen(argv, cwd=PROJECT, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        pid = ""
        while time.monotonic() < deadline and run.poll() is None and not pid:
            found = twin.exec(["pgrep", "-f", "sleep 3600"], check=False)
            pid = found.stdout.split()[0] if found.returncode == 0 else ""
            time.sleep(0.1)
        assert pid, "the run ended before the check's build hung"
        # the build runs in the daemon's cgroup, not in the owner's scope
        cgroup = twin.exec(["cat", f"/proc/{pid}/cgroup"]).stdout
        assert UNIT in cgroup and "remedy-nix-" not in cgroup, cgroup
        bound = memory_max(twin)
        assert bound.isdigit(), bound  # bounded now
        assert twin.exec(["cat", RECORD]).stdout == "was=infinity\nhad=no\n"
        assert twin.exec(["stat", "-c", "%a %U", RECORD]).stdout.split() == ["600", "root"]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    # the run is gone with its program on the host (as a power cut of the machine that
    # ran it leaves the host): the bound stays until a run restores it
    twin.exec(["pkill", "-KILL", "-f", "remedy-prove apply"], check=False)
    twin.exec(["systemctl", "stop", "remedy-nix-*.scope"], check=False)
    twin.exec(["pkill", "-KILL", "-f", "sleep 3600"], check=False)
    assert memory_max(twin) == bound
    assert exists(twin, RECORD)

    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.checked_commit())
    rerun = run_deploy(twin, "converge", audit_log=tmp_path / "a.jsonl")
    out = " ".join((rerun.stdout + rerun.stderr).split())
    assert rerun.returncode == 0, out[-4000:]
    assert "nix-daemon.service's MemoryMax is back to infinity" in out, out[-4000:]
    assert "nix-daemon.service's builds bounded for this run: MemoryMax=" in out, out[-4000:]
    assert memory_max(twin) == "infinity"
    assert not exists(twin, RECORD) and not exists(twin, DROPIN)
    assert probe_inside(twin).outcome == "parsed"
