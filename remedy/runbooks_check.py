"""Runbooks: load them, validate them against ``runbooks/schema.json``, and
cross-check them with the operations and the deploys.

A runbook is ``runbooks/<id>-<slug>.yaml`` in the project. The schema is the
contract; on top of it this module checks what a schema cannot:

* the ``id`` equals the file name prefix, and ids and step ids are unique;
* every operation a runbook names exists: ``<module>.<function>`` is an
  ``@operation`` of ``remedy.operations.<module>`` (pyinfra's decorator sets
  ``_inner`` on it);
* every operation a deploy (``deploys/*.py``, read with ``ast``, never run)
  calls has a ``name=`` carrying a well-formed issue reference, and is named by
  a step of some runbook; pyinfra's own operations need the reference too;
* every step of the run's step list (``remedy.core.steps``) names such an
  operation, carries an issue and is named by a runbook step;
* a runbook whose steps restart the server has the memory gate among its
  preconditions.

It reads files and imports the operations, so it lives with the adapters, not
in the pure core.

Every problem names the file, the line, the JSON path (or the call) and what
is wrong. Nothing here imports pyinfra or click, connects anywhere or runs a
deploy: operations modules are imported, which only defines them.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from remedy.errors import ConfigError

if TYPE_CHECKING:
    import jsonschema

RUNBOOKS_DIR = "runbooks"
SCHEMA_FILE = "runbooks/schema.json"
DEPLOYS_DIR = "deploys"
OPERATIONS_PACKAGE = "remedy.operations"
PYINFRA_OPERATIONS_PACKAGE = "pyinfra.operations"

#: ``repo#N`` or ``owner/repo#N``; the same pattern as ``$defs.issue_ref`` in the schema.
ISSUE_REF_PATTERN = r"(?:[A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*#[1-9][0-9]*"
ISSUE_REF_RE = re.compile(rf"^{ISSUE_REF_PATTERN}$")
# Anything in free text (a deploy's name=) that looks like it means to be an
# issue reference: a word glued to a '#', or a bare '#'.
_ISSUE_REF_CANDIDATE_RE = re.compile(r"(?<![\w#/.-])[\w./-]*#\w*")

RUNBOOK_FILE_RE = re.compile(r"^(?P<id>[0-9]{3})-(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)\.ya?ml$")

#: The precondition every runbook that (re)starts the server must carry.
MEMORY_GATE = "memory.headroom_gated"
#: Operations that (re)start the model server, directly or through a switch.
RESTARTING_OPERATIONS = frozenset(
    {"serving.restarted", "nix.system_switched", "nix.system_rolled_back"}
)
# Manual commands that do the same.
_RESTARTING_COMMAND_RE = re.compile(
    r"\bnixos-rebuild\s+switch\b|\bsystemctl\s+(?:re)?start\s+tenstorrent-serving\b"
)

JsonPath = tuple[str | int, ...]


def issue_ref_is_valid(ref: str) -> bool:
    """True for ``repo#N`` / ``owner/repo#N`` with N a positive integer."""
    return bool(ISSUE_REF_RE.match(ref))


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
    (``$.steps[2].operation``) or the called operation for deploys.
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


# --------------------------------------------------------------------------- loading


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
        return value if isinstance(value, str) else self.file_id

    @property
    def file_id(self) -> str:
        """The id the file name carries (``001`` for ``001-x.yaml``)."""
        return self.path.name.split("-", 1)[0]

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

    def line_of(self, path: JsonPath, *, key: bool = False) -> int | None:
        return self.marks.line_of(path, key=key)

    def problem(self, path: JsonPath, message: str, *, key: bool = False) -> Problem:
        return Problem(self.file, self.line_of(path, key=key), message, json_path(path))

    def operation_refs(self) -> list[tuple[JsonPath, str]]:
        """Every ``<module>.<function>`` the runbook names, with its JSON path."""
        refs: list[tuple[JsonPath, str]] = []

        def add(path: JsonPath, value: Any) -> None:
            if isinstance(value, str):
                refs.append((path, value))

        for section in ("steps", "rollback", "verification"):
            for index, item in enumerate(_list(self.data.get(section))):
                if isinstance(item, dict):
                    add((section, index, "operation"), item.get("operation"))
        for index, item in enumerate(_list(self.data.get("preconditions"))):
            if isinstance(item, dict) and isinstance(item.get("check"), dict):
                add(("preconditions", index, "check", "operation"), item["check"].get("operation"))
        return refs

    def step_operations(self) -> set[str]:
        """Operations named by a step (``steps`` or ``rollback``): what deploys may call."""
        return {
            name
            for path, name in self.operation_refs()
            if path[0] in ("steps", "rollback") and len(path) == 3
        }

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, **self.data}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _relative(path: Path, project_dir: Path) -> str:
    try:
        return path.resolve().relative_to(project_dir.resolve()).as_posix()
    except ValueError:
        return str(path)


