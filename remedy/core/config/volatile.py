"""Unmanaged volatile state: what a reboot would revert beyond the managed settings.

Production was held together by ``/run`` state nobody had listed (tt-stack#49).
Three places hold such state, all read in the snapshot's one round trip:

- ``/run/systemd/system`` (and ``system.control``): drop-ins ``systemctl edit
  --runtime`` writes, unit files, ``*.wants``/``*.requires`` links ``systemctl
  enable --runtime`` makes, for any unit (transient units live elsewhere, in
  ``/run/systemd/transient``);
- the serving process itself (``/proc/<MainPID>/cmdline`` and ``environ``)
  against what the next boot's whole start chain sets (``start_chain_env``): the
  manager's environment as system.conf's ``DefaultEnvironment=`` gives it, the unit's
  ``PassEnvironment=``, ``Environment=`` and ``EnvironmentFile=`` (durable wherever the
  file lives), the start script's exports and the wrapper it execs (nixpkgs'
  makeWrapper, ``remedy.core.readings.wrapper``). What only ``systemctl set-environment`` gives
  is volatile;
- the live kernel command line against the next boot's ``kernel-params``;
- the live sysctls against what the next boot's sysctl.d files set (the system
  profile's ``etc/sysctl.d``; a key no file sets has no next-boot value to compare).

The managed settings (the parser, SDPA streaming, the merge guard, Phase 2a,
the hugepage pool, remedy's own ``/run`` override, and the data settings of
``settings/``) are reported per setting and left out here, with a runtime drop-in
that carries nothing but data settings' desired values. Host data
``ignore_volatile`` silences what a person accepted.

    found = unmanaged(snapshot, settings)
    kept, ignored = split_ignored(found, settings.ignore_volatile)
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from pyinfra.api.exceptions import FactProcessError

from remedy.core.config import data_settings as data
from remedy.core.config import desired
from remedy.core.config.host_data import HostData
from remedy.core.config.secrets import MASK, masked, secret_name, shown
from remedy.core.readings import systemd, wrapper
from remedy.core.readings.runtime import RuntimeFile, RuntimeState, UnitEnvLine
from remedy.core.readings.snapshot import HostSnapshot

RUNTIME_UNIT, PROCESS, KERNEL_PARAM, SYSCTL = "runtime-unit", "process", "kernel-param", "sysctl"
KINDS = (RUNTIME_UNIT, PROCESS, KERNEL_PARAM, SYSCTL)
GONE = "gone"

# What systemd, the shell and the kernel add to every service's environment: not state.
PROVIDED_ENV = {
    "CACHE_DIRECTORY", "CONFIGURATION_DIRECTORY", "CREDENTIALS_DIRECTORY", "EXIT_CODE",
    "EXIT_STATUS", "FDSTORE", "HOME", "INVOCATION_ID", "JOURNAL_STREAM", "LISTEN_FDNAMES",
    "LISTEN_FDS", "LISTEN_PID", "LOGNAME", "LOGS_DIRECTORY", "MAINPID", "MANAGERPID",
    "MEMORY_PRESSURE_WATCH", "MEMORY_PRESSURE_WRITE", "MONITOR_EXIT_CODE",
    "MONITOR_EXIT_STATUS", "MONITOR_INVOCATION_ID", "MONITOR_SERVICE_RESULT",
    "MONITOR_UNIT", "NOTIFY_SOCKET", "OLDPWD", "PIDFILE", "PWD", "RUNTIME_DIRECTORY",
    "SERVICE_RESULT", "SHELL", "SHLVL", "STATE_DIRECTORY", "SYSTEMD_EXEC_PID", "TERM",
    "TRIGGER_PATH", "TRIGGER_TIMER_MONOTONIC_USEC", "TRIGGER_TIMER_REALTIME_USEC",
    "TRIGGER_UNIT", "USER", "WATCHDOG_PID", "WATCHDOG_USEC", "_",
}  # fmt: skip
# The bootloader's and NixOS's own words on the kernel command line (not kernel-params).
BOOT_WORDS = ("BOOT_IMAGE", "init", "initrd")
# The hugepage pool is a managed setting (its pools are compared live and at next boot).
HUGEPAGE_PARAMS = ("hugepagesz", "hugepages", "default_hugepagesz")
# Flags the managed settings own: the parser, and Phase 2a (prefix caching brings
# --no-async-scheduling with it).
MANAGED_FLAGS = (
    "--tool-call-parser",
    "--enable-auto-tool-choice",
    *desired.PHASE2A_FLAGS,
    "--no-async-scheduling",
)
flag_map = desired.flag_map


@dataclass(frozen=True)
class Unmanaged:
    kind: str  # RUNTIME_UNIT | PROCESS | KERNEL_PARAM
    subject: str  # a path, a flag, an environment variable or a kernel parameter
    now: str
    after_reboot: str
    details: tuple[str, ...] = ()  # what of the server this runtime file explains

    @property
    def now_text(self) -> str:
        """NOW with what of the server this runtime file explains."""
        return self.now + (f" ({'; '.join(self.details)})" if self.details else "")

    def text(self) -> str:
        return f"{self.subject}: {self.now_text}; after reboot: {self.after_reboot}"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "now": self.now,
            "after_reboot": self.after_reboot,
            "details": list(self.details),
        }


def _after_serve(argv: list[str]) -> list[str] | None:
    return argv[argv.index("serve") + 1 :] if "serve" in argv else None


def _flag(name: str, value: str | None) -> str:
    return name if value is None else f"{name} {_flag_value(name, value)}"


def _flag_value(name: str, value) -> str:
    """A flag's value as a report says it: masked for a flag like --api-key."""
    return MASK if secret_name(name) else masked(str(value))


