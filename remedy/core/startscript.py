"""The serving start script: the vLLM flags live inside it, not in the unit's argv."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

NONE = "none"


@dataclass
class StartScript:
    path: str
    tool_call_parser: str  # "none" when the flag is absent
    auto_tool_choice: bool
    model: str | None
    port: int | None
    flags: list[str] = field(default_factory=list)  # everything else, in order
    exports: dict[str, str] = field(default_factory=dict)
    parser_flag_count: int = 0
    text: str = ""


def _logical_lines(text: str) -> list[str]:
    lines, pending = [], ""
    for raw in text.splitlines():
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def parse(path: str, text: str) -> StartScript:
    exports: dict[str, str] = {}
    words: list[str] = []
    for line in _logical_lines(text):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            parts = shlex.split(s, comments=True)
        except ValueError:
            continue
        if not parts:
            continue
        if parts[0] == "export":
            for item in parts[1:]:
                key, sep, value = item.partition("=")
                if sep:
                    exports[key] = value
        elif "serve" in parts and ("--tool-call-parser" in s or any("vllm" in p for p in parts)):
            words = parts
    script = StartScript(path, NONE, False, None, None, exports=exports, text=text)
    if not words:
        return script
    after = words[words.index("serve") + 1 :]
    i = 0
    while i < len(after):
        word = after[i]
        value = after[i + 1] if i + 1 < len(after) else None
        if word.startswith("--tool-call-parser"):
            script.parser_flag_count += 1
            if "=" in word:
                script.tool_call_parser = word.split("=", 1)[1]
            else:
                script.tool_call_parser, i = value or NONE, i + 1
        elif word == "--enable-auto-tool-choice":
            script.auto_tool_choice = True
        elif word == "--port" and value is not None and value.isdigit():
            script.port, i = int(value), i + 1
        elif not word.startswith("-") and script.model is None and not script.flags:
            script.model = word
        else:
            script.flags.append(word)
        i += 1
    return script
