"""One error hierarchy for remedy, mapped to exit codes in one place.

Expected failures raise a ``RemedyError`` subclass whose message is one or
more sentences a person on call can act on: what failed, where (file, field,
host) and what to do. The CLI catches them once at the top
(``remedy.cli.main``) and exits with ``exit_code``; anything else is a bug and
is shown with its traceback.
"""

from __future__ import annotations

# Exit codes shared by every command. ``remedy status`` adds the health codes.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_VOLATILE = 3  # healthy, but held together by state a reboot loses
EXIT_UNHEALTHY = 4  # tool calling is not parsed
EXIT_LOCKED = 5  # another run holds a host's lock


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