def _dropin_summary(text: str) -> str:
    """A drop-in's directives on one line: ``Environment=X=1; LimitNOFILE=4096``."""
    words = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip() and not ln.strip().startswith(("#", ";", "["))
    ]
    line = masked("; ".join(words)) or "empty"  # masked whole, then cut
    return line if len(line) <= 60 else line[:59] + "…"


def _describe(f: RuntimeFile) -> str:
    rel = f.path.split("/run/systemd/", 1)[-1]
    parent, _, name = rel.rpartition("/")
    if f.link is not None:
        holder = parent.rsplit("/", 1)[-1]
        if holder.endswith((".wants", ".requires")):
            target, kind = holder.rsplit(".", 1)
            return f"{name} enabled at runtime ({kind} of {target})"
        return f"a link to {f.link}"
    if parent.endswith(".d"):
        return _dropin_summary(f.text)
    return "a unit file at runtime"


@dataclass
class _Difference:
    text: str  # what the server runs that the next boot would not
    after: str  # what a reboot does to it
    subject: str
    source: str | None  # the live file that gives it, if the live unit shows one


def _process_differences(unit, runtime: RuntimeState, s: HostData) -> list[_Difference]:
    """The serving process against the next boot's unit and start script. A difference
    that the running generation's own files explain (the process runs as they say, and
    the profile boots another generation) is a pending generation, not volatile state:
    the status says boot pending."""
    proc, out = runtime.process, []
    nxt, now = unit.after_reboot, unit.now
    words, next_words = (
        _after_serve(proc.argv),
        (nxt.script.argv if nxt.script and nxt.script.argv else None),
    )
    if words is not None and next_words is not None:
        model, flags = flag_map(words)
        next_model, next_flags = flag_map(next_words)
        live_src = now.script.path if now.script else None
        live_flags = flag_map(now.script.argv)[1] if now.script and now.script.argv else {}
        if next_model is not None and "$" not in next_model and model != next_model:
            out.append(
                _Difference(f"the server serves {model}", f"{model} → {next_model}", "model", None)
            )
        for name in sorted(set(flags) | set(next_flags)):
            if name in MANAGED_FLAGS or name in _data_names(data.FLAG):
                continue
            a, b = flags.get(name, ...), next_flags.get(name, ...)
            if a == b or (isinstance(b, str) and "$" in b):
                continue
            as_live = live_flags.get(name, ...) == a and bool(live_flags or now.script)
            if as_live and not _runtime(live_src):
                continue  # the running generation's own start script: a pending generation
            src = live_src if as_live and a is not ... else None
            if b is ...:
                d = _Difference(f"the server runs {_flag(name, a)}", f"{name} gone", name, src)
            elif a is ...:
                d = _Difference(
                    f"the server runs without {name}", f"{_flag(name, b)} added", name, None
                )
            else:
                d = _Difference(
                    f"the server runs {_flag(name, a)}",
                    f"{name} {_flag_value(name, a)} → {_flag_value(name, b)}",
                    name,
                    src,
                )
            out.append(d)
    if proc.environ is not None:
        env = proc.environ
        manager = durable_manager_env(runtime)
        want = start_chain_env(nxt, runtime, manager, next_boot=True)
        # the manager has what system.conf gives once it is re-executed: until then a
        # value it lacks is pending, as a generation that is not running yet is
        pending = {k: v if runtime.manager_env.get(k) == v.value else ChainVar(None, v.source)
                   for k, v in manager.items()}  # fmt: skip
        have = start_chain_env(now, runtime, pending, next_boot=False)
        for key in sorted(set(env) | set(want)):
            if key in PROVIDED_ENV or key in s.required_env or key in _data_names(data.ENVIRONMENT):
                continue
            a, w = env.get(key), want.get(key)
            if w is not None and w.value is None:
                continue  # the next boot sets it, to a value not known here (durable)
            b = w.value if w is not None else None
            if a == b:
                continue
            h = have.get(key)
            if h is None and a is None:
                continue  # the running generation does not set it either: a pending one
            if h is not None and h.value in (None, a) and not _runtime(h.source):
                continue  # as the running generation's own files say: a pending generation
            if h is not None and h.value in (None, a):
                src = h.source
            else:
                src = _manager_source(key, a, runtime)
            if b is None:
                d = _Difference(f"the server runs with {shown(key, a)}", f"{key} gone", key, src)
            elif a is None:
                d = _Difference(f"the server runs without {key}", shown(key, b), key, None)
            else:
                shown_b = shown(key, b).split("=", 1)[1]
                d = _Difference(
                    f"the server runs with {shown(key, a)}", f"{key} → {shown_b}", key, src
                )
            out.append(d)
    return out


