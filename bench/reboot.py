"""``remedy reboot`` on twins (issue 46 item 3): prints figures, writes JSON, asserts
nothing.

    python bench/reboot.py [--keep] [--json bench/results/reboot.json]

1. Four twins up (bench-rb0 …) in production's state (the /run override), converged
   once: boot pending (exit 6).
2. A planned reboot of one twin; then of the four with max_restarting 1, then 2
   (`remedy reboot --now`, canary 1).
3. For each host: its downtime, from the last tool call answered parsed before to the
   first answered parsed after, as a client sees it (a probe from this machine every
   half second: remedy.core.readings.probe); for each run: its wall time.

Twins that already run are not touched: the benchmark's own are named bench-rb*, and
go at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remedy.core.readings import probe  # noqa: E402
from remedy.twin import fixtures, machine  # noqa: E402

WORK = Path("/tmp/remedy-bench-reboot")
quiet = lambda _m: None  # noqa: E731


class Prober:
    """The tool-call probe against one twin's server, every half second, from here:
    the times of its parsed answers."""

    def __init__(self, twin: machine.Twin):
        self.url, self.parsed, self._stop = twin.server_url, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        argv = probe.curl_argv(self.url, fixtures.SERVED_MODEL, timeout_s=5)
        while not self._stop.is_set():
            done = subprocess.run(argv, capture_output=True, text=True)
            result = probe.read_curl_output((done.stdout + "\n" + done.stderr).splitlines())
            if result.outcome == probe.PARSED:
                self.parsed.append(time.time())
            self._stop.wait(0.5)

    def downtime(self, since: float) -> tuple[float, float, float] | None:
        """(last parsed before, first parsed after, the gap): the longest gap between
        two parsed answers after SINCE (None: fewer than two answers)."""
        self._stop.set()
        self.thread.join()
        seen = [t for t in self.parsed if t >= since]
        gaps = [(b - a, a, b) for a, b in zip(seen, seen[1:], strict=False)]
        if not gaps:
            return None
        gap, a, b = max(gaps)
        return a, b, gap


def inventory(names: list[str], path: Path, **data) -> str:
    hosts = [(n, {**machine.load(n).inventory_data(), **data}) for n in names]
    path.write_text(f"hosts = {hosts!r}\n")
    return str(path)


def remedy(*argv: str) -> tuple[int, dict, float]:
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(WORK / "audit.jsonl"),
           "REMEDY_LOCK_DIR": str(WORK / "lock")}  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run([str(Path(sys.executable).parent / "remedy"), *argv, "--json"],
                          capture_output=True, text=True, cwd=ROOT, env=env)  # fmt: skip
    took = time.monotonic() - started
    try:
        return proc.returncode, json.loads(proc.stdout), took
    except ValueError:
        said = f"remedy {' '.join(argv)}: exit {proc.returncode}: {proc.stderr[-2000:]}"
        raise SystemExit(said) from None


def reboot_run(label: str, names: list[str], **data) -> dict:
    inv = inventory(names, WORK / f"{label}.py", **data)
    probers = {n: Prober(machine.load(n)) for n in names}
    time.sleep(2)  # a parsed answer before
    since = time.time()
    code, doc, took = remedy("reboot", inv, "--now")
    time.sleep(2)
    by_host = {h["host"]: h for h in doc["hosts"]}
    hosts = {}
    for name in names:
        down = probers[name].downtime(since - 2)
        hosts[name] = {
            "downtime_s": round(down[2], 1) if down else None,
            "remedy_downtime_s": by_host[name]["downtime_s"],
            "outcome": by_host[name]["outcome"],
        }
    print(f"{label}: exit {code}, wall {took:.1f}s")
    for name, h in hosts.items():
        down = "-" if h["downtime_s"] is None else f"{h['downtime_s']:.1f}s"
        print(f"  {name}: {h['outcome']}, down {down} (last parsed answer before to first "
              f"after)")  # fmt: skip
    return {"exit_code": code, "wall_s": round(took, 1), "hosts": hosts}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", action="store_true", help="leave the twins up")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "reboot.json"))
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "lock").mkdir(exist_ok=True)
    names = [f"bench-rb{i}" for i in range(4)]
    for name in names:
        machine.up(name, with_emergency_override=True, progress=quiet)
    try:
        code, _doc, took = remedy("converge", inventory(names, WORK / "all.py"))
        print(f"converge of 4 twins to boot pending: exit {code}, {took:.1f}s")
        out = {
            "one": reboot_run("one", names[:1]),
            "four_max1": reboot_run("four_max1", names, max_restarting=1),
            "four_max2": reboot_run("four_max2", names, max_restarting=2),
        }
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"written: {args.json}")
    finally:
        if not args.keep:
            for name in names:
                machine.down(name, progress=quiet)


if __name__ == "__main__":
    main()
