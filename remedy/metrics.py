"""node_exporter textfile metrics of a converge run, written with prometheus-client.

    remedy converge inventory/production.py --check --textfile \
        /var/lib/node_exporter/textfile/remedy.prom

One file per inventory (node_exporter's convention: one file per producer), merged
by host: a run over some hosts (``--limit``) rewrites the series of those hosts only
and keeps every other host's lines byte for byte; a host that is no longer in the
inventory loses its series, and only then. The file is written under a temporary
name in its directory, with mode 0644, and renamed over PATH, so the collector never
reads half a file, and a run that cannot write (the directory gone, the disk full)
leaves the last good file as it was. Runs that write the same file take turns (a
lock on its directory).

A host that could not be read gets ``remedy_host_up{host} 0`` with its state, its
run's success and time, never stale values of what it was. A host that a run never
read because another converge held the fleet lock (exit 5) gets only the run's series
(RUN_SERIES: its state locked, exit code 5, last run failed, and when); every other
series of it is kept byte for byte from the last file, as the last read found it: the
refused run knows nothing new of the host, so it neither resolves an alert on it nor
fires one. Every metric's HELP says
what an alert on it means; monitoring/remedy.rules.yml holds the alerts.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from remedy.errors import (
    EXIT_BOOT_PENDING,
    EXIT_ERROR,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_VOLATILE,
    ConfigError,
    RemedyError,
)

# remedy_host_state{state}: one per exit-code class of a host; exit 1 is "unreadable"
# when the host could not be read, "failed" when it was read and its run failed.
STATES = {
    "healthy": EXIT_OK,
    "boot_pending": EXIT_BOOT_PENDING,
    "volatile": EXIT_VOLATILE,
    "broken": EXIT_UNHEALTHY,
    "locked": EXIT_LOCKED,
    "unreadable": EXIT_ERROR,
    "failed": EXIT_ERROR,
}


# What a run says of a host whatever it read: the rest is what a read of the host found
RUN_SERIES = frozenset({
    "remedy_host_state",
    "remedy_host_exit_code",
    "remedy_last_run_success",
    "remedy_last_run_timestamp_seconds",
    "remedy_run_interval_seconds",
})  # fmt: skip


class TextfileError(RemedyError):
    """The metrics could not be written; the last good file is left in place."""


@dataclass
class RebootMetrics:
    """Whether a reboot is needed (reason -> 0/1), how long the next boot has been
    pending, and the memory headroom from the guard's lines at each start since boot."""

    needed: dict[str, bool] = field(default_factory=dict)
    boot_pending_age_s: int | None = None
    guard_starts: int = 0  # starts since boot with a guard line (0: headroom unknown)
    first_start_bytes: int | None = None
    last_start_bytes: int | None = None
    leak_since_boot_bytes: int | None = None
    starts_left: int | None = None  # None: no leak rate seen

    @classmethod
    def of(cls, need) -> RebootMetrics:
        """From a remedy.core.readings.reboot.RebootNeed."""
        h = need.headroom

        def b(kb):
            return None if kb is None else kb * 1024

        return cls(
            needed=dict(need.reasons),
            boot_pending_age_s=need.pending_age_s,
            guard_starts=len(h.starts),
            first_start_bytes=b(h.first_kb),
            last_start_bytes=b(h.last_kb),
            leak_since_boot_bytes=b(h.leak_kb),
            starts_left=h.starts_left,
        )


@dataclass
class HostMetrics:
    host: str
    up: bool
    drift: dict[str, bool] = field(default_factory=dict)  # setting -> live is wrong
    volatile: dict[str, bool] = field(default_factory=dict)  # setting -> a reboot reverts it
    probe_ok: bool = False
    mem_available_bytes: int | None = None
    mem_threshold_bytes: int | None = None  # the memory gate's min_mem_available_gb
    bump_blocked: str | None = None  # the reason a bump may not run, if one is needed
    switch_failed_units: int = 0  # units still failed after a switch that exited 4
    # runtime state beyond the managed settings a reboot reverts, per kind (not ignored)
    unmanaged_volatile: dict[str, int] = field(default_factory=dict)
    boot_pending: bool = False  # the boot default holds every setting but is not running
    restart_pending: dict[str, bool] = field(default_factory=dict)  # setting -> it waits
    last_run_restarts: int | None = None  # of the run this converge applied (None: none)
    last_run_requests_cut: int | None = None
    exit_code: int | None = None  # the host's exit code in this run's report
    run_ok: bool | None = None  # the run read the host and, if it applied, did not fail
    # whether a reboot is needed, and why (remedy.core.readings.reboot; issue 46 item 2)
    reboot: RebootMetrics | None = None
    # the memory guard (issue 46): durable, volatile or missing (None: not judged), and
    # when it last refused a start (epoch seconds; None: none kept)
    guard_state: str | None = None
    guard_last_refusal_s: int | None = None
    # False: this run did not read the host (another converge held the fleet lock): it
    # writes only RUN_SERIES, and the host's other series stay as the last file had them
    read: bool = True

    @property
    def state(self) -> str | None:
        """The exit-code class of the host (STATES), None if the report gave no code."""
        if self.exit_code is None:
            return None
        if self.exit_code == EXIT_ERROR:
            return "failed" if self.up else "unreadable"
        return next((s for s, c in STATES.items() if c == self.exit_code), None)


