"""The tool-call probe: the request of field-notes §6 and how to read the answer.

Health checks pass while tool calling is broken (hermes on Qwen XML answers
HTTP 200 with ``tool_calls: []``), so the only honest check is a real tool
call whose arguments come back parsed and typed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

PARSED = "parsed"
UNPARSED = "unparsed"
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

    @property
    def parsed(self) -> bool:
        return self.outcome == PARSED


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
    content = message.get("content")
    content = content[:200] if isinstance(content, str) else None
    calls = message.get("tool_calls") or []
    if not calls:
        return ProbeResult(
            UNPARSED,
            status,
            finish,
            content,
            "HTTP 200 with no tool_calls: the tool-call parser did not parse the model's output",
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
    if args.get("city") != "Paris" or ("days" in args and type(args["days"]) is not int):
        return ProbeResult(
            UNPARSED,
            status,
            finish,
            content,
            f"arguments not typed by the schema: {fn.get('arguments')}",
        )
    return ProbeResult(PARSED, status, finish, content, "get_weather called with typed arguments")


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


def read_curl_output(lines: list[str]) -> ProbeResult:
    """Classify what ``curl_argv`` printed (stdout and stderr lines, in any order)."""
    status = None
    body, errors = [], []
    for line in lines:
        if line.startswith(STATUS_MARK):
            code = line[len(STATUS_MARK) :].strip()
            status = int(code) if code.isdigit() and int(code) > 0 else None
        elif line.startswith("curl: ("):
            errors.append(line)
        else:
            body.append(line)
    return classify(status, "\n".join(body).strip(), "; ".join(errors) or None)
