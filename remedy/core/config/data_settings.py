"""Managed settings as data: ``settings/<slug>.yaml``, checked by ``settings/schema.json``.

A site adds a managed setting with a file, not with code. Each file names its kind
(an environment variable of the serving unit, a flag of the server's command line,
a sysctl, a property of the serving unit), its desired value (a host may have its
own, ``hosts:``), its urgency as the restart policy reads it, its issue, and where
its durable value goes: an option path in remedy's managed file, by default
``systemd.services.<unit>.environment.<NAME>``, ``boot.kernel.sysctl."<key>"`` or
``systemd.services.<unit>.serviceConfig.<Property>`` (a flag names the option its
serving module reads extra arguments from)::

    issue: tt-stack#60
    kind: environment
    name: VLLM_LOGGING_LEVEL
    value: DEBUG
    urgency: window

``remedy.core.config.desired`` turns each into a ManagedSetting beside the six built-in
ones: one model judges them all (drift, status, the plan, the proof of a built
system, metrics). ``check`` finds every problem of a directory of them, each named
by file, line and field; ``load`` refuses a directory with any, before connecting.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remedy.core.config.secrets import SECRET_RE
from remedy.core.readings import systemd
from remedy.errors import ConfigError

ENVIRONMENT, FLAG, SYSCTL, PROPERTY = "environment", "flag", "sysctl", "unit-property"
KINDS = (ENVIRONMENT, FLAG, SYSCTL, PROPERTY)
RUNTIME, NO_FALLBACK = "runtime", "none"
# Where each kind's live value comes from and what its runtime form is.
RUNTIME_FORM = {
    ENVIRONMENT: "Environment= in a /run drop-in",
    FLAG: None,
    SYSCTL: "sysctl -w",
    PROPERTY: "the property in a /run drop-in",
}
PROJECT = Path(os.environ.get("REMEDY_PROJECT") or Path(__file__).resolve().parents[3])
SCHEMA_FILE = "settings/schema.json"
FILE_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\.ya?ml$")
NAME_RE = {
    ENVIRONMENT: (
        re.compile(r"^[A-Z_][A-Z0-9_]*$"),
        "an environment variable like VLLM_LOGGING_LEVEL",
    ),
    FLAG: (re.compile(r"^--[a-z0-9][a-z0-9-]*$"), "a long flag like --max-num-seqs"),
    SYSCTL: (re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_-]+)+$"), "a sysctl key like vm.max_map_count"),
    PROPERTY: (re.compile(r"^[A-Z][A-Za-z0-9]+$"), "a [Service] property like LimitNOFILE"),
}
# A value that systemd (no % specifier), the shell and Nix (no $, no quote) all take as
# written.
VALUE_RE = re.compile(r"^[A-Za-z0-9 _./:,=+@^~!#&*()\[\]{}|<>?;-]*$")
# What remedy manages itself: the six built-in settings' keys, their flags (the parser,
# Phase 2a) and variables (host data required_env's defaults).
BUILTIN_KEYS = (
    "tool_call_parser", "QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD", "hugepages",
    "phase2a", "runtime_override",
)  # fmt: skip
RESERVED_FLAGS = (
    "--tool-call-parser",
    "--enable-auto-tool-choice",
    "--device-resident-decode",
    "--enable-prefix-caching",
    "--no-async-scheduling",
)
NIX_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_'-]*$")
# What the checks say.
PLAIN_VALUE = (
    "a value is printable ASCII without quotes, backslashes, $ or % (systemd and Nix read them)"
)
SECRET = (
    "looks like a secret: remedy copies no secret into the repository; keep it in a file "
    "the unit reads and manage the file reference instead (kind: unit-property, name: "
    "EnvironmentFile, value: /run/secrets/vllm.env)"
)
# A value that names a file rather than holding one (EnvironmentFile=/run/secrets/x,
# =-/path: errors ignored; LoadCredential=name:/path): what a secret may be adopted as.
FILE_REFERENCE_RE = re.compile(r"^(-?/[^\s]+|[A-Za-z0-9_.-]+:/[^\s]+)$")
# Properties whose `systemctl show` name differs from the unit file's (SHOWN), the
# [Service] properties that are lists (LIST_PROPERTIES, LIST_SHOWN) and how the readings
# keep a list's items (ITEMS_SEP): remedy.core.readings.systemd says each. NixOS merges
# serviceConfig.NAME as nixos/lib/systemd-unit-options.nix unitOption does: the
# highest-priority definitions only (filterOverrides), lists concatenated. So remedy
# adds its item as a list at the module's priority, never lib.mkForce (that would drop
# the module's own, EnvironmentFile=-/etc/...).
SHOWN, LIST_PROPERTIES = systemd.SHOWN, systemd.LIST_PROPERTIES
LIST_SHOWN, ITEMS_SEP = systemd.LIST_SHOWN, systemd.ITEMS_SEP
IGNORE_ERRORS_RE = re.compile(r"^(\S+) \(ignore_errors=(yes|no)\)$")
FILE_NAME = "a setting file is named <slug>.yaml (a-z, 0-9, -), e.g. vm-max-map-count.yaml"
FLAG_OPTION = (
    "a flag needs option: the option path your serving module reads its extra arguments from"
)
OWN = "is one of remedy's own settings (host data tool_call_parser, required_env, Phase 2a)"


def directory() -> Path:
    """Where the setting files are: ``REMEDY_SETTINGS_DIR``, else the project's settings/."""
    return Path(os.environ.get("REMEDY_SETTINGS_DIR") or PROJECT / "settings")


