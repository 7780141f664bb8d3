"""A command of the person's (a rotation hook) run on this machine, and always ended.

A hook runs in a session and process group of its own, with its output in a file,
never a pipe: a child it leaves behind (``sleep 3600 &``) cannot hold the run by
holding the pipe's end open. It ends when its leader exits, at its time bound, or at
the run's stop request, whichever comes first; then its whole process group is sent
SIGTERM, and SIGKILL after ``GRACE_S``, so nothing it started outlives it (a child that
made a session of its own has left the hook's group and is out of reach).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

GRACE_S = 5.0  # from SIGTERM to SIGKILL of the hook's group
POLL_S = 0.2  # how often the wait looks at the stop request


@dataclass(frozen=True)
class HookResult:
    returncode: int | None  # None: it did not end by itself (ENDED says why)
    output: str  # what it wrote (stdout and stderr, interleaved)
    ended: str | None = None  # "timeout" or the stop request's why
    left_running: int = 0  # processes of its group still there when its leader exited


def run_hook(argv: list[str], timeout_s: float, stop=None) -> HookResult:
    """Run ARGV (no shell) in a process group of its own, for at most TIMEOUT_S, or
    until STOP (a StopRequest) says why; end its group after. OSError: it could not
    start."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        ended = None
        deadline = time.monotonic() + timeout_s
        try:
            while proc.poll() is None:
                if stop is not None and stop.why:
                    ended = stop.why
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    ended = "timeout"
                    break
                try:
                    proc.wait(timeout=min(POLL_S, left))
                except subprocess.TimeoutExpired:
                    pass
        finally:  # also when the caller is ended (a host given up): nothing outlives it
            left_running = _end_group(proc)
        out.seek(0)
        text = out.read().decode(errors="replace")
    code = proc.returncode if ended is None else None
    return HookResult(code, text, ended, left_running if ended is None else 0)


def _end_group(proc: subprocess.Popen) -> int:
    """SIGTERM to PROC's process group, SIGKILL to what is left after GRACE_S; PROC
    reaped. How many of the group were still running (its leader not counted)."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group's id
    left = len(_members(pgid, proc.pid))
    if not left and proc.poll() is not None:
        return 0
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        proc.poll()
        if proc.returncode is not None and not _members(pgid, proc.pid):
            break
        time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + GRACE_S  # SIGKILL is delivered, not yet done
    while _members(pgid, proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _members(pgid: int, leader: int) -> list[int]:
    """The live processes of process group PGID other than LEADER (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == leader:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold blanks and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            out.append(int(entry))
    return out
