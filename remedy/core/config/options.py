"""The NixOS options remedy's managed file forces, as the host's configuration sees them.

remedy's file (``hosts/<host>/remedy.nix``) is a NixOS module that sets each value with
``lib.mkForce``: the host's own configuration may define the same option, as
production's sets ``hugepagesPerCard = 2``. Two questions are answered from Nix's own
evaluation, never by reading the files:

* what does the configuration define for these options without remedy's file? One
  ``nix eval`` of the host flake with the file disabled (``extendModules`` and
  ``disabledModules``, as NixOS offers both), reading each option's
  ``highestPrio`` and ``definitionsWithLocations``: ``overrides`` names what remedy's
  value wins over ("configuration.nix sets hugepagesPerCard = 2; remedy.nix forces 1");
* why does a configuration not evaluate? ``evaluation_blocker`` finds NixOS's own
  message about an option ("does not exist", "has conflicting definition values",
  "is not of type") and names the host-data key to fix.

The evaluation takes seconds and GBs on a real host, so its answer is kept on the host
(``RECORD``: root's, mode 0600, written atomically by the command that evaluated, next
to the run journal) under a key of everything the answer depends on (``record_key``:
the checkout's HEAD and flake.lock, remedy's file, host data's managed_options). The
next read finds it in the snapshot's own round trip and evaluates nothing while the key
holds (issue 28, item 8); the report says the answer comes from that record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from remedy import host
from remedy.core.config import desired
from remedy.core.config.host_data import HostData

OPTION_DEFAULT_PRIO = 1500  # lib.mkOptionDefault: an option's declared default

EXPR = host.text("facts/options.nix")


@dataclass(frozen=True)
class Definition:
    file: str  # as Nix names it (a store path)
    value: object


@dataclass(frozen=True)
class OptionState:
    """One managed option in the configuration without remedy's file."""

    name: str  # the key of host data's managed_options
    path: str
    exists: bool
    highest_prio: int | None = None
    definitions: tuple[Definition, ...] = ()

    @property
    def defined_by_host(self) -> bool:
        """A module other than the option's declaration defines it (not its default)."""
        return self.exists and (self.highest_prio or OPTION_DEFAULT_PRIO) < OPTION_DEFAULT_PRIO


@dataclass
class OptionDefinitions:
    options: dict[str, OptionState] = field(default_factory=dict)
    error: str | None = None  # why they were not read
    # where the answer comes from when it is not this read's evaluation: remedy's
    # record on the host ("the record of <when> in <path>")
    recorded: str | None = None


# The answer of the last evaluation, on the host, next to the run journal
# (remedy.core.programs.journal): ``key KEY``, ``time EPOCH``, then what ``nix eval`` printed.
RECORD = "/var/lib/remedy/options.record"
# What `nix --version` printed, under the binary it ran (facts._remote.NIX_VERSION)
NIX_VERSION_RECORD = "/var/lib/remedy/nix-version.record"


