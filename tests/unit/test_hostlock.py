"""The host lock's remote shell, run here with the machine's own sh and flock."""

from __future__ import annotations

import subprocess

import pytest

from remedy.core.programs import hostlock


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(hostlock, "LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(hostlock, "JOURNAL_DIR", str(tmp_path / "journal"))
    return tmp_path


def locked(proc) -> list[str]:
    """The lines a holder prints up to "locked" (boot id, a dead run's journal)."""
    lines = []
    while (line := proc.stdout.readline().strip()) != "locked":
        assert line, f"no 'locked' after {lines}"
        lines.append(line)
    return lines


def holder(wait: float, who: str, header: str = "{}") -> subprocess.Popen:
    return subprocess.Popen(
        hostlock.lock_argv("tenstorrent-serving.service", wait, who, header),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_second_run_is_told_who_holds_the_lock_and_gets_it_once_the_first_goes(lock_dir):
    first = holder(0, "pid 1 on mgmt since 2026-11-30T09:00:00Z: remedy converge")
    locked(first)
    second = holder(0, "pid 2")
    out, _ = second.communicate(timeout=60)
    assert second.returncode == hostlock.EXIT_HELD
    assert out.splitlines() == [
        # before it waits it says on whom: the run tells its person
        "waiting pid 1 on mgmt since 2026-11-30T09:00:00Z: remedy converge",
        "held",
        "pid 1 on mgmt since 2026-11-30T09:00:00Z: remedy converge",
    ]
    first.stdin.close()  # what a finished, killed or disconnected run does
    assert first.wait(timeout=60) == 0
    assert not (lock_dir / "remedy-tenstorrent-serving.service.holder").exists()
    third = holder(0, "pid 3")
    locked(third)
    assert (lock_dir / "remedy-tenstorrent-serving.service.holder").read_text() == "pid 3\n"
    third.stdin.close()
    third.wait(timeout=60)


def test_a_waiting_run_takes_the_lock_when_it_is_released_within_its_wait(lock_dir):
    first = holder(0, "first")
    locked(first)
    second = holder(20, "second")
    assert second.stdout.readline().strip() == "waiting first"
    first.stdin.close()
    first.wait(timeout=60)
    locked(second)
    second.stdin.close()
    assert second.wait(timeout=60) == 0


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


def test_a_run_that_dies_leaves_its_journal_and_the_next_run_gets_it(lock_dir):
    header = hostlock.journal_header("mgmt:41:1", "006", ["pyinfra", "deploys/converge.py"])
    first = holder(0, "first", header)
    boot = locked(first)[0]
    assert boot.startswith("boot ")
    first.stdin.write(hostlock.step_line("Scratch clone; bump", "changed") + "\n")
    first.stdin.write(hostlock.step_line("Switch to the proven system", "error") + "\n")
    first.stdin.flush()
    first.stdin.close()  # the end of input without "end": SIGKILL, a lost connection
    assert first.wait(timeout=60) == 0
    journal = lock_dir / "journal" / "run-tenstorrent-serving.service.jsonl"
    assert journal.exists() and oct(journal.stat().st_mode & 0o777) == "0o600"

    second = holder(0, "second", hostlock.journal_header("mgmt:42:2", "006"))
    lines = locked(second)
    assert lines[1] == "journal" and lines[-1] == "end-journal"
    dead = hostlock.read_journal(lines[2:-1], lines[0][5:])
    assert dead.run_id == "mgmt:41:1" and dead.runbook == "006" and not dead.rebooted
    assert dead.steps == (("Scratch clone; bump", "changed"),
                          ("Switch to the proven system", "error"))  # fmt: skip
    assert "died without ending" in dead.reason and "Switch to the proven system" in dead.reason
    second.stdin.write("end ok\n")  # a run that ends: its journal goes
    second.stdin.close()
    assert second.wait(timeout=60) == 0
    assert not journal.exists()
    third = holder(0, "third")
    assert "journal" not in locked(third)
    third.stdin.close()
    third.wait(timeout=60)


def test_a_journal_from_an_earlier_boot_is_a_run_that_died_with_the_boot():
    lines = ['{"boot_id": "old"}', hostlock.journal_header("m:1:1", "001"), "{torn"]
    dead = hostlock.read_journal(lines, "new")
    assert dead.rebooted and dead.reason.startswith("the host rebooted during the run")
    assert hostlock.read_journal(["garbage"], "new") is None