def text(value: str | int | bool) -> str:
    """A value as reports show it and the live readings are compared with: a flag that
    is there without a value is "on"."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


SIZE_RE = re.compile(r"^(\d+)([KMGT])$")


def normalized(d: DataSetting, value: str) -> str:
    """VALUE as D's readings show it: a sysctl's words one space apart (/proc/sys has
    tabs); a property's size in bytes (systemctl show says MemoryMax=8589934592 where the
    unit says 8G); an EnvironmentFile as the unit writes it (show says
    EnvironmentFiles=/path (ignore_errors=no))."""
    if d.kind == SYSCTL:
        return " ".join(value.split())
    if d.kind == PROPERTY and d.name in SHOWN and (m := IGNORE_ERRORS_RE.match(value.strip())):
        return ("-" if m[2] == "yes" else "") + m[1]
    m = SIZE_RE.match(value.strip())
    if d.kind == PROPERTY and m and d.name.startswith(("Memory", "Limit")):
        return str(int(m[1]) * 1024 ** ("KMGT".index(m[2]) + 1))
    return value


def items(d: DataSetting, value: str) -> list[str]:
    """A list property's reading (its items, ITEMS_SEP between) as the unit writes each
    item, in order."""
    return [normalized(d, x) for x in value.split(ITEMS_SEP) if x.strip()]


def nix_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False).replace("${", "\\${")


def nix_attr(name: str) -> str:
    """NAME as one attribute of an option path (quoted unless a Nix identifier)."""
    return name if NIX_IDENT.match(name) else nix_string(name)


@dataclass(frozen=True)
class DataSetting:
    """One setting file, checked."""

    file: str  # as problems and reports name it (settings/<slug>.yaml)
    kind: str
    name: str
    value: str | int | bool
    urgency: str
    issue: str
    label: str = ""
    option: str | None = None  # None: the kind's default (flag: never None)
    fallback: str = RUNTIME
    hosts: dict[str, str | int | bool] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Its name in reports, metrics and --json."""
        return self.name

    def value_for(self, host: str) -> str | int | bool:
        return self.hosts.get(host, self.value)

    def option_path(self, unit: str) -> str:
        """Where remedy's managed file forces it, for the serving unit UNIT."""
        if self.option:
            return self.option
        service = nix_attr(unit.removesuffix(".service"))
        if self.kind == ENVIRONMENT:
            return f"systemd.services.{service}.environment.{self.name}"
        if self.kind == PROPERTY:
            return f"systemd.services.{service}.serviceConfig.{self.name}"
        return f"boot.kernel.sysctl.{nix_string(self.name)}"

    def nix_value(self, host: str) -> str:
        """Its value in Nix, for remedy's managed file (a flag: the words it adds to the
        list of arguments)."""
        value = self.value_for(host)
        if self.kind == FLAG:
            words = [self.name] if value is True else [self.name, str(value)]
            return "[ " + " ".join(nix_string(w) for w in words) + " ]"
        if self.is_list:
            return f"[ {nix_string(str(value))} ]"
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value) if isinstance(value, int) else nix_string(value)

    @property
    def is_list(self) -> bool:
        """A list-valued unit property at its default option path: remedy's file adds
        its item to the module's list (a plain definition), never forces it."""
        return self.kind == PROPERTY and self.name in LIST_PROPERTIES and not self.option

    @property
    def runtime_form(self) -> str | None:
        return RUNTIME_FORM[self.kind] if self.fallback == RUNTIME else None


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a setting file: ``FILE:LINE: FIELD: message`` (FIELD a JSON
    path as jsonschema writes it, ``$.hosts.cfx-llm2``)."""

    file: str
    line: int | None
    message: str
    where: str | None = None

    def __str__(self) -> str:
        at = self.file if self.line is None else f"{self.file}:{self.line}"
        return ": ".join(p for p in (at, self.where, self.message) if p)

    def to_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "field": self.where, "message": self.message}


def json_path(path: tuple) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@dataclass
class _Document:
    """A YAML file's mapping, and the line of each key and value by JSON path."""

    file: str
    data: dict[str, Any]
    lines: dict[tuple, int]
    duplicates: list[tuple[str, int]]

    def problem(self, path: tuple, message: str) -> Problem:
        found = [path[:i] for i in range(len(path), -1, -1) if path[:i] in self.lines]
        line = self.lines[found[0]] if found else None
        return Problem(self.file, line, message, json_path(path))


