"""A fleet prepares its hosts in greenlets, and reading the project's commits yields to
the others (git runs in a subprocess): the run's recording starts once, and git runs
once a run, not once a host (issue 34: 16 hosts ran it 14 times, 28 processes)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import PROJECT

HOSTS_AT_ONCE = """
import gevent
from pathlib import Path
from remedy import audit
from remedy.operations import run

reads = []
def commits_of(project):
    reads.append(project)
    gevent.sleep(0.01)  # git, in a subprocess: the other hosts' greenlets go on
    return {"runbooks": "r" * 40, "deploys": "d" * 40}

class State:
    handlers = []
    def add_callback_handler(self, h):
        self.handlers.append(h)

from remedy import lifecycle

audit.commits_of = commits_of
run._runbook_of = lambda project, runbook: (runbook, [])
state = State()
the_run = lifecycle.Run("test:1:1")  # not installed: no signal handler, no exit hook
gevent.joinall([gevent.spawn(run.start_recording, the_run, state, Path("."), "006")
                for _ in range(8)])
print("reads", len(reads), "handlers", len(state.handlers), "commits",
      the_run.recording["commits"])
"""


def test_the_recording_starts_once_and_reads_the_commits_once_for_hosts_at_once():
    proc = subprocess.run(
        [sys.executable, "-c", HOSTS_AT_ONCE], capture_output=True, text=True, cwd=PROJECT,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "reads 1 handlers 1 " in proc.stdout, proc.stdout
    # the hook registered before the read sees what the read found
    assert "'runbooks': 'rrrr" in proc.stdout, proc.stdout
