"""Benchmark of a remedy with and without a builder (issue 29); prints a table, asserts nothing.

    python bench/build_off_host.py [--runs 3] [--suite trixie|bookworm] [--interval 0.025]

A remedy from the seed state: a fresh serving twin with the emergency override
(`machine.up(..., with_emergency_override=True)`), then

    pyinfra -y --limit SERVING [--data build_host=BUILDER] --data restart=now \\
        inventory/twin.py deploys/converge.py

once without a builder and once with one (a fresh builder twin paired with the
serving twin, `machine.pair_builder`), RUNS times each, alternating, fresh twins
every time and at most two twins up at once. For each run: the wall time of the
pyinfra run, its exit code, whether it ended durable ("outcome: path durable"),
and, on the serving twin only, the nix processes started during the run and the
peak of their summed RSS.

The nix processes are sampled from this machine's /proc every INTERVAL seconds:
those in the serving twin's PID namespace (`/proc/PID/ns/pid` against that of
the twin's init) whose name (comm, else the executable's) is `nix` or `nix-*`.
Each distinct PID counts once, by the last name it had. The nix-daemon running
before the run is left out; nix-daemon processes forked during the run are
counted apart, as the daemon itself (its parent is the twin's init:
socket-activated by the run) or as a per-connection worker (its parent is a
nix-daemon). Sampling is
approximate: a process that starts and ends between two samples is not seen, and
the RSS peak is the highest sum seen at a sample. So the count is also taken
exactly, from BSD process accounting turned on in the twin's PID namespace for
the run (acct(2) records every process of that namespace when it exits, with its
name, and marks one that forked without exec: a nix-daemon worker); the nix
processes still running when the run ends have no record there. As context, the
processes of any kind started in the twin during the run (its `ns_last_pid`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remedy.twin import machine  # noqa: E402

BIN = Path(sys.executable).parent
PAGE = os.sysconf("SC_PAGE_SIZE")
SERVING, BUILDER = "bench-bo-s", "bench-bo-b"
DURABLE = "outcome: path durable"


def nix_name(pid: int, comm: str) -> str | None:
    """COMM if it names nix (`nix`, `nix-*`), else the executable's name if that does,
    else None."""
    for name in (comm, _exe_name(pid)):
        if name and (name == "nix" or name.startswith("nix-")):
            return name
    return None


def _exe_name(pid: int) -> str | None:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(comm, ppid, start time, RSS in bytes) of PID from /proc/PID/stat, None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, starttime 22, rss 24
    return comm, int(fields[1]), int(fields[19]), int(fields[21]) * PAGE


class NixWatch:
    """The nix processes of one twin's PID namespace, seen by sampling /proc. A process
    counts by the last name it was seen with, as process accounting names it: a fork of
    nix that then runs ssh is not a nix process (nor is its RSS in the sums)."""

    def __init__(self, twin: machine.Twin):
        init = twin.init_pid()
        if init is None:
            raise SystemExit(f"twin {twin.name} is not booted; cannot watch its processes")
        self.init = init
        self.ns = os.readlink(f"/proc/{init}/ns/pid")
        self.inside: dict[int, bool] = {}  # pid -> in the twin's namespace
        self.seen: dict[tuple[int, int], str | None] = {}  # (pid, start) -> last kind
        self.sums: list[list[tuple[tuple[int, int], int]]] = []  # per sample: (key, RSS)
        before = {k: kind for k, (kind, _) in self._procs().items() if kind}
        self.before = set(before)
        self.before_names = sorted(before.values())

    def _in_twin(self, pid: int) -> bool:
        known = self.inside.get(pid)
        if known is None:
            try:
                known = os.readlink(f"/proc/{pid}/ns/pid") == self.ns
            except OSError:
                known = False
            self.inside[pid] = known
        return known

    def _procs(self) -> dict[tuple[int, int], tuple[str | None, int]]:
        """(pid, start) -> (nix kind or None, RSS) of the twin's processes now."""
        pids = {int(p) for p in os.listdir("/proc") if p.isdigit()}
        for gone in self.inside.keys() - pids:  # a PID used again is looked at again
            del self.inside[gone]
        found = {}
        for pid in pids:
            if not self._in_twin(pid):
                continue
            st = _stat(pid)
            if st is None:
                continue
            comm, ppid, start, rss = st
            name = nix_name(pid, comm)
            if name == "nix-daemon":
                name = "nix-daemon" if ppid == self.init else "nix-daemon worker"
            found[(pid, start)] = (name, rss)
        return found

    def sample(self) -> None:
        now = []
        for key, (kind, rss) in self._procs().items():
            if key in self.before:
                continue
            if kind is not None:
                self.seen[key] = kind
                now.append((key, rss))
            elif key in self.seen:  # it ran something else since
                self.seen[key] = None
        self.sums.append(now)

    def counts(self) -> Counter:
        return Counter(kind for kind in self.seen.values() if kind)

    def running(self) -> Counter:
        """The nix processes of the last sample (still running: no acct record yet)."""
        return Counter(self.seen[k] for k, _ in self.sums[-1] if self.seen[k])

    def peak(self) -> int:
        """The highest summed RSS of the nix processes at one sample, in bytes."""
        return max((sum(rss for k, rss in s if self.seen[k]) for s in self.sums), default=0)


# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid,
# btime, etime, 8 comp_t, comm[16]
ACCT = struct.Struct("<BBHIIIIIIf8H16s")
AFORK = 0x01  # forked but did not exec


def accounting(twin: machine.Twin, path: str | None) -> None:
    """Turn process accounting in TWIN's PID namespace on (into PATH, a file of this
    machine) or off (None): acct(2) called by a process of that namespace."""
    code = "import ctypes, sys; sys.exit(ctypes.CDLL(None).acct(sys.argv[1].encode() or None))"
    argv = ["nsenter", "--target", str(twin.init_pid()), "--pid", "--",
            sys.executable, "-c", code, path or ""]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"twin {twin.name}: acct({path}) in its PID namespace failed: {proc.stderr}"
        )


def accounted(path: str) -> Counter:
    """The nix processes of an acct(2) file, by name (a nix-daemon that forked without
    exec is a worker)."""
    data = Path(path).read_bytes()
    counts: Counter = Counter()
    for off in range(0, len(data) - ACCT.size + 1, ACCT.size):
        rec = ACCT.unpack_from(data, off)
        if rec[1] != 3:
            raise SystemExit(f"{path}: acct record version {rec[1]}, expected 3")
        comm = rec[-1].split(b"\0", 1)[0].decode(errors="replace")
        if comm == "nix" or comm.startswith("nix-"):
            worker = comm == "nix-daemon" and rec[0] & AFORK
            counts["nix-daemon worker" if worker else comm] += 1
    return counts


def last_pid(twin: machine.Twin) -> int:
    """The twin's ns_last_pid, read inside it (the reading is one process there)."""
    return int(twin.exec(["cat", "/proc/sys/kernel/ns_last_pid"]).stdout)


def remedy(serving: machine.Twin, builder: machine.Twin | None, interval: float) -> dict:
    argv = [str(BIN / "pyinfra"), "-y", "--limit", serving.name]
    if builder is not None:
        argv += ["--data", f"build_host={builder.name}"]
    argv += ["--data", "restart=now", "inventory/twin.py", "deploys/converge.py"]
    watch = NixWatch(serving)
    with tempfile.TemporaryDirectory() as tmp, open(f"{tmp}/out", "w+b") as out:
        acct = f"{tmp}/acct"
        Path(acct).touch()
        first = last_pid(serving)
        accounting(serving, acct)
        try:
            start = time.perf_counter()
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                watch.sample()
                time.sleep(interval)
            took = time.perf_counter() - start
            watch.sample()
        finally:
            accounting(serving, None)
        # less the two readings and the process that turned accounting on
        started = last_pid(serving) - first - 3
        exact = accounted(acct)
        out.seek(0)
        text = out.read().decode(errors="replace")
    counts = watch.counts()
    return {
        "builder": builder is not None,
        "wall_s": took,
        "exit": proc.returncode,
        "durable": DURABLE in text,
        "nix_processes": sum(counts.values()),
        "by_name": dict(sorted(counts.items())),
        "before": sorted(watch.before_names),
        "exact_nix_processes": sum(exact.values()),
        "exact_by_name": dict(sorted(exact.items())),
        "peak_nix_rss_mib": watch.peak() / 2**20,
        "processes_started": started,
        "samples": len(watch.sums),
        "running_at_end": dict(sorted(watch.running().items())),
        "tail": text[-1500:] if proc.returncode != 0 or DURABLE not in text else "",
    }