def _lines(node, path: tuple, out: dict, duplicates: list) -> None:
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        keys = set()
        for key, value in node.value:
            name = str(key.value)
            if name in keys:
                duplicates.append((name, key.start_mark.line + 1))
            keys.add(name)
            out[path + (name,)] = key.start_mark.line + 1
            _lines(value, path + (name,), out, duplicates)


def _read(path: Path, rel: str) -> tuple[_Document | None, list[Problem]]:
    try:
        source = path.read_text(encoding="utf-8")
        loader = yaml.SafeLoader(source)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(rel, None, f"cannot read the setting file: {exc}")]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        return None, [Problem(rel, mark.line + 1 if mark else None, f"YAML syntax error: {what}")]
    except yaml.YAMLError as exc:
        return None, [Problem(rel, None, f"YAML error: {exc}")]
    if not isinstance(data, dict):
        return None, [Problem(rel, 1, "a setting is a YAML mapping (issue, kind, name, ...)", "$")]
    lines: dict[tuple, int] = {}
    duplicates: list[tuple[str, int]] = []
    _lines(node, (), lines, duplicates)
    return _Document(rel, data, lines, duplicates), []


def load_schema(project: Path = PROJECT) -> dict:
    path = project / SCHEMA_FILE
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the settings schema: {exc}") from None
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def _schema_problems(doc: _Document, schema: dict) -> list[Problem]:
    import jsonschema

    out = []
    for error in jsonschema.Draft202012Validator(schema).iter_errors(doc.data):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = sorted(error.schema.get("properties", {}))
            for key in (k for k in error.instance if k not in known):
                message = f"unknown field {key!r}; a setting has: {', '.join(known)}"
                out.append(doc.problem(path + (key,), message))
        elif error.validator == "required":
            out.append(doc.problem(path, f"missing field: {error.message.split(chr(39))[1]!r}"))
        elif error.validator == "enum":
            allowed = ", ".join(map(str, error.validator_value))
            out.append(doc.problem(path, f"{error.instance!r} is not one of {allowed}"))
        elif error.validator == "pattern" and path in PATTERN_WORDS:
            out.append(doc.problem(path, f"{error.instance!r} {PATTERN_WORDS[path]}"))
        elif error.validator == "type":
            wanted = " or ".join(_listed(error.validator_value))
            got = type(error.instance).__name__
            out.append(doc.problem(path, f"{error.instance!r} is {got}, not {wanted}"))
        else:
            out.append(doc.problem(path, error.message))
    return out


