"""The verify step reads the probe's answer on the host, in shell (no JSON reader runs on
a NixOS host by default): remedy/host/probe_outcome.sh with json_paths.awk. The Python
reading (remedy.core.readings.probe, the snapshot's) stays as the oracle: both read
the probe outputs recorded from twins, and answers shaped as vLLM's are, alike."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from remedy import host
from remedy.core.readings import probe

FACTS = Path(__file__).resolve().parents[1] / "facts" / "serving.ToolCallProbe"
SHELLS = [sh for sh in (["dash"], ["bash", "--posix"]) if shutil.which(sh[0])]
STATUS = probe.STATUS_MARK


def completion(message: dict, finish: str = "stop") -> str:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
            ],
        }
    )


CALL = {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 3})}
XML = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
ANSWERS = {
    "parsed": ["@@remedy-model=q", completion(
        {"content": None, "tool_calls": [{"id": "c", "type": "function", "function": CALL}]},
        "tool_calls"), f"{STATUS}200"],
    "hermes on Qwen XML": ["@@remedy-model=q", completion({"content": XML, "tool_calls": []}),
                           f"{STATUS}200"],
    "prose": ["@@remedy-model=q", completion({"content": "It is mild \u00b0C in \"Paris\"",
                                              "tool_calls": []}), f"{STATUS}200"],
    "400 with a message": ["@@remedy-model=q", json.dumps(
        {"object": "error", "message": '"auto" tool choice requires --enable-auto-tool-choice',
         "type": "BadRequestError", "code": 400}), f"{STATUS}400"],
    "404 without JSON": ["@@remedy-model=q", "Not Found", f"{STATUS}404"],
    "200 not JSON": ["@@remedy-model=q", "<html>hello</html>", f"{STATUS}200"],
    "200 not a completion": ["@@remedy-model=q", json.dumps({"data": []}), f"{STATUS}200"],
    "another function": ["@@remedy-model=q", completion({"tool_calls": [
        {"function": {"name": "get_time", "arguments": "{}"}}]}), f"{STATUS}200"],
    "arguments no object": ["@@remedy-model=q", completion({"tool_calls": [
        {"function": {"name": "get_weather", "arguments": "[1, 2]"}}]}), f"{STATUS}200"],
    "refused": ["curl: (7) Failed to connect to 127.0.0.1 port 8000: Connection refused",
                f"{STATUS}000"],
    "no model": ["@@remedy-model=", '{"object": "list", "data": []}'],
    "escaped marker": ["@@remedy-model=q", completion(
        {"content": "\\u003ctool_call\\u003e"}).replace("\\\\u003c", "\\u003c").replace(
        "\\\\u003e", "\\u003e"), f"{STATUS}200"],
}  # fmt: skip


def recorded() -> dict[str, list[str]]:
    out = {}
    for path in sorted(FACTS.glob("*.json")):
        out[f"recorded {path.stem}"] = json.loads(path.read_text())["output"]
    return out


CASES = {**ANSWERS, **recorded()}


def shell_outcome(shell: list[str], lines: list[str], tmp_path) -> tuple[str, str]:
    answer = tmp_path / "answer"
    answer.write_text("\n".join(lines) + "\n")
    program = (
        host.text("probe_outcome.sh")
        + 'probe_outcome "$1"\nprintf "%s\\t%s" '
        + ('"$outcome" "$reason"')
    )
    ran = subprocess.run([*shell, "-c", program, "t", str(answer)], capture_output=True,
                         text=True, check=True)  # fmt: skip
    outcome, _, reason = ran.stdout.partition("\t")
    return outcome, reason


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_host_reads_a_probe_answer_as_the_python_model_does(shell, case, tmp_path):
    lines = CASES[case]
    want = probe.read_curl_output(lines)
    outcome, reason = shell_outcome(shell, lines, tmp_path)
    assert outcome == want.outcome, (case, reason, want.reason)
    if want.outcome != "unparsed" or "malformed" not in want.reason:
        assert reason == want.reason, case  # the same words (a malformed call: its own)


def test_the_cases_cover_every_outcome():
    found = {probe.read_curl_output(lines).outcome for lines in CASES.values()}
    assert found == {"parsed", "unparsed", "inconclusive", "http_error", "unreachable"}


DOCS = [
    {"a": 1, "b": [True, False, None, "x\ty"], "c": {"d": -1.5e3, "e": {}}, "f": []},
    [1, "2", {"3": "\u00e9\u4e2d"}],
    "just a string",
    0,
    {"k": 'say "\\hi"\n'},
]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("doc", DOCS, ids=range(len(DOCS)))
def test_json_paths_reads_what_python_reads(shell, doc):
    text = json.dumps(doc, indent=1, ensure_ascii=False)  # as vLLM answers: UTF-8 as it is
    ran = subprocess.run([*shell, "-c", host.text("probe_outcome.sh") + 'awk "$(JSON_PATHS)"'],
                         input=text, capture_output=True, text=True, check=True)  # fmt: skip
    got = {}
    for line in ran.stdout.splitlines():
        path, kind, value = line.split("\t")
        got[path] = (kind, value)

    def walk(value, path=""):
        if isinstance(value, dict):
            assert got.pop(path) == ("object", str(len(value)))
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else k)
        elif isinstance(value, list):
            assert got.pop(path) == ("array", str(len(value)))
            for i, v in enumerate(value):
                walk(v, f"{path}.{i}" if path else str(i))
        elif isinstance(value, str):
            kind, said = got.pop(path)
            assert kind == "string" and said == value.replace("\t", " ").replace("\n", " ")
        elif value is None or isinstance(value, bool):
            assert got.pop(path) == (json.dumps(value), "")
        else:
            kind, said = got.pop(path)
            assert kind == "number" and float(said) == value

    walk(doc)
    assert got == {}


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("bad", ['{"a": 1', '{"a" 1}', "[1 2]", '"open', "nope", "{} x"])
def test_json_paths_names_json_that_does_not_parse(shell, bad):
    ran = subprocess.run([*shell, "-c", host.text("probe_outcome.sh") + 'awk "$(JSON_PATHS)"'],
                         input=bad, capture_output=True, text=True)  # fmt: skip
    assert ran.returncode == 1 and ran.stdout.splitlines()[-1].startswith("@@error ")
