"""The run's step list as a POSIX shell script a person reads, then runs as root.

The planner's steps (``remedy.core.run.steps.plan_steps``), with the values the
deploy would give them, become: at the top, the host it was rendered for and the plan
in words, numbered as the steps; then ``main``, one short line a step; then the
helpers, each with a one-line comment: the runner (``remedy/host/manual_runner.sh``),
each step's values, and the host programs themselves, the same texts the deploy's
operations run (``remedy/host``). No decision is made here or in the script but the
plan's: each program decides on the host, as it does for the deploy.

    remedy runbooks show 001 --manual --inventory inventory/production.py \
        --host cfx-llm2 > r.sh
    ssh root@cfx-llm2 sh -s -- plan < r.sh   # the plan and its commands; no change
    ssh root@cfx-llm2 sh -s < r.sh           # carry it out
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass

from remedy import host as host_programs
from remedy.core.programs import step_values as sv
from remedy.core.run.plan import RestorePlan
from remedy.core.run.steps import DURABLE, FALLBACK, Steps, when_of

WIDTH = 80
TAG = "REMEDY_PROGRAM"
MANUAL_RUN_ID = "manual"  # a plan made for the script: the runner gives the run its id
WHEN = {
    "fallback": " (the fallback only)",
    "override": " (the fallback only)",
    "rollback": " (after a failed switch)",
}


@dataclass(frozen=True)
class Rendering:
    """For whom and from what the script is rendered."""

    host: str  # the inventory name
    runbook: str
    title: str
    issues: tuple[str, ...]
    read: str  # how the plan knows the host: "read at …", or why it was not read
    inventory: str = ""
    approval: str = ""  # what the bump may take (host data bump_to, trusted_signers)


def _pieces(value: str, width: int) -> list[str] | None:
    """VALUE in pieces for a variable built a piece a line, when as one quoted word it
    would not fit WIDTH (or spans lines); None: it fits."""
    quoted = shlex.quote(value)
    if "\n" not in quoted and len(quoted) <= width:
        return None
    pieces: list[str] = []
    for line in value.split("\n"):
        # tabs kept as they are (a prove item is KIND<TAB>LABEL<TAB>VALUE)
        chunks = textwrap.wrap(line, 60, drop_whitespace=False, break_on_hyphens=False,
                               expand_tabs=False, replace_whitespace=False) or [""]  # fmt: skip
        pieces += chunks[:-1] + [chunks[-1] + "\n"]
    pieces[-1] = pieces[-1][:-1]
    return pieces


def _sq(text: str) -> str:
    """TEXT in single quotes, always (a piece glued to a variable before it)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _values_function(n: int | str, values: sv.StepValues, title: str) -> list[str]:
    """values_N: runs step N's program (``program``) with the values the deploy gives
    it; a long value is built first in a variable of its own, a piece a line."""
    head = [f"# {n}. {title}"[:WIDTH], f"values_{n}() {{"]
    body: list[str] = []
    args: list[str] = []
    for i, word in enumerate(values.words()):
        key, eq, value = word.partition("=")
        if not (eq and re.fullmatch(r"[a-z0-9_]+", key)):
            key, value = "", word
        if values.PROGRAM == "override" and key == "putting_back":
            args.append('"putting_back=${putting_back:-no}"')  # set when stopped
        elif (
            key == "stopped"
            and isinstance(values, sv.RunValues)
            and (values.when or isinstance(values, sv.Outcome))
        ):
            args.append('"stopped=${stopped:-}"')  # the runner's, when it runs
        elif key == "plan_path" and isinstance(values, sv.Outcome):
            args.append('"plan_path=$path"')  # the plan's, or fallback (as each step's)
        elif key == "path" and isinstance(values, sv.RunValues) and values.when:
            args.append('"path=$path"')  # the plan's, or fallback (sh -s -- fallback)
        elif key == "run_id" and value == MANUAL_RUN_ID:
            args.append('"run_id=$run_id"')  # the script's own (the runner makes it)
        elif (pieces := _pieces(value, WIDTH - len(key) - 8)) is None:
            args.append(shlex.quote(word))
        else:
            body.append(f"  v{i}={_sq(pieces[0])}")
            body += [f"  v{i}=$v{i}{_sq(p)}" for p in pieces[1:]]
            args.append(f'"{key}=$v{i}"' if key else f'"$v{i}"')
    line = f'  program {values.PROGRAM} "$1"'
    for a in args:
        if len(line) + 1 + len(a) + 2 > WIDTH:
            body.append(line + " \\")
            line = "    " + a
        else:
            line += " " + a
    return [*head, *body, line, "}"]


