"""Issue 42: the manual script and the deploy, from the same state, leave the same host.

Both run the same host programs (tests/unit/test_one_engine.py holds that, byte for
byte); what is left to show is that the two drivers of them (pyinfra's operations and
the script's runner) take the same steps from the same state. Each case brings two
twins to one state, runs the deploy on one and the manual script on the other (a
person's run: the restart is now), and compares what a person would look at after:
the checkout's commits and files, the lock, the next boot's settings, the running
system, the /run override, the restarts, the scratch clones, the probe.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from remedy.core.programs import journal
from remedy.twin import fixtures, machine
from tests.conftest import (
    PROJECT,
    owner_git,
    probe_inside,
    server_starts,
    status_settings,
    twin_inventory,
)
from tests.twin.test_bump_approval import allowed_signers, checkout_clean, locked_rev, out_of
from tests.twin.test_one_implementation import manual_script, over_ssh

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
DROPIN = f"/run/systemd/system/{UNIT}.d/override.conf"
JOURNAL = journal.path(UNIT)
# where the manual script records its run on the host (remedy/host/manual_runner.sh)
MANUAL_RECORD = JOURNAL.replace("/run-", "/manual-runs-").removesuffix(".json") + ".jsonl"


def deploy(inventory, audit_log, *extra: str, restart: str | None = "now",
           name: str = "restore_toolcalling"):  # fmt: skip
    """A deploy (deploys/NAME.py) on one twin's inventory, with its own audit log."""
    argv = ["pyinfra", "-y", *(["--data", f"restart={restart}"] if restart else []), *extra,
            str(inventory), f"deploys/{name}.py"]  # fmt: skip
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(audit_log)}
    return subprocess.Popen(
        argv, cwd=PROJECT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def finished(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, _ = proc.communicate(timeout=900)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


# -- the states -------------------------------------------------------------------


def seed(twin, tmp_path) -> dict:
    """The incident: hermes in the configuration, the emergency override in /run."""
    return {}


def dirty_checkout(twin, tmp_path) -> dict:
    twin.exec(["sh", "-c", f"echo '# a person is editing' >> {fixtures.NIXOS_DIR}/flake.nix"],
              user=fixtures.OWNER)  # fmt: skip
    return {}


def bump_to_off_the_tip(twin, tmp_path) -> dict:
    """bump_to names the fix, and the branch has moved on past it."""
    fix = owner_git(twin, "rev-parse", "HEAD", repo=fixtures.TT_STACK_DIR).stdout.strip()
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(None))
    return {"bump_to": fix}


def unsigned_tip(twin, tmp_path) -> dict:
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(None))
    return {"trusted_signers": str(allowed_signers(twin, tmp_path))}


def pending_generation(twin, tmp_path) -> dict:
    """remedy's own: a converge under the host's policy set the boot default, the old
    generation still runs."""
    done = finished(deploy(inventory_of(twin, tmp_path, {}), tmp_path / "pre.jsonl",
                           restart=None, name="converge"))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    code, _ = status_settings(twin)
    assert code == 6, "the converge left no pending generation"
    return {}


def killed_run(twin, tmp_path) -> dict:
    """A deploy killed (SIGKILL) once its proof is in the run journal: a scratch clone,
    a proven toplevel, the checkout and the system untouched."""
    run = deploy(inventory_of(twin, tmp_path, {}), tmp_path / "pre.jsonl")
    try:
        for _ in range(1200):  # an event, not a speed: the proof is recorded, or the run ended
            got = twin.exec(["cat", JOURNAL], check=False).stdout
            if run.poll() is not None or (got and "toplevel" in json.loads(got)):
                break
            time.sleep(0.25)
        assert run.poll() is None, "the deploy ended before its proof was recorded"
        run.send_signal(signal.SIGKILL)
    finally:
        run.wait()
    assert twin.exec(["sh", "-c", "ls -d /tmp/remedy-bump.*"], check=False).returncode == 0
    return {}


def memory_gate(twin, tmp_path) -> dict:
    """The memory gate refuses (min_mem_available_gb above what any host has): the run
    is refused before anything changes, in both (issue 42: it was "failed" and exit 1
    in the manual script, "refused" in the deploy's audit)."""
    return {"min_mem_available_gb": 100000}


