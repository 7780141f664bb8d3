"""A fleet's rollout, pure: who goes first, how many serving hosts restart at once, when
it stops, and what each host did.

``remedy converge`` runs the steps of every host in one pyinfra run (``remedy.fleet``):
the reads, plans, bumps and builds of all hosts go on in parallel. A host whose plan
changes it stops before its first step that changes it for good (the fast-forward of its
checkout; on the fallback path the /run override comes later still) and asks
``Rollout.turn`` whether it may go on:

* the canary hosts (host data ``canary``: the first N hosts that change, in inventory
  order, or the hosts it names) go first; the others wait until every canary ended
  verified;
* a host whose plan restarts or switches its server holds one of ``max_restarting``
  places from its rotation_out (before the drain) to its rotation_in (after the verify);
  a host that needs no restart (boot pending, or only files) holds none;
* once more than ``max_failures`` hosts failed, or a canary did, no further host goes
  on: each is "not started: the rollout stopped after HOST failed (why)".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from remedy.core.config.host_data import HostData
from remedy.core.run.plan import NOOP
from remedy.errors import ConfigError

GO, WAIT = "go", "wait"
# What each host did, for the table, --json and remedy_rollout_hosts{state}.
UNCHANGED = "unchanged"  # nothing to do
CONVERGED = "converged"  # changed, and verified
FAILED = "failed"
NOT_STARTED = "not started"  # held back before any step that changes it
UNREACHED = "unreached"  # never planned: no connection, an unreadable host
LOCKED = "locked"  # never planned: another run held its lock (or its switch)
STATES = (UNCHANGED, CONVERGED, FAILED, NOT_STARTED, UNREACHED, LOCKED)
ENDED = frozenset(STATES)

FLEET_KEYS = ("max_restarting", "canary", "max_failures")


@dataclass(frozen=True)
class Policy:
    max_restarting: int = 1
    canary: int | tuple[str, ...] = 1
    max_failures: int = 0

    def describe(self) -> str:
        canary = (
            ", ".join(self.canary)
            if isinstance(self.canary, tuple)
            else f"the first {self.canary} that change{'s' if self.canary == 1 else ''}"
        )
        return (
            f"max_restarting {self.max_restarting}, canary {canary}, "
            f"max_failures {self.max_failures}"
        )


def policy_of(settings: dict[str, HostData], inventory: str, names: list[str]) -> Policy:
    """The fleet's policy from its hosts' SETTINGS: each key must be the same on every
    host of the run, and a named canary must be a host of INVENTORY (its NAMES)."""
    values = {}
    for key in FLEET_KEYS:
        seen = {name: getattr(s, key) for name, s in settings.items()}
        if len(set(seen.values())) > 1:
            said = ", ".join(f"{n} {v!r}" for n, v in seen.items())
            raise ConfigError(
                f"{inventory}: data key {key!r} differs between hosts ({said}); it is the "
                "fleet's: set it once, for all hosts (group data)"
            )
        values[key] = next(iter(seen.values()), getattr(Policy, key))
    canary = values["canary"]
    if isinstance(canary, tuple):
        unknown = [n for n in canary if n not in names]
        if unknown:
            raise ConfigError(
                f"{inventory}: data key 'canary' names {', '.join(unknown)}, not a host of "
                f"this inventory (hosts: {', '.join(names)})"
            )
    return Policy(**values)


def needs_budget(plan) -> bool:
    """Whether PLAN restarts or activates the server (a switch may restart it): a boot
    default set for the next boot, or files alone, restart nothing."""
    if plan.path == NOOP or plan.boot_only:
        return False
    return bool(plan.restart_expected or plan.rebuild or plan.finish_switch)


def rotation_argv(argv: tuple[str, ...], host: str, server_url: str) -> list[str]:
    """A rotation_out/rotation_in command for HOST: its placeholders filled in."""
    return [arg.format(host=host, server_url=server_url) for arg in argv]


@dataclass
class Turn:
    """One host's place in the rollout."""

    host: str
    changes: bool  # its plan changes it (not a noop)
    restarts: bool  # it holds a place while it restarts
    canary: bool = False
    wave: int | None = None  # 1: the canaries; then in order of start, max_restarting each
    state: str = "planned"  # planned, waiting, started, then one of STATES
    why: str | None = None  # why it failed or did not start
    held_since: float | None = None
    budget_s: float = 0.0  # time it held a place
    waited_s: float = 0.0  # time it waited at its turn
    waiting_since: float | None = None
    restarts_done: int = 0

    def row(self) -> dict:
        return {
            "host": self.host,
            "outcome": self.state,
            "wave": self.wave,
            "restarts": self.restarts_done,
            "budget_s": round(self.budget_s, 1),
            "waited_s": round(self.waited_s, 1),
            "canary": self.canary,
            "why": self.why,
        }


