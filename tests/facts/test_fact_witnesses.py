"""Each fact case, checked against its raw output read here, not by the parser.

test_fact_fixtures.py compares each fact with what the parser returned when the case
was recorded: it catches change, not wrongness. Here every case also gets at least one
value that its raw output shows, read with a few lines of its own (a regular expression,
json.loads, base64) and compared with the fact the parser makes of that output now.
A fact class without a witness, or a case its witness finds nothing in, fails.
"""

from __future__ import annotations

import base64
import importlib
import json
import re
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def raw(case: dict) -> list[str]:
    """The output lines as the host printed them (``sed -n 'l 0'`` ends each with $)."""
    return [line.removesuffix("$") for line in case["output"]]


def grab(case: dict, pattern: str) -> list[str]:
    """The first group of PATTERN in each raw line it matches (whole line)."""
    return [m.group(1) for line in raw(case) if (m := re.fullmatch(pattern, line))]


def section(case: dict, name: str) -> list[str]:
    """The raw lines of section NAME (up to the next section or the end)."""
    out, inside = [], False
    for line in raw(case):
        if line.startswith("@@remedy:section "):
            inside = line.split(" ", 2)[1] == name
        elif line == "@@remedy:end":
            inside = False
        elif inside:
            out.append(line)
    return out


# -- one witness per fact class: (what, read from the raw output, from the fact) ------


def command_result(case, fact):
    rc = grab(case, r"rc (\d+)")
    if not rc:  # no answer on the host at all
        assert raw(case) == ["missing"], raw(case)
        return [("no code without an answer", None, fact["code"])]
    out = grab(case, r"out ?(.*)")[0]
    return [
        ("exit code", int(rc[0]), fact["code"]),
        ("ok", int(rc[0]) == 0, fact["ok"]),
        ("stdout", base64.b64decode(out).decode(errors="replace").rstrip("\n"),
         fact["stdout"].rstrip("\n")),
    ]  # fmt: skip


def memory_headroom(case, fact):
    return [
        ("MemAvailable", int(grab(case, r"MemAvailable:\s+(\d+) kB")[0]), fact["mem_available_kb"]),
        ("MemTotal", int(grab(case, r"MemTotal:\s+(\d+) kB")[0]), fact["mem_total_kb"]),
    ]


def flake_checkout(case, fact):
    heads = grab(case, r"head ([0-9a-f]{40})")
    return [("HEAD", heads[0] if heads else None, fact["head"])]


def flake_input(case, fact):
    text = "\n".join(section(case, "nix.flake_lock"))
    lock = json.loads(text)
    name = grab(case, r"input=(.*)")[0] or "tt-stack"
    node = lock["nodes"][lock["root"]]["inputs"][name]
    if isinstance(node, list):  # follows another input's: the node that one names
        node = lock["nodes"][lock["nodes"][lock["root"]]["inputs"][node[0]]]["inputs"][node[1]]
    locked = lock["nodes"][node]["locked"]
    return [("locked rev", locked.get("rev"), fact["rev"]), ("node", node, fact["node"])]


def nix_info(case, fact):
    return [("nix --version", grab(case, r"nix \(Nix\) (\S+)")[0], fact["version"])]


def option_definitions(case, fact):
    lines = [x for x in section(case, "nix.options") if x.startswith("{")]
    if not lines:  # nix failed: its words are the error
        assert fact["error"], fact
        return [("error without options", {}, fact["options"] or {})]
    doc = json.loads(lines[0])
    return [
        (
            f"{name}: highestPrio",
            doc[name].get("highestPrio"),
            fact["options"][name]["highest_prio"],
        )
        for name in doc
    ]


def system_generations(case, fact):
    gens = [
        {"number": int(n), "path": p}
        for n, p in (x.split(" ", 1) for x in grab(case, r"gen (\d+ \S+)"))
    ]
    return [
        ("current", grab(case, r"current (\S+)")[0], fact["current_system"]),
        ("booted", grab(case, r"booted (\S+)")[0], fact["booted_system"]),
        ("generations", gens, fact["generations"]),
    ]