def load_runbook(path: Path | str, project_dir: Path | str | None = None) -> Runbook:
    """Parse one runbook file, keeping where each value sits (no validation).

    Raises ``RunbookSyntaxError`` (a ``ConfigError``) naming ``file:line:column``
    when the YAML does not parse, or when the document is not a mapping.
    """
    path = Path(path).resolve()
    project = Path(project_dir).resolve() if project_dir is not None else path.parent.parent
    rel = _relative(path, project)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunbookSyntaxError(Problem(rel, None, f"cannot read the runbook: {exc}")) from exc

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
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
    """The YAML files of ``runbooks/``, sorted (an absent directory gives none)."""
    directory = Path(project_dir) / RUNBOOKS_DIR
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))


def load_schema(project_dir: Path | str) -> dict[str, Any]:
    """The project's ``runbooks/schema.json``; ConfigError if it is missing or broken."""
    path = Path(project_dir) / SCHEMA_FILE
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{SCHEMA_FILE} not found in {project_dir}: is this a remedy project? "
            "Pass --project DIR."
        ) from exc
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{SCHEMA_FILE}: cannot read the runbook schema: {exc}") from exc
    try:
        import jsonschema  # only when validating: a deploy run only reads ids and issues

        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"{SCHEMA_FILE}: not a valid JSON Schema: {exc.message}") from exc
    return schema


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


def load_valid_runbook(project_dir: Path | str, runbook_id: str) -> Runbook:
    """``find_runbook`` plus schema validation: what ``show`` and ``apply`` act on."""
    runbook = find_runbook(project_dir, runbook_id)
    problems = validate_runbook(runbook, load_schema(project_dir))
    if problems:
        raise RunbookInvalid(problems)
    return runbook


# --------------------------------------------------------------------------- validation


def _schema_error_problems(runbook: Runbook, error: jsonschema.ValidationError) -> list[Problem]:
    """One jsonschema error as located problems with messages a person can act on."""
    path: JsonPath = tuple(error.absolute_path)
    instance = error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}

    if error.validator == "additionalProperties" and isinstance(instance, dict):
        allowed = sorted(schema.get("properties", {}))
        extra = [key for key in instance if key not in schema.get("properties", {})]
        return [
            runbook.problem(
                path + (key,),
                f"unknown field {key!r}; allowed here: {', '.join(allowed)}",
                key=True,
            )
            for key in extra
        ]
    if error.validator == "required":
        match = re.match(r"^'(.+)' is a required property$", error.message)
        name = match.group(1) if match else error.message
        return [runbook.problem(path, f"missing required field {name!r}")]
    if error.validator == "pattern":
        pattern = error.validator_value
        if pattern == f"^{ISSUE_REF_PATTERN}$":
            message = (
                f"malformed issue reference {instance!r}: write repo#N or owner/repo#N "
                "with N a positive number, e.g. tt-stack#49"
            )
        elif "operation" in path:
            message = (
                f"{instance!r} is not an operation name: write <module>.<function>, "
                "e.g. serving.restarted"
            )
        elif path == ("id",):
            message = f'id {instance!r} must be three digits, e.g. "001"'
        elif path and path[-1] == "deploy":
            message = f"{instance!r} must be a deploy file like deploys/restore_toolcalling.py"
        else:
            message = f"{instance!r} does not match {pattern}"
        return [runbook.problem(path, message)]
    if error.validator == "type" and path == ("id",):
        message = "id must be a string of three digits"
        if isinstance(instance, int):
            # YAML reads an unquoted 001 as the number 1.
            message = f'id must be quoted (id: "{instance:03d}"): unquoted it is a number'
        return [runbook.problem(path, message)]
    # oneOf / anyOf over `required` clauses: "exactly one of" / "at least one of" fields.
    required_only = all(
        isinstance(clause, dict) and set(clause) == {"required"} and len(clause["required"]) == 1
        for clause in (error.validator_value if isinstance(error.validator_value, list) else [0])
    )
    if error.validator == "oneOf" and isinstance(instance, dict) and required_only:
        options = [clause["required"][0] for clause in error.validator_value]
        present = [name for name in options if name in instance]
        if present:
            message = (
                f"a step has exactly one of {' or '.join(options)}, not {' and '.join(present)}"
            )
        else:
            message = f"a step needs one of {' or '.join(options)}"
        return [runbook.problem(path, message)]
    if error.validator == "anyOf" and isinstance(instance, dict) and required_only:
        options = [clause["required"][0] for clause in error.validator_value]
        return [runbook.problem(path, f"needs at least one of {' or '.join(options)}")]
    if error.validator == "minItems" and instance == []:
        return [runbook.problem(path, "must not be empty")]
    return [runbook.problem(path, error.message)]


