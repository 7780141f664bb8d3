"""Everything a no-drift check needs, read in one remote round trip.

Each ``read_*`` takes the split sections of the remote answer and returns the
typed value of one fact; ``HostSnapshot`` is all of them together.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyinfra.api.exceptions import FactProcessError

from remedy.core.programs import journal
from remedy.core.programs.journal import RunJournal
from remedy.core.readings import memory as mem
from remedy.core.readings import nix, probe, reboot, runtime, sections, switch
from remedy.core.readings.sections import Section
from remedy.core.readings.serving import (
    BuiltUnit,
    ServingUnitState,
    VolatileEntry,
    read_built,
    read_unit,
    volatile_entries,
)

Parts = dict[str, list[Section]]


def read_memory(parts: Parts) -> mem.MemoryHeadroom:
    info = mem.parse_meminfo(sections.one(parts, "memory.meminfo", "MemoryHeadroom").lines)
    pools = {}
    for s in parts.get("memory.hugepages", []):
        pool = mem.parse_hugepages(s.arg, s.lines)
        pools[pool.size_kb] = pool
    cmdline = " ".join(sections.one(parts, "memory.cmdline", "MemoryHeadroom").lines).strip()
    nxt = parts.get("memory.next_params")
    refcnt = (
        " ".join(parts["memory.tenstorrent"][0].lines).strip()
        if parts.get("memory.tenstorrent")
        else ""
    )
    return mem.MemoryHeadroom(
        mem_available_kb=info["MemAvailable"],
        mem_total_kb=info["MemTotal"],
        pools=pools,
        booted_params=cmdline,
        next_boot_params=" ".join(nxt[0].lines).strip() if nxt else None,
        tenstorrent_refcnt=int(refcnt) if refcnt.isdigit() else None,
    )


def read_nix(parts: Parts) -> nix.NixInfo | None:
    return nix.parse_nix_version(sections.one(parts, "nix.version", "NixInfo").lines)


def read_flake_input(parts: Parts) -> nix.FlakeInput:
    args = dict(
        line.partition("=")[::2]
        for line in sections.one(parts, "nix.flake_args", "FlakeInput").lines
    )
    name, flake_dir = args.get("input", ""), args.get("dir", "")
    s = sections.one(parts, "nix.flake_lock", "FlakeInput")
    path = f"{flake_dir.rstrip('/')}/flake.lock"
    if s.arg == "missing":
        raise FactProcessError(
            f"{path} does not exist: cannot read input {name!r} "
            "(is flake_dir the host flake's checkout?)"
        )
    if s.arg != "ok":
        raise FactProcessError(f"{path} is not readable: cannot read input {name!r}")
    return nix.parse_flake_lock("\n".join(s.lines), name, path)


@dataclass
class Checkout:
    is_checkout: bool
    head: str | None = None
    changes: list[str] = field(default_factory=list)  # `git status --porcelain` lines
    owner: str | None = None  # who owns the checkout; git and nix run as them
    home: str | None = None
    error: str | None = None  # why git could not read it, in git's words
    git_missing: bool = False

    @property
    def problem(self) -> str | None:
        """Why the durable path cannot use this checkout, with what to do, or None."""
        if self.git_missing:
            return (
                "git is not installed on the host (NixOS does not install it by default): "
                "add pkgs.git to environment.systemPackages, or run the fallback"
            )
        if self.error and "dubious ownership" in self.error:
            return (
                f"git refuses the checkout: it is owned by {self.owner}, not by the user "
                f"git ran as ({self.error}); remedy runs git as the owner with runuser: "
                "check that runuser works for that user"
            )
        if not self.is_checkout:
            return f"not a git checkout ({self.error or 'git found no repository'})"
        return None


def read_checkout(parts: Parts) -> Checkout:
    s = sections.one(parts, "nix.checkout", "FlakeCheckout")
    out = Checkout(False)
    errors = []
    for line in s.lines:
        word, _, rest = line.partition(" ")
        if word == "owner":
            owner, _, home = rest.partition(" ")
            out.owner = None if owner in ("", "?") else owner
            out.home = home.strip() or None
        elif word == "no-git":
            out.git_missing = True
        elif word == "top":
            out.is_checkout = True
        elif word == "head":
            out.head = rest.strip() or None
        elif word == "status":
            out.changes.append(rest)
        elif word == "error":
            errors.append(rest.strip())
        elif line.strip() == "not-a-checkout":  # recorded by older fact versions
            pass
    if errors:
        out.error = next((e for e in errors if e.startswith("fatal:")), errors[0])
    return out


@dataclass
class ManagedFile:
    """remedy's Nix file in the host flake (``HostData.managed_file``)."""

    path: str  # relative to flake_dir
    content: str | None = None  # None: not there
    imported_by: list[str] = field(default_factory=list)  # files that import it
    untracked: bool = False  # there, but not in git: a fast-forward would refuse it
    # the last commit that touched it: (rev, author email, author name)
    last_commit: tuple[str, str, str] | None = None


