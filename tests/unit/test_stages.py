"""When a step runs (its stage): one decider, remedy/host/lib.sh ``stage_off``.

The deploy and the manual script both run every step's program; the program decides
from the plan's path, a stop request and what the steps before it recorded in the run
journal whether its stage is on. Here the real library runs under dash and bash
--posix over a run journal in a temporary directory, in the states a run reaches.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from remedy import host

SHELLS = [["dash"], ["bash", "--posix"]]
RUN_ID = "test:1:1"
DURABLE_STEPS = ("durable", "gives-up")


def decide(tmp_path, shell, when: str, failure: str = "gives-up", path: str = "durable",
           stopped: str = "", journal: dict | None = None, mode: str = "check",
           name: str = "step") -> dict:  # fmt: skip
    """Run a step whose own text says 'ran' after the library's stage gate; its answer
    and the journal after."""
    j = tmp_path / "run.json"
    if journal is not None:
        j.write_text(json.dumps({"run_id": RUN_ID, **journal}, indent=1) + "\n")
        j.chmod(0o600)
    program = host.text("lib.sh") + '\nnoop "ran"\n'
    argv = [*shell, "-c", program, f"remedy-{name}", mode, f"journal={j}", f"run_id={RUN_ID}",
            f"when={when}", f"failure={failure}", f"path={path}", f"stopped={stopped}"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [x[len("@@remedy ") :] for x in proc.stdout.splitlines() if x.startswith("@@remedy ")]
    verdict = next(x for x in lines if x.split(" ", 1)[0] in ("noop", "done", "give-up"))
    after = json.loads(j.read_text()) if j.exists() else {}
    return {"runs": verdict == "noop ran", "verdict": verdict, "journal": after}


def runs(tmp_path, shell, when, **kw) -> bool:
    return decide(tmp_path, shell, when, **kw)["runs"]


@pytest.fixture(params=SHELLS, ids=lambda s: s[0])
def shell(request):
    return request.param


def test_a_durable_run_that_holds_runs_no_fallback_step(tmp_path, shell):
    assert runs(tmp_path, shell, "durable", journal={})
    assert not runs(tmp_path, shell, "override", journal={})
    assert not runs(tmp_path, shell, "rollback", journal={})
    assert not runs(tmp_path, shell, "fallback", journal={})
    assert runs(tmp_path, shell, "always", journal={})
    said = decide(tmp_path, shell, "fallback", journal={})["verdict"]
    assert said == "noop the durable path holds: no fallback"


def test_a_durable_step_that_gave_up_stops_the_durable_path_and_starts_the_fallback(
    tmp_path, shell
):
    j = {"durable_failed": "the build lacks the fix"}
    said = decide(tmp_path, shell, "durable", journal=j)["verdict"]
    assert said == "noop the durable path gave up: the build lacks the fix"
    assert runs(tmp_path, shell, "override", journal=j)
    assert not runs(tmp_path, shell, "rollback", journal=j)  # nothing was switched
    assert runs(tmp_path, shell, "fallback", journal=j)


def test_a_failure_after_the_switch_rolls_back_and_a_failed_override_restarts_nothing(
    tmp_path, shell
):
    j = {"durable_failed": "unparsed", "switching": "/nix/store/x", "switch_exit": 0}
    assert runs(tmp_path, shell, "override", journal=j)
    assert runs(tmp_path, shell, "rollback", journal=j)
    j["override_failed"] = "shadowed by zz-mine.conf"
    assert runs(tmp_path, shell, "rollback", journal=j)
    said = decide(tmp_path, shell, "fallback", journal=j)["verdict"]
    assert said == "noop the /run override did not take: shadowed by zz-mine.conf"


def test_the_fallback_plan_runs_the_fallback_steps_only(tmp_path, shell):
    assert not runs(tmp_path, shell, "durable", path="fallback", journal={})
    assert runs(tmp_path, shell, "override", path="fallback", journal={})
    assert runs(tmp_path, shell, "fallback", path="fallback", journal={})
    assert not runs(tmp_path, shell, "rollback", path="fallback", journal={})


def test_a_stop_request_starts_nothing_but_putting_a_removed_override_back(tmp_path, shell):
    stop = "interrupted by SIGINT"
    said = decide(tmp_path, shell, "durable", stopped=stop, journal={})["verdict"]
    assert said == f"noop {stop}: no further step starts"
    assert runs(tmp_path, shell, "override", stopped=stop, journal={"removed": "yes"})
    assert not runs(tmp_path, shell, "fallback", stopped=stop, journal={"removed": "yes"})
    switched = {"removed": "yes", "switching": "/nix/store/x"}
    assert not runs(tmp_path, shell, "override", stopped=stop, journal=switched)
    assert not runs(tmp_path, shell, "override", stopped=stop, journal={})  # nothing removed


def test_a_step_that_stops_the_run_leaves_only_the_steps_that_always_run(tmp_path, shell):
    j = {"failed": "MemAvailable 2.1 GB is below min_mem_available_gb 4 GB"}
    for when in ("durable", "override", "rollback", "fallback"):
        said = decide(tmp_path, shell, when, journal={**j, "durable_failed": "x"})["verdict"]
        assert said == f"noop the run stopped: {j['failed']}", when
    assert runs(tmp_path, shell, "always", journal=j)


def test_a_give_up_is_recorded_by_its_stage_and_failure(tmp_path, shell):
    """What the steps after it read: a durable step that gives up its stage, one that
    stops the run, an override that did not take."""
    program = host.text("lib.sh") + '\ngive_up "it broke"\n'
    cases = [
        (("durable", "gives-up"), "durable_failed"),
        (("durable", "stops"), "failed"),
        (("override", "gives-up"), "override_failed"),
        (("fallback", "stops"), "failed"),
    ]
    for (when, failure), key in cases:
        j = tmp_path / f"{when}-{failure}.json"
        j.write_text(json.dumps({"run_id": RUN_ID}) + "\n")
        j.chmod(0o600)
        argv = [*shell, "-c", program, "remedy-x", "check", f"journal={j}", f"run_id={RUN_ID}",
                f"when={when}", f"failure={failure}",
                f"path={'durable' if when == 'durable' else 'fallback'}", "stopped="]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
        assert "@@remedy give-up it broke" in out
        assert json.loads(j.read_text()).get(key) == "it broke", (when, failure)
        if key == "durable_failed":
            assert "@@remedy say durable_failed it broke" in out
            assert "the durable path is abandoned" in out


def test_an_apply_that_never_answered_fails_its_stage_for_the_next_step(tmp_path, shell):
    """A step killed mid-apply (or whose connection was cut) left its mark: the next
    step records its failure as its stage's and decides on it."""
    j = {"running": "durable gives-up switch"}
    said = decide(tmp_path, shell, "durable", journal=j)
    assert said["verdict"].startswith("noop the durable path gave up: the step switch ended")
    assert "running" not in said["journal"]
    assert said["journal"]["durable_failed"].startswith("the step switch ended without")
    j = {"running": "fallback stops restart"}
    said = decide(tmp_path, shell, "fallback", journal={**j, "durable_failed": "x"})
    assert said["verdict"].startswith("noop the run stopped: the step restart ended")


def test_an_apply_marks_itself_running_until_it_answers(tmp_path, shell):
    program = host.text("lib.sh") + '\necho "marked: $(jget running)"\ndone_ "did it"\n'
    j = tmp_path / "run.json"
    j.write_text(json.dumps({"run_id": RUN_ID}) + "\n")
    j.chmod(0o600)
    argv = [*shell, "-c", program, "remedy-switch", "apply", f"journal={j}", f"run_id={RUN_ID}",
            "when=durable", "failure=gives-up", "path=durable", "stopped="]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    assert "marked: durable gives-up switch" in out
    assert "@@remedy done did it" in out
    assert "running" not in json.loads(j.read_text())


def test_a_step_without_a_stage_is_not_gated(tmp_path, shell):
    """A standalone runbook's program (no run, no stage) runs as it is."""
    program = host.text("lib.sh") + '\nnoop "ran"\n'
    out = subprocess.run([*shell, "-c", program, "remedy-x", "check"], capture_output=True,
                         text=True, timeout=60).stdout  # fmt: skip
    assert "@@remedy noop ran" in out
