"""One error hierarchy for remedy, mapped to exit codes in one place.

Expected failures raise a ``RemedyError`` subclass whose message is one or
more sentences a person on call can act on: what failed, where (file, field,
host) and what to do. The CLI catches them once at the top
(``remedy.cli.main``) and exits with ``exit_code``; anything else is a bug and
is shown with its traceback.
"""

from __future__ import annotations

# Exit codes shared by every command; ``remedy status`` and ``remedy converge`` give the
# health codes, the same in both, so that a monitor can tell good from bad.
EXIT_OK = 0  # healthy and durable
EXIT_ERROR = 1  # a host could not be read, or the run failed outright or was refused
EXIT_USAGE = 2  # bad input: inventory data, runbook files, command-line values
EXIT_VOLATILE = 3  # healthy, but held together by state a reboot loses (or drifted)
EXIT_UNHEALTHY = 4  # tool calling is not parsed
EXIT_LOCKED = 5  # another run holds a host's lock, or a converge holds the fleet's
EXIT_BOOT_PENDING = 6  # healthy, and the next boot holds every setting: no reboot breaks it

# The worst host decides a fleet's code: an error outranks a sick host, which outranks a
# lock (the other run will finish), then volatile state, then a pending boot.
SEVERITY = [EXIT_OK, EXIT_BOOT_PENDING, EXIT_VOLATILE, EXIT_LOCKED, EXIT_UNHEALTHY, EXIT_ERROR]

# What each code means, for --help and the README
EXIT_CODES_HELP = (
    "Exit codes (the worst host's): 0 healthy and durable; 6 boot pending (healthy, the "
    "next boot holds every setting); 3 volatile or drifted (a reboot breaks or changes "
    "it); 4 broken (tool calls not parsed); 5 another run holds the host's lock (or, for "
    "converge, the fleet's); 2 bad "
    "input; 1 error (a host could not be read, or the run failed)."
)


def worst(codes) -> int:
    """The most severe of CODES (0 when there are none)."""
    return max(
        codes, key=lambda c: SEVERITY.index(c) if c in SEVERITY else len(SEVERITY), default=0
    )


class RemedyError(Exception):
    """An expected failure with a message meant for the operator."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, causes: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.causes = list(causes or [])

    def __str__(self) -> str:
        if not self.causes:
            return self.message
        return self.message + "".join(f"\n  caused by: {c}" for c in self.causes)


class ConfigError(RemedyError):
    """Bad input: inventory data, runbook files, command-line values."""

    exit_code = EXIT_USAGE


class TwinError(RemedyError):
    """The host twin could not be built, booted, reached or found."""
