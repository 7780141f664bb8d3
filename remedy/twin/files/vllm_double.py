#!/usr/bin/env python3
"""Test double for vLLM's OpenAI-compatible server serving a Qwen3 model.

It reproduces one production failure: Qwen3 emits *XML* tool calls
(``<tool_call><function=NAME><parameter=K>...``).  Started with
``--tool-call-parser hermes`` the real server tries ``json.loads`` on the text
between ``<tool_call>`` tags, fails, and SILENTLY answers HTTP 200 with
``tool_calls: []`` and the raw XML as ``content``.  With ``qwen3_xml`` the calls
are parsed.  The double generates the XML a Qwen3 model would emit for the first
requested tool and runs it through a real implementation of the configured
parser, so the failure (and the fix) behave as on the production host.

Like a real model, it does not always answer the same way. Deterministically, per
server process, counting the requests that offer tools with ``tool_choice: "auto"``:

* every 4th such request is answered in prose without calling the tool (HTTP 200,
  ``tool_calls: []``, ``finish_reason: "stop"``), so two in a row never are;
* of the others, every second one qualifies the place: ``"city": "Paris, France"``
  instead of ``"Paris"``.

The test knob ``/var/lib/vllm-double/mode`` (``VLLM_DOUBLE_MODE_FILE``), read on
every request, overrides that: ``prose`` answers every such request in prose,
``tools`` never does, ``normal`` (or no file) is the rotation above.

``/metrics`` serves vLLM's Prometheus gauges ``vllm:num_requests_running`` and
``vllm:num_requests_waiting`` (always 0: nothing queues), labelled ``model_name``
and ``engine="0"``, with vLLM's help texts (``vllm/v1/metrics/loggers.py`` at
005a810b, ``PrometheusStatLogger``: labels line 168, the gauges lines 188-203): they
are the *engine's* counts, the requests in model execution batches, not the HTTP
side's. A request may hold itself open: the double's own field
``"remedy_double_hold_s": N`` keeps it N seconds in the engine (counted running), so
a test can keep one in flight; a SIGTERM meanwhile cuts it, as a restart does. A
streamed request (``"stream": true``) is answered as vLLM's server-sent events
(``chat.completion.chunk`` lines, then ``data: [DONE]``); with the double's field
``"remedy_double_stream_tail_s": T`` its last chunks go out over T seconds *after*
the engine is done, the gauge already back at 0, as a real response still streaming
to a slow client (or detokenised and sent after the engine's last step) is. With the
double's field ``"remedy_double_release": PATH`` the hold and the tail end early once
PATH exists (the rest of the answer goes at once): a test then holds a request until
an event (the run's drain began), not for a guessed time. Started
with ``--disable-log-stats``, vLLM creates no stat loggers
(``vllm/v1/engine/async_llm.py``): ``/metrics`` still answers 200, with
prometheus_client's own process metrics and no ``vllm:`` gauge, as the double does
then.

HTTP as vLLM's uvicorn speaks it (``uvicorn/protocols/http/httptools_impl.py`` at
e6c7ce79): HTTP/1.1, and a connection kept open after its response for the next
request (``keep_alive=http_version != "1.0"``; a ``Connection: close`` ends it), closed
when no request comes within the keep-alive timeout (``on_response_complete`` arms
``timeout_keep_alive_handler`` with ``call_later``): vLLM passes
``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` (default 5 s) as uvicorn's ``timeout_keep_alive``,
and so does the double, read from the same variable. A response without a
Content-Length (a stream) goes out in chunked transfer encoding, ``0\r\n\r\n`` at its
end, as uvicorn writes one (``RequestResponseCycle.send``).

Also mimicked: ``vllm serve MODEL ...`` command line (unknown vLLM flags are
accepted and recorded), ``--served-model-name`` (the only id /v1/models lists and
requests may name; another gets vLLM's 404), tool-call ids
``chatcmpl-tool-<32 hex>``, start-up rejection of unknown parser names, refused
connections while the model "loads", the 400 for ``"auto"`` tool choice without
``--enable-auto-tool-choice --tool-call-parser``, and clean exit on SIGTERM.
Standard library only; runs on a bare python3.
"""