PATTERN_WORDS = {
    ("issue",): "is no issue: write repo#N, e.g. tt-stack#60",
    ("option",): 'is no NixOS option path: names joined by dots, quoted where needed (a."b.c")',
}


def _listed(value) -> list[str]:
    return list(value) if isinstance(value, list) else [value]


# The types of value each kind takes (a flag: its value, or true for a bare flag).
NOUN = {
    ENVIRONMENT: "an environment variable",
    FLAG: "a flag",
    SYSCTL: "a sysctl",
    PROPERTY: "a unit property",
}
VALUE_TYPES = {
    ENVIRONMENT: ((str,), "a string: quote it"),
    FLAG: ((str, bool), "a string, or true for a flag without a value"),
    SYSCTL: ((str, int), "a number or a string"),
    PROPERTY: ((str, int, bool), "a number, a string, true or false"),
}


def _of_type(value, types: tuple) -> bool:
    """isinstance, but true and false are no numbers (YAML's yes is no 1)."""
    return bool in types if isinstance(value, bool) else isinstance(value, types)


def _value_problems(doc: _Document, kind: str, name: str, path: tuple, value) -> list[Problem]:
    """VALUE (at PATH) against what KIND takes."""
    types, what = VALUE_TYPES[kind]
    if not _of_type(value, types) or (kind == FLAG and value is False):
        return [doc.problem(path, f"the value of {NOUN[kind]} is {what} (got {value!r})")]
    if isinstance(value, str) and not VALUE_RE.match(value):
        return [doc.problem(path, f"{value!r}: {PLAIN_VALUE}")]
    if kind == ENVIRONMENT and SECRET_RE.search(name):
        return [doc.problem(("name",), f"{name} {SECRET}")]
    return []


def _file_problems(doc: _Document) -> list[Problem]:
    """What a schema cannot say of one file (after it passed the schema)."""
    data, out = doc.data, []
    kind, name = data["kind"], data["name"]
    pattern, what = NAME_RE[kind]
    if not pattern.match(name):
        out.append(doc.problem(("name",), f"{name!r} is not {what}"))
    out += _value_problems(doc, kind, name, ("value",), data["value"])
    for host, value in (data.get("hosts") or {}).items():
        out += _value_problems(doc, kind, name, ("hosts", host), value)
    if kind == FLAG and "option" not in data:
        out.append(doc.problem(("kind",), FLAG_OPTION))
    if kind == FLAG and data.get("fallback") == RUNTIME:
        out.append(doc.problem(("fallback",), "a flag has no runtime form: fallback: none"))
    if name in BUILTIN_KEYS or name in RESERVED_FLAGS or name in _required_env():
        out.append(doc.problem(("name",), f"{name} {OWN}"))
    return out


def _required_env() -> tuple[str, ...]:
    from remedy.core.config.host_data import HostData

    return tuple(HostData().required_env)


def _setting(doc: _Document) -> DataSetting:
    d = doc.data
    kind = d["kind"]
    return DataSetting(
        doc.file,
        kind,
        d["name"],
        d["value"],
        d["urgency"],
        d["issue"],
        d.get("label") or d["name"],
        d.get("option"),
        d.get("fallback") or (RUNTIME if RUNTIME_FORM[kind] else NO_FALLBACK),
        dict(d.get("hosts") or {}),
    )


