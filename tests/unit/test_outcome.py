"""The audit's outcome is a pure function of pyinfra's results of the steps."""

from __future__ import annotations

import dataclasses

from remedy.core.run.outcome import CHANGED, ERROR, NO_CHANGE, NOT_RUN, StepResult, outcome


def step(op, stage, status, ignorable=True, **said):
    return StepResult(op, stage, op, status, ignorable, said)


def test_a_durable_path_that_gave_up_is_durable_plus_fallback_with_its_reason():
    results = [
        step("nix.flake_input_updated", "durable", CHANGED, new_rev="b" * 40),
        step("nix.fix_proven", "durable", ERROR, why="needs vllm-tt compiled"),
        step("serving.runtime_override_written", "fallback", CHANGED),
        step("serving.restarted", "fallback", CHANGED, ignorable=False, restarts=1),
        step("serving.toolcalling_verified", "fallback", NO_CHANGE, ignorable=False,
             probe_after="parsed"),
    ]  # fmt: skip
    done = outcome("durable", ["x"], results, old_rev="a" * 40)
    assert (done.result, done.path) == ("ok", "durable+fallback")
    assert done.details["durable_failed"] == "needs vllm-tt compiled"
    assert done.details["new_rev"] == "a" * 40  # the checkout stayed where it was
    assert done.details["restarts"] == 1
    assert done.details["changed"] == [
        "nix.flake_input_updated",
        "serving.runtime_override_written",
        "serving.restarted",
    ]
    assert "VOLATILE" in done.line


def test_a_failed_switch_fails_the_run_even_when_the_fallback_holds():
    results = [
        step("nix.system_switched", "durable", ERROR, why="switch-to-configuration failed"),
        step("serving.runtime_override_written", "fallback", CHANGED),
    ]
    assert outcome("durable", ["x"], results).result == "failed"


def test_a_refusal_interrupt_crash_and_unhealthy_noop():
    gate = step("memory.headroom_gated", "fallback", ERROR, ignorable=False, refused="low")
    assert outcome("fallback", ["x"], [gate]).result == "refused"
    ok = [step("nix.flake_input_updated", "durable", CHANGED)]
    assert outcome("durable", ["x"], ok, interrupted="interrupted by SIGINT").result == (
        "interrupted"
    )
    cut = [*ok, step("nix.fix_proven", "durable", NOT_RUN)]
    crashed = outcome("durable", ["x"], cut)
    assert crashed.result == "crashed" and "nix.fix_proven" in crashed.details["failed"]
    noop = outcome("noop", ["in sync"], [], unhealthy="unhealthy: hung")
    assert noop.result == "unhealthy" and noop.line == "nothing to do: in sync"
    assert outcome("noop", ["in sync"], []).result == "ok"


# -- issue 32 item 5: every sentence from what the steps did ------------------------

OVERRIDE = "serving.runtime_override_written"


VERIFY = "serving.toolcalling_verified"


def test_volatile_is_said_only_where_the_override_holds_tool_calling():
    failed_durable = step("nix.fix_proven", "durable", ERROR, why="does not build")
    parsed = step(VERIFY, "fallback", NO_CHANGE, ignorable=False, probe_after="parsed")
    written = outcome(
        "durable", ["x"], [failed_durable, step(OVERRIDE, "fallback", CHANGED), parsed]
    )
    assert "VOLATILE" in written.line
    in_place = outcome("fallback", ["x"], [step(OVERRIDE, "fallback", NO_CHANGE), parsed])
    assert "VOLATILE" in in_place.line
    for status in (ERROR, NOT_RUN):  # refused by the memory gate, a read-only /run, never ran
        held = outcome("durable", ["x"], [failed_durable, step(OVERRIDE, "fallback", status)])
        assert "VOLATILE" not in held.line, status
    gate = step("memory.headroom_gated", "fallback", ERROR, ignorable=False, refused="low")
    assert "VOLATILE" not in outcome("fallback", ["x"], [gate]).line


