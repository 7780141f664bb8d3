"""Facts about the serving unit: its effective configuration, the probe, volatile state.

    from facts.serving import ServingUnit
    unit = host.get_fact(ServingUnit, unit="tenstorrent-serving.service")
    unit.now.parser.describe("parser")
    # 'parser qwen3_xml from /run/tt-serving-override/start via /run/.../override.conf'

Each fact is one remote command (``facts._remote``) plus a pure parser
(``remedy.core``); the output names its own arguments, so ``process`` needs
nothing else. ``HostSnapshot`` gathers everything a no-drift check needs in one
round trip.
"""

from __future__ import annotations

from pyinfra.api import FactBase

from facts import _remote
from remedy import host
from remedy.core.config import volatile
from remedy.core.config.host_data import HostData
from remedy.core.programs import journal
from remedy.core.programs.journal import path as journal_path
from remedy.core.readings import probe, sections
from remedy.core.readings.serving import (
    ServingUnitState,
    VolatileEntry,
    read_unit,
    volatile_entries,
)
from remedy.core.readings.snapshot import HostSnapshot as Snapshot
from remedy.core.readings.snapshot import (
    read_built_system,
    read_generations,
    read_memory,
    read_probe,
    read_runtime,
    read_snapshot,
)

SETTINGS = host.text("facts/settings_next.sh")
DEFAULT_UNIT = "tenstorrent-serving.service"
DEFAULT_SERVER_URL = "http://127.0.0.1:8000"
PROBE_TIMEOUT_S = 20


def probe_env(server_url: str, model: str | None, timeout_s: int) -> dict[str, str]:
    """PROBE_SH's arguments as environment variables; an empty model means "the first id
    /v1/models lists"."""
    url, model_, timeout, tries, head, tail = probe.probe_args(
        server_url, model, timeout_s, probe.DEFAULT_TRIES
    )
    return {
        "REMEDY_PROBE_URL": url,
        "REMEDY_PROBE_MODEL": model_,
        "REMEDY_PROBE_TIMEOUT": timeout,
        "REMEDY_PROBE_TRIES": tries,
        "REMEDY_PROBE_HEAD": head,
        "REMEDY_PROBE_TAIL": tail,
    }


class ServingUnit(FactBase[ServingUnitState]):
    """The serving unit: load/active/sub state, main PID, NRestarts, FragmentPath, drop-ins
    by origin with content, the effective ExecStart and its start script's vLLM flags and
    environment, each with the file it came from; and what the next boot would run."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(self, unit: str = DEFAULT_UNIT):
        return _remote.command([_remote.UNIT], {"REMEDY_UNIT": unit})

    def process(self, output):
        return read_unit(sections.split(output, "ServingUnit"))


class ToolCallProbe(FactBase[probe.ProbeResult]):
    """Sends the field-notes tool call from the host and classifies the answer: parsed,
    unparsed (200, no tool_calls, the raw <tool_call> in content), inconclusive (prose,
    asked again up to three times), http_error or unreachable. The model id is the first
    one /v1/models lists unless MODEL is given. curl's --max-time bounds every request."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(
        self,
        url: str = DEFAULT_SERVER_URL,
        model: str | None = None,
        timeout_s: int = PROBE_TIMEOUT_S,
    ):
        return _remote.command([_remote.PROBE], probe_env(url, model, timeout_s))

    def process(self, output):
        return read_probe(sections.split(output, "ToolCallProbe"))


