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