STATES = {
    "seed": seed,
    "dirty_checkout": dirty_checkout,
    "bump_to_off_the_tip": bump_to_off_the_tip,
    "unsigned_tip": unsigned_tip,
    "pending_generation": pending_generation,
    "killed_run": killed_run,
    "memory_gate": memory_gate,
}


def inventory_of(twin, tmp_path, data: dict):
    return twin_inventory(tmp_path / f"{twin.name}.py", twin, **data)


# -- what a person looks at after ---------------------------------------------------


def run_commits(twin, base: str) -> list[str]:
    """The messages of the run's commits, revs as <rev> (each twin's tt-stack has its own)."""
    log = owner_git(twin, "log", "--format=%B%x00", f"{base}..HEAD").stdout
    return [re.sub(r"\b[0-9a-f]{12,40}\b", "<rev>", m.strip()) for m in log.split("\0")
            if m.strip()]  # fmt: skip


def the_run(record: dict, exit_code: int | None = None, twin=None) -> dict:
    """What a person reads of a run: its audit record's result, path, exit code (the run
    outcome's, remedy/host/steps/outcome.sh; or the command's, where given) and its
    summary line (revs, store hashes and the twin's name as <rev>, <hash>, <twin>: each
    twin has its own)."""
    d = record["details"]
    line = d.get("outcome") or ""
    if twin is not None:
        line = re.sub(rf"\b{re.escape(twin.name)}\b", "<twin>", line)
    line = re.sub(r"\b[0-9a-f]{12,40}\b", "<rev>", line)
    line = re.sub(r"/nix/store/[0-9a-z]{32}-", "/nix/store/<hash>-", line)
    return {"result": record["result"], "path": record["path"],
            "exit": d.get("exit") if exit_code is None else exit_code, "line": line}  # fmt: skip


RECORD_TO = os.environ.get("REMEDY_RECORD_ANSWERS")


def record_answers(twin, script: str, case: str, old_rev: str | None = None) -> None:
    """With REMEDY_RECORD_ANSWERS=DIR: the run's answers as the host kept them (lib.sh
    kept), and the outcome program's values as the manual script gives them, one file a
    case, for tests/unit/test_outcome_program.py to replay."""
    if not RECORD_TO:
        return
    answers = twin.exec(["cat", JOURNAL.removesuffix(".json") + ".answers"]).stdout
    fn = script[script.index("values_outcome() {") :]
    fn = fn[: fn.index("\n}\n") + 3]
    settings = next(x for x in script.splitlines() if re.fullmatch(r"path=\S+", x))
    words = subprocess.run(
        ["sh", "-c", f'program() {{ shift 2; printf "%s\\0" "$@"; }}\n{settings}\n{fn}\n'
         'run_id=$1 stopped=""; values_outcome check', "sh", answers.split()[1]],
        capture_output=True, text=True, check=True,
    ).stdout.split("\0")[:-1]  # fmt: skip
    if old_rev is not None:  # the deploy's twin: its own locked rev before the run
        words = [f"old_rev={old_rev}" if w.startswith("old_rev=") else w for w in words]
    # the run the answers are of (a resumed run goes on with the killed one's id)
    rid = answers.split()[1]
    words = [f"run_id={rid}" if w.startswith("run_id=") else w for w in words]
    path = os.path.join(RECORD_TO, f"{case}.json")
    with open(path, "w") as f:
        json.dump({"words": words, "answers": answers}, f, indent=1)
        f.write("\n")


def manual_record(twin) -> dict:
    """The manual script's record of its run, on the host (read before a status imports it)."""
    return json.loads(twin.exec(["cat", MANUAL_RECORD]).stdout.splitlines()[-1])


def last_record(path) -> dict:
    return json.loads(path.read_text().splitlines()[-1])


