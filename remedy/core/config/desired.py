"""The desired state of a serving host, as data: the managed settings and their drift.

Each ``ManagedSetting`` is declared once: its desired value (from host data),
where its durable value lives, how to read it from one configuration of the
host (live, next boot, or a built system not yet switched), its runtime
fallback if it has one, and the issue it comes from. ``drifts`` compares the
live and next-boot configurations against the desired values; ``remedy
status``, the plan and the proof of a built system all judge "correct" here.

Seven are built in (the seventh the memory guard: remedy.core.config.guard); the
others are data, one file each under ``settings/``
(``remedy.core.config.data_settings``): an environment variable or a property of the
serving unit, a flag of the server's command line, a sysctl. Their durable value
goes into remedy's managed file at their option path; they are read, judged and
reported as the seven are.

    for d in drifts(snapshot, settings):
        print(d.label, d.desired, d.live, d.next_boot, d.state)
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from remedy.core.config import data_settings as data
from remedy.core.config import guard
from remedy.core.config.host_data import HostData
from remedy.core.readings import memory as mem
from remedy.core.readings import runtime as runtime_core
from remedy.core.readings.snapshot import HostSnapshot

IN_SYNC, VOLATILE, DRIFTED = "in sync", "volatile", "drifted"

# Where a durable value lives.
FLAKE_INPUT = "flake input"  # tt-stack gives it: bump the input, rebuild
MANAGED_FILE = "managed file"  # remedy's small Nix file in the host flake
NOWHERE = "nothing"  # the setting is the absence of runtime state

PHASE2A_FLAGS = ("--device-resident-decode", "--enable-prefix-caching")
MANAGED_IMPORT = "./remedy.nix"  # what the host configuration imports


@dataclass(frozen=True)
class Observed:
    """The managed settings' values in one configuration of the host."""

    parser: str | None
    env: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()  # the start script's other vLLM flags
    hugepages: dict[int, int] | None = None  # pool size per page size (kB); None: unknown
    overrides: tuple[str, ...] = ()  # /run drop-ins that replace ExecStart
    # What the data settings read (None: not read here): vLLM's words after `serve`
    # (the process's, live), the sysctls, the serving unit's [Service] properties.
    argv: tuple[str, ...] | None = None
    sysctl: dict[str, str] | None = None
    properties: dict[str, str] | None = None
    # the serving unit's ExecCondition= commands (None: not read): the memory guard's
    conditions: tuple[str, ...] | None = None


def _pages(pools: dict[int, int] | None, s: HostData) -> str:
    """``1G×2``: the wanted sizes, and any other size that has pages."""
    if pools is None:
        return "unknown"
    wanted = _wanted_pages(s)
    sizes = sorted(k for k in set(wanted) | set(pools) if k in wanted or pools.get(k))
    return " ".join(f"{mem.size_label(k)}×{pools.get(k, 0)}" for k in sizes) or "none"


def _wanted_pages(s: HostData) -> dict[int, int]:
    return {mem.SIZES_BY_LABEL[label]: n for label, n in s.hugepages_target.items()}


def _pages_ok(pools: dict[int, int] | None, s: HostData) -> bool:
    if pools is None:
        return False
    return all(pools.get(size, 0) == n for size, n in _wanted_pages(s).items())


def _run_files(paths) -> str:
    """The /run overrides by file name (override.conf, start): whole at 80 columns; the
    reports list their full paths beside."""
    return ", ".join(p.rsplit("/", 1)[-1] for p in paths) or "none"


def _phase2a(obs: Observed) -> str:
    on = [f for f in PHASE2A_FLAGS if f in obs.flags]
    return "on (" + " ".join(on) + ")" if on else "off"


