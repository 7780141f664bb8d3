"""Twin lifecycle timings; prints figures, asserts nothing.

    python bench/twin_lifecycle.py [--cold]

--cold also builds the rootfs from scratch into a temporary cache (debootstrap
from the Debian mirror), leaving the real cache alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remedy.twin import machine, rootfs  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    quiet = lambda _m: None  # noqa: E731
    if args.cold:
        tmp = tempfile.mkdtemp(prefix="remedy-cold-cache-")
        os.environ["REMEDY_TWIN_CACHE"] = tmp
        start = time.perf_counter()
        rootfs.ensure_base(quiet)
        print(
            f"cold rootfs build (debootstrap + provisioning): "
            f"{time.perf_counter() - start:6.1f} s (budget 180 s)"
        )
        shutil.rmtree(tmp)
        del os.environ["REMEDY_TWIN_CACHE"]
    rootfs.ensure_base(quiet)
    ups, reboots, downs = [], [], []
    for i in range(args.runs):
        name = f"bench-life-{i}"
        start = time.perf_counter()
        machine.up(name, progress=quiet)
        ups.append(time.perf_counter() - start)
        start = time.perf_counter()
        machine.reboot(name, progress=quiet)
        reboots.append(time.perf_counter() - start)
        start = time.perf_counter()
        machine.down(name, progress=quiet)
        downs.append(time.perf_counter() - start)
    fmt = lambda xs: f"median {statistics.median(xs):5.1f} s, max {max(xs):5.1f} s"  # noqa: E731
    print(f"warm twin up to serving ({args.runs}):  {fmt(ups)} (budget 20 s)")
    print(f"reboot to serving ({args.runs}):        {fmt(reboots)} (budget 20 s)")
    print(f"down ({args.runs}):                     {fmt(downs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
