"""Deciding how to restore tool calling on one host, before anything is touched.

``plan_restore`` is pure: from one ``HostSnapshot`` and the host's settings it
picks the path (noop, durable, fallback) and says why; ``--dry`` prints it.
``RestoreRun`` then carries what execution learns (the proof, the revs, what
failed) from one operation to the next, since some decisions can only be made
after an earlier step ran (whether the bumped input contains the fix).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from remedy.core import commands
from remedy.core import memory as mem
from remedy.core.probe import ProbeResult
from remedy.core.settings import Settings
from remedy.core.snapshot import HostSnapshot

NOOP, DURABLE, FALLBACK = "noop", "durable", "fallback"


@dataclass
class RestorePlan:
    path: str
    reasons: list[str]
    durable_blockers: list[str] = field(default_factory=list)
    bump: bool = False  # the deployed system lacks the fix: bump, prove, commit, switch
    remove_override: bool = False
    restart_expected: bool = False

    def summary(self, host: str) -> str:
        lines = [f"{host}: path {self.path}"]
        lines += [f"  - {r}" for r in self.reasons]
        lines += [f"  - durable path not possible: {b}" for b in self.durable_blockers]
        if self.path != NOOP:
            lines.append(
                "  - the server WILL restart (memory-gated)"
                if self.restart_expected
                else "  - the server will not restart"
            )
        return "\n".join(lines)


def override_dropins(snap: HostSnapshot, s: Settings) -> list[str]:
    """Runtime drop-ins that belong to a tool-calling override: the managed one, or any
    /run drop-in that sets ExecStart. Others (e.g. `set-property --runtime` limits) are
    reported as volatile but never removed."""
    return [
        d.path
        for d in snap.unit.runtime_dropins
        if d.path == s.override_dropin or re.search(r"(?m)^\s*ExecStart=", d.content)
    ]


def override_present(snap: HostSnapshot, s: Settings) -> bool:
    exec_start = snap.unit.now.exec_start
    return bool(override_dropins(snap, s)) or bool(exec_start and exec_start.startswith("/run/"))


def missing_env(env: dict[str, str], s: Settings) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(s.required_env.items()) if env.get(k) != v]


def view_env(view) -> dict[str, str]:
    return {k: v.value for k, v in view.environment.items()} if view else {}


def override_in_place(snap: HostSnapshot, s: Settings) -> bool:
    """What systemd runs now is an override with the wanted parser and environment.

    Judged by effect, not by text: a hand-made override that works is left alone."""
    now = snap.unit.now
    return (
        bool(now.exec_start and now.exec_start.startswith("/run/"))
        and now.parser.value == s.tool_call_parser
        and not missing_env(view_env(now), s)
    )


def durable_blockers(snap: HostSnapshot, s: Settings) -> list[str]:
    """Why the durable path cannot run on this host, each with what to do."""
    out = []
    if not s.durable:
        out.append("disabled by host data (durable=false)")
    if snap.nix is None:
        out.append("Nix is not installed on the host")
    if snap.flake_input is None:
        out.append(snap.flake_error or f"no flake input {s.flake_input!r} in {s.flake_dir}")
    checkout = snap.checkout
    if checkout.problem:
        out.append(f"{s.flake_dir}: {checkout.problem}")
    else:
        other = [c for c in checkout.changes if not c.endswith(" flake.lock")]
        if other:
            out.append(
                f"{s.flake_dir} has uncommitted changes ({'; '.join(other[:3])}); "
                "commit or stash them first, remedy only commits flake.lock"
            )
        if any(c.endswith(" flake.lock") for c in checkout.changes):
            out.append(
                f"{s.flake_dir}/flake.lock has uncommitted changes; commit or revert "
                "them first, remedy will not mix its bump with them"
            )
    if checkout.owner and checkout.owner != "root":
        if not snap.tools.runuser:
            out.append(
                f"{s.flake_dir} belongs to {checkout.owner} and runuser (util-linux) is "
                "missing: remedy runs git and nix as the checkout's owner"
            )
        if not snap.tools.daemon_socket:
            out.append(
                f"{s.flake_dir} belongs to {checkout.owner} and no nix-daemon listens on "
                "/nix/var/nix/daemon-socket/socket: nix as that user needs the daemon "
                "(nix.enable on NixOS)"
            )
    g = snap.generations
    if g.current_system and g.profile and g.current_system != g.profile:
        gen = g.current_generation
        out.append(
            f"the system profile (generation {gen if gen is not None else '?'}, {g.profile}) "
            f"differs from /run/current-system ({g.current_system}): an earlier switch did "
            "not finish, or `nixos-rebuild boot/test` was used; reconcile them by hand "
            "(switch to one of the two) before remedy switches, or a rollback could land "
            "on the wrong generation"
        )
    if not snap.unit.found:
        out.append(f"{s.unit} is not loaded (LoadState={snap.unit.load_state})")
    return out


def plan_restore(snap: HostSnapshot, s: Settings) -> RestorePlan:
    unit, want = snap.unit, s.tool_call_parser
    store = unit.store_script
    store_env_missing = missing_env(view_env(unit.fragment_view), s)
    store_ok = store is not None and store.tool_call_parser == want and not store_env_missing
    override = override_present(snap, s)
    active = unit.active_state == "active"
    busy = snap.probe.outcome == "unreachable" and snap.probe.timed_out and active
    if store_ok and not override and (snap.probe.parsed or busy or snap.probe.inconclusive):
        env = ", ".join(f"{k}={v}" for k, v in sorted(s.required_env.items()))
        reasons = [
            f"the store start script has {want}"
            + (f" and {env}" if env else "")
            + ", and there is no runtime override"
        ]
        if snap.probe.parsed:
            reasons.append("the probe is parsed")
        elif snap.probe.inconclusive:
            reasons.append(
                "the probe was inconclusive (the model answered in prose): not a reason "
                "to restart a server that is configured correctly"
            )
        else:
            reasons.append(
                "the probe timed out: not restarting a running server that is "
                "configured correctly (check `remedy status` again)"
            )
        return RestorePlan(NOOP, reasons)
    if not unit.found:
        return RestorePlan(
            FALLBACK,
            [],
            [f"{s.unit} is not loaded (LoadState={unit.load_state}); nothing to restore"],
        )
    if store_ok:
        # The durable fix is already deployed: cleaning up needs no Nix and no checkout.
        reasons = [f"the deployed configuration already has {want}; no bump needed"]
        if override:
            reasons.append(
                "remove the stale /run override, daemon-reload, restart onto the "
                "durable configuration"
            )
        else:
            reasons.append(f"the probe is {snap.probe.outcome}; restart the server")
        return RestorePlan(DURABLE, reasons, [], False, override, True)
    blockers = durable_blockers(snap, s)
    if not blockers:
        lock = snap.flake_input
        reasons = [
            f"the deployed start script has --tool-call-parser "
            f"{store.tool_call_parser if store else 'none'}"
            + (f" and lacks {', '.join(store_env_missing)}" if store_env_missing else "")
            + f"; bump {s.flake_input} (locked {(lock.rev or '?')[:12]}), prove the "
            f"build runs {want} (all in a scratch clone), fast-forward the checkout to the "
            "lock commit, switch to the proven system"
        ]
        if override:
            reasons.append(
                "remove the stale /run override before switching, so the server restarts once"
            )
        return RestorePlan(DURABLE, reasons, [], True, override, True)
    if override_in_place(snap, s) and (snap.probe.parsed or snap.probe.inconclusive):
        return RestorePlan(
            FALLBACK,
            [
                "the /run override is in place with the wanted parser "
                f"and environment, and the probe is {snap.probe.outcome}; nothing to rewrite"
            ],
            blockers,
            False,
            False,
            False,
        )
    reasons = [
        f"write {s.override_script} and {s.override_dropin} from the store start "
        f"script with --tool-call-parser {want}, daemon-reload, restart"
    ]
    return RestorePlan(FALLBACK, reasons, blockers, False, False, True)


@dataclass
class Proof:
    toplevel: str
    script: str | None
    parser: str
    env: dict[str, str]

    def missing(self, s: Settings) -> list[str]:
        """What the built configuration lacks: the parser, required environment."""
        out = (
            []
            if self.parser == s.tool_call_parser
            else [f"--tool-call-parser {s.tool_call_parser} (it has {self.parser})"]
        )
        return out + missing_env(self.env, s)


@dataclass
class RestoreRun:
    """One host's restore, from plan to outcome; operations read and update it."""

    host: str
    settings: Settings
    before: HostSnapshot
    plan: RestorePlan
    old_rev: str | None = None
    new_rev: str | None = None
    proof: Proof | None = None
    switched: bool = False
    durable_failed: str | None = None  # why the durable path was abandoned
    verification_failed: str | None = None
    rolled_back: bool = False
    refused: str | None = None  # the memory gate said no
    failed: str | None = None  # the run cannot succeed
    restarts: int = 0
    override_written: bool = False
    override_removed: bool = False
    lock_commit: str | None = None
    scratch: str | None = None  # the scratch clone the bump and the build happen in
    new_url: str | None = None  # the bumped input's locked url (for required_fix_rev)
    interrupted: str | None = None  # SIGINT/SIGTERM: finish the step, restore, stop
    hugepages_released: bool = False
    gated: set[str] = field(default_factory=set)  # stages whose memory gate passed
    probe_after: ProbeResult | None = None
    unit_pid_before: int | None = None
    pid_at_override: int | None = None  # MainPID when the /run override took effect
    rollback_failed: str | None = None
    unverified: str | None = None  # the probe stayed inconclusive (prose): not a failure
    local_builds: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.old_rev = self.before.flake_input.rev if self.before.flake_input else None
        self.unit_pid_before = self.before.unit.main_pid

    @property
    def stopped(self) -> bool:
        return bool(self.refused or self.failed or self.interrupted)

    def as_owner(self, argv: list[str]) -> list[str]:
        """ARGV as the flake checkout's owner (git and nix): see commands.as_owner."""
        checkout = self.before.checkout
        return commands.as_owner(checkout.owner, checkout.home, argv)

    @property
    def fallback_active(self) -> bool:
        return not self.stopped and (self.plan.path == FALLBACK or bool(self.durable_failed))

    def idle_reason(self, stage: str) -> str | None:
        """None if STAGE ("durable" or "fallback") is running; otherwise why its steps
        have nothing to do."""
        if self.stopped:
            return f"stopped earlier: {self.refused or self.failed or self.interrupted}"
        if stage == DURABLE:
            if self.plan.path != DURABLE:
                why = "; ".join(self.plan.durable_blockers) or self.plan.path
                return f"durable path not taken ({why})"
            if self.durable_failed:
                return f"durable path abandoned: {self.durable_failed}"
        elif not self.fallback_active:
            return (
                "the durable path restored tool calling; no fallback needed"
                if self.plan.path == DURABLE
                else f"path is {self.plan.path}"
            )
        return None

    def restart_ahead(self, stage: str) -> bool:
        """Whether STAGE is running and will (re)start the server."""
        return self.idle_reason(stage) is None and (
            self.plan.restart_expected or bool(self.durable_failed)
        )

    @property
    def path_taken(self) -> str:
        if self.plan.path == DURABLE and self.durable_failed:
            return "durable+fallback"
        return self.plan.path

    def memory_refusal(self, headroom: mem.MemoryHeadroom) -> str | None:
        gb = headroom.mem_available_kb * 1024 / 1e9
        if gb >= self.settings.min_mem_available_gb:
            return None
        return (
            f"{self.host}: MemAvailable {gb:.1f} GB is below min_mem_available_gb "
            f"{self.settings.min_mem_available_gb:g} GB; not restarting the server "
            f"(a vLLM boot below ~4 GB can hard-freeze the host). {mem.LEAK_ADVICE}."
        )
