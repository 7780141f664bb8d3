"""The memory guard: no start of the serving unit below ``min_mem_available_gb``.

A start of vLLM below ~4 GB of MemAvailable can hard-freeze the host (tt-stack#49),
and the starts that froze it were not remedy's: a boot, ``Restart=``, a person. So the
serving unit itself runs remedy's guard (``remedy/host/memory_guard.sh``) as its first
``ExecCondition=`` (``lib.mkBefore``; ``+``: as root whatever the unit's ``User=``,
so it reads and takes the force token and keeps its record): exit 1 skips the start
without a failure and without ``Restart=`` (docs/memory-guard.md cites systemd's
source). It is durable in remedy's managed file, with a template unit that starts past
it once, recorded:

    systemctl start remedy-memory-guard-force@NAME.service

The decision and its journal line are the host program's; this module only says
what the managed file carries and reads which guard a unit's files run.
"""

from __future__ import annotations

from remedy import host
from remedy.core.config.data_settings import nix_attr, nix_string
from remedy.core.config.host_data import HostData

NAME = "remedy-memory-guard"  # the store file's name, and the journal lines' word
FORCE_UNIT = "remedy-memory-guard-force@"  # the template a person starts, @NAME
ISSUE = "issue 46"


def threshold(s: HostData) -> str:
    """min_mem_available_gb as the guard takes it: a plain decimal (4, 3.5)."""
    text = format(s.min_mem_available_gb, "f").rstrip("0").rstrip(".")
    return text or "0"


def arguments(s: HostData) -> str:
    """The guard's arguments in the serving unit's ExecCondition=."""
    return f"check {threshold(s)} {s.unit}"


def command_tail(s: HostData) -> str:
    """What the serving unit's guard line ends with (after the store path)."""
    return f"-{NAME} {arguments(s)}"


def state(conditions: tuple[str, ...] | None, s: HostData) -> str:
    """The guard among a unit's ExecCondition= commands: "on (N GB)" (its threshold),
    "off" (none), "unknown" (not read)."""
    if conditions is None:
        return "unknown"
    for line in conditions:
        words = line.split()
        for i, word in enumerate(words[:-2]):
            # the store file (HASH-remedy-memory-guard) or the fallback's /run copy
            base = word.rsplit("/", 1)[-1]
            if (base == NAME or base.endswith(f"-{NAME}")) and words[i + 1] == "check":
                return f"on ({words[i + 2]} GB)"
    return "off"


def word(live_ok: bool, next_ok: bool) -> str:
    """The guard as status says it: durable (the next boot has it), volatile (only the
    /run fallback gives it: a reboot removes it) or missing."""
    return "durable" if next_ok else "volatile" if live_ok else "missing"


WORDS = ("durable", "volatile", "missing")


def desired(s: HostData) -> str:
    return f"on ({threshold(s)} GB)"


def _indented(text: str) -> str:
    """TEXT as a Nix indented string ('' ... ''): '' and ${ escaped, lines as they are."""
    return "''\n" + text.replace("''", "'''").replace("${", "''${") + "''"


def nix_let(s: HostData) -> list[str]:
    """The managed file's let binding: the guard program, a store file."""
    return [
        f"  guard = builtins.toFile {nix_string(NAME)} {_indented(host.text('memory_guard.sh'))};"
    ]


def nix_lines(s: HostData) -> list[str]:
    """The managed file's definitions: the serving unit's first ExecCondition=, and
    the template unit that starts it once past the guard."""
    service = nix_attr(s.unit.removesuffix(".service"))
    unit = nix_string(s.unit)
    return [
        f"  # {ISSUE}: the memory guard; no start of {s.unit} below "
        f"min_mem_available_gb {threshold(s)} GB",
        f"  systemd.services.{service}.serviceConfig.ExecCondition = lib.mkBefore "
        f'[ "+/bin/sh ${{guard}} {arguments(s)}" ];',
        f"  # {ISSUE}: one start past the guard, recorded:",
        f"  # systemctl start {FORCE_UNIT}NAME.service",
        f"  systemd.services.{nix_attr(FORCE_UNIT)} = {{",
        f"    description = {nix_string('Start ' + s.unit + ' once past the memory guard')};",
        '    serviceConfig.Type = "oneshot";',
        f'    serviceConfig.ExecStart = "/bin/sh ${{guard}} force %i " + {unit};',
        "  };",
    ]


def force_command(s: HostData) -> str:
    return f"systemctl start {FORCE_UNIT}NAME.service"
