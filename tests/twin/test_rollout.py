"""Issue 30 on twins: a fleet rollout with a restart budget, a canary and rotation hooks.

Each twin's own journal says when its server stopped (the double's "Received signal
15") and when it answered its first tool call after it started again (the verify): a
host's restart window. Fresh twins serve hermes, so each needs a restart now.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import PROJECT, fleet_failure, owner_git, unit_props

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
KNOBS = "/etc/nixos-twin"  # the twin's switch-to-configuration reads its faults here


def fleet_inventory(path, twins, **data) -> str:
    hosts = [(t.name, {**t.inventory_data(), **data}) for t in twins]
    path.write_text(f"hosts = {hosts!r}\n")
    return str(path)


def converge(inventory: str, *argv: str, log=None) -> tuple[int, dict, float]:
    """``remedy converge INVENTORY --json --restart now ARGV``: (exit code, its document,
    its wall time)."""
    env = {**os.environ, **({"REMEDY_AUDIT_LOG": str(log)} if log else {})}
    started = time.monotonic()
    proc = subprocess.run(
        ["remedy", "converge", inventory, "--json", "--restart", "now", *argv],
        capture_output=True, text=True, cwd=PROJECT, timeout=1500, env=env,
    )  # fmt: skip
    took = time.monotonic() - started
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stderr[-3000:]}") from None
    doc["stderr_tail"] = proc.stderr[-4000:]  # what pyinfra logged, for a failure's message
    return proc.returncode, doc, took


def restart_window(twin, since: float) -> tuple[float, float] | None:
    """(the server's stop, its first tool call answered after it started again) from the
    twin's journal after SINCE (a time.time()), or None: it did not restart."""
    out = twin.exec(["journalctl", "-q", "-u", UNIT, "-o", "json"], check=False).stdout
    stop = started = None
    for line in out.splitlines():
        entry = json.loads(line)
        at, message = int(entry["__REALTIME_TIMESTAMP"]) / 1e6, entry.get("MESSAGE")
        if at < since or not isinstance(message, str):
            continue
        if stop is None and "Received signal 15" in message:
            stop = at
        elif stop is not None and started is None and "Application startup complete" in message:
            started = at
        elif started is not None and "POST /v1/chat/completions" in message:
            return stop, at
    assert stop is None, f"{twin.name} stopped at {stop} and never answered a tool call again"
    return None


def most_at_once(windows) -> int:
    """The most restart windows open at one moment."""
    edges = sorted([(s, 1) for s, _ in windows] + [(e, -1) for _, e in windows])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def verdicts(doc) -> dict[str, str]:
    return {h["host"]: h["verdict"] for h in doc["hosts"]}


def test_one_restart_at_a_time_the_canary_first_and_all_end_durable(make_twin, tmp_path):
    twins = [make_twin() for _ in range(4)]
    inventory = fleet_inventory(tmp_path / "fleet.py", twins, max_restarting=1, canary=1)
    since = time.time()
    code, doc, _took = converge(inventory)
    assert code == 0, fleet_failure(doc, twins)
    windows = {t.name: restart_window(t, since) for t in twins}
    assert None not in windows.values(), windows
    assert most_at_once(windows.values()) == 1, windows
    canary = twins[0].name
    assert [r["host"] for r in doc["rollout"]["hosts"] if r["canary"]] == [canary]
    assert all(windows[canary][1] < w[0] for n, w in windows.items() if n != canary), windows
    for host in doc["hosts"]:  # read after the run: healthy and durable
        assert host["exit_code"] == 0 and host["verdict"] == "healthy and durable", host
        assert host["rollout"]["outcome"] == "converged" and host["rollout"]["restarts"] == 1


def test_a_canary_that_breaks_stops_the_rollout_and_the_others_change_nothing(make_twin, tmp_path):
    twins = [make_twin() for _ in range(4)]
    canary, others = twins[0], twins[1:]
    # the serving unit fails when the switch activates the new system: the canary's
    # durable path breaks (it rolls back onto the /run fallback)
    canary.exec(["mkdir", "-p", KNOBS])
    canary.exec(["tee", f"{KNOBS}/fail-units"], input=f"{UNIT}\n")

    def state(t) -> tuple:
        profile = t.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout
        return owner_git(t, "rev-parse", "HEAD").stdout, profile, unit_props(t)["MainPID"]

    before = {t.name: state(t) for t in others}
    inventory = fleet_inventory(tmp_path / "fleet.py", twins)
    since = time.time()
    code, doc, _took = converge(inventory)
    assert code != 0, verdicts(doc)
    stopped = doc["rollout"]["stopped"]
    assert stopped.startswith(f"the rollout stopped after the canary {canary.name} failed ("), (
        stopped
    )
    assert "tenstorrent-serving.service" in stopped, stopped  # and why
    by_host = {h["host"]: h for h in doc["hosts"]}
    assert by_host[canary.name]["rollout"]["outcome"] == "failed"
    for t in others:
        assert state(t) == before[t.name], t.name  # checkout, profile, server: untouched
        assert restart_window(t, since) is None
        assert by_host[t.name]["rollout"]["outcome"] == "not started"
        assert f"not started: {stopped}" in by_host[t.name]["verdict"]


def test_a_budget_of_two_restarts_two_at_a_time(make_twin, tmp_path):
    twins = [make_twin() for _ in range(4)]
    inventory = fleet_inventory(tmp_path / "fleet.py", twins, max_restarting=2)
    since = time.time()
    code, doc, took = converge(inventory)
    assert code == 0, fleet_failure(doc, twins)
    windows = [restart_window(t, since) for t in twins]
    assert None not in windows
    # at most two, and two did restart together (after the canary, alone)
    assert most_at_once(windows) == 2, windows
    waves = sorted(r["wave"] for r in doc["rollout"]["hosts"])
    assert waves == [1, 2, 2, 3], waves
    print(f"4 twins, max_restarting 2: {took:.1f}s")


ROTATE = """
import sys, time
which, host, log, failing = sys.argv[1:5]
with open(log, "a") as f:
    f.write(f"{time.time():.3f} {which} {host}\\n")
sys.exit(1 if which == "out" and host == failing else 0)
"""


def test_rotation_hooks_run_around_each_restart_and_a_failing_one_keeps_the_host(
    make_twin, tmp_path
):
    hooked, refused = make_twin(), make_twin()
    script, log = tmp_path / "rotate.py", tmp_path / "rotation.log"
    script.write_text(ROTATE)
    hook = [sys.executable, str(script)]
    data = {
        "rotation_out": [*hook, "out", "{host}", str(log), refused.name],
        "rotation_in": [*hook, "in", "{host}", str(log), refused.name],
    }
    pid = unit_props(refused)["MainPID"]
    inventory = fleet_inventory(tmp_path / "fleet.py", [hooked, refused], **data)
    since = time.time()
    code, doc, _took = converge(inventory)
    calls = [line.split() for line in log.read_text().splitlines()]
    assert [(which, host) for _, which, host in calls] == [
        ("out", hooked.name), ("in", hooked.name), ("out", refused.name),
    ], calls  # fmt: skip
    stop, verified = restart_window(hooked, since)
    assert float(calls[0][0]) < stop and verified < float(calls[1][0]), (calls, stop, verified)
    # the refused host: not restarted, and the report says why
    assert unit_props(refused)["MainPID"] == pid
    assert restart_window(refused, since) is None
    by_host = {h["host"]: h for h in doc["hosts"]}
    said = by_host[refused.name]["verdict"]
    assert "not started: rotation_out " in said and "exited 1" in said, said
    assert said.endswith("not restarted this run"), said
    assert by_host[hooked.name]["exit_code"] == 0, by_host[hooked.name]["verdict"]
    assert code == by_host[refused.name]["exit_code"] != 0  # it still has the drift