import argparse
import contextlib
import json
import os
import re
import signal
import string
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE (vllm/envs.py, default 5): uvicorn's
# timeout_keep_alive, how long a connection waits open for its next request
KEEP_ALIVE_S = float(os.environ.get("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "5"))
PARSERS = ("hermes", "qwen3_coder", "qwen3_xml")  # qwen3_coder: same XML format
ENV_KEYS = ("QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD")
MAX_MODEL_LEN = 32768
PLAIN_REPLY = "Hello from the double."
INVENTED = {"integer": "3", "number": "1.5", "boolean": "true", "array": "[]", "object": "{}"}
MODE_FILE = os.environ.get("VLLM_DOUBLE_MODE_FILE", "/var/lib/vllm-double/mode")
MODES = ("normal", "prose", "tools")
PROSE_EVERY = 4  # every 4th tool request of the rotation is answered in prose
# How a model may spell out a place on every other call.
QUALIFIED = {
    "Paris": "Paris, France",
    "Berlin": "Berlin, Germany",
    "London": "London, United Kingdom",
    "Tokyo": "Tokyo, Japan",
}
AUTO_TOOL_ERROR = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)


# ---------------------------------------------------------------- pure helpers


def _schema_type(schema):
    """The JSON-schema type of a property ("string" when absent; first non-null of a list)."""
    typ = (schema or {}).get("type", "string")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "string")
    return typ


def _last_capitalised_word(text):
    word = "example"
    for token in (text or "").split():
        token = token.strip(string.punctuation)
        if token and token[0].isupper():
            word = token
    return word


def render_qwen3_xml_call(tool, user_text, qualify=False):
    """The raw text Qwen3 emits to call `tool`, with arguments invented from its schema.

    QUALIFY: spell a known place out in full ("Paris, France"), as a model may."""
    fn = tool.get("function", tool)
    lines = ["<tool_call>", f"<function={fn['name']}>"]
    for name, schema in ((fn.get("parameters") or {}).get("properties") or {}).items():
        value = INVENTED.get(_schema_type(schema))
        if value is None:
            value = _last_capitalised_word(user_text)
            value = QUALIFIED.get(value, value) if qualify else value
        if schema.get("enum"):  # an invented value must at least be a legal one
            value = schema["enum"][0]
            value = value if isinstance(value, str) else json.dumps(value)
        lines += [f"<parameter={name}>", value, "</parameter>"]
    lines += ["</function>", "</tool_call>"]
    return "\n".join(lines)


def render_prose(user_text):
    """What a model says when it answers instead of calling the tool."""
    place = _last_capitalised_word(user_text)
    return (
        f"I can't check live weather, but {place} in spring is usually mild, around "
        "12-18 °C with some showers. A weather service will have the forecast for the "
        "coming days."
    )


def read_mode(path=None):
    """The test knob: 'prose', 'tools' or 'normal' (no file, unreadable or unknown)."""
    try:
        with open(path or MODE_FILE) as fh:
            mode = fh.read().strip()
    except OSError:
        return "normal"
    return mode if mode in MODES else "normal"


def turn_kind(n, mode="normal"):
    """How the Nth (1-based) tool request is answered: 'prose', 'qualified' or 'plain'."""
    if mode == "prose":
        return "prose"
    if mode == "normal" and n % PROSE_EVERY == 0:
        return "prose"
    return "qualified" if n % 2 == 0 else "plain"


def _tool_call(name, arguments):
    return {
        "id": "chatcmpl-tool-" + uuid.uuid4().hex,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def _convert(value, typ):
    try:
        if typ == "integer":
            return int(value)
        if typ == "number":
            return float(value)
        if typ == "boolean":
            return value.strip().lower() == "true"
        if typ in ("object", "array"):
            return json.loads(value)
    except ValueError:  # includes json.JSONDecodeError: keep the text, as vLLM does
        pass
    return value


_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FUNCTION_RE = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.DOTALL)
_PARAMETER_RE = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


def _content_before_first_call(text):
    prefix = text[: text.find("<tool_call>")]
    return prefix if prefix.strip() else None


def parse_qwen3_xml(text, tools):
    """Parse Qwen3 XML tool calls. Returns (content, tool_calls) in OpenAI message form."""
    schemas = {}
    for tool in tools or []:
        fn = tool.get("function", tool)
        schemas[fn.get("name")] = (fn.get("parameters") or {}).get("properties") or {}
    calls = []
    for block in _TOOL_CALL_RE.findall(text):
        for name, body in _FUNCTION_RE.findall(block):
            name, props, args = name.strip(), schemas.get(name.strip(), {}), {}
            for key, value in _PARAMETER_RE.findall(body):
                key = key.strip()
                value = value.removeprefix("\n").removesuffix("\n")
                args[key] = _convert(value, _schema_type(props.get(key)))
            calls.append(_tool_call(name, args))
    if not calls:
        return text, []
    return _content_before_first_call(text), calls


