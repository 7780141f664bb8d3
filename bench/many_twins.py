"""Sixteen twins at once from the kernel's default inotify limits; prints figures, writes
JSON, asserts nothing.

    python bench/many_twins.py [--twins 16] [--json bench/results/many_twins.json]

1. Set fs.inotify.max_user_instances to the kernel's default (128), as a fresh
   machine has it, then bring up N twins (`remedy twin up` raises the limits).
2. `remedy converge --check` over all N: wall time, and the slowest SSH login.
3. Reboot one twin: how long until it serves again.
4. Take all N down at once (one thread each), then count what is left: nspawn
   processes, twin inits (machine.leftovers()) and mounts under the state root.

The limits are put back as they were at the end.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remedy.twin import machine  # noqa: E402

BIN = Path(sys.executable).parent
LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--twins", type=int, default=16)
    ap.add_argument("--json", default=str(ROOT / "bench/results/many_twins.json"))
    args = ap.parse_args()
    before = LIMIT.read_text().strip()
    LIMIT.write_text("128\n")
    names = [f"bench-many-{i}" for i in range(args.twins)]
    out: dict = {"twins": args.twins, "inotify_instances_before": before}
    try:
        started = time.monotonic()
        for name in names:
            machine.up(name, progress=lambda _m: None)
        out["up_all_s"] = round(time.monotonic() - started, 1)
        out["inotify_instances_after_up"] = LIMIT.read_text().strip()

        started = time.monotonic()
        check = subprocess.run(
            [str(BIN / "remedy"), "converge", "inventory/twin.py", "--check", "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        out["converge_check_s"] = round(time.monotonic() - started, 2)
        out["converge_check_exit"] = check.returncode
        out["hosts_read"] = len(json.loads(check.stdout)["hosts"]) if check.stdout else 0

        logins = []
        for name in names:
            twin = machine.load(name)
            t0 = time.monotonic()
            subprocess.run([*twin.ssh_argv(), "true"], capture_output=True, timeout=300)
            logins.append(time.monotonic() - t0)
        out["ssh_login_max_s"] = round(max(logins), 2)

        started = time.monotonic()
        machine.reboot(names[0], progress=lambda _m: None)
        out["reboot_one_s"] = round(time.monotonic() - started, 1)
    finally:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            list(pool.map(lambda n: _down(n), names))
        out["down_all_s"] = round(time.monotonic() - started, 1)
        left = [p for p in machine.leftovers() if p.name.startswith("bench-many-")]
        mounts = [
            ln.split()[1]
            for ln in Path("/proc/self/mounts").read_text().splitlines()
            if str(machine.state_root() / "bench-many-") in ln
        ]
        out["left_processes"] = len(left)
        out["left_mounts"] = len(mounts)
        LIMIT.write_text(before + "\n")
    print(f"{'what':<44} {'figure':>10}")
    for key, value in out.items():
        print(f"{key:<44} {value!s:>10}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


def _down(name: str) -> None:
    try:
        machine.down(name, progress=lambda _m: None)
    except machine.TwinError as exc:
        print(f"{name}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
