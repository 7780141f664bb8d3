"""Deciding how to restore tool calling on one host, before anything is touched.

``plan_restore`` is pure: from one ``HostSnapshot`` and the host's settings it
picks the path (noop, durable, fallback) and says why; ``--dry`` prints it.
``RestoreRun`` then carries what execution learns (the proof, the revs, what
failed) from one operation to the next, since some decisions can only be made
after an earlier step ran (whether the bumped input contains the fix).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def _override_present(snap: HostSnapshot) -> bool:
    return bool(snap.unit.runtime_dropins) or bool(
        snap.unit.now.exec_start and snap.unit.now.exec_start.startswith("/run/")
    )


def durable_blockers(snap: HostSnapshot, s: Settings) -> list[str]:
    out = []
    if not s.durable:
        out.append("disabled by host data (durable=false)")
    if snap.nix is None:
        out.append("Nix is not installed on the host")
    if snap.flake_input is None:
        out.append(snap.flake_error or f"no flake input {s.flake_input!r} in {s.flake_dir}")
    if not snap.checkout.is_checkout:
        out.append(f"{s.flake_dir} is not a git checkout")
    else:
        other = [c for c in snap.checkout.changes if not c.endswith(" flake.lock")]
        if other:
            out.append(
                f"{s.flake_dir} has uncommitted changes ({'; '.join(other[:3])}); "
                "commit or stash them first, remedy only commits flake.lock"
            )
        if any(c.endswith(" flake.lock") for c in snap.checkout.changes):
            out.append(
                f"{s.flake_dir}/flake.lock has uncommitted changes; commit or revert "
                "them first, remedy will not mix its bump with them"
            )
    if not snap.unit.found:
        out.append(f"{s.unit} is not loaded (LoadState={snap.unit.load_state})")
    return out


def plan_restore(snap: HostSnapshot, s: Settings) -> RestorePlan:
    unit, want = snap.unit, s.tool_call_parser
    store = unit.store_script
    store_ok = store is not None and store.tool_call_parser == want
    override = _override_present(snap)
    active = unit.active_state == "active"
    if store_ok and snap.probe.parsed and not override:
        return RestorePlan(
            NOOP,
            [
                f"the store start script has {want}, the probe is parsed "
                "and there is no runtime override"
            ],
        )
    if not unit.found:
        return RestorePlan(
            FALLBACK,
            [],
            [f"{s.unit} is not loaded (LoadState={unit.load_state}); nothing to restore"],
        )
    blockers = durable_blockers(snap, s)
    if not blockers:
        reasons, bump = [], not store_ok
        if bump:
            lock = snap.flake_input
            reasons.append(
                f"the deployed start script has --tool-call-parser "
                f"{store.tool_call_parser if store else 'none'}; bump "
                f"{s.flake_input} (locked {(lock.rev or '?')[:12]}), prove the "
                f"build runs {want}, commit flake.lock, nixos-rebuild switch"
            )
        else:
            reasons.append(f"the deployed configuration already has {want}; no bump needed")
        if override:
            reasons.append(
                "remove the stale /run override before switching, so the server restarts once"
            )
        if not bump and not override and not snap.probe.parsed:
            reasons.append(f"the probe is {snap.probe.outcome}; restart the server")
        restart = bump or override or not active or not snap.probe.parsed
        return RestorePlan(DURABLE, reasons, [], bump, override, restart)
    reasons = [
        f"write {s.override_script} and {s.override_dropin} from the store start "
        f"script with --tool-call-parser {want}, daemon-reload, restart"
    ]
    if override and unit.now.parser.value == want and snap.probe.parsed:
        reasons = ["the /run override is already in place and parsed; rewrite only if it differs"]
    return RestorePlan(
        FALLBACK, reasons, blockers, False, False, not (override and snap.probe.parsed)
    )


@dataclass
class Proof:
    toplevel: str
    script: str | None
    parser: str
    env: dict[str, str]

    def contains_fix(self, s: Settings) -> bool:
        return self.parser == s.tool_call_parser


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
    probe_after: ProbeResult | None = None
    unit_pid_before: int | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.old_rev = self.before.flake_input.rev if self.before.flake_input else None
        self.unit_pid_before = self.before.unit.main_pid

    @property
    def stopped(self) -> bool:
        return bool(self.refused or self.failed)

    @property
    def durable_active(self) -> bool:
        return self.plan.path == DURABLE and not self.durable_failed and not self.stopped

    @property
    def fallback_active(self) -> bool:
        return not self.stopped and (self.plan.path == FALLBACK or bool(self.durable_failed))

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