def check_writable(path: str) -> Path:
    """Fail before any work if PATH cannot be written atomically: its directory must
    exist and take a new file (the temporary file goes there, then is renamed over
    PATH), and PATH, if it exists, must be a regular file. Asking the directory is not
    enough: root may write anywhere by its mode, yet /proc or a read-only mount refuses
    the file, so one is made there and removed."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    todo = "name a file in a directory this user can write, like /var/lib/node_exporter/remedy.prom"
    if target.is_dir():
        raise ConfigError(f"--textfile {path}: is a directory; name a file like remedy.prom")
    if not directory.is_dir():
        raise ConfigError(
            f"--textfile {path}: directory {directory} does not exist; create it, or {todo}"
        )
    if target.exists() and not target.is_file():
        raise ConfigError(
            f"--textfile {path}: is not a regular file (the metrics replace it by a rename); {todo}"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    except OSError as exc:
        raise ConfigError(
            f"--textfile {path}: directory {directory} does not take a new file "
            f"({exc.strerror or exc}; the metrics are written to a temporary name there, then "
            f"renamed); {todo}"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return target


def write(
    path: str,
    hosts: list[HostMetrics],
    finished_at: float,
    duration_s: float,
    rollout: dict[str, int] | None = None,
    *,
    inventory: list[str] | None = None,
    interval_s: float | None = None,
) -> None:
    """This run's metrics of HOSTS merged into PATH: the lines of the hosts of INVENTORY
    (every host it names; None: keep every host) that this run did not cover are kept
    as they were. ROLLOUT: how many hosts of an applied run ended in each state
    (``remedy.core.run.rollout``). INTERVAL_S: the schedule's interval, for the alert on
    a run that is late. TextfileError if it cannot be written (the old file stays)."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    from remedy.core.config.secrets import masked

    registry = CollectorRegistry()

    class MaskedGauge(Gauge):
        """A gauge whose label values are masked as every output of remedy is (a reason
        may quote what the host said)."""

        def labels(self, *values, **named):
            values = tuple(masked(str(v)) for v in values)
            return super().labels(*values, **{k: masked(str(v)) for k, v in named.items()})

    def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return MaskedGauge(name, doc, labels, registry=registry)

    _per_host(gauge, hosts, finished_at, interval_s)
    _reboot_gauges(gauge, hosts)
    gauge(
        "remedy_run_duration_seconds",
        "Wall time of the last run that wrote this file, whichever hosts it covered "
        "(no alert: a slow run shows in remedy_last_run_timestamp_seconds)",
    ).set(duration_s)
    if rollout is not None:
        hosts_by_state = gauge(
            "remedy_rollout_hosts",
            "Hosts of the last applied run, by how they ended (no alert: the per-host "
            "alerts say which host needs what)",
            ("state",),
        )
        for state, count in rollout.items():
            hosts_by_state.labels(state).set(count)
        gauge(
            "remedy_rollout_duration_seconds",
            "Wall time of the last applied run's rollout (no alert of its own)",
        ).set(duration_s)
    new = generate_latest(registry).decode()
    _replace(
        path,
        new,
        {h.host for h in hosts if h.read},
        None if inventory is None else set(inventory),
        {h.host for h in hosts if not h.read},
    )


