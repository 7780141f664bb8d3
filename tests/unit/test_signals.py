"""A second signal while the run writes its own audit lines lets them finish, then exits
with the signal's code: recording again from the handler blocked for ever on the audit
log's flock, which the same process held (a CI run hung 120 s after two SIGTERMs).
The run (remedy.lifecycle.Run) is a value here, in a process of its own, with a writer
that stands for the audit's."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import PROJECT

SECOND_SIGNAL = """
import os, signal
from remedy import lifecycle
run = lifecycle.Run("test:1:1")
run.install()
def writer(r, killed):
    os.kill(os.getpid(), signal.SIGTERM)  # the second, while the lines are written
    print("written", killed, "phase", r.phase, "pending", r.pending_exit, flush=True)
run.writer = writer
os.kill(os.getpid(), signal.SIGTERM)  # the first: stop after the step in progress
assert run.stop.why, "the first signal did not stop the run"
run.write()
print("not reached", flush=True)
"""


def test_a_second_signal_while_the_lines_are_written_waits_for_them_then_exits():
    proc = subprocess.run(
        [sys.executable, "-c", SECOND_SIGNAL], capture_output=True, text=True, cwd=PROJECT,
        timeout=60,
    )  # fmt: skip
    assert "written None phase writing pending 143" in proc.stdout, proc.stdout + proc.stderr
    assert "not reached" not in proc.stdout and proc.returncode == 143, proc.stderr


AFTER_THE_LINES = """
import os, signal
from remedy import lifecycle
run = lifecycle.Run("test:1:1")
run.install()
run.writer = lambda r, killed: print("written", killed, flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # the first: stop after the step in progress
run.write()  # the run's lines are written; the interpreter winds down
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
    assert proc.stdout.count("written") == 1 and "not reached" not in proc.stdout, proc.stdout


KILLED = """
import os, signal
from remedy import lifecycle
run = lifecycle.Run("test:1:1")
run.install()
run.writer = lambda r, killed: print("written:", killed, flush=True)
run.in_progress = "Prove the build holds the desired state (tt-stack#34)"
os.kill(os.getpid(), signal.SIGINT)
os.kill(os.getpid(), signal.SIGINT)
print("not reached", flush=True)
"""


def test_a_second_signal_before_the_lines_records_the_step_it_was_in_and_exits():
    proc = subprocess.run(
        [sys.executable, "-c", KILLED], capture_output=True, text=True, cwd=PROJECT, timeout=60
    )
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert (
        "written: interrupted by SIGINT during 'Prove the build holds the desired state "
        "(tt-stack#34)', then killed by a second SIGINT\n"
    ) in proc.stdout
    assert "not reached" not in proc.stdout


STOPPED_RUN_EXITS = """
import os, signal, sys
from remedy import lifecycle
run = lifecycle.Run("test:1:1")
run.install()
run.writer = lambda r, killed: print("written at exit", flush=True)
os.kill(os.getpid(), signal.SIGTERM)
sys.exit(0)  # pyinfra's own handler would exit 0: a stopped run never does
"""


def test_a_stopped_run_writes_its_lines_at_exit_and_never_exits_0():
    proc = subprocess.run(
        [sys.executable, "-c", STOPPED_RUN_EXITS], capture_output=True, text=True,
        cwd=PROJECT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 143 and "written at exit" in proc.stdout, proc.stdout