def end_state(twin, base: str, starts: int) -> dict:
    raw = owner_git(twin, "diff", "--raw", "--no-abbrev", base, "HEAD").stdout
    current = twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip()
    profile = twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout.strip()
    _code, settings = status_settings(twin)
    scratch = twin.exec(["sh", "-c", "ls -d /tmp/remedy-bump.* 2>/dev/null | wc -l"]).stdout
    return {
        # the files the run's commits changed, with their blobs (the messages and the
        # twins' own port commits differ)
        "changes": sorted(x.split(None, 3)[3] + " " + x.split()[3] for x in raw.splitlines()),
        "commits": owner_git(twin, "rev-list", "--count", f"{base}..HEAD").stdout.strip(),
        "checkout_clean": checkout_clean(twin),
        "locked_rev": locked_rev(twin),
        "next_boot": {k: (d["next_boot"], d["state"]) for k, d in settings.items()},
        "running_the_boot_default": current == profile,
        "override": twin.exec(["test", "-e", DROPIN], check=False).returncode == 0,
        "restarts": server_starts(twin) - starts,
        "scratch_clones": int(scratch.strip()),
        "probe": probe_inside(twin).outcome,
    }


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(
            name, marks=[pytest.mark.nix_cli] if name in ("seed", "bump_to_off_the_tip") else []
        )  # fmt: skip
        for name in STATES
    ],
)
def test_the_manual_script_and_the_deploy_leave_the_same_host(state, make_twin, tmp_path):
    by_deploy = make_twin(with_emergency_override=True)
    by_script = make_twin(with_emergency_override=True)
    base, starts, data = {}, {}, {}
    for twin in (by_deploy, by_script):
        base[twin.name] = owner_git(twin, "rev-parse", "HEAD").stdout.strip()
        own = tmp_path / twin.name
        own.mkdir()
        data[twin.name] = STATES[state](twin, own)
        starts[twin.name] = server_starts(twin)

    extra = [x for k, v in data[by_deploy.name].items() for x in ("--data", f"{k}={v}")]
    ran = finished(deploy(inventory_of(by_deploy, tmp_path, {}), tmp_path / "deploy.jsonl",
                          *extra))  # fmt: skip
    script = manual_script(inventory_of(by_script, tmp_path, data[by_script.name]), by_script)
    manual = over_ssh(by_script, script)
    print(f"deploy (exit {ran.returncode}):\n{ran.stdout[-3000:]}")
    print(f"manual script (exit {manual.returncode}):\n{out_of(manual)[-3000:]}")

    recorded = {"deploy": last_record(tmp_path / "deploy.jsonl"),
                "manual script": manual_record(by_script)}  # fmt: skip
    after = {
        "deploy": end_state(by_deploy, base[by_deploy.name], starts[by_deploy.name]),
        "manual script": end_state(by_script, base[by_script.name], starts[by_script.name]),
    }
    assert after["deploy"] == after["manual script"], json.dumps(after, indent=1)
    # one message and one audit record for the same work (issue 43 E6)
    runs = {
        "deploy": (the_run(recorded["deploy"], twin=by_deploy),
                   run_commits(by_deploy, base[by_deploy.name])),
        "manual script": (the_run(recorded["manual script"], twin=by_script),
                          run_commits(by_script, base[by_script.name])),
    }  # fmt: skip
    assert runs["deploy"] == runs["manual script"], json.dumps(runs, indent=1)
    # the manual script exits with its outcome's code, and says its line
    assert manual.returncode == runs["manual script"][0]["exit"], out_of(manual)[-3000:]
    assert recorded["manual script"]["details"]["outcome"] in " ".join(out_of(manual).split())
    record_answers(by_script, script, f"{state}.manual")
    record_answers(by_deploy, script, f"{state}.deploy",
                   recorded["deploy"]["details"].get("old_rev") or "")  # fmt: skip
    ours = "remedy's runbook 001 (tt-stack#49, tt-stack#34, tt-stack#44)"
    if state != "pending_generation":  # (its first commits are the converge's, 006's)
        assert all(ours in m for m in runs["deploy"][1]), runs["deploy"][1]
    # and that state is the one the case is about
    one = after["deploy"]
    assert one["probe"] == "parsed"
    assert one["scratch_clones"] == 0
    run = runs["deploy"][0]
    if state == "memory_gate":  # refused before anything changed; exit 1 in both
        assert (run["result"], run["exit"]) == ("refused", 1), run
        assert "is below min_mem_available_gb 100000 GB" in out_of(manual), out_of(manual)
        assert one["commits"] == "0" and one["override"] and one["restarts"] == 0, one
        return
    if state == "dirty_checkout":  # planned on the /run fallback: ok, exit 3
        assert (run["result"], run["path"], run["exit"]) == ("ok", "fallback", 3), run
    if state == "unsigned_tip":  # the bump gave up the durable path: ok, exit 3
        assert (run["result"], run["path"], run["exit"]) == ("ok", "durable+fallback", 3), run
    if state in ("dirty_checkout", "unsigned_tip"):  # the durable path refused: the fallback
        assert one["commits"] == "0" and one["override"], one
    else:  # durable: the run's commit (and the converge's two before), the override gone
        commits = "2" if state == "pending_generation" else "1"
        assert one["commits"] == commits and not one["override"] and one["checkout_clean"], one
        assert one["running_the_boot_default"], one
    if state == "bump_to_off_the_tip":
        assert one["locked_rev"] == data[by_deploy.name]["bump_to"]


