"""The status of one host, as a person on call reads it: now, after a reboot, and why.

Exit codes (``remedy status``): 0 healthy and durable; 3 healthy but volatile
or drifted; 4 unhealthy (the probe is not ``parsed``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from remedy.core.config import desired, guard, options, restarts, volatile
from remedy.core.config.host_data import HostData
from remedy.core.config.secrets import MASK, masked, masked_doc
from remedy.core.readings import memory as mem
from remedy.core.readings import reboot as reboot_reading
from remedy.core.readings.snapshot import HostSnapshot
from remedy.core.run.plan import NOOP, managed_conflict, plan_restore
from remedy.errors import (
    EXIT_BOOT_PENDING,
    EXIT_ERROR,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_VOLATILE,
)


@dataclass
class Row:
    label: str
    now: str
    after_reboot: str = ""
    bad: bool = False  # drawn red: volatile, drifted or unhealthy
    # Where the values come from, in full (paths), listed below the table: a table of
    # 80 columns would cut them.
    where: list[str] = field(default_factory=list)


@dataclass
class HostStatus:
    host: str
    exit_code: int
    verdict: str
    rows: list[Row] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    snapshot: HostSnapshot | None = None
    drifts: list = field(default_factory=list)  # desired.Drift per managed setting
    # what remedy's forced values win over in the host's configuration, and the like
    notes: list[str] = field(default_factory=list)
    # runtime state beyond the managed settings that a reboot reverts (remedy.core.config.volatile)
    unmanaged: list = field(default_factory=list)
    ignored: int = 0  # unmanaged entries host data ignore_volatile silences
    # the system profile holds every setting but is not running (a reboot or a restart
    # window activates it), and when each setting that waits takes effect
    boot_pending: str | None = None
    pending: dict[str, str] = field(default_factory=dict)
    # what takes full effect only after a reboot (the kernel parameters of the next boot)
    reboot_for: list[str] = field(default_factory=list)
    # all that is wrong is unmanaged volatile state (a converge has nothing to do)
    only_unmanaged: bool = False
    # whether a reboot is needed, and why (remedy.core.readings.reboot; issue 46 item 2)
    reboot: reboot_reading.RebootNeed | None = None
    # the memory guard: durable, volatile or missing, and its last refusal (issue 46)
    guard: dict | None = None

    @property
    def review(self) -> list[str]:
        """The review before the switch (remedy.core.readings.review), masked."""
        found = self.snapshot.review if self.snapshot else None
        return [masked(x) for x in found.lines()] if found else []

    @property
    def unmanaged_lines(self) -> list[str]:
        return [e.text() for e in self.unmanaged]

    def to_json(self) -> dict:
        """The status as a document, every secret masked (remedy.core.config.secrets)."""
        snapshot = dataclasses.asdict(self.snapshot) if self.snapshot else None
        runtime = (snapshot or {}).get("runtime") or {}
        process = runtime.get("process") or {}
        if process.get("environ"):  # the server's environment may hold secrets: names only
            process["environ"] = sorted(process["environ"])
        if runtime.get("manager_env"):
            # where `systemctl set-environment` puts credentials for any service, under any
            # name: the names, and the values only of what systemd sets itself (PATH, the
            # locale); what of it the server runs with is judged in unmanaged_volatile
            runtime["manager_env"] = {
                k: v if volatile.systemd_own(k) else MASK for k, v in runtime["manager_env"].items()
            }
        return masked_doc(
            {
                "host": self.host,
                "exit_code": self.exit_code,
                "verdict": self.verdict,
                "problems": self.problems,
                "notes": self.notes,
                "rows": [dataclasses.asdict(r) for r in self.rows],
                "settings": [dataclasses.asdict(d) for d in self.drifts],
                "unmanaged_volatile": [e.to_json() for e in self.unmanaged],
                "ignored_volatile": self.ignored,
                "boot_pending": self.boot_pending,
                "pending": self.pending,
                "reboot_for": self.reboot_for,
                "reboot_needed": self.reboot.to_json() if self.reboot else None,
                "memory_guard": self.guard,
                "review": self.snapshot.review.to_json()
                if self.snapshot and self.snapshot.review
                else None,
                "snapshot": snapshot,
            }
        )


def _short(path: str | None) -> str:
    """/nix/store/<32-char hash>-name → /nix/store/<8 chars>…-name, for tables."""
    if not path:
        return "-"
    return re.sub(r"/nix/store/([0-9a-z]{8})[0-9a-z]{24}-", r"/nix/store/\1…-", path)


def _where(when: str, setting) -> str | None:
    if not setting.source:
        return None
    via = f"\nvia {setting.via}" if setting.via and setting.via != setting.source else ""
    return f"{when}:\n{setting.source}{via}"


def _generation(path: str | None) -> str:
    """A system's short name for a table: its store hash's first 8 characters."""
    m = re.match(r"/nix/store/([0-9a-z]{8})", path or "")
    return m.group(1) if m else (path or "-")


def host_status(host: str, settings: HostData, snap: HostSnapshot) -> HostStatus:
    """One host's status: a row per managed setting, then the unit, memory and Nix
    sections, the problems each finds, and the verdict with its exit code."""
    problems: list[str] = []
    if not snap.unit.found:
        problems.append(f"{settings.unit}: LoadState={snap.unit.load_state or 'unknown'}")
    elif stopped := _not_running(snap):
        problems.append(
            f"{settings.unit} is {stopped}: the server does not run (`systemctl status "
            f"{settings.unit}` says why); the values under 'now' are what it would start with"
        )
    drift_list = desired.drifts(snap, settings)
    plan = plan_restore(snap, settings, desired.ALL)
    pending, boot = _pending(snap, settings, plan)
    rows = _setting_rows(snap, settings, drift_list, problems)
    if boot:  # what the pending generation brings at the reboot is wanted, not a problem
        labels = tuple(f"drifted: {desired.BY_KEY[k].label} is " for k in pending)
        problems[:] = [p for p in problems if not p.startswith(labels)]
    rows += _unit_rows(snap, settings)
    rows += _memory_rows(snap, settings, problems)
    guarded = guard_status(snap, settings, drift_list)
    if guarded is not None:
        rows.append(_guard_row(guarded, settings))
    rows += _nix_rows(snap, settings)
    at_boot, conflict = _beyond_the_settings(snap, settings, boot, problems)
    notes = _definition_notes(snap, settings, problems) + at_boot
    kept, ignored = volatile.split_ignored(
        volatile.unmanaged(snap, settings), settings.ignore_volatile
    )
    proc = snap.runtime.process
    if proc is not None and proc.environ is None:
        notes.append(
            f"the server's environment (/proc/{proc.pid}/environ) is not readable by this "
            "user: its variables are not compared with the next boot's (connect as root)"
        )
    if settings.build_host != "serving" and settings.builder_unsigned_copy:
        notes.append(
            f"risk: builder_unsigned_copy is true: the copy from the builder "
            f"{settings.build_host} takes its closure without signatures (nix copy "
            "--no-check-sigs), so whoever controls the builder's user can hand root a "
            "system that remedy activates; sign on the builder (secret-key-files), trust "
            "its key here (trusted-public-keys) and drop the key"
        )
    if ignored:
        notes.append(
            f"{len(ignored)} unmanaged volatile {'entry' if len(ignored) == 1 else 'entries'} "
            "ignored (host data ignore_volatile)"
        )
    code, verdict = _verdict(snap, settings, drift_list, rows, conflict)
    only_unmanaged = bool(kept) and code == EXIT_OK
    if kept and code == EXIT_OK:
        code, verdict = EXIT_VOLATILE, "healthy now, but volatile: a reboot changes it"
    if boot and code == EXIT_VOLATILE:
        code, verdict = (
            EXIT_BOOT_PENDING,
            (
                "boot pending: durable at next boot; running the old generation "
                + restarts.old_generation_until(settings.restart_window)
            ),
        )
    notes += _pending_notes(pending, boot)
    if plan.path != NOOP:  # the durable path is wanted: say what stands in its way
        problems += [f"durable path not possible: {b}" for b in plan.durable_blockers]
    # a switch that changed the kernel parameters takes full effect at the next boot
    reboot_for = [e.subject for e in kept if e.kind == volatile.KERNEL_PARAM]
    if reboot_for:
        notes.append(
            "reboot pending: the next boot's kernel parameters differ from the running "
            f"kernel's ({', '.join(reboot_for)})"
        )
    return HostStatus(
        host, code, masked(verdict), _masked_rows(rows), [masked(p) for p in problems], snap,
        drift_list, [masked(n) for n in notes], _masked_entries(kept), len(ignored), boot,
        pending, reboot_for, only_unmanaged, reboot_need(snap, settings), guarded,
    )  # fmt: skip


def reboot_need(snap: HostSnapshot, settings: HostData) -> reboot_reading.RebootNeed:
    """Whether a reboot is needed, and why, from the snapshot's reboot sections."""
    g = snap.generations
    return reboot_reading.need(snap.reboot, g.profile if g else None,
                               g.current_system if g else None, snap.clock,
                               settings.unit)  # fmt: skip


