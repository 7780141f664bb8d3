"""Issue 30: the fleet's rollout as values (remedy.core.run.rollout) and its gates run by
greenlets as a fleet run runs them (remedy.rollout), without hosts."""

from __future__ import annotations

import dataclasses
import json
import sys
from types import SimpleNamespace

import gevent
import pytest

from remedy.core.config.host_data import from_host_data
from remedy.core.run import rollout as core
from remedy.core.run.stop import StopRequest
from remedy.errors import ConfigError
from remedy.rollout import COMMIT_STEP, Gates


def turns(*spec: str) -> list[core.Turn]:
    """'a:r' a host that restarts, 'b:c' one that changes without a restart, 'c:-' a
    noop."""
    out = []
    for item in spec:
        name, kind = item.split(":")
        out.append(core.Turn(name, kind != "-", kind == "r"))
    return out


def test_the_first_host_that_changes_is_the_canary_and_goes_alone():
    r = core.Rollout.of(core.Policy(max_restarting=2), turns("a:-", "b:r", "c:r", "d:r"))
    assert [t.host for t in r.canaries] == ["b"]
    assert r.turn("c", 0) == core.WAIT  # the canary has not ended
    assert r.waits_for("c") == "waiting for the canary b"
    assert r.turn("b", 0) == core.GO and r.turns["b"].wave == 1
    r.finished("b", None, 1, 5)
    assert r.turns["b"].budget_s == 5 and r.turns["b"].state == core.CONVERGED
    assert r.turn("c", 6) == core.GO and r.turn("d", 6) == core.GO  # two places
    assert (r.turns["c"].wave, r.turns["d"].wave) == (2, 2)
    assert r.turns["c"].waited_s == 6


def test_at_most_max_restarting_hold_a_place_and_the_inventory_order_goes_first():
    r = core.Rollout.of(core.Policy(canary=0), turns("a:r", "b:r", "c:r", "d:c"))
    assert r.turn("a", 0) == core.GO
    assert r.turn("c", 1) == core.WAIT
    assert r.turn("b", 1) == core.WAIT
    assert r.turn("d", 1) == core.GO  # no restart ahead: no place needed
    assert r.holders == ["a"]
    assert "1 of 1 held: a" in r.waits_for("b")
    r.release("a", 3)
    assert r.turn("c", 3) == core.WAIT  # b waited first in inventory order
    assert r.turn("b", 3) == core.GO and r.turn("c", 3) == core.WAIT


def test_a_failure_past_max_failures_stops_the_rest_and_names_the_host():
    r = core.Rollout.of(core.Policy(canary=0, max_failures=1, max_restarting=3),
                        turns("a:r", "b:r", "c:r"))  # fmt: skip
    for name in "ab":
        assert r.turn(name, 0) == core.GO
    r.finished("a", "the switch failed", 1, 1)
    assert r.stopped is None  # one failure is allowed
    r.finished("b", "verify: unparsed", 1, 2)
    why = r.turn("c", 3)
    assert why == "the rollout stopped after b failed (verify: unparsed)"
    r.not_started("c", f"not started: {why}", 3)
    assert r.counts() == {**dict.fromkeys(core.STATES, 0), "failed": 2, "not started": 1}


def test_a_failed_canary_stops_the_rollout_whatever_max_failures():
    r = core.Rollout.of(core.Policy(max_failures=5), turns("a:r", "b:r"))
    r.turn("a", 0)
    r.finished("a", "tool calls unparsed after the switch", 1, 1)
    assert r.turn("b", 2) == (
        "the rollout stopped after the canary a failed (tool calls unparsed after the switch)"
    )


def test_named_canaries_go_first_even_when_later_in_the_inventory():
    r = core.Rollout.of(core.Policy(canary=("c",), max_restarting=2), turns("a:r", "b:r", "c:r"))
    assert r.turn("a", 0) == core.WAIT and r.turn("c", 0) == core.GO


