"""The host lock's remote side: paths, the shell that holds ``flock``, the holder line.

Pure: ``remedy.lock`` takes it over an SSH session; the manual script renders the
same paths (``remedy.core.render.manual``).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass

from remedy import host

LOCK_DIR = "/run/lock"
EXIT_HELD = 75  # flock -E: the lock stayed busy for the whole wait


def lock_path(unit: str) -> str:
    return f"{LOCK_DIR}/remedy-{unit}.lock"


def holder_path(unit: str) -> str:
    return f"{LOCK_DIR}/remedy-{unit}.holder"


JOURNAL_DIR = "/var/lib/remedy"


def step_journal_path(unit: str) -> str:
    """The step journal on the host: each step of the run holding the lock, as pyinfra
    ended it (not the run journal of ``remedy.core.programs.journal``, the values the steps pass
    on). A run that ends removes it; one that dies (SIGKILL, a lost connection, a
    reboot) leaves it for the next run to record."""
    return f"{JOURNAL_DIR}/run-{unit}.jsonl"


# $1 lock file, $2 holder file, $3 seconds to wait, $4 who we are, $5 the journal,
# $6 this run's journal header (one JSON line).
# Prints "waiting HOLDER" (busy), then "held" + holder (gave up), or: "boot ID", a dead
# run's journal between "journal" and "end-journal" if one is there, then "locked".
# Then each line on stdin is a step, appended to the journal, until "end RESULT"
# (the run ended: the journal goes) or the end of input (the run died: it stays).
LOCK_SH = host.text("hostlock.sh")


def lock_argv(unit: str, wait_s: float, holder: str, header: str = "{}") -> list[str]:
    return [
        "sh", "-c", LOCK_SH, "sh", lock_path(unit), holder_path(unit),
        f"{max(wait_s, 0):g}", holder, step_journal_path(unit), header,
    ]  # fmt: skip


def holder_text(argv: list[str] | None = None) -> str:
    """Who holds the lock: pid, where, since when, doing what."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    command = " ".join(argv if argv is not None else sys.argv)
    return f"pid {os.getpid()} on {socket.gethostname()} since {started}: {command}"


@dataclass(frozen=True)
class DeadRun:
    """A run that died holding the lock, as its journal on the host tells it."""

    run_id: str
    started: str
    command: str
    runbook: str | None
    steps: tuple[tuple[str, str], ...]  # (operation, changed | noop | error), in order
    rebooted: bool  # the host booted since: the run died with the boot

    @property
    def reason(self) -> str:
        last = (
            f"after '{self.steps[-1][0]}' ({self.steps[-1][1]})"
            if self.steps
            else ("before its first step")
        )
        who = f"started {self.started} by `{self.command}`"
        if self.rebooted:
            return f"the host rebooted during the run ({who}), {last}"
        return (
            f"the run died without ending ({who}): SIGKILL, a lost connection or a crash of "
            f"remedy, {last}"
        )


def journal_header(run_id: str, runbook: str | None, argv: list[str] | None = None) -> str:
    command = " ".join(argv if argv is not None else sys.argv)
    return json.dumps(
        {
            "run_id": run_id,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": command,
            "runbook": runbook,
        },
        sort_keys=True,
    )


def step_line(operation: str, result: str) -> str:
    return json.dumps({"step": operation, "result": result}, sort_keys=True)


def read_journal(lines: list[str], boot_now: str) -> DeadRun | None:
    """A dead run's journal (the lines between "journal" and "end-journal"), or None if
    it says nothing readable. A torn last line is skipped."""
    boot, header, steps = None, {}, []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        if "boot_id" in doc and boot is None:
            boot = doc["boot_id"]
        elif "run_id" in doc and not header:
            header = doc
        elif "step" in doc:
            steps.append((str(doc["step"]), str(doc.get("result", "?"))))
    if not header:
        return None
    return DeadRun(
        str(header.get("run_id")),
        str(header.get("started", "?")),
        str(header.get("command", "?")),
        header.get("runbook"),
        tuple(steps),
        bool(boot and boot_now and boot != boot_now),
    )
