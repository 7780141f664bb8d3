"""node_exporter textfile metrics of a converge run, written with prometheus-client.

    remedy converge inventory/production.py --check --textfile \
        /var/lib/node_exporter/textfile/remedy.prom

``write_to_textfile`` writes a temporary file next to PATH and renames it: the
collector never reads half a file. A host that could not be read gets
``remedy_host_up{host} 0`` and nothing else, never stale values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from remedy.errors import ConfigError


@dataclass
class HostMetrics:
    host: str
    up: bool
    drift: dict[str, bool] = field(default_factory=dict)  # setting -> live is wrong
    volatile: dict[str, bool] = field(default_factory=dict)  # setting -> a reboot reverts it
    probe_ok: bool = False
    mem_available_bytes: int | None = None
    bump_blocked: str | None = None  # the reason a bump may not run, if one is needed
    switch_failed_units: int = 0  # units still failed after a switch that exited 4
    # runtime state beyond the managed settings a reboot reverts, per kind (not ignored)
    unmanaged_volatile: dict[str, int] = field(default_factory=dict)
    boot_pending: bool = False  # the boot default holds every setting but is not running
    restart_pending: dict[str, bool] = field(default_factory=dict)  # setting -> it waits
    last_run_restarts: int | None = None  # of the run this converge applied (None: none)
    last_run_requests_cut: int | None = None


def check_writable(path: str) -> Path:
    """Fail before any work if PATH cannot be written atomically: its directory must
    exist and take a new file (the temporary file goes there, then is renamed over
    PATH), and PATH, if it exists, must be a regular file. Asking the directory is not
    enough: root may write anywhere by its mode, yet /proc or a read-only mount refuses
    the file, so one is made there and removed."""
    import tempfile

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
    success: bool,
    rollout: dict[str, int] | None = None,
) -> None:
    """The run's metrics at PATH. ROLLOUT: how many hosts of an applied run ended in each
    state (``remedy.core.run.rollout``: unchanged, converged, failed, not started …)."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

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

    _per_host(gauge, hosts)
    gauge("remedy_last_run_timestamp_seconds", "When the last run finished").set(finished_at)
    gauge("remedy_last_run_success", "1 if every host ended in sync and durable").set(
        1 if success else 0
    )
    gauge("remedy_run_duration_seconds", "Wall time of the last run").set(duration_s)
    if rollout is not None:
        hosts_by_state = gauge(
            "remedy_rollout_hosts", "Hosts of the last applied run, by how they ended", ("state",)
        )
        for state, count in rollout.items():
            hosts_by_state.labels(state).set(count)
        gauge("remedy_rollout_duration_seconds", "Wall time of the last applied run's rollout").set(
            duration_s
        )
    try:
        write_to_textfile(path, registry)
    except OSError as exc:
        raise ConfigError(f"--textfile {path}: cannot write it: {exc}") from None


def _per_host(gauge, hosts: list[HostMetrics]) -> None:
    """Each host's gauges (GAUGE makes one in the run's registry)."""
    up = gauge("remedy_host_up", "1 if remedy could read the host in this run", ("host",))
    drift = gauge(
        "remedy_setting_drift",
        "1 if the managed setting's live value is not the desired one",
        ("host", "setting"),
    )
    volatile = gauge(
        "remedy_setting_volatile",
        "1 if the setting is right now but the next boot reverts it",
        ("host", "setting"),
    )
    probe = gauge("remedy_toolcall_probe_ok", "1 if the tool-call probe was parsed", ("host",))
    mem = gauge("remedy_mem_available_bytes", "MemAvailable of the host", ("host",))
    blocked = gauge(
        "remedy_bump_blocked",
        "1 if the host needs a bump that this run may not take (the reason says why)",
        ("host", "reason"),
    )
    switch_failed = gauge(
        "remedy_switch_failed_units",
        "Units still failed after the last switch-to-configuration exited 4",
        ("host",),
    )
    unmanaged = gauge(
        "remedy_unmanaged_volatile",
        "Runtime state beyond the managed settings that a reboot reverts (ignore_volatile "
        "not counted)",
        ("host", "kind"),
    )
    boot_pending = gauge(
        "remedy_boot_pending",
        "1 if the boot default holds every setting but the host runs the old generation",
        ("host",),
    )
    restart_pending = gauge(
        "remedy_restart_pending",
        "1 if the setting waits for a restart window or the next boot",
        ("host", "setting"),
    )
    restarts = gauge(
        "remedy_last_run_restarts", "Server restarts in the last applied run", ("host",)
    )
    cut = gauge(
        "remedy_last_run_requests_cut",
        "Requests in flight that the last applied run's restart cut (drain_timeout_s passed)",
        ("host",),
    )
    for h in hosts:
        up.labels(h.host).set(1 if h.up else 0)
        if not h.up:
            continue
        for setting, value in h.drift.items():
            drift.labels(h.host, setting).set(1 if value else 0)
        for setting, value in h.volatile.items():
            volatile.labels(h.host, setting).set(1 if value else 0)
        probe.labels(h.host).set(1 if h.probe_ok else 0)
        if h.mem_available_bytes is not None:
            mem.labels(h.host).set(h.mem_available_bytes)
        if h.bump_blocked:
            blocked.labels(h.host, h.bump_blocked).set(1)
        switch_failed.labels(h.host).set(h.switch_failed_units)
        for kind, n in h.unmanaged_volatile.items():
            unmanaged.labels(h.host, kind).set(n)
        boot_pending.labels(h.host).set(1 if h.boot_pending else 0)
        for setting, waits in h.restart_pending.items():
            restart_pending.labels(h.host, setting).set(1 if waits else 0)
        if h.last_run_restarts is not None:
            restarts.labels(h.host).set(h.last_run_restarts)
            cut.labels(h.host).set(h.last_run_requests_cut or 0)
