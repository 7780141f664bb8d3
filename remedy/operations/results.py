"""pyinfra's results of a host's steps, as ``remedy.core.outcome`` reads them."""

from __future__ import annotations

from remedy.core.outcome import CHANGED, ERROR, NO_CHANGE, NOT_RUN, StepResult
from remedy.core.steps import Step
from remedy.operations.said import said

_FLOW: dict[str, list[tuple[Step, object]]] = {}


def ran(host_name: str, step: Step, meta) -> None:
    """STEP was added for HOST_NAME as the operation META (an OperationMeta)."""
    _FLOW.setdefault(host_name, []).append((step, meta))


def status(meta) -> str:
    if not meta.is_complete():
        return NOT_RUN
    if meta.did_error():
        return ERROR
    return CHANGED if meta.did_change() else NO_CHANGE


def step_results(host_name: str) -> list[StepResult]:
    out = []
    for step, meta in _FLOW.get(host_name, []):
        out.append(
            StepResult(
                step.op,
                step.stage,
                step.template.title,
                status(meta),
                step.template.ignorable,
                said(host_name, meta._hash),
            )
        )
    return out