@dataclass
class Rollout:
    """The rollout of one fleet run: TURNS in inventory order."""

    policy: Policy
    turns: dict[str, Turn]
    failures: list[str] = field(default_factory=list)  # hosts, in the order they failed
    _started: int = 0  # hosts past their turn, canaries not counted

    @classmethod
    def of(cls, policy: Policy, turns: list[Turn]) -> Rollout:
        changing = [t for t in turns if t.changes]
        if isinstance(policy.canary, tuple):
            canaries = [t for t in turns if t.host in policy.canary]
        else:
            canaries = changing[: policy.canary]
        for t in canaries:
            t.canary = True
        # a named canary that never got a plan (unreachable, its lock held) is not verified
        unplanned = [t.host for t in canaries if t.state in (UNREACHED, LOCKED)]
        return cls(policy, {t.host: t for t in turns}, unplanned)

    @property
    def canaries(self) -> list[Turn]:
        return [t for t in self.turns.values() if t.canary]

    @property
    def holders(self) -> list[str]:
        return [t.host for t in self.turns.values() if t.held_since is not None]

    @property
    def stopped(self) -> str | None:
        """Why no further host may start, or None."""
        for name in self.failures:
            turn = self.turns[name]
            if turn.canary:
                return f"the rollout stopped after the canary {name} failed ({turn.why})"
        if len(self.failures) > self.policy.max_failures:
            name = self.failures[self.policy.max_failures]
            return f"the rollout stopped after {name} failed ({self.turns[name].why})"
        return None

    def turn(self, host: str, now: float) -> str:
        """GO (the host goes on: it holds a place if it restarts), WAIT, or why it may
        not start (the rollout stopped)."""
        t = self.turns[host]
        if why := self.stopped:
            return why
        if not self._after_canaries(t):
            return self._wait(t, now)
        if t.restarts:
            if len(self.holders) >= self.policy.max_restarting:
                return self._wait(t, now)
            order = list(self.turns)
            earlier = [self.turns[o] for o in order[: order.index(host)]]
            if any(
                o.state == "waiting" and o.restarts and self._after_canaries(o) for o in earlier
            ):
                return self._wait(t, now)  # a place goes to the host first in the inventory
            t.held_since = now
        if t.waiting_since is not None:
            t.waited_s += now - t.waiting_since
            t.waiting_since = None
        t.state = "started"
        if t.canary:
            t.wave = 1
        else:
            t.wave = (2 if self.canaries else 1) + self._started // self.policy.max_restarting
            self._started += 1
        return GO

    def _after_canaries(self, t: Turn) -> bool:
        """Whether T may go as far as the canaries go: it is one, or they all ended."""
        return t.canary or all(c.state in ENDED for c in self.canaries)

    def _wait(self, t: Turn, now: float) -> str:
        if t.waiting_since is None:
            t.waiting_since = now
        t.state = "waiting"
        return WAIT

    def waited(self, host: str, now: float) -> float:
        """How long HOST has waited for its turn so far (its deadline does not count
        it)."""
        t = self.turns.get(host)
        if t is None:
            return 0.0
        return t.waited_s + (now - t.waiting_since if t.waiting_since is not None else 0.0)

    def waits_for(self, host: str) -> str:
        """What HOST waits for, for the person who watches."""
        t = self.turns[host]
        pending = [c.host for c in self.canaries if c.state not in ENDED]
        if not t.canary and pending:
            return f"waiting for the canary {', '.join(pending)}"
        held = ", ".join(self.holders) or "none"
        return (
            f"waiting for the restart budget ({len(self.holders)} of "
            f"{self.policy.max_restarting} held: {held})"
        )

    def release(self, host: str, now: float) -> None:
        t = self.turns[host]
        if t.held_since is not None:
            t.budget_s += now - t.held_since
            t.held_since = None

    def not_started(self, host: str, why: str, now: float) -> None:
        self.release(host, now)
        t = self.turns[host]
        if t.waiting_since is not None:
            t.waited_s += now - t.waiting_since
            t.waiting_since = None
        t.state, t.why = NOT_STARTED, why

    def finished(self, host: str, failed: str | None, restarts: int, now: float) -> None:
        """HOST's run ended: FAILED says why it failed (None: it did not)."""
        self.release(host, now)
        t = self.turns[host]
        t.restarts_done = restarts
        if t.state == NOT_STARTED:
            return
        if failed:
            t.state, t.why = FAILED, failed
            self.failures.append(host)
        else:
            t.state = CONVERGED if t.changes else UNCHANGED

    def counts(self) -> dict[str, int]:
        """How many hosts ended in each state (remedy_rollout_hosts{state})."""
        out = dict.fromkeys(STATES, 0)
        for t in self.turns.values():
            if t.state in out:
                out[t.state] += 1
        return out

    def rows(self) -> list[dict]:
        return [t.row() for t in self.turns.values()]
