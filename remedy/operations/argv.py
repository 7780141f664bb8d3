"""argv lists (remedy.core.commands) as pyinfra commands, every element quoted."""

from __future__ import annotations

import re
from dataclasses import dataclass

from paramiko.ssh_exception import SSHException
from pyinfra.api import FunctionCommand, QuoteString, StringCommand


def command(argv: list[str]) -> StringCommand:
    return StringCommand(*(QuoteString(a) for a in argv))


@dataclass
class Ran:
    ok: bool
    stdout: str
    stderr: str

    @property
    def tail(self) -> str:
        """The last line of what the command said, for an error message."""
        text = self.stderr.strip() or self.stdout.strip()
        return text.splitlines()[-1] if text else "no output"

    @property
    def why(self) -> str:
        """The line that says what went wrong (the last error line, else the last line)."""
        lines = [x.strip() for x in (self.stderr + "\n" + self.stdout).splitlines() if x.strip()]
        errors = [x for x in lines if re.search(r"(?i)\berror\b|\bfailed\b|\bfatal\b", x)]
        return (errors or lines or ["no output"])[-1][:300]


def run(host, argv: list[str]) -> Ran:
    """Run ARGV on HOST now (at execution, inside an operation or a FunctionCommand).
    A connection that is gone (a reboot mid-run) is a failed command that says so, not
    a traceback: the step gives up with that reason and the run goes on to record it."""
    try:
        ok, output = host.run_shell_command(command(argv), print_output=False)
    except (EOFError, OSError, SSHException) as exc:
        return Ran(False, "", f"error: the connection to {host.name} was lost ({exc!r})")
    return Ran(ok, "\n".join(output.stdout_lines), "\n".join(output.stderr_lines))


def _fails(state, host) -> bool:
    return False


def failure() -> FunctionCommand:
    """A command that fails its operation (the reason was already logged and recorded)."""
    return FunctionCommand(_fails, (), {})
