"""A step's command and its answer (remedy.core.programs.record): the wrapper keeps the exit
status and both outputs whatever they hold, and the read gives them back once.

The shell runs here, as on the host (POSIX sh and coreutils' base64)."""

from __future__ import annotations

import shlex
import stat
import subprocess

from remedy.core.programs import record


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def test_a_recorded_command_keeps_its_status_and_outputs_and_is_read_once(tmp_path):
    path = str(tmp_path / "remedy" / "answer-h-1")
    said = "printf 'out\\377 x\\n'; printf 'err: no\\n' >&2; exit 3"
    ran = run(record.recorded_argv(path, ["sh", "-c", said]))
    assert ran.returncode == 0 and ran.stdout == ""  # the wrapper's own status: recorded
    assert stat.S_IMODE((tmp_path / "remedy" / "answer-h-1").stat().st_mode) == 0o600
    first = run(record.read_argv(path))
    answer = record.parse(first.stdout.splitlines())
    assert (answer.ok, answer.code) == (False, 3)
    assert answer.stdout == "out\ufffd x" and answer.stderr == "err: no"
    again = record.parse(run(record.read_argv(path)).stdout.splitlines())
    assert not again.ok and "left no answer" in again.stderr  # read once: it is gone


def in_own_var_tmp(argv: list[str], how: str) -> subprocess.CompletedProcess:
    """ARGV in a mount namespace of its own whose /var/tmp is an empty tmpfs (HOW: rw,
    or ro: nothing can be written there): the record's spare directory is never this
    machine's."""
    script = f'mount -t tmpfs -o {how} none /var/tmp && exec "$@"'
    return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *argv],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_a_record_that_cannot_be_written_in_run_goes_to_var_tmp_or_fails(tmp_path):
    (tmp_path / "remedy").write_text("a file where the directory goes")  # /run is full
    path = str(tmp_path / "remedy" / "answer")
    both = " && ".join([shlex.join(record.recorded_argv(path, ["echo", "kept"])),
                        shlex.join(record.read_argv(path))])  # fmt: skip
    spare = in_own_var_tmp(["sh", "-c", both], "rw")
    assert spare.returncode == 0, spare.stderr
    assert record.parse(spare.stdout.splitlines()).stdout == "kept"
    neither = in_own_var_tmp(record.recorded_argv(path, ["true"]), "ro")
    assert neither.returncode == 1, neither.stderr


def test_a_cut_or_odd_answer_is_a_failed_command_that_says_so():
    assert record.parse(["rc 0", "out b2sK", "err "]).stdout == "ok"
    cut = record.parse(["missing"])
    assert not cut.ok and "(missing)" in cut.stderr
    odd = record.parse(["rc x"])
    assert not odd.ok and "unreadable" in odd.stderr


def test_a_command_that_failed_silently_is_said_with_how_it_ended(tmp_path):
    from remedy.operations.argv import Ran

    def silent(script: str) -> str:
        path = str(tmp_path / "answer")
        run(record.recorded_argv(path, ["sh", "-c", script]))
        answer = record.parse(run(record.read_argv(path)).stdout.splitlines())
        return Ran(answer.ok, answer.stdout, answer.stderr, answer.code).why

    assert silent("exit 4") == "no output; exit 4"
    assert silent("exit 143") == "no output; exit 143 (signal 15)"  # as sh says a TERM
    assert silent("echo 'error: bad' >&2; exit 1") == "error: bad"
    assert Ran(False, "", "").why == "no output"  # no exit status kept: nothing more to say
