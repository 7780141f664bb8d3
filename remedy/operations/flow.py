"""The run, in order: the step list of ``remedy.core.run.steps`` carried out with pyinfra.

``deploys/converge.py`` runs it for every managed setting and
``deploys/restore_toolcalling.py`` for the tool-calling subset. Every step is one
operation called with its values, and each runs: when its stage is on is decided by
its host program (``remedy/host/lib.sh`` ``stage_off``), from the run journal, as in
the manual script. A step that fails is ignored by pyinfra, so the steps after it
run (and say why they do nothing); the outcome, last, fails the run when it failed.

What a step found out travels on its pyinfra result (``remedy.operations.said``);
the run's list of steps and results (``Restore.flow``) and its stop request
(``Restore.stop``) are values that the steps that read them get as arguments.
"""

from __future__ import annotations

from types import MappingProxyType

from remedy import lifecycle
from remedy.core.config import desired
from remedy.core.run.plan import NOOP
from remedy.core.run.steps import Step
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
            # a failure is the program's to carry (the run journal); only the
            # outcome's fails the host for pyinfra
            _ignore_errors=step.op != "serving.outcome_reported",
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
