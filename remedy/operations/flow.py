"""The run, in order: the step list of ``remedy.core.run.steps`` carried out with pyinfra.

``deploys/converge.py`` runs it for every managed setting and
``deploys/restore_toolcalling.py`` for the tool-calling subset. Every step is one
operation called with its values. Which stages run is pyinfra's own ``_if=`` on
the earlier steps' results:

* a durable step runs while no earlier durable step failed (they fail ignored);
* a fallback step runs when the plan's path is the fallback, or once a durable
  step failed; the rollback only after a switch was attempted; nothing restarts
  onto an override that failed to take effect;
* a stop request (SIGINT, SIGTERM) lets no further step start, except the /run
  override going back when it was removed and no switch followed.

What a step found out travels on its pyinfra result (``remedy.operations.said``);
the run's list of steps and results (``Restore.flow``) and its stop request
(``Restore.stop``) are values that the conditions and the steps that read them
get as arguments.
"""

from __future__ import annotations

from types import MappingProxyType

from remedy import lifecycle
from remedy.core.config import desired
from remedy.core.run.plan import FALLBACK, NOOP
from remedy.core.run.steps import ALWAYS, DURABLE, Step
from remedy.core.run.stop import StopRequest
from remedy.operations import memory, nix, pyinfra_private, run, serving

MODULES = MappingProxyType({"memory": memory, "nix": nix, "serving": serving})


def operation_of(step: Step):
    module, name = step.op.split(".")
    return getattr(MODULES[module], name)


def converge(scope: tuple[str, ...] = desired.ALL, runbook: str = "006"):
    """Add the run's operations for this host, converging the settings in SCOPE; the
    audit records RUNBOOK (unless `remedy runbooks apply` names another). A builder
    (host data remedy_role builder) serves nothing: it gets no operation."""
    from pyinfra import host, logger

    if host.data.get("remedy_role") == "builder":
        logger.info(f"{host.name}: a builder (remedy_role builder): nothing to converge")
        return None
    restore = run.begin_restore(lifecycle.process_run(), scope, runbook)
    done = restore.flow  # (step, its pyinfra result), in order: what the outcome reads
    for step in restore.steps.steps:
        if not may_act(step, restore.plan.path):
            continue
        op = operation_of(step)
        meta = op(
            step.values,
            **run_values(op, restore),
            name=step.template.title,
            _ignore_errors=step.template.ignorable,
            _if=condition(step, list(done), restore.plan.path, restore.stop),
        )
        done.append((step, meta))
    return restore


def may_act(step: Step, path: str) -> bool:
    """Whether STEP is an operation of this run. A plan with nothing to do (NOOP) has
    only the steps that can still act: those given no reason to skip (the outcome, a
    scratch clone a killed run left, a /run drop-in the next boot now carries). Every
    other step would say the plan's reason and do nothing, and the outcome says it once.
    A fleet's no-op run (issue 34) then prepares and journals two or three operations a
    host, not 23."""
    return path != NOOP or not step.values.skip


def run_values(op, restore) -> dict:
    """The run's own values that OP takes: its stop request, and its steps' results so
    far (the outcome's step reads them at execution, when all are complete)."""
    values = {"stop": restore.stop, "flow": restore.flow}
    return {k: v for k, v in values.items() if pyinfra_private.takes(op, k)}


def condition(step: Step, done: list[tuple[Step, object]], path: str, stop: StopRequest):
    """When STEP runs, from pyinfra's results of the steps DONE before it and the STOP
    request (evaluated at execution), or None for a step that always runs."""
    durable = [meta for s, meta in done if s.stage == DURABLE]

    def durable_failed() -> bool:
        return any(meta.did_error() for meta in durable)

    def meta_of(op: str):
        return next(meta for s, meta in done if s.op == op)

    if step.stage == ALWAYS:
        return None
    if step.stage == DURABLE:
        return lambda: not stop.why and not durable_failed()
    fallback = path == FALLBACK
    if step.op == "serving.runtime_override_written":
        removed, switched = (
            meta_of("serving.runtime_override_removed"),
            meta_of("nix.system_switched"),
        )
        return lambda: (
            (fallback or durable_failed())
            if not stop.why
            else removed.did_change() and not (switched.did_change() or switched.did_error())
        )
    if step.op == "nix.system_rolled_back":
        switched = meta_of("nix.system_switched")
        return lambda: (
            not stop.why and durable_failed() and (switched.did_change() or switched.did_error())
        )
    written = next((meta for s, meta in done if s.op == "serving.runtime_override_written"), None)
    return lambda: (
        not stop.why
        and (fallback or durable_failed())
        and not (written is not None and written.did_error())
    )