def record_key(s: HostData, snap) -> str | None:
    """What the evaluation's answer depends on, as one hash: the checkout's HEAD and
    flake.lock (the locked input), remedy's file as it is now, host data's
    managed_options, the flake and host names, the expression and Nix's version. None
    when no key can hold: uncommitted changes (Nix evaluates the work tree), no HEAD."""
    c = snap.checkout
    if not c.is_checkout or not c.head or c.changes or c.problem:
        return None
    lock = snap.flake_input
    parts = {
        "head": c.head,
        "flake_lock": [lock.rev, lock.nar_hash, lock.url] if lock else snap.flake_error,
        "managed_file": s.managed_file,
        "managed_text": snap.managed.content,
        "managed_options": dict(sorted(s.managed_options.items())),
        "flake": [s.flake_dir, s.flake_host],
        "expr": EXPR,
        "nix": snap.nix.version if snap.nix else None,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Record:
    key: str | None = None
    time: int | None = None
    lines: tuple[str, ...] = ()
    problem: str | None = None  # why it is not read (not root's 0600 file …)


def read_record(lines) -> Record | None:
    """The snapshot's ``nix.options_record`` section (None: absent, or no record)."""
    if not lines:
        return None
    head = list(lines)
    if head[0].startswith("untrusted "):
        return Record(problem=head[0].removeprefix("untrusted "))
    key = time = None
    body: list[str] = []
    for i, line in enumerate(head):
        word, _, rest = line.partition(" ")
        if word == "key" and key is None and i == 0:
            key = rest.strip()
        elif word == "time" and time is None and i == 1:
            time = int(rest) if rest.strip().isdigit() else None
        else:
            body = head[i:]
            break
    return Record(key, time, tuple(body)) if key else None


def from_record(rec: Record, paths: dict[str, str]) -> OptionDefinitions:
    """The recorded answer, as the evaluation gave it, saying that it is recorded."""
    found = named(parse([*rec.lines, "@@remedy:exit 0"], {}), paths)
    when = (
        datetime.fromtimestamp(rec.time, UTC).strftime("%Y-%m-%d %H:%M UTC")
        if rec.time is not None
        else "an unknown time"
    )
    found.recorded = f"the record of {when} in {RECORD}"
    return found


def source_note(defs: OptionDefinitions | None) -> str | None:
    """The report's line on where the answer comes from, when it is the record."""
    if defs is None or not defs.recorded:
        return None
    return (
        f"what remedy's file overrides: from {defs.recorded}; not evaluated again (the "
        "checkout's HEAD, flake.lock, remedy's file and managed_options are unchanged)"
    )


def short_file(path: str) -> str:
    """A file in a flake's store copy, relative to the flake (``hosts/x/configuration.nix``)."""
    return re.sub(r"^/nix/store/[0-9a-z]{32}-[^/]*/", "", path)


def nix_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def named(found: OptionDefinitions, paths: dict[str, str]) -> OptionDefinitions:
    """FOUND with each option's path filled in from host data's managed_options."""
    return OptionDefinitions(
        {n: dataclasses.replace(o, path=paths.get(n, o.path)) for n, o in found.options.items()},
        found.error,
        found.recorded,
    )


def parse(lines: list[str], paths: dict[str, str]) -> OptionDefinitions:
    """The fact's output: the command's output, then ``@@remedy:exit N``. PATHS names
    the options (managed_options); empty: every name the evaluation answered for."""
    rc, body = None, []
    for line in lines:
        if line.startswith("@@remedy:recorded "):  # the command kept its answer
            continue
        text, marker, code = line.partition("@@remedy:exit ")
        if marker:  # also glued to an answer that ended without a newline
            rc = int(code.split()[0]) if code.split() and code.split()[0].isdigit() else 1
            if text:
                body.append(text)
        else:
            body.append(line)
    if rc is None:
        return OptionDefinitions(error="the evaluation's answer was cut short")
    if rc != 0:
        return OptionDefinitions(error=_nix_error(body) or f"nix eval exited {rc}")
    doc = next((ln for ln in reversed(body) if ln.startswith("{")), None)
    try:
        found = json.loads(doc) if doc else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        return OptionDefinitions(error=f"unreadable nix eval output: {' '.join(body)[:200]}")
    out = OptionDefinitions()
    for name, path in (paths or {n: "" for n in sorted(found)}).items():
        o = found.get(name) or {}
        defs = tuple(
            Definition(str(d.get("file", "?")), d.get("value"))
            for d in o.get("definitions") or []
            if isinstance(d, dict)
        )
        out.options[name] = OptionState(
            name, path, bool(o.get("exists")), o.get("highestPrio"), defs
        )
    return out


def overrides(
    defs: OptionDefinitions | None,
    s: HostData,
    scope: tuple[str, ...],
    written: bool = True,
) -> list[str]:
    """What remedy's forced values win over, one line per option the host's configuration
    defines: "configuration.nix sets hugepagesPerCard = 2; remedy.nix forces 1
    (tt-stack#49)". WRITTEN: the checkout holds remedy's file (else it "will force",
    once a run writes it)."""
    if defs is None or defs.error:
        return []
    out = []
    ours = s.managed_file.rsplit("/", 1)[-1]
    for name, _path, value, why in desired.managed_values(s, scope):
        o = defs.options.get(name)
        if o is None or not o.defined_by_host:
            continue
        theirs = "; ".join(
            f"{short_file(d.file).rsplit('/', 1)[-1]} sets {name} = {nix_value(d.value)}"
            for d in o.definitions
        )
        issue = why.split(":", 1)[0]
        same = (
            " (the same value)" if all(nix_value(d.value) == value for d in o.definitions) else ""
        )
        forces = "forces" if written else "will force (once a run writes it)"
        out.append(f"{theirs}; {ours} {forces} {value}{same} ({issue})")
    return out


def missing_options(defs: OptionDefinitions | None, s: HostData, scope) -> list[str]:
    """The managed option paths the host's configuration does not declare."""
    if defs is None or defs.error:
        return []
    return [
        f"{path} (managed_options.{name})"
        for name, path, _v, _w in desired.managed_values(s, scope)
        if name in defs.options and not defs.options[name].exists
    ]


_OPTION_ERROR = re.compile(
    r"(The option `(?P<a>[^']+)' (does not exist|has conflicting definition values)"
    r"|A definition for option `(?P<b>[^']+)' is not of type)"
)


def _nix_error(lines: list[str]) -> str | None:
    """The last ``error:`` message Nix printed, its lines joined (trace lines dropped)."""
    start = None
    for i, line in enumerate(lines):
        if re.match(r"^\s*error:", line):
            start = i
    if start is None:
        return None
    msg = [lines[start].strip().removeprefix("error:").strip()]
    for line in lines[start + 1 :]:
        text = line.strip()
        if not text or text.startswith(("(use '--show-trace'", "(stack trace truncated")):
            break
        msg.append(text)
    return " ".join(m for m in msg if m)


def evaluation_blocker(output: str, s: HostData) -> str | None:
    """NixOS's message when the configuration does not evaluate because of an option,
    with the host-data key to fix when the option is one remedy's file sets; None when
    OUTPUT holds no such message."""
    msg = _nix_error(output.splitlines())
    if msg is None or not (m := _OPTION_ERROR.search(msg)):
        return None
    option = m.group("a") or m.group("b")
    text = re.sub(r"/nix/store/[0-9a-z]{32}-source/", "", msg[m.start() :])
    ours = {path: name for name, path in s.managed_options.items()}
    if option in ours:
        key = f"managed_options.{ours[option]}"
        if "does not exist" in text:
            fix = (
                f"host data {key} names an option the configuration does not declare: set "
                "it to the path tt-stack declares (README: checking managed_options)"
            )
        elif "conflicting" in text:
            fix = (
                f"another lib.mkForce meets remedy's (host data {key}): remove that one, "
                "or give it remedy's value"
            )
        else:
            fix = f"host data {key} names an option of another type"
        return f"the new configuration does not evaluate: {text} -- {fix}"
    return f"the new configuration does not evaluate: {text}"