def _runtime(path: str | None) -> bool:
    """PATH is runtime state (under /run), not a file of the running generation."""
    return bool(path and path.startswith("/run/"))


SET_ENVIRONMENT = "systemctl set-environment"


@dataclass(frozen=True)
class ChainVar:
    """One variable the start chain gives the server: its value (None: set, but to a value
    not known here, as an environment file's) and the file that sets it (None: systemd)."""

    value: str | None
    source: str | None


def systemd_own(key: str) -> bool:
    """What the system manager puts in every service's environment itself at boot: PATH
    and the locale (systemd src/core/main.c and manager.c, manager_default_environment:
    ``PATH=`` DEFAULT_PATH, then locale_setup() from locale.conf, C.UTF-8 without one)."""
    return key in ("PATH", "LANG", "LANGUAGE") or key.startswith("LC_")


def durable_manager_env(runtime: RuntimeState) -> dict[str, ChainVar]:
    """The manager's environment at the next boot: systemd's own PATH and locale (as it
    has them now), then ``DefaultEnvironment=`` of the system.conf the next boot reads and
    of system.conf.d outside /run. What ``systemctl set-environment`` or
    ``import-environment`` added, or a system.conf.d file under /run, is not in it: a
    reboot reverts them. A read without the start chain (an older recording) takes the
    manager's environment as it is."""
    if runtime.chain is None:
        return {k: ChainVar(v, None) for k, v in runtime.manager_env.items()}
    out = {k: ChainVar(v, None) for k, v in runtime.manager_env.items() if systemd_own(k)}
    for path, value in runtime.chain.default_env:
        if _runtime(path):
            continue
        if not value.strip():  # an empty assignment resets the list
            out = {k: v for k, v in out.items() if v.source is None}
            continue
        try:
            parsed = systemd.parse_environment(value)
        except FactProcessError:
            continue
        out.update({k: ChainVar(v, path) for k, v in parsed.items()})
    return out


def _manager_source(key: str, value: str | None, runtime: RuntimeState) -> str | None:
    """Where a variable of the manager's environment that no durable file gives comes from:
    a system.conf.d file under /run, else ``systemctl set-environment``."""
    if value is None or runtime.chain is None or runtime.manager_env.get(key) != value:
        return None
    for path, line in runtime.chain.default_env:
        if _runtime(path) and key in line:
            try:
                if systemd.parse_environment(line).get(key) == value:
                    return path
            except FactProcessError:
                continue
    return SET_ENVIRONMENT


def _chain_unit_lines(runtime: RuntimeState, next_boot: bool) -> list[UnitEnvLine]:
    """The unit files' EnvironmentFile=/PassEnvironment= lines that apply: now, the files
    systemd loaded; at next boot, as ``remedy.core.readings.serving.next_boot_dropins`` has it, the
    system profile's unit and drop-ins (or, without one, the loaded fragment) and the
    loaded drop-ins outside /run that are not the running generation's own."""
    chain = runtime.chain
    if chain is None:
        return []
    if not next_boot:
        return [ln for ln in chain.unit_env if ln.kind in ("fragment", "dropin")]
    profile = chain.next_unit is not None
    out = []
    for ln in chain.unit_env:
        if ln.kind in ("next", "next-dropin"):
            out.append(ln)
        elif ln.kind == "fragment" and not profile:
            out.append(ln)
        elif ln.kind == "dropin" and not _runtime(ln.path):
            generation = ln.path.startswith("/etc/") and ln.realpath.startswith("/nix/store/")
            if not (profile and generation):
                out.append(ln)
    return out


