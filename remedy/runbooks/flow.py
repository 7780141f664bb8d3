"""The run's step list against the runbooks and the operations.

The run's order lives in ``remedy.core.run.steps.TEMPLATES``: the deploy, --dry
and the manual script follow it. Here: each step of it names an operation that
exists and that a runbook step names, and carries an issue; and a flow runbook
(one whose steps name the run's bump) lists every step of the run, in its order.
"""

from __future__ import annotations

from pathlib import Path

import remedy
from remedy.core.run import steps as step_list
from remedy.core.run.steps import TEMPLATES, StepTemplate
from remedy.runbooks.files import Runbook, relative
from remedy.runbooks.operation_index import OperationIndex
from remedy.runbooks.problems import Problem
from remedy.runbooks.schema import issue_ref_is_valid

#: The file of the step list, as problems name it (``remedy/core/run/steps.py``).
STEP_LIST_FILE = relative(Path(step_list.__file__), Path(remedy.__file__).parent.parent)
#: The operation whose step makes a runbook a flow runbook: the run's bump.
FLOW_MARK = "nix.flake_input_updated"


def check_step_list(
    project: Path,
    named: set[str],
    operations: OperationIndex,
    templates: tuple[StepTemplate, ...] = TEMPLATES,
) -> list[Problem]:
    """Each step of the run's step list names an operation that exists and that a
    runbook step names (NAMED), and carries an issue. Only for the project whose
    code runs (a project of runbooks alone has no step list of its own)."""
    source = Path(step_list.__file__).resolve()
    if not source.is_relative_to(project.resolve()):
        return []
    text = source.read_text(encoding="utf-8").splitlines()
    problems = []
    for t in templates:
        line = next((i + 1 for i, x in enumerate(text) if f'"{t.key}"' in x), None)
        found, reason = operations.exists(t.op)
        if not found:
            problems.append(Problem(STEP_LIST_FILE, line, f"no such operation: {reason}", t.op))
        elif t.op not in named:
            problems.append(
                Problem(
                    STEP_LIST_FILE,
                    line,
                    "no runbook step names this operation; add a step with "
                    f"`operation: {t.op}` to the runbook it serves",
                    t.op,
                )
            )
        if not issue_ref_is_valid(t.issue):
            problems.append(
                Problem(
                    STEP_LIST_FILE,
                    line,
                    f"step {t.name!r} carries no issue reference ({t.issue!r}); "
                    "write repo#N, e.g. tt-stack#49",
                    t.op,
                )
            )
    return problems


def check_flow_order(
    runbook: Runbook, templates: tuple[StepTemplate, ...] = TEMPLATES
) -> list[Problem]:
    """A flow runbook lists every step of the run, in the order the run takes them:
    the manual script, --dry and the deploy all follow that list, and a reader of
    the runbook must too."""
    ops = [(i, s["operation"]) for i, s in runbook.items("steps") if s.get("operation")]
    if FLOW_MARK not in {op for _, op in ops}:
        return []
    order = [t.op for t in templates]
    at = 0
    for i, op in ops:
        if op not in order:
            continue  # not a step of the run (check_operations names what is wrong)
        if op not in order[at:]:
            n = order.index(op)
            after = f", after {order[n - 1]}" if n else ", first"
            return [
                runbook.problem(
                    ("steps", i, "operation"),
                    f"{op} is out of the run's order: the run takes it as step {n + 1}"
                    f"{after} ({STEP_LIST_FILE}, TEMPLATES); move this step there",
                )
            ]
        at = order.index(op, at) + 1
    listed = [op for _, op in ops if op in order]
    if len(listed) < len(ops) or listed == order:
        return []  # a step that is none of the run's is check_operations' to name
    missing = next((n for n, op in enumerate(order) if n >= len(listed) or listed[n] != op), 0)
    t = templates[missing]
    return [
        runbook.problem(
            ("steps",),
            f"lists {len(listed)} of the run's {len(order)} steps: step {missing + 1}, "
            f"{t.name!r} ({t.op}), is missing ({STEP_LIST_FILE}, TEMPLATES); the "
            "manual script and the run have every step, so must the runbook",
        )
    ]
