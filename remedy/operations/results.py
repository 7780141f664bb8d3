"""pyinfra's results of a host's steps, as ``remedy.core.run.outcome`` reads them."""

from __future__ import annotations

from remedy.core.run.outcome import CHANGED, ERROR, NO_CHANGE, NOT_RUN, StepResult
from remedy.core.run.steps import Step
from remedy.operations.said import said_by


def status(meta) -> str:
    if not meta.is_complete():
        return NOT_RUN
    if meta.did_error():
        return ERROR
    return CHANGED if meta.did_change() else NO_CHANGE


def step_results(flow: list[tuple[Step, object]]) -> list[StepResult]:
    """FLOW, the run's steps each with its pyinfra result (an OperationMeta), as the
    outcome reads them: status, and what the step said."""
    out = []
    for step, meta in flow:
        out.append(
            StepResult(
                step.op,
                step.stage,
                step.template.title,
                status(meta),
                step.template.ignorable,
                said_by(meta),
            )
        )
    return out
