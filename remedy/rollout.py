"""The rollout's gates in a fleet run: where each host's steps wait for their turn.

``remedy.fleet`` runs the steps of every host in a greenlet of its own and asks
``Gates.before`` before each one. A host whose plan changes it waits before its
first step that changes it for good (``COMMIT_STEP``) until ``remedy.core.run.rollout``
gives it its turn; one that restarts then runs its ``rotation_out`` and holds a place
of the restart budget until its verify is done and its ``rotation_in`` ran
(``WINDOW_END``). A host held back (the rollout stopped, its rotation_out failed, a
stop request) runs no further step but the removal of its scratch clone, and is
audited as "not started" with the reason.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable

from gevent.event import Event

from remedy import hooks
from remedy.core.config.host_data import ROTATION_BOUND_S
from remedy.core.run import outcome as outcome_core
from remedy.core.run import rollout as core
from remedy.core.run.plan import unhealthy
from remedy.operations.results import step_results

COMMIT_STEP = "hugepages"  # the first step after the proof: it changes the host
WINDOW_END = "scratch_removed"  # the first step after the verify of the fallback
KEPT_WHEN_HELD_BACK = ("scratch_removed",)
ROTATION_TIMEOUT_S = ROTATION_BOUND_S  # counted in each host's default deadline
SERVING = ("parsed", "inconclusive")  # a probe that says the server answers tool calls


def host_outcome(restore, stop, host_failed: bool, ended: bool) -> outcome_core.Outcome:
    """RESTORE's outcome from its steps' results so far (as its audit line will say)."""
    return outcome_core.outcome(
        restore.plan.path,
        restore.plan.reasons,
        step_results(restore.flow),
        old_rev=restore.before.flake_input.rev if restore.before.flake_input else None,
        flake_input=restore.host_data.flake_input,
        interrupted=stop.why,
        host_failed=host_failed,
        unhealthy=unhealthy(restore.plan, restore.before),
        ended=ended,
    )


def failure_of(done: outcome_core.Outcome) -> str | None:
    """Why a run with outcome DONE failed, or None when it did not."""
    if done.result == "ok":
        return None
    d = done.details
    return (
        d.get("failed")
        or d.get("durable_failed")
        or d.get("refused")
        or d.get("interrupted")
        or f"{done.result}: {done.line}"
    )


def rotate(which: str, argv: tuple[str, ...], host: str, url: str, say, stop=None) -> str | None:
    """Run a rotation command (no shell) on this machine, in a process group of its own
    (remedy.hooks: ended with all it started when it exits, at ROTATION_TIMEOUT_S, or
    at the stop request STOP: a rotation_out's; a rotation_in runs even after a stop,
    a host must not stay out of rotation); why it failed, or None."""
    cmd = core.rotation_argv(argv, host, url)
    said = f"{which} {shlex.join(cmd)}"
    say(f"{host}: {which}: {shlex.join(cmd)}")
    try:
        done = hooks.run_hook(cmd, ROTATION_TIMEOUT_S, stop)
    except OSError as exc:
        return f"{said}: {exc.strerror or exc}"
    last = done.output.strip().splitlines()[-1:] or ["no output"]
    if done.ended == "timeout":
        return f"{said} did not end within {ROTATION_TIMEOUT_S}s: ended, with its children"
    if done.ended:
        return f"{said} ended: {done.ended}"
    if done.left_running:
        say(
            f"{host}: {which} exited {done.returncode} and left {done.left_running} "
            "process(es) running: ended"
        )
    if done.returncode != 0:
        return f"{said} exited {done.returncode}: {last[0]}"
    return None


class Gates:
    """The rollout's waits and rotation commands around each host's steps."""

    def __init__(
        self,
        rollout: core.Rollout,
        restores: dict,
        stop,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        given_up: dict | None = None,
    ):
        self.rollout, self.restores, self.stop, self.say = rollout, restores, stop, say
        self.clock = clock
        self.given_up = {} if given_up is None else given_up  # host -> lifecycle.GivenUp
        self.held_back: dict[str, str] = {}  # host -> why it did not start
        self.rotation_failed: dict[str, str] = {}  # host -> why its rotation_in failed
        self._changed = Event()

    def _notify(self) -> None:
        changed, self._changed = self._changed, Event()
        changed.set()

    def before(self, name: str, key: str | None) -> bool:
        """Whether host NAME runs its step KEY now (it may wait here for its turn)."""
        if name in self.held_back:
            return key in KEPT_WHEN_HELD_BACK
        turn = self.rollout.turns.get(name)
        if turn is None or not turn.changes:
            return True
        if key == COMMIT_STEP and turn.state == "planned":
            return self._take_turn(name)
        if key == WINDOW_END and turn.held_since is not None:
            self._leave_window(name)
        return True

    def _take_turn(self, name: str) -> bool:
        decided = self._wait_turn(name)
        if decided != core.GO:
            return self._hold_back(name, f"not started: {decided}")
        turn, s = self.rollout.turns[name], self.restores[name].host_data
        what = "canary, " if turn.canary else ""
        if turn.held_since is None:
            self.say(f"{name}: going on ({what}wave {turn.wave}; no restart ahead)")
            return True
        self.say(f"{name}: took the restart budget ({what}wave {turn.wave})")
        if s.rotation_out and (
            why := rotate("rotation_out", s.rotation_out, name, s.server_url, self.say, self.stop)
        ):
            return self._hold_back(name, f"not started: {why}; not restarted this run")
        return True

    def _wait_turn(self, name: str) -> str:
        said = None
        while True:
            if self.stop.why:
                return f"{self.stop.why} before its turn"
            decided = self.rollout.turn(name, self.clock())
            if decided != core.WAIT:
                self._notify()
                return decided
            waits = self.rollout.waits_for(name)
            if waits != said:
                self.say(f"{name}: {waits}")
                said = waits
            self._changed.wait(1.0)

    def _hold_back(self, name: str, why: str) -> bool:
        self.held_back[name] = why
        self.rollout.not_started(name, why, self.clock())
        self.say(f"{name}: {why}")
        self._notify()
        return False

    def _leave_window(self, name: str) -> None:
        """The host's restart is over: back into rotation if its server answers tool
        calls, then its place goes to the next host."""
        restore, s = self.restores[name], self.restores[name].host_data
        done = host_outcome(restore, self.stop, False, ended=False)
        after = done.details.get("probe_after") or restore.before.probe.outcome
        if name in self.given_up:  # what its server does now is not known
            if s.rotation_in:
                self.say(f"{name}: left out of rotation: the run gave it up")
        elif s.rotation_in and after in SERVING:
            if why := rotate("rotation_in", s.rotation_in, name, s.server_url, self.say):
                self.rotation_failed[name] = why
        elif s.rotation_in:
            self.say(f"{name}: left out of rotation: its server answers {after}")
        turn = self.rollout.turns[name]
        self.rollout.release(name, self.clock())
        self.say(f"{name}: released the restart budget after {turn.budget_s:.0f}s")
        self._notify()

    def end(self, name: str, host_failed: bool) -> str | None:
        """Host NAME's steps are over: its place (if it still holds one) goes, and the
        rollout learns whether it failed. Why it failed, or None."""
        restore = self.restores.get(name)
        if restore is None:
            return None
        turn = self.rollout.turns[name]
        if turn.held_since is not None:  # it stopped inside its window
            self._leave_window(name)
        done = host_outcome(restore, self.stop, host_failed, ended=True)
        failed = failure_of(done)
        if name in self.given_up:
            failed = self.given_up[name].why
        if name in self.rotation_failed:
            failed = "; ".join(x for x in (failed, self.rotation_failed[name]) if x)
        if name in self.held_back:
            failed = None
        self.rollout.finished(name, failed, int(done.details.get("restarts") or 0), self.clock())
        if failed:
            self.say(f"{name}: failed: {failed}")
        self._notify()
        return failed