REBOOT_LABELS = {
    "boot_pending": "boot pending",
    "kernel": "kernel",
    "initrd": "initrd",
    "kernel_params": "kernel parameters",
    "memory_headroom": "memory headroom",
}


def age_text(seconds: int) -> str:
    """A wait in the largest units that say it: 40 s, 12 min, 3 h 05 min, 2 d 4 h."""
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def reboot_lines(need: reboot_reading.RebootNeed) -> tuple[str, list[str]]:
    """The title (whether a reboot is needed, and for which reasons) and one line per
    reason, then the memory headroom, known or not."""
    needed = need.needed
    if need.unread:
        return "reboot needed: unknown", [need.unread]
    title = "reboot needed: " + (
        "yes (" + ", ".join(REBOOT_LABELS[r] for r in needed) + ")" if needed else "no"
    )
    lines = []
    for r in needed:
        why = need.why.get(r, "")
        if r == "boot_pending" and need.pending_age_s is not None:
            since = need.pending_since.strftime("%Y-%m-%d %H:%M %z")
            why = f"for at least {age_text(need.pending_age_s)} (since {since}): {why}"
        if r != "memory_headroom":
            lines.append(f"{REBOOT_LABELS[r]}: {why}")
    lines.append(f"memory headroom: {reboot_reading.headroom_text(need.headroom)}")
    return title, [masked(line) for line in lines]  # they quote the host's kernel-params