@dataclass
class Report:
    settings: list[DataSetting] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def files(where: Path) -> list[Path]:
    if not where.is_dir():
        return []
    return sorted(p for p in where.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))


def _relative(path: Path, project: Path) -> str:
    try:
        return path.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        return str(path)


def check(where: Path | None = None, project: Path = PROJECT) -> Report:
    """Every setting file of WHERE (default: ``directory()``) against the schema, and
    against each other: two settings for one thing are refused, naming both files."""
    where = directory() if where is None else Path(where)
    schema = load_schema(project)
    report = Report()
    checked: list[tuple[_Document, DataSetting]] = []
    for path in files(where):
        rel = _relative(path, project)
        report.files.append(rel)
        if not FILE_RE.match(path.name):
            report.problems.append(Problem(rel, None, FILE_NAME))
        doc, problems = _read(path, rel)
        report.problems += problems
        if doc is None:
            continue
        found = [doc.problem((key,), "duplicate key") for key, _line in doc.duplicates]
        found += _schema_problems(doc, schema)
        if not any(p.where in ("$", "$.kind", "$.name", "$.value", "$.hosts") for p in found):
            found += _file_problems(doc)
        report.problems += found
        if not found:
            checked.append((doc, _setting(doc)))
    report.settings = [d for _doc, d in checked]
    report.problems += _twice(checked)
    report.problems.sort(key=lambda p: (p.file, p.line or 0))
    return report


# Properties of the serving unit whose value names environment variables: they set (or
# unset, or pass on) what a setting of kind environment sets. Environment=A=1 B=2 holds
# assignments; UnsetEnvironment=A and PassEnvironment=A B hold names (a value has no
# quotes, VALUE_RE: its words are split on blanks).
VARIABLE_PROPERTIES = ("Environment", "UnsetEnvironment", "PassEnvironment")
# The unit file's name of a property that systemctl show names otherwise.
UNIT_NAME = {shown: name for name, shown in SHOWN.items()}
_ATTR_RE = re.compile(r'"([^"]*)"|([^."]+)')


def attrs(path: str) -> tuple[str, ...]:
    """An option path's attribute names, unquoted: ``a."b.c".d`` is (a, b.c, d)."""
    return tuple(m[1] if m[1] is not None else m[2] for m in _ATTR_RE.finditer(path))


def switch(flag: str) -> str:
    """The switch a flag sets: --no-X sets what --X does (vLLM's boolean flags take
    both forms)."""
    return "--" + flag.removeprefix("--no-") if flag.startswith("--no-") else flag


def targets(d: DataSetting) -> list[tuple[str, tuple]]:
    """What D sets, each as (what, the JSON path of D's file that sets it): the variable,
    property, flag or sysctl its kind and name say; the variables of an Environment=,
    UnsetEnvironment= or PassEnvironment= property (each host's value too); and the
    option path it is forced at, with what that path sets."""
    noun = {ENVIRONMENT: "variable", PROPERTY: "property", FLAG: "flag", SYSCTL: "sysctl"}
    name = {PROPERTY: UNIT_NAME.get(d.name, d.name), FLAG: switch(d.name)}.get(d.kind, d.name)
    out = [(f"the {noun[d.kind]} {name}", ("name",))]
    if d.kind == PROPERTY and d.name in VARIABLE_PROPERTIES:
        values = [(("value",), d.value), *((("hosts", h), v) for h, v in d.hosts.items())]
        for path, value in values:
            for word in str(value).split():
                if d.name != "Environment" or "=" in word:
                    out.append((f"the variable {word.split('=', 1)[0]}", path))
    if d.option:
        a = attrs(d.option)
        out.append((f"the option {'.'.join(nix_attr(x) for x in a)}", ("option",)))
        if len(a) == 5 and a[:2] == ("systemd", "services") and a[3] == "environment":
            out.append((f"the variable {a[4]}", ("option",)))
        elif len(a) == 5 and a[:2] == ("systemd", "services") and a[3] == "serviceConfig":
            out.append((f"the property {UNIT_NAME.get(a[4], a[4])}", ("option",)))
        elif len(a) == 4 and a[:3] == ("boot", "kernel", "sysctl"):
            out.append((f"the sysctl {a[3]}", ("option",)))
    return list(dict.fromkeys(out))