@pytest.mark.parametrize(
    "data,words",
    [
        ({"max_restarting": 0}, "'max_restarting' must be at least 1"),
        ({"rotation_out": "lb drain"}, "'rotation_out' must be a list of arguments"),
        ({"rotation_in": ["lb", "{name}"]}, "'rotation_in[1]' names {name}"),
        ({"canary": []}, "'canary' must name at least one host"),
        ({"max_failures": -1}, "'max_failures' must not be negative"),
    ],
)
def test_bad_rollout_values_are_refused_naming_the_key(data, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("{", r"\{")):
        from_host_data("g01", data)


def test_the_fleet_keys_must_agree_and_a_named_canary_must_be_in_the_inventory():
    one, two = from_host_data("g01", {}), from_host_data("g02", {"max_restarting": 2})
    with pytest.raises(ConfigError, match="'max_restarting' differs between hosts"):
        core.policy_of({"g01": one, "g02": two}, "fleet.py", ["g01", "g02"])
    canary = {n: from_host_data(n, {"canary": ["g09"]}) for n in ("g01", "g02")}
    with pytest.raises(ConfigError, match="'canary' names g09, not a host of this inventory"):
        core.policy_of(canary, "fleet.py", ["g01", "g02"])
    assert core.policy_of({"g01": one}, "fleet.py", ["g01"]) == core.Policy()


def test_a_boot_pending_or_noop_plan_takes_no_budget():
    def plan(**changed):
        durable = dict(path="durable", boot_only=False, restart_expected=True, rebuild=True,
                       finish_switch=None)  # fmt: skip
        return SimpleNamespace(**{**durable, **changed})

    assert core.needs_budget(plan())
    assert not core.needs_budget(plan(boot_only=True, restart_expected=False))
    assert not core.needs_budget(plan(path="noop", rebuild=False, restart_expected=False))


# ---------------------------------------------------------------- the gates, run


@dataclasses.dataclass
class FakeRestore:
    """What Gates reads of a host's run: its settings, and an outcome (see fake_outcome)."""

    host_data: object
    failed: str | None = None
    probe_after: str = "parsed"


def fake_outcome(restore, stop, host_failed, ended):
    details = {"restarts": 1, "probe_after": restore.probe_after, "failed": restore.failed}
    result = "failed" if restore.failed or host_failed else "ok"
    return SimpleNamespace(result=result, details=details, line="path durable")


def run_fleet(spec, policy, monkeypatch, settings=None, fail=()):
    """Each host's steps as greenlets, as remedy.fleet runs them: a build, the commit
    step, a restart window of 0.05 s, the end of the window. The restart windows as
    (host, start, end) in a shared clock."""
    monkeypatch.setattr("remedy.rollout.host_outcome", fake_outcome)
    clock = iter(range(1, 10_000))
    now = lambda: next(clock)  # noqa: E731
    rollout = core.Rollout.of(policy, turns(*spec))
    restores = {
        t.host: FakeRestore(settings or from_host_data(t.host, {}),
                            "verify: unparsed" if t.host in fail else None)
        for t in rollout.turns.values()
    }  # fmt: skip
    said: list[str] = []
    gates = Gates(rollout, restores, StopRequest(), said.append, clock=now)
    windows: list[tuple[str, int, int]] = []

    def host(name: str) -> None:
        gevent.sleep(0.01)  # the build, in parallel
        if gates.before(name, COMMIT_STEP):
            start = now()
            gevent.sleep(0.05)  # drain, switch, verify
            windows.append((name, start, now()))
        gates.before(name, "scratch_removed")
        gates.end(name, False)

    gevent.joinall([gevent.spawn(host, t.host) for t in rollout.turns.values()])
    return rollout, windows, said


