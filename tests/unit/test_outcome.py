"""The audit's outcome from pyinfra's results: the host's outcome program decides it
(tests/unit/test_outcome_program.py); here only how its answer and the steps' details
become the record, and what remedy says of a run whose host never gave its outcome."""

from __future__ import annotations

from remedy.core.run.outcome import CHANGED, ERROR, NO_CHANGE, NOT_RUN, StepResult, outcome

OVERRIDE = "serving.runtime_override_written"
TOLD = "serving.outcome_reported"


def step(op, stage, status, ignorable=True, **said):
    return StepResult(op, stage, op, status, ignorable, said)


def told(result, path, code, line, why="", **more):
    said = {"outcome_result": result, "outcome_path": path, "outcome_exit": code,
            "outcome_line": line, "outcome_why": why, **more}  # fmt: skip
    return step(TOLD, "always", NO_CHANGE if result == "ok" else ERROR, False, **said)


def test_the_outcome_is_the_hosts_with_the_steps_details():
    results = [
        step("nix.flake_input_updated", "durable", CHANGED, new_rev="b" * 40),
        step("nix.fix_proven", "durable", ERROR, why="lacks", durable_failed="lacks"),
        step(OVERRIDE, "fallback", CHANGED, notes=["a note"]),
        step("serving.restarted", "fallback", CHANGED, False, restarts=1, requests_cut=2),
        told("ok", "durable+fallback", 3, "path durable+fallback; VOLATILE: x; restarts 1",
             outcome_restarts=1, outcome_new_rev="a" * 40),
    ]  # fmt: skip
    done = outcome("durable", ["x"], results, old_rev="a" * 40)
    assert (done.result, done.path) == ("ok", "durable+fallback")
    assert done.line == "path durable+fallback; VOLATILE: x; restarts 1"
    d = done.details
    assert (d["exit"], d["restarts"], d["new_rev"], d["old_rev"]) == (3, 1, "a" * 40, "a" * 40)
    assert d["durable_failed"] == "lacks" and d["requests_cut"] == 2
    assert d["notes"] == ["a note"] and d["override_held"]
    assert d["changed"] == ["nix.flake_input_updated", OVERRIDE, "serving.restarted"]


def test_what_is_not_ok_goes_where_the_audit_reads_it():
    low = "MemAvailable 0.5 GB is below min_mem_available_gb 100 GB"
    gate = step("memory.headroom_gated", "durable", ERROR, False, refused=low, failed=low)
    done = outcome("durable", ["x"], [gate, told("refused", "durable", 1, "path durable",
                                                 low)])  # fmt: skip
    assert (done.result, done.details["exit"]) == ("refused", 1)
    assert done.details["refused"] == low and done.details["failed"] == low
    stop = "interrupted by SIGTERM during 'Prove'"
    cut = outcome("durable", ["x"], [told("interrupted", "none", 143, "path none", stop)])
    assert cut.details["interrupted"] == stop and cut.details["exit"] == 143


def test_the_line_is_the_hosts_and_the_switchs_changes_stay_details():
    """What only a reboot activates is in the host's line (outcome.sh reads the proof's
    boot lines); the parsed changes stay the audit's details, never said twice."""
    changes = {"reboot_for": ["the kernel"]}
    switched = step("nix.system_switched", "durable", CHANGED)
    proof = step("nix.fix_proven", "durable", CHANGED, switch_changes=changes)
    line = "path durable; the new generation needs a reboot for: the kernel; restarts 0"
    done = outcome("durable", ["x"], [proof, switched, told("ok", "durable", 0, line)])
    assert done.line == line and done.details["switch_changes"] == changes


def test_a_run_whose_host_gave_no_outcome_took_only_the_path_it_reached():
    """Issue 43 A3 (remedy's own view: the host was given up, lost, or the run killed)."""
    proving = [
        step("nix.flake_input_updated", "durable", CHANGED),
        step("nix.fix_proven", "durable", NOT_RUN),
        step("nix.system_switched", "durable", NOT_RUN),
        step(OVERRIDE, "fallback", NOT_RUN),
        step(TOLD, "always", NOT_RUN, False),
    ]
    cut = outcome("durable", ["x"], proving, interrupted="interrupted by SIGTERM")
    assert (cut.result, cut.path, cut.details["exit"]) == ("interrupted", "none", 143)
    gone = outcome("durable", ["x"], proving, given_up="given up at its deadline")
    assert (gone.result, gone.path) == ("given up", "none")
    assert gone.details["failed"] == gone.details["given_up"] == "given up at its deadline"
    assert "GIVEN UP: given up at its deadline" in gone.line
    lost = outcome("durable", ["x"], proving, host_failed=True)
    assert lost.result == "failed" and "nix.fix_proven" in lost.details["failed"]
    crashed = outcome("durable", ["x"], proving)
    assert crashed.result == "crashed" and "nix.fix_proven" in crashed.details["failed"]
    switched = [*proving[:2], step("nix.system_switched", "durable", CHANGED)]
    assert outcome("durable", ["x"], switched, interrupted="i").path == "durable"
    held = [step(OVERRIDE, "fallback", CHANGED)]
    assert outcome("fallback", ["x"], held, given_up="g").path == "fallback"
    assert outcome("durable", ["x"], [*switched, *held], interrupted="i").path == (
        "durable+fallback"
    )
    # given up at its deadline after the host answered: remedy's word stands
    answered = [*held, told("ok", "fallback", 3, "path fallback")]
    assert outcome("fallback", ["x"], answered, given_up="g").result == "given up"