def read_managed(parts: Parts) -> ManagedFile:
    found = parts.get("nix.managed")
    if not found:
        return ManagedFile("")
    s = found[0]
    out = ManagedFile(s.arg.strip())
    out.imported_by = [ln.split(" ", 1)[1] for ln in s.lines if ln.startswith("imported-by ")]
    out.untracked = "untracked" in (ln.strip() for ln in s.lines)
    for ln in s.lines:
        if ln.startswith("last-commit "):
            rev, email, name = (ln.split(" ", 3)[1:] + ["", "", ""])[:3]
            out.last_commit = (rev, email, name)
    if s.files:
        out.content = s.files[0].text
    return out


@dataclass
class NixTools:
    git: bool = False
    runuser: bool = False
    daemon_socket: bool = False
    # systemd-run on a host booted with systemd: the owner's nix runs in a scope with a
    # memory bound
    systemd_run: bool = False


def read_tools(parts: Parts) -> NixTools:
    found = parts.get("nix.tools")
    if not found:
        return NixTools(True, True, True)  # not asked: assume present
    words = " ".join(found[0].lines).split()
    return NixTools(
        "git" in words,
        "runuser" in words,
        "daemon-socket" in words,
        "systemd-run" in words and "systemd-booted" in words,
    )


def read_generations(parts: Parts) -> nix.SystemGenerations:
    return nix.parse_generations(sections.one(parts, "nix.generations", "SystemGenerations").lines)


def read_probe(parts: Parts) -> probe.ProbeResult:
    return probe.read_curl_output(sections.one(parts, "probe", "ToolCallProbe").lines)


@dataclass
class SettingReadings:
    """What the data settings read beyond the serving unit (``remedy.core.config.data_settings``):
    sysctls live (/proc/sys) and as the next boot's sysctl.d files set them (the system
    profile's ``etc/sysctl.d``, which NixOS's systemd-sysctl applies at boot), and the
    serving unit's [Service] properties live (``systemctl show``) and as the next boot's
    unit files set them. None: not read (a recording made before these sections)."""

    sysctl_now: dict[str, str] | None = None
    sysctl_next: dict[str, str] | None = None
    properties_now: dict[str, str] | None = None
    properties_next: dict[str, str] | None = None
    sysctl_files: tuple[str, ...] = ()  # the next boot's sysctl.d files
    # what the running generation's sysctl.d sets (/run/current-system/etc/sysctl.d)
    sysctl_running: dict[str, str] | None = None


@dataclass
class HostSnapshot:
    unit: ServingUnitState
    memory: mem.MemoryHeadroom
    nix: nix.NixInfo | None
    flake_input: nix.FlakeInput | None
    flake_error: str | None
    checkout: Checkout
    tools: NixTools
    generations: nix.SystemGenerations
    probe: probe.ProbeResult
    volatile: list[VolatileEntry]
    managed: ManagedFile = field(default_factory=lambda: ManagedFile(""))
    journal: RunJournal = field(default_factory=RunJournal)
    # The managed options as the host's configuration defines them without remedy's file
    # (remedy.core.config.options.OptionDefinitions): a second read, only where it matters.
    definitions: Any = None
    # remedy's record of the last such evaluation on the host: its lines as read (the
    # section nix.options_record; None when absent), remedy.core.config.options.read_record
    options_record: tuple[str, ...] | None = None
    # nixos-rebuild-ng's transient unit: its last switch in this boot, the failed units
    last_switch: switch.LastSwitch = field(default_factory=switch.LastSwitch)
    # /run/systemd files, the serving process, systemd's environment (remedy.core.config.volatile)
    runtime: runtime.RuntimeState = field(default_factory=runtime.RuntimeState)
    # the host's local time when it was read (restart windows); None: not read
    clock: datetime | None = None
    # /etc/machine-id: which machine this is (the manual script checks it); None: unread
    machine_id: str | None = None
    # why Nix's version could not be read (what `nix --version` printed); None: it was
    # read, or Nix is not installed
    nix_unreadable: str | None = None
    # sysctls and the serving unit's properties, for the data settings
    readings: SettingReadings = field(default_factory=SettingReadings)
    # what says whether a reboot is needed: the booted and current systems' kernel, initrd
    # and parameters, the links' mtimes, the memory guard's lines (remedy.core.readings.reboot)
    reboot: reboot.RebootReadings = field(default_factory=reboot.RebootReadings)
    # the memory guard's last refusal (facts.memory.MemoryGuardRefusal; None: none kept,
    # or not read)
    guard_refusal: mem.GuardRefusal | None = None
    # the review before the switch (remedy.core.readings.review.Review): a second read,
    # only where a bump is planned or a built system waits (facts.review); None: none
    review: Any = None


