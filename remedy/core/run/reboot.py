"""``remedy reboot``, pure: each host's steps' values, its gates, what it became, the
words of its report and its exit code.

A planned reboot of a host goes through, in order (``remedy.reboots`` runs it):

1. **the next boot** (``reboot_ready``): the boot default holds every managed setting,
   proven on the host as a built system is (``system_lacks``); else it is refused,
   naming the settings and the converge to run first;
2. **the window**: the host's ``restart_window`` is open (``--now``: at once);
3. its turn in the rollout's budget (canary, ``max_restarting``, ``max_failures``);
4. **rotation_out**, then **the drain** (``drain``: the server idle within
   ``drain_timeout_s``, else the reboot is postponed);
5. **the reboot** (``reboot``), then the wait for a new SSH session with a new boot id
   within ``reboot_timeout_s``;
6. **after** (``reboot_back``: the serving unit is there; ``verify``: tool calls
   parsed; ``reboot_done``: MemAvailable above the threshold), a read of the host (every
   setting in sync), and ``rotation_in``.

Seams for what other items of issue 46 add: the trial boot (item 4) is armed between
the drain and the reboot and blessed, or fallen back from, after the verify
(``TRIAL_SEAM``); the memory guard (item 1) is the managed setting ``memory_guard``:
proven in the next boot before, in sync after (``GUARD_SEAM``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from remedy.core.config import desired
from remedy.core.config.host_data import HostData
from remedy.core.config.restarts import ALWAYS, NEVER
from remedy.core.programs import step_values as sv
from remedy.core.readings import probe
from remedy.errors import EXIT_ERROR, EXIT_OK, EXIT_UNHEALTHY, worst

# The gates a refusal names.
NEXT_BOOT, WINDOW, DRAIN, ROTATION_OUT = "next boot", "window", "drain", "rotation_out"
TRIAL = "trial boot"  # --trial: the loader has no one-shot entry, or arm refused
# What each host became.
PLANNED = "planned"
REBOOTED = "rebooted"  # back, verified, in sync
REFUSED = "refused"  # a gate said no: nothing changed on it
FAILED = "failed"  # rebooted and not back, or back and not well
NOT_STARTED = "not started"  # the rollout stopped before its turn
INTERRUPTED = "interrupted"  # a stop request (SIGINT, SIGTERM)
UNREACHED = "unreached"  # no SSH session, or the host could not be read
# What failed after the reboot (a HostReboot's fault): each named, each its exit code.
NOT_BACK = "not back"  # no new SSH session with a new boot id within reboot_timeout_s
NO_UNIT = "no serving unit"  # back, and the serving unit failed or is missing
UNVERIFIED = "verify failed"  # back, and tool calls are not parsed
LOW_MEMORY = "below the memory threshold"  # back, MemAvailable below min_mem_available_gb
OUT_OF_SYNC = "out of sync"  # back, and a setting is not in sync (or the host unread)
FAULT_CODES = {NOT_BACK: EXIT_ERROR, NO_UNIT: EXIT_UNHEALTHY, UNVERIFIED: EXIT_UNHEALTHY,
               LOW_MEMORY: EXIT_ERROR, OUT_OF_SYNC: EXIT_ERROR}  # fmt: skip

TRIAL_SEAM = "trial boot (issue 46 item 4): remedy reboot --trial (remedy.reboots._arm, _fall_back)"
GUARD_SEAM = "memory guard (issue 46 item 1): in place after the boot"
DRAIN_SLICE_S = 10  # one call of the drain waits this long: a stop is seen between two
BACK_POLL_S = 2.0  # between two attempts at a new SSH session while the host boots


def ready(s: HostData, run_id: str) -> sv.RebootReady:
    return sv.RebootReady(
        journal=sv.REBOOT_JOURNAL, run_id=run_id, unit=s.unit,
        items=desired.proof_items(s, desired.ALL),
    )  # fmt: skip


def drain(s: HostData, run_id: str, waited_s: float) -> sv.Drain:
    """The drain's next call, WAITED_S into it: a slice of DRAIN_SLICE_S, the last one
    ending drain_timeout_s. Never urgent: a planned reboot waits for an idle server, or
    is postponed."""
    left = max(0, s.drain_timeout_s - int(waited_s))
    return sv.Drain(
        journal=sv.REBOOT_JOURNAL, run_id=run_id, server_url=s.server_url,
        timeout_s=s.drain_timeout_s, urgent=False, wait_s=min(DRAIN_SLICE_S, left),
        last=left <= DRAIN_SLICE_S, first=waited_s == 0,
    )  # fmt: skip


def reboot(host: str, run_id: str) -> sv.Reboot:
    return sv.Reboot(journal=sv.REBOOT_JOURNAL, run_id=run_id, host=host)


def back(s: HostData, run_id: str, boot_id_before: str) -> sv.RebootBack:
    return sv.RebootBack(
        journal=sv.REBOOT_JOURNAL, run_id=run_id, unit=s.unit,
        boot_id_before=boot_id_before, wait_s=s.ready_timeout_s,
    )  # fmt: skip


def verify(s: HostData, run_id: str) -> sv.Verify:
    """The verify of a converge, after the boot: tool calls parsed, and the serving
    process runs with every wanted parser and variable (nothing is deferred now)."""
    from remedy.core.run.steps import serving_wanted

    head, _, tail = probe.request_body(probe.MODEL_MARK).partition(probe.MODEL_MARK)
    return sv.Verify(
        journal=sv.REBOOT_JOURNAL, run_id=run_id, unit=s.unit, stage="reboot",
        server_url=s.server_url, model=s.model, probe_timeout_s=s.probe_timeout_s,
        ready_timeout_s=s.ready_timeout_s, parsed_before=False, probe_head=head,
        probe_tail=tail, items=tuple(serving_wanted(s, set())),
    )  # fmt: skip


def done(host: str, s: HostData, run_id: str, failed: str | None) -> sv.RebootDone:
    return sv.RebootDone(
        journal=sv.REBOOT_JOURNAL, run_id=run_id, host=host,
        min_gb=s.min_mem_available_gb, failed=failed or "",
    )  # fmt: skip


def window_refusal(s: HostData, now: bool, clock: datetime | None) -> str | None:
    """Why the host's restart_window keeps a reboot from running now (None: it may):
    NOW (``--now``) reboots at once."""
    if now:
        return None
    window = s.window
    if window.kind == ALWAYS:
        return None
    if window.kind == NEVER:
        return "restart_window is never (--now reboots at once)"
    if clock is None:
        return f"restart_window {window.describe()}: the host's clock was not read"
    if window.is_open(clock):
        return None
    start = window.next_start(clock)
    at = f"; it opens {start.strftime('%a %Y-%m-%d %H:%M %z')}" if start else ""
    return f"restart_window {window.describe()} is closed{at} (--now reboots at once)"


def fell_back_why(
    host: str, failed: str, trial: str, previous: str, booted: str, defaults: list[str]
) -> str:
    """The report's words for a trial boot whose verify failed and that was rebooted
    into the boot default."""
    never = (
        f"the boot default was never {trial} ({', '.join(defaults)} at each step)"
        if trial not in defaults
        else f"the boot default named {trial} at a step: {', '.join(defaults)}"
    )
    where = (
        f"back on the previous generation {previous}"
        if booted == previous
        else f"booted {booted or '?'}, not the previous generation {previous}"
    )
    return f"the trial boot of {trial} failed ({failed}); fell back: {host} is {where}; {never}"


def settled_why(why: str, settled: str, refused: bool) -> str:
    """A fall back's words, then its settle's: the profile rolled back, naming the
    failed generation (or why it was not)."""
    return f"{why}; not settled: {settled}" if refused else f"{why}; {settled}"


def lacks_refusal(why: str, converge: str) -> str:
    """The next boot's refusal: what it lacks, and the converge to run first."""
    return f"{why}; converge it durably first: {converge}, then reboot"


