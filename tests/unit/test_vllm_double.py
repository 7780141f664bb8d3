"""Tests for the vLLM double: a real subprocess on 127.0.0.1, real HTTP via urllib."""

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

DOUBLE = Path(__file__).resolve().parents[2] / "remedy" / "twin" / "files" / "vllm_double.py"
MODEL = "Qwen/Qwen3-32B"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
WEATHER_REQUEST = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [WEATHER_TOOL],
    "tool_choice": "auto",
}
WEATHER_XML = (
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
)
AUTO_ERROR = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)
CALL_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]{32}$")
MARKERS = ("<tool_call>", "<function=")


def load_module():
    spec = importlib.util.spec_from_file_location("vllm_double", DOUBLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vd = load_module()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Double:
    def __init__(self, proc, port, out, err, mode_file):
        self.proc, self.port, self.out, self.err = proc, port, out, err
        self.mode_file = mode_file  # the test knob (/var/lib/vllm-double/mode in the twin)
        self.base = f"http://127.0.0.1:{port}"

    def weather(self, model=MODEL):
        """One field-notes tool request: (status, message, finish_reason)."""
        status, body = self.json("/v1/chat/completions", {**WEATHER_REQUEST, "model": model})
        return (status, *message_of(body)) if status == 200 else (status, body, None)

    def request(self, path, body=None, raw=None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read()

    def json(self, path, body=None, raw=None):
        status, headers, payload = self.request(path, body, raw)
        assert headers["Content-Type"] == "application/json"
        return status, json.loads(payload)

    def wait_ready(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"double exited: {self.err.read_text()}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("double did not become ready in time")


@pytest.fixture
def start_double(request, tmp_path):
    procs = []

    def start(*args, env=None, load="0.3", wait=True):
        port = free_port()
        out, err = tmp_path / f"out{len(procs)}", tmp_path / f"err{len(procs)}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("QWEN36_")}
        mode_file = tmp_path / f"mode{len(procs)}"
        full_env["VLLM_DOUBLE_MODE_FILE"] = str(mode_file)
        full_env.update(env or {})
        cmd = [sys.executable, str(DOUBLE), "serve", MODEL, "--port", str(port)]
        cmd += ["--load-seconds", load, *args]
        with out.open("wb") as fout, err.open("wb") as ferr:
            proc = subprocess.Popen(cmd, stdout=fout, stderr=ferr, env=full_env)
        procs.append(proc)
        double = Double(proc, port, out, err, mode_file)
        if wait:
            double.wait_ready()
        return double

    def stop():
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)

    request.addfinalizer(stop)
    return start


def message_of(body):
    return body["choices"][0]["message"], body["choices"][0]["finish_reason"]


# ------------------------------------------------------------ over HTTP


def test_qwen3_xml_parses_the_field_notes_request(start_double):
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    status, body = double.json("/v1/chat/completions", WEATHER_REQUEST)
    assert status == 200
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert re.match(r"^chatcmpl-[0-9a-f]+$", body["id"])
    message, finish = message_of(body)
    assert message["content"] is None
    assert finish == "tool_calls"
    assert len(message["tool_calls"]) == 1
    call = message["tool_calls"][0]
    assert CALL_ID.match(call["id"]) and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])
    assert args == {"city": "Paris", "days": 3}
    assert type(args["days"]) is int
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def test_qwen3_xml_types_arguments_from_schema(start_double):
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    props = {
        "ratio": {"type": "number"},
        "dry_run": {"type": "boolean"},
        "hosts": {"type": "array", "items": {"type": "string"}},
        "opts": {"type": "object"},
    }
    tool = {"type": "function", "function": {"name": "tune", "parameters": {"properties": props}}}
    request = {"messages": [{"role": "user", "content": "tune it"}], "tools": [tool]}
    status, body = double.json("/v1/chat/completions", request)
    assert status == 200
    message, finish = message_of(body)
    assert finish == "tool_calls"
    args = json.loads(message["tool_calls"][0]["function"]["arguments"])
    assert args == {"ratio": 1.5, "dry_run": True, "hosts": [], "opts": {}}
    assert type(args["ratio"]) is float and args["dry_run"] is True


