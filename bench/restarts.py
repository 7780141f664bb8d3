"""Restarts per remediation, on twins: prints a table, writes JSON, asserts nothing.

    python bench/restarts.py [--json bench/results/restarts.json]

Each vLLM restart reloads a 27B model for minutes and cuts the requests in flight.
For three starting states (the seed's emergency override, a fresh twin with hermes
live, a converged twin) and two policies (the default, restart_window never; and
`--restart now`), one `deploys/converge.py` run on a new twin: how many times the
model server started again (its own "Application startup complete" lines), the
run's wall time and where the run left the host (`remedy status`'s exit code and
verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remedy.twin import machine  # noqa: E402

BIN = Path(sys.executable).parent
STATES = ("seed", "fresh", "converged")
POLICIES = {"default": [], "--restart now": ["--data", "restart=now"]}


def starts(twin) -> int:
    out = twin.exec(
        ["journalctl", "-q", "-u", "tenstorrent-serving.service", "-o", "cat"], check=False
    ).stdout
    return out.count("Application startup complete")


def converge(twin, extra: list[str]) -> tuple[float, int]:
    argv = [str(BIN / "pyinfra"), "-y", "--limit", twin.name, *extra, "inventory/twin.py",
            "deploys/converge.py"]  # fmt: skip
    t = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return time.monotonic() - t, proc.returncode


def status(twin) -> tuple[int, str]:
    proc = subprocess.run(
        [str(BIN / "remedy"), "status", "inventory/twin.py", "--limit", twin.name, "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    try:
        (host,) = json.loads(proc.stdout)["hosts"]
        return proc.returncode, host["verdict"]
    except (ValueError, KeyError):
        return proc.returncode, proc.stderr.strip()[-80:]


def one(state: str, policy: str) -> dict:
    name = f"bench-rs-{os.getpid()}"
    twin = machine.up(name, with_emergency_override=state == "seed", progress=lambda _m: None)
    try:
        if state == "converged":
            converge(twin, ["--data", "restart=now"])
        before = starts(twin)
        seconds, code = converge(twin, POLICIES[policy])
        restarts = starts(twin) - before
        exit_code, verdict = status(twin)
        return {
            "state": state,
            "policy": policy,
            "restarts": restarts,
            "run_s": round(seconds, 1),
            "run_exit": code,
            "status_exit": exit_code,
            "verdict": verdict,
        }
    finally:
        machine.down(name, progress=lambda _m: None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=str(ROOT / "bench/results/restarts.json"))
    args = parser.parse_args()
    rows = []
    for state in STATES:
        for policy in POLICIES:
            rows.append(one(state, policy))
            r = rows[-1]
            print(f"{r['state']:<10} {r['policy']:<14} restarts {r['restarts']}  "
                  f"run {r['run_s']:>5.1f}s  status {r['status_exit']}", flush=True)  # fmt: skip
    print()
    print(f"{'state':<10} {'policy':<14} {'restarts':>8} {'run s':>6} {'status':>6}  verdict")
    for r in rows:
        print(
            f"{r['state']:<10} {r['policy']:<14} {r['restarts']:>8} {r['run_s']:>6.1f} "
            f"{r['status_exit']:>6}  {r['verdict'][:30]}"
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    print(f"\nwritten to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
