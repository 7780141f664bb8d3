"""A restore killed mid-run leaves the checkout as it was, and one rerun finishes the job.

The bump, the lock commit and the build happen in a scratch clone owned by the
checkout's owner; the checkout only moves by one fast-forward once the fix is proven.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from remedy.twin import fixtures
from tests.conftest import PROJECT, RESTART_NOW, not_owned_by_owner, owner_git, probe_inside

pytestmark = pytest.mark.twin


def scratch_clones(twin) -> list[str]:
    out = twin.exec(["sh", "-c", "ls -d /tmp/remedy-bump.* 2>/dev/null || true"]).stdout
    return out.split()


def bumped_in(twin, scratch: str) -> bool:
    """The scratch clone's flake.lock has moved past the checkout's."""
    proc = twin.exec(
        ["runuser", "-u", fixtures.OWNER, "--", "git", "-C", scratch, "log", "-1", "--format=%s"],
        check=False,
    )
    return "tt-stack#49" in proc.stdout


@pytest.mark.parametrize("when", ["after-the-bump", "during-the-build"])
def test_sigkill_mid_durable_run_leaves_the_checkout_clean_and_a_rerun_finishes(
    twin, tmp_path, when
):
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    lock = twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    argv = ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py"]
    run = subprocess.Popen(
        [*argv, "deploys/restore_toolcalling.py"],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and run.poll() is None:
            clones = scratch_clones(twin)
            if clones and (when == "during-the-build" or bumped_in(twin, clones[0])):
                if when == "during-the-build":
                    time.sleep(0.3)
                break
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before it could be killed"
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head
    assert twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout == lock

    rerun = subprocess.run(
        [*argv, "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
    records = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert records[-1]["path"] == "durable" and records[-1]["result"] == "ok"
    assert probe_inside(twin).outcome == "parsed"
    assert "tt-stack#49" in owner_git(twin, "log", "-1", "--format=%B").stdout
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""


def test_ctrl_c_stops_the_run_fails_it_and_audits_it_as_interrupted(twin, tmp_path):
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", "tenstorrent-serving.service"]).stdout
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    argv = ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py"]
    run = subprocess.Popen(
        [*argv, "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None and not scratch_clones(twin):
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    out, _ = run.communicate(timeout=600)
    assert run.returncode != 0, out[-3000:]
    assert "SIGINT: stopping after the step in progress" in out
    (record,) = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert record["result"] == "interrupted" and record["details"]["interrupted"]
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    after = twin.exec(["systemctl", "show", "-P", "MainPID", "tenstorrent-serving.service"])
    assert after.stdout == pid  # nothing restarted
    assert scratch_clones(twin) == [], out[-6000:]


def test_a_reboot_mid_run_is_audited_once_as_unfinished_with_why_and_a_rerun_finishes(
    twin, tmp_path
):
    """The reboot lands in a step (its command fails: "failed") or between steps (those
    left never ran: "crashed"); either way one record that says why, never "ok"."""
    from remedy.twin import machine

    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    argv = ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py"]
    run = subprocess.Popen(
        [*argv, "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None and not scratch_clones(twin):
        time.sleep(0.05)
    time.sleep(0.5)
    machine.reboot(twin.name, progress=lambda _m: None)
    said, _ = run.communicate(timeout=600)
    assert run.returncode != 0
    assert "Traceback" not in said, said[-3000:]
    (record,) = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert record["result"] in ("crashed", "failed"), record
    reasons = ("failed", "durable_failed", "verification_failed", "interrupted")
    assert any(record["details"].get(k) for k in reasons), record  # never all null
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    rerun = subprocess.run(
        [*argv, "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
    assert probe_inside(twin).outcome == "parsed"
    # the rebooted run recorded itself: its journal is not recorded a second time
    records = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["result"] for r in records] == [record["result"], "ok"], records


def _moved(twin, path: str, before: str) -> bool:
    now = twin.exec(["readlink", "-f", path], check=False).stdout.strip()
    return bool(now) and now != before


def _kill_point(twin, when: str, head: str, profile: str) -> bool:
    """Whether the converge run has reached WHEN (checked from inside the twin)."""
    clones = scratch_clones(twin)
    if when == "scratch-clone":
        return bool(clones)
    if when in ("managed-commit", "sigint-after-the-managed-commit"):
        return bool(clones) and "remedy.nix" in as_owner_git(twin, clones[0], "log", "-1")
    if when == "during-the-build":
        building = twin.exec(["pgrep", "-f", "build.*--max-jobs"], check=False)
        return building.returncode == 0 and time.sleep(0.3) is None
    if when == "after-the-fast-forward":
        return owner_git(twin, "rev-parse", "HEAD", check=False).stdout != head
    if when == "after-the-switch":
        return _moved(twin, "/nix/var/nix/profiles/system", profile)
    raise AssertionError(when)


def as_owner_git(twin, repo: str, *args: str) -> str:
    argv = ["runuser", "-u", fixtures.OWNER, "--", "git", "-C", repo, *args]
    return twin.exec(argv, check=False).stdout


@pytest.mark.parametrize(
    "when",
    [
        "scratch-clone",
        "managed-commit",
        "during-the-build",
        "after-the-fast-forward",
        "after-the-switch",
        "sigint-after-the-managed-commit",
    ],
)
def test_kill_sweep_over_a_durable_converge(make_twin, tmp_path, when):
    """SIGKILL at five points of a durable converge (SIGINT at one): the checkout never
    holds an uncommitted remedy change, and one rerun ends healthy and durable."""
    from tests.conftest import out_of_sync, status_settings

    twin = make_twin(with_emergency_override=True)
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    profile = twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout.strip()
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    argv = [
        "pyinfra",
        "-y",
        *RESTART_NOW,
        "--limit",
        twin.name,
        "inventory/twin.py",
        "deploys/converge.py",
    ]
    if when == "during-the-build":  # a build that takes a while: vllm-tt compiles
        from remedy.twin import machine

        machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
        argv[1:1] = ["--data", "allow_local_build=true"]
    run = subprocess.Popen(
        argv, cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and run.poll() is None:
            if _kill_point(twin, when, head, profile):
                break
            time.sleep(0.05)
        assert run.poll() is None, f"the run ended before {when}"
        if when.startswith("sigint"):
            run.send_signal(signal.SIGINT)
            assert run.wait(timeout=600) != 0
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert not_owned_by_owner(twin) == []

    rerun = subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
    code, settings = status_settings(twin)
    assert code == 0 and out_of_sync(settings) == set(), settings
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert scratch_clones(twin) == []  # the killed run's and the rerun's own
    # one audit record per run, the killed one included (from its journal), each with a
    # reason or an ok
    records = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["result"] for r in records] == [
        "interrupted" if when.startswith("sigint") else "killed",
        "ok",
    ], records
    first = records[0]["details"]
    assert first.get("failed") or first.get("interrupted"), records[0]
    if not when.startswith("sigint"):
        assert "died without ending" in first["failed"]
    # no journal (what remedy keeps of Nix's answers, *.record, stays: issue 28)
    left = twin.exec(["ls", "/var/lib/remedy"], check=False).stdout.split()
    # (the last run's answers, run-UNIT.answers, stay as its record until the next run:
    # remedy/host/steps/outcome.sh reads them)
    kept = [f for f in left if f.endswith(".record") or re.fullmatch(r"run-.*\.answers", f)]
    assert [f for f in left if f not in kept] == []


def test_a_sigterm_run_is_recorded_once_as_interrupted_not_again_as_killed(twin, tmp_path):
    """Issue 32 item 5: the next run recorded a SIGTERM'd run a second time, as 'killed
    (SIGKILL, a lost connection or a crash)' after the wrong step."""
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    argv = ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py"]
    run = subprocess.Popen(
        [*argv, "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None and not scratch_clones(twin):
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=600)
    assert run.returncode != 0, out[-3000:]
    assert "SIGTERM: stopping after the step in progress" in out
    rerun = subprocess.run(
        [*argv, "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
    records = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["result"] for r in records] == ["interrupted", "ok"], records
    assert "interrupted by SIGTERM" in records[0]["details"]["interrupted"]
    assert "an earlier run died" not in rerun.stdout + rerun.stderr


@pytest.mark.nix_cli
def test_sigterm_to_remedy_converge_during_the_proof_records_what_ran_and_where(
    make_twin, tmp_path
):
    """Issue 42: SIGTERM to `remedy converge` during the proof was recorded as result
    'not started', path none, no step, though the clone, the bump and the build ran.
    Now the record says interrupted, the signal and the step it came during, and the
    steps that ran; the checkout and the system are as before."""
    from remedy.twin import machine
    from tests.conftest import twin_inventory

    twin = make_twin(with_emergency_override=True)
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    profile = twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout
    inventory = twin_inventory(tmp_path / "inv.py", twin, allow_local_build=True)
    log = tmp_path / "a.jsonl"
    run = subprocess.Popen(
        ["remedy", "converge", str(inventory), "--restart", "now"], cwd=PROJECT,
        env={**os.environ, "REMEDY_AUDIT_LOG": str(log)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # an event, not a speed: the build starts
        while time.monotonic() < deadline and run.poll() is None:
            if twin.exec(["pgrep", "-f", "build.*--max-jobs"], check=False).returncode == 0:
                break
            time.sleep(0.1)
        assert run.poll() is None, "the run ended before its build"
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 143, out[-3000:]
    (record,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert record["result"] == "interrupted", (record, out[-3000:])
    assert record["details"]["interrupted"] == (
        "interrupted by SIGTERM during 'Prove the build holds the desired state (tt-stack#34)'"
    ), record["details"]
    ran = {op["name"]: op for op in record["operations"]}
    assert ran["Scratch clone; bump the tt-stack input (tt-stack#49)"]["changed"], ran
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head  # never fast-forwarded
    assert twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout == profile
    assert probe_inside(twin).outcome == "parsed"  # the override holds