def test_hermes_silently_drops_qwen3_xml_tool_calls(start_double):
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    status, body = double.json("/v1/chat/completions", WEATHER_REQUEST)
    assert status == 200
    message, finish = message_of(body)
    assert message["tool_calls"] == []
    assert "<function=get_weather>" in message["content"]
    assert message["content"] == WEATHER_XML
    assert finish == "stop"


def test_auto_tool_choice_without_flags_is_rejected(start_double):
    double = start_double()
    status, body = double.json("/v1/chat/completions", WEATHER_REQUEST)
    assert status == 400
    assert body == {
        "object": "error",
        "message": AUTO_ERROR,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    # tool_choice absent with tools present means "auto" too
    request = {k: v for k, v in WEATHER_REQUEST.items() if k != "tool_choice"}
    assert double.json("/v1/chat/completions", request) == (400, body)


def test_parser_without_enable_auto_tool_choice_is_rejected(start_double):
    double = start_double("--tool-call-parser", "qwen3_xml")
    status, body = double.json("/v1/chat/completions", WEATHER_REQUEST)
    assert (status, body["message"]) == (400, AUTO_ERROR)


def test_plain_chat_without_tools(start_double):
    double = start_double()
    request = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]}
    status, body = double.json("/v1/chat/completions", request)
    assert status == 200
    message, finish = message_of(body)
    assert message["role"] == "assistant" and message["content"] == "Hello from the double."
    assert message["tool_calls"] == [] and message["reasoning_content"] is None
    assert finish == "stop"


def test_non_auto_tool_choices_bypass_the_parser(start_double):
    # "required"/named use guided decoding in vLLM: parsed even with hermes, no flags needed.
    double = start_double()
    other = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
    for choice, name in [
        ("required", "get_weather"),
        ({"type": "function", "function": {"name": "get_time"}}, "get_time"),
    ]:
        request = {**WEATHER_REQUEST, "tools": [WEATHER_TOOL, other], "tool_choice": choice}
        status, body = double.json("/v1/chat/completions", request)
        message, finish = message_of(body)
        assert (status, finish, message["content"]) == (200, "tool_calls", None)
        assert [c["function"]["name"] for c in message["tool_calls"]] == [name]
    status, body = double.json("/v1/chat/completions", {**WEATHER_REQUEST, "tool_choice": "none"})
    message, finish = message_of(body)
    assert (status, finish, message["tool_calls"]) == (200, "stop", [])
    assert message["content"] == "Hello from the double."


def is_prose(message, finish):
    return (
        not message.get("tool_calls")
        and finish == "stop"
        and not any(mark in (message.get("content") or "") for mark in MARKERS)
    )


def test_rotation_prose_every_fourth_and_paris_france_every_other(start_double):
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    kinds = []
    for _ in range(8):
        status, message, finish = double.weather()
        assert status == 200
        if is_prose(message, finish):
            assert message["tool_calls"] == []
            assert message["content"].startswith("I can't check live weather, but Paris")
            kinds.append("prose")
            continue
        assert finish == "tool_calls" and message["content"] is None
        [call] = message["tool_calls"]
        assert CALL_ID.match(call["id"])
        kinds.append(json.loads(call["function"]["arguments"])["city"])
    assert kinds == ["Paris", "Paris, France", "Paris", "prose"] * 2
    assert not any(a == b == "prose" for a, b in zip(kinds, kinds[1:], strict=False))


def test_hermes_rotation_keeps_raw_tool_call_text_except_in_prose(start_double):
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    answers = [double.weather() for _ in range(4)]
    for status, message, finish in answers[:3]:
        assert (status, finish, message["tool_calls"]) == (200, "stop", [])
        assert message["content"].startswith("<tool_call>\n<function=get_weather>")
    assert "\nParis, France\n" in answers[1][1]["content"]
    status, message, finish = answers[3]
    assert status == 200 and is_prose(message, finish)


def test_mode_file_is_read_on_every_request(start_double):
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    double.mode_file.write_text("prose\n")
    for _ in range(3):
        status, message, finish = double.weather()
        assert status == 200 and is_prose(message, finish)
    double.mode_file.write_text("tools")
    assert all(double.weather()[1]["tool_calls"] for _ in range(5))  # turns 4..8, no prose
    double.mode_file.write_text("normal")
    status, message, finish = double.weather()  # turn 9: plain
    assert json.loads(message["tool_calls"][0]["function"]["arguments"])["city"] == "Paris"
    double.weather(), double.weather()  # turns 10, 11
    assert is_prose(*double.weather()[1:])  # turn 12
    double.mode_file.unlink()
    assert double.weather()[1]["tool_calls"]  # turn 13: default rotation


