"""Whether a reboot is needed, and why (issue 46 item 2).

The reasons, each 0 or 1 in ``remedy_reboot_needed{reason}``:

- ``boot_pending``: the next boot runs another system than the running one (the system
  profile is not /run/current-system). How long: since the later of the two links last
  changed (their own mtimes: ``nix-env --set`` replaces the profile link, boot and every
  switch replace /run/current-system), so the age is a lower bound, never more than
  the truth.
- ``kernel``, ``initrd``: the booted system's kernel (or kernel-modules) or initrd link
  is not the current system's, compared as nixpkgs' ``system.autoUpgrade`` compares
  them (nixos/modules/tasks/auto-upgrade.nix, allowReboot: ``readlink
  /run/booted-system/{initrd,kernel,kernel-modules}`` against the new system's).
- ``kernel_params``: the booted system's kernel-params file is not the current
  system's (as the common extension of that check does: ``&& cat …/kernel-params``).
  A link or file absent on both sides is the same (upstream's readlink prints nothing
  for both).
- ``memory_headroom``: the memory guard's lines in this boot's journal of the serving
  unit, one per start (``remedy-memory-guard: <allowed|refused|forced>: …
  [MemAvailable_kB=N threshold_kB=N]``): MemAvailable at each start against the first
  start after boot. The difference is the leak since boot (the tenstorrent module's
  pinned pages: only a reboot reclaims them). At the rate seen per start, the next
  start that would fall below the threshold is counted in starts, never in time. It is
  needed when the last start was refused, or the next start would fall below.
  Without a guard line the headroom is unknown, and the reason says why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime

GUARD_PREFIX = "remedy-memory-guard: "
# the guard's contract (issue 46 item 1): one line of the serving unit per start
_GUARD_LINE = re.compile(
    r"remedy-memory-guard: (allowed|refused|forced): .*"
    r" \[MemAvailable_kB=(\d+) threshold_kB=(\d+)\]"
)
REASONS = ("boot_pending", "kernel", "initrd", "kernel_params", "memory_headroom")
PROFILE = "/nix/var/nix/profiles/system"
CURRENT = "/run/current-system"
BOOTED = "/run/booted-system"


@dataclass(frozen=True)
class GuardStart:
    """One start of the serving unit as the memory guard judged it."""

    at_us: int  # the journal's __REALTIME_TIMESTAMP
    verdict: str  # allowed | refused | forced
    mem_available_kb: int
    threshold_kb: int
    invocation: str = ""  # _SYSTEMD_INVOCATION_ID of the start


@dataclass
class RebootReadings:
    """What the host printed (facts/reboot.sh); ``read`` False: a recording made before
    the sections existed."""

    read: bool = False
    links: dict[str, dict[str, str]] = field(default_factory=dict)  # booted|current
    params: dict[str, str] = field(default_factory=dict)  # booted|current -> text
    mtimes: dict[str, int] = field(default_factory=dict)  # link path -> its own mtime
    guard: list[GuardStart] = field(default_factory=list)
    # what journalctl printed that is no guard line of the contract (its error words)
    journal_said: list[str] = field(default_factory=list)


def parse(parts: dict) -> RebootReadings:
    """The reboot.* sections of a snapshot's answer (split by remedy.core.readings.sections)."""
    if "reboot.mtimes" not in parts:
        return RebootReadings()
    out = RebootReadings(read=True)
    for sec in parts.get("reboot.links", []):
        for line in sec.lines:
            side, _, rest = line.partition(" ")
            name, _, target = rest.partition(" ")
            if side in ("booted", "current") and name:
                out.links.setdefault(side, {})[name] = target
    for sec in parts.get("reboot.params", []):
        out.params[sec.arg.strip()] = " ".join(" ".join(sec.lines).split())
    for sec in parts.get("reboot.mtimes", []):
        for line in sec.lines:
            stamp, _, path = line.partition(" ")
            if stamp.isdigit() and path:
                out.mtimes[path] = int(stamp)
    for sec in parts.get("reboot.guard", []):
        out.guard, out.journal_said = parse_guard(sec.lines)
    return out


