"""One runbook against ``runbooks/schema.json``, and what a schema cannot say of one file.

The schema is the contract. On top of it: no key twice in a mapping, the file
name is ``<id>-<slug>.yaml`` and its prefix is the ``id``, step ids are unique
within ``steps`` and within ``rollback``, and a runbook that restarts the
server is memory-gated (``remedy.runbooks.memory_gate``). The schema's own
errors are reworded so that a person knows what to write.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remedy.errors import ConfigError
from remedy.runbooks.files import RUNBOOK_FILE_RE, Runbook, find_runbook
from remedy.runbooks.memory_gate import memory_gate_problems
from remedy.runbooks.problems import JsonPath, Problem, RunbookInvalid, json_path

if TYPE_CHECKING:
    import jsonschema

SCHEMA_FILE = "runbooks/schema.json"

#: ``repo#N`` or ``owner/repo#N``; the same pattern as ``$defs.issue_ref`` in the schema.
ISSUE_REF_PATTERN = r"(?:[A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*#[1-9][0-9]*"
ISSUE_REF_RE = re.compile(rf"^{ISSUE_REF_PATTERN}$")


def issue_ref_is_valid(ref: str) -> bool:
    """True for ``repo#N`` / ``owner/repo#N`` with N a positive integer."""
    return bool(ISSUE_REF_RE.match(ref))


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
        import jsonschema  # only when validating: listing a runbook reads ids and titles

        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"{SCHEMA_FILE}: not a valid JSON Schema: {exc.message}") from exc
    return schema


def _pattern_message(path: JsonPath, instance: Any, pattern: str) -> str:
    """What to write instead of a value that does not match the schema's PATTERN."""
    if pattern == f"^{ISSUE_REF_PATTERN}$":
        return (
            f"malformed issue reference {instance!r}: write repo#N or owner/repo#N "
            "with N a positive number, e.g. tt-stack#49"
        )
    if "operation" in path:
        return (
            f"{instance!r} is not an operation name: write <module>.<function>, "
            "e.g. serving.restarted"
        )
    if path == ("id",):
        return f'id {instance!r} must be three digits, e.g. "001"'
    if path and path[-1] == "deploy":
        return f"{instance!r} must be a deploy file like deploys/restore_toolcalling.py"
    return f"{instance!r} does not match {pattern}"


def _one_of_fields_message(error: jsonschema.ValidationError) -> str | None:
    """A oneOf / anyOf over single ``required`` clauses, said as "exactly one of" /
    "at least one of" fields; None for any other error."""
    clauses = error.validator_value
    if error.validator not in ("oneOf", "anyOf") or not isinstance(error.instance, dict):
        return None
    if not all(
        isinstance(clause, dict) and set(clause) == {"required"} and len(clause["required"]) == 1
        for clause in clauses
    ):
        return None
    options = [clause["required"][0] for clause in clauses]
    if error.validator == "anyOf":
        return f"needs at least one of {' or '.join(options)}"
    present = [name for name in options if name in error.instance]
    if present:
        return f"a step has exactly one of {' or '.join(options)}, not {' and '.join(present)}"
    return f"a step needs one of {' or '.join(options)}"


def _schema_error_problems(runbook: Runbook, error: jsonschema.ValidationError) -> list[Problem]:
    """One jsonschema error as located problems with messages a person can act on."""
    path: JsonPath = tuple(error.absolute_path)
    instance = error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        allowed = sorted(schema.get("properties", {}))
        return [
            runbook.problem(
                path + (key,),
                f"unknown field {key!r}; allowed here: {', '.join(allowed)}",
                key=True,
            )
            for key in instance
            if key not in schema.get("properties", {})
        ]
    if error.validator == "required":
        match = re.match(r"^'(.+)' is a required property$", error.message)
        name = match.group(1) if match else error.message
        return [runbook.problem(path, f"missing required field {name!r}")]
    if error.validator == "pattern":
        return [runbook.problem(path, _pattern_message(path, instance, error.validator_value))]
    if error.validator == "type" and path == ("id",):
        message = "id must be a string of three digits"
        if isinstance(instance, int):
            # YAML reads an unquoted 001 as the number 1.
            message = f'id must be quoted (id: "{instance:03d}"): unquoted it is a number'
        return [runbook.problem(path, message)]
    fields = _one_of_fields_message(error)
    if fields is not None:
        return [runbook.problem(path, fields)]
    if error.validator == "minItems" and instance == []:
        return [runbook.problem(path, "must not be empty")]
    return [runbook.problem(path, error.message)]


def _duplicate_key_problems(runbook: Runbook) -> list[Problem]:
    return [
        Problem(runbook.file, line, f"duplicate key (first at line {first})", json_path(path))
        for path, line, first in runbook.duplicate_keys
    ]


def _file_name_problems(runbook: Runbook) -> list[Problem]:
    """The file is ``<id>-<slug>.yaml``, and its prefix is the runbook's id."""
    name_match = RUNBOOK_FILE_RE.match(runbook.path.name)
    if name_match is None:
        return [
            Problem(
                runbook.file,
                1,
                "file name must be <id>-<slug>.yaml, e.g. 001-toolcalling-run-only.yaml",
            )
        ]
    runbook_id, prefix = runbook.data.get("id"), name_match.group("id")
    if isinstance(runbook_id, str) and runbook_id != prefix:
        return [
            runbook.problem(
                ("id",), f"id {runbook_id!r} differs from the file name prefix {prefix!r}"
            )
        ]
    return []


def _step_id_problems(runbook: Runbook) -> list[Problem]:
    """A step id is used once within ``steps`` and once within ``rollback``."""
    problems = []
    for section in ("steps", "rollback"):
        seen: dict[str, int] = {}
        for index, step in runbook.items(section):
            step_id = step.get("id")
            if not isinstance(step_id, str):
                continue
            if step_id in seen:
                problems.append(
                    runbook.problem(
                        (section, index, "id"),
                        f"step id {step_id!r} is already used by {section}[{seen[step_id]}]",
                    )
                )
            else:
                seen[step_id] = index
    return problems


def validate_runbook(runbook: Runbook, schema: dict[str, Any]) -> list[Problem]:
    """Schema errors plus the checks of one file a schema cannot express, sorted by line."""
    import jsonschema

    problems = _duplicate_key_problems(runbook)
    for error in jsonschema.Draft202012Validator(schema).iter_errors(runbook.data):
        problems.extend(_schema_error_problems(runbook, error))
    problems += _file_name_problems(runbook) + _step_id_problems(runbook)
    problems += memory_gate_problems(runbook)
    return sorted(problems, key=lambda p: (p.line or 0, p.where or ""))


def load_valid_runbook(project_dir: Path | str, runbook_id: str) -> Runbook:
    """``find_runbook`` plus validation: what ``show`` and ``apply`` act on."""
    runbook = find_runbook(project_dir, runbook_id)
    problems = validate_runbook(runbook, load_schema(project_dir))
    if problems:
        raise RunbookInvalid(problems)
    return runbook