def built_service(case, fact):
    starts = set(grab(case, r"\s*ExecStart=[-@:+!]*(\S+).*"))
    return [("ExecStart is one the unit files name", True, fact["exec_start"] in starts)]


def serving_unit(case, fact):
    pids = grab(case, r"MainPID=(\d+)")
    restarts = grab(case, r"NRestarts=(\d+)")
    return [
        ("MainPID (0: none)", int(pids[0]) or None if pids else None, fact["main_pid"] or None),
        ("NRestarts", int(restarts[0]) if restarts else None, fact["n_restarts"]),
        ("ActiveState", (grab(case, r"ActiveState=(\S+)") or [None])[0], fact["active_state"]),
    ]


def host_snapshot(case, fact):
    return serving_unit(case, fact["unit"]) + tool_call_probe(case, fact["probe"])


def tool_call_probe(case, fact):
    code = grab(case, r"@@remedy-http-status=(\d{3})")
    if not code:  # not probed (a snapshot of a server that is not up)
        return [("no probe, no status", None, fact["status"] if fact else None)]
    status = None if code[-1] == "000" else int(code[-1])
    return [
        ("HTTP status", status, fact["status"]),
        ("unreachable iff no HTTP answer", status is None, fact["outcome"] == "unreachable"),
    ]


def volatile_state(case, fact):
    override = any(x.startswith("@@remedy:file /run/tt-serving-override/start ") for x in raw(case))
    subjects = {e["subject"] for e in fact}
    return [
        ("the /run override is listed iff the host printed it", override,
         "/run/tt-serving-override/start" in subjects),
    ]  # fmt: skip


def guard_refusal(case, fact):
    found = grab(case, r"(\d+) \d+ \d+")
    if not found:  # no record, or not one of the guard's lines: no refusal
        return [("no refusal", None, fact)]
    return [("when", int(found[0]), fact["at"])]


WITNESSES = {
    "commands.CommandRead": command_result,
    "commands.CommandRecord": command_result,
    "memory.MemoryHeadroom": memory_headroom,
    "memory.MemoryGuardRefusal": guard_refusal,
    "nix.FlakeCheckout": flake_checkout,
    "nix.FlakeInput": flake_input,
    "nix.NixInfo": nix_info,
    "nix.OptionDefinitions": option_definitions,
    "nix.SystemGenerations": system_generations,
    "serving.BuiltService": built_service,
    "serving.HostSnapshot": host_snapshot,
    "serving.ServingUnit": serving_unit,
    "serving.ToolCallProbe": tool_call_probe,
    "serving.VolatileState": volatile_state,
}

FOLDERS = sorted(p for p in HERE.iterdir() if p.is_dir() and "." in p.name and p.name != "errors")
CASES = [case for folder in FOLDERS for case in sorted(folder.glob("*.json"))]


def test_every_fact_class_with_cases_has_a_witness():
    assert sorted(f.name for f in FOLDERS) == sorted(WITNESSES)


def fact_now(folder: str, case: dict):
    """What the fact makes of the case's output today, run as test_fact_fixtures runs it
    (pyinfra-testing's fake host, its command built from the case's arguments)."""
    from freezegun import freeze_time
    from pyinfra.context import ctx_host, ctx_state
    from pyinfra_testing.facts import _json_default, _make_command, _to_jsonable
    from pyinfra_testing.util import FakeState, create_host

    module, name = folder.rsplit(".", 1)
    fact = getattr(importlib.import_module(f"facts.{module}"), name)()
    state = FakeState()
    host = create_host(state, facts=case.get("facts", {}))
    with ctx_state.use(state), ctx_host.use(host):
        _make_command(fact.command, case.get("arg", []))
        data = freeze_time("2025-01-01")(fact.process)(case["output"])
    return json.loads(json.dumps(_to_jsonable(data), default=_json_default))


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_the_fact_agrees_with_its_raw_output(path):
    case = json.loads(path.read_text())
    witness = WITNESSES[path.parent.name]
    checks = witness(case, fact_now(path.parent.name, case))
    assert checks, f"{path}: the witness found nothing to compare"
    for what, from_raw, from_fact in checks:
        assert from_fact == from_raw, f"{path.name}: {what}: raw {from_raw!r}, fact {from_fact!r}"
