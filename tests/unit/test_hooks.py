"""remedy.hooks on real processes: a hook and all it started end with it (issue 43 A1)."""

from __future__ import annotations

import os
import time

from remedy.core.run.stop import StopRequest
from remedy.hooks import run_hook


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_child_left_running_when_the_hook_exits_is_ended_and_holds_nothing(tmp_path):
    pid_file = tmp_path / "child"
    done = run_hook(["sh", "-c", f"sleep 3600 & echo $! > {pid_file}; echo bye; exit 3"], 60)
    assert (done.returncode, done.ended, done.left_running) == (3, None, 1)
    assert done.output == "bye\n"
    child = int(pid_file.read_text())
    assert not alive(child)


def test_a_hook_past_its_bound_is_ended_with_its_children_even_one_ignoring_sigterm(tmp_path):
    pid_file = tmp_path / "child"
    script = f"sh -c 'trap \"\" TERM; sleep 3600' & echo $! > {pid_file}; sleep 3600"
    done = run_hook(["sh", "-c", script], 1)
    assert done.ended == "timeout" and done.returncode is None
    assert not alive(int(pid_file.read_text()))


def test_a_stop_request_ends_the_hook():
    stop = StopRequest("interrupted by SIGTERM")
    done = run_hook(["sleep", "3600"], 60, stop)
    assert done.ended == "interrupted by SIGTERM" and done.returncode is None


def test_a_hook_that_ends_alone_leaves_nothing_to_end():
    done = run_hook(["sh", "-c", "echo ok"], 60)
    assert (done.returncode, done.output, done.left_running) == (0, "ok\n", 0)


def test_a_command_that_cannot_start_raises_oserror(tmp_path):
    try:
        run_hook([str(tmp_path / "nosuch")], 5)
    except OSError:
        return
    raise AssertionError("a missing command started")


def test_no_pipe_stays_open_after_the_hook(tmp_path):
    before = len(os.listdir("/proc/self/fd"))
    run_hook(["sh", "-c", "sleep 3600 & exit 0"], 60)
    time.sleep(0.1)
    assert len(os.listdir("/proc/self/fd")) == before
