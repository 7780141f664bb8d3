"""Issue 43 acceptance: every exit code of the README's table, produced by `remedy
status` or `remedy converge` on a twin and checked against the host's real state at
that moment. The codes that other twin tests already prove that way are listed in the
issue's note; these are the ones that had no such test (4 checked against the host
itself, 5 with nothing changed, 130)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from remedy.core.programs import hostlock
from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, owner_git, probe_inside, twin_inventory
from tests.twin.test_converge_cli import host_state

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"


def isolated(tmp_path) -> dict[str, str]:
    """The run's own audit log, lock directory and state: never root's real ones."""
    (tmp_path / "lock").mkdir(exist_ok=True)
    return {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl"),
            "REMEDY_LOCK_DIR": str(tmp_path / "lock"),
            "XDG_STATE_HOME": str(tmp_path / "state")}  # fmt: skip


def remedy(env, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["remedy", *argv], capture_output=True, text=True, cwd=PROJECT,
                          env=env, timeout=900)  # fmt: skip


def running_parser(twin) -> str:
    """The tool-call parser the serving process was started with (its /proc cmdline)."""
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    argv = twin.exec(["cat", f"/proc/{pid}/cmdline"]).stdout.split("\0")
    return argv[argv.index("--tool-call-parser") + 1]


def test_exit_4_is_a_server_whose_tool_calls_are_not_parsed(twin, tmp_path):
    env = isolated(tmp_path)
    inventory = str(twin_inventory(tmp_path / "inv.py", twin))
    before = host_state(twin)
    proc = remedy(env, "status", inventory, "--json")
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    (host,) = json.loads(proc.stdout)["hosts"]
    assert host["exit_code"] == 4, host
    # the host itself: the process runs hermes and a tool call comes back unparsed
    assert running_parser(twin) == "hermes"
    assert probe_inside(twin).outcome == "unparsed"
    assert host_state(twin) == before  # status changed nothing


def test_exit_5_is_a_host_lock_held_by_another_run_and_nothing_changes(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    env = isolated(tmp_path)
    inventory = str(twin_inventory(tmp_path / "inv.py", twin, lock_wait_s=2))
    who = "pid 4242 on ops-laptop since 2026-12-05T05:00:00Z: remedy converge"
    twin.exec(
        ["systemd-run", "--unit=hold-remedy-lock", "--", "sh", "-c",
         'exec 9>>"$1"; flock 9; printf "%s\\n" "$3" > "$2"; sleep 120', "sh",
         hostlock.lock_path(UNIT), hostlock.holder_path(UNIT), who]
    )  # fmt: skip
    twin.exec(["sh", "-c", f"for i in $(seq 50); do [ -s {hostlock.holder_path(UNIT)} ] && "
               "exit 0; sleep 0.1; done; exit 1"])  # fmt: skip
    before = host_state(twin)
    try:
        proc = remedy(env, "converge", inventory, "--restart", "now", "--json")
        # the lock is still the other run's when the run has ended
        held = twin.exec(["systemctl", "is-active", "hold-remedy-lock"], check=False)
        assert held.stdout.strip() == "active", held.stdout
    finally:
        twin.exec(["systemctl", "stop", "hold-remedy-lock"], check=False)
    assert proc.returncode == 5, proc.stdout[-3000:] + proc.stderr[-3000:]
    (host,) = json.loads(proc.stdout)["hosts"]
    assert host["exit_code"] == 5 and who in " ".join(json.dumps(host).split()), host
    # nothing changed: the checkout, the profile, the /run files, the server's process
    assert host_state(twin) == before
    assert probe_inside(twin).outcome == "parsed"  # the override still serves


def test_exit_130_is_sigint_to_converge_and_the_host_is_as_before(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
    env = isolated(tmp_path)
    inventory = str(twin_inventory(tmp_path / "inv.py", twin, allow_local_build=True))
    before = host_state(twin)
    run = subprocess.Popen(
        ["remedy", "converge", inventory, "--restart", "now"], cwd=PROJECT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # an event, not a speed: the build starts
        while time.monotonic() < deadline and run.poll() is None:
            if twin.exec(["pgrep", "-f", "build.*--max-jobs"], check=False).returncode == 0:
                break
            time.sleep(0.1)
        assert run.poll() is None, "the run ended before its build"
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, out[-3000:]
    (record,) = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert record["result"] == "interrupted", record
    assert "SIGINT" in record["details"]["interrupted"], record["details"]
    # the host as before: checkout, profile and running system, /run files, hugepages,
    # the server's process; the override still serves and no scratch clone is left
    assert host_state(twin) == before, out[-3000:]
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert probe_inside(twin).outcome == "parsed"
    assert twin.exec(["sh", "-c", "ls -d /tmp/remedy-bump.* 2>/dev/null || true"]).stdout == ""
