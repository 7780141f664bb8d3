"""The flake's own checks as a gate before a switch (host data ``flake_checks``).

Each check is a flake output, ``NAME#attr.path``: of the host flake's input NAME as
the bumped lock locks it, or of the host flake itself (``self#…``). remedy builds
each one after the proof and before the switch; a failing check blocks the durable
path with the check's name and the last lines of its log. An absent output is
reported, not a failure (the default check, ``tt-stack#checks.x86_64-linux.
tenstorrent-serving``, is built only where tt-stack has it). The prove step's program
(remedy/host/steps/prove.sh) builds them and says each result.
"""

from __future__ import annotations

from dataclasses import dataclass

PASSED, FAILED, ABSENT = "passed", "failed", "absent"


@dataclass(frozen=True)
class CheckResult:
    check: str
    result: str  # PASSED | FAILED | ABSENT
    detail: str = ""  # the output's store path, or the log's last line

    def to_json(self) -> dict:
        return {"check": self.check, "result": self.result, "detail": self.detail}
