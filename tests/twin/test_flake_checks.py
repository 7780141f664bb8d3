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

    # the daemon ends the build its client left: the event, with a cap that is no speed
    deadline = time.monotonic() + 120
    while twin.exec(["pgrep", "-f", "sleep 3600"], check=False).returncode == 0:
        assert time.monotonic() < deadline, twin.exec(["ps", "axo", "pid,user,args"]).stdout
        time.sleep(1)
    scopes = twin.exec(["systemctl", "list-units", "--no-legend", "remedy-nix-*"]).stdout
    assert scopes.strip() == "", scopes


def test_a_second_sigterm_during_a_hung_check_is_recorded_once_with_the_step_it_was_in(
    twin, tmp_path
):
    """Issue 32 items 4 and 5: the first SIGTERM waits for the step in progress; a second
    one kills the run, which records itself first (the next run recorded it again, as a
    run that died of SIGKILL, after the wrong step). Nothing of it keeps running."""
    import os
    import signal
    import subprocess
    import time

    from tests.conftest import PROJECT, RESTART_NOW

    log = tmp_path / "a.jsonl"
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.checked_commit())
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.hanging_check_commit())
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    argv = ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py",
            "deploys/restore_toolcalling.py"]  # fmt: skip
    run = subprocess.Popen(argv, cwd=PROJECT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while twin.exec(["pgrep", "-f", "sleep 3600"], check=False).returncode != 0:
        assert run.poll() is None and time.monotonic() < deadline, run.stdout.read()[-3000:]
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    time.sleep(0.05)  # the first stops the build; the second comes while the step ends
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, out[-3000:]
    records = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(records) == 1, records  # once, whoever wrote
    (record,) = records
    assert record["result"] == "interrupted", record
    why = record["details"]["interrupted"]
    # the step the first signal came during is named, whether or not the second came
    # before the run ended (then: killed), a 50 ms race the test does not depend on
    import re

    from remedy.core.run.steps import TEMPLATES

    m = re.fullmatch(
        r"interrupted by SIGTERM during '([^']+)'(, then killed by a second SIGTERM)?", why
    )
    assert m, why
    assert m.group(1) == next(t.title for t in TEMPLATES if t.title.startswith("Prove ")), why
    rerun = subprocess.run([*argv[:-1], "--data", "nix_timeout_s=5", argv[-1]], cwd=PROJECT,
                           env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
    results = [json.loads(x)["result"] for x in log.read_text().splitlines()]
    assert results == ["interrupted", "ok"], results  # recorded once, not again as died
    deadline = time.monotonic() + 120  # the hung build ends: an event, a generous cap
    while twin.exec(["pgrep", "-f", "sleep 3600"], check=False).returncode == 0:
        assert time.monotonic() < deadline, twin.exec(["ps", "axo", "pid,user,args"]).stdout
        time.sleep(1)


def test_the_first_sigterm_stops_a_hung_check_at_once_and_the_run_ends_interrupted(twin, tmp_path):
    """Issue 32 item 4: 'stopping after the step in progress' waited for a check that
    never ends (nix_timeout_s at its default, 30 min): the first signal now stops the
    owner's nix as a whole, the step gives up, and no step after it runs."""
    import os
    import signal
    import subprocess
    import time

    from tests.conftest import PROJECT, RESTART_NOW

    log = tmp_path / "a.jsonl"
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.checked_commit())
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.hanging_check_commit())
    lock = twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    run = subprocess.Popen(
        ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py",
         "deploys/restore_toolcalling.py"],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while twin.exec(["pgrep", "-f", "sleep 3600"], check=False).returncode != 0:
        assert run.poll() is None and time.monotonic() < deadline, run.stdout.read()[-3000:]
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=120)  # not the check's hour, nor nix_timeout_s
    assert run.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "a Nix build or evaluation in progress is stopped now" in out
    (record,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert record["result"] == "interrupted" and record["path"] != "durable"
    assert twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout == lock  # nothing switched
    deadline = time.monotonic() + 120  # the hung build ends: an event, a generous cap
    while twin.exec(["pgrep", "-f", "sleep 3600"], check=False).returncode == 0:
        assert time.monotonic() < deadline, twin.exec(["ps", "axo", "pid,user,args"]).stdout
        time.sleep(1)


def test_a_check_killed_by_a_signal_says_the_signal_not_the_time_bound(twin, tmp_path):
    """Issue 43 E3: a nix killed with SIGKILL seconds into a build was reported as having
    run past its time bound (nix_timeout_s=1800) with the advice to raise it: 137 is also
    timeout's own KILL. The signal is said, and the bound only when it was reached."""
    import os
    import subprocess
    import time

    from tests.conftest import PROJECT, RESTART_NOW

    log = tmp_path / "a.jsonl"
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.checked_commit())
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.hanging_check_commit())
    lock = twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout
    run = subprocess.Popen(
        ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py",
         "deploys/restore_toolcalling.py"],
        cwd=PROJECT, env={**os.environ, "REMEDY_AUDIT_LOG": str(log)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while twin.exec(["pgrep", "-f", "sleep 3600"], check=False).returncode != 0:
        assert run.poll() is None and time.monotonic() < deadline, run.stdout.read()[-3000:]
        time.sleep(0.2)
    # the owner's nix, the check's client (as the OOM killer or a person would)
    twin.exec(["pkill", "-KILL", "-u", fixtures.OWNER, "-x", "nix"])
    out, _ = run.communicate(timeout=600)
    out = " ".join(out.split())
    assert run.returncode == 0, out[-4000:]
    assert f"the flake check {CHECK} was ended by signal KILL" in out, out[-4000:]
    assert "before its time bound (nix_timeout_s=1800)" in out, out[-4000:]
    assert "ran past its time bound" not in out and "raise nix_timeout_s" not in out
    assert "the check rejects" not in out  # no verdict of the check
    record = last_audit(log)
    assert record["path"] == "durable+fallback", record
    assert "ended by signal KILL" in record["details"]["durable_failed"], record
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode == 0  # the fallback holds
    assert probe_inside(twin).outcome == "parsed"
    assert twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout == lock
    deadline = time.monotonic() + 30  # the daemon ends the build its client left
    while twin.exec(["pgrep", "-f", "sleep 3600"], check=False).returncode == 0:
        assert time.monotonic() < deadline, twin.exec(["ps", "axo", "pid,user,args"]).stdout
        time.sleep(1)
