"""Where the machine's CPU goes in a fleet run over N twins (issue 34): prints figures,
writes JSON, asserts nothing.

    python bench/fleet_profile.py [--twins 16] [--runs 3] [--check | --apply]
                                  [--json bench/results/fleet_profile.json]

N twins up (bench-fp0 …) and converged once, then RUNS runs of `remedy converge
--check` (or a no-op apply) under `perf record -a` (every CPU, every process: the
twins run on this machine). The samples are grouped by the program that ran
(perf's comm) into remedy itself, the twins' SSH sessions (sshd, sshd-session,
sshd-auth, unix_chkpwd), their systemd (PID 1: what answers systemctl), the programs
the snapshot script starts (sh, sed, systemctl, curl, git, …), the model server
double, the machine idle, and the rest; each as a share of the run's CPU samples and
as milliseconds per host per run. Needs `perf` (linux-perf) and root.

Why (docs/performance.md): on this machine the twins are not other hosts. Their own
work competes with remedy for the same two cores, so a fleet run's wall time over 16
twins says as much about the twins as about remedy.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fleet import WORK, converged_twins, inventory, remedy  # noqa: E402

# perf's comm (the first 15 bytes of a program's name) -> group
GROUPS = {
    "remedy": "remedy (the CLI, one process)",
    "sshd": "SSH sessions (the twins' sshd)",
    "sshd-session": "SSH sessions (the twins' sshd)",
    "sshd-auth": "SSH sessions (the twins' sshd)",
    "unix_chkpwd": "SSH sessions (the twins' sshd)",
    "systemd": "the twins' systemd (PID 1)",
    "python3": "the model server double",
    "swapper": "idle",
}
SNAPSHOT = {
    "sh", "dash", "bash", "env", "sed", "grep", "tr", "readlink", "stat", "systemctl",
    "journalctl", "git", "runuser", "getent", "find", "date", "curl", "head", "sort",
    "flock", "mv", "rm", "cat", "mkdir",
}  # fmt: skip


def group_of(comm: str) -> str:
    if comm in GROUPS:
        return GROUPS[comm]
    if comm in SNAPSHOT:
        return "the snapshot's programs (and the lock's)"
    return "other"


def perf_comm_samples(data: Path) -> dict[str, int]:
    """Samples per comm in perf.data DATA."""
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--sort", "comm", "--stdio", "-F", "sample,comm"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    counts: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].isdigit():
            counts[parts[1].strip()] = int(parts[0])
    return counts


def profile(argv: list[str], runs: int, hosts: int) -> dict:
    totals: collections.Counter = collections.Counter()
    by_comm: collections.Counter = collections.Counter()
    frequency = 4000
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            data = Path(tmp) / "perf.data"
            subprocess.run(
                ["perf", "record", "-q", "-a", "-F", str(frequency), "-o", str(data), "--",
                 *argv],
                cwd=ROOT, capture_output=True, check=False,
            )  # fmt: skip
            counts = perf_comm_samples(data)
            by_comm.update(counts)
            for comm, n in counts.items():
                totals[group_of(comm)] += n
    all_samples = sum(totals.values()) or 1
    rows = [
        {
            "group": g,
            "share": round(n / all_samples, 3),
            "ms_per_host": round(n / frequency / runs / hosts * 1000, 1),
        }
        for g, n in totals.most_common()
    ]
    top = [{"comm": c, "share": round(n / all_samples, 3)} for c, n in by_comm.most_common(15)]
    return {"groups": rows, "top_programs": top}


def render(r: dict) -> str:
    lines = [f"{r['what']} over {r['twins']} twins, {r['runs']} runs; {r['cpus']} CPUs; "
             "perf samples of every CPU", f"{'':44}{'share':>7}{'ms/host':>9}"]  # fmt: skip
    for row in r["groups"]:
        lines.append(f"{row['group'][:44]:44}{row['share'] * 100:6.1f}%{row['ms_per_host']:9.1f}")
    top = ", ".join(f"{t['comm']} {t['share'] * 100:.1f}%" for t in r["top_programs"][:10])
    lines += textwrap.wrap("programs: " + top, 80, subsequent_indent="  ")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--twins", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--apply", action="store_true", help="a no-op apply, not --check")
    ap.add_argument("--json", default=str(ROOT / "bench/results/fleet_profile.json"))
    args = ap.parse_args()
    if shutil.which("perf") is None:
        print("perf is not installed: apt-get install linux-perf", file=sys.stderr)
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    with converged_twins([f"bench-fp{i}" for i in range(args.twins)]) as (names, _took):
        inv = inventory(names, WORK / "profile.py")
        argv = remedy(inv) if args.apply else remedy(inv, "--check")
        subprocess.run(argv, cwd=ROOT, capture_output=True, check=False)  # warm-up
        result = {
            "machine": platform.node(),
            "cpus": os.cpu_count(),
            "twins": args.twins,
            "runs": args.runs,
            "what": "no-op converge" if args.apply else "converge --check",
            **profile(argv, args.runs, args.twins),
        }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