@dataclass
class HostReboot:
    """One host's reboot, as the report, --json and the audit say it."""

    host: str
    outcome: str = PLANNED
    gate: str | None = None  # the gate that refused it
    why: str | None = None  # why it was refused, failed or stopped
    fault: str | None = None  # what failed after the reboot (FAULT_CODES)
    canary: bool = False
    boot_id_before: str | None = None
    boot_id_after: str | None = None
    mem_before_kb: int | None = None  # MemAvailable before, with the server loaded
    mem_after_kb: int | None = None  # and after, once verified
    boot_default: str | None = None
    earlier: str | None = None  # an earlier run's reboot never verified (its journal)
    reboot_at: float | None = None  # wall clock: the reboot's answer (the last before)
    back_at: float | None = None  # the new SSH session with a new boot id
    verified_at: float | None = None  # the first parsed tool call after
    probe_before: str | None = None  # the tool-call probe before, and after the boot
    probe_after: str | None = None
    status_code: int | None = None  # remedy status's code of the host, read last
    status_verdict: str | None = None
    rotated_out: bool = False
    rotated_in: bool = False
    steps: list[str] = field(default_factory=list)  # what happened, a line each
    needed: list[str] = field(default_factory=list)  # why (converge --reboot-if-needed)
    # --trial: the entry tried once, the default it falls back to, what became of it
    # (armed, blessed, fell back, not back, disarmed, not armed) and the boot default
    # read at each step (arm, the trial's boot, the fall back's boot)
    trial_entry: str | None = None
    trial_previous: str | None = None
    trial_outcome: str | None = None
    trial_defaults: list[str] = field(default_factory=list)
    trial_armed_note: str = ""  # what a power cycle does, should it not come back
    # the host's read after the boot (a remedy.fleet.HostRead; None: not read after
    # one): what converge --reboot-if-needed reports and writes to --textfile for a
    # host it rebooted, never the state from before (not in the JSON)
    read_after: object = field(default=None, repr=False, compare=False)
    # after a fall back: the settle's answer, the failed generation's toplevel and number
    trial_settled: str | None = None
    trial_failed: str | None = None
    trial_failed_generation: str | None = None

    def trial_json(self) -> dict | None:
        if self.trial_outcome is None:
            return None
        return {
            "entry": self.trial_entry,
            "previous": self.trial_previous,
            "outcome": self.trial_outcome,
            "defaults": list(self.trial_defaults),
            "default_never_the_trial": bool(self.trial_entry)
            and self.trial_entry not in self.trial_defaults,
            "settled": self.trial_settled,
            "failed_system": self.trial_failed,
            "failed_generation": self.trial_failed_generation,
        }

    @property
    def reclaimed_gb(self) -> float | None:
        """MemAvailable after minus before, in GB (the memory the reboot reclaimed)."""
        if self.mem_before_kb is None or self.mem_after_kb is None:
            return None
        return round((self.mem_after_kb - self.mem_before_kb) * 1024 / 1e9, 2)

    @property
    def downtime_s(self) -> float | None:
        """From the reboot's answer to the first parsed tool call after."""
        if self.reboot_at is None or self.verified_at is None:
            return None
        return round(self.verified_at - self.reboot_at, 1)

    @property
    def exit_code(self) -> int:
        """As converge's table: the host's status, read last; a reboot that failed is
        never 0 or 6 (an error), and one whose server does not answer is broken (4)."""
        code = EXIT_ERROR if self.status_code is None else self.status_code
        if self.outcome == FAILED:
            fault = FAULT_CODES.get(self.fault, EXIT_ERROR)
            return worst([code, fault]) if code not in (EXIT_OK, 6) else fault
        if self.outcome in (UNREACHED,):
            return EXIT_ERROR
        return code

    def gb(self, kb: int | None) -> str:
        return "?" if kb is None else f"{kb * 1024 / 1e9:.1f} GB"

    def verdict(self) -> str:
        if self.outcome == REBOOTED:
            said = f"rebooted and verified in {self.downtime_s:.0f}s" if self.downtime_s else (
                "rebooted and verified")  # fmt: skip
            return (
                f"{said}: tool calls parsed, every setting in sync; MemAvailable "
                f"{self.gb(self.mem_before_kb)} before, {self.gb(self.mem_after_kb)} after "
                f"({self.reclaimed_gb:+.1f} GB)"
                if self.reclaimed_gb is not None
                else said
            )
        if self.outcome == REFUSED:
            return f"not rebooted: refused at the gate {self.gate!r}: {self.why}"
        return f"{self.outcome}: {self.why}"

    def to_json(self) -> dict:
        return {
            "host": self.host,
            "exit_code": self.exit_code,
            "outcome": self.outcome,
            "verdict": self.verdict(),
            "gate": self.gate,
            "why": self.why,
            "fault": self.fault,
            "canary": self.canary,
            "boot_id_before": self.boot_id_before,
            "boot_id_after": self.boot_id_after,
            "boot_default": self.boot_default,
            "mem_available_before_kb": self.mem_before_kb,
            "mem_available_after_kb": self.mem_after_kb,
            "mem_reclaimed_gb": self.reclaimed_gb,
            "downtime_s": self.downtime_s,
            "reboot_at": self.reboot_at,
            "back_at": self.back_at,
            "verified_at": self.verified_at,
            "earlier": self.earlier,
            "status": {"exit_code": self.status_code, "verdict": self.status_verdict},
            "rotated_out": self.rotated_out,
            "rotated_in": self.rotated_in,
            "steps": list(self.steps),
            "needed": list(self.needed),
            "trial": self.trial_json(),
        }

    def audit_result(self) -> str:
        return {REBOOTED: "ok", REFUSED: "refused", NOT_STARTED: "not started"}.get(
            self.outcome, self.outcome
        )
