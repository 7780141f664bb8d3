"""Issue 44 item 5 on a twin: vLLM's gauges are the engine's counts
(vllm/v1/metrics/loggers.py at 005a810b, lines 188-203: vllm:num_requests_running,
"Number of requests in model execution batches", labelled model_name and engine). A
streamed response whose engine part is over still streams to its client with the gauges
at 0; the drain waits for it and the restart does not cut it. The double speaks HTTP/1.1
as vLLM's uvicorn does: a connection waits open for the next request
(VLLM_HTTP_TIMEOUT_KEEP_ALIVE); the drain counts it busy while it sent or received in
the last 5 s, idle once quiet for 5 s."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid

import pytest

from remedy import host
from remedy.twin import machine
from tests.conftest import (
    deploy_until,
    served_model,
    server_starts,
    start_deploy,
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
        self.twin = twin
        self.release_path = f"/run/remedy-double-release-{uuid.uuid4().hex}"
        body = json.dumps({
            "model": served_model(twin), "stream": True,
            "messages": [{"role": "user", "content": "Say hello."}],
            "remedy_double_hold_s": 3, "remedy_double_stream_tail_s": tail_s,
            "remedy_double_release": self.release_path,
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

    def release(self) -> None:
        """The rest of the answer at once (the double's remedy_double_release)."""
        self.twin.exec(["touch", self.release_path])

    def result(self) -> tuple[str, list[str]]:
        """(its HTTP code, its events' data)."""
        self.thread.join(600)
        stream, _, code = self.got["out"].rpartition("\n@@http ")
        return code, [e.removeprefix("data: ") for e in stream.split("\n\n") if e.strip()]


def test_the_drain_waits_for_a_stream_the_engine_is_done_with(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    pid, starts = unit_props(twin)["MainPID"], server_starts(twin)
    # streaming until the run's drain waits for it, however slow the machine is to get
    # there (the drain waits up to drain_timeout_s=300)
    stream = Stream(twin, tail_s=600)

    log = tmp_path / "a.jsonl"
    out = tmp_path / "deploy.out"
    proc = start_deploy(twin, "converge", out, "--data", "restart_window=always",
                        audit_log=log, restart="window")  # fmt: skip
    try:
        deploy_until(proc, out, "waiting up to 300s for an idle server")
    finally:
        stream.release()
    returncode = proc.wait(timeout=900)
    said = " ".join(out.read_text(errors="replace").split())
    assert returncode == 0, said[-4000:]
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


UNIT = "tenstorrent-serving.service"


def load(twin) -> str:
    """The drain's reading of the server on the twin (remedy/host/server_load.sh)."""
    program = host.text("server_load.sh") + '\nserver_load "$1"\n'
    return twin.exec(["sh", "-c", program, "sh", twin.server_url]).stdout.strip()


def keep_alive_client(twin):
    """An HTTP/1.1 client's connection to the twin's server (a pool's, a load balancer's)
    that asks for /v1/models and keeps the connection for a next request."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(twin.server_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    conn.request("GET", "/v1/models")
    resp = conn.getresponse()
    assert (resp.status, resp.version) == (200, 11) and not resp.will_close
    resp.read()
    return conn


def closed_by_server(conn, wait_s: float) -> bool:
    """Whether the server closed CONN within WAIT_S (the client sends nothing)."""
    conn.sock.settimeout(wait_s)
    try:
        return conn.sock.recv(1) == b""
    except TimeoutError:
        return False


def test_a_keep_alive_connection_quiet_for_5_s_is_idle_while_it_is_still_open(make_twin):
    """vLLM's uvicorn keeps a connection open after its response for the client's next
    request, up to VLLM_HTTP_TIMEOUT_KEEP_ALIVE (5 s), then closes it. Right after the
    response the drain counts the connection busy (gauges 0); quiet for 5 s it counts
    it idle, also when the server keeps it open longer (the variable set to 120). It
    failed with the HTTP/1.0 double: the connection closed with each response."""
    twin = make_twin()
    port = twin.server_url.rsplit(":", 1)[1]
    engine_idle = f"open 1 {port} vLLM's gauges (the engine's) read 0 while responses are open"
    conn = keep_alive_client(twin)
    assert load(twin) == engine_idle  # it answered just now: busy
    # uvicorn's timeout_keep_alive_handler: the server closes it (a cap, not a speed)
    assert closed_by_server(conn, 60), "the server never closed the quiet connection"
    conn.close()
    assert load(twin) == "idle"

    # a server that keeps connections open 120 s: quiet for 5 s is idle all the same
    twin.exec(["systemctl", "set-environment", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE=120"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    environ = twin.exec(["cat", f"/proc/{pid}/environ"]).stdout.split("\0")
    assert "VLLM_HTTP_TIMEOUT_KEEP_ALIVE=120" in environ
    conn = keep_alive_client(twin)
    said = [load(twin)]
    deadline = time.monotonic() + 60  # a cap, not a speed
    while said[-1] != "idle":
        assert time.monotonic() < deadline, said
        time.sleep(0.5)
        said.append(load(twin))
    assert said[0] == engine_idle and set(said[1:-1]) <= {engine_idle}, said
    assert not closed_by_server(conn, 0.5)  # idle, and the connection is still open
    conn.request("GET", "/health")  # the client's next request goes over it
    assert conn.getresponse().status == 200
    conn.close()
