"""What the Nix steps' bodies share: commands as the checkout's owner, a lost
connection as a reason to give up, and failing the step with the reason it found.

A body is a ``FunctionCommand`` that takes the step's values as one typed value
(a dataclass of its phase's module) and answers as pyinfra's commands do: True
when it is done, False when the step gives up, having said why (``give_up``).
"""

from __future__ import annotations

import functools

from paramiko.ssh_exception import SSHException
from pyinfra import host

from remedy.core import commands
from remedy.operations.said import say


def owned(owner: str, home: str | None, argv: list[str]) -> list[str]:
    return commands.as_owner(owner, home, argv)


def give_up(why: str) -> bool:
    """Inside a body: say WHY, log it, and fail the command, so the step fails with that
    reason (ignored where the run goes on to the fallback)."""
    say(why=why)
    host.log_styled(why, fg="yellow")
    return False


def guarded(function):
    """A body whose connection goes away (a reboot mid-run) gives up with that reason
    instead of a traceback: the step fails and the run goes on."""

    @functools.wraps(function)
    def guarded(state, host, *args):
        try:
            return function(state, host, *args)
        except (EOFError, OSError, SSHException) as exc:
            return give_up(f"the connection to {host.name} was lost ({exc!r})")

    return guarded
