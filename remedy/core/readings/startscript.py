"""The serving start script: the vLLM flags live inside it, not in the unit's argv."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache

NONE = "none"
PARSER_FLAG = re.compile(r"--tool-call-parser[ =]['\"]?([A-Za-z0-9_]+)")


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
    execs: str | None = None  # the store script this one execs (NixOS `script =` units)
    argv: list[str] = field(default_factory=list)  # vLLM's words after `serve`, as written


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


@lru_cache(maxsize=4096)
def _words(line: str) -> tuple[str, ...]:
    """shlex's words of LINE, kept: a fleet's hosts run the same start scripts (issue 34:
    the split was a third of remedy's own work per host)."""
    return tuple(shlex.split(line, comments=True))


def parse(path: str, text: str) -> StartScript:
    """Read a start script. ``--tool-call-parser`` counts wherever it is (any line, either
    spelling); the vLLM command line (``… serve MODEL …``) gives the other flags; an
    ``exec /nix/store/…`` line names the script this one hands over to."""
    exports: dict[str, str] = {}
    words: list[str] = []
    script = StartScript(path, NONE, False, None, None, text=text)
    for line in _logical_lines(text):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            parts = list(_words(s))
        except ValueError:
            continue
        if not parts:
            continue
        if parts[0] == "export":
            for item in parts[1:]:
                key, sep, value = item.partition("=")
                if sep:
                    exports[key] = value
            continue
        if parts[0] == "exec" and len(parts) > 1 and parts[1].startswith("/nix/store/"):
            script.execs = script.execs or parts[1]
        # Counted in the text, as the fallback's awk rewrites it: a flag inside a
        # variable (FLAGS='--tool-call-parser x') counts as much as one on the command line.
        for value in PARSER_FLAG.findall(s):
            script.parser_flag_count += 1
            if script.parser_flag_count == 1:
                script.tool_call_parser = value
        if "serve" in parts and not words:
            words = parts
    script.exports = exports
    if not words:
        return script
    after = words[words.index("serve") + 1 :]
    script.argv = list(after)
    i = 0
    while i < len(after):
        word = after[i]
        value = after[i + 1] if i + 1 < len(after) else None
        if word.startswith("--tool-call-parser"):
            i += 0 if "=" in word else 1
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


def resolve(script: StartScript | None, scripts: dict[str, StartScript]) -> StartScript | None:
    """The script that holds the vLLM flags: SCRIPT, or the store script it execs (one
    level, as a NixOS ``script =`` unit does) when SCRIPT itself has no parser flag."""
    if script is None or script.parser_flag_count or not script.execs:
        return script
    inner = scripts.get(script.execs)
    if inner is None:
        return script
    if script.exports:  # exports before the exec reach the inner script's process
        inner = StartScript(**{**inner.__dict__, "exports": {**script.exports, **inner.exports}})
    return inner
