"""Issue 32 items 1 and 2 without a host: the journal's trust test and the lossless
transport of the remote read, each run by this machine's real sh, sed and stat."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from remedy import host
from remedy.core.programs import journal
from remedy.core.readings import sections


def distrust(path) -> str:
    proc = subprocess.run(
        ["sh", "-c", journal.TRUST_SH + '\njournal_distrust "$1"', "sh", str(path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return proc.stdout.strip()


def remedys_journal(path):
    path.write_text(journal.text({"run_id": "laptop:1:1", "toplevel": "/nix/store/x"}))
    os.chmod(path, 0o600)
    return path


def test_remedys_own_journal_is_trusted_and_an_absent_one_says_nothing(tmp_path):
    assert distrust(remedys_journal(tmp_path / "j.json")) == ""
    assert distrust(tmp_path / "absent.json") == ""


def test_a_link_another_mode_another_owner_or_odd_bytes_is_not_remedys(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to("/etc/shadow")
    assert distrust(link) == "a symbolic link"
    loose = remedys_journal(tmp_path / "loose.json")
    os.chmod(loose, 0o666)
    assert distrust(loose) == "owner uid 0, mode 666: not root's with mode 600"
    theirs = remedys_journal(tmp_path / "theirs.json")
    if os.geteuid() == 0:
        os.chown(theirs, 1000, 1000)
        assert distrust(theirs) == "owner uid 1000, mode 600: not root's with mode 600"
    odd = tmp_path / "odd.json"
    odd.write_bytes(b'{\n "run_id": "x\xff"\n}\n')
    os.chmod(odd, 0o600)
    assert distrust(odd) == "bytes that remedy never writes"
    (tmp_path / "dir.json").mkdir()
    assert distrust(tmp_path / "dir.json") == "not a regular file"


def test_the_snapshot_names_an_untrusted_journal_and_reads_nothing_of_it():
    found = journal.parse(
        ["scratch_clone /tmp/remedy-bump.x",
         "untrusted /var/lib/remedy/run-u.json: a symbolic link"]
    )  # fmt: skip
    assert found.values == {} and found.scratch_clones == ("/tmp/remedy-bump.x",)
    assert found.problem.startswith(
        "the run journal /var/lib/remedy/run-u.json cannot be trusted (a symbolic link)"
    )
    assert found.resumable("abc") is None


def test_setting_aside_renames_what_is_not_remedys_and_leaves_remedys_alone(tmp_path):
    """A step's write of the run journal (jset, remedy/host/lib.sh) sets aside a journal
    remedy did not write before it writes its own."""

    def write(path):
        program = host.text("lib.sh") + "jset step=written\n"
        return subprocess.run(
            ["sh", "-c", program, "remedy-t", "apply", f"journal={path}", "run_id=laptop:2:2"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip

    link = tmp_path / "run.json"
    link.symlink_to("/etc/shadow")
    proc = write(link)
    assert "set the run journal" in proc.stdout and not link.is_symlink()
    (aside,) = tmp_path.glob("run.json.untrusted-*")
    assert aside.is_symlink()  # moved, not followed: /etc/shadow untouched
    assert json.loads(link.read_text()) == {"run_id": "laptop:2:2", "step": "written"}
    good = remedys_journal(tmp_path / "good.json")
    assert "set the run journal" not in write(good).stdout
    assert good.exists() and not list(tmp_path.glob("good.json.untrusted-*"))


@pytest.mark.parametrize(
    "raw",
    [
        b"zz-\xff.conf",
        "1G\u00d72 caf\u00e9".encode(),
        b"tab\there back\\slash dollar$ end$",
        b"\x01\x1b[31mred\x7f",
        b"",
    ],
)
def test_the_remote_reads_escape_is_lossless_for_utf8_and_shows_other_bytes(raw):
    wire = subprocess.run(
        ["sh", "-c", sections.ESCAPE_SH], input=raw + b"\nnext\n", capture_output=True,
        check=True,
    ).stdout  # fmt: skip
    assert wire.isascii()  # nothing paramiko's decoder can trip on
    first, second = wire.decode().splitlines()
    assert sections.unescape(first) == raw.decode("utf-8", "backslashreplace")
    assert sections.unescape(second) == "next"


def test_an_escaped_answer_is_split_as_the_plain_one():
    plain = ["@@remedy:section a", "x\ty", "@@remedy:end"]
    escaped = [sections.ESCAPED, "@@remedy:section a$", "x\\ty$", "@@remedy:end$"]
    assert sections.split(plain, "F")["a"][0].lines == sections.split(escaped, "F")["a"][0].lines
