"""The run journal's remote answer, and when the next run may finish what it proved."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from remedy.core.programs import journal

VALUES = {
    "run_id": "laptop:42:1796000000",
    "started": "2026-12-01T03:00:00Z",
    "base_head": "a" * 40,
    "scratch": "/tmp/remedy-bump.Ab12Cd34",
    "commits": 2,
    "toplevel": "/nix/store/2zrzqnys6w9bym25n24n54j14yxwg1xb-nixos-system-cfx-llm2",
    "proven_head": "c" * 40,
}


def answer(values, *, mtime=1796000100, btime=1795990000, head="c" * 40, present="yes"):
    """The run.journal section as journal.SNIPPET prints it."""
    return [
        f"mtime {mtime}",
        f"btime {btime}",
        f"scratch_head {head}",
        f"toplevel_present {present}",
        "json",
        *journal.text(values).splitlines(),
    ]


def test_the_file_is_one_key_per_line_so_the_shell_can_read_two_of_them():
    lines = journal.text(VALUES).splitlines()
    for key in ("scratch", "toplevel"):  # what journal.SNIPPET reads with sed
        assert f'"{key}": ' in journal.SNIPPET
        (line,) = [x for x in lines if x.lstrip().startswith(f'"{key}"')]
        assert line.strip().rstrip(",") == f'"{key}": "{VALUES[key]}"'
    assert json.loads(journal.text(VALUES)) == VALUES


def test_a_proven_build_is_finished_by_the_next_run():
    j = journal.parse(answer(VALUES))
    why = j.resumable("a" * 40)
    assert why and VALUES["toplevel"] in why and VALUES["started"] in why
    assert "it did not end" in why


def test_a_journal_older_than_the_boot_died_with_the_boot():
    j = journal.parse(answer(VALUES, mtime=1795980000, btime=1795990000))
    assert j.died_with_boot
    assert "the host rebooted during it" in j.resumable("a" * 40)


def test_nothing_to_finish_when_the_host_moved_on():
    assert journal.parse(answer(VALUES)).resumable("b" * 40) is None  # someone committed
    assert journal.parse(answer(VALUES, head="")).resumable("a" * 40) is None  # clone gone
    assert journal.parse(answer(VALUES, present="no")).resumable("a" * 40) is None  # gc'd
    published = {**VALUES, "lock_commit": "d" * 40}
    assert journal.parse(answer(published)).resumable("a" * 40) is None  # fast-forwarded
    unproven = {k: v for k, v in VALUES.items() if k != "toplevel"}
    assert journal.parse(answer(unproven)).resumable("a" * 40) is None


def test_no_journal_and_a_torn_one():
    assert not journal.parse([]).present
    torn = journal.parse(["mtime 1", "json", '{"run_id": "x", "scr'])
    assert not torn.present and "unreadable" in torn.problem


SHELLS = [sh for sh in (["dash"], ["bash", "--posix"]) if shutil.which(sh[0])]


def lib_run(shell: list[str], body: str, *args: str) -> subprocess.CompletedProcess:
    """BODY after the host library (remedy/host/lib.sh), as a step program runs."""
    from remedy import host

    return subprocess.run([*shell, "-c", host.text("lib.sh") + body, "test", "apply", *args],
                          capture_output=True, text=True, check=True)  # fmt: skip


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_step_programs_journal_is_what_remedy_reads(tmp_path, shell):
    """What the host library writes (every step program's jset, the deploy's and the
    manual script's alike), remedy reads; and the library reads the keys back."""
    path = tmp_path / "run.json"
    values = [f"{k}={v}" for k, v in VALUES.items() if k != "run_id"]
    body = 'jset "$@"\nprintf "%s %s\\n" "$(jget scratch)" "$(jget commits)"'
    ran = lib_run(shell, 'shift "$nargs"\n' + body, f"journal={path}",
                  f"run_id={VALUES['run_id']}", "--", *values)  # fmt: skip
    assert ran.stdout.split() == [VALUES["scratch"], "2"]
    written = json.loads(path.read_text())
    assert written == VALUES
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    j = journal.parse(answer(written))
    assert j.resumable("a" * 40)
    # another run's journal starts over; a key set empty goes
    lib_run(shell, "jset toplevel=", f"journal={path}", f"run_id={VALUES['run_id']}")
    assert "toplevel" not in json.loads(path.read_text())
    lib_run(shell, "jset scratch=/tmp/x", f"journal={path}", "run_id=other")
    assert json.loads(path.read_text()) == {"run_id": "other", "scratch": "/tmp/x"}


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_journal_remedy_did_not_write_is_set_aside_never_read(tmp_path, shell):
    path = tmp_path / "run.json"
    path.write_text('{\n "run_id": "r",\n "toplevel": "/nix/store/evil"\n}\n')
    path.chmod(0o644)  # not remedy's mode
    ran = lib_run(shell, 'printf "[%s]" "$(jget toplevel)"; jset scratch=/tmp/y',
                  f"journal={path}", "run_id=r")  # fmt: skip
    assert ran.stdout.startswith("[]") and "aside" in ran.stdout
    assert json.loads(path.read_text()) == {"run_id": "r", "scratch": "/tmp/y"}
    assert list(tmp_path.glob("run.json.untrusted-*"))
