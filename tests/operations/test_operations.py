"""Each operation as the deploy runs it: the planner's values, its host program's answers.

A case is ``tests/operations/<module>.<operation>/<case>.json``: the host as recorded from
a twin (a ``serving.HostSnapshot`` fixture), its data and the settings in scope give the
step's values, as the pure planner gives them (``remedy.core.run.steps.plan_steps``;
``stage`` or ``name`` picks the step, ``values`` overrides some fields). At execution the
operation runs its program (``remedy/host/steps/NAME.sh``): in check mode as a read, in
apply mode as the step's command. The program's answers are ``answers``, in order: each
one a program's real answer recorded on a twin (``tests/operations/answers``, written by
``tests/twin/test_step_programs.py`` with ``REMEDY_RECORD_ANSWERS``).

What the case expects was written by hand, not recorded from the code (there is no
update mode): ``expect.commands``, each ``check``, ``apply`` (with the values that
differ from the planner's), ``preview`` or ``fail``; the noop's reason (``noop``,
exact, or ``noop_has``); what the step said (``said``, a subset; ``said_has``, a part
of one value); what it logged (``logged_has``); ``words_have``, the
values the program must be given. Every case also checks, from the argv alone, that
each program gets the planner's values and that pyinfra's quoting keeps every value one
argument, whatever the host data holds, in its check (the read's command line) as in its
apply.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api import StringCommand
from pyinfra.api.operation import OperationMeta
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.util import FakeState, create_host

import facts.commands
import facts.serving
from remedy import host as host_programs
from remedy.core.config import desired
from remedy.core.config.host_data import builder_of, from_host_data
from remedy.core.programs import record
from remedy.core.programs import step_values as sv
from remedy.core.run import steps
from remedy.core.run.plan import plan_restore, unhealthy
from remedy.core.run.stop import StopRequest
from remedy.operations import argv, memory, nix, said, serving

HERE = Path(__file__).parent
ANSWERS = HERE / "answers"
SNAPSHOTS = HERE.parent / "facts" / "serving.HostSnapshot"
MODULES = {"memory": memory, "nix": nix, "serving": serving}
SCOPES = {"tool_calling": desired.TOOL_CALLING, "all": desired.ALL}
RUN_ID = "laptop:1:1796000000"


def cases():
    for folder in sorted(p for p in HERE.iterdir() if p.is_dir() and "." in p.name):
        for path in sorted(folder.glob("*.json")):
            yield pytest.param(folder.name, path, id=f"{folder.name}/{path.stem}")


def snapshot(case: dict):
    lines = json.loads((SNAPSHOTS / f"{case['snapshot']}.json").read_text())["output"]
    snap = facts.serving.HostSnapshot().process(lines)
    if case.get("probe_timed_out"):  # a hung server: the probe timed out
        hung = dataclasses.replace(snap.probe, outcome="unreachable", timed_out=True)
        snap = dataclasses.replace(snap, probe=hung)
    return snap


def planned(case: dict, operation: str) -> sv.StepValues:
    """The values the planner gives OPERATION's step for the case's host."""
    snap = snapshot(case)
    s = from_host_data("cfx-llm2", case.get("data", {}))
    plan = plan_restore(snap, s, SCOPES[case.get("scope", "all")])
    builder = None
    if (data := case.get("builder")) is not None:  # the inventory's builder host, bb
        builder = builder_of(s, "bb", data, "cfx-llm2")
    run = steps.plan_steps(plan, snap, s, RUN_ID, unhealthy(plan, snap), builder, "cfx-llm2")
    if "name" in case:
        (step,) = [x for x in run.steps if x.template.key == case["name"]]
        assert step.op == operation, case["name"]
    else:
        step = run.steps[run.find(operation, case.get("stage"))]
    return dataclasses.replace(step.values, **case.get("values", {}))


def answer(name: str) -> record.Answer:
    """A program's answer recorded on a twin."""
    kept = json.loads((ANSWERS / f"{name}.json").read_text())
    return record.Answer(kept["code"] == 0, kept["stdout"], "", kept["code"])


def program_words(values: sv.StepValues, argv_: list[str], mode: str) -> list[str]:
    """ARGV is VALUES' program in MODE: its text, name and mode, then its values."""
    name = values.PROGRAM
    assert argv_[:2] == ["sh", "-c"], argv_[:2]
    assert argv_[2] == host_programs.step_program(name), f"not the text of steps/{name}.sh"
    assert argv_[3:5] == [f"remedy-{name}", mode], argv_[3:5]
    return argv_[5:]


