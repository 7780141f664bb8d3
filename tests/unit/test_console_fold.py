"""A report's text at 80 columns, its commands still pasteable: a command longer than a
line is broken only between its shell words, with a shell's line continuation, so the
lines, pasted into a shell as printed, run the same command (bash runs them here)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from remedy.console import folded_lines

LONG = shlex.join(["printf", "[%s]", "-p", "2222", "-i", "/var/lib/remedy/twins/t1-2/id key",
                   "-o", "UserKnownHostsFile=/var/lib/remedy/twins/t1-2/known_hosts",
                   "root@127.0.0.1", "rm -- '/run/x y.conf' && systemctl daemon-reload",
                   'a"b', "c\\d"])  # fmt: skip


def pasted(lines: list[str]) -> str:
    """The command between the backquotes, as a person copies it off the lines."""
    text = "\n".join(lines)
    return text[text.index("`") + 1 : text.rindex("`")]


@pytest.mark.parametrize("label", ["next: ", "  next: "])
def test_a_long_command_fits_80_columns_and_runs_the_same_pasted(label):
    lines = folded_lines(label, f"read it with `{LONG}`, then run it again")
    assert max(map(len, lines)) <= 80, lines
    assert len(lines) > 2  # it was broken
    ran = subprocess.run(["bash", "-c", pasted(lines)], capture_output=True, text=True)
    want = subprocess.run(["bash", "-c", LONG], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout == want.stdout, (lines, ran.stderr)
    assert lines[-1].endswith("`, then run it again") or lines[-1].endswith("again")


def test_a_short_command_is_never_broken():
    lines = folded_lines("next: ", "make it durable: `remedy converge inv.py --limit h1` now")
    assert lines == ["next: make it durable: `remedy converge inv.py --limit h1` now"]


def test_prose_folds_at_blanks():
    text = " ".join(["word"] * 40)
    lines = folded_lines("next: ", text)
    assert max(map(len, lines)) <= 80 and " ".join(" ".join(lines).split()[1:]) == text
