"""The host lock's remote side: paths, the shell that holds ``flock``, the holder line.

Pure: ``remedy.lock`` takes it over an SSH session; the manual script renders the
same paths (``remedy.core.manual``).
"""

from __future__ import annotations

import os
import socket
import sys
import time

LOCK_DIR = "/run/lock"
EXIT_HELD = 75  # flock -E: the lock stayed busy for the whole wait


def lock_path(unit: str) -> str:
    return f"{LOCK_DIR}/remedy-{unit}.lock"


def holder_path(unit: str) -> str:
    return f"{LOCK_DIR}/remedy-{unit}.holder"


# $1 lock file, $2 holder file, $3 seconds to wait, $4 who we are.
LOCK_SH = r"""
exec 9>>"$1" || { echo "error cannot open $1"; exit 1; }
if ! flock -n 9; then
  # busy: say on whom we wait before waiting, so the run can tell its person
  printf 'waiting %s\n' "$(cat "$2" 2>/dev/null || echo "(no holder recorded)")"
  if ! flock -w "$3" 9; then
    echo "held"
    cat "$2" 2>/dev/null || echo "(no holder recorded)"
    exit 75
  fi
fi
printf '%s\n' "$4" > "$2.tmp" && mv -f "$2.tmp" "$2" || rm -f "$2.tmp"
echo "locked"
cat >/dev/null
rm -f "$2"
"""


def lock_argv(unit: str, wait_s: float, holder: str) -> list[str]:
    return [
        "sh", "-c", LOCK_SH, "sh", lock_path(unit), holder_path(unit),
        f"{max(wait_s, 0):g}", holder,
    ]  # fmt: skip


def holder_text(argv: list[str] | None = None) -> str:
    """Who holds the lock: pid, where, since when, doing what."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    command = " ".join(argv if argv is not None else sys.argv)
    return f"pid {os.getpid()} on {socket.gethostname()} since {started}: {command}"