def _replace(path: str, new: str, covered: set[str], inventory: set[str] | None,
             unread: set[str] = frozenset()) -> None:  # fmt: skip
    """NEW (this run's text) merged with PATH's lines of the hosts it keeps, written
    atomically; runs that write into the same directory take turns. UNREAD: hosts of
    the run it did not read, whose series but RUN_SERIES are kept."""
    target = Path(path)
    try:
        dirfd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise TextfileError(_cannot(path, exc, "its directory is gone")) from None
    try:
        fcntl.flock(dirfd, fcntl.LOCK_EX)
        try:
            old = target.read_text()
        except FileNotFoundError:
            old = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise TextfileError(_cannot(path, exc, "cannot read the last file")) from None

        def kept(host: str | None, name: str) -> bool:
            if host is None or host in covered or (inventory is not None and host not in inventory):
                return False
            return host not in unread or name not in RUN_SERIES

        text = merged(new, old, kept)
        _atomic(target, text, dirfd)
    finally:
        # unlocked now: under gevent (pyinfra patches os) the close of a directory's fd
        # waits for its loop, and the lock would outlive this write
        fcntl.flock(dirfd, fcntl.LOCK_UN)
        os.close(dirfd)


def _cannot(path: str, exc: OSError | UnicodeDecodeError, what: str) -> str:
    why = getattr(exc, "strerror", None) or str(exc)
    return (
        f"--textfile {path}: cannot write this run's metrics ({what}: {why}); the last "
        "good file, if any, is left as it was, and the alerts on its age fire if this "
        "goes on; free the disk or recreate the directory"
    )


