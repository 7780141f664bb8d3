"""Issue 17, item 3 on a twin: tt-stack's own check as a gate before the switch.

tt-stack gains ``checks.x86_64-linux.tenstorrent-serving`` (fixtures.checked_commit),
then a commit turns Phase 2a on by default. remedy's managed file forces it off, so
the built system alone would prove: only the check sees that tt-stack's default is
wrong. The revert on top makes the check pass."""

from __future__ import annotations

import json

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import owner_git, probe_inside, run_restore

pytestmark = pytest.mark.twin

CHECK = "tt-stack#checks.x86_64-linux.tenstorrent-serving"
DROPIN = "/run/systemd/system/tenstorrent-serving.service.d/override.conf"


def said(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def last_audit(path) -> dict:
    return json.loads(path.read_text().splitlines()[-1])


def test_a_failing_flake_check_blocks_the_durable_path_and_a_passing_one_is_built_once(
    twin, tmp_path
):
    log = tmp_path / "a.jsonl"
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.checked_commit())
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.phase2a_default_commit())
    lock = twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout

    blocked = run_restore(twin, audit_log=log)
    out = said(blocked)
    assert blocked.returncode == 0, out[-4000:]
    assert f"flake check {CHECK} failed" in out, out[-4000:]
    assert "FAIL: deviceResident is on by default" in out  # the log's last line
    record = last_audit(log)
    assert record["path"] == "durable+fallback", record
    (check,) = record["details"]["flake_checks"]
    assert check["result"] == "failed" and "deviceResident" in check["detail"]
    # the fallback holds tool calling; the checkout is as it was
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode == 0
    assert probe_inside(twin).outcome == "parsed"
    assert twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout == lock
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""

    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.phase2a_reverted_commit())
    passed = run_restore(twin, audit_log=log)
    out = said(passed)
    assert passed.returncode == 0, out[-4000:]
    assert out.count(f"flake check {CHECK}: passed") == 1, out[-4000:]
    assert out.count(f"building flake check {CHECK}") == 1
    record = last_audit(log)
    assert record["path"] == "durable", record
    assert record["details"]["flake_checks"] == [{"check": CHECK, "result": "passed", "detail": ""}]
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode != 0
    assert probe_inside(twin).outcome == "parsed"


def test_a_flake_check_that_hangs_is_stopped_at_its_time_bound_and_leaves_nothing_running(
    twin, tmp_path
):
    """Issue 32 item 4: a check that sleeps for an hour held the host lock forever, and its
    builder ran on after the run and the next one."""
    log = tmp_path / "a.jsonl"
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.checked_commit())
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.hanging_check_commit())
    lock = twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout
    proc = run_restore(twin, "--data", "nix_timeout_s=8", audit_log=log)
    out = " ".join(said(proc).split())
    assert proc.returncode == 0, out[-4000:]
    assert f"flake check {CHECK} ran past its time bound (nix_timeout_s=8)" in out, out[-4000:]
    assert last_audit(log)["path"] == "durable+fallback"
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode == 0  # the fallback holds
    assert probe_inside(twin).outcome == "parsed"
    assert twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout == lock
    import time

    deadline = time.monotonic() + 30  # the daemon ends the build its client left
    while twin.exec(["pgrep", "-f", "sleep 3600"], check=False).returncode == 0:
        assert time.monotonic() < deadline, twin.exec(["ps", "axo", "pid,user,args"]).stdout
        time.sleep(1)
    scopes = twin.exec(["systemctl", "list-units", "--no-legend", "remedy-nix-*"]).stdout
    assert scopes.strip() == "", scopes
