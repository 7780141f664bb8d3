"""The run journal's remote answer, and when the next run may finish what it proved."""

from __future__ import annotations

import json

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
    for key in journal.SHELL_READ_KEYS:
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


def test_the_manual_scripts_journal_is_the_deploys(tmp_path):
    """What the shell writes, the deploy reads (a killed script is finished by either),
    and the shell reads the keys back itself."""
    import subprocess

    from remedy.core.config.host_data import from_host_data
    from remedy.core.render import manual_flow

    path = tmp_path / "run.json"
    shell = "\n".join(
        [
            *manual_flow._journal(from_host_data("cfx-llm2", {})),
            f"journal={path}",
            *(f"{k}={v}" for k, v in VALUES.items()),
            "lock_commit= new_rev= pid_at_override=",
            "journal_write",
            'printf "%s %s\\n" "$(jget scratch)" "$(jget commits)"',
        ]
    )
    ran = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == [VALUES["scratch"], "2"]
    written = json.loads(path.read_text())
    assert {k: written[k] for k in VALUES} == VALUES
    assert written["pid_at_override"] == 0 and written["lock_commit"] == ""
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    j = journal.parse(answer(written))
    assert j.resumable("a" * 40)