def parse_hermes(text):
    """vLLM's hermes parser: JSON between <tool_call> tags. On any failure: (text, [])."""
    if "<tool_call>" not in text:
        return text, []
    try:
        calls = []
        for inner in _TOOL_CALL_RE.findall(text):
            obj = json.loads(inner)
            calls.append(_tool_call(obj["name"], obj.get("arguments", {})))
    except (ValueError, KeyError, TypeError, AttributeError):
        return text, []  # "Error in extracting tool call from response." -> silent 200
    if not calls:
        return text, []
    return _content_before_first_call(text), calls


PARSE = {
    "hermes": lambda text, tools: parse_hermes(text),
    "qwen3_xml": parse_qwen3_xml,
    "qwen3_coder": parse_qwen3_xml,
}


def _message_text(message):
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


# ---------------------------------------------------------------- HTTP server


def _hold(seconds, release=None):
    """Sleep SECONDS, or until the file RELEASE (a test's path) exists."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if isinstance(release, str) and os.path.exists(release):
            return
        time.sleep(min(left, 0.2))


class ApiError(Exception):
    def __init__(self, status, message, type_="BadRequestError"):
        super().__init__(message)
        self.status, self.message, self.type = status, message, type_

    def body(self):
        msg, typ, code = self.message, self.type, self.status
        return {"object": "error", "message": msg, "type": typ, "param": None, "code": code}


class Handler(BaseHTTPRequestHandler):
    server_version = "uvicorn"
    sys_version = ""
    protocol_version = "HTTP/1.1"  # uvicorn's status line; kept alive unless 1.0 or close

    def setup(self):
        super().setup()
        self._chunked = False

    def handle_one_request(self):
        """One request; then the connection waits open for the next one up to the
        keep-alive timeout (uvicorn's timeout_keep_alive_handler closes it then)."""
        self.connection.settimeout(KEEP_ALIVE_S)  # until the request line comes
        self._chunked = False
        super().handle_one_request()

    def parse_request(self):
        if not super().parse_request():
            return False
        self.connection.settimeout(None)  # a request in hand: no keep-alive timeout
        if self.request_version == "HTTP/1.0":  # uvicorn: keep_alive=http_version != "1.0"
            self.close_connection = True
        return True

    @property
    def cfg(self):
        return self.server.cfg

    def log_message(self, fmt, *args):  # uvicorn-style access line on stdout
        log(f"{self.client_address[0]}:{self.client_address[1]} - {fmt % args}")

    def log_request(self, code="-", size="-"):
        self.log_message('"%s" %s', self.requestline, getattr(code, "value", code))

    def _send(self, status, payload=None):
        body = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(200)
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [self.cfg["card"]]})
        elif path == "/debug/config":
            self._send(200, self.cfg["debug"])
        elif path == "/metrics":
            self._metrics()
        else:
            self._send(404, ApiError(404, f"Not Found: {path}", "NotFoundError").body())

    def _metrics(self):
        name = self.cfg["served_model"]
        running = self.server.in_flight
        # prometheus_client's default collectors answer whatever vLLM logs
        text = (
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
            "# TYPE process_cpu_seconds_total counter\n"
            f"process_cpu_seconds_total {time.process_time():.2f}\n"
        )
        if not self.cfg["disable_log_stats"]:  # vllm/v1/engine/async_llm.py: no stat logger
            text += "".join(
                f"# HELP vllm:{g} {doc}\n# TYPE vllm:{g} gauge\n"
                f'vllm:{g}{{engine="0",model_name="{name}"}} {float(v)}\n'
                for g, doc, v in (
                    ("num_requests_running", "Number of requests in model execution batches.",
                     running),
                    ("num_requests_waiting", "Number of requests waiting to be processed.", 0),
                )
            )  # fmt: skip
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        path = self.path.split("?", 1)[0]
        try:
            if path != "/v1/chat/completions":
                raise ApiError(404, f"Not Found: {path}", "NotFoundError")
            try:
                request = json.loads(raw or b"null")
            except ValueError as exc:
                raise ApiError(400, f"Invalid JSON body: {exc}") from None
            if not isinstance(request, dict):
                raise ApiError(400, "Request body must be a JSON object")
            with self.server.serving():  # the engine's part: counted running
                answer = self.chat_completion(request)
                hold = request.get("remedy_double_hold_s")
                if request.get("stream"):
                    self._stream_start(answer)
                release = request.get("remedy_double_release")
                if isinstance(hold, (int, float)) and hold > 0:
                    _hold(min(hold, 3600), release)
            if request.get("stream"):  # the HTTP side: the gauge no longer counts it
                self._stream_rest(answer, request.get("remedy_double_stream_tail_s"), release)
            else:
                self._send(200, answer)
        except ApiError as err:
            self._send(err.status, err.body())

    def _body(self, data):
        """DATA of a streamed body: a chunk of the chunked transfer encoding (empty: its
        end), as uvicorn writes one."""
        if self._chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"
        self.wfile.write(data)
        self.wfile.flush()

    def _event(self, answer, delta, finish=None):
        chunk = {key: answer[key] for key in ("id", "created", "model")}
        chunk["object"] = "chat.completion.chunk"
        chunk["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        self._body(b"data: " + json.dumps(chunk).encode() + b"\n\n")

    def _stream_start(self, answer):
        """vLLM's stream: 200 with text/event-stream at once, the role first; no
        Content-Length, so chunked (uvicorn adds transfer-encoding: chunked)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunked = True
        self._event(answer, {"role": "assistant", "content": ""})

    def _stream_rest(self, answer, tail_s, release=None):
        """The answer's text in chunks, one every 0.25 s over TAIL_S seconds (one chunk
        without a tail; the rest at once when RELEASE exists), then the finish chunk and
        ``data: [DONE]``."""
        message = answer["choices"][0]["message"]
        text = message["content"] or ""
        tail = min(tail_s, 3600) if isinstance(tail_s, (int, float)) and tail_s > 0 else 0
        pieces = max(1, int(tail * 4))
        for i in range(pieces):
            self._event(
                answer, {"content": text[i * len(text) // pieces : (i + 1) * len(text) // pieces]}
            )
            if tail:
                _hold(tail / pieces, release)
        if message["tool_calls"]:
            calls = [dict(call, index=i) for i, call in enumerate(message["tool_calls"])]
            self._event(answer, {"tool_calls": calls})
        self._event(answer, {}, answer["choices"][0]["finish_reason"])
        self._body(b"data: [DONE]\n\n")
        self._body(b"")

    def chat_completion(self, req):
        cfg = self.cfg
        model = req.get("model") or cfg["served_model"]
        if model != cfg["served_model"]:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "`messages` must be a non-empty list")
        tools = req.get("tools") or []
        if not isinstance(tools, list) or not all(
            isinstance(t, dict)
            and isinstance(t.get("function", t), dict)
            and isinstance(t.get("function", t).get("name"), str)
            for t in tools
        ):
            raise ApiError(400, "`tools` must be a list of function tools with a name")
        tool_choice = req.get("tool_choice")
        if tool_choice is not None and tool_choice != "none" and not tools:
            raise ApiError(400, "When using `tool_choice`, `tools` must be set.")
        if tools and tool_choice is None:
            tool_choice = "auto"
        if tool_choice == "auto" and not (
            cfg["enable_auto_tool_choice"] and cfg["tool_call_parser"]
        ):
            raise ApiError(400, AUTO_TOOL_ERROR)

        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        user_text = _message_text(users[-1]) if users else ""
        raw, content, calls = PLAIN_REPLY, PLAIN_REPLY, []
        if tools and tool_choice != "none":
            tool = tools[0]
            if isinstance(tool_choice, dict):  # named function
                wanted = (tool_choice.get("function") or {}).get("name")
                tool = next((t for t in tools if t.get("function", t)["name"] == wanted), None)
                if tool is None:
                    raise ApiError(400, f"Tool '{wanted}' has not been passed in `tools`.")
            kind = "plain"
            if tool_choice == "auto":
                kind = turn_kind(self.server.next_turn(), read_mode())
            if kind == "prose":  # the model chose to answer instead of calling the tool
                raw = content = render_prose(user_text)
            else:
                raw = render_qwen3_xml_call(tool, user_text, qualify=kind == "qualified")
                if tool_choice == "auto":  # free generation: the configured parser decides
                    content, calls = PARSE[cfg["tool_call_parser"]](raw, tools)
                else:  # "required"/named: vLLM uses guided decoding and no tool parser
                    content, calls = None, parse_qwen3_xml(raw, tools)[1]

        prompt_tokens = sum(
            len(_message_text(m).split()) + 4 for m in messages if isinstance(m, dict)
        )
        completion_tokens = len(raw.split())
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "tool_calls": calls,
                        "reasoning_content": None,
                    },
                    "logprobs": None,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "stop_reason": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self._turns, self._turns_lock = 0, threading.Lock()
        self.in_flight = 0

    @contextlib.contextmanager
    def serving(self):
        """One chat completion in flight (vllm:num_requests_running) while inside."""
        with self._turns_lock:
            self.in_flight += 1
        try:
            yield
        finally:
            with self._turns_lock:
                self.in_flight -= 1

    def next_turn(self):
        """1, 2, 3, ...: the number of this tool request since the server started."""
        with self._turns_lock:
            self._turns += 1
            return self._turns


# ---------------------------------------------------------------- entry point


def build_parser():
    parser = argparse.ArgumentParser(prog="vllm", allow_abbrev=False)
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--disable-log-stats", action="store_true")
    parser.add_argument(
        "--load-seconds", type=float, default=os.environ.get("VLLM_DOUBLE_LOAD_SECONDS", "1")
    )
    return parser


def log(message):
    print(f"INFO:     {message}", flush=True)


# The twin's kernel (remedy/twin/files/twin-kernel): each start pins memory that only a
# reboot frees, as the tenstorrent module's leak does (tt-stack#49); the twin's
# /proc/meminfo shows it. Elsewhere (a unit test on this machine) nothing is pinned.
TWIN_KERNEL = "/usr/local/lib/nixos-twin/twin-kernel"


def pin_leak():
    if os.path.exists(TWIN_KERNEL) and os.path.isdir("/run/twin-kernel"):
        subprocess.run([TWIN_KERNEL, "leak"], check=False)


def _exit_on_signal(signum, frame):
    log(f"Received signal {signum}, shutting down")
    raise SystemExit(0)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args, ignored = build_parser().parse_known_args(argv)
    if args.tool_call_parser is not None and args.tool_call_parser not in PARSERS:
        choices = ",".join(PARSERS)
        msg = f"invalid tool call parser: {args.tool_call_parser} (chose from {{ {choices} }})"
        print(f"KeyError: {msg!r}", file=sys.stderr, flush=True)
        return 1
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)

    served, parser = args.served_model_name or args.model, args.tool_call_parser
    auto, env = args.enable_auto_tool_choice, {key: os.environ.get(key) for key in ENV_KEYS}
    cfg = {"served_model": served, "tool_call_parser": parser, "enable_auto_tool_choice": auto}
    cfg["disable_log_stats"] = args.disable_log_stats
    cfg["card"] = {
        "id": served,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "vllm",
        "root": args.model,
        "max_model_len": MAX_MODEL_LEN,
        "remedy_double": {"tool_call_parser": parser, "enable_auto_tool_choice": auto, "env": env},
    }
    cfg["debug"] = {
        "model": args.model,
        "tool_call_parser": parser,
        "enable_auto_tool_choice": auto,
        "env": env,
        "argv": list(argv),
        "ignored_args": ignored,
        "pid": os.getpid(),
    }
    log(f"Started server process [{os.getpid()}]")
    pin_leak()
    log(f"Loading model {args.model} (tool_call_parser={parser}, {args.load_seconds}s)")
    if ignored:
        log(f"Ignoring vLLM arguments: {' '.join(ignored)}")
    time.sleep(max(args.load_seconds, 0))  # socket not bound yet: connections are refused
    failure = os.environ.get("VLLM_DOUBLE_FAIL_AFTER_LOAD")
    if failure:  # a generation whose server fails after boot (docs/twin.md)
        # vLLM V1's words when its engine core dies while starting: the core's error,
        # then the API server's (vllm/v1/engine/utils.py, wait_for_engine_startup);
        # the process exits 1 and nothing listens
        for line in (
            f"(EngineCore_DP0 pid={os.getpid()}) ERROR EngineCore failed to start.",
            f"(EngineCore_DP0 pid={os.getpid()}) RuntimeError: {failure}",
            f"(APIServer pid={os.getpid()}) RuntimeError: Engine core initialization "
            "failed. See root cause above. Failed core proc(s): {}",
        ):
            print(line, file=sys.stderr, flush=True)
        return 1

    server = Server((args.host, args.port), Handler)
    server.cfg = cfg
    log("Application startup complete.")
    log(f"Uvicorn running on http://{args.host}:{server.server_address[1]}")
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