def test_a_failed_fallback_says_what_its_probe_and_the_journal_say():
    """Issue 43 E5: a canary whose fallback probe stayed unparsed was said to rest on the
    /run override ("VOLATILE"), with "restarts 1" where the host's journal showed the
    server started twice (the switch's activation and the fallback's restart)."""
    results = [
        step("nix.system_switched", "durable", ERROR, why="switch exit 4", switch_exit=4),
        step(OVERRIDE, "fallback", CHANGED),
        step("nix.system_rolled_back", "fallback", CHANGED),
        step("serving.restarted", "fallback", CHANGED, ignorable=False, restarts=1),
        step(VERIFY, "fallback", ERROR, ignorable=False, probe_after="unparsed",
             server_starts=2, failed="fallback verification failed: the probe stays unparsed"),
    ]  # fmt: skip
    done = outcome("durable", ["x"], results)
    assert done.result == "failed" and "VOLATILE" not in done.line, done.line
    assert "the /run override is in place, but the probe after it is unparsed" in done.line
    assert "tool calling is not restored" in done.line
    assert done.details["restarts"] == 2 and "restarts 2" in done.line, done.line
    # no count from the journal: the restarts the steps made
    uncounted = [dataclasses.replace(r, said={**r.said, "server_starts": None}) for r in results]
    assert outcome("durable", ["x"], uncounted).details["restarts"] == 1


def test_flake_lock_left_at_the_old_rev_only_where_it_is():
    old, new = "a" * 40, "b" * 40
    bumped = step("nix.flake_input_updated", "durable", CHANGED, new_rev=new)
    proof_failed = step("nix.fix_proven", "durable", ERROR, why="lacks the fix")
    kept = outcome("durable", ["x"], [bumped, proof_failed], old_rev=old)
    assert f"flake.lock left at {old[:12]}" in kept.line and kept.details["new_rev"] == old
    forwarded = step("nix.flake_lock_committed", "durable", CHANGED)
    exit_100 = step("nix.system_switched", "durable", ERROR, why="exit 100", boot_pending="/x")
    stands = outcome("durable", ["x"], [bumped, forwarded, exit_100], old_rev=old)
    assert "flake.lock left at" not in stands.line
    assert f"flake.lock holds {new[:12]}" in stands.line and stands.details["new_rev"] == new
    switch_failed = step("nix.system_switched", "durable", ERROR, why="exit 1")
    reverted = step("nix.system_rolled_back", "fallback", CHANGED, lock_reverted="c" * 40)
    back = outcome("durable", ["x"], [bumped, forwarded, switch_failed, reverted], old_rev=old)
    assert f"flake.lock left at {old[:12]}" in back.line


def test_a_rollback_that_could_not_run_is_not_a_failed_rollback():
    """After a dropped session the switch may have finished in its transient unit: the
    killed run said ROLLBACK FAILED while the rerun found the host right."""
    lost = "the rollback did not run: the connection to h was lost; ..."
    results = [
        step("nix.system_switched", "durable", ERROR, why="the connection to h was lost"),
        step("nix.system_rolled_back", "fallback", ERROR, rollback_not_run=lost),
    ]
    done = outcome("durable", ["x"], results)
    assert "ROLLBACK FAILED" not in done.line and lost in done.line
    assert done.details["rollback_failed"] is None
    failed = [results[0], step("nix.system_rolled_back", "fallback", ERROR, rollback_failed="x")]
    assert "ROLLBACK FAILED: x" in outcome("durable", ["x"], failed).line


def test_a_run_interrupted_or_given_up_took_only_the_path_it_reached():
    """Issue 43 A3: a host frozen in its proof was recorded on path durable, though it
    never switched."""
    proving = [
        step("nix.flake_input_updated", "durable", CHANGED),
        step("nix.fix_proven", "durable", NOT_RUN),
        step("nix.system_switched", "durable", NOT_RUN),
        step(OVERRIDE, "fallback", NOT_RUN),
    ]
    cut = outcome("durable", ["x"], proving, interrupted="interrupted by SIGTERM")
    assert (cut.result, cut.path) == ("interrupted", "none")
    gone = outcome("durable", ["x"], proving, given_up="given up at its deadline")
    assert (gone.result, gone.path) == ("given up", "none")
    assert gone.details["failed"] == gone.details["given_up"] == "given up at its deadline"
    assert "GIVEN UP: given up at its deadline" in gone.line
    switched = [*proving[:2], step("nix.system_switched", "durable", CHANGED)]
    assert outcome("durable", ["x"], switched, interrupted="i").path == "durable"
    held = [step(OVERRIDE, "fallback", CHANGED)]
    assert outcome("fallback", ["x"], held, given_up="g").path == "fallback"
    assert outcome("durable", ["x"], [*switched, *held], interrupted="i").path == (
        "durable+fallback"
    )
    # a run that ended keeps its plan's path
    assert outcome("durable", ["x"], [step("nix.system_switched", "durable", CHANGED)]).path == (
        "durable"
    )
