"""Benchmark of `remedy converge --check` on twins; prints a table, writes JSON, asserts nothing.

    python bench/converge.py [--runs 5] [--fleet 1,2,4,8] [--json bench/results/converge.json]

1. A no-drift `remedy converge --check` on one converged twin, against: a
   trivial pyinfra deploy to the same twin; one `ssh` that runs the very script
   remedy's snapshot runs (everything the facts read, and the probe); and an
   Ansible playbook (bench/peers/ansible/check.yml: systemctl show, slurp of the
   start script, flake.lock and /proc/meminfo, the probe with `uri`, a decision),
   ansible-core from PyPI, gather_facts off, pipelining on. Also the remote round
   trips of a no-drift `deploys/converge.py` run (pyinfra --debug).
2. The fleet: `remedy converge --check` over 1, 2, 4 and 8 twins: wall time and the
   peak RSS of the remedy process.

Medians of RUNS runs after one warm-up run each, on this machine, in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyinfra.api import StringCommand  # noqa: E402

from facts.serving import HostSnapshot  # noqa: E402
from remedy.core.config.host_data import from_host_data  # noqa: E402
from remedy.twin import machine  # noqa: E402

BIN = Path(sys.executable).parent


def timed_runs(label: str, argv: list[str], runs: int, env: dict | None = None) -> dict:
    _measure(argv, env)  # warm-up
    times, codes, rss = [], [], []
    for _ in range(runs):
        t, code, peak, out = _measure(argv, env)
        times.append(t)
        codes.append(code)
        rss.append(peak)
    return {
        "label": label,
        "median_s": statistics.median(times),
        "runs": times,
        "exit_codes": sorted(set(codes)),
        "peak_rss_mib": max(rss) / 1024,
    }


def _measure(argv: list[str], env: dict | None) -> tuple[float, int, int, str]:
    """Wall time and the child's own peak RSS (wait4), without a shell in between."""
    took, code, usage, out = measured(argv, env)
    return took, code, usage.ru_maxrss, out


def measured(argv: list[str], env: dict | None = None, cwd: Path = ROOT):
    """(wall time, exit code, the resources of the child and its children, output) of
    ARGV in CWD (wait4), without a shell in between."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - start
    return took, os.waitstatus_to_exitcode(status), usage, out.decode(errors="replace")


def snapshot_ssh(twin) -> list[str]:
    """One plain ssh running exactly the remote script of remedy's HostSnapshot."""
    s = from_host_data(twin.name, twin.inventory_data())
    command = HostSnapshot().command(**s.snapshot_kwargs())
    script = StringCommand(command).get_raw_value()
    return [*twin.ssh_argv(), shlex.join([HostSnapshot.shell_executable, "-c", script])]


def ansible_peer(twins, workdir: Path) -> tuple[list[str], dict]:
    ansible = BIN / "ansible-playbook"
    if not ansible.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "ansible-core>=2.16"], check=True
        )
    lines = ["[twins]"]
    for t in twins:
        d = t.inventory_data()
        lines.append(
            f"{t.name} ansible_host=127.0.0.1 ansible_port={d['ssh_port']} ansible_user=root "
            f"ansible_ssh_private_key_file={d['ssh_key']} server_url={d['server_url']} "
            f"ansible_ssh_common_args='-o UserKnownHostsFile={d['ssh_known_hosts_file']} "
            "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes'"
        )
    inventory = workdir / "ansible-inventory.ini"
    inventory.write_text("\n".join(lines) + "\n")
    env = {"ANSIBLE_CONFIG": str(ROOT / "bench/peers/ansible/ansible.cfg")}
    argv = [str(ansible), "-i", str(inventory), str(ROOT / "bench/peers/ansible/check.yml")]
    return argv, env


def converge_check(names: list[str]) -> list[str]:
    argv = [str(BIN / "remedy"), "converge", "inventory/twin.py", "--check", "--json"]
    for n in names:
        argv += ["--limit", n]
    return argv


def round_trips(twin) -> int:
    argv = [str(BIN / "pyinfra"), "-y", "--debug", "--limit", twin.name, "inventory/twin.py",
            "deploys/converge.py"]  # fmt: skip
    _, code, _, out = _measure(argv, None)
    assert code == 0, out[-2000:]
    return out.count("Command exit status")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--fleet", default="1,2,4,8")
    parser.add_argument("--json", default=str(ROOT / "bench/results/converge.json"))
    args = parser.parse_args()
    sizes = [int(n) for n in args.fleet.split(",")]
    quiet = lambda _m: None  # noqa: E731
    names = [f"bench-f{i}" for i in range(max(sizes))]
    workdir = Path("/tmp/remedy-bench")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    results: dict = {"machine": platform.node(), "cpus": os.cpu_count(), "runs": args.runs}
    try:
        twins = [machine.up(n, progress=quiet) for n in names]
        for t in twins:  # every twin in sync: converge once
            _, code, _, out = _measure(
                [str(BIN / "remedy"), "converge", "inventory/twin.py", "--limit", t.name], None
            )
            assert code == 0, out[-3000:]
        one = twins[0]
        peers = [
            timed_runs("remedy converge --check", converge_check([one.name]), args.runs),
            timed_runs(
                "trivial pyinfra deploy",
                [
                    str(BIN / "pyinfra"),
                    "-y",
                    "--limit",
                    one.name,
                    "inventory/twin.py",
                    "bench/trivial_deploy.py",
                ],  # fmt: skip
                args.runs,
            ),
            timed_runs("one ssh: the snapshot script", snapshot_ssh(one), args.runs),
        ]
        argv, env = ansible_peer([one], workdir)
        peers.append(timed_runs("ansible-playbook peer", argv, args.runs, env))
        results["single"] = peers
        results["round_trips_no_drift_converge"] = round_trips(one)
        results["fleet"] = [
            timed_runs(f"converge --check x{n}", converge_check(names[:n]), args.runs)
            for n in sizes
        ]
    finally:
        for n in names:
            machine.down(n, progress=quiet)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(render(results))
    return 0


def render(r: dict) -> str:
    single = {p["label"]: p for p in r["single"]}
    remedy = single["remedy converge --check"]["median_s"]
    trivial = single["trivial pyinfra deploy"]["median_s"]
    ansible = single["ansible-playbook peer"]["median_s"]
    lines = [
        f"one twin, no drift (median of {r['runs']} after a warm-up; {r['cpus']} CPUs)",
        f"{'':34}{'median s':>10}{'vs remedy':>11}{'peak MiB':>10}",
    ]
    for p in r["single"]:
        lines.append(
            f"{p['label']:34}{p['median_s']:10.2f}{p['median_s'] / remedy:10.2f}x"
            f"{p['peak_rss_mib']:10.0f}"
        )
    lines += [
        "",
        f"remedy / trivial pyinfra:  {remedy / trivial:.2f}x  (target <= 1.2x)",
        f"ansible / remedy:          {ansible / remedy:.2f}x  (target >= 4x)",
        f"round trips, no-drift deploys/converge.py: {r['round_trips_no_drift_converge']} "
        "(target <= 2)",
        "",
        f"fleet: remedy converge --check{'':4}{'median s':>10}{'vs one':>9}{'peak MiB':>10}",
    ]
    base = r["fleet"][0]["median_s"]
    for p in r["fleet"]:
        lines.append(
            f"  {p['label']:32}{p['median_s']:10.2f}{p['median_s'] / base:8.2f}x"
            f"{p['peak_rss_mib']:10.0f}"
        )
    lines.append("  (target: 8 twins in <= 2x the time of one)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
