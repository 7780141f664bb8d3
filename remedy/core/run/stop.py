"""A stop request (SIGINT, SIGTERM) as a value: pure.

The deploy's signal handler sets it; the run's conditions and the steps that
must see it (the drain, the override put back, the outcome) get it as an
argument and ask ``why``. There is one per process, as there is one set of
signal handlers.
"""

from __future__ import annotations

import signal


class StopRequest:
    """Whether, and why, this process was asked to stop."""

    def __init__(self, why: str | None = None):
        self._why = why

    @property
    def why(self) -> str | None:
        """Why this process was asked to stop, or None."""
        return self._why

    def request(self, signum: int, during: str | None = None) -> bool:
        """Record a stop request by SIGNUM, that came DURING a step (its name) or
        before any; False if one was recorded already (then: kill)."""
        if self._why is not None:
            return False
        self._why = f"interrupted by {signal.Signals(signum).name}" + (
            f" during '{during}'" if during else ""
        )
        return True

    def __repr__(self) -> str:
        return f"StopRequest({self._why!r})"


NOT_STOPPED = StopRequest()  # the default of a step called without one: never set