def validate_runbook(runbook: Runbook, schema: dict[str, Any]) -> list[Problem]:
    """Schema errors plus the checks a schema cannot express, sorted by line."""
    problems: list[Problem] = []
    for path, line, first in runbook.duplicate_keys:
        problems.append(
            Problem(runbook.file, line, f"duplicate key (first at line {first})", json_path(path))
        )

    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    for error in validator.iter_errors(runbook.data):
        problems.extend(_schema_error_problems(runbook, error))

    data = runbook.data
    name_match = RUNBOOK_FILE_RE.match(runbook.path.name)
    if name_match is None:
        problems.append(
            Problem(
                runbook.file,
                1,
                "file name must be <id>-<slug>.yaml, e.g. 001-toolcalling-run-only.yaml",
            )
        )
    elif isinstance(data.get("id"), str) and data["id"] != name_match.group("id"):
        problems.append(
            runbook.problem(
                ("id",),
                f"id {data['id']!r} differs from the file name prefix {name_match.group('id')!r}",
            )
        )

    for section in ("steps", "rollback"):
        seen: dict[str, int] = {}
        for index, step in enumerate(_list(data.get(section))):
            if not isinstance(step, dict) or not isinstance(step.get("id"), str):
                continue
            if step["id"] in seen:
                problems.append(
                    runbook.problem(
                        (section, index, "id"),
                        f"step id {step['id']!r} is already used by {section}[{seen[step['id']]}]",
                    )
                )
            else:
                seen[step["id"]] = index

    problems.extend(_memory_gate_problems(runbook))
    return sorted(problems, key=lambda p: (p.line or 0, p.where or ""))


def _memory_gate_problems(runbook: Runbook) -> list[Problem]:
    restarts: list[str] = []
    for section in ("steps", "rollback"):
        for index, step in enumerate(_list(runbook.data.get(section))):
            if not isinstance(step, dict):
                continue
            where = json_path((section, index))
            if step.get("operation") in RESTARTING_OPERATIONS:
                restarts.append(f"{step['operation']} at {where}")
            manual = step.get("manual")
            if isinstance(manual, dict):
                for command in _list(manual.get("commands")):
                    if isinstance(command, str) and _RESTARTING_COMMAND_RE.search(command):
                        restarts.append(f"a manual restart at {where}")
                        break
    if not restarts:
        return []
    gated = any(
        isinstance(pre, dict)
        and isinstance(pre.get("check"), dict)
        and pre["check"].get("operation") == MEMORY_GATE
        for pre in _list(runbook.data.get("preconditions"))
    )
    if gated:
        return []
    return [
        runbook.problem(
            ("preconditions",),
            f"the steps restart the server ({restarts[0]}) but no precondition checks "
            f"the memory gate; add one with `check: {{operation: {MEMORY_GATE}}}`",
        )
    ]