def start_chain_env(
    view, runtime: RuntimeState, manager: dict[str, ChainVar], next_boot: bool
) -> dict[str, ChainVar]:
    """The environment VIEW's start chain gives the server, in the order systemd and the
    shell apply it (systemd src/core/execute.c, build_environment and its merge: the
    manager's, PassEnvironment=, Environment=, EnvironmentFile=), then the start script's
    exports, then the wrapper the start script execs (``remedy.core.readings.wrapper``)."""
    env = dict(manager)
    lines = _chain_unit_lines(runtime, next_boot)
    for ln in lines:
        if ln.directive == "PassEnvironment":
            for name in ln.value.split():
                env[name] = ChainVar(None, ln.path)
    script = view.script
    script_path = script.path if script else None

    def known(value: str | None) -> str | None:
        return None if value is None or "$" in value else value

    exports = {}
    for key, setting in view.environment.items():
        if script_path and setting.source == script_path:
            exports[key] = ChainVar(known(setting.value), setting.source)
        else:
            env[key] = ChainVar(known(setting.value), setting.source)
    chain = runtime.chain
    for ln in lines:
        if ln.directive == "EnvironmentFile" and chain is not None:
            pattern = ln.value.lstrip("-").strip()
            for name in chain.env_files.get(pattern) or []:
                env[name] = ChainVar(None, ln.path)
    env.update(exports)
    target = script.execs if script else None
    text = chain.wrappers.get(target) if chain is not None and target else None
    if text is not None:
        inherited = {k: v.value for k, v in env.items()}
        for key, value in wrapper.evaluate(text, inherited).items():
            if value == wrapper.REMOVED:
                env.pop(key, None)
            else:
                env[key] = ChainVar(value, target)
    return env