@dataclass(frozen=True)
class ManagedSetting:
    key: str  # stable id: reports, metrics, --json
    label: str  # for people
    issue: str
    durable: str  # FLAKE_INPUT | MANAGED_FILE | NOWHERE
    runtime: str | None  # the fallback's runtime form, None if a restart cannot give it
    desired: Callable[[HostData], str]
    value: Callable[[Observed, HostData], str]
    ok: Callable[[Observed, HostData], bool] | None = None  # default: value == desired
    serving: bool = True  # the server must restart to take a new value
    # A data setting: its file (its urgency, option path and value in remedy's file)
    source: data.DataSetting | None = None

    def holds(self, obs: Observed, s: HostData) -> bool:
        if self.ok is not None:
            return self.ok(obs, s)
        return self.value(obs, s) == self.desired(s)

    @property
    def provable(self) -> bool:
        """The proof of a built system (remedy.core.run.plan.Proof) reads it."""
        return self.source is None or self.source.kind in PROVEN_KINDS

    def read_in(self, obs: Observed) -> bool:
        """OBS has what this setting is judged by (a built system's reading of a sysctl or
        a property may be missing: it is then not judged there)."""
        if self.key == "memory_guard":
            return obs.conditions is not None
        d = self.source
        return d is None or d.kind == data.ENVIRONMENT or _readings(d, obs) is not None


# The kinds a built system's proof judges: all four (nix.fix_proven reads the built
# system's sysctl.d files and its unit's [Service] settings with its start script).
PROVEN_KINDS = (data.ENVIRONMENT, data.FLAG, data.SYSCTL, data.PROPERTY)


def _readings(d: data.DataSetting, o: Observed):
    """What OBS read for D's kind (None: not read)."""
    return {data.ENVIRONMENT: o.env, data.FLAG: o.argv, data.SYSCTL: o.sysctl,
            data.PROPERTY: o.properties}[d.kind]  # fmt: skip


