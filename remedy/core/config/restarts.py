"""When a vLLM restart may happen: urgency per setting, restart windows, an idle server.

Every restart reloads a 27B model for minutes, cuts the requests in flight, and
below ~4 GB of MemAvailable can freeze the host (tt-stack#49). So each managed
setting declares what its live drift justifies:

* ``now``: tool calls unparsed (the parser), requests failing (Phase 2a on, #52);
* ``window``: SDPA streaming, the merge batch guard, a stale /run override;
* ``reboot``: the part of the hugepage pool that cannot be released at runtime.

Host data ``restart_urgency`` overrides it per setting; ``restart_window``
(``"Mon..Fri 02:00-04:00"``, ``"02:00-04:00"``, ``always``, ``never``: the
default) says when a ``window`` restart may run, in the serving host's local
time; ``restart`` (``--restart``, ``--data restart=``) overrides that for one run.
Before any restart the server is drained: vLLM's ``/metrics`` gauges
``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` must both be 0 and
no connection to its port busy (remedy/host/steps/drain.sh decides), bounded by
``drain_timeout_s``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

NOW, WINDOW, REBOOT = "now", "window", "reboot"
URGENCIES = (NOW, WINDOW, REBOOT)
ALWAYS, NEVER = "always", "never"
RUN_POLICIES = (NOW, WINDOW, NEVER)  # --restart

# What each managed setting's live drift justifies (remedy.core.config.desired's keys).
DEFAULT_URGENCY = {
    "tool_call_parser": NOW,
    "phase2a": NOW,
    "QWEN36_SDPA_STREAMING": WINDOW,
    "QWEN36_MERGE_BATCH_GUARD": WINDOW,
    "runtime_override": WINDOW,
    "hugepages": REBOOT,
}
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WINDOW_RE = re.compile(
    r"^(?:(?P<days>[A-Z][a-z]{2}(?:\.\.[A-Z][a-z]{2}|(?:,[A-Z][a-z]{2})*))\s+)?"
    r"(?P<start>\d{2}:\d{2})-(?P<end>\d{2}:\d{2})$"
)
EXAMPLE = '"Mon..Fri 02:00-04:00", "02:00-04:00", "always" or "never"'


class WindowError(ValueError):
    pass


@dataclass(frozen=True)
class Window:
    """``always``, ``never``, or DAYS (0 = Monday; None: every day) START-END in minutes
    of the host's local day; an END before START runs past midnight (the day is the
    start's)."""

    kind: str  # "always" | "never" | "daily"
    days: frozenset[int] | None = None
    start: int = 0
    end: int = 0

    def is_open(self, local: datetime) -> bool:
        if self.kind != "daily":
            return self.kind == ALWAYS
        minute = local.hour * 60 + local.minute
        today = local.weekday()
        if self.start < self.end:
            return self._day(today) and self.start <= minute < self.end
        # past midnight: open from START today, or until END for yesterday's window
        return (self._day(today) and minute >= self.start) or (
            self._day((today - 1) % 7) and minute < self.end
        )

    def next_start(self, local: datetime) -> datetime | None:
        """When it next opens after LOCAL (None: never)."""
        if self.kind == NEVER:
            return None
        if self.kind == ALWAYS:
            return local
        base = local.replace(second=0, microsecond=0)
        for days_ahead in range(8):
            day = base + timedelta(days=days_ahead)
            at = day.replace(hour=self.start // 60, minute=self.start % 60)
            if at > local and self._day(at.weekday()):
                return at
        return None

    def _day(self, weekday: int) -> bool:
        return self.days is None or weekday in self.days

    def describe(self) -> str:
        if self.kind != "daily":
            return self.kind
        days = "" if self.days is None else ",".join(DAYS[d] for d in sorted(self.days)) + " "
        return f"{days}{_hhmm(self.start)}-{_hhmm(self.end)}"


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _minutes(text: str) -> int:
    hours, minutes = int(text[:2]), int(text[3:])
    if hours > 23 or minutes > 59:
        raise WindowError(f"{text} is not a time of day (00:00 to 23:59)")
    return hours * 60 + minutes


def parse_window(text: str) -> Window:
    """A restart_window value; WindowError names what is wrong."""
    value = text.strip()
    if value.lower() in (ALWAYS, NEVER):
        return Window(value.lower())
    # day names in any case: mon..fri is Mon..Fri
    value = re.sub(r"\b[A-Za-z]{3}\b", lambda m: m[0].title(), value)
    if value in (ALWAYS, NEVER):
        return Window(value)
    m = WINDOW_RE.match(value)
    if not m:
        raise WindowError(f"must be like {EXAMPLE}")
    start, end = _minutes(m["start"]), _minutes(m["end"])
    if start == end:
        raise WindowError("starts and ends at the same minute; use always for every minute")
    days = None
    if m["days"]:
        names = m["days"].split("..") if ".." in m["days"] else m["days"].split(",")
        unknown = [n for n in names if n not in DAYS]
        if unknown:
            raise WindowError(f"{unknown[0]} is not a day: use {', '.join(DAYS)}")
        if ".." in m["days"]:
            first, last = DAYS.index(names[0]), DAYS.index(names[1])
            days = frozenset((first + i) % 7 for i in range((last - first) % 7 + 1))
        else:
            days = frozenset(DAYS.index(n) for n in names)
    return Window("daily", days, start, end)


@dataclass(frozen=True)
class RestartDecision:
    """Whether this run may restart the server, and when each pending setting takes
    effect otherwise."""

    allowed: bool
    urgent: list[str]  # settings whose live drift justifies a restart now
    pending: list[str]  # settings that wait (window or reboot)
    when: str  # for the pending ones: "in the next window (Tue 02:00 +0100)", "at next boot"
    why: str  # one line for the plan

    @property
    def needed(self) -> bool:
        return bool(self.urgent or self.pending)


def old_generation_until(restart_window: str) -> str:
    """How long the old generation keeps running when the next boot is right: said as
    RESTART_WINDOW (host data) has it, never promising a window that is never."""
    if restart_window.strip() in ("", "never"):
        return "until a reboot (restart_window is never; --restart now activates it)"
    if restart_window.strip() == "always":
        return "until the next run restarts it (restart_window is always)"
    return f"until a reboot or the restart window {restart_window.strip()}"


# when a person asked for the restart now: it is then now, as for a setting that cannot
# wait (a drain past its bound restarts anyway and says what it cuts; never postponed)
ASKED_NOW = "now (--restart now)"


def when_window(window: Window, run: str | None, local: datetime | None) -> tuple[bool, str]:
    """(a window restart may run now, when it will otherwise) under RUN (--restart)."""
    if run == NOW:
        return True, ASKED_NOW
    if run == NEVER:
        return False, "at next boot (--restart never)"
    if window.kind == ALWAYS:
        return True, "now (restart_window always)"
    if window.kind == NEVER:
        return False, "at next boot (restart_window is never; --restart now restarts at once)"
    if local is None:
        return False, "at a window whose time is unknown (the host's clock was not read)"
    if window.is_open(local):
        return True, f"now (restart_window {window.describe()} is open)"
    start = window.next_start(local)
    if start is None:
        return False, "at next boot (no window ahead; --restart now restarts at once)"
    return False, f"in the next window, {start.strftime('%a %Y-%m-%d %H:%M %z')}"


def decide(
    needs: dict[str, str], window: Window, run: str | None, local: datetime | None
) -> RestartDecision:
    """NEEDS: {setting: its urgency} for every setting whose live drift a restart would
    fix (a reason that is no setting, such as an unhealthy probe, is ``now``)."""
    urgent = sorted(k for k, u in needs.items() if u == NOW)
    waiting = sorted(k for k, u in needs.items() if u == WINDOW)
    at_boot = sorted(k for k, u in needs.items() if u == REBOOT)
    open_now, when = when_window(window, run, local)
    if urgent:
        return RestartDecision(
            True, urgent, [], "now", f"restart now: {', '.join(urgent)} cannot wait"
        )
    if waiting and open_now:
        return RestartDecision(True, waiting, [], when, f"restart {when}")
    pending = waiting + at_boot
    if not pending:
        return RestartDecision(False, [], [], "", "no restart needed")
    if not waiting:
        when = "at next boot"
    return RestartDecision(
        False, [], pending, when, f"no restart: {', '.join(pending)} take effect {when}"
    )