# --------------------------------------------------------------------------- operations


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


def _is_under(path: str | None, directory: Path) -> bool:
    if not path:
        return False
    try:
        Path(path).resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True


class OperationIndex:
    """Resolves ``<module>.<function>`` to the ``@operation`` in ``<ops_package>.<module>``.

    The project directory goes first on ``sys.path`` while importing, so a
    project's own operations package wins; a project without one falls back to
    the installed package. ``source`` says which directory was used.
    """

    def __init__(self, project_dir: Path | str, ops_package: str = OPERATIONS_PACKAGE):
        self.project_dir = Path(project_dir).resolve()
        self.ops_package = ops_package
        self._modules: dict[str, tuple[Any, str | None]] = {}
        self.source: str | None = None

    def _forget_foreign_copy(self) -> None:
        """Drop an already imported copy of the package that is not the project's own."""
        package_dir = self.project_dir / self.ops_package.replace(".", "/")
        if not package_dir.is_dir():
            return
        loaded = sys.modules.get(self.ops_package)
        if loaded is None or _is_under(getattr(loaded, "__file__", None), self.project_dir):
            return
        for name in list(sys.modules):
            if name == self.ops_package or name.startswith(self.ops_package + "."):
                del sys.modules[name]

    def module(self, module: str) -> tuple[Any, str | None]:
        """``(module object or None, reason it could not be imported)``."""
        if module in self._modules:
            return self._modules[module]
        full = f"{self.ops_package}.{module}"
        result: tuple[Any, str | None]
        with _first_on_sys_path(self.project_dir):
            self._forget_foreign_copy()
            try:
                imported = importlib.import_module(full)
            except ModuleNotFoundError as exc:
                prefixes = full.split(".")
                missing = {".".join(prefixes[: i + 1]) for i in range(len(prefixes))}
                if exc.name in missing:
                    result = (None, f"there is no module {full}")
                else:
                    result = (None, f"importing {full} failed: {exc}")
            except Exception as exc:  # a broken operations module is a finding, not a crash
                result = (None, f"importing {full} failed: {type(exc).__name__}: {exc}")
            else:
                result = (imported, None)
                package = sys.modules.get(self.ops_package)
                if package is not None and self.source is None:
                    self.source = str(Path(package.__file__).parent) if package.__file__ else None
        self._modules[module] = result
        return result

    def lookup(self, name: str) -> tuple[bool | None, str | None]:
        """``(True, None)`` for an operation; ``(False, reason)`` if missing;
        ``(None, None)`` if the attribute exists but is not an operation."""
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
            return None, None
        return True, None

    def exists(self, name: str) -> tuple[bool, str | None]:
        """Whether ``name`` is an operation, and why not."""
        found, reason = self.lookup(name)
        if found is None:
            return False, (
                f"{self.ops_package}.{name} is not a pyinfra @operation (no _inner attribute)"
            )
        return found, reason


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


# --------------------------------------------------------------------------- deploys


@dataclass(frozen=True)
class DeployCall:
    """An operation call found in a deploy file."""

    file: str
    line: int
    operation: str
    """``module.function`` as runbooks name it (remedy) or as pyinfra does."""
    package: str
    name: str | None
    """The literal text of ``name=`` (f-string parts joined, ``{…}`` for values)."""
    name_is_literal: bool


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _literal_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            value.value if isinstance(value, ast.Constant) else "{…}" for value in node.values
        )
    return None