def test_served_model_name_is_the_only_model(start_double):
    double = start_double(
        "--served-model-name",
        "qwen3.6-27b-tt",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "qwen3_xml",
    )
    [card] = double.json("/v1/models")[1]["data"]
    assert (card["id"], card["root"]) == ("qwen3.6-27b-tt", MODEL)
    status, body, _ = double.weather(model=MODEL)
    assert status == 404
    assert body == {
        "object": "error",
        "message": f"The model `{MODEL}` does not exist.",
        "type": "NotFoundError",
        "param": None,
        "code": 404,
    }
    status, message, finish = double.weather(model="qwen3.6-27b-tt")
    assert (status, finish) == (200, "tool_calls")


def test_unknown_model_and_bad_requests(start_double):
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    status, body = double.json("/v1/chat/completions", {**WEATHER_REQUEST, "model": "gpt-4"})
    assert status == 404 and body["message"] == "The model `gpt-4` does not exist."
    status, body = double.json("/v1/chat/completions", raw=b"{not json")
    assert status == 400
    assert (body["object"], body["type"], body["code"]) == ("error", "BadRequestError", 400)
    status, body = double.json("/v1/nope")
    assert status == 404 and body["object"] == "error"


def test_unknown_parser_fails_at_start(start_double):
    double = start_double("--tool-call-parser", "bogus", load="3600", wait=False)
    assert double.proc.wait(timeout=60) != 0  # ended (a cap), not after the hour's load
    stderr = double.err.read_text()
    assert "KeyError: 'invalid tool call parser: bogus (chose from {" in stderr
    assert "Application startup complete." not in double.out.read_text()


def test_health_and_models_report_env(start_double):
    double = start_double(
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "qwen3_xml",
        env={"QWEN36_SDPA_STREAMING": "1"},
    )
    status, _, payload = double.request("/health")
    assert (status, payload) == (200, b"")
    status, body = double.json("/v1/models")
    assert status == 200 and body["object"] == "list"
    [card] = body["data"]
    assert card["id"] == MODEL and card["root"] == MODEL and card["owned_by"] == "vllm"
    assert card["max_model_len"] == 32768 and isinstance(card["created"], int)
    assert card["remedy_double"] == {
        "tool_call_parser": "qwen3_xml",
        "enable_auto_tool_choice": True,
        "env": {"QWEN36_SDPA_STREAMING": "1", "QWEN36_MERGE_BATCH_GUARD": None},
    }


def test_models_without_flags_or_env(start_double):
    double = start_double("--served-model-name", "qwen")
    [card] = double.json("/v1/models")[1]["data"]
    assert card["id"] == "qwen" and card["root"] == MODEL
    assert card["remedy_double"] == {
        "tool_call_parser": None,
        "enable_auto_tool_choice": False,
        "env": {"QWEN36_SDPA_STREAMING": None, "QWEN36_MERGE_BATCH_GUARD": None},
    }


def loading(double, cap: float = 60) -> None:
    """Until the double says it loads (its SIGTERM handler is in place by then, and its
    socket is not bound until the load ends); a cap, not a speed."""
    deadline = time.monotonic() + cap
    while "Loading model" not in double.out.read_text():
        assert double.proc.poll() is None, double.err.read_text()
        assert time.monotonic() < deadline, "the double never said it loads"
        time.sleep(0.05)


def test_connection_refused_while_loading_then_ready(start_double):
    double = start_double(load="5", wait=False)
    loading(double)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", double.port), timeout=1).close()
    double.wait_ready()
    assert double.request("/health")[0] == 200
    assert "Application startup complete." in double.out.read_text()


def test_sigterm_ends_the_server_with_exit_0(start_double):
    double = start_double()
    assert double.request("/health")[0] == 200
    double.proc.send_signal(signal.SIGTERM)
    assert double.proc.wait(timeout=60) == 0  # it ends (a cap, not a speed), and clean


def test_sigterm_while_loading_exits_zero_before_the_load_ends(start_double):
    double = start_double(load="3600", wait=False)
    loading(double)
    double.proc.send_signal(signal.SIGTERM)
    assert double.proc.wait(timeout=60) == 0  # not the hour's load: the signal ended it
    assert "Application startup complete." not in double.out.read_text()