def _own() -> set[str]:
    """What remedy's own settings set, as targets names it."""
    variables = {*_required_env(), "QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD"}
    return {f"the variable {v}" for v in variables} | {f"the flag {f}" for f in RESERVED_FLAGS}


def _twice(checked: list[tuple[_Document, DataSetting]]) -> list[Problem]:
    """Two settings for one thing: a variable, property, flag, sysctl or option path
    that two files set (each run would then restart the server for the one that lost),
    or that one of remedy's own settings sets; the later file's problem names the
    earlier."""
    out, seen, own = [], {}, _own()
    for doc, d in checked:
        for what, path in targets(d):
            if what in own:
                out.append(doc.problem(path, f"sets {what}, which {OWN}"))
                break
            first = seen.setdefault(what, d)
            if first is not d:
                message = (
                    f"sets {what}, as {first.file} does: one setting for one thing; keep "
                    "one of the two files"
                )
                out.append(doc.problem(path, message))
                break
    return out


class SettingsInvalid(ConfigError):
    def __init__(self, problems: list[Problem]):
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(
            f"{len(problems)} problem(s) in the managed settings; fix them (`remedy settings "
            f"check` lists all):\n{lines}"
        )
        self.problems = problems


def load(where: Path | None = None) -> tuple[DataSetting, ...]:
    """The settings of WHERE (default: ``directory()``); SettingsInvalid if any file has
    a problem: bad data is refused before anything connects."""
    where = directory() if where is None else Path(where)
    if not files(where):
        return ()
    report = check(where)
    if report.problems:
        raise SettingsInvalid(report.problems)
    return tuple(report.settings)


# --------------------------------------------------------------------------- writing


def slug(name: str) -> str:
    """A file name for NAME: vm.max_map_count -> vm-max-map-count.yaml."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + ".yaml"


def render(d: DataSetting, origin: str) -> str:
    """The text of D's file, with ORIGIN (where its value came from, lines) as a comment.
    Each line of ORIGIN is written whole: data in a file is never wrapped (a path cut at
    80 columns was written as two lines of a file name that does not exist)."""
    lines = [
        *(f"# {line}".rstrip() for line in origin.splitlines()),
        "# Checked by settings/schema.json (`remedy settings check`).",
        f"issue: {d.issue}",
        f"kind: {d.kind}",
        f"name: {_yaml(d.name)}",
        f"value: {_yaml(d.value)}",
        f"urgency: {d.urgency}",
    ]
    if d.label and d.label != d.name:
        lines.append(f"label: {_yaml(d.label)}")
    if d.option:
        lines.append(f"option: {_yaml(d.option)}")
    if d.fallback != (RUNTIME if RUNTIME_FORM[d.kind] else NO_FALLBACK):
        lines.append(f"fallback: {d.fallback}")
    return "\n".join(lines) + "\n"


def _yaml(value) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("\n...")


# --------------------------------------------------------------------------- on a host

_NIX_OPTION = re.compile(r"option `([^']+)'")


def evaluation_problems(settings, unit: str, error: str) -> list[Problem]:
    """Nix's ERROR on evaluating a host's configuration with remedy's file as SETTINGS
    write it, as problems of the files whose option path it names (none: the error is
    the configuration's own, or names no option of theirs)."""
    m = _NIX_OPTION.search(error)
    if m is None:
        return []
    named = m[1]
    out = []
    for d in settings:
        path = d.option_path(unit)
        if path == named or path.startswith(named + ".") or named.startswith(path + "."):
            field = "$.option" if d.option else "$.kind"
            out.append(
                Problem(d.file, None, f"{path}: the host's configuration says: {error}", field)
            )
    return out