def scan_deploy(
    path: Path, project_dir: Path, ops_package: str = OPERATIONS_PACKAGE
) -> tuple[list[DeployCall], list[Problem]]:
    """The operation calls of one deploy file, read with ``ast`` (the file is never run).

    Recognised: ``from <pkg> import mod [as m]; m.fn(...)``,
    ``from <pkg>.mod import fn; fn(...)`` and ``import <pkg>.mod; <pkg>.mod.fn(...)``,
    for the remedy operations package and for ``pyinfra.operations``.
    """
    rel = _relative(path, project_dir)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    except SyntaxError as exc:
        return [], [Problem(rel, exc.lineno, f"Python syntax error: {exc.msg}", column=exc.offset)]
    except (OSError, UnicodeDecodeError) as exc:
        return [], [Problem(rel, None, f"cannot read the deploy: {exc}")]

    packages = (ops_package, PYINFRA_OPERATIONS_PACKAGE)
    modules: dict[str, tuple[str, str]] = {}  # local name -> (package, module)
    functions: dict[str, tuple[str, str]] = {}  # local name -> (package, "module.function")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                package, _, module = alias.name.rpartition(".")
                if alias.asname and package in packages:
                    modules[alias.asname] = (package, module)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                local = alias.asname or alias.name
                if node.module in packages:
                    modules[local] = (node.module, alias.name)
                else:
                    package, _, module = node.module.rpartition(".")
                    if package in packages:
                        functions[local] = (package, f"{module}.{alias.name}")

    calls: list[DeployCall] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target: tuple[str, str] | None = None
        if isinstance(node.func, ast.Name) and node.func.id in functions:
            target = functions[node.func.id]
        elif isinstance(node.func, ast.Attribute):
            dotted = _dotted(node.func)
            if dotted:
                head, _, rest = dotted.partition(".")
                if head in modules and rest and "." not in rest:
                    package, module = modules[head]
                    target = (package, f"{module}.{rest}")
                else:
                    for package in packages:
                        tail = dotted[len(package) + 1 :]
                        if dotted.startswith(package + ".") and tail.count(".") == 1:
                            target = (package, tail)
        if target is None:
            continue
        keyword = next((k for k in node.keywords if k.arg == "name"), None)
        text = _literal_text(keyword.value) if keyword is not None else None
        calls.append(
            DeployCall(
                rel,
                node.lineno,
                target[1],
                target[0],
                text,
                keyword is None or text is not None,
            )
        )
    return sorted(calls, key=lambda c: c.line), []


def name_problems(call: DeployCall) -> list[str]:
    """What is wrong with the issue references in a call's ``name=``."""
    if call.name is None:
        if not call.name_is_literal:
            return ["name= is not a string literal; write the issue reference in the source"]
        return ['no name=; add name="... (tt-stack#49)" naming the issue it serves']
    problems = []
    candidates = _ISSUE_REF_CANDIDATE_RE.findall(call.name)
    good = [c for c in candidates if issue_ref_is_valid(c)]
    for bad in candidates:
        if not issue_ref_is_valid(bad):
            problems.append(
                f"malformed issue reference {bad!r} in name=; write repo#N, e.g. tt-stack#49"
            )
    if not good and not problems:
        problems.append(
            f'name={call.name!r} carries no issue reference; add one, e.g. "(tt-stack#49)"'
        )
    return problems


STEPS_FILE = "remedy/operations/steps.py"  # the deploy flow the deploys share
STEP_LIST_FILE = "remedy/core/steps.py"  # the step list it carries out


def check_step_list(project: Path, named: set[str], operations: OperationIndex) -> list[Problem]:
    """Each step of the run's step list (``remedy.core.steps.TEMPLATES``) names an
    operation that exists and that a runbook step names, and carries an issue."""
    path = project / STEP_LIST_FILE
    if not path.is_file():
        return []
    from remedy.core.steps import TEMPLATES

    text = path.read_text(encoding="utf-8").splitlines()
    problems = []
    for t in TEMPLATES:
        line = next((i + 1 for i, x in enumerate(text) if f'"{t.op}"' in x), None)
        found, reason = operations.lookup(t.op)
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
        if not re.search(r"#\d+", t.issue):
            problems.append(
                Problem(STEP_LIST_FILE, line, f"step {t.name!r} carries no issue reference", t.op)
            )
    return problems


