"""How many processes the snapshot script starts in a twin, and their CPU (issue 34).

    python bench/snapshot_processes.py [--twin NAME] [--runs 5] [--command-file F]
                                       [--save-command F] [--json F]

Runs the command of ``facts.serving.HostSnapshot`` (the arguments of host
``cfx-llm2``'s data, the twin's server URL, as tests/facts/record.py does) inside
twin NAME (default: a fresh twin ``bench-snap`` booted and taken down here), as
``nsenter -t INIT -a -- env -i PATH=... sh -c COMMAND``: the remote shell of an
SSH session, without the session. ``--command-file`` runs a command string saved
earlier with ``--save-command`` instead (the script before a change).

For each run, exactly: every process of the run, from BSD process accounting
(acct(2)) turned on in the twin's PID namespace for the run, by name. A process
counts if its parent chain reaches the process nsenter forked into the twin
(parent 0 there: ``env``, which becomes the ``sh -c`` of the session's shell
and counts as one ``sh``); the twin's other processes (timers, the model
server, the acct(2) calls) do not. CPU: user + system time of the run's processes, from
wait4 (this process's children), and the twin's systemd (PID 1: what answers
``systemctl``), from its /proc stat, in clock ticks. One warm-up run first (the
``nix --version`` record is written once). Medians over RUNS; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyinfra_testing.util import get_command_string  # noqa: E402

import facts.serving  # noqa: E402
from remedy.core.config import host_data  # noqa: E402
from remedy.twin import machine  # noqa: E402

TWIN = "bench-snap"
# acct_v3: flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime, 8 comp_t, comm
ACCT = struct.Struct("<BBHIIIIIIf8H16s")
TICK = os.sysconf("SC_CLK_TCK")


def snapshot_command(twin: machine.Twin) -> str:
    kwargs = host_data.from_host_data("cfx-llm2", {}).snapshot_kwargs()
    kwargs["server_url"] = twin.server_url
    return get_command_string(facts.serving.HostSnapshot().command(**kwargs))


def accounting(init: int, path: str | None) -> None:
    """acct(2) on (into PATH, a file of this machine) or off (None), called in the twin's
    PID namespace so that it records that namespace's processes, with its PIDs."""
    code = "import ctypes, sys; sys.exit(ctypes.CDLL(None).acct(sys.argv[1].encode() or None))"
    argv = ["nsenter", "--target", str(init), "--pid", "--", sys.executable, "-c", code,
            path or ""]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"acct({path}) in the twin's PID namespace failed: {proc.stderr}")


def run_tree(path: str) -> Counter:
    """The processes of the run in an acct(2) file, by name."""
    data = Path(path).read_bytes()
    recs = []
    for off in range(0, len(data) - ACCT.size + 1, ACCT.size):
        rec = ACCT.unpack_from(data, off)
        if rec[1] != 3:
            raise SystemExit(f"{path}: acct record version {rec[1]}, expected 3")
        recs.append((rec[6], rec[7], rec[-1].split(b"\0", 1)[0].decode(errors="replace")))
    # the run's shell; the acct(2) calls' own processes (python) are roots there too
    ours = {pid for pid, ppid, comm in recs if ppid == 0 and pid != 1 and comm == "sh"}
    grew = True
    while grew:
        more = {pid for pid, ppid, _ in recs if ppid in ours} - ours
        grew = bool(more)
        ours |= more
    return Counter(comm for pid, _, comm in recs if pid in ours)


def pid1_ticks(init: int) -> int:
    fields = Path(f"/proc/{init}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def one_run(twin: machine.Twin, command: str) -> dict:
    init = twin.init_pid()
    argv = ["nsenter", "-t", str(init), "-a", "--", "env", "-i", f"PATH={machine.IN_PATH}",
            "HOME=/root", "LANG=C.UTF-8", "sh", "-c", command]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        acct = os.path.join(tmp, "acct")
        Path(acct).touch()
        ticks = pid1_ticks(init)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        accounting(init, acct)
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
        accounting(init, None)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        ticks = pid1_ticks(init) - ticks
        names = run_tree(acct)
    # the two acct(2) calls' python processes are children too: measured apart
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"names": names, "count": sum(names.values()), "cpu": cpu, "pid1": ticks / TICK,
            "ended": out.rstrip().endswith("@@remedy:end$")}  # fmt: skip


def acct_cpu(twin: machine.Twin) -> float:
    """CPU of the two acct(2) calls around a run (subtracted from each run's)."""
    with tempfile.TemporaryDirectory() as tmp:
        acct = os.path.join(tmp, "acct")
        Path(acct).touch()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        accounting(twin.init_pid(), acct)
        accounting(twin.init_pid(), None)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--twin", help="a twin that is up (default: boot bench-snap, then down)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--command-file", help="run this saved command instead")
    ap.add_argument("--save-command", help="write the current command here, then measure")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args()
    own = args.twin is None
    twin = machine.up(TWIN, progress=print) if own else machine.load(args.twin)
    try:
        command = snapshot_command(twin)
        if args.save_command:
            Path(args.save_command).write_text(command)
        if args.command_file:
            command = Path(args.command_file).read_text()
        warm = one_run(twin, command)
        if not warm["ended"]:
            raise SystemExit("the snapshot's answer has no end marker: the script failed")
        runs = [one_run(twin, command) for _ in range(args.runs)]
        base = statistics.median(acct_cpu(twin) for _ in range(3))
    finally:
        if own:
            machine.down(TWIN, progress=print)
    counts = [r["count"] for r in runs]
    cpus = [max(0.0, r["cpu"] - base) for r in runs]
    names = runs[-1]["names"]
    print(f"twin {twin.name}, {args.runs} runs after a warm-up")
    print(f"processes: median {statistics.median(counts)} (runs: {counts})")
    print(f"CPU of them (user+sys): median {statistics.median(cpus):.3f} s")
    print(f"twin's systemd (PID 1) meanwhile: median "
          f"{statistics.median(r['pid1'] for r in runs):.3f} s")  # fmt: skip
    print("by name (last run): " + ", ".join(f"{n} {c}" for n, c in names.most_common()))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"counts": counts, "cpu_s": cpus, "pid1_s": [r["pid1"] for r in runs],
             "names": dict(names)}, indent=2) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