def read_snapshot(parts: Parts) -> HostSnapshot:
    serving = read_unit(parts)
    memory = read_memory(parts)
    gens = read_generations(parts)
    try:
        lock, error = read_flake_input(parts), None
    except FactProcessError as exc:
        lock, error = None, str(exc)
    nix_unreadable = None
    try:  # an unknown Nix must not blind the whole snapshot: the fallback needs none
        nix_info = read_nix(parts)
    except FactProcessError as exc:
        nix_info, nix_unreadable = None, str(exc)
    return HostSnapshot(
        unit=serving,
        memory=memory,
        nix=nix_info,
        flake_input=lock,
        flake_error=error,
        checkout=read_checkout(parts),
        tools=read_tools(parts),
        generations=gens,
        probe=read_probe(parts),
        volatile=volatile_entries(serving, memory, gens),
        managed=read_managed(parts),
        journal=read_journal(parts),
        last_switch=read_last_switch(parts),
        runtime=read_runtime(parts),
        clock=read_clock(parts),
        machine_id=read_machine_id(parts),
        options_record=read_options_record(parts),
        nix_unreadable=nix_unreadable,
        readings=read_readings(parts),
        reboot=reboot.parse(parts),
        guard_refusal=read_guard_refusal(parts),
    )


def read_guard_refusal(parts: Parts) -> mem.GuardRefusal | None:
    """The memory guard's last refusal, as its record says it (None: none kept, or a
    recording made before the section)."""
    found = parts.get("memory.guard_refusal")
    return mem.parse_guard_refusal(found[0].lines) if found else None


def parse_sysctl_files(files) -> dict[str, str]:
    """What sysctl.d FILES (blocks of one section, in the order systemd-sysctl reads
    them) set: the last assignment of a key wins; ``-key`` (errors ignored) counts, a key
    with a glob does not (it names many)."""
    out: dict[str, str] = {}
    for f in sorted(files, key=lambda b: b.path.rsplit("/", 1)[-1]):
        for raw in f.text.splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")) or "=" not in line:
                continue
            key, _, value = line.partition("=")
            key = key.strip().lstrip("-").replace("/", ".")
            if key and not any(c in key for c in "*?["):
                out[key] = " ".join(value.split())
    return out


def _properties(view_files) -> dict[str, str]:
    """The [Service] properties VIEW_FILES set, the last assignment winning (an empty one
    resets to the default: left out); a list property (systemd.LIST_PROPERTIES)
    keeps each item in order, ITEMS_SEP between, an empty assignment emptying it."""
    from remedy.core.readings import systemd

    out: dict[str, str] = {}
    for unit in view_files:
        for key, value in unit.service_settings():
            if key in ("ExecStart", "Environment"):
                continue
            if key in systemd.LIST_PROPERTIES and value and out.get(key):
                out[key] += systemd.ITEMS_SEP + value
            else:
                out[key] = value
    return {k: v for k, v in out.items() if v != ""}


def read_readings(parts: Parts) -> SettingReadings:
    """The data settings' sections (none: not read, a recording made before them)."""
    if "settings.sysctl_now" not in parts:
        return SettingReadings()
    from remedy.core.readings import systemd

    files = [b for sec in parts.get("settings.sysctl_next", []) for b in sec.files]
    running = [b for sec in parts.get("settings.sysctl_running", []) for b in sec.files]
    now = {}
    for line in (ln for sec in parts["settings.sysctl_now"] for ln in sec.lines):
        word, _, rest = line.partition(" ")
        key, _, value = rest.partition(" ")
        if word == "sysctl" and key and value:
            now[key] = " ".join(value.split())
    shown = [ln for sec in parts.get("settings.properties", []) for ln in sec.lines]
    live = systemd.parse_show(shown, systemd.LIST_SHOWN, systemd.ITEMS_SEP)
    return SettingReadings(
        now,
        parse_sysctl_files(files),
        live,
        _properties(_next_boot_unit_files(parts)),
        tuple(b.path for b in files),
        parse_sysctl_files(running),
    )


