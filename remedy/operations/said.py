"""What each step said at execution, for the outcome and the audit, never for a step.

An operation decides from its values and the facts it reads; what it found out on
the way (the new rev, the derivations it would compile, why it gave up) is
recorded on its own pyinfra result (the ``OperationMeta`` that the operation call
returned), under the keys ``remedy.core.run.report_keys`` declares with their types.
Only the outcome reads it (``remedy.core.run.outcome``), from the results the run
holds: no module state carries it.
"""

from __future__ import annotations

from pyinfra import host, state

from remedy.core.run import report_keys
from remedy.operations import pyinfra_private
from remedy.operations.argv import Failure


def _said_now() -> dict | None:
    """What the operation being executed said so far (None at prepare)."""
    meta = pyinfra_private.current_meta(state, host)
    return None if meta is None else pyinfra_private.said_on(meta)


def say(**values) -> None:
    """Record VALUES for the operation being executed (nothing at prepare)."""
    said = _said_now()
    if said is not None:
        said.update(report_keys.checked(values))


def note(text: str) -> None:
    """A note for the outcome line and the audit."""
    said = _said_now()
    if said is not None:
        said.setdefault("notes", []).append(text)


def said_by(meta) -> dict:
    """What the step whose pyinfra result is META said (a copy)."""
    return pyinfra_private.said_by(meta)


def gave_up(why: str, fg: str = "red", **values):
    """Inside an operation: say WHY, log it, and fail the operation (ignored where the
    flow goes on)."""
    say(why=why, **values)
    host.log_styled(why, fg=fg)
    yield Failure()


def lost(what: str) -> str:
    """Why a fact could not be read: pyinfra has logged the error itself."""
    return f"cannot read {what} on {host.name} (is the connection lost? see above)"
