"""Issue 44 item 5 on a twin: vLLM's gauges are the engine's counts
(vllm/v1/metrics/loggers.py: vllm:num_requests_running, "Number of requests in model
execution batches", labelled model_name and engine). A streamed response whose engine
part is over still streams to its client with the gauges at 0; the drain waits for it
and the restart does not cut it."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from tests.conftest import (
    run_deploy,
    served_model,
    server_starts,
    twin_inventory,
    unit_props,
)
from tests.twin.test_restarts import converge_json

pytestmark = pytest.mark.twin


def running(twin) -> int | None:
    page = twin.exec(["curl", "-s", f"{twin.server_url}/metrics"], check=False).stdout
    for line in page.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            assert 'engine="0"' in line and "model_name=" in line, line
            return int(float(line.rsplit(" ", 1)[1]))
    return None


def streaming(twin) -> bool:
    """The streamed request's curl still runs in the twin."""
    found = twin.exec(["pgrep", "-f", "remedy_double_stream_tail_s"], check=False)
    return found.returncode == 0


class Stream:
    """One streamed chat completion sent from inside the twin with curl: 3 s in the
    engine, then the rest of its answer over TAIL_S seconds with the gauges at 0.
    Returns once the engine is done with it and it still streams."""

    def __init__(self, twin, tail_s: float):
        body = json.dumps({
            "model": served_model(twin), "stream": True,
            "messages": [{"role": "user", "content": "Say hello."}],
            "remedy_double_hold_s": 3, "remedy_double_stream_tail_s": tail_s,
        })  # fmt: skip
        url = f"{twin.server_url}/v1/chat/completions"
        argv = [*twin.ssh_argv(), "curl", "-sN", "-w", "'\\n@@http %{http_code}'",
                "-H", "'Content-Type: application/json'", "-d", f"'{body}'", url]  # fmt: skip
        self.got = {}

        def send() -> None:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            self.got["out"] = done.stdout

        self.thread = threading.Thread(target=send)
        self.thread.start()
        deadline = time.monotonic() + 120  # caps, not speeds
        while (running(twin) or 0) < 1:
            assert time.monotonic() < deadline, "the streamed request never reached the engine"
            time.sleep(0.2)
        while running(twin) != 0:
            assert time.monotonic() < deadline, "the engine's part never ended"
            time.sleep(0.2)
        assert streaming(twin)  # the gauges read 0, the response still streams

    def result(self) -> tuple[str, list[str]]:
        """(its HTTP code, its events' data)."""
        self.thread.join(600)
        stream, _, code = self.got["out"].rpartition("\n@@http ")
        return code, [e.removeprefix("data: ") for e in stream.split("\n\n") if e.strip()]


def test_the_drain_waits_for_a_stream_the_engine_is_done_with(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    pid, starts = unit_props(twin)["MainPID"], server_starts(twin)
    # long enough that the run reaches its drain while it streams, however slow
    stream = Stream(twin, tail_s=90)

    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", "--data", "restart_window=always", audit_log=log,
                      restart="window")  # fmt: skip
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, said[-4000:]
    code, events = stream.result()
    assert code == "200" and events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"  # the whole answer came
    # the drain waited for it (the gauges read 0 all along), then one restart, no cut
    assert "waiting up to 300s for an idle server" in said, said[-4000:]
    assert server_starts(twin) == starts + 1 and unit_props(twin)["MainPID"] != pid
    details = json.loads(log.read_text().splitlines()[-1])["details"]
    assert details["restarts"] == 1 and details["requests_cut"] == 0, details


def test_restart_now_cuts_a_stream_the_engine_is_done_with_and_counts_it(make_twin, tmp_path):
    """--restart now, a stream still going past drain_timeout_s with the gauges at 0: the
    restart goes ahead after the bound and counts the response it cuts (it counted 0:
    the gauges said idle)."""
    twin = make_twin(with_emergency_override=True)
    stream = Stream(twin, tail_s=240)
    log = tmp_path / "a.jsonl"
    short = twin_inventory(tmp_path / "inv.py", twin, drain_timeout_s=3, audit_log=str(log))
    code, doc = converge_json(short, "--restart", "now", locks=tmp_path)
    (host,) = doc["hosts"]
    assert code == 0, json.dumps(host, indent=1)[-3000:]
    _code, events = stream.result()
    assert "[DONE]" not in events  # cut by the restart
    details = json.loads(log.read_text().splitlines()[-1])["details"]
    assert details["restarts"] == 1 and details["requests_cut"] == 1, details
    assert "requests cut 1" in host["outcome"], host["outcome"]
