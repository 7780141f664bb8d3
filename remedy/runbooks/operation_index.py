"""Every operation a runbook names exists: ``<module>.<function>`` is an
``@operation`` of ``remedy.operations.<module>`` (pyinfra's decorator sets
``_inner`` on it). Importing an operations module only defines it."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from remedy.runbooks.files import Runbook
from remedy.runbooks.problems import Problem

OPERATIONS_PACKAGE = "remedy.operations"


@contextmanager
def _first_on_sys_path(directory: Path) -> Iterator[None]:
    entry = str(directory)
    sys.path.insert(0, entry)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        try:
            sys.path.remove(entry)
        except ValueError:
            pass


class OperationIndex:
    """Resolves ``<module>.<function>`` to the ``@operation`` in ``<ops_package>.<module>``.

    The project directory goes first on ``sys.path`` while importing, so a
    top-level operations package of the project (a test's fixture) is found;
    ``remedy.operations`` comes from the remedy that runs. ``source`` says
    which directory was used.
    """

    def __init__(self, project_dir: Path | str, ops_package: str = OPERATIONS_PACKAGE):
        self.project_dir = Path(project_dir).resolve()
        self.ops_package = ops_package
        self._modules: dict[str, tuple[ModuleType | None, str | None]] = {}
        self.source: str | None = None

    def module(self, module: str) -> tuple[ModuleType | None, str | None]:
        """``(module object or None, reason it could not be imported)``."""
        if module not in self._modules:
            self._modules[module] = self._import(f"{self.ops_package}.{module}")
        return self._modules[module]

    def _import(self, full: str) -> tuple[ModuleType | None, str | None]:
        with _first_on_sys_path(self.project_dir):
            try:
                imported = importlib.import_module(full)
            except ModuleNotFoundError as exc:
                prefixes = full.split(".")
                missing = {".".join(prefixes[: i + 1]) for i in range(len(prefixes))}
                if exc.name in missing:
                    return None, f"there is no module {full}"
                return None, f"importing {full} failed: {exc}"
            except Exception as exc:  # a broken operations module is a finding, not a crash
                return None, f"importing {full} failed: {type(exc).__name__}: {exc}"
        package = sys.modules.get(self.ops_package)
        if package is not None and package.__file__ and self.source is None:
            self.source = str(Path(package.__file__).parent)
        return imported, None

    def exists(self, name: str) -> tuple[bool, str | None]:
        """Whether ``name`` (``<module>.<function>``) is an operation, and why not."""
        module_name, _, function = name.partition(".")
        if not function:
            return False, f"{name!r} is not <module>.<function>"
        module, reason = self.module(module_name)
        if module is None:
            return False, reason
        target = getattr(module, function, None)
        if target is None:
            return False, f"{self.ops_package}.{module_name} has no {function!r}"
        if not hasattr(target, "_inner"):
            return False, (
                f"{self.ops_package}.{name} is not a pyinfra @operation (no _inner attribute)"
            )
        return True, None

    def operations_in(self, module_name: str) -> list[str]:
        """The operations ``<ops_package>.<module_name>`` holds (none if it does not import)."""
        module, _ = self.module(module_name)
        names = vars(module).items() if module is not None else ()
        return sorted(f"{module_name}.{n}" for n, value in names if hasattr(value, "_inner"))


def check_operations(runbooks: list[Runbook], operations: OperationIndex) -> list[Problem]:
    """Every operation a runbook names must exist."""
    problems = []
    for runbook in runbooks:
        for path, name in runbook.operation_refs():
            if not re.match(r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$", name):
                continue  # the schema already reported it
            found, reason = operations.exists(name)
            if not found:
                problems.append(runbook.problem(path, f"operation {name} does not exist: {reason}"))
    return problems
