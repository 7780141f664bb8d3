"""Benchmark of the restore deploy on twins; prints figures, asserts nothing.

    python bench/restore.py [--runs 5]

* no-drift run: remote round trips (pyinfra --debug "Command exit status" lines)
  and wall time, against a trivial pyinfra deploy to the same twin;
* engine overhead on the restore path: a full durable restore minus the same
  remote work done by hand over plain SSH on a second fresh twin (bump, build,
  commit, switch, wait until the probe is parsed), so the restart and the
  readiness wait are excluded from the difference.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remedy.core.programs import commands  # noqa: E402
from remedy.core.readings import nix, probe  # noqa: E402
from remedy.twin import machine  # noqa: E402


def timed(argv, **kw) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, **kw)
    return time.perf_counter() - start, proc


def pyinfra(twin, *args) -> list[str]:
    return ["pyinfra", "-y", "--limit", twin.name, "inventory/twin.py", *args]


def by_hand(twin) -> float:
    """The restore's remote work, typed by a person over SSH: as the checkout's owner,
    with the flake features, then the switch of the built toplevel as root."""
    ssh = twin.ssh_argv()

    def remote(argv, owner=True) -> str:
        argv = commands.as_owner("ops", "/home/ops", argv) if owner else argv
        return subprocess.run(
            [*ssh, shlex.join(argv)], capture_output=True, text=True, check=True
        ).stdout

    version = remote(["nix", "--version"], owner=False).split()[-1]
    info = nix.parse_nix_version([f"nix (Nix) {version}"])
    start = time.perf_counter()
    remote(commands.update_input(info.update_input_argv, "/etc/nixos", "tt-stack"))
    remote(commands.dry_run_toplevel("/etc/nixos", "cfx-llm2"))
    out = remote(commands.build_toplevel("/etc/nixos", "cfx-llm2"))
    toplevel = json.loads(out)[0]["outputs"]["out"]
    remote(commands.lock_commit("/etc/nixos", "bump (bench)", "cfx-llm2"))
    remote(commands.profile_set(toplevel), owner=False)
    remote(commands.activate(toplevel), owner=False)
    check = shlex.join(probe.probe_argv(twin.server_url, None, 20, probe.DEFAULT_TRIES))
    while True:
        out = subprocess.run([*ssh, check], capture_output=True, text=True).stdout
        if probe.read_curl_output(out.splitlines()).parsed:
            break
        time.sleep(0.5)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    quiet = lambda _m: None  # noqa: E731
    a = machine.up("bench-a", progress=quiet)
    b = None
    try:
        trivial = [timed(pyinfra(a, "bench/trivial_deploy.py"))[0] for _ in range(args.runs)]
        t_restore, proc = timed(pyinfra(a, "deploys/restore_toolcalling.py"))
        assert proc.returncode == 0, proc.stdout[-2000:]
        nodrift, trips = [], []
        for _ in range(args.runs):
            t, proc = timed(pyinfra(a, "--debug", "deploys/restore_toolcalling.py"))
            nodrift.append(t)
            trips.append((proc.stdout + proc.stderr).count("Command exit status"))
        b = machine.up("bench-b", progress=quiet)
        t_hand = by_hand(b)
    finally:
        machine.down("bench-a", progress=quiet)
        if b is not None:
            machine.down("bench-b", progress=quiet)
    med_trivial, med_nodrift = statistics.median(trivial), statistics.median(nodrift)
    print(f"trivial pyinfra deploy (median of {args.runs}):  {med_trivial:6.2f} s")
    print(
        f"no-drift restore run (median of {args.runs}):    {med_nodrift:6.2f} s  "
        f"= {med_nodrift / med_trivial:.2f}x trivial (budget 1.5x)"
    )
    print(f"remote round trips per no-drift run:     {max(trips)} (budget 2)")
    print(f"durable restore, fresh twin:             {t_restore:6.2f} s")
    print(f"same remote work by hand over SSH:       {t_hand:6.2f} s")
    print(f"engine overhead on the restore path:     {t_restore - t_hand:6.2f} s (budget 2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
