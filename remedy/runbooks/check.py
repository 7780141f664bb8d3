"""``remedy runbooks check``: every runbook of a project, and what ties them to the code.

Each runbook against the schema (``schema``), ids unique across files, the
operations the runbooks name (``operation_index``), the run's step list
(``flow``) and the deploys (``deploys``). Problems are sorted by file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from remedy.runbooks.deploys import check_deploys
from remedy.runbooks.files import RUNBOOKS_DIR, Runbook, load_runbook, runbook_files
from remedy.runbooks.flow import check_flow_order, check_step_list
from remedy.runbooks.operation_index import OPERATIONS_PACKAGE, OperationIndex, check_operations
from remedy.runbooks.problems import Problem, RunbookSyntaxError
from remedy.runbooks.schema import load_schema, validate_runbook


@dataclass(frozen=True)
class CheckReport:
    runbooks: list[Runbook]
    problems: list[Problem]
    operations_source: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def _load_all(project: Path) -> tuple[list[Runbook], list[Problem]]:
    """Every runbook that parses, and each file's problems on its own."""
    schema = load_schema(project)
    problems: list[Problem] = []
    runbooks: list[Runbook] = []
    files = runbook_files(project)
    if not files:
        problems.append(
            Problem(RUNBOOKS_DIR, None, "no runbooks found (runbooks/<id>-<slug>.yaml)")
        )
    for path in files:
        try:
            runbook = load_runbook(path, project)
        except RunbookSyntaxError as exc:
            problems.append(exc.problem)
            continue
        problems.extend(validate_runbook(runbook, schema))
        runbooks.append(runbook)
    return runbooks, problems


def _duplicate_ids(runbooks: list[Runbook]) -> list[Problem]:
    by_id: dict[str, Runbook] = {}
    problems = []
    for runbook in runbooks:
        if runbook.id in by_id:
            problems.append(
                runbook.problem(
                    ("id",), f"id {runbook.id} is also used by {by_id[runbook.id].file}"
                )
            )
        else:
            by_id[runbook.id] = runbook
    return problems


def check_project(project_dir: Path | str, ops_package: str = OPERATIONS_PACKAGE) -> CheckReport:
    """Schema, cross-checks and the both-ways mapping for a whole project."""
    project = Path(project_dir).resolve()
    runbooks, problems = _load_all(project)
    problems.extend(_duplicate_ids(runbooks))
    operations = OperationIndex(project, ops_package)
    problems.extend(check_operations(runbooks, operations))
    problems.extend(check_deploys(project, runbooks, operations))
    named = set().union(*(rb.step_operations() for rb in runbooks))
    problems.extend(check_step_list(project, named, operations))
    for runbook in runbooks:
        problems.extend(check_flow_order(runbook))
    problems.sort(key=lambda p: (p.file, p.line or 0, p.where or ""))
    return CheckReport(runbooks, problems, operations.source)
