"""What each step said at execution, for the outcome and the audit, never for a step.

An operation decides from its values and the facts it reads; what it found out on
the way (the new rev, the derivations it would compile, why it gave up) is said
here, keyed by host and pyinfra operation hash. Only the report at the end reads
it (``remedy.core.outcome``), together with pyinfra's own results.
"""

from __future__ import annotations

import signal

from pyinfra import host, state

from remedy.operations.argv import failure

_SAID: dict[str, dict[str, dict]] = {}
_INTERRUPTED: list[str] = []


def say(**values) -> None:
    """Record VALUES for the operation being executed (nothing at prepare)."""
    if not state.is_executing or host.current_op_hash is None:
        return
    _SAID.setdefault(host.name, {}).setdefault(host.current_op_hash, {}).update(values)


def note(text: str) -> None:
    """A note for the outcome line and the audit."""
    if not state.is_executing or host.current_op_hash is None:
        return
    said = _SAID.setdefault(host.name, {}).setdefault(host.current_op_hash, {})
    said.setdefault("notes", []).append(text)


def said(host_name: str, op_hash: str) -> dict:
    return dict(_SAID.get(host_name, {}).get(op_hash, {}))


def gave_up(why: str, fg: str = "red", **values):
    """Inside an operation: say WHY, log it, and fail the operation (ignored where the
    flow goes on)."""
    say(why=why, **values)
    host.log_styled(why, fg=fg)
    yield failure()


def lost(what: str) -> str:
    """Why a fact could not be read: pyinfra has logged the error itself."""
    return f"cannot read {what} on {host.name} (is the connection lost? see above)"


def interrupted() -> str | None:
    """Why this process was asked to stop (SIGINT, SIGTERM), or None."""
    return _INTERRUPTED[0] if _INTERRUPTED else None


def interrupt(signum: int) -> bool:
    """Record a stop request; False if one was recorded already (then: kill)."""
    if _INTERRUPTED:
        return False
    _INTERRUPTED.append(f"interrupted by {signal.Signals(signum).name}")
    return True
