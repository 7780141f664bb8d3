"""The tool-call probe: the request of field-notes §6 and how to read the answer.

Health checks pass while tool calling is broken (hermes on Qwen XML answers
HTTP 200 with ``tool_calls: []``), so the only honest check is a real tool
call whose arguments come back parsed and typed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from remedy import host

PARSED = "parsed"
UNPARSED = "unparsed"
# HTTP 200 in prose: the model chose not to call the tool. Says nothing about the parser,
# so it is retried and is never on its own a reason to restart or roll back.
INCONCLUSIVE = "inconclusive"
HTTP_ERROR = "http_error"
UNREACHABLE = "unreachable"

TOOL = {
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


MODEL_MARK = "@@remedy-model@@"
# What the raw text of an unparsed Qwen3 tool call carries in `content`.
CALL_MARKERS = ("<tool_call>", "<function=")


def request_body(model: str) -> str:
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [TOOL],
            "tool_choice": "auto",
            # Deterministic and short: a thinking model under load must not turn a slow
            # answer into a failed probe (and a needless restart).
            "temperature": 0,
            "max_tokens": 256,
            "chat_template_kwargs": {"enable_thinking": False},
        },
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class ProbeResult:
    outcome: str  # parsed | unparsed | http_error | unreachable
    status: int | None
    finish_reason: str | None
    content: str | None  # first 200 characters
    reason: str
    timed_out: bool = False  # unreachable because the answer took too long (busy?)

    model: str | None = None  # the model id the probe asked for

    @property
    def parsed(self) -> bool:
        return self.outcome == PARSED

    @property
    def inconclusive(self) -> bool:
        return self.outcome == INCONCLUSIVE


def classify(status: int | None, body: str, error: str | None = None) -> ProbeResult:
    """Read one answer to ``request_body``: parsed, unparsed, http_error or unreachable."""
    if status is None or status == 0:
        timed_out = bool(error and ("(28)" in error or "timed out" in error.lower()))
        return ProbeResult(UNREACHABLE, None, None, None, error or "no answer", timed_out)
    try:
        doc = json.loads(body) if body else {}
    except ValueError:
        doc = None
    if status != 200:
        msg = doc.get("message") if isinstance(doc, dict) else None
        return ProbeResult(
            HTTP_ERROR,
            status,
            None,
            (msg or body or "")[:200],
            f"HTTP {status}" + (f": {msg}" if msg else ""),
        )
    try:
        choice = doc["choices"][0]
        message = choice["message"]
    except (TypeError, KeyError, IndexError):
        return ProbeResult(
            HTTP_ERROR, status, None, (body or "")[:200], "HTTP 200 but not a chat completion"
        )
    finish = choice.get("finish_reason")
    full = message.get("content")
    full = full if isinstance(full, str) else ""
    content = full[:200] or None
    calls = message.get("tool_calls") or []
    if not calls:
        if any(mark in full for mark in CALL_MARKERS):
            return ProbeResult(
                UNPARSED,
                status,
                finish,
                content,
                "HTTP 200 with no tool_calls and the raw <tool_call> text in content: "
                "the tool-call parser did not parse the model's output",
            )
        return ProbeResult(
            INCONCLUSIVE,
            status,
            finish,
            content,
            "HTTP 200 in prose: the model answered without calling the tool "
            "(says nothing about the parser)",
        )
    fn = (calls[0] or {}).get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "")
    except ValueError:
        args = None
    if fn.get("name") != "get_weather" or not isinstance(args, dict):
        return ProbeResult(
            UNPARSED, status, finish, content, f"tool call malformed: {json.dumps(fn)[:120]}"
        )
    return ProbeResult(PARSED, status, finish, content, "get_weather called with object arguments")


STATUS_MARK = "@@remedy-http-status="


# How curl sends the probe and reports the status (000 when unreachable), shared by
# the fact's remote snippet (facts/_remote.py) and curl_argv (the manual script).
CURL_FLAGS = [
    "-sS",
    "--connect-timeout",
    "3",
    "-H",
    "Content-Type: application/json",
    "-w",
    "\n" + STATUS_MARK + "%{http_code}\n",
    "-o",
    "-",
]


def endpoint(server_url: str) -> str:
    return server_url.rstrip("/") + "/v1/chat/completions"


def curl_argv(url: str, model: str, timeout_s: int = 20) -> list[str]:
    """curl sending the probe; prints the body, then a status line."""
    return [
        "curl",
        *CURL_FLAGS,
        "--max-time",
        str(timeout_s),
        "--data-binary",
        request_body(model),
        endpoint(url),
    ]


MODEL_LINE = "@@remedy-model="
# The model id /v1/models gave the serving process the snapshot probed before, kept on
# the host under that process's boot, main PID and start (facts/_remote.py PROBE): the
# served names are fixed when vLLM starts, so a check of an unchanged server asks
# /v1/models once, not every run (issue 34). A restart, a reboot or a 404 asks again.
MODEL_RECORD = "/var/lib/remedy/probe-model.record"
TRIES_LINE = "@@remedy-probe-tries="
DEFAULT_TRIES = 3

# The probe as one POSIX sh program (remedy/host/probe.sh): $1 server URL, $2 model id
# (empty: the first id /v1/models lists), $3 timeout per request, $4 tries, $5/$6 the
# request body before and after the model id. It prints the model line, the tries line,
# then curl's output (body, status line) of the last answer. The facts' read
# (facts/_remote.py) and the verify step (remedy/host/steps/verify.sh) run it alike.
PROBE_SH = host.text("probe.sh")


def probe_args(server_url: str, model: str | None, timeout_s: int, tries: int) -> list[str]:
    """The positional arguments of PROBE_SH."""
    head, _, tail = request_body(MODEL_MARK).partition(MODEL_MARK)
    return [server_url, model or "", str(int(timeout_s)), str(int(tries)), head, tail]


def probe_argv(server_url: str, model: str | None, timeout_s: int, tries: int) -> list[str]:
    return ["sh", "-c", PROBE_SH, "sh", *probe_args(server_url, model, timeout_s, tries)]


def read_curl_output(lines: list[str]) -> ProbeResult:
    """Classify what ``curl_argv`` or ``PROBE_SH`` printed (stdout and stderr lines)."""
    status, model, model_seen = None, None, False
    body, errors = [], []
    for line in lines:
        if line.startswith(STATUS_MARK):
            code = line[len(STATUS_MARK) :].strip()
            status = int(code) if code.isdigit() and int(code) > 0 else None
        elif line.startswith(MODEL_LINE):
            model, model_seen = line[len(MODEL_LINE) :].strip() or None, True
        elif line.startswith(TRIES_LINE):
            continue
        elif line.startswith("curl: ("):
            errors.append(line)
        else:
            body.append(line)
    if model_seen and model is None:
        text = " ".join(body).strip()[:160]
        return ProbeResult(
            HTTP_ERROR, None, None, text or None, f"/v1/models lists no model id: {text!r}"
        )
    result = classify(status, "\n".join(body).strip(), "; ".join(errors) or None)
    return dataclasses.replace(result, model=model)