def test_unknown_vllm_flags_are_ignored_and_listed(start_double):
    extra = ["--max-model-len", "32768", "--tensor-parallel-size", "2", "--no-async-scheduling"]
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "hermes", *extra)
    status, body = double.json("/debug/config")
    assert status == 200
    assert body["ignored_args"] == extra
    assert body["model"] == MODEL and body["tool_call_parser"] == "hermes"
    assert body["enable_auto_tool_choice"] is True
    assert body["pid"] == double.proc.pid
    assert body["argv"][:2] == ["serve", MODEL] and body["argv"][-len(extra) :] == extra
    assert body["env"] == {"QWEN36_SDPA_STREAMING": None, "QWEN36_MERGE_BATCH_GUARD": None}


# ------------------------------------------------------------ pure functions


def test_render_matches_field_notes():
    assert vd.render_qwen3_xml_call(WEATHER_TOOL, "Weather in Paris?") == WEATHER_XML
    assert "\nexample\n" in vd.render_qwen3_xml_call(WEATHER_TOOL, "what is the weather")


def test_parse_qwen3_xml_keeps_leading_text_and_strips_one_newline():
    text = (
        "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n\nNew York\n\n"
        "</parameter>\n<parameter=days>\n7\n</parameter>\n</function>\n</tool_call>"
    )
    content, calls = vd.parse_qwen3_xml(text, [WEATHER_TOOL])
    assert content == "Let me check.\n"
    [call] = calls
    assert json.loads(call["function"]["arguments"]) == {"city": "\nNew York\n", "days": 7}


def test_parse_qwen3_xml_without_calls_returns_text():
    assert vd.parse_qwen3_xml("just text", [WEATHER_TOOL]) == ("just text", [])


def test_render_qualified_place_and_prose():
    text = vd.render_qwen3_xml_call(WEATHER_TOOL, "Weather in Paris?", qualify=True)
    assert "<parameter=city>\nParis, France\n</parameter>" in text
    unknown = vd.render_qwen3_xml_call(WEATHER_TOOL, "Weather in Oslo?", qualify=True)
    assert "\nOslo\n" in unknown
    prose = vd.render_prose("Weather in Paris?")
    assert "Paris" in prose and not any(mark in prose for mark in MARKERS)


def test_turn_kind_and_read_mode(tmp_path):
    assert [vd.turn_kind(n) for n in range(1, 9)] == [
        "plain",
        "qualified",
        "plain",
        "prose",
        "plain",
        "qualified",
        "plain",
        "prose",
    ]
    assert {vd.turn_kind(n, "prose") for n in range(1, 9)} == {"prose"}
    assert "prose" not in {vd.turn_kind(n, "tools") for n in range(1, 9)}
    mode = tmp_path / "mode"
    assert vd.read_mode(mode) == "normal"
    for text, expected in [("prose\n", "prose"), ("tools", "tools"), ("bogus", "normal")]:
        mode.write_text(text)
        assert vd.read_mode(mode) == expected


def test_parse_hermes_fails_on_xml_and_accepts_json():
    assert vd.parse_hermes(WEATHER_XML) == (WEATHER_XML, [])
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    content, [call] = vd.parse_hermes(text)
    assert content is None and CALL_ID.match(call["id"])
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}


def running_gauge(double) -> str:
    status, headers, body = double.request("/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    # vLLM's V1 labels, one series an engine (vllm/v1/metrics/loggers.py)
    assert 'vllm:num_requests_waiting{engine="0",model_name="' + MODEL + '"} 0.0' in text
    assert "# HELP vllm:num_requests_running Number of requests in model execution " in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("vllm:num_requests_running{")]
    return line.rsplit(" ", 1)[1]