def one_argument_each(command: StringCommand, argv_: list[str]) -> None:
    """pyinfra's quoting keeps each element of ARGV one argument of the command line."""
    line = command.get_raw_value()
    assert shlex.split(line)[-len(argv_) :] == argv_, "the quoting split an argument"


def run_case(operation: str, case: dict):
    module, name = operation.split(".")
    op = getattr(MODULES[module], name)
    values = planned(case, operation)
    state = FakeState()
    state.is_executing = case.get("executing", False)
    host = create_host(state, name="cfx-llm2")
    replies = [answer(x) for x in case.get("answers", [])]
    commands: list = []
    logged: list[str] = []

    def next_answer():
        assert replies, f"{operation}: the operation read more answers than the case has"
        return replies.pop(0)

    def get_fact(cls, *a, **kwargs):
        if cls is facts.commands.CommandRead:  # the program's check: it decides
            commands.append(("check", kwargs["argv"], None))
            return next_answer()
        if cls is facts.commands.CommandRecord:  # the answer of the apply just yielded
            return next_answer()
        raise AssertionError(f"{operation} read the fact {cls.__name__}: not a program's")

    host.get_fact = get_fact
    host.log_styled = lambda text, **k: logged.append(text)
    host.current_op_hash = "case"
    meta = OperationMeta("case", None)  # pyinfra's result of the step: what it said goes there
    state.get_op_data_for_host = lambda _h, op_hash: SimpleNamespace(
        operation_meta={"case": meta}[op_hash]
    )
    extra = {}
    if "stop" in case:
        extra["stop"] = StopRequest(case["stop"])
    with ctx_state.use(state), ctx_host.use(host):
        for command in op._inner(values, **extra):
            if isinstance(command, argv.Failure):  # pyinfra fails the step, runs no more
                commands.append(("fail", None, command))
                break
            if isinstance(command, argv.Recorded):
                commands.append(("apply", command.argv, command))
            else:
                commands.append(("preview", None, command))
    assert not replies, f"{len(replies)} answer(s) of the case were not read"
    return SimpleNamespace(
        values=values,
        commands=commands,
        noop=host.noop_description,
        said=json.loads(json.dumps(said.said_by(meta), default=str)),
        logged=logged,
    )


@pytest.mark.parametrize(("operation", "path"), list(cases()))
def test_operation(operation: str, path: Path):
    case = json.loads(path.read_text())
    expect = case["expect"]
    got = run_case(operation, case)

    # the commands, in order; each program is the step's, with the planner's values
    assert [c[0] for c in got.commands] == [
        e if isinstance(e, str) else next(iter(e)) for e in expect["commands"]
    ], got.commands
    for (mode, argv_, command), wanted in zip(got.commands, expect["commands"], strict=True):
        if mode == "preview":
            shown = command.get_raw_value()
            assert f"<remedy/host/steps/{got.values.PROGRAM}.sh>" in shown, shown
            continue
        if argv_ is None:
            continue
        changed = wanted[mode] if isinstance(wanted, dict) else {}
        values = dataclasses.replace(got.values, **changed)
        assert program_words(got.values, argv_, mode) == values.words()
        if command is None:  # a check: the read's command line, as pyinfra runs the fact
            command = facts.commands.CommandRead().command(argv=argv_)
        one_argument_each(command, argv_)
    words = [w for _m, a, _c in got.commands if a for w in a[5:]]
    for w in expect.get("words_have", []):
        assert w in words, f"{w!r} is not a value the program was given"

    if "noop" in expect:
        assert got.noop == expect["noop"]
    for part in expect.get("noop_has", []):
        assert got.noop and part in got.noop, got.noop
    for key, value in expect.get("said", {}).items():
        assert got.said.get(key) == value, (key, got.said.get(key))
    for key, part in expect.get("said_has", {}).items():
        assert key in got.said and part in json.dumps(got.said[key]), (key, got.said.get(key))
    for part in expect.get("logged_has", []):
        assert any(part in line for line in got.logged), got.logged


def test_every_recorded_answer_is_replayed_by_a_case():
    """An answer no case reads is a program's decision no operation test covers."""
    used = {
        name
        for _op, path in (p.values for p in cases())
        for name in json.loads(path.read_text()).get("answers", [])
    }
    kept = {p.stem for p in ANSWERS.glob("*.json")}
    assert kept - used == set(), sorted(kept - used)
    assert used - kept == set(), sorted(used - kept)
