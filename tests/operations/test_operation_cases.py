"""Data cases for the engine's operations, with pyinfra-testing's fake state and host.

Each case is ``tests/operations/<module>.<operation>/<case>.json``: the host as
recorded from a twin (a ``serving.HostSnapshot`` fixture), its data and the
settings in scope, the run state the earlier steps left, the facts the
operation reads while executing (recorded fixtures too), and what it must give:
its commands (argv as pyinfra quotes it; ``["function", NAME]`` for a
FunctionCommand) or its noop reason. Facts in, commands or a reason out: no host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyinfra.api import FunctionCommand
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.operations import parse_commands
from pyinfra_testing.util import FakeState, create_host

import facts.memory
import facts.nix
import facts.serving
from remedy.core import desired
from remedy.core.plan import RestoreRun, plan_restore
from remedy.core.settings import from_host_data
from remedy.operations import memory, nix, serving

HERE = Path(__file__).parent
FACTS = HERE.parent / "facts"
MODULES = {"memory": memory, "nix": nix, "serving": serving}
FACT_CLASSES = {
    "memory.MemoryHeadroom": facts.memory.MemoryHeadroom,
    "serving.ServingUnit": facts.serving.ServingUnit,
    "serving.ToolCallProbe": facts.serving.ToolCallProbe,
    "nix.SystemGenerations": facts.nix.SystemGenerations,
}
SCOPES = {"tool_calling": desired.TOOL_CALLING, "all": desired.ALL}


def recorded(fact: str, case: str):
    """A fact's value from its recorded twin output."""
    lines = json.loads((FACTS / fact / f"{case}.json").read_text())["output"]
    cls = facts.serving.HostSnapshot if fact == "serving.HostSnapshot" else FACT_CLASSES[fact]
    return cls().process(lines)


def cases():
    for folder in sorted(p for p in HERE.iterdir() if p.is_dir() and "." in p.name):
        for path in sorted(folder.glob("*.json")):
            yield pytest.param(folder.name, path, id=f"{folder.name}/{path.stem}")


def _command(command) -> list | str:
    if isinstance(command, FunctionCommand):
        return ["function", command.function.__name__]
    (parsed,) = parse_commands([command])
    return parsed


@pytest.mark.parametrize(("operation", "path"), list(cases()))
def test_operation_case(operation: str, path: Path):
    case = json.loads(path.read_text())
    module, name = operation.split(".")
    op = getattr(MODULES[module], name)
    snap = recorded("serving.HostSnapshot", case["snapshot"])
    s = from_host_data("cfx-llm2", case.get("data", {}))
    r = RestoreRun("cfx-llm2", s, snap, plan_restore(snap, s, SCOPES[case.get("scope", "all")]))
    for key, value in case.get("run", {}).items():
        assert hasattr(r, key), f"{path}: RestoreRun has no field {key!r}"
        setattr(r, key, value)
    state = FakeState()
    state.is_executing = case.get("executing", False)
    host = create_host(state, name="cfx-llm2")
    values = {fact: recorded(fact, c) for fact, c in case.get("facts", {}).items()}

    def get_fact(cls, *args, **kwargs):
        key = f"{cls.__module__.removeprefix('facts.')}.{cls.__name__}"
        assert key in values, f"{path}: the operation read {key}; add it to the case's facts"
        return values[key]

    host.get_fact = get_fact
    host.log_styled = lambda *a, **k: None
    with ctx_state.use(state), ctx_host.use(host):
        commands = [_command(c) for c in op._inner(r, **case.get("kwargs", {}))]
    if os.environ.get("REMEDY_UPDATE_CASES") == "1" and commands != case["commands"]:
        # after a deliberate change of an operation's commands; review the diff
        case["commands"] = commands
        path.write_text(json.dumps(case, indent=2) + "\n")
    assert commands == case["commands"], json.dumps(commands, indent=2)
    if "noop_description" in case:
        assert host.noop_description == case["noop_description"]
    for key, value in case.get("run_after", {}).items():
        assert getattr(r, key) == value, f"{key}: {getattr(r, key)!r}"
