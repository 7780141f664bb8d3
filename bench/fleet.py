"""The fleet in one pyinfra run (issues 34 and 30): prints figures, writes JSON, asserts
nothing.

    python bench/fleet.py [--sizes 1,4,16] [--runs 3] [--rollout-runs 1]
                          [--baseline DIR] [--json bench/results/fleet.json]

1. N twins up (bench-fl0 …), each converged once (then every run below has nothing
   to do).
2. For each size, over an inventory of the first n twins: a no-op `remedy converge`
   (apply) and `remedy converge --check`; the wall time and the CPU time (user +
   system, of remedy and every process it starts: wait4) of each run, and the CPU time
   of the whole machine meanwhile (the twins run here too: their SSH sessions, the
   snapshot script, the server's answer to the probe), medians of RUNS after one
   warm-up, every size and kind taken in turns (a ratio of runs minutes apart would
   measure the machine's drift too). Python keeps its bytecode, as an installation
   does, and the runs log to an audit log of the benchmark's own
   (/tmp/remedy-bench-fleet/audit.jsonl, new each time: a long log on this machine
   would weigh on every run). With --baseline DIR
   (a checkout of remedy from before, e.g. `git archive HEAD | tar -x -C DIR`), its
   no-op apply and its --check are measured the same way, in the same turns.
3. A rollout: four fresh twins, each needing a restart now (`--restart now`), with
   max_restarting 1 and 2 (canary 1): the wall time of the whole run.

Twins that already run are not touched: the benchmark's own are named bench-fl*.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.converge import measured  # noqa: E402
from remedy.twin import machine  # noqa: E402

BIN = Path(sys.executable).parent
WORK = Path("/tmp/remedy-bench-fleet")
quiet = lambda _m: None  # noqa: E731


def inventory(names: list[str], path: Path, **data) -> str:
    """An inventory file of the twins NAMES (in this order), DATA over their data."""
    hosts = [(n, {**machine.load(n).inventory_data(), **data}) for n in names]
    path.write_text(f"hosts = {hosts!r}\n")
    return str(path)


# As an installation runs: Python keeps its bytecode (here outside the checkout). The
# runs log to an audit log of their own, new for each benchmark: the figures do not
# depend on how long this machine's log has grown (remedy before 2026-12-03 read all of
# it after every run).
CACHED = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(WORK / "pycache"),
          "REMEDY_AUDIT_LOG": str(WORK / "audit.jsonl")}  # fmt: skip


def busy_s() -> float:
    """CPU seconds this machine has spent so far, every process (the twins too)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def measure(argv: list[str], cwd: Path = ROOT, env: dict | None = None) -> dict:
    """One run of ARGV: wall time, CPU time of it and its children, the whole machine's
    CPU time meanwhile (the twins' share: their SSH sessions, scripts, servers), exit."""
    before = busy_s()
    wall, code, usage, out = measured(argv, {**CACHED, **(env or {})}, cwd)
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "exit": code,
            "machine_cpu": busy_s() - before, "tail": out[-2000:]}  # fmt: skip


def summary(label: str, done: list[dict]) -> dict:
    """Medians of the runs DONE."""
    bad = [d for d in done if d["exit"] != 0]
    if bad:
        print(f"{label}: exit {bad[0]['exit']}:\n{bad[0]['tail']}", file=sys.stderr)
    return {
        "label": label,
        "wall_s": round(statistics.median(d["wall"] for d in done), 2),
        "cpu_s": round(statistics.median(d["cpu"] for d in done), 2),
        "machine_cpu_s": round(statistics.median(d["machine_cpu"] for d in done), 2),
        "exit_codes": sorted({d["exit"] for d in done}),
        "walls": [round(d["wall"], 3) for d in done],  # in the order they ran
    }


def interleaved(cases: dict[str, tuple[list[str], dict]], runs: int) -> dict[str, dict]:
    """Medians of RUNS runs of every case (label: argv, measure's keywords), taken in
    turns (one of each, RUNS times over) after one warm-up of each: the machine's speed
    drifts over minutes (other work, the twins settling), and a ratio of two figures
    taken minutes apart measures that drift too."""
    for argv, kwargs in cases.values():
        measure(argv, **kwargs)
    done: dict[str, list[dict]] = {label: [] for label in cases}
    for _ in range(runs):
        for label, (argv, kwargs) in cases.items():
            done[label].append(measure(argv, **kwargs))
    return {label: summary(label, runs_of) for label, runs_of in done.items()}


def remedy(inv: str, *argv: str) -> list[str]:
    return [str(BIN / "remedy"), "converge", inv, "--json", *argv]