def _kernel_params(text: str, skip: tuple[str, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for word in text.split():
        name = word.split("=", 1)[0]
        if name not in skip and word != "--":
            out.setdefault(name, []).append(word)
    return out


def _kernel_differences(memory) -> list[Unmanaged]:
    if memory is None or memory.next_boot_params is None or not memory.booted_params:
        return []
    skip = (*BOOT_WORDS, *HUGEPAGE_PARAMS)
    live = _kernel_params(memory.booted_params.split(" -- ")[0], skip)
    nxt = _kernel_params(memory.next_boot_params, skip)
    out = []
    for name in sorted(set(live) | set(nxt)):
        a, b = live.get(name), nxt.get(name)
        if a == b:
            continue
        now = " ".join(a) if a else "not on the kernel command line"
        after = f"{' '.join(a)} → {' '.join(b)}" if a and b else " ".join(b) if b else GONE
        out.append(Unmanaged(KERNEL_PARAM, name, now, after))
    return out


def _data_names(kind: str) -> set[str]:
    return {d.name for d in desired.DATA if d.kind == kind}


def _carries_data_settings(f: RuntimeFile, s: HostData) -> bool:
    """F is a runtime drop-in of the serving unit that sets nothing but data settings'
    variables and properties, each to its desired value: the settings say it."""
    return bool(_carried_keys(f, s))


def _carried_keys(f: RuntimeFile, s: HostData) -> tuple[str, ...]:
    """The data settings F carries, when it is a runtime drop-in of the serving unit that
    sets nothing but their variables and properties, each to its desired value (none:
    it sets anything else, or nothing)."""
    if not f.path.startswith(tuple(f"/run/systemd/{d}/{s.unit}.d/"
                                   for d in ("system", "system.control"))):  # fmt: skip
        return ()
    ours = {(d.kind, d.name): d for d in desired.DATA}
    keys: list[str] = []
    for key, value in systemd.UnitFile(f.path, f.path, f.text).service_settings():
        try:
            pairs = systemd.parse_environment(value) if key == "Environment" else {key: value}
        except FactProcessError:
            return ()
        kind = data.ENVIRONMENT if key == "Environment" else data.PROPERTY
        for name, v in pairs.items():
            d = ours.get((kind, name))
            if d is None or desired.BY_KEY[d.key].desired(s) != data.normalized(d, v):
                return ()
            keys.append(d.key)
    return tuple(keys)


def carriers(snap: HostSnapshot, s: HostData) -> dict[str, tuple[str, ...]]:
    """The /run drop-ins of the serving unit that carry only data settings at their
    desired values (what `remedy adopt` made a setting of), with the settings each
    carries: once the next boot holds those, the drop-in is no longer needed."""
    runtime = snap.runtime
    if runtime is None:
        return {}
    found = {f.path: _carried_keys(f, s) for f in runtime.files if f.link is None}
    return {path: keys for path, keys in found.items() if keys}


def _sysctl_differences(readings) -> list[Unmanaged]:
    """Each sysctl whose live value is not what the next boot's sysctl.d files set. As
    the running generation's files set it, it is a pending generation (the status says
    boot pending), not volatile state."""
    if readings is None or readings.sysctl_now is None or readings.sysctl_next is None:
        return []
    managed, running, out = _data_names(data.SYSCTL), readings.sysctl_running or {}, []
    for key, after in sorted(readings.sysctl_next.items()):
        now = readings.sysctl_now.get(key)
        if key in managed or now is None or now == after or running.get(key) == now:
            continue
        out.append(Unmanaged(SYSCTL, key, f"{now} (set at runtime)", f"{after} (sysctl.d)"))
    return out


def unmanaged(snap: HostSnapshot, s: HostData) -> list[Unmanaged]:
    """Everything a reboot would change that no managed setting covers."""
    return unmanaged_state(snap.unit, snap.memory, snap.runtime, s, snap.readings)


def unmanaged_state(
    unit, memory, runtime: RuntimeState, s: HostData, readings=None
) -> list[Unmanaged]:
    """``unmanaged`` from the parts of a snapshot: the serving unit, memory (None: the
    kernel command line is not compared), the runtime readings, the data settings'
    readings (None: the sysctls are not compared)."""
    managed = set(desired.runtime_overrides(unit, s))
    managed |= {f.path for f in runtime.files if f.link is None and _carries_data_settings(f, s)}
    if unit.now.exec_start and unit.now.exec_start.startswith("/run/"):
        managed.add(unit.now.exec_start)
    if unit.now.script and unit.now.script.path.startswith("/run/"):
        managed.add(unit.now.script.path)
    entries: dict[str, Unmanaged] = {}
    for f in runtime.files:
        if f.path not in managed:
            entries[f.path] = Unmanaged(RUNTIME_UNIT, f.path, _describe(f), GONE)
    loose = []
    if runtime.process is not None:
        for d in _process_differences(unit, runtime, s):
            if d.source in managed:
                continue  # remedy's /run override: the runtime_override setting says it
            if d.source in entries:  # explained by that runtime file: said with it
                e = entries[d.source]
                entries[d.source] = Unmanaged(
                    e.kind, e.subject, e.now, e.after_reboot, (*e.details, d.text)
                )
                continue
            where = f" (from {d.source})" if d.source else ""
            loose.append(Unmanaged(PROCESS, d.subject, d.text + where, d.after))
    return [*entries.values(), *loose, *_kernel_differences(memory), *_sysctl_differences(readings)]


def split_ignored(
    entries: list[Unmanaged], patterns: tuple[str, ...]
) -> tuple[list[Unmanaged], list[Unmanaged]]:
    """(kept, ignored): an entry is ignored when a pattern of host data ``ignore_volatile``
    matches its subject (a path glob, a flag, a variable or a kernel parameter name)."""
    kept, ignored = [], []
    for e in entries:
        hit = any(fnmatch.fnmatchcase(e.subject, p) for p in patterns)
        (ignored if hit else kept).append(e)
    return kept, ignored


def counts(entries: list[Unmanaged]) -> dict[str, int]:
    """Per kind, for the metric remedy_unmanaged_volatile{host,kind} (every kind listed)."""
    return {k: sum(1 for e in entries if e.kind == k) for k in KINDS}


# A byte that is not UTF-8, as the remote read shows it (remedy.core.readings.sections.unescape)
NOT_UTF8 = re.compile(r"\\x[0-9a-f]{2}")


def unshowable(snap: HostSnapshot, s: HostData) -> list[str]:
    """Why the serving unit cannot be read once systemd loads what /run holds for it: a
    drop-in whose name is not UTF-8 cannot go into a D-Bus reply, so after any
    daemon-reload ``systemctl show UNIT`` fails ("Invalid argument") and no step could see
    what it changed. One sentence per such file, with what to do."""
    dirs = (f"/run/systemd/system/{s.unit}.d/", f"/run/systemd/system.control/{s.unit}.d/")
    return [
        f"{f.path}: its name is not UTF-8; once systemd loads it (any daemon-reload) "
        f'`systemctl show {s.unit}` fails with "Invalid argument" and no step of a run can see '
        "the unit: rename or remove it (a reboot removes it too), then run again"
        for f in snap.runtime.files
        if f.path.startswith(dirs) and NOT_UTF8.search(f.path)
    ]
