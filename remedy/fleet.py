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
        proc = subprocess.run(
            argv,
            cwd=PROJECT,
            capture_output=True,
            text=True,
            env={**os.environ, "REMEDY_PROJECT": str(PROJECT)},
            stdin=subprocess.DEVNULL,
        )
        took = time.monotonic() - started
        progress(f"{name}: deploy finished in {took:.0f}s (exit {proc.returncode})")
        return DeployRun(name, proc.returncode, took, proc.stdout + proc.stderr, began)

    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        return list(pool.map(one, hosts))