def flag_map(words: list[str]) -> tuple[str | None, dict[str, str | None]]:
    """(the model, {flag: value or None}) of vLLM's words after ``serve``."""
    model, flags = None, {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, sep, value = word.partition("=")
            if sep:
                flags[name] = value
            elif i + 1 < len(words) and not words[i + 1].startswith("-"):
                flags[name], i = words[i + 1], i + 1
            else:
                flags[name] = None
        elif model is None and not flags:
            model = word
        i += 1
    return model, flags


def _data_value(d: data.DataSetting, o: Observed) -> str:
    """D's value in OBS: "unset" (a variable, sysctl or property none sets), "absent" (a
    flag), "unknown" (not read there)."""
    found = _readings(d, o)
    if found is None:
        return "unknown"
    if d.kind == data.FLAG:
        flags = flag_map(list(found))[1]
        return data.text(flags[d.name] or True) if d.name in flags else "absent"
    name = d.name if d.name in found else data.SHOWN.get(d.name, d.name)  # show's name
    if name not in found:
        return "unset"
    if d.is_list:  # every item, in order (the module's own before or after remedy's)
        return ", ".join(data.items(d, found[name])) or "unset"
    return data.normalized(d, found[name])


def _data_holds(d: data.DataSetting, o: Observed, s: HostData) -> bool:
    """D holds in OBS: its value; a list property's item among the items."""
    want = data.normalized(d, data.text(d.value_for(s.flake_host)))
    if not d.is_list:
        return _data_value(d, o) == want
    found = _readings(d, o) or {}
    name = d.name if d.name in found else data.SHOWN.get(d.name, d.name)
    return name in found and want in data.items(d, found[name])


def _data_setting(d: data.DataSetting) -> ManagedSetting:
    """A data setting as the model judges every setting: durable in remedy's file."""
    return ManagedSetting(
        d.key,
        d.label,
        d.issue,
        MANAGED_FILE,
        d.runtime_form,
        desired=lambda s: data.normalized(d, data.text(d.value_for(s.flake_host))),
        value=lambda o, s: _data_value(d, o),
        ok=lambda o, s: _data_holds(d, o, s),
        serving=d.kind != data.SYSCTL,
        source=d,
    )


def _env_setting(key: str, issue: str) -> ManagedSetting:
    return ManagedSetting(
        key,
        key,
        issue,
        FLAKE_INPUT,
        "Environment= in the /run override",
        desired=lambda s: s.required_env.get(key, "unset"),
        value=lambda o, s: o.env.get(key, "unset"),
        ok=lambda o, s: key not in s.required_env or o.env.get(key) == s.required_env[key],
    )


BUILTIN: tuple[ManagedSetting, ...] = (
    ManagedSetting(
        "tool_call_parser",
        "tool-call parser",
        "tt-stack#49",
        FLAKE_INPUT,
        "the /run override's start script",
        desired=lambda s: s.tool_call_parser,
        value=lambda o, s: o.parser or "none",
    ),
    _env_setting("QWEN36_SDPA_STREAMING", "tt-stack#44"),
    _env_setting("QWEN36_MERGE_BATCH_GUARD", "tt-stack#44"),
    ManagedSetting(
        "hugepages",
        "hugepage pool",
        "tt-stack#49",
        MANAGED_FILE,
        "release free pages (sysfs)",
        desired=lambda s: _pages(_wanted_pages(s), s),
        value=lambda o, s: _pages(o.hugepages, s),
        ok=lambda o, s: _pages_ok(o.hugepages, s),
        serving=False,
    ),
    ManagedSetting(
        "phase2a",
        "Phase 2a options",
        "tt-stack#52",
        MANAGED_FILE,
        None,
        desired=lambda s: "off",
        value=lambda o, s: _phase2a(o),
    ),
    ManagedSetting(
        "memory_guard",
        "memory guard",
        guard.ISSUE,
        MANAGED_FILE,
        None,
        desired=guard.desired,
        value=lambda o, s: guard.state(o.conditions, s),
        serving=False,  # it guards the next start: nothing to restart for it
    ),
    ManagedSetting(
        "runtime_override",
        "/run override",
        "tt-stack#49",
        NOWHERE,
        None,
        desired=lambda s: "none",
        value=lambda o, s: _run_files(o.overrides),
        serving=False,
    ),
)
TOOL_CALLING = (
    "tool_call_parser",
    "QWEN36_SDPA_STREAMING",
    "QWEN36_MERGE_BATCH_GUARD",
    "runtime_override",
)
# Every managed setting: the seven built in, then the data settings (``use``).
DATA: tuple[data.DataSetting, ...] = ()
SETTINGS: tuple[ManagedSetting, ...] = BUILTIN
BY_KEY = {m.key: m for m in SETTINGS}
ALL = tuple(BY_KEY)


def use(found: tuple[data.DataSetting, ...]) -> tuple[data.DataSetting, ...]:
    """Manage the built-in settings and FOUND, the data settings; what was managed
    before is returned (a test puts it back)."""
    global DATA, SETTINGS, BY_KEY, ALL
    previous, DATA = DATA, tuple(found)
    SETTINGS = BUILTIN + tuple(_data_setting(d) for d in DATA)
    BY_KEY = {m.key: m for m in SETTINGS}
    ALL = tuple(BY_KEY)
    return previous


# The project's setting files (``REMEDY_SETTINGS_DIR``), refused here if any is bad:
# every command that judges a host imports this module before it connects.
use(data.load())


def urgency(key: str, s: HostData) -> str:
    """What KEY's live drift justifies: host data's restart_urgency, else a data
    setting's own, else the built-in default (remedy.core.config.restarts)."""
    source = BY_KEY[key].source if key in BY_KEY else None
    if source is not None and key not in s.restart_urgency:
        return source.urgency
    return s.urgency(key)


@dataclass
class Drift:
    key: str
    label: str
    issue: str
    desired: str
    live: str
    next_boot: str
    state: str  # IN_SYNC | VOLATILE | DRIFTED
    durable: str
    runtime: str | None

    @property
    def in_sync(self) -> bool:
        return self.state == IN_SYNC


def _view_env(view) -> dict[str, str]:
    return {k: v.value for k, v in view.environment.items() if v.value is not None}


def _flags(view) -> tuple[str, ...]:
    return tuple(view.script.flags) if view and view.script else ()


def serving(view) -> Observed:
    """The serving settings of one ServiceView (parser, environment, flags) as Observed:
    what the verification reads back from systemd after a restart."""
    return Observed(view.parser.value, _view_env(view), _flags(view))


def override_dropins(snap: HostSnapshot, s: HostData) -> list[str]:
    """Runtime drop-ins that belong to a tool-calling override: the managed one, or any
    /run drop-in that sets ExecStart. Others (e.g. `set-property --runtime` limits) are
    reported as volatile but never removed."""
    return runtime_overrides(snap.unit, s)


def runtime_overrides(unit, s: HostData) -> list[str]:
    """``override_dropins`` of one serving unit's state."""
    return [
        d.path
        for d in unit.runtime_dropins
        if d.path == s.override_dropin or re.search(r"(?m)^\s*ExecStart=", d.content)
    ]


def live(snap: HostSnapshot, s: HostData) -> Observed:
    now = snap.unit.now
    overrides = override_dropins(snap, s)
    if now.exec_start and now.exec_start.startswith("/run/") and not overrides:
        overrides = [now.exec_start]
    pools = {size: p.total for size, p in snap.memory.pools.items()}
    proc, r = snap.runtime.process, snap.readings
    argv = _script_argv(now)
    observed = serving(now)
    if proc is not None and "serve" in proc.argv:  # what the server runs, as it runs it
        argv = tuple(proc.argv[proc.argv.index("serve") + 1 :])
        parser = flag_map(list(argv))[1].get("--tool-call-parser")
        observed = dataclasses.replace(observed, parser=parser, flags=argv)
    if proc is not None and proc.environ is not None:
        # the process's environment, not the unit's loaded config: a unit changed since
        # the start (a postponed restart, a drop-in gone) runs what it started with
        observed = dataclasses.replace(observed, env=dict(proc.environ))
    return dataclasses.replace(
        observed, hugepages=pools, overrides=tuple(overrides), argv=argv,
        sysctl=r.sysctl_now, properties=live_properties(snap),
        conditions=now.exec_condition,
    )  # fmt: skip


def live_properties(snap: HostSnapshot) -> dict[str, str] | None:
    """The unit's properties the data settings read, live: systemctl show's (the unit's
    loaded config), with each resource limit the process has (/proc/PID/limits) over
    it: a unit changed since the start (a postponed restart) runs what it started with."""
    shown, proc = snap.readings.properties_now, snap.runtime.process
    if shown is None or proc is None or proc.limits is None:
        return shown
    has = runtime_core.limit_properties(proc.limits)
    return {key: has.get(key, value) for key, value in shown.items()}


def _script_argv(view) -> tuple[str, ...] | None:
    return tuple(view.script.argv) if view and view.script else None


def next_boot(snap: HostSnapshot, s: HostData) -> Observed:
    after, r = snap.unit.after_reboot, snap.readings
    return dataclasses.replace(
        serving(after), hugepages=snap.memory.next_boot_pools(), argv=_script_argv(after),
        sysctl=r.sysctl_next, properties=r.properties_next,
        conditions=after.exec_condition,
    )  # fmt: skip


def built(
    parser: str,
    env: dict[str, str],
    flags: tuple[str, ...],
    kernel_params: str | None,
    sysctl: dict[str, str] | None = None,
    properties: dict[str, str] | None = None,
    conditions: tuple[str, ...] | None = None,
) -> Observed:
    """A built, not yet switched, system: what it would run and boot (SYSCTL,
    PROPERTIES and CONDITIONS as its files set them; None: not read from it)."""
    pools = mem.hugepages_from_params(kernel_params) if kernel_params is not None else None
    return Observed(parser, dict(env), tuple(flags), pools, (), tuple(flags), sysctl, properties,
                    conditions)  # fmt: skip


def drifts(snap: HostSnapshot, s: HostData, scope: tuple[str, ...] | None = None) -> list[Drift]:
    """Per managed setting in SCOPE: desired, live, next boot, and the state.

    in sync: live and next boot both hold the desired value; volatile: live holds it
    and the next boot does not (a reboot reverts it); drifted: live does not (SCOPE: every
    managed setting by default)."""
    now, nxt = live(snap, s), next_boot(snap, s)
    out = []
    for key in ALL if scope is None else scope:
        m = BY_KEY[key]
        live_ok, next_ok = m.holds(now, s), m.holds(nxt, s)
        state = IN_SYNC if live_ok and next_ok else VOLATILE if live_ok else DRIFTED
        if key == "runtime_override" and not live_ok:
            state = VOLATILE  # /run is wiped by a reboot: present is volatile by nature
        out.append(
            Drift(
                key,
                m.label,
                m.issue,
                m.desired(s),
                m.value(now, s),
                m.value(nxt, s),
                state,
                m.durable,
                m.runtime,
            )
        )
    return out


@dataclass(frozen=True)
class Carried:
    """What the fallback carries of the data settings with a runtime form (fallback:
    runtime): their variables and properties in the /run override's drop-in, their
    sysctls with ``sysctl -w``."""

    env: dict[str, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    lacking: tuple[str, ...] = ()  # what live lacks of env and properties (their labels)

    @property
    def dropin_keys(self) -> tuple[str, ...]:
        return tuple(self.env) + tuple(self.properties)


def fallback_carried(
    s: HostData, scope: tuple[str, ...], snap: HostSnapshot | None = None
) -> Carried:
    """The data settings in SCOPE that the fallback carries, at their desired values
    (the deploy and the manual script write the same lines from it). With SNAP: only
    those that differ, a variable or property whose live value or next boot's differs
    (the override keeps it live until the durable path is taken), a sysctl whose live
    value differs. Without (the manual script, which reads the host as it runs): every
    one, the script setting a sysctl only where it differs."""
    now = live(snap, s) if snap is not None else None
    nxt = next_boot(snap, s) if snap is not None else None
    env, props, sysctls, lacking = {}, {}, {}, []
    for key in scope:
        m = BY_KEY[key]
        d = m.source
        if d is None or d.runtime_form is None:
            continue
        want = data.text(d.value_for(s.flake_host))
        live_ok = now is not None and m.holds(now, s)
        if d.kind == data.SYSCTL:
            if not live_ok:
                sysctls[d.name] = want
            continue
        if now is not None and live_ok and m.holds(nxt, s):
            continue
        (env if d.kind == data.ENVIRONMENT else props)[d.name] = want
        if now is not None and not live_ok:
            lacking.append(m.label)
    return Carried(env, props, sysctls, tuple(lacking))


def missing(
    obs: Observed, s: HostData, scope: tuple[str, ...], durable: str | None = None
) -> list[str]:
    """What OBS lacks of the desired state, setting by setting (only settings whose
    durable value lives in DURABLE, when given)."""
    out = []
    for key in scope:
        m = BY_KEY[key]
        if m.durable == NOWHERE or (durable and m.durable != durable) or not m.read_in(obs):
            continue
        if not m.holds(obs, s):
            out.append(f"{m.label} {m.desired(s)} (it has {m.value(obs, s)})")
    return out


def managed_values(
    s: HostData, scope: tuple[str, ...] | None = None
) -> list[tuple[str, str, str, str]]:
    """(name, option path, Nix value, why) for each value remedy's managed file carries
    for the settings in SCOPE (default: all); the names are the keys of host data's
    managed_options, or a data setting's."""
    scope = ALL if scope is None else scope
    out = []
    if "phase2a" in scope:
        why = "tt-stack#52: Phase 2a options off"
        out += [
            (n, s.managed_options[n], "false", why)
            for n in ("deviceResident", "enablePrefixCaching")
        ]
    if "hugepages" in scope and s.hugepages_target and s.hugepages_per_card is not None:
        why = (
            f"tt-stack#49: hugepage pool {_pages(_wanted_pages(s), s)}, "
            f"{s.hugepages_per_card} per card on {s.cards} cards"
        )
        out.append(
            (
                "hugepagesPerCard",
                s.managed_options["hugepagesPerCard"],
                str(s.hugepages_per_card),
                why,
            )
        )
    for key in scope:
        if (d := BY_KEY[key].source) is not None:
            want = data.text(d.value_for(s.flake_host))
            why = f"{d.issue}: {d.label} {want} ({d.file})"
            out.append((key, d.option_path(s.unit), d.nix_value(s.flake_host), why))
    return out


def managed_nix(s: HostData, scope: tuple[str, ...] | None = None) -> str | None:
    """The text of remedy's managed Nix file for the settings in SCOPE it carries, or
    None if none of them is in scope: a NixOS module that forces each value
    (``lib.mkForce``: the host's own configuration may set the same option, as
    production's sets hugepagesPerCard = 2). The same desired state gives the same bytes."""
    values = managed_values(s, scope)
    guarded = "memory_guard" in (ALL if scope is None else scope)
    if not values and not guarded:
        return None
    lines = [
        "# Managed by remedy: desired values tt-stack's defaults do not give this host.",
        "# `remedy converge` rewrites this file from its host data; change them there.",
        "# Each value is forced (lib.mkForce): it wins over the host's own definitions.",
        "{ lib, ... }:",
    ]
    if guarded:
        lines += ["let", *guard.nix_let(s), "in"]
    lines.append("{")
    if guarded:
        lines += guard.nix_lines(s)
    for name, path, value, why in values:
        source = BY_KEY[name].source if name in BY_KEY else None
        # a flag is added to a list of arguments that other definitions add to as well;
        # a list-valued unit property likewise (a mkForce'd one replaces the module's)
        added = source is not None and (source.kind == data.FLAG or source.is_list)
        forced = "" if added else "lib.mkForce "
        lines += [f"  # {why}", f"  {path} = {forced}{value};"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def earlier_items(d: data.DataSetting, s: HostData, managed: str | None) -> list[str]:
    """The items remedy's managed file MANAGED (as the run found it: what its earlier
    run made of D) adds to D's list, each as the unit writes it (NAME=VALUE). Read from
    remedy's own line ``PATH = [ "…" … ];`` (``lib.mkForce`` before the list in a file
    from before lists were added); none when the file has no such line."""
    if not managed or not d.is_list:
        return []
    line = re.compile(rf"^\s*{re.escape(d.option_path(s.unit))} = (?:lib\.mkForce )?\[(.*)\];$")
    out = []
    for text in managed.splitlines():
        if m := line.match(text):
            for quoted in re.findall(r'"((?:[^"\\]|\\.)*)"', m[1]):
                value = json.loads('"' + quoted.replace("\\${", "${") + '"')  # nix_string
                out.append(f"{d.name}={value}")
    return out


def proof_items(s: HostData, keys: tuple[str, ...], managed: str | None = None) -> tuple[str, ...]:
    """What the proof of a built system checks for each setting in KEYS, as the prove
    step's program reads it (``prove:KIND<TAB>LABEL<TAB>VALUE``, remedy/host/steps/
    prove.sh): the start script's parser, a variable the start chain sets, the kernel's
    hugepage pools, flags that must be absent, and a data setting of each kind. A list
    property is proven whole (plist): its item, and every item the running system's
    unit has but remedy's earlier ones (pown, before it: from MANAGED, remedy's file as
    the run found it), which remedy's file is meant to replace."""
    out = []
    for key in keys:
        m = BY_KEY[key]
        if key == "tool_call_parser":
            out.append(("parser", m.label, s.tool_call_parser))
        elif key in s.required_env and m.durable == FLAKE_INPUT:
            out.append(("env", m.label, f"{key}={s.required_env[key]}"))
        elif key == "hugepages":
            out += [("pages", m.label, f"{k}={n}") for k, n in sorted(s.hugepages_target.items())]
        elif key == "phase2a":
            out.append(("absent", m.label, "|".join(PHASE2A_FLAGS)))
        elif key == "memory_guard":
            out.append(("guard", m.label, guard.command_tail(s)))
        elif (d := m.source) is not None:
            want = data.text(d.value_for(s.flake_host))
            kind = {data.ENVIRONMENT: "denv", data.PROPERTY: "prop", data.SYSCTL: "sysctl"}
            if d.is_list:  # the whole list: the wanted item, and none of the module's lost
                own = [x for x in earlier_items(d, s, managed) if x != f"{d.name}={want}"]
                out += [("pown", m.label, x) for x in own]
                out.append(("plist", m.label, f"{d.name}={want}"))
            elif d.kind in kind:
                out.append((kind[d.kind], m.label, f"{d.name}={want}"))
            else:
                out.append(("flag", m.label, d.name if want == "on" else f"{d.name} {want}"))
    return tuple("prove:" + "\t".join(x) for x in out)
