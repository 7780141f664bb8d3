"""The raw readings of runtime state a reboot reverts (``remedy.core.config.volatile`` judges
them): the files under /run/systemd/system, the serving process, systemd's environment,
and what the next boot's start chain sets beyond the unit's ``Environment=``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra.api.exceptions import FactProcessError

from remedy.core.readings.sections import read_name


@dataclass(frozen=True)
class RuntimeFile:
    path: str
    link: str | None = None  # a symlink's target; None for a file
    text: str = ""


@dataclass
class ServingProcess:
    """The serving unit's main process (or, when that is a shell, its vLLM child)."""

    pid: int
    argv: list[str] = field(default_factory=list)
    environ: dict[str, str] | None = None  # None: not readable (not root)
    # /proc/PID/limits: each row's name ("Max open files") -> (soft, hard); None: not
    # read (a recording made before it, or unreadable)
    limits: dict[str, tuple[str, str]] | None = None


# /proc/PID/limits rows (the kernel's fs/proc/base.c lnames) -> systemd's Limit*= names
# (systemd.exec(5), "Process Properties")
LIMIT_NAMES = {
    "Max cpu time": "LimitCPU", "Max file size": "LimitFSIZE",
    "Max data size": "LimitDATA", "Max stack size": "LimitSTACK",
    "Max core file size": "LimitCORE", "Max resident set": "LimitRSS",
    "Max processes": "LimitNPROC", "Max open files": "LimitNOFILE",
    "Max locked memory": "LimitMEMLOCK", "Max address space": "LimitAS",
    "Max file locks": "LimitLOCKS", "Max pending signals": "LimitSIGPENDING",
    "Max msgqueue size": "LimitMSGQUEUE", "Max nice priority": "LimitNICE",
    "Max realtime priority": "LimitRTPRIO", "Max realtime timeout": "LimitRTTIME",
}  # fmt: skip


def limit_properties(limits: dict[str, tuple[str, str]]) -> dict[str, str]:
    """A process's limits as ``systemctl show`` words a unit's: LimitNOFILE= the hard
    limit, LimitNOFILESoft= the soft one, "infinity" for unlimited."""
    out = {}
    for row, (soft, hard) in limits.items():
        if (name := LIMIT_NAMES.get(row)) is None:
            continue
        out[name] = "infinity" if hard == "unlimited" else hard
        out[name + "Soft"] = "infinity" if soft == "unlimited" else soft
    return out


def _limit_row(text: str) -> tuple[str, tuple[str, str]] | None:
    """One row of /proc/PID/limits: its name (25 columns, the kernel's "%-25s") and its
    soft and hard limits; None for the header."""
    name, words = text[:25].strip(), text[25:].split()
    if name == "Limit" or len(words) < 2:
        return None
    return name, (words[0], words[1])


@dataclass(frozen=True)
class UnitEnvLine:
    """An ``EnvironmentFile=`` or ``PassEnvironment=`` line of one of the serving unit's
    files: KIND is where the file stands (``fragment`` and ``dropin``: the unit systemd
    loaded; ``next`` and ``next-dropin``: the system profile's, what the next boot loads)."""

    kind: str
    path: str
    realpath: str
    directive: str  # EnvironmentFile | PassEnvironment
    value: str


@dataclass
class StartChain:
    """What the start chain sets besides the unit's ``Environment=`` and the start script.

    ``default_env``: each ``DefaultEnvironment=`` line (its file, its raw value) of the
    system.conf the next boot reads (the system profile's, else /etc's) and of the
    system.conf.d directories; ``unit_env``: the unit files' ``EnvironmentFile=`` and
    ``PassEnvironment=`` lines; ``env_files``: per ``EnvironmentFile=`` pattern, the
    names of the variables its files set (never their values: sops-nix and agenix keep
    secrets there), None when no file matches; ``wrappers``: the text of the scripts the
    start scripts exec (nixpkgs' makeWrapper scripts), by path."""

    default_env: list[tuple[str, str]] = field(default_factory=list)
    unit_env: list[UnitEnvLine] = field(default_factory=list)
    env_files: dict[str, list[str] | None] = field(default_factory=dict)
    wrappers: dict[str, str] = field(default_factory=dict)
    next_unit: str | None = None  # the system profile's unit file, when it has one


