"""The serving unit as the engine sees it: what runs now, what a reboot would run.

Built from the sections of one remote read (see ``facts.serving``): the
``systemctl show`` properties, the fragment and drop-ins with their content,
the next boot's unit from the system profile, and the start scripts they name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyinfra.api.exceptions import FactProcessError

from remedy.core.readings import memory as mem
from remedy.core.readings import nix, sections, startscript, systemd
from remedy.core.readings.sections import Section

NO_PARSER = startscript.NONE


@dataclass
class Setting:
    value: str | None
    source: str | None  # the file that sets it
    via: str | None = None  # the unit file that points at that file

    def describe(self, name: str) -> str:
        text = f"{name} {self.value if self.value is not None else 'unset'}"
        if self.source:
            text += f" from {self.source}"
        if self.via and self.via != self.source:
            text += f" via {self.via}"
        return text


@dataclass
class DropIn:
    path: str
    origin: str  # runtime | admin | vendor
    content: str


@dataclass
class ServiceView:
    """One configuration of the service: as it runs now, or as the next boot starts it."""

    exec_start: str | None
    exec_start_via: str | None
    script: startscript.StartScript | None
    parser: Setting
    environment: dict[str, Setting] = field(default_factory=dict)
    exec_condition: tuple[str, ...] = ()  # its ExecCondition= commands, in order

    def env(self, key: str) -> str | None:
        s = self.environment.get(key)
        return s.value if s else None


@dataclass
class ServingUnitState:
    unit: str
    load_state: str
    active_state: str
    sub_state: str
    main_pid: int | None
    n_restarts: int | None
    fragment_path: str | None
    exec_start_live: list[systemd.ExecCommand]
    dropins: list[DropIn]
    now: ServiceView
    after_reboot: ServiceView

    @property
    def runtime_dropins(self) -> list[DropIn]:
        return [d for d in self.dropins if d.origin == systemd.RUNTIME]

    @property
    def found(self) -> bool:
        return self.load_state not in ("not-found", "")

    # The unit's own fragment without drop-ins: on NixOS, what the store built.
    fragment_view: ServiceView | None = None
    active_for_s: float | None = None  # since it last became active (None: unknown)

    @property
    def store_script(self) -> startscript.StartScript | None:
        return self.fragment_view.script if self.fragment_view else None


def _files(section: Section | None) -> list[systemd.UnitFile]:
    if section is None:
        return []
    return [systemd.UnitFile(b.path, b.realpath, b.text) for b in section.files]


def _view(fragment, dropins, scripts, live_exec=None, live_env=None) -> ServiceView:
    conf = systemd.configure(fragment, dropins)
    exec_start = live_exec or conf.exec_start
    via = conf.exec_start_via
    script = startscript.resolve(scripts.get(exec_start) if exec_start else None, scripts)
    env: dict[str, Setting] = {}
    if script:
        for key, value in script.exports.items():
            env[key] = Setting(value, script.path, via)
    unit_env = (
        live_env if live_env is not None else {k: v for k, (v, _) in conf.environment.items()}
    )
    for key, value in unit_env.items():
        src = conf.environment.get(key, (None, None))[1]
        env[key] = Setting(value, src)
    parser = (
        Setting(script.tool_call_parser, script.path, via)
        if script
        else Setting(NO_PARSER, exec_start, via)
    )
    return ServiceView(exec_start, via, script, parser, env, conf.exec_condition)


def read_unit(parts: dict[str, list[Section]]) -> ServingUnitState:
    fact = "ServingUnit"
    show = systemd.parse_show(sections.one(parts, "unit.show", fact).lines)
    if "Id" not in show or "LoadState" not in show:
        raise FactProcessError(
            f"{fact}: systemctl show gave no Id/LoadState; is this a systemd host?"
        )
    files = _files(parts.get("unit.files", [None])[0])
    fragment_path = show.get("FragmentPath") or None
    fragment = next((f for f in files if f.path == fragment_path), None)
    dropin_files = [f for f in files if f is not fragment]
    scripts = {
        b.path: startscript.parse(b.path, b.text)
        for b in sections.one(parts, "unit.scripts", fact).files
    }
    live = systemd.parse_exec(show.get("ExecStart", ""))
    live_env = systemd.parse_environment(show.get("Environment", ""))
    now = _view(fragment, dropin_files, scripts, live[0].path if live else None, live_env)
    next_files = _files(parts.get("unit.next", [None])[0])
    next_fragment = next_files[0] if next_files else fragment
    durable_dropins = [d for d in dropin_files if d.origin != systemd.RUNTIME]
    if next_files:
        durable_dropins = next_boot_dropins(
            durable_dropins, _files(parts.get("unit.next_dropins", [None])[0]), show["Id"]
        )
    after = _view(next_fragment, durable_dropins, scripts)
    try:
        pid = int(show.get("MainPID") or 0) or None
        restarts = int(show["NRestarts"]) if show.get("NRestarts", "").isdigit() else None
    except ValueError as exc:
        raise FactProcessError(f"{fact}: unreadable MainPID/NRestarts ({exc})") from exc
    state = ServingUnitState(
        unit=show["Id"],
        load_state=show.get("LoadState", ""),
        active_state=show.get("ActiveState", ""),
        sub_state=show.get("SubState", ""),
        main_pid=pid,
        n_restarts=restarts,
        fragment_path=fragment_path,
        exec_start_live=live,
        dropins=[DropIn(f.path, f.origin, f.text) for f in dropin_files],
        now=now,
        after_reboot=after,
        fragment_view=_view(fragment, [], scripts) if fragment else None,
        active_for_s=_active_for(show),
    )
    return state


def next_boot_dropins(
    durable: list[systemd.UnitFile], profile: list[systemd.UnitFile], unit: str
) -> list[systemd.UnitFile]:
    """The drop-ins the next boot applies: the system profile's own (NixOS links them into
    /etc/systemd/system/UNIT.d at activation), plus the durable ones that are not the
    running generation's. An /etc drop-in that links into the store is the running
    generation's and is replaced; a plain file a person wrote in /etc stays."""
    kept = [
        d
        for d in durable
        if not (d.path.startswith("/etc/") and d.realpath.startswith("/nix/store/"))
    ]
    etc = f"/etc/systemd/system/{unit}.d"
    return kept + [systemd.UnitFile(f"{etc}/{d.name}", d.realpath, d.text) for d in profile]


