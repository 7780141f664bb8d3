"""What the runbook check reports: a problem, located at its file, line and JSON path."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from remedy.errors import ConfigError

JsonPath = tuple[str | int, ...]


def json_path(path: JsonPath) -> str:
    """``("steps", 2, "operation")`` -> ``$.steps[2].operation`` (jsonschema's notation)."""
    text = "$"
    for elem in path:
        if isinstance(elem, int):
            text += f"[{elem}]"
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_-]*$", elem):
            text += f".{elem}"
        else:
            text += "['" + elem.replace("\\", "\\\\").replace("'", "\\'") + "']"
    return text


@dataclass(frozen=True)
class Problem:
    """One thing wrong, located: ``FILE:LINE[:COLUMN]: WHERE: message``.

    ``file`` is relative to the project; ``where`` is a JSON path for runbooks
    (``$.steps[2].operation``) or the operation a step of the run names.
    """

    file: str
    line: int | None
    message: str
    where: str | None = None
    column: int | None = None

    def __str__(self) -> str:
        location = self.file
        if self.line is not None:
            location += f":{self.line}"
            if self.column is not None:
                location += f":{self.column}"
        parts = [location, self.where, self.message] if self.where else [location, self.message]
        return ": ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.where,
            "message": self.message,
        }


class RunbookSyntaxError(ConfigError):
    """A runbook file that is not valid YAML (or not a mapping)."""

    def __init__(self, problem: Problem):
        super().__init__(str(problem))
        self.problem = problem


class RunbookInvalid(ConfigError):
    """A runbook that does not satisfy the schema or the cross-checks."""

    def __init__(self, problems: list[Problem]):
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(
            f"{len(problems)} problem(s); fix them (`remedy runbooks check` lists all):\n{lines}"
        )
        self.problems = problems