def _program_function(name: str, text: str, what: str) -> list[str]:
    tag = TAG
    while tag in text.splitlines():
        tag += "_"
    return [f"# {what}"[:WIDTH], f"text_{name}() {{", f"  cat <<'{tag}'", text.rstrip("\n"),
            tag, "}"]  # fmt: skip


def _comment(text: str, indent: str = "") -> list[str]:
    out = []
    for para in text.split("\n"):
        wrapped = textwrap.wrap(para, WIDTH - 2 - len(indent), subsequent_indent="  ",
                                break_on_hyphens=False, break_long_words=True)  # fmt: skip
        out += [f"# {indent}{w}".rstrip() for w in wrapped or [""]]
    return out


def plan_lines(plan: RestorePlan, steps: Steps, r: Rendering) -> list[str]:
    """The plan in words, each line within 76 columns (it is printed after "#   "):
    the path and why, then each step that may run, numbered as the script numbers it,
    and the steps the plan leaves out, with why."""
    out: list[str] = []

    def say(text: str, first: str = "", then: str = "") -> None:
        wrapped = textwrap.wrap(
            text, WIDTH - 4, initial_indent=first, subsequent_indent=then,
            break_on_hyphens=False, break_long_words=True,
        )  # fmt: skip
        out.extend(wrapped or [""])

    path = {DURABLE: "durable", FALLBACK: "the /run fallback"}.get(plan.path, plan.path)
    say(f"path: {path}")
    for reason in plan.reasons:
        say(reason, "  ", "    ")
    if plan.path == DURABLE:
        say("if a durable step gives up: the /run fallback, then the rollback", "  ", "    ")
    out.append("")
    n, skipped = 0, []
    for step in steps.steps:
        if step.values.skip:
            skipped.append(f"{step.template.name}: {step.values.skip}")
            continue
        if step.op == "serving.outcome_reported":
            continue
        n += 1
        when = WHEN.get(when_of(step.template), "")
        say(f"{step.template.title}{when}", f"{n:2}. ", "      ")
        if step.op == "nix.flake_input_updated" and r.approval:
            say(r.approval, "      ", "      ")
    if skipped:
        out += ["", "left out by the plan:"]
        for x in skipped:
            say(x, "  - ", "    ")
    return out


def render(plan: RestorePlan, steps: Steps, r: Rendering) -> str:
    """The script for the plan's STEPS (see the module's doc)."""
    from remedy.core.programs import journal as journal_core

    planned = [st for st in steps.steps if not st.values.skip]
    runner = host_programs.text("manual_runner.sh")
    said_plan = plan_lines(plan, steps, r)
    unit = next((getattr(st.values, "unit", None) for st in planned if
                 getattr(st.values, "unit", None)), "tenstorrent-serving.service")  # fmt: skip
    lock_wait = next((st.values.lock_wait_s for st in steps.steps
                      if isinstance(st.values, sv.Switch)), 30.0)  # fmt: skip
    head = [
        "#!/bin/sh",
        *_comment(f"remedy: the manual script of runbook {r.runbook}, {r.title}"),
        *_comment(f"Issues: {', '.join(r.issues)}."),
        *_comment(
            f"Rendered for host {r.host}{' of ' + r.inventory if r.inventory else ''}; {r.read}."
        ),  # fmt: skip
        "#",
        "# Read it, then run it on the host as root:",
        "#   ssh root@HOST sh -s -- plan < FILE   the plan and its commands;",
        "#                                        changes nothing",
        "#   ssh root@HOST sh -s < FILE           carry out the plan",
        "#   ssh root@HOST sh -s -- fallback < FILE   the /run fallback only",
        "# Exit: 0 done (durable); 3 the /run fallback holds (a reboot reverts it);",
        "# 6 durable at the next boot (a reboot or a restart activates it);",
        "# 1 failed or refused; 5 another remedy run holds the host; 130/143 stopped.",
        "#",
        "# The plan (remedy's planner, from what it read of the host):",
        *(f"#   {x}".rstrip() for x in said_plan),
        "#",
        "# Each step runs a host program, remedy/host/steps/NAME.sh, defined after",
        "# the steps: the same text the deploy runs. It decides on the host, when it",
        "# runs, whether there is anything to do, and says why when there is not.",
        "# shellcheck disable=SC2317  # the helpers come after main, which calls them",
        "set -eu",
        "",
        "main() {",
        '  start "$@"',
    ]
    n = 0
    values_fns: list[str] = []
    t_outcome = "the run's outcome, from what the steps answered"
    for st in planned:
        if st.op == "serving.outcome_reported":  # the runner's finish runs it
            values_fns += _values_function("outcome", st.values, t_outcome)
            continue
        n += 1
        t = st.template
        line = f"  step {n} {st.values.PROGRAM}"
        title = shlex.quote(t.name)
        head.append(f"{line} {title}" if len(line) + len(title) < WIDTH else
                    f"{line} \\\n    {title}")  # fmt: skip
        values_fns += _values_function(n, st.values, t.name)
    head += ["  finish", "}", ""]
    settings = [
        "# What the runner needs to know: the plan's path and whom it runs for.",
        f"runbook={shlex.quote(r.runbook)} host_name={shlex.quote(r.host)}",
        f"issues={shlex.quote(', '.join(_json(i) for i in r.issues))}",
        f"unit={shlex.quote(unit)} lock_wait_s={lock_wait:g}",
        f"path={plan.path}",  # durable, fallback or noop
        f"journal={shlex.quote(journal_core.path(unit))}",
        "plan_text() {",
        "  cat <<'REMEDY_PLAN'",
        *said_plan,
        "REMEDY_PLAN",
        "}",
    ]
    names = sorted({st.values.PROGRAM for st in planned if st.values.PROGRAM})
    shared = "What every step's program shares (remedy/host/lib.sh)."
    programs = _program_function("lib", host_programs.text("lib.sh"), shared)
    for name in names:
        first = host_programs.text(f"steps/{name}.sh").split("\n", 1)[0].lstrip("# ")
        programs += _program_function(
            name, host_programs.text(f"steps/{name}.sh"), f"{name}: {first}"
        )
    tail = [
        "",
        "# ---- the helpers ----",
        *runner.rstrip("\n").splitlines(),
        "",
        *settings,
        "",
        "# ---- each step's values (the deploy's, from the plan) ----",
        *values_fns,
        "",
        "# ---- the host programs (remedy/host), the same text the deploy runs ----",
        *programs,
        "",
        'main "$@"',
    ]
    return "\n".join(head + tail) + "\n"


