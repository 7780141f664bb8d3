"""The host lock's remote shell, run here with the machine's own sh and flock."""

from __future__ import annotations

import subprocess

import pytest

from remedy.core import hostlock


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(hostlock, "LOCK_DIR", str(tmp_path))
    return tmp_path


def holder(wait: float, who: str) -> subprocess.Popen:
    return subprocess.Popen(
        hostlock.lock_argv("tenstorrent-serving.service", wait, who),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_second_run_is_told_who_holds_the_lock_and_gets_it_once_the_first_goes(lock_dir):
    first = holder(0, "pid 1 on mgmt since 2026-11-30T09:00:00Z: remedy converge")
    assert first.stdout.readline().strip() == "locked"
    second = holder(0, "pid 2")
    out, _ = second.communicate(timeout=10)
    assert second.returncode == hostlock.EXIT_HELD
    assert out.splitlines() == [
        # before it waits it says on whom: the run tells its person
        "waiting pid 1 on mgmt since 2026-11-30T09:00:00Z: remedy converge",
        "held",
        "pid 1 on mgmt since 2026-11-30T09:00:00Z: remedy converge",
    ]
    first.stdin.close()  # what a finished, killed or disconnected run does
    assert first.wait(timeout=10) == 0
    assert not (lock_dir / "remedy-tenstorrent-serving.service.holder").exists()
    third = holder(0, "pid 3")
    assert third.stdout.readline().strip() == "locked"
    assert (lock_dir / "remedy-tenstorrent-serving.service.holder").read_text() == "pid 3\n"
    third.stdin.close()
    third.wait(timeout=10)


def test_a_waiting_run_takes_the_lock_when_it_is_released_within_its_wait(lock_dir):
    first = holder(0, "first")
    assert first.stdout.readline().strip() == "locked"
    second = holder(20, "second")
    assert second.stdout.readline().strip() == "waiting first"
    first.stdin.close()
    first.wait(timeout=10)
    assert second.stdout.readline().strip() == "locked"
    second.stdin.close()
    assert second.wait(timeout=10) == 0


def test_the_holder_line_names_pid_time_and_command():
    text = hostlock.holder_text(["remedy", "converge", "inventory/production.py"])
    assert text.startswith("pid ") and " since 20" in text
    assert text.endswith(": remedy converge inventory/production.py")


class _Channel:
    """A paramiko channel stand-in whose answer arrives after a number of polls."""

    def __init__(self, polls: int):
        self.polls = polls

    def recv_ready(self):
        self.polls -= 1
        return self.polls <= 0

    def exit_status_ready(self):
        return False


class _Reply:
    def readline(self):
        return "locked\n"


def test_a_waiting_run_says_on_whom_for_how_long_and_then_how_long_so_far(monkeypatch):
    from remedy import lock

    clock = iter(range(0, 1000))
    monkeypatch.setattr(lock.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(lock.time, "sleep", lambda _s: None)
    said: list[str] = []
    answer = lock._wait_for(
        _Channel(12), _Reply(), "cfx-llm2", "/run/lock/x.lock", 30, "pid 7 on m", said.append
    )
    assert answer == "locked"
    assert said[0] == "cfx-llm2: /run/lock/x.lock is held by pid 7 on m; waiting up to 30s for it"
    assert said[1].startswith("cfx-llm2: still waiting for /run/lock/x.lock (5s of 30s)")
    assert len(said) == 3  # every PROGRESS_EVERY_S, not every poll
