"""Scheduled convergence: the systemd service and timer that run ``remedy converge``.

remedy runs where the inventory and the SSH keys are, a management host (NixOS
hosts have no Python by default). ``units`` renders the two unit files for
``remedy schedule install``; ``nixos_snippet`` renders the same as NixOS
``systemd.services``/``systemd.timers`` for a management host that runs NixOS.
Pure: paths and values in, text out.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from remedy.errors import ConfigError

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
# The oneshot's exit codes that are not a failure of the unit: 6 (boot pending: the next
# boot holds every setting) and 3, remedy's report of
# drift or volatile state (the /run fallback holds production), which the metrics carry;
# marking the unit failed for it would page for an expected, reported state.
SUCCESS_EXIT = "3 6"
# The longest --interval taken: a converge timer rarer than yearly is no schedule, and
# systemd overflows on spans past 2^64 microseconds.
MAX_INTERVAL_S = 365 * 86400


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

    def __post_init__(self):
        for name in ("remedy", "inventory", "project"):
            value = getattr(self, name)
            if not value.startswith("/") or any(c in value for c in "\n\"'\\%"):
                raise ConfigError(
                    f"schedule {name} {value!r} must be an absolute path without quotes, "
                    "backslashes or %"
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
        if self.textfile is not None and not self.textfile.startswith("/"):
            raise ConfigError(f"--textfile {self.textfile!r} must be an absolute path")

    def argv(self) -> list[str]:
        # --unattended: no person watches these runs, so no bump to an unverified latest
        out = [
            self.remedy,
            "converge",
            self.inventory,
            "--unattended",
            "--wait",
            f"{self.wait_s:g}",
        ]
        if self.check_only:
            out.append("--check")
        if self.textfile:
            out += ["--textfile", self.textfile]
        return out


def _exec_line(argv: list[str]) -> str:
    # systemd's ExecStart= splits on whitespace and honours double quotes; none of our
    # parts contain either (checked above), so plain joining is exact.
    return " ".join(argv)


def service_unit(s: Schedule) -> str:
    what = "report drift on" if s.check_only else "converge"
    return "\n".join(
        [
            "# Written by `remedy schedule install`; `remedy schedule remove` undoes it.",
            "[Unit]",
            f"Description=remedy: {what} the serving hosts of {s.inventory} (tt-stack#49)",
            "Wants=network-online.target",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=oneshot",
            f"WorkingDirectory={s.project}",
            f"Environment=REMEDY_PROJECT={s.project}",
            f"ExecStart={_exec_line(s.argv())}",
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
    return "\n".join(
        [
            "# remedy's scheduled convergence (tt-stack#49), for configuration.nix",
            "systemd.services.remedy-converge = {",
            f"  description = {nix_str('remedy: converge the serving hosts of ' + s.inventory)};",
            '  wants = [ "network-online.target" ];',
            '  after = [ "network-online.target" ];',
            "  serviceConfig = {",
            '    Type = "oneshot";',
            f"    WorkingDirectory = {nix_str(s.project)};",
            f"    Environment = {nix_str('REMEDY_PROJECT=' + s.project)};",
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
    return m.group(1).split() if m else []