def render_standalone(steps: list[tuple[str, object]], r: Rendering, unit: str) -> str:
    """A runbook that is not the run's flow: STEPS are (id, values) for an operation,
    whose program runs, or (id, commands) run as written; each stops the run when it
    gives up or fails."""
    from remedy.core.programs import journal as journal_core

    head = [
        "#!/bin/sh",
        *_comment(f"remedy: the manual script of runbook {r.runbook}, {r.title}"),
        *_comment(f"Issues: {', '.join(r.issues)}. Rendered for host {r.host}."),
        "#   ssh root@HOST sh -s -- plan < FILE   the steps; changes nothing",
        "#   ssh root@HOST sh -s < FILE           carry them out",
        "# shellcheck disable=SC2317  # the helpers come after main, which calls them",
        "set -eu",
        "",
        "main() {",
        '  start "$@"',
    ]
    fns: list[str] = []
    names: set[str] = set()
    for n, (name, what) in enumerate(steps, 1):
        if isinstance(what, sv.StepValues):
            head.append(f"  step {n} always stops {what.PROGRAM} {shlex.quote(name)}")
            fns += _values_function(n, what, name)
            names.add(what.PROGRAM)
        else:
            head.append(f"  step {n} always stops commands {shlex.quote(name)}")
            fns += [f"# {n}. {name}"[:WIDTH], f"values_{n}() {{",
                    '  [ "$1" != plan ] || { echo "     (commands)"; return 0; }',
                    *(f"  {x}" for x in str(what).splitlines()),
                    '  echo "@@remedy done the commands ran"', "}"]  # fmt: skip
    head += ["  finish", "}", ""]
    told = sv.Outcome(journal=journal_core.path(unit), run_id=MANUAL_RUN_ID,
                      plan_path="durable", reasons="the runbook's steps")  # fmt: skip
    fns += _values_function("outcome", told, "the run's outcome, from what the steps answered")
    names.add(told.PROGRAM)
    programs = _program_function("lib", host_programs.text("lib.sh"), "the shared library")
    for name in sorted(names):
        programs += _program_function(name, host_programs.text(f"steps/{name}.sh"), name)
    settings = [
        f"runbook={shlex.quote(r.runbook)} host_name={shlex.quote(r.host)}",
        f"issues={shlex.quote(', '.join(_json(i) for i in r.issues))}",
        f"unit={shlex.quote(unit)} lock_wait_s=30 path=durable",
        f"journal={shlex.quote(journal_core.path(unit))}",
        "plan_text() { echo 'the runbook's steps, in order'; }".replace("'s", ""),
    ]
    tail = ["# ---- the helpers ----",
            *host_programs.text("manual_runner.sh").rstrip("\n").splitlines(), "",
            *settings, "", *fns, "", *programs, "", 'main "$@"']  # fmt: skip
    return "\n".join(head + tail) + "\n"


def _json(text: str) -> str:
    import json

    return json.dumps(text)
