"""Many hosts at once: read every host's snapshot, run a deploy per host in parallel.

A host that is down, unreachable or has a bad key fails only itself: its
reason is kept, the others go on. The reporting commands (``remedy status``,
``remedy converge``) build on these two functions.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from remedy import session
from remedy.core import settings as settings_mod
from remedy.core.settings import Settings
from remedy.core.snapshot import HostSnapshot

# Where deploys/ and runbooks/ live: the checkout this package runs from, or, for an
# installed wheel, REMEDY_PROJECT (the schedule's service sets it).
PROJECT = Path(os.environ.get("REMEDY_PROJECT") or Path(__file__).resolve().parent.parent)


@dataclass
class HostRead:
    name: str
    settings: Settings | None = None
    snapshot: HostSnapshot | None = None
    error: str | None = None  # why the host could not be read


def read_hosts(
    inventory: str, limit: list[str] | None, progress: Callable[[str], None] = lambda _m: None
) -> list[HostRead]:
    """One remote read (facts.serving.HostSnapshot) per host, in parallel."""
    import gevent

    from facts.nix import read_option_definitions
    from facts.serving import HostSnapshot as SnapshotFact
    from remedy.core import desired
    from remedy.core.options import OptionDefinitions

    out: list[HostRead] = []
    with session.connected(inventory, limit) as (_state, hosts, failed):
        for name, why in failed.items():
            out.append(HostRead(name, error=f"could not connect over SSH: {why}"))

        def read(host) -> HostRead:
            s = settings_mod.from_host_data(host.name, host.data)
            progress(f"reading {host.name}")
            try:
                snap = host.get_fact(SnapshotFact, **s.snapshot_kwargs())
            except Exception as exc:  # a fact that cannot be parsed names itself
                return HostRead(host.name, s, error=f"the remote read failed: {exc}")
            if snap is None:
                return HostRead(host.name, s, error="the remote read failed")
            _import_manual_runs(host, snap, progress)
            # what remedy's forced values win over: one evaluation of the configuration
            try:
                defs = read_option_definitions(host, s, snap, desired.ALL)
            except Exception as exc:
                defs = OptionDefinitions(error=f"not evaluated: {exc}")
            return HostRead(host.name, s, dataclasses.replace(snap, definitions=defs))

        greenlets = [gevent.spawn(read, h) for h in hosts]
        gevent.joinall(greenlets)
        out += [g.get() for g in greenlets]
    return sorted(out, key=lambda r: r.name)


def _import_manual_runs(host, snap, progress) -> None:
    """The manual script's records on the host, into this machine's audit log, once."""
    from remedy import audit

    if not snap.journal.manual_runs:
        return
    path = audit.log_path_for(dict(host.data.dict()))
    try:
        done = audit.import_manual_runs(path, host.name, snap.journal.manual_runs)
    except OSError as exc:
        progress(f"{host.name}: could not import its manual runs into {path}: {exc}")
        return
    for run_id in done:
        progress(f"{host.name}: audited the manual run {run_id} (from the host)")


@dataclass
class DeployRun:
    host: str
    returncode: int
    seconds: float
    output: str = field(repr=False, default="")
    started: float = 0.0  # wall clock (time.time()) when the deploy began

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.output.rstrip().splitlines()[-lines:])


def _run_watched(name: str, argv: list[str], progress: Callable[[str], None]) -> tuple[int, str]:
    """Run a host's pyinfra ARGV; say each step as it starts and ends, and every 10 s
    how long a long step has run (remedy.core.progress). Its exit code and output."""
    import threading

    from remedy.core.progress import StepWatch

    watch, lock, done = StepWatch(name), threading.Lock(), threading.Event()
    proc = subprocess.Popen(
        argv,
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env={**os.environ, "REMEDY_PROJECT": str(PROJECT), "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
    )

    def beat() -> None:
        while not done.wait(1):
            with lock:
                said = watch.heartbeat(time.monotonic())
            if said:
                progress(said)

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            with lock:
                said = watch.feed(line, time.monotonic())
            for message in said:
                progress(message)
        code = proc.wait()
    finally:
        done.set()
        if proc.poll() is None:  # this process is stopping: so does the deploy
            proc.terminate()
            proc.wait()
    return code, "".join(lines)


def deploy_each(
    inventory: str,
    hosts: list[str],
    deploy: str,
    data: dict[str, str],
    progress: Callable[[str], None] = lambda _m: None,
    parallel: int = 8,
) -> list[DeployRun]:
    """``pyinfra -y INVENTORY DEPLOY --limit HOST`` for every host, in parallel, each in
    its own process: one host's failure, lock or lost connection is its own."""
    inventory_path = str(Path(inventory).resolve())
    deploy_path = str(PROJECT / "deploys" / deploy)

    def one(name: str) -> DeployRun:
        argv = [sys.executable, "-m", "pyinfra", "-y", "--limit", name]
        for key, value in sorted(data.items()):
            argv += ["--data", f"{key}={value}"]
        argv += [inventory_path, deploy_path]
        progress(f"{name}: applying deploys/{deploy}")
        began, started = time.time(), time.monotonic()
        code, output = _run_watched(name, argv, progress)
        took = time.monotonic() - started
        progress(f"{name}: deploy finished in {took:.0f}s (exit {code})")
        return DeployRun(name, code, took, output, began)

    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        return list(pool.map(one, hosts))
