"""The runbook files: find them, parse them, and remember where each value sits.

A runbook is ``runbooks/<id>-<slug>.yaml`` in the project. Parsing keeps the
line of every value and key, so a problem found later names ``file:line``.
Nothing here validates: see ``remedy.runbooks.schema``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remedy.errors import ConfigError
from remedy.runbooks.problems import JsonPath, Problem, RunbookSyntaxError, json_path

RUNBOOKS_DIR = "runbooks"
RUNBOOK_FILE_RE = re.compile(r"^(?P<id>[0-9]{3})-(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)\.ya?ml$")


@dataclass(frozen=True)
class _Marks:
    """Where each value (and each mapping key) of a YAML document starts, by JSON path."""

    values: dict[JsonPath, tuple[int, int]]
    keys: dict[JsonPath, tuple[int, int]]

    def line_of(self, path: JsonPath, *, key: bool = False) -> int | None:
        """1-based line of ``path``, or of its deepest ancestor that exists."""
        table = self.keys if key and path in self.keys else self.values
        for depth in range(len(path), -1, -1):
            mark = table.get(path[:depth]) or self.values.get(path[:depth])
            if mark is not None:
                return mark[0]
        return None


def _index_marks(
    node: yaml.Node, path: JsonPath, marks: _Marks, duplicates: list[tuple[JsonPath, int, int]]
) -> None:
    marks.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                duplicates.append((path + (key,), line, seen[key]))
            seen[key] = line
            marks.keys[path + (key,)] = (line, key_node.start_mark.column + 1)
            _index_marks(value_node, path + (key,), marks, duplicates)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_marks(item, path + (index,), marks, duplicates)


@dataclass(frozen=True)
class Runbook:
    """One runbook file, parsed (not necessarily valid: see ``validate_runbook``)."""

    path: Path
    """Absolute path of the file."""
    file: str
    """The path relative to the project, as problems name it."""
    data: dict[str, Any]
    marks: _Marks = field(repr=False)
    duplicate_keys: tuple[tuple[JsonPath, int, int], ...] = field(default=(), repr=False)

    @property
    def id(self) -> str:
        value = self.data.get("id")
        return value if isinstance(value, str) else self.path.name.split("-", 1)[0]

    @property
    def title(self) -> str:
        return str(self.data.get("title", ""))

    @property
    def issues(self) -> list[str]:
        return list(self.data.get("issues") or [])

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list(self.data.get("steps") or [])

    @property
    def deploy(self) -> str | None:
        return self.data.get("deploy")

    def items(self, section: str) -> list[tuple[int, dict[str, Any]]]:
        """The mappings of a list section (``steps``, ``rollback``, ...), with their index;
        anything else there is the schema's to report."""
        value = self.data.get(section)
        entries = value if isinstance(value, list) else []
        return [(index, item) for index, item in enumerate(entries) if isinstance(item, dict)]

    def line_of(self, path: JsonPath, *, key: bool = False) -> int | None:
        return self.marks.line_of(path, key=key)

    def problem(self, path: JsonPath, message: str, *, key: bool = False) -> Problem:
        return Problem(self.file, self.line_of(path, key=key), message, json_path(path))

    def operation_refs(self) -> list[tuple[JsonPath, str]]:
        """Every ``<module>.<function>`` the runbook names, with its JSON path."""
        refs: list[tuple[JsonPath, Any]] = []
        for section in ("steps", "rollback", "verification"):
            for i, item in self.items(section):
                refs.append(((section, i, "operation"), item.get("operation")))
        for i, item in self.items("preconditions"):
            check = item.get("check")
            if isinstance(check, dict):
                refs.append((("preconditions", i, "check", "operation"), check.get("operation")))
        return [(path, name) for path, name in refs if isinstance(name, str)]

    def step_operations(self) -> set[str]:
        """Operations named by a step (``steps`` or ``rollback``)."""
        return {
            name
            for path, name in self.operation_refs()
            if path[0] in ("steps", "rollback") and len(path) == 3
        }

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, **self.data}


def relative(path: Path, project_dir: Path) -> str:
    """PATH as problems name it: relative to the project when it is inside."""
    try:
        return path.resolve().relative_to(project_dir.resolve()).as_posix()
    except ValueError:
        return str(path)