def check_flow_order(runbook: Runbook) -> list[Problem]:
    """A flow runbook (one whose steps name the run's bump) lists every step of the run,
    in the order the run takes them (``remedy.core.steps.TEMPLATES``): the manual script,
    --dry and the deploy all follow that list, and a reader of the runbook must too."""
    from remedy.core.steps import TEMPLATES

    steps = [s for s in _list(runbook.data.get("steps")) if isinstance(s, dict)]
    ops = [(i, s.get("operation")) for i, s in enumerate(steps) if s.get("operation")]
    if "nix.flake_input_updated" not in {op for _, op in ops}:
        return []
    order = [t.op for t in TEMPLATES]
    at = 0
    for i, op in ops:
        try:
            at = order.index(op, at) + 1
        except ValueError:
            if op not in order:
                continue  # not a step of the run (check_operations names what is wrong)
            n = order.index(op)
            after = f", after {order[n - 1]}" if n else ", first"
            return [
                runbook.problem(
                    ("steps", i, "operation"),
                    f"{op} is out of the run's order: the run takes it as step {n + 1}"
                    f"{after} (remedy/core/steps.py, TEMPLATES); move this step there",
                )
            ]
    listed = [op for _, op in ops if op in order]
    if len(listed) < len(ops):
        return []  # a step that is none of the run's: check_operations names it
    if listed != order:  # in order, but some step of the run is not listed
        missing = next(
            (n for n, op in enumerate(order) if n >= len(listed) or listed[n] != op), 0
        )
        t = TEMPLATES[missing]
        return [
            runbook.problem(
                ("steps",),
                f"lists {len(listed)} of the run's {len(order)} steps: step {missing + 1}, "
                f"{t.name!r} ({t.op}), is missing (remedy/core/steps.py, TEMPLATES); the "
                "manual script and the run have every step, so must the runbook",
            )
        ]
    return []


def deploy_files(project_dir: Path | str) -> list[Path]:
    directory = Path(project_dir) / DEPLOYS_DIR
    if not directory.is_dir():
        return []
    steps = Path(project_dir) / STEPS_FILE
    shared = [steps] if steps.is_file() else []
    return sorted(p for p in directory.glob("*.py") if p.is_file()) + shared


def check_deploys(
    project_dir: Path | str, runbooks: list[Runbook], operations: OperationIndex
) -> list[Problem]:
    """Each operation call in ``deploys/*.py`` carries an issue and has a runbook step."""
    project = Path(project_dir)
    named = set().union(*(rb.step_operations() for rb in runbooks)) if runbooks else set()
    problems: list[Problem] = []
    for path in deploy_files(project):
        calls, syntax = scan_deploy(path, project, operations.ops_package)
        problems.extend(syntax)
        for call in calls:
            if call.package == operations.ops_package:
                found, reason = operations.lookup(call.operation)
                if found is None:
                    continue  # a helper of the module, not an operation
                if not found:
                    problems.append(
                        Problem(
                            call.file, call.line, f"no such operation: {reason}", call.operation
                        )
                    )
                    continue
                if call.operation not in named:
                    problems.append(
                        Problem(
                            call.file,
                            call.line,
                            "no runbook step names this operation; add a step with "
                            f"`operation: {call.operation}` to the runbook it serves",
                            call.operation,
                        )
                    )
            for message in name_problems(call):
                problems.append(Problem(call.file, call.line, message, call.operation))
    problems.extend(check_step_list(project, named, operations))
    for runbook in runbooks:
        problems.extend(check_flow_order(runbook))
        deploy = runbook.data.get("deploy")
        if isinstance(deploy, str) and not (project / deploy).is_file():
            problems.append(runbook.problem(("deploy",), f"{deploy} does not exist in the project"))
    return problems


# --------------------------------------------------------------------------- the whole check


@dataclass(frozen=True)
class CheckReport:
    runbooks: list[Runbook]
    problems: list[Problem]
    operations_source: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def check_project(project_dir: Path | str, ops_package: str = OPERATIONS_PACKAGE) -> CheckReport:
    """Schema, cross-checks and the both-ways mapping for a whole project."""
    project = Path(project_dir).resolve()
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

    by_id: dict[str, Runbook] = {}
    for runbook in runbooks:
        if runbook.id in by_id:
            problems.append(
                runbook.problem(
                    ("id",), f"id {runbook.id} is also used by {by_id[runbook.id].file}"
                )
            )
        else:
            by_id[runbook.id] = runbook

    operations = OperationIndex(project, ops_package)
    problems.extend(check_operations(runbooks, operations))
    problems.extend(check_deploys(project, runbooks, operations))
    problems.sort(key=lambda p: (p.file, p.line or 0, p.where or ""))
    return CheckReport(runbooks, problems, operations.source)
