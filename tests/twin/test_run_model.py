"""Issue 14 on twins: pyinfra's own results tell the truth, and the host keeps the run.

Each case runs ``pyinfra --json`` and asserts on pyinfra's ``results``: which
operations it counts as changed, unchanged or in error.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from remedy.core.programs import hostlock
from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, RESTART_NOW, hugepages_1g, owner_git, probe_inside, unit_props

pytestmark = pytest.mark.twin

BUMP = "Scratch clone; bump the tt-stack input (tt-stack#49)"
MANAGED = "Write remedy's managed Nix file (tt-stack#52)"
PROVE = "Prove the build holds the desired state (tt-stack#34)"
PUBLISH = "Fast-forward the checkout to the proven commits (tt-stack#49)"
RELEASE = "Release free hugepages (tt-stack#49)"
REMOVE = "Remove the stale /run override (tt-stack#49)"
SWITCH = "Switch to the proven system (tt-stack#49)"
WRITE = "Write the /run fallback override (tt-stack#49)"
FALLBACK_RELEASE = "Release free hugepages for the fallback (tt-stack#49)"
FALLBACK_RESTART = "Restart onto the /run override (tt-stack#49)"
SCRATCH = "Remove the scratch clone (tt-stack#49)"
DURABLE_STEPS = {
    BUMP,
    MANAGED,
    "Memory gate before Nix evaluates and builds (tt-stack#49)",
    PROVE,
    PUBLISH,
    RELEASE,
    "Memory gate before the switch (tt-stack#49)",
    REMOVE,
    SWITCH,
    "Restart if what systemd starts changed (tt-stack#49)",
    "Verify tool calling (tt-stack#49)",
}
JOURNAL = "/var/lib/remedy/run-tenstorrent-serving.service.json"


def pyinfra_json(twin, deploy: str, *extra: str, audit_log=None):
    """(exit code, pyinfra's --json results, its log) of one deploy on TWIN."""
    env = dict(os.environ)
    if audit_log is not None:
        env["REMEDY_AUDIT_LOG"] = str(audit_log)
    argv = [
        "pyinfra",
        "-y",
        *RESTART_NOW,
        "--json",
        "--limit",
        twin.name,
        *extra,
        "inventory/twin.py",
    ]
    proc = subprocess.run(
        [*argv, f"deploys/{deploy}.py"],
        capture_output=True, text=True, cwd=PROJECT, env=env, timeout=900,
    )  # fmt: skip
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not JSON: {proc.stdout[-2000:]!r}\n{proc.stderr[-3000:]}") from None
    return proc.returncode, doc["results"], proc.stderr


def by_outcome(results) -> dict[str, set[str]]:
    out = {"success": set(), "error": set(), "no_change": set()}
    for op in results["operations"]:
        for outcome in out:
            if op[outcome]:
                out[outcome].add(op["name"])
    return out


def test_a_fallback_from_the_emergency_override_changes_no_durable_step(make_twin):
    twin = make_twin(with_emergency_override=True)
    code, results, log = pyinfra_json(twin, "converge", "--data", "durable=false")
    assert code == 0, log[-3000:]
    ops = by_outcome(results)
    assert ops["error"] == set(), log[-3000:]
    assert not ops["success"] & DURABLE_STEPS  # no durable step changed
    assert {WRITE, FALLBACK_RESTART} <= ops["success"], ops
    assert ops["success"] <= {WRITE, FALLBACK_RESTART, FALLBACK_RELEASE}, ops
    assert probe_inside(twin).outcome == "parsed"


def test_pyinfra_counts_as_changed_exactly_what_changed_the_host(make_twin):
    """A durable converge from the seed state (production's emergency override), then
    a second one: each step pyinfra counts as changed, and what it changed."""
    twin = make_twin(with_emergency_override=True)
    head = owner_git(twin, "rev-parse", "HEAD").stdout.strip()
    system = twin.exec(["readlink", "/run/current-system"]).stdout.strip()
    code, results, log = pyinfra_json(twin, "converge")
    assert code == 0, log[-3000:]
    ops = by_outcome(results)
    assert ops["error"] == set(), log[-3000:]
    changed = {BUMP, MANAGED, PROVE, PUBLISH, RELEASE, REMOVE, SWITCH, SCRATCH}
    assert ops["success"] == changed, ops
    subjects = owner_git(twin, "log", "--format=%s", f"{head}..HEAD").stdout
    assert "flake.lock: bump tt-stack" in subjects and "remedy.nix" in subjects  # BUMP, MANAGED
    assert twin.exec(["readlink", "/run/current-system"]).stdout.strip() != system  # SWITCH
    override = twin.exec(["ls", "/run/systemd/system/tenstorrent-serving.service.d"], check=False)
    assert "override.conf" not in override.stdout  # REMOVE
    assert hugepages_1g(twin) == 2  # RELEASE: 4 -> 2
    assert twin.exec(["sh", "-c", "ls -d /tmp/remedy-bump.* 2>/dev/null || true"]).stdout == ""
    assert twin.exec(["test", "-e", JOURNAL], check=False).returncode != 0  # the run ended

    pid = unit_props(twin)["MainPID"]
    code, results, log = pyinfra_json(twin, "converge")
    assert code == 0, log[-3000:]
    assert results["totals"]["success"] == 0 and results["totals"]["error"] == 0, results
    assert unit_props(twin)["MainPID"] == pid


@pytest.mark.nix_cli
def test_a_local_build_is_an_error_ignored_and_the_fallback_runs(twin, tmp_path):
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    code, results, log = pyinfra_json(twin, "restore_toolcalling", audit_log=tmp_path / "a.jsonl")
    assert code == 0, log[-3000:]
    ops = by_outcome(results)
    assert ops["error"] == {PROVE}, ops  # the blocked step, ignored: the host went on
    assert "compiled on the serving host" in log and "vllm-tt" in log
    assert {WRITE, FALLBACK_RESTART} <= ops["success"], ops
    assert not ops["success"] & (DURABLE_STEPS - {BUMP}), ops  # only the scratch clone
    assert probe_inside(twin).outcome == "parsed"
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head
    (record,) = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert record["path"] == "durable+fallback" and "vllm-tt" in record["details"]["durable_failed"]
    blocked = [op for op in record["operations"] if op["name"] == PROVE]
    assert blocked and blocked[0]["succeeded"] is False and "vllm-tt" in blocked[0]["why"]


def test_a_run_killed_after_the_build_is_finished_by_the_next_without_building(twin, tmp_path):
    head = owner_git(twin, "rev-parse", "HEAD").stdout.strip()
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    argv = ["pyinfra", "-y", "--limit", twin.name, "inventory/twin.py"]
    run = subprocess.Popen(
        [*argv, "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    seen = []
    try:
        for line in run.stderr:  # pyinfra logs each operation as it starts
            seen.append(line)
            if "Starting operation: Fast-forward the checkout" in line:
                os.killpg(run.pid, signal.SIGKILL)
                break
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=60)
    assert any("proven:" in line for line in seen), "".join(seen)[-3000:]
    assert owner_git(twin, "rev-parse", "HEAD").stdout.strip() == head  # not fast-forwarded
    left = json.loads(twin.exec(["cat", JOURNAL]).stdout)
    assert left["toplevel"].startswith("/nix/store/") and left["scratch"]
    mode = twin.exec(["stat", "-c", "%a %U", JOURNAL]).stdout.split()
    assert mode == ["600", "root"]

    time.sleep(1)  # the dead session lets go of the host lock
    rerun = subprocess.run(
        [*argv, "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    out = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, out[-4000:]
    assert "finishing the earlier run" in out and left["started"] in out and left["toplevel"] in out
    assert "(max-jobs" not in out  # proven once, not built again
    assert twin.exec(["readlink", "/run/current-system"]).stdout.strip() == left["toplevel"]
    assert owner_git(twin, "rev-parse", "HEAD").stdout.strip() != head
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert twin.exec(["test", "-e", left["scratch"]], check=False).returncode != 0
    assert probe_inside(twin).outcome == "parsed"
    records = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["result"] for r in records] == ["killed", "ok"], records
    assert "finishing the earlier run" in records[-1]["details"]["resumed"]


def test_a_manual_script_that_waited_for_the_lock_stops_on_a_changed_host(make_twin):
    """converge, and 1 s later the manual script of runbook 006 (planned before it), on
    one broken twin: the script waits for the lock, finds the host is no longer as its
    plan read it, names what changed, and changes and restarts nothing (issue 42: no
    shell planner plans again on the host; the script is made again from a read)."""
    from tests.conftest import server_starts
    from tests.twin.test_manual_and_audit import manual_script, over_ssh

    twin = make_twin(with_emergency_override=True)
    script = manual_script(twin, runbook="006")
    starts = server_starts(twin)
    argv = [
        "pyinfra",
        "-y",
        *RESTART_NOW,
        "--limit",
        twin.name,
        "inventory/twin.py",
        "deploys/converge.py",
    ]
    deploy = subprocess.Popen(
        argv, cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # the deploy holds the host lock first (a fixed sleep lost the race on a busy machine)
    holder = hostlock.holder_path("tenstorrent-serving.service")
    deadline = time.monotonic() + 120
    while twin.exec(["test", "-s", holder], check=False).returncode != 0:
        assert deploy.poll() is None and time.monotonic() < deadline, "the deploy took no lock"
        time.sleep(0.2)
    by_hand = over_ssh(twin, script)
    out, _ = deploy.communicate(timeout=900)
    assert deploy.returncode == 0, out[-3000:]
    assert by_hand.returncode == 1, by_hand.stderr[-3000:]
    assert "waiting up to" in by_hand.stderr  # it did wait for the deploy
    said = " ".join(by_hand.stderr.split())
    assert "the host changed since the plan was made (the checkout's HEAD is" in said, said
    assert "make the plan again" in said
    steps = re.findall(r"^== \d+\. .*$", by_hand.stderr, re.M)
    ran = [x for x in steps[1:] if ": not run (the run stopped: " not in x]
    assert all(x.endswith(". Remove the scratch clone") for x in ran), steps  # none after it
    assert server_starts(twin) == starts + 1, (out[-2000:], by_hand.stderr[-2000:])
    assert probe_inside(twin).outcome == "parsed"


@pytest.mark.parametrize(
    ("when", "rerun_with"),
    [("during-the-build", "deploy"), ("after-the-fast-forward", "script")],
)
def test_kill_sweep_over_the_manual_script(make_twin, tmp_path, when, rerun_with):
    """The laptop dies mid-script: SIGKILL of the remote shell at two points. The
    checkout never holds an uncommitted change, and rerunning the script or the deploy
    finishes the job, healthy and durable."""
    from tests.conftest import out_of_sync, status_settings, twin_inventory
    from tests.twin.test_crash_safety import _kill_point, scratch_clones
    from tests.twin.test_manual_and_audit import over_ssh

    twin = make_twin(with_emergency_override=True)
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    profile = twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout.strip()
    data = {}
    if when == "during-the-build":  # a build that takes a while: vllm-tt compiles
        machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
        data["allow_local_build"] = True
    inventory = twin_inventory(tmp_path / "inv.py", twin, **data)
    script = subprocess.run(
        ["remedy", "runbooks", "show", "006", "--manual", "--inventory", str(inventory),
         "--host", twin.name],
        capture_output=True, text=True, cwd=PROJECT, check=True,
    ).stdout  # fmt: skip
    remote = subprocess.Popen(
        [*twin.ssh_argv(), "sh", "-s"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip
    remote.stdin.write(script)
    remote.stdin.close()
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and remote.poll() is None:
            if _kill_point(twin, when, head, profile):
                break
            time.sleep(0.05)
        assert remote.poll() is None, f"the script ended before {when}"
        # the shell that runs the script (sh -s under sshd), then the person's client
        twin.exec(["pkill", "-KILL", "-f", "^sh -s"], check=False)
    finally:
        if remote.poll() is None:
            os.killpg(remote.pid, signal.SIGKILL)
        remote.wait(timeout=60)
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    time.sleep(1)  # the killed shell's lock goes with it
    if rerun_with == "script":
        rerun = over_ssh(twin, script)
        said = rerun.stderr
    else:
        argv = ["pyinfra", "-y", *RESTART_NOW, str(inventory), "deploys/converge.py"]
        rerun = subprocess.run(
            argv, cwd=PROJECT, capture_output=True, text=True, timeout=900,
            env={**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")},
        )  # fmt: skip
        said = rerun.stdout + rerun.stderr
    assert rerun.returncode == 0, said[-3000:]
    code, settings = status_settings(twin)
    assert code == 0 and out_of_sync(settings) == set(), settings
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert scratch_clones(twin) == []
    assert twin.exec(["test", "-e", JOURNAL], check=False).returncode != 0
