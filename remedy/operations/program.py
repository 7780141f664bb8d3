"""A step's host program inside its operation: run it, carry its answer into pyinfra.

At execution the operation runs the step's program (``remedy/host/steps/NAME.sh``) in
check mode as a read (it decides and changes nothing): ``noop`` is ``host.noop(why)``,
``give-up`` fails the step with why. When it would act, the same program runs in apply
mode as the step's command (pyinfra counts it: the step changed), and its answer is
read back. What it logged is logged, what it said goes on the step's pyinfra result
(``remedy.operations.said``). Nothing here decides what the host needs: the program
does, for the deploy and the manual script alike.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Generator

from pyinfra import host, state
from pyinfra.api import StringCommand

from remedy.core.programs import checks as checks_core
from remedy.core.programs import signers
from remedy.core.programs import step_values as sv
from remedy.core.readings import answer as answer_core
from remedy.core.readings import changes as changes_core
from remedy.core.run.stop import NOT_STOPPED, StopRequest
from remedy.operations.argv import Failure, Ran, ran, read
from remedy.operations.said import note, say


def answered(r: Ran) -> answer_core.Answer:
    return answer_core.parse(r.stdout, r.stderr, r.code)


def carry(a: answer_core.Answer) -> None:
    """What the program logged and said, into pyinfra's log and the step's result."""
    for color, text in a.logs:
        host.log_styled(text, fg=color)
    said = dict(a.said)
    if "signature" in said:
        rev = said.get("new_rev") or ""
        said["signature"] = signers.parse_signature("signature " + said["signature"], rev)
    if "flake_checks" in said:
        said["flake_checks"] = [_check(x) for x in said["flake_checks"]]
    if a.changes:
        said["switch_changes"] = _changes(a.changes)
    if said:
        say(**said)
    for text in a.notes:
        note(text)


def _check(line: str) -> dict:
    result, _, rest = line.partition(" ")
    check, _, detail = rest.partition(" ")
    return checks_core.CheckResult(check, result, detail).to_json()


def _changes(lines: list[str]) -> dict:
    """The switch's changes beyond the settings, from what the proof printed: system_boot
    (remedy/host/system_boot.sh), ``diff …`` (nix store diff-closures), ``unread WHY``."""
    found = changes_core.read_answer(lines)
    for line in found.summary():
        host.log_styled(line, fg="blue")
    return changes_core.to_json(found)


def give_up(a: answer_core.Answer, why: str | None = None) -> Generator[StringCommand]:
    """Fail the step with its reason (ignored where the run goes on)."""
    hint = why if why and why != a.text else None
    why = why or a.text
    say(why=why)
    if hint:  # what the workstation adds (the host data to fix): the outcome says it too
        say(hint=hint)
    host.log_styled(why, fg="red")
    yield Failure()


def checked(values: sv.StepValues) -> answer_core.Answer:
    """The program's decision, changing nothing (check mode, read as a fact)."""
    a = answered(read(sv.argv(values, sv.CHECK)))
    carry(a)
    return a


def step(values: sv.RunValues, reason=None) -> Generator[StringCommand, None, bool]:
    """The step: its decision, then, if it acts, the program in apply mode. REASON
    (answer -> str | None) may say a give-up better (what host data to fix). True:
    it acted and did not give up."""
    a = checked(values)
    if a.verdict == answer_core.NOOP:
        host.noop(a.text)
        return False
    if a.verdict != answer_core.ACT:
        yield from give_up(a, reason(a) if reason else None)
        return False
    done = answered((yield from ran(values.run_id, sv.argv(values, sv.APPLY))))
    carry(done)
    if done.verdict == answer_core.GIVE_UP:
        yield from give_up(done, reason(done) if reason else None)
        return False
    if done.verdict == answer_core.NOOP:  # the host changed between the two
        host.log_styled(f"nothing done: {done.text}", fg="blue")
    return True


def check(values: sv.StepValues) -> Generator[StringCommand]:
    """A step that changes nothing (a gate, the verify): its answer is the step's."""
    a = checked(values)
    if a.verdict == answer_core.NOOP:
        host.noop(a.text)
        return
    yield from give_up(a)


CONTINGENT = "runs only if the durable path fails"
# a preview line's width: pyinfra puts "    [HOST]     " before it (a host name of up
# to 13 characters keeps it within 80 columns)
PREVIEW_WIDTH = 60


def operate(values: sv.StepValues, *, stop: StopRequest = NOT_STOPPED,
            prepare: str | None = None, said: str | None = None, act=None,
            **act_with) -> Generator[StringCommand]:  # fmt: skip
    """An operation's body. Skipped: the planner's why. At prepare (``--dry``, the
    confirmation): a contingent step says so, PREPARE is what a step that only reads
    says it will do, any other step previews its program (SAID before it). At
    execution: ACT with ACT_WITH (default ``step``: check, then apply when it acts),
    its values carrying the run's STOP request (the program decides when its stage
    is on: remedy/host/lib.sh)."""
    if values.skip:
        host.noop(values.skip)
        return
    if not state.is_executing:
        if values.contingent:
            host.noop(CONTINGENT)
        elif prepare is not None:
            host.noop(prepare)
        else:
            if said:
                host.log_styled(said, fg="blue")
            yield from preview(values)
        return
    if isinstance(values, sv.RunValues) and values.when:
        values = dataclasses.replace(values, stopped=stop.why or "")
    yield from (act or step)(values, **act_with)


def preview(values: sv.StepValues) -> Generator[StringCommand]:
    """At prepare (``--dry``, the confirmation): the step as it will run, its program
    named by its file, never run then (pyinfra runs a body at execution); with ``-v``
    each of its values is said."""
    from pyinfra.api import QuoteString

    name = values.PROGRAM
    shown = [w if "\n" not in w.strip() else f"{w.split('=', 1)[0]}=<{len(w.splitlines())} "
             "lines>" for w in values.words()]  # fmt: skip
    if getattr(state, "print_noop_info", False):  # -v
        host.log_styled(f"will run remedy/host/steps/{name}.sh apply, with:", fg="blue")
        for word in shown:  # within 80 columns after pyinfra's host prefix
            for line in textwrap.wrap(word, PREVIEW_WIDTH, initial_indent="  ",
                                      subsequent_indent="      ", break_on_hyphens=False,
                                      drop_whitespace=False) or ["  "]:  # fmt: skip
                host.log_styled(line, fg="blue")
    words = [f"<remedy/host/steps/{name}.sh>", f"remedy-{name}", sv.APPLY, *shown]
    yield StringCommand("sh", "-c", *(QuoteString(w) for w in words))
