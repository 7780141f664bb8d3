"""The flake's own checks as a gate before a switch (host data ``flake_checks``).

Each check is a flake output, ``NAME#attr.path``: of the host flake's input NAME as
the bumped lock locks it, or of the host flake itself (``self#…``). remedy builds
each one after the proof and before the switch; a failing check blocks the durable
path with the check's name and the last lines of its log. An absent output is
reported, not a failure (the default check, ``tt-stack#checks.x86_64-linux.
tenstorrent-serving``, is built only where tt-stack has it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from remedy.core.programs.commands import CHECK_ABSENT

PASSED, FAILED, ABSENT = "passed", "failed", "absent"
# Nix's "last N log lines:" block: each line of the builder's log as "> LINE".
LOG_LINE = re.compile(r"^\s*> ?(.*)$")


@dataclass(frozen=True)
class CheckResult:
    check: str
    result: str  # PASSED | FAILED | ABSENT
    detail: str = ""  # the output's store path, or the log's last line

    def line(self) -> str:
        if self.result == PASSED:
            return f"flake check {self.check}: passed"
        if self.result == ABSENT:
            return f"flake check {self.check}: no such output, not built"
        return f"flake check {self.check}: failed: {self.detail}"

    def to_json(self) -> dict:
        return {"check": self.check, "result": self.result, "detail": self.detail}


def absent(said: str) -> bool:
    """Nix's answer says the output does not exist (the check expression's throw)."""
    return CHECK_ABSENT in said


def log_tail(said: str, lines: int = 3) -> list[str]:
    """The last LINES of the failed builder's log, as Nix quotes them (both Nix bases
    print "last N log lines:" and each line as "> …"); else Nix's last error line."""
    quoted = [m.group(1).rstrip() for ln in said.splitlines() if (m := LOG_LINE.match(ln))]
    quoted = [q for q in quoted if q]
    if quoted:
        return quoted[-lines:]
    errors = [ln.strip() for ln in said.splitlines() if ln.strip().startswith("error:")]
    return errors[-1:] or [ln.strip() for ln in said.splitlines() if ln.strip()][-1:]
