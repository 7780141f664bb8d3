"""What the Nix steps' bodies share: commands as the checkout's owner, a lost
connection as a reason to give up, and failing the step with the reason it found.

A body is a generator that takes the step's values as one typed value (a dataclass
of its phase's module). It yields the commands the step runs, reads each answer it
decides on as a fact (``argv.ran``: pyinfra runs a body at execution, command by
command), and returns True when it is done; when the step gives up it says why
and yields the failing command (``give_up``), after which pyinfra runs no more.
"""

from __future__ import annotations

import functools
import shlex
import textwrap
from collections.abc import Generator, Iterator

from paramiko.ssh_exception import SSHException
from pyinfra import host, state
from pyinfra.api import StringCommand

from remedy.core.programs import commands
from remedy.operations.argv import Failure, command
from remedy.operations.said import say

Body = Generator[StringCommand, None, bool]


def owned(owner: str, home: str | None, argv: list[str]) -> list[str]:
    return commands.as_owner(owner, home, argv)


def give_up(why: str) -> Body:
    """Inside a body: say WHY, log it, and fail the step with that reason (ignored
    where the run goes on to the fallback). ``return (yield from give_up(why))``."""
    say(why=why)
    host.log_styled(why, fg="yellow")
    yield Failure()
    return False


def guarded(function):
    """A body whose connection goes away (a reboot mid-run) gives up with that reason
    instead of a traceback: the step fails and the run goes on."""

    @functools.wraps(function)
    def guarded(*args) -> Body:
        try:
            return (yield from function(*args))
        except (EOFError, OSError, SSHException) as exc:
            return (yield from give_up(f"the connection to {host.name} was lost ({exc!r})"))

    return guarded


def shown(argv: list[str]) -> str:
    """ARGV as a person reads it: quoted, an argument of several lines (a program, a
    commit message) named by its size (``-vv`` prints it whole when it runs)."""
    words = []
    for word in argv:
        if "\n" in word.strip():
            words.append(f"<a {len(word.strip().splitlines())}-line argument>")
        else:
            words.append(shlex.quote(word))
    return " ".join(words)


def preview(what: str, steps: list[list[str]]) -> Iterator[StringCommand]:
    """At prepare (``--dry``, or the confirmation): the step's commands as it will run
    them, with what only execution knows as shell variables ($scratch, the run
    journal's). Printed with ``-v``; never run (pyinfra runs a body at execution)."""
    if getattr(state, "print_noop_info", False):  # -v
        host.log_styled(f"{what} will run:", fg="blue")
        for argv in steps:
            for line in textwrap.wrap(
                shown(argv), 76, initial_indent="  $ ", subsequent_indent="      ",
                break_long_words=False, break_on_hyphens=False,
            ):  # fmt: skip
                host.log_styled(line, fg="blue")
    for argv in steps:
        yield command(argv)