def parse_guard(lines: list[str]) -> tuple[list[GuardStart], list[str]]:
    """journalctl's json lines (MESSAGE, _SYSTEMD_INVOCATION_ID) into the guard's starts,
    oldest first; any other line is kept as what journalctl said."""
    starts, said = [], []
    for line in lines:
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            said.append(line.strip())
            continue
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # journald's form of a message that is not UTF-8
            message = bytes(b for b in message if isinstance(b, int)).decode("utf-8", "replace")
        m = _GUARD_LINE.fullmatch(str(message or "").rstrip())
        stamp = str(entry.get("__REALTIME_TIMESTAMP", ""))
        if not m or not stamp.isdigit():
            continue  # a line that mentions the guard but is not its line
        starts.append(
            GuardStart(int(stamp), m.group(1), int(m.group(2)), int(m.group(3)),
                       str(entry.get("_SYSTEMD_INVOCATION_ID") or ""))
        )  # fmt: skip
    return sorted(starts, key=lambda s: s.at_us), said


@dataclass
class Headroom:
    """MemAvailable at each start of the serving unit since boot (the guard's figures)."""

    starts: list[GuardStart] = field(default_factory=list)
    unknown: str | None = None  # why there are no figures

    @property
    def first_kb(self) -> int | None:
        return self.starts[0].mem_available_kb if self.starts else None

    @property
    def last_kb(self) -> int | None:
        return self.starts[-1].mem_available_kb if self.starts else None

    @property
    def threshold_kb(self) -> int | None:
        return self.starts[-1].threshold_kb if self.starts else None

    @property
    def leak_kb(self) -> int | None:
        """MemAvailable lost since the first start after boot (0 or more)."""
        if not self.starts:
            return None
        return max(self.first_kb - self.last_kb, 0)

    @property
    def leak_per_start_kb(self) -> float | None:
        """The leak per start at the rate seen: None with fewer than two starts."""
        if len(self.starts) < 2:
            return None
        return (self.first_kb - self.last_kb) / (len(self.starts) - 1)

    @property
    def starts_left(self) -> int | None:
        """How many more starts stay at or above the threshold at the rate seen (0: the
        next one falls below); None: no leak seen (fewer than two starts, or none lost)."""
        rate = self.leak_per_start_kb
        if rate is None or rate <= 0:
            return None
        room = self.last_kb - self.threshold_kb
        return max(int(room // rate), 0) if room >= 0 else 0

    @property
    def needed(self) -> bool:
        if not self.starts:
            return False
        return self.starts[-1].verdict == "refused" or self.starts_left == 0


@dataclass
class RebootNeed:
    """The reasons a reboot is needed, with what each one says."""

    reasons: dict[str, bool] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)  # reason -> what differs
    pending_since: datetime | None = None  # boot_pending: the lower bound of its start
    pending_age_s: int | None = None
    headroom: Headroom = field(default_factory=Headroom)
    unread: str | None = None  # the host was read without these sections

    @property
    def needed(self) -> list[str]:
        return [r for r in REASONS if self.reasons.get(r)]

    def to_json(self) -> dict:
        h = self.headroom
        return {
            "needed": self.needed,
            "reasons": {r: bool(self.reasons.get(r)) for r in REASONS},
            "why": self.why,
            "boot_pending_since": self.pending_since.isoformat() if self.pending_since else None,
            "boot_pending_age_s": self.pending_age_s,
            "memory_headroom": {
                "unknown": h.unknown,
                "starts": [
                    {
                        "at_us": s.at_us,
                        "verdict": s.verdict,
                        "mem_available_kb": s.mem_available_kb,
                        "threshold_kb": s.threshold_kb,
                    }
                    for s in h.starts
                ],  # fmt: skip
                "first_start_kb": h.first_kb,
                "last_start_kb": h.last_kb,
                "threshold_kb": h.threshold_kb,
                "leak_since_boot_kb": h.leak_kb,
                "leak_per_start_kb": h.leak_per_start_kb,
                "starts_left": h.starts_left,
            },
            "unread": self.unread,
        }


def need(
    r: RebootReadings, profile: str | None, current: str | None, clock: datetime | None,
    unit: str,
) -> RebootNeed:  # fmt: skip
    """The reasons from the readings R, the real paths of the system PROFILE and the
    CURRENT system (the snapshot's generations) and the host's CLOCK when it was read."""
    out = RebootNeed(reasons=dict.fromkeys(REASONS, False))
    if not r.read:
        out.unread = "this read has no reboot sections (a recording made before them)"
        out.headroom = Headroom(unknown=out.unread)
        return out
    if profile and current and profile != current:
        out.reasons["boot_pending"] = True
        out.why["boot_pending"] = f"the next boot runs {profile}, not the running {current}"
        changed = [r.mtimes[p] for p in (PROFILE, CURRENT) if p in r.mtimes]
        if changed and clock is not None:
            since = max(changed)
            out.pending_since = datetime.fromtimestamp(since, clock.tzinfo)
            out.pending_age_s = max(int(clock.timestamp()) - since, 0)
    if BOOTED in r.mtimes or r.links.get("booted") or "booted" in r.params:
        booted, now = r.links.get("booted", {}), r.links.get("current", {})
        for reason, names in (("kernel", ("kernel", "kernel-modules")), ("initrd", ("initrd",))):
            differ = [n for n in names if booted.get(n, "") != now.get(n, "")]
            if differ:
                out.reasons[reason] = True
                out.why[reason] = "; ".join(
                    f"{n}: booted {booted.get(n) or '(none)'}, current {now.get(n) or '(none)'}"
                    for n in differ
                )
        b, c = r.params.get("booted", ""), r.params.get("current", "")
        if b != c:
            out.reasons["kernel_params"] = True
            out.why["kernel_params"] = f"booted: {b or '(none)'}; current: {c or '(none)'}"
    out.headroom = _headroom(r, unit)
    if out.headroom.needed:
        out.reasons["memory_headroom"] = True
        out.why["memory_headroom"] = headroom_text(out.headroom)
    return out


def _headroom(r: RebootReadings, unit: str) -> Headroom:
    if r.guard:
        return Headroom(starts=list(r.guard))
    if r.journal_said:
        why = f"journalctl could not be read: {r.journal_said[0][:160]}"
    else:
        why = (
            f"no memory guard line in this boot's journal of {unit}: the guard is not "
            "installed, the unit has not started since boot, or the journal no longer "
            "holds the line"
        )
    return Headroom(unknown=why)


def _gb(kb: float) -> str:
    return f"{kb * 1024 / 1e9:.1f} GB"


def headroom_text(h: Headroom) -> str:
    """The memory headroom in one sentence a person reads."""
    if not h.starts:
        return f"unknown: {h.unknown}"
    n = len(h.starts)
    head = (
        f"MemAvailable at the first start after boot {_gb(h.first_kb)}, at the last "
        f"({n} {'start' if n == 1 else 'starts'}) {_gb(h.last_kb)}; "
        f"threshold {_gb(h.threshold_kb)}"
    )
    if h.starts[-1].verdict == "refused":
        return f"{head}; the last start was refused by the guard: a reboot reclaims the leak"
    rate, left = h.leak_per_start_kb, h.starts_left
    if rate is None:
        return f"{head}; one start since boot: no leak rate yet"
    if rate <= 0:
        return f"{head}; no leak seen since boot"
    said = f"{head}; leak since boot {_gb(h.leak_kb)}, {_gb(rate)} a start"
    if left == 0:
        return f"{said}: the next start falls below the threshold"
    return f"{said}: start {left + 1} from now falls below the threshold"