def one_run(suite: str, with_builder: bool, interval: float) -> dict:
    quiet = lambda _m: None  # noqa: E731
    try:
        serving = machine.up(SERVING, suite=suite, with_emergency_override=True, progress=quiet)
        builder = None
        if with_builder:
            builder = machine.up(BUILDER, suite=suite, role="builder", progress=quiet)
            machine.pair_builder(serving, builder, progress=quiet)
        return remedy(serving, builder, interval)
    finally:
        machine.down(SERVING, progress=quiet)
        if with_builder:
            machine.down(BUILDER, progress=quiet)


def spread(values: list[float], fmt: str) -> str:
    """The median and the range of VALUES, e.g. '41.2 (39.8-43.0)'."""
    lo, mid, hi = min(values), statistics.median(values), max(values)
    return f"{mid:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def render(results: list[dict], suite: str, runs: int, interval: float) -> str:
    lines = [
        f"a remedy from the seed state, {suite}, {runs} run(s) each, {os.cpu_count()} CPUs",
        "median (range); on the serving twin: its nix processes, sampled every "
        f"{interval * 1000:.0f} ms",
        "(approximate; exact: process accounting) and their peak summed RSS (sampled)",
        "",
        f"{'':11}{'wall s':>17}{'nix procs':>12}{'exact':>12}{'peak MiB':>12}"
        f"{'exit':>5}{'durable':>8}",
    ]
    for with_builder in (False, True):
        rs = [r for r in results if r["builder"] is with_builder]
        if not rs:
            continue
        codes = ",".join(sorted({str(r["exit"]) for r in rs}))
        durable = f"{sum(r['durable'] for r in rs)}/{len(rs)}"
        lines.append(
            f"{'builder' if with_builder else 'no builder':11}"
            f"{spread([r['wall_s'] for r in rs], '.1f'):>17}"
            f"{spread([r['nix_processes'] for r in rs], '.0f'):>12}"
            f"{spread([r['exact_nix_processes'] for r in rs], '.0f'):>12}"
            f"{spread([r['peak_nix_rss_mib'] for r in rs], '.0f'):>12}"
            f"{codes:>5}{durable:>8}"
        )
    lines += ["", "each run: the nix processes by name (sampled; exact), all processes started"]
    for r in results:
        lines.append(
            f"  {'builder' if r['builder'] else 'no builder'}, {r['wall_s']:.1f} s, "
            f"{r['processes_started']} processes, before the run: "
            f"{', '.join(r['before']) or 'no nix'}"
        )
        if r["running_at_end"]:
            left = ", ".join(f"{n} {c}" for n, c in r["running_at_end"].items())
            lines.append(f"    still running at the end (no acct record): {left}")
        for how, names in (("sampled", r["by_name"]), ("exact", r["exact_by_name"])):
            text = ", ".join(f"{n} {c}" for n, c in names.items()) or "none"
            lines.append(f"    {how + ':':9}{text}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--suite", choices=("trixie", "bookworm"), default="trixie")
    parser.add_argument("--interval", type=float, default=0.025, help="seconds between samples")
    parser.add_argument("--json", help="also write every run's figures to this file")
    args = parser.parse_args()
    for name in (SERVING, BUILDER):  # left over from an interrupted run
        try:
            machine.down(name, progress=lambda _m: None)
        except machine.TwinError:
            pass  # none: nothing to take down
    results = []
    for i in range(args.runs):
        for with_builder in (False, True) if i % 2 == 0 else (True, False):
            r = one_run(args.suite, with_builder, args.interval)
            results.append(r)
            print(
                f"run {i + 1}, {'with a builder' if with_builder else 'no builder'}: "
                f"{r['wall_s']:.1f} s, exit {r['exit']}, durable {r['durable']}, "
                f"{r['nix_processes']} nix processes, {r['peak_nix_rss_mib']:.0f} MiB",
                file=sys.stderr,
            )
            if r["tail"]:
                print(r["tail"], file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(render(results, args.suite, args.runs, args.interval))
    return 0


if __name__ == "__main__":
    sys.exit(main())
