"""remedy.fleet's bounds on each host (issue 43 A2): a host past its deadline, or still
in its phase's work a grace after the stop request, is given up and named; its wait for
its turn is not counted. Real greenlets, no host."""

from __future__ import annotations

import signal

import gevent

from remedy import fleet, lifecycle
from remedy.core.config import host_data as settings_mod
from remedy.core.run import rollout as rollout_core


class Host:
    def __init__(self, name, **data):
        self.name, self.data, self.connector = name, data, None


class State:
    def __init__(self):
        self.failed = set()

    def fail_hosts(self, hosts):
        self.failed |= {h.name for h in hosts}


def bounds(run, *hosts, said=None):
    runs = {h.name: fleet.HostRun(h.name) for h in hosts}
    return fleet._Bounds(
        run, State(), list(hosts), 0.0, runs, (said if said is not None else []).append
    )


def test_a_host_past_its_deadline_is_given_up_in_the_step_it_was_in():
    run = lifecycle.Run("r")
    b = bounds(run, Host("a", host_deadline_s=100), Host("b"))
    run.steps_now = {"a": "Prove the build holds the desired state", "b": None}
    assert b.over("a", "its steps", 0.0, 99.0) is None
    gave_up = b.over("a", "its steps", 0.0, 100.0)
    assert gave_up == lifecycle.GivenUp(
        "given up at its deadline (host_deadline_s=100) during "
        "'Prove the build holds the desired state'",
        lifecycle.GIVEN_UP,
        "Prove the build holds the desired state",
    )
    assert b.over("b", "its steps", 0.0, 100.0) is None  # its default: the step bounds
    assert b.over("b", "its read and plan", 0.0, settings_mod.HostData().deadline_s).why == (
        f"given up at its deadline (host_deadline_s="
        f"{settings_mod.HostData().deadline_s:g}) in its read and plan"
    )


def test_the_wait_for_its_turn_does_not_count():
    run = lifecycle.Run("r")
    b = bounds(run, Host("a", host_deadline_s=100))
    turn = rollout_core.Turn("a", True, True, waited_s=50.0)
    b.rollout = rollout_core.Rollout(rollout_core.Policy(), {"a": turn})
    assert b.over("a", "its steps", 0.0, 149.0) is None
    turn.waiting_since = 140.0  # waiting again now
    assert b.over("a", "its steps", 0.0, 158.0) is None
    assert b.over("a", "its steps", 0.0, 150.0 + 20.0) is None
    turn.waiting_since = None
    assert b.over("a", "its steps", 0.0, 150.0).result == lifecycle.GIVEN_UP


def test_after_a_stop_a_host_still_in_its_step_a_grace_later_is_interrupted_there():
    run = lifecycle.Run("r")
    b = bounds(run, Host("a"))
    run.steps_now = {"a": "Prove the build holds the desired state"}
    run.on_signal(signal.SIGTERM)
    run.snapshot_at_stop()
    at = b.began = run.stopped_at
    assert b.over("a", "its steps", at, at + lifecycle.STOP_GRACE_S - 1) is None
    gave_up = b.over("a", "its steps", at, at + lifecycle.STOP_GRACE_S)
    assert gave_up.result == "interrupted"
    assert gave_up.why.startswith(
        "interrupted by SIGTERM during 'Prove the build holds the desired state'; given up"
    )
    # a later phase gets its own grace
    later = at + 100
    assert b.over("a", "its read after the run", later, later + 1) is None


def test_join_gives_up_a_host_that_never_returns_and_waits_for_the_others():
    run = lifecycle.Run("r")
    said = []
    b = bounds(run, Host("stuck", host_deadline_s=0.5), Host("quick"), said=said)
    b.began = __import__("time").monotonic()
    stuck = gevent.spawn(gevent.sleep, 3600)
    quick = gevent.spawn(gevent.sleep, 0.1)
    b.join({"stuck": stuck, "quick": quick}, "its steps")
    assert stuck.dead and isinstance(stuck.exception, fleet.HostGivenUp)
    assert quick.dead and quick.successful()
    assert set(run.given_up) == {"stuck"} and b.runs["stuck"].given_up
    assert b.state.failed == {"stuck"}
    assert said == [f"stuck: {run.given_up['stuck'].why}"]


def test_host_deadline_s_is_checked_before_connecting_and_defaults_to_the_step_bounds():
    import pytest

    from remedy.errors import ConfigError

    s = settings_mod.from_host_data("h", {"nix_timeout_s": 100, "drain_timeout_s": 10,
                                          "ready_timeout_s": 20, "lock_wait_s": 5})  # fmt: skip
    assert s.deadline_s == 5 + 200 + 20 + 40 + 2 * settings_mod.ROTATION_BOUND_S + 600
    assert settings_mod.from_host_data("h", {"host_deadline_s": "90"}).deadline_s == 90
    for bad in (0, -1, "soon", float("nan"), True):
        with pytest.raises(ConfigError, match="host_deadline_s"):
            settings_mod.from_host_data("h", {"host_deadline_s": bad})
