"""Issue 16 on twins: restart windows and waiting for an idle server.

The seed state (the emergency override) needs only a `window` restart: the merge
batch guard is missing live and the stale override waits. Outside a window the plan
names the window's start; in one, the run waits for the request in flight, then
restarts once."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from tests.conftest import (
    PROJECT,
    HeldRequest,
    deploy_until,
    out_of_sync,
    run_deploy,
    server_starts,
    start_deploy,
    status_settings,
    twin_inventory,
    unit_props,
)

pytestmark = pytest.mark.twin


def out_of(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


WAITING = "waiting up to 300s for an idle server"  # the drain, when it begins to wait


def drained_deploy(twin, held: HeldRequest, out, *extra: str, audit_log) -> tuple[int, str]:
    """The converge deploy with a window restart and HELD in flight, HELD released once
    the run says its drain waits for it (an event, however slow the machine is to get
    there): (exit code, what the run said, on one line)."""
    proc = start_deploy(twin, "converge", out, "--data", "restart_window=always", *extra,
                        audit_log=audit_log, restart="window")  # fmt: skip
    try:
        deploy_until(proc, out, WAITING)
    finally:
        held.release()
    code = proc.wait(timeout=900)
    return code, " ".join(out.read_text(errors="replace").split())


def twin_clock(twin) -> datetime:
    return datetime.strptime(
        twin.exec(["date", "+%Y-%m-%dT%H:%M:%S%z"]).stdout.strip(), "%Y-%m-%dT%H:%M:%S%z"
    )


def test_a_window_restart_waits_for_its_window_then_for_the_request_in_flight(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    pid, starts = unit_props(twin)["MainPID"], server_starts(twin)

    # outside the window: --dry names when it opens, from the twin's own clock
    now = twin_clock(twin)
    start = (now.hour + 2) % 24
    window = f"{start:02d}:00-{(start + 1) % 24:02d}:00"
    dry = run_deploy(twin, "converge", "--dry", "--data", f"restart_window={window}",
                     restart=None)  # fmt: skip
    assert dry.returncode == 0, out_of(dry)[-3000:]
    said = out_of(dry)
    at = now.replace(hour=start, minute=0, second=0)
    at = at if start > now.hour else at + timedelta(days=1)
    opens = "in the next window, " + at.strftime("%a %Y-%m-%d %H:%M %z")
    assert f"QWEN36_MERGE_BATCH_GUARD, runtime_override take effect {opens}" in said, said[-3000:]
    assert "the server will not restart" in said
    assert unit_props(twin)["MainPID"] == pid  # --dry changed nothing

    # in the window (always), with one request in flight: it completes, then one restart
    # (held until the run's drain waits for it; the drain waits up to drain_timeout_s=300)
    held = HeldRequest(twin, hold_s=600)
    log = tmp_path / "a.jsonl"
    code, said = drained_deploy(twin, held, tmp_path / "deploy.out", audit_log=log)
    assert code == 0, said[-4000:]
    assert held.result() == "200"  # answered before the server stopped
    assert WAITING in said, said[-4000:]
    assert server_starts(twin) == starts + 1 and unit_props(twin)["MainPID"] != pid
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["details"]["restarts"] == 1 and record["details"]["requests_cut"] == 0
    assert record["details"]["restart_reasons"], record["details"]
    code, settings = status_settings(twin)
    assert code == 0 and out_of_sync(settings) == set(), settings


def converge_json(inventory, *argv: str, locks) -> tuple[int, dict]:
    """``remedy converge INVENTORY --json ARGV`` (its fleet lock in LOCKS): (exit code,
    its document)."""
    import os
    import subprocess

    env = {**os.environ, "REMEDY_LOCK_DIR": str(locks)}
    proc = subprocess.run(
        ["remedy", "converge", str(inventory), "--json", *argv],
        capture_output=True, text=True, cwd=PROJECT, timeout=900, env=env,
    )  # fmt: skip
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stderr[-3000:]}") from None


def without_gauges(twin) -> None:
    """TWIN's server started with --disable-log-stats, as vLLM then serves /metrics
    without the request gauges (vllm/v1/engine/async_llm.py)."""
    from remedy.twin import machine

    start = "/run/tt-serving-override/start"
    flag = "s/--enable-auto-tool-choice \\\\/&\\n  --disable-log-stats \\\\/"
    twin.exec(["sed", "-i", flag, start])
    assert "--disable-log-stats" in twin.exec(["cat", start]).stdout
    twin.exec(["systemctl", "restart", "tenstorrent-serving.service"])
    machine.wait_serving(twin)
    page = twin.exec(["curl", "-s", f"{twin.server_url}/metrics"]).stdout
    assert "vllm:num_requests_running" not in page


def test_a_metrics_page_without_gauges_waits_for_the_open_connections(make_twin, tmp_path):
    """Without the request gauges, a window restart waits until no connection is open
    to the server's port (issue 43 E1): the request in flight completes, then the
    server restarts once, cutting nothing."""
    twin = make_twin(with_emergency_override=True)
    without_gauges(twin)
    pid, starts = unit_props(twin)["MainPID"], server_starts(twin)

    # in flight at the drain, however slow the machine is to get there (the proof
    # builds first; held until the drain waits for it, which is up to 300 s)
    held = HeldRequest(twin, hold_s=600, gauge=False)
    log = tmp_path / "a.jsonl"
    code, said = drained_deploy(twin, held, tmp_path / "deploy.out", audit_log=log)
    assert code == 0, said[-4000:]
    assert WAITING in said, said[-4000:]
    assert held.result() == "200"  # it completed before the restart
    assert server_starts(twin) == starts + 1 and unit_props(twin)["MainPID"] != pid
    details = json.loads(log.read_text().splitlines()[-1])["details"]
    assert details["restarts"] == 1 and details["requests_cut"] == 0, details
    assert not details["restart_postponed"], details


def test_restart_now_without_gauges_restarts_an_idle_server(make_twin, tmp_path):
    """--restart now on a server without gauges, idle: the restart is now (issue 43 E2;
    it was postponed with exit 6 every time, and next: said --restart now again)."""
    twin = make_twin(with_emergency_override=True)
    without_gauges(twin)
    starts = server_starts(twin)
    log = tmp_path / "a.jsonl"
    short = twin_inventory(tmp_path / "inv.py", twin, audit_log=str(log))
    code, doc = converge_json(short, "--restart", "now", locks=tmp_path)
    (host,) = doc["hosts"]
    assert code == 0, json.dumps(host, indent=1)[-3000:]
    assert server_starts(twin) == starts + 1
    details = json.loads(log.read_text().splitlines()[-1])["details"]
    assert details["restarts"] == 1 and not details["restart_postponed"], details
    assert "--restart now" not in (host["next"] or ""), host["next"]


def test_restart_now_without_gauges_cuts_the_open_request_and_counts_it(make_twin, tmp_path):
    """--restart now without gauges, a request held past drain_timeout_s: the restart
    goes ahead after the bound and counts the request it cut (issue 43 E1: it recorded
    requests_cut 0)."""
    twin = make_twin(with_emergency_override=True)
    without_gauges(twin)
    held = HeldRequest(twin, hold_s=120, gauge=False)
    log = tmp_path / "a.jsonl"
    short = twin_inventory(tmp_path / "inv.py", twin, drain_timeout_s=3, audit_log=str(log))
    code, doc = converge_json(short, "--restart", "now", locks=tmp_path)
    (host,) = doc["hosts"]
    assert code == 0, json.dumps(host, indent=1)[-3000:]
    assert held.result() == "000"  # cut by the restart
    details = json.loads(log.read_text().splitlines()[-1])["details"]
    assert details["restarts"] == 1 and details["requests_cut"] == 1, details
    assert "requests cut 1" in host["outcome"], host["outcome"]
