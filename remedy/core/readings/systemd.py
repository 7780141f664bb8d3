"""systemd: ``systemctl show`` output, unit files, drop-in precedence.

Parsers are small and named after the format they read; each guards one edge
case noted beside it. Nothing here touches a host.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache

from pyinfra.api.exceptions import FactProcessError

RUNTIME, ADMIN, VENDOR = "runtime", "admin", "vendor"
# Properties whose `systemctl show` name differs from the unit file's, and how show
# writes their value: EnvironmentFiles=/path (ignore_errors=no).
SHOWN = {"EnvironmentFile": "EnvironmentFiles"}
# [Service] properties that are lists: each assignment adds an item, an empty one
# empties the list (systemd.exec(5), systemd.service(5)).
LIST_PROPERTIES = frozenset(
    (
        "EnvironmentFile", "Environment", "UnsetEnvironment", "PassEnvironment",
        "ExecStartPre", "ExecStartPost", "ExecStopPost", "ExecCondition",
        "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "BindPaths",
        "BindReadOnlyPaths", "SupplementaryGroups", "DeviceAllow", "LoadCredential",
        "SetCredential", "ImportCredential",
    )
)  # fmt: skip
# The list properties as `systemctl show` names them: each item is a line of its own
# (EnvironmentFiles=/a (ignore_errors=yes), then EnvironmentFiles=/b …), in the order the
# unit's files assign them; the readings keep every one, ITEMS_SEP between.
LIST_SHOWN = frozenset(SHOWN.get(n, n) for n in LIST_PROPERTIES)
ITEMS_SEP = "\n"


def origin_of(path: str, realpath: str | None = None) -> str:
    """runtime (/run), admin (/etc, not a link into the store) or vendor (store, /usr/lib)."""
    real = realpath or path
    if path.startswith("/run/") and not real.startswith("/nix/store/"):
        return RUNTIME
    if real.startswith("/nix/store/") or path.startswith(("/usr/lib/", "/lib/")):
        return VENDOR
    if path.startswith("/etc/"):
        return ADMIN
    return VENDOR


def parse_show(lines: list[str], lists: Collection[str] = (), sep: str = "\n") -> dict[str, str]:
    """``systemctl show`` Key=Value lines; D-Bus order, empty values kept (``DropInPaths=``).
    A key of LISTS says each item on a line of its own (``EnvironmentFiles=``): every
    item is kept, in order, SEP between."""
    props: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            continue
        key, eq, value = line.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key):
            raise FactProcessError(f"systemctl show: not a Key=Value line: {line[:120]!r}")
        if key in lists and props.get(key):
            props[key] += sep + value if value else ""
        else:
            props[key] = value
    return props


@dataclass(frozen=True)
class ExecCommand:
    path: str
    argv: list[str]
    pid: int | None = None  # the last process; see code for whether it still runs
    code: str | None = None  # "(null)" while running, "exited"/"killed" after
    status: str | None = None


_EXEC_FIELD = re.compile(r"(\w+(?:\[\])?)=(.*?)(?= ; \w+(?:\[\])?=| \}$|$)")


def parse_exec(value: str) -> list[ExecCommand]:
    """The ExecStart property: ``{ path=… ; argv[]=… ; … ; pid=N ; code=… ; status=… }``.

    argv is space-joined and not quoted. After the process exited, pid is 0 and
    code/status describe the exit; an empty value means no ExecStart.
    """
    value = value.strip()
    if not value:
        return []
    commands = []
    for group in re.findall(r"\{ (.*?) \}", value):
        fields = dict(_EXEC_FIELD.findall(group + " }"))
        if "path" not in fields:
            raise FactProcessError(f"systemctl show: ExecStart without path: {value[:120]!r}")
        pid = fields.get("pid", "0")
        commands.append(
            ExecCommand(
                path=fields["path"],
                argv=fields.get("argv[]", fields["path"]).split(),
                pid=int(pid) if pid.isdigit() and int(pid) > 0 else None,
                code=fields.get("code"),
                status=fields.get("status"),
            )
        )
    if not commands:
        raise FactProcessError(f"systemctl show: unreadable ExecStart: {value[:120]!r}")
    return commands


def parse_environment(value: str) -> dict[str, str]:
    """The Environment property: space-separated, entries shell-quoted when they hold spaces."""
    try:
        return dict(_environment(value))
    except ValueError as exc:
        raise FactProcessError(
            f"systemctl show: unreadable Environment ({exc}): {value[:120]!r}"
        ) from exc


@lru_cache(maxsize=256)
def _environment(value: str) -> tuple[tuple[str, str], ...]:
    """VALUE's assignments, kept: a fleet's hosts share their units' Environment= (issue 34)."""
    env = {}
    for word in shlex.split(value):
        key, sep, val = word.partition("=")
        if sep:
            env[key] = val
    return tuple(env.items())


@dataclass
class UnitFile:
    """One unit file or drop-in, as read from the host."""

    path: str
    realpath: str
    text: str

    @property
    def origin(self) -> str:
        return origin_of(self.path, self.realpath)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def service_settings(self) -> list[tuple[str, str]]:
        """(key, value) pairs of the [Service] section, in order, continuations joined."""
        out, section, pending = [], None, ""
        for raw in self.text.splitlines():
            line = pending + raw.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                continue
            if section == "Service" and "=" in line:
                key, _, value = line.partition("=")
                out.append((key.strip(), value.strip()))
        return out


@dataclass
class ConfiguredService:
    """ExecStart and Environment as a set of unit files configures them, with their source."""

    exec_start: str | None
    exec_start_via: str | None
    environment: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (value, via)
    # the ExecCondition= command lines, in the order systemd runs them
    exec_condition: tuple[str, ...] = ()


def dropin_order(dropins: list[UnitFile]) -> list[UnitFile]:
    """Drop-ins apply in lexical order of file name, whatever their directory.

    For the same name, /etc beats /run beats vendor: only the winner applies.
    """

    def rank(d: UnitFile) -> int:
        # By where the file sits, not where it links: on NixOS /etc drop-ins link into
        # the store, and systemd still ranks them as /etc.
        return 0 if d.path.startswith("/etc/") else 1 if d.path.startswith("/run/") else 2

    winners: dict[str, UnitFile] = {}
    for d in dropins:
        best = winners.get(d.name)
        if best is None or rank(d) < rank(best):
            winners[d.name] = d
    return [winners[n] for n in sorted(winners)]


def configure(fragment: UnitFile | None, dropins: list[UnitFile]) -> ConfiguredService:
    """Apply systemd's rules: list settings reset by an empty assignment (``ExecStart=``)."""
    exec_start, via = None, None
    env: dict[str, tuple[str, str]] = {}
    conditions: list[str] = []
    files = ([fragment] if fragment else []) + dropin_order(dropins)
    for unit in files:
        for key, value in unit.service_settings():
            if key == "ExecCondition":
                conditions = conditions + [value] if value else []
            elif key == "ExecStart":
                if value == "":
                    exec_start, via = None, unit.path
                else:
                    exec_start, via = value.lstrip("@-:+!").split()[0], unit.path
            elif key == "Environment":
                if value == "":
                    env = {}
                    continue
                for k, v in parse_environment(value).items():
                    env[k] = (v, unit.path)
    return ConfiguredService(exec_start, via, env, tuple(conditions))