def overlapping(windows) -> int:
    """The most windows open at one moment."""
    edges = sorted([(s, 1) for _, s, _ in windows] + [(e, -1) for _, _, e in windows])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_restarts_never_overlap_with_a_budget_of_one_and_the_canary_ends_first(monkeypatch):
    rollout, windows, said = run_fleet(("a:r", "b:r", "c:r", "d:r"), core.Policy(), monkeypatch)
    assert overlapping(windows) == 1 and len(windows) == 4
    canary = next(w for w in windows if w[0] == "a")
    assert all(canary[2] < w[1] for w in windows if w[0] != "a")
    assert {t.state for t in rollout.turns.values()} == {core.CONVERGED}
    assert "b: waiting for the canary a" in said


def test_a_budget_of_two_lets_two_restart_at_once(monkeypatch):
    _, windows, _ = run_fleet(
        ("a:r", "b:r", "c:r", "d:r", "e:r"), core.Policy(max_restarting=2), monkeypatch
    )
    assert overlapping(windows) == 2


def test_a_failing_canary_keeps_every_other_host_from_starting(monkeypatch):
    rollout, windows, said = run_fleet(("a:r", "b:r", "c:r"), core.Policy(), monkeypatch,
                                       fail=("a",))  # fmt: skip
    assert [w[0] for w in windows] == ["a"]
    for name in "bc":
        assert rollout.turns[name].state == core.NOT_STARTED
        assert rollout.turns[name].why == (
            "not started: the rollout stopped after the canary a failed (verify: unparsed)"
        )


def test_rotation_hooks_run_once_each_around_the_restart_in_order(monkeypatch, tmp_path):
    log = tmp_path / "rotation.log"
    script = f"import sys; open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')"
    hook = [sys.executable, "-c", script]
    s = from_host_data("x", {"rotation_out": [*hook, "out", "{host}", "{server_url}"],
                             "rotation_in": [*hook, "in", "{host}"]})  # fmt: skip
    _, windows, _ = run_fleet(("a:r", "b:r", "c:c"), core.Policy(), monkeypatch, settings=s)
    lines = log.read_text().splitlines()
    assert lines == ["out a http://127.0.0.1:8000", "in a", "out b http://127.0.0.1:8000", "in b"]


def test_a_failing_rotation_out_keeps_that_host_from_restarting(monkeypatch):
    failing = from_host_data("x", {"rotation_out": [sys.executable, "-c", "raise SystemExit(3)"]})
    rollout, windows, said = run_fleet(("a:r", "b:r"), core.Policy(), monkeypatch, settings=failing)
    assert windows == []  # neither restarted; the canary not starting is no failure
    why = rollout.turns["b"].why
    assert {t.state for t in rollout.turns.values()} == {core.NOT_STARTED}
    assert why.startswith("not started: rotation_out ") and "exited 3" in why, why
    assert why.endswith("not restarted this run")


def test_a_failing_rotation_in_is_a_failure_of_the_rollout(monkeypatch):
    failing = from_host_data("x", {"rotation_in": [sys.executable, "-c", "raise SystemExit(4)"]})
    rollout, windows, _ = run_fleet(("a:r", "b:r"), core.Policy(), monkeypatch, settings=failing)
    assert rollout.turns["a"].state == core.FAILED
    assert "rotation_in" in rollout.turns["a"].why and "exited 4" in rollout.turns["a"].why
    assert rollout.turns["b"].state == core.NOT_STARTED  # the canary failed


def test_the_canary_data_of_the_command_line():
    from remedy.cli.converge import _canary_data

    assert _canary_data("2") == "2"
    assert json.loads(_canary_data("g01, g02")) == ["g01", "g02"]


def test_a_named_canary_that_could_not_be_planned_stops_the_rollout():
    down = core.Turn("a", False, False, state=core.UNREACHED, why="could not connect over SSH")
    r = core.Rollout.of(core.Policy(canary=("a",)), [down, *turns("b:r")])
    assert r.turn("b", 0) == (
        "the rollout stopped after the canary a failed (could not connect over SSH)"
    )