class VolatileState(FactBase[list[VolatileEntry]]):
    """What a reboot would change: the /run override of the serving unit, settings that
    differ after a reboot, live hugepages that differ from the next boot's kernel
    parameters, a current-system that is not what the profile boots; and the unmanaged
    volatile state (``remedy.core.config.volatile``) judged against the default settings: any
    file under /run/systemd/system, the serving process against the next boot's unit,
    the kernel command line against the next boot's kernel-params."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(self, unit: str = DEFAULT_UNIT):
        return _remote.command(
            [_remote.PATHS_TOO, _remote.UNIT, _remote.RUNTIME, _remote.MEMORY, _remote.GENERATIONS],
            {"REMEDY_UNIT": unit},
        )

    def process(self, output):
        parts = sections.split(output, "VolatileState")
        unit, memory = read_unit(parts), read_memory(parts)
        found = volatile_entries(unit, memory, read_generations(parts))
        others = volatile.unmanaged_state(
            unit, memory, read_runtime(parts), HostData(unit=unit.unit)
        )
        return found + [
            VolatileEntry(e.kind, e.subject, e.now_text, e.after_reboot) for e in others
        ]


class HostSnapshot(FactBase[Snapshot]):
    """Everything above plus memory, Nix, the flake input and checkout: one round trip."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(
        self,
        unit: str = DEFAULT_UNIT,
        flake_dir: str = "/etc/nixos",
        flake_input: str = "tt-stack",
        server_url: str = DEFAULT_SERVER_URL,
        model: str | None = None,
        timeout_s: int = PROBE_TIMEOUT_S,
        managed_file: str = "",
    ):
        env = {
            "REMEDY_UNIT": unit,
            "REMEDY_FLAKE_DIR": flake_dir,
            "REMEDY_FLAKE_INPUT": flake_input,
            "REMEDY_MANAGED_FILE": managed_file,
            "REMEDY_JOURNAL": journal_path(unit),
            **probe_env(server_url, model, timeout_s),
            **settings_env(),
        }
        return _remote.command(
            [
                _remote.PATHS_TOO,
                _remote.UNIT,
                _remote.RUNTIME,
                _remote.MEMORY,
                _remote.CLOCK,
                _remote.NIX_VERSION,
                _remote.FLAKE,
                _remote.GENERATIONS,
                _remote.SWITCH,
                _remote.REBOOT,
                _remote.PROBE,
                _remote.JOURNAL,
                _remote.OPTIONS_RECORD,
                SETTINGS,
            ],
            env,
        )

    def process(self, output):
        return read_snapshot(sections.split(output, "HostSnapshot"))


def settings_env() -> dict[str, str]:
    """The sysctl keys and unit properties the data settings read (SETTINGS)."""
    from remedy.core.config import data_settings, desired

    names = {k: sorted(d.name for d in desired.DATA if d.kind == k)
             for k in (data_settings.SYSCTL, data_settings.PROPERTY)}  # fmt: skip
    return {
        "REMEDY_SYSCTLS": " ".join(names[data_settings.SYSCTL]),
        "REMEDY_UNIT_PROPERTIES": " ".join(
            data_settings.SHOWN.get(n, n) for n in names[data_settings.PROPERTY]
        ),
    }


class RunJournal(FactBase[journal.RunJournal]):
    """The run journal on the host (``remedy.core.programs.journal``): the values earlier steps
    wrote, with the scratch clone's HEAD and whether the proven toplevel is in the store."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(self, path: str):
        return _remote.command([_remote.JOURNAL], {"REMEDY_JOURNAL": path})

    def process(self, output):
        found = sections.split(output, "RunJournal").get("run.journal")
        return journal.parse(found[0].lines) if found else journal.RunJournal()


__all__ = [
    "ServingUnit",
    "RunJournal",
    "ToolCallProbe",
    "VolatileState",
    "HostSnapshot",
    "VolatileEntry",
]


# The sysctl.d files of a built toplevel (what its systemd-sysctl applies).
BUILT_SYSCTL = r"""
echo "@@remedy:section built.sysctl"
for f in "$REMEDY_TOPLEVEL"/etc/sysctl.d/*.conf; do [ -f "$f" ] && catfile "$f"; done
"""


class BuiltService(FactBase):
    """The serving unit and start script inside a built (not yet switched) toplevel:
    what the new configuration *will* run; with its sysctl.d files' settings and the
    unit's [Service] properties (``remedy.core.readings.snapshot.BuiltSystem``)."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(self, toplevel: str, unit: str = DEFAULT_UNIT):
        return _remote.command(
            [_remote.BUILT, BUILT_SYSCTL], {"REMEDY_TOPLEVEL": toplevel, "REMEDY_UNIT": unit}
        )

    def process(self, output):
        return read_built_system(sections.split(output, "BuiltService"))
