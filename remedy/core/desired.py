"""The desired state of a serving host, as data: six managed settings and their drift.

Each ``ManagedSetting`` is declared once: its desired value (from host data),
where its durable value lives, how to read it from one configuration of the
host (live, next boot, or a built system not yet switched), its runtime
fallback if it has one, and the issue it comes from. ``drifts`` compares the
live and next-boot configurations against the desired values; ``remedy
status``, the plan and the proof of a built system all judge "correct" here.

    for d in drifts(snapshot, settings):
        print(d.label, d.desired, d.live, d.next_boot, d.state)
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from remedy.core import memory as mem
from remedy.core.settings import Settings
from remedy.core.snapshot import HostSnapshot

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


def _pages(pools: dict[int, int] | None, s: Settings) -> str:
    """``1G×2``: the wanted sizes, and any other size that has pages."""
    if pools is None:
        return "unknown"
    wanted = _wanted_pages(s)
    sizes = sorted(k for k in set(wanted) | set(pools) if k in wanted or pools.get(k))
    return " ".join(f"{mem.size_label(k)}×{pools.get(k, 0)}" for k in sizes) or "none"


def _wanted_pages(s: Settings) -> dict[int, int]:
    return {mem.SIZES_BY_LABEL[label]: n for label, n in s.hugepages_target.items()}


def _pages_ok(pools: dict[int, int] | None, s: Settings) -> bool:
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
    desired: Callable[[Settings], str]
    value: Callable[[Observed, Settings], str]
    ok: Callable[[Observed, Settings], bool] | None = None  # default: value == desired
    serving: bool = True  # the server must restart to take a new value
    # The same judgement as a shell condition on a built system, for the manual script:
    # "$script" is the start script with the flags, "$unit_file" the unit, "$toplevel".
    check_sh: Callable[[Settings], str] | None = None

    def holds(self, obs: Observed, s: Settings) -> bool:
        if self.ok is not None:
            return self.ok(obs, s)
        return self.value(obs, s) == self.desired(s)


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
        check_sh=lambda s: (
            "true"
            if key not in s.required_env
            else f"grep -Fqsw -- {shlex.quote(f'{key}={s.required_env[key]}')} "
            '"$script" "$exec_script" "$unit_file"'
        ),
    )


def _pages_sh(s: Settings) -> str:
    tests = [
        f"grep -Eq {shlex.quote(f'(^| )hugepagesz={label} hugepages={n}( |$)')} "
        '"$toplevel/kernel-params"'
        for label, n in sorted(s.hugepages_target.items())
    ]
    return " && ".join(tests) or "true"


SETTINGS: tuple[ManagedSetting, ...] = (
    ManagedSetting(
        "tool_call_parser",
        "tool-call parser",
        "tt-stack#49",
        FLAKE_INPUT,
        "the /run override's start script",
        desired=lambda s: s.tool_call_parser,
        value=lambda o, s: o.parser or "none",
        check_sh=lambda s: (
            f'grep -q -- {shlex.quote("--tool-call-parser " + s.tool_call_parser)} "$script"'
        ),
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
        check_sh=_pages_sh,
    ),
    ManagedSetting(
        "phase2a",
        "Phase 2a options",
        "tt-stack#52",
        MANAGED_FILE,
        None,
        desired=lambda s: "off",
        value=lambda o, s: _phase2a(o),
        check_sh=lambda s: f'! grep -Eq -- {shlex.quote("|".join(PHASE2A_FLAGS))} "$script"',
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
BY_KEY = {m.key: m for m in SETTINGS}
TOOL_CALLING = (
    "tool_call_parser",
    "QWEN36_SDPA_STREAMING",
    "QWEN36_MERGE_BATCH_GUARD",
    "runtime_override",
)
ALL = tuple(BY_KEY)


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


def override_dropins(snap: HostSnapshot, s: Settings) -> list[str]:
    """Runtime drop-ins that belong to a tool-calling override: the managed one, or any
    /run drop-in that sets ExecStart. Others (e.g. `set-property --runtime` limits) are
    reported as volatile but never removed."""
    return runtime_overrides(snap.unit, s)


def runtime_overrides(unit, s: Settings) -> list[str]:
    """``override_dropins`` of one serving unit's state."""
    return [
        d.path
        for d in unit.runtime_dropins
        if d.path == s.override_dropin or re.search(r"(?m)^\s*ExecStart=", d.content)
    ]


def live(snap: HostSnapshot, s: Settings) -> Observed:
    now = snap.unit.now
    overrides = override_dropins(snap, s)
    if now.exec_start and now.exec_start.startswith("/run/") and not overrides:
        overrides = [now.exec_start]
    pools = {size: p.total for size, p in snap.memory.pools.items()}
    return dataclasses.replace(serving(now), hugepages=pools, overrides=tuple(overrides))


def next_boot(snap: HostSnapshot, s: Settings) -> Observed:
    return dataclasses.replace(
        serving(snap.unit.after_reboot), hugepages=snap.memory.next_boot_pools()
    )


def built(
    parser: str, env: dict[str, str], flags: tuple[str, ...], kernel_params: str | None
) -> Observed:
    """A built, not yet switched, system: what it would run and boot."""
    pools = mem.hugepages_from_params(kernel_params) if kernel_params is not None else None
    return Observed(parser, dict(env), tuple(flags), pools, ())


def drifts(snap: HostSnapshot, s: Settings, scope: tuple[str, ...] = ALL) -> list[Drift]:
    """Per managed setting in SCOPE: desired, live, next boot, and the state.

    in sync: live and next boot both hold the desired value; volatile: live holds it
    and the next boot does not (a reboot reverts it); drifted: live does not."""
    now, nxt = live(snap, s), next_boot(snap, s)
    out = []
    for key in scope:
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


def missing(
    obs: Observed, s: Settings, scope: tuple[str, ...], durable: str | None = None
) -> list[str]:
    """What OBS lacks of the desired state, setting by setting (only settings whose
    durable value lives in DURABLE, when given)."""
    out = []
    for key in scope:
        m = BY_KEY[key]
        if m.durable == NOWHERE or (durable and m.durable != durable):
            continue
        if not m.holds(obs, s):
            out.append(f"{m.label} {m.desired(s)} (it has {m.value(obs, s)})")
    return out


def managed_values(s: Settings, scope: tuple[str, ...] = ALL) -> list[tuple[str, str, str, str]]:
    """(name, option path, Nix value, why) for each value remedy's managed file carries
    for the settings in SCOPE; the names are the keys of host data's managed_options."""
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
    return out


def managed_nix(s: Settings, scope: tuple[str, ...] = ALL) -> str | None:
    """The text of remedy's managed Nix file for the settings in SCOPE it carries, or
    None if none of them is in scope: a NixOS module that forces each value
    (``lib.mkForce``: the host's own configuration may set the same option, as
    production's sets hugepagesPerCard = 2). The same desired state gives the same bytes."""
    values = managed_values(s, scope)
    if not values:
        return None
    lines = [
        "# Managed by remedy: desired values tt-stack's defaults do not give this host.",
        "# `remedy converge` rewrites this file from its host data; change them there.",
        "# Each value is forced (lib.mkForce): it wins over the host's own definitions.",
        "{ lib, ... }:",
        "{",
    ]
    for _name, path, value, why in values:
        lines += [f"  # {why}", f"  {path} = lib.mkForce {value};"]
    lines.append("}")
    return "\n".join(lines) + "\n"
