"""What a step's command answered (``remedy.core.programs.record``), read as a fact.

ran = host.get_fact(CommandRecord, path=record_path(run_id))  # after yielding it
listed = host.get_fact(CommandRead, argv=[...])  # a read that decides a noop
ran.ok, ran.stdout, ran.stderr
"""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand

from remedy.core.programs import record


def _quoted(argv: list[str]) -> StringCommand:
    return StringCommand(*(QuoteString(a) for a in argv))


class CommandRecord(FactBase[record.Answer]):
    """The answer the last recorded command left at PATH, read once (the file goes)."""

    def command(self, path: str):
        return _quoted(record.read_argv(path))

    def process(self, output):
        return record.parse(list(output))


class CommandRead(FactBase[record.Answer]):
    """ARGV's answer: a command that changes nothing, run as a fact."""

    def command(self, argv: list[str]):
        return _quoted([*record.ANSWER_ARGV, *argv])

    def process(self, output):
        return record.parse(list(output))
