"""Scheduled convergence: the systemd service and timer that run ``remedy converge``.

remedy runs where the inventory and the SSH keys are, a management host (NixOS
hosts have no Python by default). ``units`` renders the two unit files for
``remedy schedule install``; ``nixos_snippet`` renders the same as NixOS
``systemd.services``/``systemd.timers`` for a management host that runs NixOS.
Pure: paths and values in, text out.
"""

from __future__ import annotations

import math
import re
import shlex
import signal
from dataclasses import dataclass

from remedy.errors import EXIT_ERROR, EXIT_OK, ConfigError

SERVICE = "remedy-converge.service"
TIMER = "remedy-converge.timer"
# A systemd time span: "10min", "1h 30min", "90s", "2d"
SPAN_RE = re.compile(
    r"^\s*(\d+\s*(us|ms|s|sec|second|seconds|m|min|minute|minutes|h|hr|hour|hours|d|day|days"
    r"|w|week|weeks)?\s*)+$"
)
ON_BOOT = "1min"  # soon after the management host boots
RANDOMIZED_DELAY = "30s"
# systemd.time(7) span units, in seconds
_UNIT_S = {
    "us": 1e-6, "ms": 1e-3,
    "s": 1, "sec": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
# The oneshot's exit codes that are not a failure of the unit, beside 0 (healthy and
# durable): 6, boot pending (healthy; the next boot holds every setting, a reboot is
# due) and 3, volatile or drifted (the /run fallback holds production): the run did its
# work and reported a state the textfile carries and the alerts watch
# (RemedySettingVolatile, RemedyRebootPending, with their bounds); a failed unit for it
# would page at once for an expected state. 1 (error), 2 (bad input), 4 (broken: tool
# calls unparsed) and 5 (a lock held past --wait) fail the unit: the run could not do its
# work, or production is broken now.
SUCCESS_EXIT = "3 6"
# The longest --interval taken: a converge timer rarer than yearly is no schedule, and
# systemd overflows on spans past 2^64 microseconds.
MAX_INTERVAL_S = 365 * 86400


# What each exit code of a run means (README, "Every report ends with next:").
EXIT_MEANING = {
    0: "healthy and durable",
    6: "boot pending: healthy, and the next boot holds every setting",
    3: "volatile or drifted: a reboot breaks or changes it",
    4: "broken: tool calls are not parsed, or the server does not run",
    5: "another run held a host's lock, or the fleet's",
    2: "bad input: inventory data, a setting file or a command-line value; nothing ran",
    1: "error: a host could not be read, or the run failed outright",
}


def span_seconds(span: str) -> float:
    """Seconds of a systemd time span ("1h 30min", "90s", a bare number is seconds)."""
    total = 0.0
    for number, unit in re.findall(r"(\d+)\s*([a-z]*)", span):
        total += int(number) * _UNIT_S[unit or "s"]
    return total


@dataclass(frozen=True)
class Schedule:
    remedy: str  # absolute path of the installed remedy executable
    inventory: str  # absolute path of the inventory file
    project: str  # the project directory (deploys/, runbooks/): the working directory
    interval: str = "10min"
    check_only: bool = False
    textfile: str | None = None
    wait_s: float = 30.0
    limit: tuple[str, ...] = ()  # only these hosts of the inventory (converge --limit)
    # converge --reboot-if-needed: a run reboots a host a reboot is needed for (remedy
    # status says why), only inside the host's restart_window, as remedy reboot does
    reboot_if_needed: bool = False

    def __post_init__(self):
        paths = {"the remedy executable": self.remedy, "INVENTORY": self.inventory,
                 "the project directory": self.project, "--textfile": self.textfile}  # fmt: skip
        for label, value in paths.items():
            if value is not None:
                _check_path(label, value)
        if any(c in self.remedy for c in "\"'\\"):
            raise ConfigError(
                f"the remedy executable {self.remedy!r} holds a quote or a backslash, which "
                "systemd refuses in the path of a service's executable; install remedy under "
                "a path without them"
            )
        if self.project != self.project.rstrip():
            raise ConfigError(
                f"the project directory {self.project!r} ends in a blank, which systemd "
                "drops from WorkingDirectory=; give the project a path without it "
                "(REMEDY_PROJECT)"
            )
        if self.reboot_if_needed and self.check_only:
            raise ConfigError(
                "--reboot-if-needed with --check-only: a run that changes nothing reboots "
                "nothing; drop one of them"
            )
        for host in self.limit:
            if not host or any(ord(c) < 32 or ord(c) == 127 for c in host):
                raise ConfigError(
                    f"--limit {host!r}: a host name a unit file can carry (no control "
                    "character, not empty); name a host of the inventory"
                )
        if isinstance(self.wait_s, bool) or not (math.isfinite(self.wait_s) and self.wait_s >= 0):
            raise ConfigError(
                f"--wait {self.wait_s:g}: give the seconds a run waits for another run's host "
                "lock as a finite number, 0 or more (e.g. 30); the converge the timer runs "
                "refuses anything else (host data lock_wait_s), so every run would fail"
            )
        if not SPAN_RE.match(self.interval):
            raise ConfigError(
                f"--interval {self.interval!r} is not a systemd time span "
                "(examples: 10min, 1h, 90s)"
            )
        if span_seconds(self.interval) > MAX_INTERVAL_S:
            raise ConfigError(
                f"--interval {self.interval!r} is longer than a year: systemd would reject "
                "it when it loads the timer (or overflow); give at most 365d (examples: "
                "10min, 1h)"
            )
        if span_seconds(self.interval) < 1:
            raise ConfigError(
                f"--interval {self.interval!r} is shorter than a second: a timer that fires "
                "that often never lets a converge finish; give at least 1s (examples: "
                "10min, 1h)"
            )

    @property
    def wait_text(self) -> str:
        """--wait as written for the run: the number it reads back as the same (30, 0.5,
        1e+300), never a rounded one."""
        short = f"{self.wait_s:g}"
        return short if float(short) == self.wait_s else repr(float(self.wait_s))

    def run_data(self) -> dict[str, str]:
        """The host data the run's converge adds to each host's (its --wait and
        --unattended), as it checks them before connecting."""
        return {"lock_wait_s": f"{self.wait_s:g}", "unattended": "true"}

    def argv(self) -> list[str]:
        # --unattended: no person watches these runs, so no bump to an unverified latest
        out = [
            self.remedy,
            "converge",
            self.inventory,
            "--unattended",
            "--wait",
            self.wait_text,
        ]
        if self.check_only:
            out.append("--check")
        if self.reboot_if_needed:  # the reboot keeps to each host's restart_window
            out.append("--reboot-if-needed")
        for host in self.limit:
            out += ["--limit", host]
        if self.textfile:  # the interval too: the textfile says it, for the age alert
            out += ["--interval", self.interval, "--textfile", self.textfile]
        return out


def _check_path(label: str, value: str) -> None:
    """VALUE, a path a unit file will hold: absolute, and text a unit file can carry."""
    if not value.startswith("/"):
        raise ConfigError(
            f"{label} {value!r} must be an absolute path: the service does not run where "
            "this command runs"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ConfigError(
            f"{label} {value!r} holds a control character (a newline, a tab): a unit file "
            "cannot carry it; rename it"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            f"{label} {value!r} is not UTF-8, which systemd reads unit files as; rename it"
        ) from None


# How systemd reads the values remedy writes (systemd.service(5) "Command lines",
# systemd.syntax(7) "Quoting", systemd.unit(5) "Specifiers"; what systemd 257 did in a
# twin): ExecStart= splits its words at blanks, takes "..." as one word with C escapes
# (\\ for a backslash, \" for a quote), expands % specifiers in each word (%% is a %)
# and, when it runs, $VAR and ${VAR} in the arguments ($$ is a $), not in the
# executable's path, which may hold no quote, backslash or control character.
# Environment= unquotes and unescapes the same way and expands specifiers, never $.
# WorkingDirectory= and Description= expand specifiers only: the rest is as written.
PLAIN_WORD_RE = re.compile(r"^[A-Za-z0-9_./:=+,@-]+$")


def exec_word(word: str, executable: bool = False) -> str:
    """WORD as one word of ExecStart= (the EXECUTABLE's path keeps its $)."""
    if PLAIN_WORD_RE.match(word):
        return word
    text = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return '"' + (text if executable else text.replace("$", "$$")) + '"'


def exec_line(argv: list[str]) -> str:
    return " ".join(exec_word(w, executable=i == 0) for i, w in enumerate(argv))


def environment_value(name: str, value: str) -> str:
    """The value of ``Environment=`` that systemd reads as NAME=VALUE."""
    pair = f"{name}={value}"
    if PLAIN_WORD_RE.match(pair):
        return pair
    return '"' + pair.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%") + '"'


def literal(text: str) -> str:
    """TEXT for a setting that expands specifiers only (WorkingDirectory=, Description=)."""
    return text.replace("%", "%%")


def _what(s: Schedule) -> str:
    if s.check_only:
        return "report drift on"
    return "converge (and reboot in their windows)" if s.reboot_if_needed else "converge"


def service_unit(s: Schedule) -> str:
    what = _what(s)
    return "\n".join(
        [
            "# Written by `remedy schedule install`; `remedy schedule remove` undoes it.",
            "[Unit]",
            literal(f"Description=remedy: {what} the serving hosts of {s.inventory} (tt-stack#49)"),
            "Wants=network-online.target",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=oneshot",
            f"WorkingDirectory={literal(s.project)}",
            f"Environment={environment_value('REMEDY_PROJECT', s.project)}",
            f"ExecStart={exec_line(s.argv())}",
            f"SuccessExitStatus={SUCCESS_EXIT}",
            "TimeoutStartSec=1h",
            "Nice=10",
            "",
        ]
    )


def timer_unit(s: Schedule) -> str:
    return "\n".join(
        [
            "# Written by `remedy schedule install`; `remedy schedule remove` undoes it.",
            "[Unit]",
            f"Description=remedy: run {SERVICE} every {s.interval}",
            "",
            "[Timer]",
            f"OnBootSec={ON_BOOT}",
            f"OnUnitActiveSec={s.interval}",
            f"RandomizedDelaySec={RANDOMIZED_DELAY}",
            # No Persistent=: it applies to OnCalendar= only. A management host that was
            # down catches up through OnBootSec=.
            "",
            "[Install]",
            "WantedBy=timers.target",
            "",
        ]
    )


def nixos_snippet(s: Schedule) -> str:
    """The same schedule for a NixOS management host's configuration."""

    def nix_str(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("${", "\\${") + '"'

    script = " ".join(shlex.quote(a) for a in s.argv())
    what = "remedy: " + _what(s)
    return "\n".join(
        [
            "# remedy's scheduled convergence (tt-stack#49), for configuration.nix",
            "systemd.services.remedy-converge = {",
            f"  description = {nix_str(literal(what + ' the serving hosts of ' + s.inventory))};",
            '  wants = [ "network-online.target" ];',
            '  after = [ "network-online.target" ];',
            "  serviceConfig = {",
            '    Type = "oneshot";',
            # NixOS writes these into the unit as they are: systemd's escapes, in Nix
            f"    WorkingDirectory = {nix_str(literal(s.project))};",
            f"    Environment = {nix_str(environment_value('REMEDY_PROJECT', s.project))};",
            f'    SuccessExitStatus = "{SUCCESS_EXIT}";',
            '    TimeoutStartSec = "1h";',
            "    Nice = 10;",
            "  };",
            f"  script = {nix_str(script)};",
            "};",
            "systemd.timers.remedy-converge = {",
            '  wantedBy = [ "timers.target" ];',
            "  timerConfig = {",
            f"    OnBootSec = {nix_str(ON_BOOT)};",
            f"    OnUnitActiveSec = {nix_str(s.interval)};",
            f"    RandomizedDelaySec = {nix_str(RANDOMIZED_DELAY)};",
            "  };",
            "};",
            "",
        ]
    )


def parse_exec_start(service_text: str) -> list[str]:
    """The argv of an installed service's ExecStart= (for `remedy schedule status`)."""
    m = re.search(r"^ExecStart=(.*)$", service_text, re.MULTILINE)
    return exec_words(m.group(1)) if m else []


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
            "v": "\v", "s": " ", "\\": "\\", '"': '"', "'": "'"}  # fmt: skip


def exec_words(line: str) -> list[str]:
    """ExecStart='s words as systemd reads them: split at blanks outside quotes, quotes
    removed, C escapes (\\xNN too) resolved, then %% as % and, in the arguments, $$ as
    $ (the other specifiers and variables, which remedy never writes, stay as written)."""
    words: list[str] = []
    word: list[str] | None = None
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line):
            nxt = line[i + 1]
            if nxt == "x" and re.match(r"[0-9A-Fa-f]{2}", line[i + 2 : i + 4]):
                (word := word or []).append(chr(int(line[i + 2 : i + 4], 16)))
                i += 4
                continue
            (word := word or []).append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        if quote:
            if c == quote:
                quote = None
            else:
                word.append(c)
        elif c in "\"'":
            quote, word = c, word or []
        elif c.isspace():
            if word is not None:
                words.append("".join(word))
            word = None
        else:
            (word := word or []).append(c)
        i += 1
    if word is not None:
        words.append("".join(word))
    words = [w.replace("%%", "%") for w in words]
    return words[:1] + [w.replace("$$", "$") for w in words[1:]]


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class LastRun:
    """The service's last run, from ``systemctl show`` (Result, ExecMain*)."""

    state: str  # never | running | exited | killed
    result: str  # systemd's Result=: success, exit-code, signal, timeout, ...
    at: str = ""  # when it ended (or started, while it runs)
    exit_code: int | None = None  # what the run exited with
    signal: int | None = None  # what ended it, if a signal did

    @property
    def failed(self) -> bool:
        return self.state in ("exited", "killed") and self.result != "success"

    @property
    def code(self) -> int:
        """What `remedy schedule status` exits with for it: the run's own exit code (the
        README's table), 1 if a signal or a time bound ended it, 0 if none ended yet."""
        if self.exit_code is not None:
            return self.exit_code
        return EXIT_ERROR if self.failed or self.state == "killed" else EXIT_OK

    def text(self) -> str:
        if self.state == "never":
            return "none yet (since the management host booted or the schedule was installed)"
        if self.state == "running":
            return f"running now (started {self.at})"
        if self.exit_code is not None:
            said = (
                f"{self.at}: exit {self.exit_code} ({EXIT_MEANING.get(self.exit_code, 'unknown')})"
            )
        elif self.result == "timeout":
            said = f"{self.at}: ran past TimeoutStartSec and was stopped ({_signal(self.signal)})"
        else:
            said = f"{self.at}: killed by {_signal(self.signal)}"
        return said + (f"; the unit failed (Result={self.result})" if self.failed else "")


def _signal(number: int | None) -> str:
    try:
        return signal.Signals(number).name
    except (TypeError, ValueError):
        return f"signal {number}"


def last_run(props: dict[str, str]) -> LastRun:
    """The service's last run from its ``systemctl show`` properties: ExecMainCode is 1
    when the process exited (ExecMainStatus its exit code), 2 or 3 when a signal ended it
    (ExecMainStatus the signal); a oneshot that runs is "activating"; a service that
    never ran since boot has no ExecMainStartTimestamp."""
    result = props.get("Result", "")
    if props.get("ActiveState") in ("activating", "deactivating", "reloading"):
        return LastRun("running", result, props.get("ExecMainStartTimestamp", ""))
    if not props.get("ExecMainStartTimestamp"):
        return LastRun("never", result)
    at = props.get("ExecMainExitTimestamp") or props.get("ExecMainStartTimestamp", "")
    try:
        status = int(props.get("ExecMainStatus", ""))
    except ValueError:
        status = None
    if props.get("ExecMainCode") in ("2", "3"):
        return LastRun("killed", result, at, signal=status)
    if result in ("timeout", "signal", "core-dump") or status is None:
        return LastRun("killed", result, at, signal=status)
    return LastRun("exited", result, at, exit_code=status)


_SPAN_UNITS = {"y": 31557600, "month": 2629800, "w": 604800, "d": 86400, "h": 3600,
               "min": 60, "s": 1, "ms": 1e-3, "us": 1e-6}  # fmt: skip


def shown_span(text: str) -> float | None:
    """Seconds of a span as ``systemctl show`` writes it ("2h 27min 27.585468s"); None
    for "infinity", nothing, 0 or what it cannot read."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([a-z]+)", text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != "".join(text.split()):
        return None
    if any(u not in _SPAN_UNITS for _n, u in parts):
        return None
    return sum(float(n) * _SPAN_UNITS[u] for n, u in parts) or None


def next_elapse(timer: dict[str, str], now: float, since_boot: float) -> float | None:
    """When the timer fires next, in seconds of the wall clock (NOW is the wall clock,
    SINCE_BOOT the monotonic clock, both now): NextElapseUSecRealtime is blank for a
    timer of OnBootSec= and OnUnitActiveSec= only, and NextElapseUSecMonotonic counts
    from boot. None: not scheduled."""
    monotonic = shown_span(timer.get("NextElapseUSecMonotonic", ""))
    return None if monotonic is None else now + monotonic - since_boot
