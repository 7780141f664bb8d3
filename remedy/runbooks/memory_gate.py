"""A runbook that (re)starts the model server carries the memory gate among its
preconditions: by an operation that restarts, or by a manual command that does
(runbooks 002 and 005 switch by hand)."""

from __future__ import annotations

import re

from remedy.runbooks.files import Runbook
from remedy.runbooks.problems import Problem, json_path

#: The precondition every runbook that (re)starts the server must carry.
MEMORY_GATE = "memory.headroom_gated"
#: Operations that (re)start the model server, directly or through a switch.
RESTARTING_OPERATIONS = frozenset(
    {"serving.restarted", "nix.system_switched", "nix.system_rolled_back"}
)
# Manual commands that do the same.
_RESTARTING_COMMAND_RE = re.compile(
    r"\bnixos-rebuild\s+switch\b|\bsystemctl\s+(?:re)?start\s+tenstorrent-serving\b"
)


def restarts(runbook: Runbook) -> list[str]:
    """Where the runbook's steps and rollback restart the server, for a person."""
    found: list[str] = []
    for section in ("steps", "rollback"):
        for index, step in runbook.items(section):
            where = json_path((section, index))
            if step.get("operation") in RESTARTING_OPERATIONS:
                found.append(f"{step['operation']} at {where}")
            manual = step.get("manual")
            commands = manual.get("commands") if isinstance(manual, dict) else None
            if any(
                isinstance(command, str) and _RESTARTING_COMMAND_RE.search(command)
                for command in (commands if isinstance(commands, list) else [])
            ):
                found.append(f"a manual restart at {where}")
    return found


def memory_gate_problems(runbook: Runbook) -> list[Problem]:
    """The missing memory gate of a runbook that restarts the server, if it is missing."""
    found = restarts(runbook)
    gated = any(
        isinstance(pre.get("check"), dict) and pre["check"].get("operation") == MEMORY_GATE
        for _, pre in runbook.items("preconditions")
    )
    if not found or gated:
        return []
    return [
        runbook.problem(
            ("preconditions",),
            f"the steps restart the server ({found[0]}) but no precondition checks "
            f"the memory gate; add one with `check: {{operation: {MEMORY_GATE}}}`",
        )
    ]