def test_metrics_count_a_held_request_and_a_sigterm_cuts_it(start_double):
    import threading

    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    assert running_gauge(double) == "0.0"
    outcome = {}

    def held():
        try:
            outcome["status"] = double.request(
                "/v1/chat/completions", {**WEATHER_REQUEST, "remedy_double_hold_s": 30}
            )[0]
        except Exception as exc:  # the connection the restart cuts
            outcome["error"] = exc

    thread = threading.Thread(target=held)
    thread.start()
    deadline = time.monotonic() + 60  # the request reaches the server: a cap, not a speed
    while running_gauge(double) != "1.0":
        assert time.monotonic() < deadline, "the held request never counted"
        time.sleep(0.05)
    double.proc.send_signal(signal.SIGTERM)
    thread.join(timeout=10)
    assert "error" in outcome and "status" not in outcome  # cut, never answered
    error = outcome["error"]
    reason = getattr(error, "reason", error)
    assert not isinstance(reason, TimeoutError), error  # cut by the exit, not timed out


def test_a_short_hold_answers_and_the_gauge_returns_to_zero(start_double):
    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    status, body = double.json(
        "/v1/chat/completions", {**WEATHER_REQUEST, "remedy_double_hold_s": 0.2}
    )
    assert status == 200 and message_of(body)[0]["tool_calls"]
    assert running_gauge(double) == "0.0"


def test_disable_log_stats_serves_metrics_without_the_request_gauges(start_double):
    """vLLM with --disable-log-stats: /metrics is 200 and carries no vllm: gauge, so a
    drain cannot tell the load (remedy/host/server_load.sh says 'unknown')."""
    double = start_double(
        "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml", "--disable-log-stats"
    )
    status, _headers, body = double.request("/metrics")
    text = body.decode()
    assert status == 200 and "process_cpu_seconds_total" in text
    assert "vllm:" not in text
    with_stats = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    assert "process_cpu_seconds_total" in with_stats.request("/metrics")[2].decode()
    assert running_gauge(with_stats) == "0.0"


def test_a_stream_goes_on_after_the_engine_is_done_and_the_gauge_reads_0(start_double):
    """Issue 44 item 5: vLLM's gauges are the engine's counts. A streamed answer whose
    engine part is over still sends its last chunks: the gauge reads 0 while the client
    is still receiving, and the stream then ends complete."""
    import http.client

    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    conn = http.client.HTTPConnection("127.0.0.1", double.port, timeout=60)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}],
            "stream": True, "remedy_double_stream_tail_s": 30}  # fmt: skip
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})  # fmt: skip
    resp = conn.getresponse()
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.version == 11 and resp.chunked  # uvicorn: no Content-Length, chunked
    first = resp.readline() + resp.readline()  # the role, sent at once
    assert json.loads(first.removeprefix(b"data: "))["choices"][0]["delta"]["role"]
    deadline = time.monotonic() + 60  # the engine's part ends: a cap, not a speed
    while running_gauge(double) != "0.0":
        assert time.monotonic() < deadline, "the engine's part never ended"
        time.sleep(0.05)
    more = resp.readline() + resp.readline()  # still streaming with the gauge at 0
    assert more.startswith(b"data: {") and running_gauge(double) == "0.0"
    rest = (first + more + resp.read()).decode().split("\n\n")
    events = [e.removeprefix("data: ") for e in rest if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == vd.PLAIN_REPLY and chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_connection_is_kept_open_for_the_next_request_as_uvicorn_does(start_double):
    """HTTP/1.1 as vLLM's uvicorn speaks it: after a response the connection waits open
    for the next request (two requests, one connection), a streamed one included (its
    chunked body ends, the connection stays); an HTTP/1.0 request's is closed after its
    response, as is one that asks for close."""
    import http.client
    import socket

    double = start_double("--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml")
    conn = http.client.HTTPConnection("127.0.0.1", double.port, timeout=60)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello."}]}
    for stream in (False, True, False):
        conn.request("POST", "/v1/chat/completions", json.dumps({**body, "stream": stream}),
                     {"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        assert (resp.status, resp.version) == (200, 11)
        data = resp.read()
        assert (b"data: [DONE]" in data) == stream
        assert not resp.will_close
    sock = conn.sock  # the one connection all three went over
    conn.request("GET", "/health")
    assert conn.getresponse().read() == b"" and conn.sock is sock
    conn.close()
    for request in (b"GET /health HTTP/1.0\r\n\r\n",
                    b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"):  # fmt: skip
        with socket.create_connection(("127.0.0.1", double.port), timeout=60) as raw:
            raw.sendall(request)
            got = b""
            while chunk := raw.recv(4096):  # ends: the server closed it
                got += chunk
            assert got.startswith(b"HTTP/1.1 200 "), got
