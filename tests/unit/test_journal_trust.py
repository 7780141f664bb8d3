"""journal_trust with and without journal_trust_all's answers (issue 34): the snapshot
asks the owner, mode and bytes of up to four of remedy's files in one stat and one grep;
each file's verdict must be the one journal_trust gives it alone, under dash and bash."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from remedy.core.programs import journal

SHELLS = [s for s in (["dash"], ["bash", "--posix"]) if shutil.which(s[0])]

ASK = r"""
for f in "$@"; do journal_trust "$f"; printf '%s|%s\n' "${f##*/}" "$_why"; done
"""


def verdicts(shell: list[str], files: list[str], batch: bool) -> tuple[str, str]:
    """Each file's verdict, and what journal_trust_all kept (empty without BATCH)."""
    first = 'journal_trust_all "$@"\n' if batch else ""
    script = journal.TRUST_SH + journal.TRUST_ALL_SH + first + ASK + 'printf "kept:%s" "$_jt"'
    out = subprocess.run(
        [*shell, "-c", script, "sh", *files], capture_output=True, text=True, check=True
    ).stdout
    answer, _, kept = out.partition("kept:")
    return answer, kept


@pytest.fixture
def files(tmp_path):
    def make(name: str, data: bytes, mode: int = 0o600) -> str:
        path = tmp_path / name
        path.write_bytes(data)
        path.chmod(mode)
        return str(path)

    good = make("options.record", b"key k\nvalue 1\n")
    tabs = make("nix-version.record", b"key\tk\r\nnix (Nix) 2.26.3")
    wide = make("run.json", b"{}\n", 0o644)
    odd = make("manual-runs.jsonl", b'{"a": "\x01"}\n')
    link = tmp_path / "link.record"
    link.symlink_to(good)
    return {"good": good, "tabs": tabs, "wide": wide, "odd": odd, "link": str(link),
            "gone": str(tmp_path / "absent.record"), "dir": str(tmp_path)}  # fmt: skip


@pytest.mark.parametrize("shell", SHELLS, ids=[" ".join(s) for s in SHELLS])
def test_the_batch_gives_each_file_the_verdict_it_gets_alone(shell, files):
    order = [files[k] for k in ("good", "tabs", "wide", "odd", "link", "gone", "dir")]
    alone, _ = verdicts(shell, order, batch=False)
    batched, kept = verdicts(shell, order, batch=True)
    assert batched == alone
    # the four regular files were asked at once (a link, a directory, a missing file not)
    assert sorted(line.split("\t")[0] for line in kept.split("\n") if line) == sorted(order[:4])
    if os.geteuid() == 0:  # the files are root's: only the mode and the bytes decide
        assert alone.splitlines()[:5] == [
            "options.record|",
            "nix-version.record|",
            "run.json|owner uid 0, mode 644: not root's with mode 600",
            "manual-runs.jsonl|bytes that remedy never writes",
            "link.record|a symbolic link",
        ]


@pytest.mark.parametrize("shell", SHELLS, ids=[" ".join(s) for s in SHELLS])
def test_a_name_the_batch_cannot_pair_is_asked_alone(shell, files):
    # a name with a newline cannot be paired with stat's lines: nothing is kept, and
    # every file is asked alone
    odd_name = os.path.join(os.path.dirname(files["good"]), "two\nlines.record")
    with open(odd_name, "wb") as f:
        f.write(b"x\n")
    os.chmod(odd_name, 0o600)
    order = [files["good"], odd_name, files["odd"]]
    alone, _ = verdicts(shell, order, batch=False)
    batched, kept = verdicts(shell, order, batch=True)
    assert batched == alone
    assert odd_name not in kept


@pytest.mark.parametrize("shell", SHELLS, ids=[" ".join(s) for s in SHELLS])
def test_one_file_is_asked_alone(shell, files):
    _, kept = verdicts(shell, [files["good"]], batch=True)
    assert kept == ""


@pytest.mark.parametrize("shell", SHELLS, ids=[" ".join(s) for s in SHELLS])
def test_journal_trust_runs_under_set_u_without_the_batch(shell, files):
    # the manual script runs with set -u and never defines the batch's names
    script = "set -u\n" + journal.TRUST_SH + ASK
    proc = subprocess.run(
        [*shell, "-c", script, "sh", files["good"], files["wide"]],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("options.record|\n")