@dataclass
class BuiltSystem(BuiltUnit):
    """A built toplevel's serving unit (``remedy.core.readings.serving.BuiltUnit``), with what its
    sysctl.d files set and its unit's [Service] properties (None: not read, a recording
    made before the section)."""

    sysctl: dict[str, str] | None = None
    properties: dict[str, str] | None = None
    # its unit's ExecCondition= lines, in systemd's order (the memory guard's; None: not read)
    conditions: tuple[str, ...] | None = None


def read_built_system(parts: Parts) -> BuiltSystem:
    from remedy.core.readings import systemd

    unit = read_built(parts)
    files = [
        systemd.UnitFile(b.path, b.realpath, b.text)
        for name in ("built.unit", "built.dropins")
        for sec in parts.get(name, [])[:1]
        for b in sec.files
    ]
    found = parts.get("built.sysctl")
    return BuiltSystem(
        **unit.__dict__,
        sysctl=parse_sysctl_files([b for sec in found for b in sec.files]) if found else None,
        properties=_properties(files[:1] + systemd.dropin_order(files[1:])) if found else None,
        conditions=(
            systemd.configure(files[0], files[1:]).exec_condition if found and files else None
        ),  # fmt: skip
    )


def _next_boot_unit_files(parts: Parts) -> list:
    """The serving unit's files as the next boot loads them, in order: the system
    profile's unit (else the loaded fragment), then the durable drop-ins
    (``remedy.core.readings.serving.next_boot_dropins``)."""
    from remedy.core.readings import serving, systemd

    def blocks(name: str) -> list:
        found = parts.get(name) or []
        return [systemd.UnitFile(b.path, b.realpath, b.text) for s in found[:1] for b in s.files]

    show = systemd.parse_show(sections.one(parts, "unit.show", "HostSnapshot").lines)
    loaded = blocks("unit.files")
    fragment = next((f for f in loaded if f.path == show.get("FragmentPath")), None)
    durable = [f for f in loaded if f is not fragment and f.origin != systemd.RUNTIME]
    nxt = blocks("unit.next")
    if nxt:
        durable = serving.next_boot_dropins(durable, blocks("unit.next_dropins"), show["Id"])
    first = nxt[0] if nxt else fragment
    return ([first] if first else []) + systemd.dropin_order(durable)


def read_options_record(parts: Parts) -> tuple[str, ...] | None:
    found = parts.get("nix.options_record")
    return tuple(found[0].lines) if found and found[0].lines else None


def read_clock(parts: Parts) -> datetime | None:
    found = parts.get("clock")
    text = found[0].lines[0].strip() if found and found[0].lines else ""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None


def read_machine_id(parts: Parts) -> str | None:
    found = parts.get("host.id")
    text = found[0].lines[0].strip() if found and found[0].lines else ""
    return text if text.isalnum() else None


def read_runtime(parts: Parts) -> runtime.RuntimeState:
    """Empty (``read`` False) when the sections are absent (recordings made before them)."""
    if "volatile.process" not in parts:
        return runtime.RuntimeState()
    lines = [ln for name in ("volatile.links", "volatile.process") for sec in parts.get(name, [])
             for ln in sec.lines]  # fmt: skip
    files = [b for sec in parts.get("volatile.files", []) for b in sec.files]
    scripts: dict = {}
    for sec in parts.get("unit.scripts", []):
        for b in sec.files:
            scripts.setdefault(b.path, b)
    return runtime.parse(lines, files, scripts)


def read_last_switch(parts: Parts) -> switch.LastSwitch:
    """Empty when the section is absent (recordings made before it existed)."""
    found = parts.get("nix.switch")
    return switch.parse_last_switch(found[0].lines) if found else switch.LastSwitch()


def read_journal(parts: Parts) -> RunJournal:
    """The run journal an earlier run left (an empty one when the section is absent:
    recordings made before the journal existed)."""
    found = parts.get("run.journal")
    return journal.parse(found[0].lines) if found else RunJournal()