def _active_for(show: dict[str, str]) -> float | None:
    """Seconds since the unit last became active, from two readings of the same clock
    (ActiveEnterTimestampMonotonic in µs, /proc/uptime in s)."""
    try:
        entered = int(show.get("ActiveEnterTimestampMonotonic") or 0)
        uptime = float(show.get("RemedyUptime") or "")
    except ValueError:
        return None
    return max(uptime - entered / 1e6, 0.0) if entered else None


@dataclass
class VolatileEntry:
    kind: str  # runtime-file | setting | hugepages | generation
    subject: str
    now: str
    after_reboot: str


WATCHED_ENV = ("QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD")


def volatile_entries(
    unit: ServingUnitState, memory: mem.MemoryHeadroom | None, gens: nix.SystemGenerations | None
) -> list[VolatileEntry]:
    """What a reboot would change of the managed settings' state: the /run overrides (a
    runtime drop-in that sets ExecStart, an ExecStart in /run), the serving settings, the
    hugepage pools, the generation. Any other runtime state is remedy.core.config.volatile's."""
    out = []
    for d in unit.runtime_dropins:
        if re.search(r"(?m)^\s*ExecStart=", d.content):
            out.append(VolatileEntry("runtime-file", d.path, "present", "gone (/run is wiped)"))
    exec_now = unit.now.exec_start
    if exec_now and exec_now.startswith("/run/"):
        out.append(
            VolatileEntry("runtime-file", exec_now, "ExecStart of the unit", "gone (/run is wiped)")
        )
    if unit.now.parser.value != unit.after_reboot.parser.value:
        out.append(
            VolatileEntry(
                "setting",
                "tool-call parser",
                str(unit.now.parser.value),
                str(unit.after_reboot.parser.value),
            )
        )
    for key in WATCHED_ENV:
        a, b = unit.now.env(key), unit.after_reboot.env(key)
        if a != b:
            out.append(VolatileEntry("setting", key, a or "unset", b or "unset"))
    if memory is not None:
        nxt = memory.next_boot_pools()
        booted = memory.booted_pools()
        if nxt is not None:
            for size, pool in sorted(memory.pools.items()):
                wanted = nxt.get(size, 0)
                # Volatile only if changed at runtime (live differs from what this boot's
                # kernel was given) and the next boot gives something else again.
                if pool.total != booted.get(size, 0) and pool.total != wanted:
                    out.append(
                        VolatileEntry(
                            "hugepages",
                            f"{mem.size_label(size)} pages",
                            str(pool.total),
                            f"{wanted} (kernel parameters of the next boot)",
                        )
                    )
    if (
        gens is not None
        and gens.current_system
        and gens.profile
        and gens.current_system != gens.profile
    ):
        out.append(
            VolatileEntry(
                "generation",
                "/run/current-system",
                gens.current_system,
                f"{gens.profile} (the system profile boots)",
            )
        )
    return out


@dataclass
class BuiltUnit:
    unit_path: str | None
    exec_start: str | None
    script: startscript.StartScript | None
    environment: dict[str, str] = field(default_factory=dict)  # unit Environment= + exports
    kernel_params: str | None = None  # the built system's kernel-params


def read_built(parts: dict[str, list[Section]]) -> BuiltUnit:
    unit_files = _files(sections.one(parts, "built.unit", "BuiltService"))
    if not unit_files:
        return BuiltUnit(None, None, None)
    dropins = _files(parts.get("built.dropins", [None])[0])
    conf = systemd.configure(unit_files[0], dropins)
    scripts = {
        b.path: startscript.parse(b.path, b.text)
        for b in sections.one(parts, "built.scripts", "BuiltService").files
    }
    script = startscript.resolve(scripts.get(conf.exec_start), scripts)
    env = {k: v for k, (v, _) in conf.environment.items()}
    env.update(script.exports if script else {})
    kernel = parts.get("built.kernel")
    params = " ".join(kernel[0].lines).strip() if kernel and kernel[0].lines else None
    return BuiltUnit(unit_files[0].path, conf.exec_start, script, env, params)