def _parse(text: str, rel: str) -> tuple[yaml.Node | None, Any]:
    """The YAML document's node and value; RunbookSyntaxError at its line and column."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return node, loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        problem = Problem(
            rel,
            mark.line + 1 if mark else None,
            f"YAML syntax error: {what}",
            column=mark.column + 1 if mark else None,
        )
        raise RunbookSyntaxError(problem) from exc
    except yaml.YAMLError as exc:
        raise RunbookSyntaxError(Problem(rel, None, f"YAML error: {exc}")) from exc
    finally:
        loader.dispose()


def load_runbook(path: Path | str, project_dir: Path | str | None = None) -> Runbook:
    """Parse one runbook file, keeping where each value sits (no validation).

    Raises ``RunbookSyntaxError`` (a ``ConfigError``) naming ``file:line:column``
    when the YAML does not parse, or when the document is not a mapping.
    """
    given = Path(path)
    path = given.resolve()
    project = Path(project_dir).resolve() if project_dir is not None else path.parent.parent
    if dangling(given):
        rel = relative(given.parent, project) + "/" + given.name
        raise RunbookSyntaxError(Problem(rel, None, dangling_said(given)))
    rel = relative(path, project)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunbookSyntaxError(Problem(rel, None, f"cannot read the runbook: {exc}")) from exc
    node, data = _parse(text, rel)
    if not isinstance(node, yaml.MappingNode) or not isinstance(data, dict):
        line = node.start_mark.line + 1 if node is not None else 1
        raise RunbookSyntaxError(
            Problem(rel, line, "a runbook is a YAML mapping of fields (id, title, ...)", "$")
        )
    marks = _Marks({}, {})
    duplicates: list[tuple[JsonPath, int, int]] = []
    _index_marks(node, (), marks, duplicates)
    return Runbook(path, rel, data, marks, tuple(duplicates))


def runbook_files(project_dir: Path | str) -> list[Path]:
    """The YAML files of ``runbooks/``, sorted (an absent directory gives none), and the
    links named so whose target is gone: such a link is named by whatever loads it
    (``dangling_said``), never skipped as if the runbook had never been there."""
    directory = Path(project_dir) / RUNBOOKS_DIR
    if not directory.is_dir():
        return []
    return sorted(
        p
        for p in directory.iterdir()
        if (p.is_file() or dangling(p)) and p.suffix in (".yaml", ".yml")
    )


def dangling(path: Path) -> bool:
    """PATH is a symlink whose target does not exist (or cannot be reached)."""
    return path.is_symlink() and not path.exists()


def dangling_said(path: Path) -> str:
    import os

    return (
        f"a symlink to {os.readlink(path)}, which does not exist: restore its target, or "
        "remove the link if the runbook is gone"
    )


def dangling_links(project_dir: Path | str) -> list[str]:
    """The runbook files of the project that are dangling links, as problems name them."""
    return [f"{RUNBOOKS_DIR}/{p.name}" for p in runbook_files(project_dir) if dangling(p)]


@dataclass(frozen=True)
class RunbookEntry:
    """A runbook file as ``list`` sees it: parsed, or the reason it is not."""

    path: Path
    file: str
    id: str
    runbook: Runbook | None
    problem: Problem | None


def discover(project_dir: Path | str) -> list[RunbookEntry]:
    """Every runbook file, parsed when possible; never raises for a bad file."""
    project = Path(project_dir)
    entries = []
    for path in runbook_files(project):
        file_id = path.name.split("-", 1)[0]
        try:
            runbook = load_runbook(path, project)
        except RunbookSyntaxError as exc:
            entries.append(RunbookEntry(path, exc.problem.file, file_id, None, exc.problem))
        else:
            entries.append(RunbookEntry(path, runbook.file, runbook.id, runbook, None))
    return entries


def find_runbook(project_dir: Path | str, runbook_id: str) -> Runbook:
    """The runbook with this id (``1``, ``001`` or the file stem); ConfigError listing known ids."""
    wanted = runbook_id.strip()
    if wanted.isdigit():
        wanted = wanted.zfill(3)
    entries = discover(project_dir)
    for entry in entries:
        if wanted in (entry.id, entry.path.stem, entry.path.name.split("-", 1)[0]):
            if entry.problem is not None:
                raise RunbookSyntaxError(entry.problem)
            assert entry.runbook is not None
            return entry.runbook
    known = ", ".join(e.id for e in entries)
    where = Path(project_dir) / RUNBOOKS_DIR
    if not known:
        raise ConfigError(f"no runbook {runbook_id!r}: {where} has no runbooks")
    raise ConfigError(
        f"no runbook {runbook_id!r} in {where}; known ids: {known} "
        "(`remedy runbooks list` shows their titles)"
    )