@dataclass
class RuntimeState:
    """The raw readings: /run/systemd files, the serving process, systemd's environment."""

    files: list[RuntimeFile] = field(default_factory=list)
    process: ServingProcess | None = None
    manager_env: dict[str, str] = field(default_factory=dict)
    read: bool = False  # False: the snapshot had no such section (an older recording)
    chain: StartChain | None = None  # None: not read (a recording made before it)


def parse(lines: list[str], files, scripts: dict | None = None) -> RuntimeState:
    """The ``volatile.*`` sections' LINES: ``link PATH TARGET``, ``pid N``, the process's
    ``arg`` and ``env`` lines (``unreadable`` when its environ is not), its ``limit``
    lines (/proc/PID/limits, the header too), ``manager
    KEY=VALUE``, then after ``chain``: ``default-env FILE VALUE``, ``next-unit PATH``,
    ``unit-env KIND PATH REALPATH DIRECTIVE=VALUE``, ``env-file PATTERN NAME``
    (``env-file PATTERN`` alone: no file matched), ``wrapper PATH`` followed by its
    ``wline TEXT`` lines, or by ``wsame``: its first 400 lines are those of the script of
    that name in SCRIPTS (unit.scripts' file blocks, by name); FILES: the file blocks of
    ``volatile.files``."""
    state = RuntimeState(read=True)
    state.files = [RuntimeFile(b.path, None, b.text) for b in files]
    process: ServingProcess | None = None
    chain: StartChain | None = None
    wrapper_lines: dict[str, list[str]] = {}
    wrapper: list[str] | None = None
    wrapper_name = ""
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "chain":
            chain = StartChain()
        elif chain is not None and word == "default-env":
            path, _, value = rest.partition(" ")
            chain.default_env.append((read_name(path), value))
        elif chain is not None and word == "next-unit":
            chain.next_unit = rest.strip() or None
        elif chain is not None and word == "unit-env":
            parts = rest.split(" ", 3)
            if len(parts) == 4 and "=" in parts[3]:
                directive, _, value = parts[3].partition("=")
                kind, path, real = parts[0], read_name(parts[1]), read_name(parts[2])
                line = UnitEnvLine(kind, path, real, directive.strip(), value.strip())
                chain.unit_env.append(line)
        elif chain is not None and word == "env-file":
            pattern, _, name = rest.rpartition(" ")
            if not pattern:  # `env-file PATTERN`: no file matched it
                chain.env_files.setdefault(name, None)
            else:
                chain.env_files[pattern] = [*(chain.env_files.get(pattern) or []), name]
        elif chain is not None and word == "wrapper":
            wrapper_name = rest
            wrapper = wrapper_lines.setdefault(rest, [])
        elif chain is not None and word == "wline" and wrapper is not None:
            wrapper.append(line[len("wline ") :])
        elif chain is not None and word == "wsame" and wrapper is not None:
            printed = (scripts or {}).get(wrapper_name)
            if printed is None:
                raise FactProcessError(
                    f"the wrapper {wrapper_name} is said to be a script printed before, and "
                    "none was: the remote script is broken"
                )
            wrapper[:] = printed.lines[:400]
        elif word == "link":
            path, _, target = rest.partition(" ")
            state.files.append(RuntimeFile(read_name(path), read_name(target)))
        elif word == "pid" and rest.strip().isdigit():
            process = ServingProcess(int(rest), [], {})
        elif word == "arg" and process is not None:
            process.argv.append(rest)
        elif word == "env" and process is not None and process.environ is not None:
            key, sep, value = rest.partition("=")
            if sep:
                process.environ[key] = value
        elif word == "unreadable" and process is not None:
            process.environ = None
        elif word == "limit" and process is not None and (row := _limit_row(rest)):
            process.limits = {**(process.limits or {}), row[0]: row[1]}
        elif word == "manager":
            key, sep, value = rest.partition("=")
            if sep:
                state.manager_env[key] = value
    state.files.sort(key=lambda f: f.path)
    state.process = process
    if chain is not None:
        chain.wrappers = {p: "\n".join(text) + "\n" for p, text in wrapper_lines.items()}
    state.chain = chain
    return state