@pytest.mark.parametrize(
    "state", [pytest.param("seed", marks=[pytest.mark.nix_cli]), "dirty_checkout",
              "memory_gate"]
)  # fmt: skip
def test_remedy_converge_and_its_manual_script_exit_record_and_commit_alike(
    state, make_twin, tmp_path
):
    """Issue 43 E6: the converge's lock commit said "Committed by remedy's
    restore_toolcalling deploy", the manual script's remedy.nix commit lacked the issues
    the deploy's named, and on a dirty checkout the two exited and recorded apart. The
    same work (runbook 006 from the same state): one exit code, one audit result and
    path, the same commit messages, naming the runbook and its issues."""
    by_deploy = make_twin(with_emergency_override=True)
    by_script = make_twin(with_emergency_override=True)
    base, data = {}, {}
    for twin in (by_deploy, by_script):
        base[twin.name] = owner_git(twin, "rev-parse", "HEAD").stdout.strip()
        own = tmp_path / twin.name
        own.mkdir()
        data[twin.name] = STATES[state](twin, own)

    log = tmp_path / "deploy.jsonl"
    inventory = inventory_of(by_deploy, tmp_path, data[by_deploy.name])
    ran = subprocess.run(
        ["remedy", "converge", str(inventory), "--restart", "now"],
        cwd=PROJECT, env={**os.environ, "REMEDY_AUDIT_LOG": str(log)},
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    script = manual_script(inventory_of(by_script, tmp_path, data[by_script.name]), by_script,
                           runbook="006")  # fmt: skip
    manual = over_ssh(by_script, script)
    print(f"remedy converge (exit {ran.returncode}):\n{(ran.stdout + ran.stderr)[-3000:]}")
    print(f"manual script (exit {manual.returncode}):\n{out_of(manual)[-3000:]}")
    runs = {
        "remedy converge": (the_run(last_record(log), ran.returncode, by_deploy),
                            run_commits(by_deploy, base[by_deploy.name])),
        "manual script": (the_run(manual_record(by_script), manual.returncode, by_script),
                          run_commits(by_script, base[by_script.name])),
    }  # fmt: skip
    assert runs["remedy converge"] == runs["manual script"], json.dumps(runs, indent=1)
    (run, messages) = runs["remedy converge"]
    if state == "dirty_checkout":  # the durable path refused: the fallback, volatile
        assert (run["exit"], run["result"], run["path"]) == (3, "ok", "fallback"), run
        assert "VOLATILE: tool calling rests on the /run override" in run["line"], run
        assert messages == []
    elif state == "memory_gate":  # refused before anything changed: an error in both
        assert (run["exit"], run["result"]) == (1, "refused"), run
        assert messages == []
    else:  # the lock and remedy's managed file, each naming the runbook and its issues
        assert run["exit"] in (0, 6) and run["path"].startswith("durable"), run
        assert len(messages) == 2, messages
        ours = "remedy's runbook 006 (tt-stack#49, tt-stack#44, tt-stack#52)"
        assert all(ours in m for m in messages), messages
