"""Issue 32 item 3: the drain's reading of vLLM's /metrics (server_load, in
remedy/host/server_load.sh, which the drain step's program runs), run by this machine's
real sh, curl and awk against a local HTTP server that answers as the cases say."""

from __future__ import annotations

import http.server
import subprocess
import threading

import pytest

from remedy import host

GAUGES = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{{engine="0",model_name="m"}} {r}\n'
    'vllm:num_requests_running{{engine="1",model_name="m"}} 0.0\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{{engine="0",model_name="m"}} {w}\n'
)
PROCESS = "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"


class Answer(http.server.BaseHTTPRequestHandler):
    status, body = 200, ""

    def do_GET(self):  # noqa: N802 - http.server's name
        data = self.server.answer[1].encode()
        self.send_response(self.server.answer[0])
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    httpd.answer = (200, "")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def server_load(url: str) -> tuple[str, str]:
    """server_load's one line, as (its first word, the rest): ``idle``, ``busy R W``,
    ``open N PORT WHY``, ``unreachable CODE`` or ``unknown WHY``."""
    program = host.text("server_load.sh") + 'server_load "$1"'
    proc = subprocess.run(
        ["sh", "-c", program, "sh", url], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc
    word, _, rest = proc.stdout.strip().partition(" ")
    return word, rest


def drain(httpd, status: int, body: str) -> tuple[str, str]:
    httpd.answer = (status, body)
    return server_load(f"http://127.0.0.1:{httpd.server_address[1]}")


def in_flight(found: tuple[str, str]) -> tuple[int, int]:
    """(running, waiting) of a ``busy`` line; none when idle."""
    if found[0] == "idle":
        return 0, 0
    assert found[0] == "busy", found
    running, waiting = found[1].split()
    return int(running), int(waiting)


NO_GAUGE = "/metrics has no vllm:num_requests_running or _waiting gauge"


@pytest.mark.parametrize(
    "status,body,outcome,detail",
    [
        (200, PROCESS + GAUGES.format(r="0.0", w="0.0"), "idle", ""),
        (500, "Internal Server Error", "unknown", "/metrics answered HTTP 500"),
        (200, GAUGES.format(r="NaN", w="0.0"), "unknown",
         "/metrics has a gauge that is not a number"),
    ],
)  # fmt: skip
def test_an_unreadable_load_is_unknown_never_idle(server, status, body, outcome, detail):
    assert drain(server, status, body) == (outcome, detail)


@pytest.mark.parametrize(
    "status,body,why",
    [
        # vLLM started with --disable-log-stats: 200, and no vllm gauge at all
        (200, PROCESS, NO_GAUGE),
        (200, "<html>a proxy's page</html>", NO_GAUGE),
    ],
)  # fmt: skip
def test_without_gauges_the_connections_open_to_the_port_count(server, status, body, why):
    """No request gauge: what is in flight is what the server's open connections carry,
    counted on the host by ss (issue 43 E1), the drain's own read not among them."""
    import socket

    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}"
    assert drain(server, status, body) == ("open", f"0 {port} {why.format(url=url)}")
    with socket.create_connection(("127.0.0.1", port)) as held:  # a request not yet sent
        held.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert drain(server, status, body) == ("open", f"1 {port} {why.format(url=url)}")
    # another port's connection is not the server's
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with socket.create_connection(other.server_address):
            assert drain(server, status, body)[1].startswith("0 ")
    finally:
        other.shutdown()


def test_a_404_for_metrics_is_not_vllm_so_the_load_is_unknown(server):
    """vLLM mounts /metrics always (with --disable-log-stats too): a 404 is something
    else answering on the port, whose load remedy cannot read; never idle, and no count
    of connections stands in for it (issue 44 item 5)."""
    import socket

    url = f"http://127.0.0.1:{server.server_address[1]}"
    why = f"{url}/metrics answers 404: not vLLM's server (vLLM always serves /metrics)"
    assert drain(server, 404, "Not Found") == ("unknown", why)
    with socket.create_connection(server.server_address) as held:
        held.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert drain(server, 404, "Not Found") == ("unknown", why)


ENGINE_IDLE = "vLLM's gauges (the engine's) read 0 while responses are open"


def test_gauges_at_0_are_idle_only_when_no_connection_is_busy(server):
    """vLLM's gauges count the engine's requests only (issue 44 item 5): with them at 0
    a connection that is receiving or sending (a response still streaming out) keeps
    the server busy; one quiet for 5 s (a keep-alive connection between requests) does
    not."""
    import socket
    import time

    port = server.server_address[1]
    page = GAUGES.format(r="0.0", w="0.0")
    assert drain(server, 200, page) == ("idle", "")
    with socket.create_connection(("127.0.0.1", port)) as held:
        held.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")  # its bytes just now
        assert drain(server, 200, page) == ("open", f"1 {port} {ENGINE_IDLE}")
        time.sleep(6)  # quiet past the 5 s keep-alive (a set-up, not an assert on time)
        assert drain(server, 200, page) == ("idle", "")
        # the engine's count still decides while it is not 0
        assert drain(server, 200, GAUGES.format(r="1.0", w="0.0")) == ("busy", "1 0")


def test_requests_in_flight_are_summed_over_every_engine_and_state(server):
    found = drain(server, 200, GAUGES.format(r="2.0", w="1.0"))
    assert found == ("busy", "2 1") and in_flight(found) == (2, 1)


def test_a_server_that_does_not_answer_is_unreachable():
    assert server_load("http://127.0.0.1:9")[0] == "unreachable"


# Prometheus' text format allows what a column-counting reader gets wrong: a sample
# timestamp after the value, and label values with spaces, braces and escaped quotes.
ODD_PAGES = [
    'vllm:num_requests_running{model_name="m"} 2 1733150000000\n'
    'vllm:num_requests_waiting{model_name="m"} 1 1733150000000\n',
    'vllm:num_requests_running{model_name="a b} c",engine="0"} 3.0\n'
    'vllm:num_requests_waiting{model_name="say \\"hi\\" }",engine="0"} 0\n',
    "vllm:num_requests_running 1\nvllm:num_requests_waiting\t4e0\n",
    'vllm:num_requests_running{engine="0",model_name="m"} 0.0 17\n'
    'vllm:num_requests_running{engine="1",model_name="m"} 2.0 17\n'
    'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0 17\n',
]


def by_the_real_parser(page: str) -> tuple[int, int]:
    """The same sums, by prometheus_client's parser of the exposition format."""
    from prometheus_client.parser import text_string_to_metric_families

    sums = {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name in sums:
                sums[sample.name] += sample.value
    return int(sums["vllm:num_requests_running"]), int(sums["vllm:num_requests_waiting"])


@pytest.mark.parametrize("page", ODD_PAGES)
def test_the_host_side_reading_sums_as_prometheus_client_parses(server, page):
    found = drain(server, 200, page)
    assert in_flight(found) == by_the_real_parser(page), found
    assert found[0] == ("busy" if sum(in_flight(found)) else "idle")
