"""argv lists (remedy.core.programs.commands) as pyinfra commands, every element quoted; a
step's command whose answer a later decision reads (remedy.core.programs.record)."""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass

from paramiko.ssh_exception import SSHException
from pyinfra import host
from pyinfra.api import QuoteString, StringCommand

from remedy.core.programs import record


def command(argv: list[str]) -> StringCommand:
    return StringCommand(*(QuoteString(a) for a in argv))


@dataclass
class Ran:
    ok: bool
    stdout: str
    stderr: str
    code: int | None = None  # its exit status, when the answer kept it

    @property
    def silent(self) -> str:
        """What a command that printed nothing says: how it ended."""
        if self.code is None:
            return "no output"
        if self.code > 128:  # sh's status of a command a signal ended
            return f"no output; exit {self.code} (signal {self.code - 128})"
        return f"no output; exit {self.code}"

    @property
    def tail(self) -> str:
        """The last line of what the command said, for an error message."""
        text = self.stderr.strip() or self.stdout.strip()
        return text.splitlines()[-1] if text else self.silent

    @property
    def why(self) -> str:
        """The line that says what went wrong (the last error line, else the last line)."""
        lines = [x.strip() for x in (self.stderr + "\n" + self.stdout).splitlines() if x.strip()]
        errors = [x for x in lines if re.search(r"(?i)\berror\b|\bfailed\b|\bfatal\b", x)]
        return (errors or lines or [self.silent])[-1][:300]


class Recorded(StringCommand):
    """ARGV as a step runs it: yielded to pyinfra, its answer kept at PATH for the
    step to read (``answered``)."""

    def __init__(self, path: str, argv: list[str]):
        super().__init__(*(QuoteString(a) for a in record.recorded_argv(path, argv)))
        self.path, self.argv = path, list(argv)


class Failure(StringCommand):
    """The command that fails its step, after the step said why (pyinfra then runs no
    more of it; ignored where the run goes on to the fallback)."""

    def __init__(self):
        super().__init__("false")


def _lost(exc: Exception) -> Ran:
    return Ran(False, "", f"error: the connection to {host.name} was lost ({exc!r})")


def _from(answer) -> Ran:
    if answer is None:  # pyinfra could not read the fact: it said why itself
        return Ran(False, "", f"error: the connection to {host.name} was lost (no answer)")
    return Ran(answer.ok, answer.stdout, answer.stderr, answer.code)


def ran(run_id: str, argv: list[str]) -> Generator[StringCommand, None, Ran]:
    """Inside a step's body: yield ARGV (pyinfra runs it then), and read its answer
    back as a fact. ``result = yield from ran(run_id, argv)``."""
    from facts.commands import CommandRecord

    path = record.record_path(run_id)
    yield Recorded(path, argv)
    try:
        return _from(host.get_fact(CommandRecord, path=path))
    except (EOFError, OSError, SSHException) as exc:
        return _lost(exc)


def read(argv: list[str]) -> Ran:
    """A command that changes nothing, read as a fact (at prepare or execution): what
    decides whether a step has anything to do."""
    from facts.commands import CommandRead

    try:
        return _from(host.get_fact(CommandRead, argv=argv))
    except (EOFError, OSError, SSHException) as exc:
        return _lost(exc)


def run(host, argv: list[str]) -> Ran:
    """Run ARGV on HOST now, outside any step (at prepare: the bump's preview, a switch
    that another holds). A connection that is gone is a failed command that says so."""
    try:
        ok, output = host.run_shell_command(command(argv), print_output=False)
    except (EOFError, OSError, SSHException) as exc:
        return Ran(False, "", f"error: the connection to {host.name} was lost ({exc!r})")
    return Ran(ok, "\n".join(output.stdout_lines), "\n".join(output.stderr_lines))