def guard_status(snap, settings, drift_list) -> dict | None:
    """The memory guard: its state (durable, volatile, missing) and its last refusal
    (None: the guard is not among the settings judged)."""
    d = next((x for x in drift_list if x.key == "memory_guard"), None)
    if d is None:
        return None
    m = desired.BY_KEY["memory_guard"]
    live_ok = m.holds(desired.live(snap, settings), settings)
    next_ok = m.holds(desired.next_boot(snap, settings), settings)
    r = snap.guard_refusal
    refusal = None
    if r is not None:
        refusal = {
            "at": datetime.fromtimestamp(r.at, UTC).isoformat(timespec="seconds"),
            "at_epoch": r.at,
            "mem_available_kb": r.mem_available_kb,
            "threshold_kb": r.threshold_kb,
        }
    return {"state": guard.word(live_ok, next_ok), "last_refusal": refusal}


def _guard_row(g: dict, settings) -> Row:
    """The guard and its last refusal, for people (whole at 80 columns)."""
    r = g["last_refusal"]
    if r is None:
        last = "no refusal kept"
    else:
        # cut to one decimal as the guard's line says it (memory_floor.sh kb_gb): a
        # figure below the floor never reads as the floor
        gb, floor = (r[k] * 1024 // 100_000_000 / 10 for k in ("mem_available_kb", "threshold_kb"))
        when = r["at"].replace("T", " ").removesuffix("+00:00")
        last = f"last refused {when} UTC at {gb:.1f} GB (< {floor:.1f})"
    return Row("memory guard", g["state"], last, g["state"] != "durable")


def _masked_rows(rows: list[Row]) -> list[Row]:
    """ROWS as a person reads them: a value like a secret masked (a proxy URL with its
    password, in a data setting's live value)."""
    return [
        dataclasses.replace(r, now=masked(r.now), after_reboot=masked(r.after_reboot),
                            where=[masked(w) for w in r.where])
        for r in rows
    ]  # fmt: skip


def _masked_entries(entries: list) -> list:
    """The unmanaged volatile ENTRIES with every secret masked (they say the host's
    values: a drop-in's text, the server's variables and flags)."""
    return [
        dataclasses.replace(e, now=masked(e.now), after_reboot=masked(e.after_reboot),
                            details=tuple(masked(d) for d in e.details))
        for e in entries
    ]  # fmt: skip


def _beyond_the_settings(snap, settings, boot, problems: list[str]):
    """What the host shows beyond the managed settings (appended to PROBLEMS): volatile
    state (at the next boot, when a pending generation brings it), a switch that left
    failed units, the checkout's value that the next rebuild takes, an untrusted run
    journal, what cannot be shown. (the notes on what the next boot brings, the conflict)"""
    at_boot: list[str] = []
    for v in snap.volatile:
        if v.kind == "setting":
            continue  # said above, per managed setting
        if boot:
            at_boot.append(f"at the next boot: {v.subject}: now {v.now}; then {v.after_reboot}")
        else:
            problems.append(f"volatile: {v.subject}: now {v.now}; after reboot {v.after_reboot}")
    if failed := snap.last_switch.units_failed:
        problems.append(
            f"the last switch-to-configuration exited 4: {', '.join(failed)} failed (systemctl "
            "status names why); the rest of the system was activated"
        )
    conflict = managed_conflict(snap, settings)
    if conflict:
        problems.append(f"the next rebuild takes the checkout's value: {conflict}")
    if snap.journal.problem:
        problems.append(snap.journal.problem)
    problems += volatile.unshowable(snap, settings)
    return at_boot, conflict


def _pending_notes(pending: dict[str, str], boot) -> list[str]:
    notes = []
    for key, when in pending.items():
        if key == "runtime_override":
            # wanted only where the next boot holds every setting: elsewhere the override
            # is what holds live right, and a reboot reverting it is the problem itself
            if boot:
                notes.append(f"pending: the /run override goes {when}; the next boot holds "
                             "every setting without it")  # fmt: skip
            continue
        notes.append(f"pending: {desired.BY_KEY[key].label} takes effect {when}")
    return notes


def _pending(snap, settings, p) -> tuple[dict[str, str], str | None]:
    """({setting: when it takes effect} for the drifted settings the restart policy makes
    wait (P: the plan for every setting), the pending generation when the profile that
    boots holds every setting)."""
    g = snap.generations
    boot = None
    if g.profile and g.current_system and g.profile != g.current_system:
        nxt = desired.next_boot(snap, settings)
        if not desired.missing(nxt, settings, desired.ALL):
            boot = g.profile
    waiting = p.restart.pending if p.restart and not p.restart.allowed else []
    # pending only where the next boot already holds it: a setting that the next boot
    # lacks too is drifted or volatile, not waiting for anything
    out = {
        sp.drift.key: sp.takes_effect
        for sp in p.settings
        if sp.drift.key in waiting and sp.takes_effect and sp.drift.next_boot == sp.drift.desired
    }
    if boot:  # a setting no restart brings (the memory guard): the boot that holds it does
        out.update({
            sp.drift.key: "at next boot" for sp in p.settings
            if not desired.BY_KEY[sp.drift.key].serving and sp.drift.key not in out
            and sp.drift.state == desired.DRIFTED and sp.drift.next_boot == sp.drift.desired
        })  # fmt: skip
    return out, boot


def _definition_notes(snap, settings, problems: list[str]) -> list[str]:
    """What remedy's managed file forces over the host's own configuration (notes), and
    the managed options the configuration does not declare (problems)."""
    defs = snap.definitions
    if defs is None:
        return []
    if defs.error:
        return [f"what remedy's file overrides: {defs.error}"]
    for path in options.missing_options(defs, settings, desired.ALL):
        problems.append(
            f"the configuration declares no option {path}: remedy's file cannot set it; "
            "fix host data managed_options"
        )
    written = snap.managed.content is not None
    lines = options.overrides(defs, settings, desired.ALL, written)
    notes = [f"overrides: {line}" for line in lines]
    return notes + [n for n in [options.source_note(defs)] if n]  # from remedy's record


def _setting_rows(snap, settings, drift_list, problems: list[str]) -> list[Row]:
    """A row per managed setting, live and at next boot, with where each value comes from."""
    unit, rows = snap.unit, []
    now_p, after_p = unit.now.parser, unit.after_reboot.parser
    for d in drift_list:
        where: list[str] = []
        if d.key == "tool_call_parser":
            where = [w for w in (_where("now", now_p), _where("after a reboot", after_p)) if w]
        elif d.key == "runtime_override" and (paths := desired.live(snap, settings).overrides):
            where = ["now:\n" + "\n".join(paths)]
        elif d.key in unit.now.environment or d.key in unit.after_reboot.environment:
            now_e, after_e = (
                unit.now.environment.get(d.key),
                unit.after_reboot.environment.get(d.key),
            )
            now_w = _where("now", now_e) if now_e else None
            proc = snap.runtime.process
            if now_e and proc is not None and proc.environ is not None:
                if proc.environ.get(d.key) != now_e.value:  # the unit changed since the start
                    now_w = f"now:\nthe process; a restart gives {now_e.value or 'unset'}"
            where = [
                w for w in (now_w, _where("after a reboot", after_e) if after_e else None) if w
            ]
        elif (gives := _restart_gives(snap, d.key)) is not None:  # a limit, changed since
            where = [f"now:\nthe process; a restart gives {gives}"]
        rows.append(Row(d.label, d.live, d.next_boot, not d.in_sync, where))
        if d.state == desired.VOLATILE and d.key != "runtime_override":
            problems.append(f"after a reboot the {d.label} is {d.next_boot}, not {d.desired}")
        elif d.state == desired.DRIFTED:
            problems.append(
                f"drifted: {d.label} is {d.live} (next boot {d.next_boot}), want {d.desired} "
                f"({d.issue})"
            )
    return rows


def _restart_gives(snap, key: str) -> str | None:
    """The value of the property setting KEY that the unit's loaded config gives at the
    next start, when the process has another (a resource limit: desired.live_properties);
    else None."""
    m = desired.BY_KEY.get(key)
    d = m.source if m is not None else None
    if d is None or d.kind != desired.data.PROPERTY:
        return None
    shown, live = snap.readings.properties_now or {}, desired.live_properties(snap) or {}
    if d.name in shown and live.get(d.name) != shown[d.name]:
        return shown[d.name]
    return None


def _unit_rows(snap, settings) -> list[Row]:
    """The unit's drop-ins by origin, and its state."""
    unit = snap.unit

    def dropins(origins) -> str:
        counts = [
            f"{sum(1 for d in unit.dropins if d.origin == o)} {o}"
            for o in ("runtime", "admin", "vendor")
            if o in origins and any(d.origin == o for d in unit.dropins)
        ]
        return ", ".join(counts) or "none"

    return [
        Row(
            "drop-ins",
            dropins({"runtime", "admin", "vendor"}),
            dropins({"admin", "vendor"}),
            # a /run override is the managed setting's; any other runtime drop-in is
            # unmanaged volatile state, said (or ignored, by host data) there
            bool(desired.override_dropins(snap, settings)),
            [
                "\n".join([f"now, {o}:", *(d.path for d in unit.dropins if d.origin == o)])
                for o in ("runtime", "admin", "vendor")
                if any(d.origin == o for d in unit.dropins)
            ],  # fmt: skip
        ),
        Row(
            "unit",
            f"{unit.active_state}/{unit.sub_state} pid {unit.main_pid or '-'} "
            f"restarts {unit.n_restarts if unit.n_restarts is not None else '-'}",
            "",
            unit.active_state != "active",
        ),
    ]


def _memory_rows(snap, settings, problems: list[str]) -> list[Row]:
    """MemAvailable against the gate's threshold, and each hugepage pool."""
    memory = snap.memory
    gb = memory.mem_available_kb * 1024 / 1e9
    low = gb < settings.min_mem_available_gb
    rows = [
        Row(
            "MemAvailable",
            f"{gb:.1f} GB of {memory.mem_total_kb * 1024 / 1e9:.1f} GB "
            f"(threshold {settings.min_mem_available_gb:g} GB)",
            "",
            low,
        )
    ]
    if low:
        problems.append(
            f"MemAvailable {gb:.1f} GB is below {settings.min_mem_available_gb:g} GB: "
            f"a vLLM (re)start could freeze the host; {mem.LEAK_ADVICE}"
        )
    booted, nxt = memory.booted_pools(), memory.next_boot_pools() or {}
    for size in sorted(set(memory.pools) | set(booted) | set(nxt)):
        pool = memory.pools.get(size)
        live = f"{pool.total} (free {pool.free})" if pool else "-"
        rows.append(
            Row(
                f"hugepages {mem.size_label(size)}",
                f"live {live}, booted {booted.get(size, 0)}",
                f"next boot {nxt.get(size, 0)}"
                if memory.next_boot_params is not None
                else "unknown",
                any(v.subject == f"{mem.size_label(size)} pages" for v in snap.volatile),
            )
        )
    return rows


def _nix_rows(snap, settings) -> list[Row]:
    """The locked input, the running and the booting system, the probe."""
    rows = []
    lock = snap.flake_input
    if lock:
        when = (
            datetime.fromtimestamp(lock.last_modified, UTC).strftime("%Y-%m-%d")
            if lock.last_modified
            else "?"
        )
        rows.append(Row(f"{settings.flake_input} locked", f"{(lock.rev or '?')[:12]} ({when})"))
    else:
        rows.append(Row(f"{settings.flake_input} locked", snap.flake_error or "unknown", "", True))
    g = snap.generations
    rows.append(
        Row(
            "system",
            _generation(g.current_system),
            _generation(g.profile),
            g.current_system != g.profile,
            [f"now:\n{g.current_system or '-'}", f"boots:\n{g.profile or '-'}"],
        )
    )
    rows.append(
        Row("probe", f"{snap.probe.outcome}: {snap.probe.reason}", "", not snap.probe.parsed)
    )
    return rows


def _not_running(snap) -> str | None:
    """The unit's state when its server does not run (None: it runs or starts)."""
    unit = snap.unit
    if unit.active_state in ("active", "activating", "reloading", "deactivating"):
        return None
    return "/".join(s for s in (unit.active_state or "unknown", unit.sub_state) if s)


def _verdict(snap, settings, drift_list, rows, conflict) -> tuple[int, str]:
    want = settings.tool_call_parser
    configured = snap.unit.now.parser.value == want
    if snap.probe.inconclusive and configured:
        # Prose says nothing about the parser: not healthy-and-durable, not broken either.
        return (
            EXIT_VOLATILE,
            f"unverified: the model answered in prose; the effective parser is {want}",
        )
    if not snap.probe.parsed and snap.unit.found and (stopped := _not_running(snap)):
        return EXIT_UNHEALTHY, f"unhealthy: {settings.unit} is {stopped}"
    if not snap.probe.parsed:
        return EXIT_UNHEALTHY, f"unhealthy: tool calls {snap.probe.outcome}"
    if snap.volatile or any(d.state == desired.VOLATILE for d in drift_list):
        return EXIT_VOLATILE, "healthy now, but volatile: a reboot changes it"
    if conflict:
        return (
            EXIT_VOLATILE,
            f"healthy now, but the checkout's {settings.managed_file.rsplit('/', 1)[-1]} "
            "differs from host data: the next rebuild changes it",
        )
    if any(not d.in_sync for d in drift_list) or any(
        r.bad for r in rows if r.label != "MemAvailable"
    ):
        return EXIT_VOLATILE, "healthy now, but drifted from the wanted configuration"
    return EXIT_OK, "healthy and durable"


def ssh_command(host: str, data: dict) -> str:
    """A pasteable ``ssh`` that reaches HOST as the inventory reaches it (its hostname,
    user, port, key and known_hosts file: pyinfra's ssh_* data)."""
    import shlex

    argv = ["ssh"]
    if port := data.get("ssh_port"):
        argv += ["-p", str(port)]
    if key := data.get("ssh_key"):
        argv += ["-i", str(key)]
    if known := data.get("ssh_known_hosts_file"):
        argv += ["-o", f"UserKnownHostsFile={known}"]
    where = data.get("ssh_hostname") or host
    argv.append(f"{data.get('ssh_user') or 'root'}@{where}")
    return shlex.join(argv)


def next_of(
    r: HostStatus,
    inventory: str,
    ssh: str,
    unit: str,
    *,
    code: int | None = None,
    blocked: bool = False,
) -> str:
    """next_step for a host's status R (CODE: the run's, when it differs)."""
    snap = r.snapshot
    subjects = tuple(e.subject for e in r.unmanaged if e.kind != volatile.KERNEL_PARAM)
    return next_step(
        r.exit_code if code is None else code,
        r.host,
        inventory,
        boot_pending=r.boot_pending is not None,
        blocked=blocked,
        unit_active=snap is None or snap.unit.active_state == "active",
        unit=unit,
        ssh=ssh,
        unmanaged=subjects if r.only_unmanaged else (),
        managed_drift=not r.only_unmanaged,
        reboot_for=tuple(r.reboot_for),
    )


def next_step(
    code: int,
    host: str,
    inventory: str,
    *,
    boot_pending: bool = False,
    blocked: bool = False,
    unit_active: bool = True,
    unit: str = "tenstorrent-serving.service",
    ssh: str = "",
    unmanaged: tuple[str, ...] = (),
    managed_drift: bool = True,
    reboot_for: tuple[str, ...] = (),
    error: str = "",
) -> str:
    """What a person on call does next for a verdict (CODE, the exit code), every
    command pasteable as printed. SSH: the host's ``ssh`` as the inventory reaches it
    (``ssh_command``). UNMANAGED: the unmanaged volatile entries' subjects; with no
    MANAGED_DRIFT they are all that is wrong, and a converge would say there is nothing
    to do, so the step is ``remedy adopt`` (or removing the entry). BLOCKED: the durable
    path is wanted and something stands in its way (the problems name it). REBOOT_FOR:
    what takes effect only after a reboot. ERROR: why the host could not be read."""
    import shlex

    ssh = ssh or f"ssh root@{shlex.quote(host)}"
    inv = shlex.quote(inventory)
    converge = f"remedy converge {inv} --limit {shlex.quote(host)}"
    if code == EXIT_OK:
        if reboot_for:
            return f"nothing to do now; a reboot applies {', '.join(reboot_for)}"
        return "nothing to do: healthy and durable; a reboot changes nothing"
    if code == EXIT_ERROR and error:
        return (
            f"check first that the host answers: `{ssh} true`; then read it again: "
            f"`remedy status {inv} --limit {shlex.quote(host)}`"
        )
    if code == EXIT_LOCKED:
        return f"another run holds the host: wait for it, or run `{converge} --wait 600`"
    if code == EXIT_UNHEALTHY and not unit_active:
        return (
            f"{unit} is not active: read why with `{ssh} systemctl status "
            f"{shlex.quote(unit)}`, then run `{converge} --restart now`"
        )
    if code == EXIT_UNHEALTHY:
        return f"restore tool calling now (one restart, memory-gated): `{converge} --restart now`"
    if boot_pending or code == EXIT_BOOT_PENDING:
        return (
            f"reboot {host} when convenient, drained and verified: `remedy reboot {inv} "
            f"--limit {shlex.quote(host)} --now`; or activate the pending generation now "
            f"with one restart: `{converge} --restart now`"
        )
    if blocked:
        return f"fix what blocks the durable path (above), then run `{converge}`"
    if code == EXIT_VOLATILE and not managed_drift and not unmanaged and reboot_for:
        return f"reboot {host} when convenient: the next boot applies {', '.join(reboot_for)}"
    if code == EXIT_VOLATILE and unmanaged and not managed_drift:
        subject = unmanaged[0]
        more = f" (and {len(unmanaged) - 1} more, each alike)" if len(unmanaged) > 1 else ""
        # each word of the host's command quoted for the host's shell, then for this
        # one: short words a long command can be folded between
        remote = " ".join(shlex.quote(shlex.quote(w)) for w in ["rm", "--", subject])
        removal = (
            f"remove it: `{ssh} {remote} '&&' systemctl daemon-reload`"
            if subject.startswith("/")
            else "silence it with host data ignore_volatile"
        )
        return (
            f"make {subject} a managed setting: `remedy adopt {inv} "
            f"{shlex.quote(subject)} --host {shlex.quote(host)} --issue REPO#N`{more}, "
            f"or, if it is not wanted, {removal}"
        )
    if code == EXIT_VOLATILE:
        return f"make it durable: `{converge}` (add --restart now to apply at once)"
    if code == EXIT_ERROR:
        return (
            f"read what failed in the run's output above and `remedy audit --host "
            f"{shlex.quote(host)} --last`; then read the host: `remedy status {inv} "
            f"--limit {shlex.quote(host)}`"
        )
    return f"read the host again: `remedy status {inv} --limit {shlex.quote(host)}`"
