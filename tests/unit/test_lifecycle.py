"""The run's lifecycle as a value (remedy.lifecycle.Run): what a signal means in each
phase, and the code a stopped run exits with. Pure: no pyinfra, no signal sent."""

from __future__ import annotations

import signal

from remedy import lifecycle


def test_the_first_signal_stops_and_a_second_kills_before_the_lines():
    run = lifecycle.Run("r")
    assert run.exit_code() is None
    assert run.on_signal(signal.SIGTERM) == lifecycle.STOP
    assert run.stop.why == "interrupted by SIGTERM" and run.exit_code() == 143
    assert run.on_signal(signal.SIGINT) == lifecycle.KILL
    run.in_progress = "Switch to the proven system (tt-stack#49)"
    assert run.killed_why(signal.SIGINT) == (
        "interrupted by SIGTERM, then killed by a second SIGINT during "
        "'Switch to the proven system (tt-stack#49)'"
    )


def test_a_second_signal_while_writing_waits_and_after_writing_exits():
    run = lifecycle.Run("r")
    run.on_signal(signal.SIGINT)
    run.phase = lifecycle.WRITING
    assert run.on_signal(signal.SIGTERM) == lifecycle.DEFER and run.pending_exit == 143
    run.phase = lifecycle.WRITTEN
    assert run.on_signal(signal.SIGTERM) == lifecycle.EXIT
    assert run.exit_code() == 130  # the first signal decides


def test_the_lines_are_written_once():
    run = lifecycle.Run("r")
    written = []
    run.writer = lambda r, killed: written.append(killed)
    run.write()
    run.write()
    run.write(killed="x")
    assert written == [None] and run.phase == lifecycle.WRITTEN


def test_a_run_without_a_recording_writes_nothing():
    run = lifecycle.Run("r")
    run.write()  # a dry run, or one stopped before any host planned
    assert run.phase == lifecycle.RUNNING


def test_a_stop_request_names_the_step_it_came_during():
    """The audit says which step a SIGINT or SIGTERM stopped the run in, not only that
    it was stopped (issue 42: a SIGTERM during the proof was recorded as 'not started')."""
    import signal

    from remedy import lifecycle

    run = lifecycle.Run("test:1:1")
    run.in_progress = "Prove the build holds the desired state (tt-stack#34)"
    assert run.on_signal(signal.SIGTERM) == lifecycle.STOP
    assert run.stop.why == (
        "interrupted by SIGTERM during 'Prove the build holds the desired state (tt-stack#34)'"
    )
    before = lifecycle.Run("test:1:2")
    assert before.on_signal(signal.SIGINT) == lifecycle.STOP
    assert before.stop.why == "interrupted by SIGINT"  # before any step


def test_each_host_of_a_fleet_is_interrupted_in_its_own_step_or_not_at_all():
    """Issue 43 A3: a SIGTERM while one host was frozen in its proof recorded the two
    hosts that had converged as interrupted during 'Report the outcome'."""
    run = lifecycle.Run("r")
    run.steps_now = {"a": None, "b": None, "c": "Prove the build holds the desired state"}
    run.ended = {"a", "b"}
    run.in_progress = "Report the outcome"  # the last step pyinfra started, another host's
    assert run.on_signal(signal.SIGTERM) == lifecycle.STOP
    run.snapshot_at_stop()
    assert run.host_interrupted("a") is None and run.host_interrupted("b") is None
    assert run.host_interrupted("c") == (
        "interrupted by SIGTERM during 'Prove the build holds the desired state'"
    )
    run.ended.add("c")  # what ends after the stop is still the interrupted run
    assert run.host_interrupted("c").endswith("during 'Prove the build holds the desired state'")
    run.steps_now["d"] = None  # waiting for its turn then: interrupted, in no step
    run.snapshot_at_stop()
    assert run.host_interrupted("d") == "interrupted by SIGTERM"


def test_a_second_signal_is_said_per_host_too():
    run = lifecycle.Run("r")
    run.steps_now = {"a": "Switch to the proven system"}
    run.on_signal(signal.SIGINT)
    run.snapshot_at_stop()
    run.killed_by = "SIGTERM"
    assert run.host_interrupted("a", killed="x") == (
        "interrupted by SIGINT during 'Switch to the proven system', then killed by a "
        "second SIGTERM"
    )


def test_a_run_of_one_host_that_tracks_none_says_the_process_why():
    run = lifecycle.Run("r")
    run.in_progress = "Switch to the proven system"
    run.on_signal(signal.SIGTERM)
    run.snapshot_at_stop()
    assert (
        run.host_interrupted("a") == "interrupted by SIGTERM during 'Switch to the proven system'"
    )
    assert lifecycle.Run("r").host_interrupted("a") is None  # not stopped
