"""The raw readings of runtime state a reboot reverts (``remedy.core.volatile`` judges
them): the files under /run/systemd/system, the serving process, systemd's environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass
class RuntimeState:
    """The raw readings: /run/systemd files, the serving process, systemd's environment."""

    files: list[RuntimeFile] = field(default_factory=list)
    process: ServingProcess | None = None
    manager_env: dict[str, str] = field(default_factory=dict)
    read: bool = False  # False: the snapshot had no such section (an older recording)


def parse(lines: list[str], files) -> RuntimeState:
    """The ``volatile.*`` sections' LINES: ``link PATH TARGET``, ``pid N``, the process's
    ``arg`` and ``env`` lines (``unreadable`` when its environ is not), ``manager
    KEY=VALUE``; FILES: the file blocks of ``volatile.files``."""
    state = RuntimeState(read=True)
    state.files = [RuntimeFile(b.path, None, b.text) for b in files]
    process: ServingProcess | None = None
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "link":
            path, _, target = rest.partition(" ")
            state.files.append(RuntimeFile(path, target))
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
        elif word == "manager":
            key, sep, value = rest.partition("=")
            if sep:
                state.manager_env[key] = value
    state.files.sort(key=lambda f: f.path)
    state.process = process
    return state