def fleet_figures(names: list[str], sizes: list[int], runs: int, baseline: Path | None):
    """For each kind of run, every size in turns (see interleaved)."""
    cases: dict[str, tuple[list[str], dict]] = {}
    for n in sizes:
        inv = inventory(names[:n], WORK / f"fleet{n}.py")
        cases[f"no-op converge x{n}"] = (remedy(inv), {})
        cases[f"converge --check x{n}"] = (remedy(inv, "--check"), {})
        if baseline is not None:
            argv = [sys.executable, "-m", "remedy.cli.main", "converge", inv, "--json"]
            env = {"PYTHONPATH": str(baseline), "REMEDY_PROJECT": str(baseline)}
            cases[f"before: no-op x{n}"] = (argv, {"cwd": baseline, "env": env})
            cases[f"before: --check x{n}"] = ([*argv, "--check"], {"cwd": baseline, "env": env})
    got = interleaved(cases, runs)
    rows = []
    for n in sizes:
        row = {"twins": n, "apply": got[f"no-op converge x{n}"],
               "check": got[f"converge --check x{n}"]}  # fmt: skip
        if baseline is not None:
            row["baseline_apply"] = got[f"before: no-op x{n}"]
            row["baseline_check"] = got[f"before: --check x{n}"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def rollout_figures(runs: int) -> list[dict]:
    names = [f"bench-flr{i}" for i in range(4)]
    out = []
    for budget in (1, 2):
        walls = []
        for _ in range(runs):
            for n in names:  # fresh: each serves hermes and needs a restart now
                down(n)
                machine.up(n, progress=quiet)
            inv = inventory(names, WORK / "rollout.py", max_restarting=budget)
            done = measure(remedy(inv, "--restart", "now"))
            if done["exit"] != 0:
                print(f"rollout {budget}: exit {done['exit']}:\n{done['tail']}", file=sys.stderr)
            walls.append(done["wall"])
        out.append({"max_restarting": budget, "wall_s": round(statistics.median(walls), 1),
                    "runs": [round(w, 1) for w in walls]})  # fmt: skip
        print(json.dumps(out[-1]), flush=True)
    for n in names:
        down(n)
    return out


def down(name: str) -> None:
    """Twin NAME down, if it is up."""
    try:
        machine.down(name, progress=quiet)
    except machine.TwinError:
        pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rollout-runs", type=int, default=1)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--json", default=str(ROOT / "bench/results/fleet.json"))
    args = ap.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "audit.jsonl").unlink(missing_ok=True)
    result: dict = {"machine": platform.node(), "cpus": os.cpu_count(), "runs": args.runs}
    with converged_twins([f"bench-fl{i}" for i in range(max(sizes))]) as (names, took):
        result["converged_first_s"] = took
        result["fleet"] = fleet_figures(names, sizes, args.runs, args.baseline)
    if args.rollout_runs:
        result["rollout"] = rollout_figures(args.rollout_runs)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    return 0


@contextlib.contextmanager
def converged_twins(names: list[str]):
    """NAMES up and converged once (all at once: no canary, no budget); down at the end."""
    try:
        for n in names:
            machine.up(n, progress=quiet)
        argv = ["--restart", "now", "--canary", "0", "--max-restarting", str(len(names))]
        setup = measure(remedy(inventory(names, WORK / "all.py"), *argv))
        yield names, round(setup["wall"], 1)
    finally:
        for n in names:
            down(n)


def round_ratios(m: dict, base: dict) -> list[float]:
    """M's wall time over BASE's, for each round of the turns (the two ran a minute or
    less apart), sorted."""
    pairs = zip(m.get("walls", []), base.get("walls", []), strict=False)
    return sorted(a / b for a, b in pairs if b > 0)


def render(r: dict) -> str:
    head = (
        f"{'twins':>5} {'what':<22}{'wall s':>8}{'x one':>7}{'cpu s':>8}{'x one':>7}{'machine':>9}"
    )
    lines = [f"medians of {r['runs']} after a warm-up; {r['cpus']} CPUs", head]
    one = r["fleet"][0]
    for row in r["fleet"]:
        for key in ("apply", "check", "baseline_apply", "baseline_check"):
            if key not in row:
                continue
            m, base = row[key], one[key]
            lines.append(
                f"{row['twins']:>5} {m['label'].split(' x')[0]:<22}{m['wall_s']:8.2f}"
                f"{m['wall_s'] / base['wall_s']:6.2f}x{m['cpu_s']:8.2f}"
                f"{m['cpu_s'] / base['cpu_s']:6.2f}x{m['machine_cpu_s']:9.2f}"
            )
            if row is not one and (ratios := round_ratios(m, base)):
                mid = statistics.median(ratios)
                lines.append(f"{'':28}x one, round by round: {ratios[0]:.2f} to "
                             f"{ratios[-1]:.2f}, median {mid:.2f}")  # fmt: skip
    for ro in r.get("rollout", []):
        lines.append(f"rollout of 4 fresh twins, max_restarting {ro['max_restarting']}: "
                     f"{ro['wall_s']:.1f} s")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
