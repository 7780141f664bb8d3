"""The run, in order: the step list of ``remedy.core.steps`` carried out with pyinfra.

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
"""

from __future__ import annotations

from pyinfra import host

from remedy.core import desired
from remedy.core.plan import FALLBACK
from remedy.core.steps import ALWAYS, DURABLE, Step
from remedy.operations import memory, nix, run, serving
from remedy.operations.results import ran
from remedy.operations.said import interrupted

MODULES = {"memory": memory, "nix": nix, "serving": serving}


def operation_of(step: Step):
    module, name = step.op.split(".")
    return getattr(MODULES[module], name)


def converge(scope: tuple[str, ...] = desired.ALL, runbook: str = "006"):
    """Add the run's operations for this host, converging the settings in SCOPE; the
    audit records RUNBOOK (unless `remedy runbooks apply` names another)."""
    restore = run.begin_restore(scope, runbook)
    done: list[tuple[Step, object]] = []
    for step in restore.steps.steps:
        meta = operation_of(step)(
            **step.args,
            name=step.template.title,
            _ignore_errors=step.template.ignorable,
            _if=condition(step, list(done), restore.plan.path),
        )
        done.append((step, meta))
        ran(host.name, step, meta)
    return restore


def condition(step: Step, done: list[tuple[Step, object]], path: str):
    """When STEP runs, from pyinfra's results of the steps DONE before it (evaluated at
    execution), or None for a step that always runs."""
    durable = [meta for s, meta in done if s.stage == DURABLE]

    def durable_failed() -> bool:
        return any(meta.did_error() for meta in durable)

    def meta_of(op: str):
        return next(meta for s, meta in done if s.op == op)

    if step.stage == ALWAYS:
        return None
    if step.stage == DURABLE:
        return lambda: not interrupted() and not durable_failed()
    fallback = path == FALLBACK
    if step.op == "serving.runtime_override_written":
        removed, switched = (
            meta_of("serving.runtime_override_removed"),
            meta_of("nix.system_switched"),
        )
        return lambda: (
            (fallback or durable_failed())
            if not interrupted()
            else removed.did_change() and not (switched.did_change() or switched.did_error())
        )
    if step.op == "nix.system_rolled_back":
        switched = meta_of("nix.system_switched")
        return lambda: (
            not interrupted()
            and durable_failed()
            and (switched.did_change() or switched.did_error())
        )
    written = next((meta for s, meta in done if s.op == "serving.runtime_override_written"), None)
    return lambda: (
        not interrupted()
        and (fallback or durable_failed())
        and not (written is not None and written.did_error())
    )
