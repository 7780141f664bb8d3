"""The deploys: a runbook's ``deploy`` exists, and each deploy runs the run's step list.

A deploy (``deploys/*.py``, read with ``ast``, never run) imports the run
(``remedy.operations.flow``) and calls it; it imports no operation of its own,
since a step the step list does not carry is one that the runbooks, --dry and
the manual script do not know.
"""

from __future__ import annotations

import ast
from pathlib import Path

from remedy.runbooks.files import Runbook, relative
from remedy.runbooks.flow import STEP_LIST_FILE
from remedy.runbooks.operation_index import OperationIndex
from remedy.runbooks.problems import Problem

DEPLOYS_DIR = "deploys"


def deploy_files(project_dir: Path) -> list[Path]:
    directory = project_dir / DEPLOYS_DIR
    return sorted(p for p in directory.glob("*.py") if p.is_file())


def _imported(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """``(line, "module")`` or ``(line, "module.function")`` for each name the file
    imports from PACKAGE's modules."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name.removeprefix(package + "."))
                for alias in node.names
                if alias.name.startswith(package + ".")
            ]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            prefix = "" if node.module == package else node.module.removeprefix(package + ".")
            if prefix == node.module:
                continue  # another package
            found += [
                (node.lineno, f"{prefix}.{alias.name}" if prefix else alias.name)
                for alias in node.names
            ]
    return found


def _deploy_problems(path: Path, project: Path, operations: OperationIndex) -> list[Problem]:
    """A deploy that does not parse, or that imports an operation (or a module of them)."""
    rel = relative(path, project)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    except SyntaxError as exc:
        return [Problem(rel, exc.lineno, f"Python syntax error: {exc.msg}", column=exc.offset)]
    except (OSError, UnicodeDecodeError) as exc:
        return [Problem(rel, None, f"cannot read the deploy: {exc}")]
    problems = []
    for line, name in _imported(tree, operations.ops_package):
        if "." in name:
            is_operation = operations.exists(name)[0]
        else:
            is_operation = bool(operations.operations_in(name))
        if is_operation:
            problems.append(
                Problem(
                    rel,
                    line,
                    "a deploy runs the run's step list (remedy.operations.flow), not "
                    f"operations of its own: make this a step of TEMPLATES ({STEP_LIST_FILE})",
                    name,
                )
            )
    return problems


def check_deploys(
    project: Path, runbooks: list[Runbook], operations: OperationIndex
) -> list[Problem]:
    """Each deploy parses and imports no operation; each runbook's deploy exists."""
    problems: list[Problem] = []
    for path in deploy_files(project):
        problems.extend(_deploy_problems(path, project, operations))
    for runbook in runbooks:
        deploy = runbook.deploy
        if isinstance(deploy, str) and not (project / deploy).is_file():
            problems.append(runbook.problem(("deploy",), f"{deploy} does not exist in the project"))
    return problems