def _atomic(target: Path, text: str, dirfd: int) -> None:
    """TEXT at TARGET, mode 0644 (node_exporter reads it as another user): a temporary
    file in the same directory (not named *.prom: the collector skips it), synced,
    renamed over TARGET; on any failure the temporary file is removed and TARGET is as
    it was."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise TextfileError(_cannot(str(target), exc, "no new file in its directory")) from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            os.fsync(f.fileno())
        os.replace(tmp, target)
        os.fsync(dirfd)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise TextfileError(_cannot(str(target), exc, "writing it failed")) from None


def merged(new: str, old: str, kept) -> str:
    """The exposition text NEW with the sample lines of OLD that KEPT(host, name) keeps
    (the line's host label and metric name), byte for byte, each under its family
    (HELP and TYPE from NEW where it has the family, else from OLD). A line without a
    host label (a run-wide metric) is always NEW's."""
    families: dict[str, dict] = {}

    def family(name: str) -> dict:
        return families.setdefault(name, {"help": None, "type": None, "samples": [], "new": False})

    for text, from_new in ((new, True), (old, False)):
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                kind, name = line[2:6].lower(), line.split(" ", 3)[2]
                f = family(name)
                f["new"] = f["new"] or from_new
                if f[kind] is None:
                    f[kind] = line
                continue
            if not line.strip() or line.startswith("#"):
                continue
            name, host = _sample(line)
            if name is None:
                continue
            if from_new or kept(host, name):
                family(name)["samples"].append((host or "", line))
    out = []
    for f in families.values():
        if not f["samples"] and not f["new"]:  # only the old file had it, for no kept host
            continue
        out += [line for line in (f["help"], f["type"]) if line is not None]
        out += [line for _host, line in sorted(f["samples"], key=lambda s: s[0])]
    return "\n".join(out) + "\n" if out else ""


def _sample(line: str) -> tuple[str | None, str | None]:
    """(metric name, host label) of one sample line (None, None if it is not one)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        samples = [s for f in text_string_to_metric_families(line + "\n") for s in f.samples]
    except ValueError:
        return None, None
    if len(samples) != 1:
        return None, None
    return samples[0].name, samples[0].labels.get("host")


def _per_host(gauge, hosts: list[HostMetrics], finished_at: float, interval_s) -> None:
    """Each host's gauges (GAUGE makes one in the run's registry). Each HELP says what
    an alert on the metric means (the alert in monitoring/remedy.rules.yml)."""
    up = gauge(
        "remedy_host_up",
        "1 if the last run could read the host; 0: remedy cannot reach or read it (ssh, "
        "the host down) and knows nothing else of it now (alert RemedyHostUnreachable)",
        ("host",),
    )
    state = gauge(
        "remedy_host_state",
        "1 for the host's class in the last run, as its exit code says (healthy 0, "
        "boot_pending 6, volatile 3, broken 4, locked 5, unreadable or failed 1); an "
        "alert on a class other than healthy or boot_pending means what its exit code does",
        ("host", "state"),
    )
    code = gauge(
        "remedy_host_exit_code",
        "The host's exit code in the last run's report (0 healthy, 6 boot pending, 3 "
        "volatile, 4 broken, 5 locked, 1 unreadable or failed); an alert on a code other "
        "than 0 or 6 means the host needs what remedy_host_state's class says",
        ("host",),
    )
    success = gauge(
        "remedy_last_run_success",
        "1 if the last run read the host and, if it applied, its run did not fail or "
        "wait for a lock; 0: the host is not converged on schedule (alert "
        "RemedyLastRunFailed)",
        ("host",),
    )
    when = gauge(
        "remedy_last_run_timestamp_seconds",
        "When the last run over the host finished; older than two intervals: the "
        "schedule does not run (alert RemedyLastRunTooOld)",
        ("host",),
    )
    interval = gauge(
        "remedy_run_interval_seconds",
        "The schedule's interval the last run over the host was given (remedy converge "
        "--interval, as the timer runs it); alert RemedyLastRunTooOld fires past twice it",
        ("host",),
    )
    drift = gauge(
        "remedy_setting_drift",
        "1 if the managed setting's live value is not the desired one: an alert on it "
        "means production runs with it wrong now and the runs did not fix it (the host's "
        "state says why: volatile, broken, locked)",
        ("host", "setting"),
    )
    volatile = gauge(
        "remedy_setting_volatile",
        "1 if the setting is right now but the next boot reverts it: a reboot breaks "
        "production (alert RemedySettingVolatile; for memory_guard, the guard's own "
        "alert RemedyMemoryGuardVolatile)",
        ("host", "setting"),
    )
    probe = gauge(
        "remedy_toolcall_probe_ok",
        "1 if the tool-call probe was parsed; 0: clients get tool calls as text, while "
        "/health says 200 (alert RemedyToolCallsUnparsed)",
        ("host",),
    )
    mem = gauge(
        "remedy_mem_available_bytes",
        "MemAvailable of the host; below remedy_mem_threshold_bytes the memory gate "
        "refuses a restart (alerts RemedyMemoryHeadroomLow, RemedyMemoryHeadroomShrinking)",
        ("host",),
    )
    threshold = gauge(
        "remedy_mem_threshold_bytes",
        "The memory gate's threshold of the host (host data min_mem_available_gb); "
        "alert RemedyMemoryHeadroomLow fires when MemAvailable is below it",
        ("host",),
    )
    blocked = gauge(
        "remedy_bump_blocked",
        "1 if the host needs a bump that this run may not take (the reason says why): "
        "the settings stay volatile until a person acts (alert RemedyBumpBlocked)",
        ("host", "reason"),
    )
    switch_failed = gauge(
        "remedy_switch_failed_units",
        "Units still failed after the last switch-to-configuration exited 4 (no alert "
        "of its own: the host's state says whether it serves)",
        ("host",),
    )
    unmanaged = gauge(
        "remedy_unmanaged_volatile",
        "Runtime state beyond the managed settings that a reboot reverts (ignore_volatile "
        "not counted): a reboot changes what runs (alert RemedyUnmanagedVolatile)",
        ("host", "kind"),
    )
    boot_pending = gauge(
        "remedy_boot_pending",
        "1 if the boot default holds every setting but the host runs the old generation: "
        "a reboot is due (alert RemedyRebootPending once it waits too long)",
        ("host",),
    )
    restart_pending = gauge(
        "remedy_restart_pending",
        "1 if the setting waits for a restart window or the next boot (no alert of its "
        "own: a wait past the bound shows as the setting volatile)",
        ("host", "setting"),
    )
    restarts = gauge(
        "remedy_last_run_restarts",
        "Server restarts in the last applied run (no alert: a count of what it did)",
        ("host",),
    )
    guard = gauge(
        "remedy_memory_guard",
        "1 for the memory guard's state: durable (the serving unit's ExecCondition= in "
        "the next boot too), volatile (only the /run fallback carries it: a reboot removes "
        "it: alert RemedyMemoryGuardVolatile, the next boot starts the server ungated) or "
        "missing (alert RemedyMemoryGuardMissing: a start of the server below "
        "min_mem_available_gb goes ungated now, and can hard-freeze the host)",
        ("host", "state"),
    )
    guard_refused = gauge(
        "remedy_memory_guard_last_refusal_timestamp_seconds",
        "When the memory guard last refused a start of the serving unit (MemAvailable "
        "below the threshold): the server stays down until a reboot reclaims the leak or "
        "a person forces a start (alert RemedyMemoryGuardRefused: a refusal less than a "
        "week old while tool calls are not answered)",
        ("host",),
    )
    cut = gauge(
        "remedy_last_run_requests_cut",
        "Requests in flight that the last applied run's restart cut (drain_timeout_s "
        "passed); no alert: clients saw errors once",
        ("host",),
    )
    for h in hosts:
        if h.read:
            up.labels(h.host).set(1 if h.up else 0)
        when.labels(h.host).set(finished_at)
        if interval_s is not None:
            interval.labels(h.host).set(interval_s)
        if h.run_ok is not None:
            success.labels(h.host).set(1 if h.run_ok else 0)
        if h.exit_code is not None:
            code.labels(h.host).set(h.exit_code)
            for name in STATES:
                state.labels(h.host, name).set(1 if name == h.state else 0)
        if not (h.up and h.read):
            continue
        for setting, value in h.drift.items():
            drift.labels(h.host, setting).set(1 if value else 0)
        for setting, value in h.volatile.items():
            volatile.labels(h.host, setting).set(1 if value else 0)
        probe.labels(h.host).set(1 if h.probe_ok else 0)
        if h.mem_available_bytes is not None:
            mem.labels(h.host).set(h.mem_available_bytes)
        if h.mem_threshold_bytes is not None:
            threshold.labels(h.host).set(h.mem_threshold_bytes)
        if h.bump_blocked:
            blocked.labels(h.host, h.bump_blocked).set(1)
        switch_failed.labels(h.host).set(h.switch_failed_units)
        for kind, n in h.unmanaged_volatile.items():
            unmanaged.labels(h.host, kind).set(n)
        boot_pending.labels(h.host).set(1 if h.boot_pending else 0)
        for setting, waits in h.restart_pending.items():
            restart_pending.labels(h.host, setting).set(1 if waits else 0)
        if h.guard_state is not None:
            from remedy.core.config.guard import WORDS

            for word in WORDS:
                guard.labels(h.host, word).set(1 if word == h.guard_state else 0)
        if h.guard_last_refusal_s is not None:
            guard_refused.labels(h.host).set(h.guard_last_refusal_s)
        if h.last_run_restarts is not None:
            restarts.labels(h.host).set(h.last_run_restarts)
            cut.labels(h.host).set(h.last_run_requests_cut or 0)


def _reboot_gauges(gauge, hosts: list[HostMetrics]) -> None:
    """Whether a reboot is needed, and why (issue 46 item 2), per host that was read."""
    needed = gauge(
        "remedy_reboot_needed",
        "1 if a reboot is needed for the reason: boot_pending (the next boot runs another "
        "system: alert RemedyRebootPending, on remedy_boot_pending), kernel, initrd or "
        "kernel_params (the booted system's differ from the current system's: a switch "
        "waits for a boot, alert RemedyRebootNeededKernel), memory_headroom (the memory "
        "guard refused the last start, or at the leak rate seen the next start falls "
        "below the threshold: alert RemedyRebootNeededMemory)",
        ("host", "reason"),
    )
    age = gauge(
        "remedy_boot_pending_age_seconds",
        "How long the next boot has run another system than the running one, at least "
        "(since the later change of the system profile or /run/current-system); only while "
        "boot pending (no alert of its own: RemedyRebootPending reads remedy_boot_pending)",
        ("host",),
    )
    starts = gauge(
        "remedy_mem_guard_starts",
        "Starts of the serving unit since boot with a memory guard line (0: the headroom "
        "is unknown, and the series below are absent); no alert of its own",
        ("host",),
    )
    first = gauge(
        "remedy_mem_available_first_start_bytes",
        "MemAvailable at the first start of the serving unit after boot, as the memory "
        "guard read it (no alert: see remedy_mem_leak_since_boot_bytes)",
        ("host",),
    )
    last = gauge(
        "remedy_mem_available_last_start_bytes",
        "MemAvailable at the last start of the serving unit, as the memory guard read it "
        '(no alert of its own: remedy_reboot_needed{reason="memory_headroom"} pages)',
        ("host",),
    )
    leak = gauge(
        "remedy_mem_leak_since_boot_bytes",
        "MemAvailable lost between the first start after boot and the last: the "
        "tenstorrent module's pinned pages, which only a reboot reclaims (no alert of "
        "its own)",
        ("host",),
    )
    left = gauge(
        "remedy_mem_starts_left",
        "Starts of the serving unit that stay at or above the memory threshold at the "
        "leak rate seen (0: the next one falls below; absent: no leak seen); alert "
        "RemedyRebootNeededMemory",
        ("host",),
    )
    for h in hosts:
        r = h.reboot
        if not h.up or r is None:
            continue
        for reason, value in r.needed.items():
            needed.labels(h.host, reason).set(1 if value else 0)
        if r.boot_pending_age_s is not None:
            age.labels(h.host).set(r.boot_pending_age_s)
        starts.labels(h.host).set(r.guard_starts)
        for g, value in ((first, r.first_start_bytes), (last, r.last_start_bytes),
                         (leak, r.leak_since_boot_bytes), (left, r.starts_left)):  # fmt: skip
            if value is not None:
                g.labels(h.host).set(value)
