"""A second signal while the run writes its own audit lines lets them finish, then exits
with the signal's code: recording again from the handler blocked for ever on the audit
log's flock, which the same process held (a CI run hung 120 s after two SIGTERMs)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import PROJECT

SECOND_SIGNAL = """
import os, signal, sys
from remedy.operations import run
run._watch_signals()
os.kill(os.getpid(), signal.SIGTERM)  # the first: stop after the step in progress
assert run.STOP.why, "the first signal did not stop the run"
run._writing.append(0)  # the run writes its lines now
os.kill(os.getpid(), signal.SIGTERM)  # the second
print("after the second:", run._writing, flush=True)
run._writing.clear()
os.kill(os.getpid(), signal.SIGTERM)  # a third, with nothing being written: exits at once
print("not reached", flush=True)
"""


def test_a_second_signal_while_the_lines_are_written_waits_for_them_then_exits():
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_SIGNAL], capture_output=True, text=True, cwd=PROJECT,
        timeout=60,
    )  # fmt: skip
    assert "after the second: [143]" in proc.stdout, proc.stdout + proc.stderr
    assert "not reached" not in proc.stdout and proc.returncode == 143, proc.stderr


AFTER_THE_LINES = """
import os, signal
from remedy.operations import run
run._watch_signals()
run._recording.append({})
run._record_args.append((None, {}, ("006", [])))
run._write_records = lambda *a, **k: print("written again", flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # the first: stop after the step in progress
run._recorded.append(True)  # the run's lines are written; the interpreter winds down
os.kill(os.getpid(), signal.SIGTERM)  # the second, now
print("not reached", flush=True)
"""


def test_a_second_signal_after_the_lines_are_written_exits_without_a_second_line():
    """A CI run recorded a run twice: its second SIGTERM came after its lines were
    written, while the interpreter wound down, and the handler recorded it as killed."""
    proc = subprocess.run(
        [sys.executable, "-c", AFTER_THE_LINES], capture_output=True, text=True, cwd=PROJECT,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 143, proc.stdout + proc.stderr
    assert "written again" not in proc.stdout and "not reached" not in proc.stdout, proc.stdout
