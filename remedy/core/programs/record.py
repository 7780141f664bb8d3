"""A command whose answer a later decision reads: what it printed and how it ended,
kept on the host.

A step yields its commands to pyinfra (so ``-v`` shows each, and pyinfra's result
counts them), and a decision that needs a command's answer reads it afterwards as
a fact (pyinfra 3 runs an operation's body at execution, command by command). The
command runs under ``RECORD_SH``, which keeps its exit status, stdout and stderr in
one small file, root's, mode 0600, written atomically; the fact ``CommandRecord``
prints that file once and removes it. A read that decides whether a step has
anything to do is the fact ``CommandRead``: the same answer, with no command yielded.

The answer is three lines: ``rc N``, ``out B64`` and ``err B64`` (base64, so any
bytes a command prints survive the line-based fact output).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from remedy import host

RECORD_DIR = "/run/remedy"  # tmpfs: a record never outlives the boot it was made in
# (remedy/host/record.sh keeps it in /var/tmp/remedy when /run cannot take it)

RECORD_SH = host.text("record.sh")
READ_SH = host.text("record_read.sh")
ANSWER_ARGV = ["sh", "-c", host.text("record_answer.sh") + 'answer "$@"\n', "sh"]


def record_path(run_id: str) -> str:
    """Where this run's last command keeps its answer (one at a time: a host's steps
    run in order)."""
    safe = "".join(c if c.isalnum() or c in "-." else "-" for c in run_id)
    return f"{RECORD_DIR}/answer-{safe}"


def recorded_argv(path: str, argv: list[str]) -> list[str]:
    """ARGV, run so that its answer is kept at PATH."""
    return ["sh", "-c", RECORD_SH, "sh", path, *argv]


def read_argv(path: str) -> list[str]:
    return ["sh", "-c", READ_SH, "sh", path]


@dataclass(frozen=True)
class Answer:
    """How a command ended (``ok``: exit status 0) and what it printed."""

    ok: bool
    stdout: str
    stderr: str
    code: int | None = None


def _text(b64: str) -> str:
    return base64.b64decode(b64.encode()).decode("utf-8", "replace")


def parse(lines: list[str], what: str = "the command") -> Answer:
    """The answer from the fact's lines; a record that is missing or cut says so as a
    failed command (the connection dropped before it was written)."""
    fields: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(" ")
        if key in ("rc", "out", "err"):
            fields[key] = value.strip()
    if "rc" not in fields:
        said = "; ".join(x for x in lines if x.strip())[:200] or "nothing"
        return Answer(False, "", f"error: {what} left no answer on the host ({said})")
    try:
        code = int(fields["rc"])
        out, err = _text(fields.get("out", "")), _text(fields.get("err", ""))
    except (ValueError, UnicodeError) as exc:
        return Answer(False, "", f"error: the answer of {what} is unreadable ({exc})")
    return Answer(code == 0, out.rstrip("\n"), err.rstrip("\n"), code)
