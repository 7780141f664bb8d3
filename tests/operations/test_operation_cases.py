"""Data cases for the engine's operations, with pyinfra-testing's fake state and host.

Each case is ``tests/operations/<module>.<operation>/<case>.json``: the host as
recorded from a twin (a ``serving.HostSnapshot`` fixture), its data and the
settings in scope. The operation's values are the step's own, as the pure
planner gives them (``remedy.core.run.steps.plan_steps``; ``stage`` picks the
durable or fallback step of an operation that has both, ``args`` overrides some).
While executing, an operation reads facts (recorded fixtures, and the run
journal's values, ``journal``); the answers of its commands (``argv.ran``, read
back as ``CommandRecord``) and of its reads (``CommandRead``) are the replies in
``replies``, in order (default: success, no output).

What it must give: its commands in order (argv as pyinfra quotes it; a command
whose answer the step reads is ``{"run": argv}``, a read ``{"read": argv}``, the
failing command ``["fail"]``, after which pyinfra runs no more of the step), its
noop reason, and what it said for the outcome (``said``). Facts in, commands or a
reason out: no host.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api.operation import OperationMeta
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.operations import parse_commands
from pyinfra_testing.util import FakeState, create_host

import facts.commands
import facts.memory
import facts.nix
import facts.serving
from remedy.core.config import desired
from remedy.core.config.host_data import builder_of, from_host_data
from remedy.core.programs import record
from remedy.core.programs.journal import RunJournal
from remedy.core.run import steps
from remedy.core.run.plan import plan_restore, unhealthy
from remedy.core.run.stop import StopRequest
from remedy.operations import argv, memory, nix, nix_bump, said, serving

HERE = Path(__file__).parent
FACTS = HERE.parent / "facts"
MODULES = {"memory": memory, "nix": nix, "serving": serving}
FACT_CLASSES = {
    "memory.MemoryHeadroom": facts.memory.MemoryHeadroom,
    "serving.ServingUnit": facts.serving.ServingUnit,
    "serving.ToolCallProbe": facts.serving.ToolCallProbe,
    "nix.SystemGenerations": facts.nix.SystemGenerations,
    "nix.FlakeInput": facts.nix.FlakeInput,
    "serving.BuiltService": facts.serving.BuiltService,
}
SCOPES = {"tool_calling": desired.TOOL_CALLING, "all": desired.ALL}
RUN_ID = "laptop:1:1796000000"


def recorded(fact: str, case: str):
    """A fact's value from its recorded twin output."""
    lines = json.loads((FACTS / fact / f"{case}.json").read_text())["output"]
    cls = facts.serving.HostSnapshot if fact == "serving.HostSnapshot" else FACT_CLASSES[fact]
    return cls().process(lines)


def cases():
    for folder in sorted(p for p in HERE.iterdir() if p.is_dir() and "." in p.name):
        for path in sorted(folder.glob("*.json")):
            yield pytest.param(folder.name, path, id=f"{folder.name}/{path.stem}")


def step_args(case: dict, operation: str) -> dict:
    """The values the planner gives OPERATION's step for the case's host."""
    snap = recorded("serving.HostSnapshot", case["snapshot"])
    if case.get("probe_timed_out"):  # a hung server: the probe timed out
        hung = dataclasses.replace(snap.probe, outcome="unreachable", timed_out=True)
        snap = dataclasses.replace(snap, probe=hung)
    s = from_host_data("cfx-llm2", case.get("data", {}))
    plan = plan_restore(snap, s, SCOPES[case.get("scope", "all")])
    builder = None
    if (data := case.get("builder")) is not None:  # the inventory's builder host, bb
        builder = builder_of(s, "bb", data, "cfx-llm2")
    planned = steps.plan_steps(plan, snap, s, RUN_ID, unhealthy(plan, snap), builder)
    if "name" in case:
        index = next(i for i, x in enumerate(planned.steps) if x.template.name == case["name"])
        assert planned.steps[index].op == operation, case["name"]
    else:
        index = planned.find(operation, case.get("stage"))
    return {**planned.steps[index].args, **case.get("args", {})}


def _parsed(command) -> list | str:
    (parsed,) = parse_commands([command])
    return parsed


@pytest.mark.parametrize(("operation", "path"), list(cases()))
def test_operation_case(operation: str, path: Path, monkeypatch):
    case = json.loads(path.read_text())
    module, name = operation.split(".")
    op = getattr(MODULES[module], name)
    args = step_args(case, operation)
    if "stop" in inspect.signature(op._inner).parameters:  # the run's stop request
        args["stop"] = StopRequest("interrupted by SIGINT" if case.get("interrupted") else None)
    state = FakeState()
    state.is_executing = case.get("executing", False)
    host = create_host(state, name="cfx-llm2")
    values = {fact: recorded(fact, c) for fact, c in case.get("facts", {}).items()}
    values["serving.RunJournal"] = RunJournal({"run_id": RUN_ID, **case.get("journal", {})})

    replies = list(case.get("replies", []))
    commands: list = []

    def answer():
        reply = replies.pop(0) if replies else {}
        ok = reply.get("ok", True)
        return record.Answer(ok, reply.get("stdout", ""), reply.get("stderr", ""), 0 if ok else 1)

    def get_fact(cls, *a, **kwargs):
        if cls is facts.commands.CommandRecord:  # the answer of the command just yielded
            return answer()
        if cls is facts.commands.CommandRead:  # a read that decides: no command yielded
            commands.append({"read": kwargs["argv"]})
            return answer()
        key = f"{cls.__module__.removeprefix('facts.')}.{cls.__name__}"
        assert key in values, f"{path}: the operation read {key}; add it to the case's facts"
        return values[key]

    monkeypatch.setattr(nix_bump, "_now", lambda: "2026-12-01T03:00:00Z")
    host.get_fact = get_fact
    host.log_styled = lambda *a, **k: None
    host.current_op_hash = "case"
    meta = OperationMeta("case", None)  # pyinfra's result of the step: what it said goes there
    state.get_op_data_for_host = lambda _h, op_hash: SimpleNamespace(
        operation_meta={"case": meta}[op_hash]
    )
    with ctx_state.use(state), ctx_host.use(host):
        for command in op._inner(**args):
            if isinstance(command, argv.Failure):  # pyinfra fails the step, runs no more
                commands.append(["fail"])
                break
            if isinstance(command, argv.Recorded):  # its answer: the next reply
                commands.append({"run": command.argv})
            else:
                commands.append(_parsed(command))
    commands = json.loads(json.dumps(commands))
    what = json.loads(json.dumps(said.said_by(meta), default=str))
    if os.environ.get("REMEDY_UPDATE_CASES") == "1":
        # after a deliberate change of an operation's commands; review the diff
        case["commands"] = commands
        case["noop_description"] = host.noop_description
        case["said"] = what
        path.write_text(json.dumps(case, indent=2) + "\n")
    assert commands == case["commands"], json.dumps(commands, indent=2)
    assert host.noop_description == case["noop_description"]
    assert what == case["said"]
