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
    HeldRequest,
    out_of_sync,
    run_deploy,
    server_starts,
    status_settings,
    unit_props,
)

pytestmark = pytest.mark.twin


def out_of(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


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
    held = HeldRequest(twin, hold_s=8)
    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", "--data", "restart_window=always", audit_log=log,
                      restart="window")  # fmt: skip
    assert proc.returncode == 0, out_of(proc)[-4000:]
    assert held.result() == "200"  # answered before the server stopped
    assert "waiting up to 300s for an idle server" in out_of(proc)
    assert server_starts(twin) == starts + 1 and unit_props(twin)["MainPID"] != pid
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["details"]["restarts"] == 1 and record["details"]["requests_cut"] == 0
    assert record["details"]["restart_reasons"], record["details"]
    code, settings = status_settings(twin)
    assert code == 0 and out_of_sync(settings) == set(), settings


def test_a_metrics_page_without_gauges_is_load_unknown_and_a_window_restart_waits(
    make_twin, tmp_path
):
    """vLLM started with --disable-log-stats serves /metrics without the request gauges
    (vllm/v1/engine/async_llm.py): the load is unknown, never idle. A window restart with
    a request in flight is postponed (the request completes), and the run says why."""
    from remedy.twin import machine

    twin = make_twin(with_emergency_override=True)
    start = "/run/tt-serving-override/start"
    flag = "s/--enable-auto-tool-choice \\\\/&\\n  --disable-log-stats \\\\/"
    twin.exec(["sed", "-i", flag, start])
    assert "--disable-log-stats" in twin.exec(["cat", start]).stdout
    twin.exec(["systemctl", "restart", "tenstorrent-serving.service"])
    machine.wait_serving(twin)
    pid, starts = unit_props(twin)["MainPID"], server_starts(twin)

    held = HeldRequest(twin, hold_s=20, gauge=False)
    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", "--data", "restart_window=always", audit_log=log,
                      restart="window")  # fmt: skip
    said = out_of(proc)
    assert proc.returncode == 0, said[-4000:]
    assert "load unknown (/metrics has no vllm:num_requests_running or _waiting gauge)" in said
    assert "the window restart is postponed to the next run" in said, said[-4000:]
    assert held.result() == "200"  # not cut by a restart that called the server idle
    assert unit_props(twin)["MainPID"] == pid and server_starts(twin) == starts
    details = json.loads(log.read_text().splitlines()[-1])["details"]
    assert details["restarts"] == 0 and details["requests_cut"] == 0, details
    assert "load unknown" in (details["restart_postponed"] or ""), details
