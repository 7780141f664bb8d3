"""Issue 42: every step is one host program that the deploy and the manual script run.

The manual script carries the host programs (remedy/host) and runs them; the deploy's
operations yield them. Here, without a host: every program in a rendered script is, byte
for byte, the program the deploy runs for that step; the script is one a person can read
(80 columns, the part before the helpers short); every program is shellcheck-clean and
parses under dash and bash --posix; the library's arithmetic agrees with the Python it
replaced (kept as the tests' oracle).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from remedy import host
from remedy.core.config import desired
from remedy.core.config.host_data import from_host_data
from remedy.core.programs import step_values as sv
from remedy.core.readings import memory as mem
from remedy.core.render import manual
from remedy.core.run import steps as steps_core
from remedy.core.run.plan import plan_restore
from remedy.runbooks import discover

PROJECT = Path(__file__).resolve().parents[2]
FACTS = PROJECT / "tests" / "facts" / "serving.HostSnapshot"
SHELLS = [["dash"], ["bash", "--posix"]]  # scripts/setup.sh installs dash and shellcheck
FLOW_RUNBOOKS = ("001", "003", "006")


def snapshot(case: str):
    from facts.serving import HostSnapshot

    return HostSnapshot().process(json.loads((FACTS / f"{case}.json").read_text())["output"])


def runbook(rid: str):
    return next(e for e in discover(PROJECT) if e.id == rid).runbook


def render(rid: str, case: str | None) -> str:
    snap = snapshot(case) if case else None
    data = {"flake_host": "cfx-llm2"}
    return manual.render(runbook(rid), data, None, snap, "oc1", "inventory/twin.py", "test")


def programs_in(script: str) -> dict[str, str]:
    """Each ``text_NAME`` here-document of SCRIPT: NAME -> its text."""
    found = {}
    for m in re.finditer(r"^text_(\w+)\(\) \{\n  cat <<'(REMEDY_PROGRAM_*)'\n", script, re.M):
        body = script[m.end() :]
        found[m.group(1)] = body[: body.index(f"\n{m.group(2)}\n")] + "\n"
    return found


CASES = [(rid, case) for rid in FLOW_RUNBOOKS for case in (None, "fresh", "emergency_override")]


@pytest.mark.parametrize(("rid", "case"), CASES)
def test_every_program_in_the_manual_script_is_one_the_deploy_runs(rid, case):
    """The acceptance of issue 42: each program text in the rendered script is one of
    the programs the deploy's operations yield, for the same plan."""
    script = render(rid, case)
    found = programs_in(script)
    lib = found.pop("lib")
    assert lib == host.text("lib.sh")
    s = manual.as_person(from_host_data("oc1", {"flake_host": "cfx-llm2"}))
    scope = desired.ALL if rid == "006" else desired.TOOL_CALLING
    if case:
        plan = plan_restore(snapshot(case), s, scope)
        planned = steps_core.plan_steps(plan, snapshot(case), s, "r", None, None, "oc1")
    else:
        planned = steps_core.plan_steps(steps_core.unread_plan(s, scope), None, s, "r")
    deployed = {st.values.PROGRAM for st in planned.steps if not st.values.skip}
    assert set(found) <= deployed, set(found) - deployed
    assert found, "no step program in the script"
    for name, text in found.items():
        run = lib + f"\n# ---- the step: {name}\n" + text
        assert run == host.step_program(name), name
        # what the deploy's operation yields: the same text, as the argv's program
        values = next(st.values for st in planned.steps if st.values.PROGRAM == name)
        assert sv.argv(values, sv.APPLY)[2] == run
    # no shell decides anything else: the runner, the plan, the values, the programs
    assert "$(cat <<" not in script.split("# ---- the helpers ----")[0]


@pytest.mark.parametrize("rid", FLOW_RUNBOOKS)
def test_a_person_reads_the_script_in_80_columns(rid):
    for case in (None, "fresh", "emergency_override", "durable"):
        script = render(rid, case)
        long = [x for x in script.splitlines() if len(x) > 80]
        assert long == [], long[:3]
        assert [x for x in script.splitlines() if x != x.rstrip()] == []
    head = render("001", "fresh").split("# ---- the helpers ----")[0]
    assert len(head.splitlines()) <= 150, len(head.splitlines())


def test_the_top_names_the_host_and_numbers_the_plan():
    script = render("001", "fresh")
    top = script.split("set -eu")[0]
    assert "Rendered for host oc1 of inventory/twin.py" in top
    assert "cfx-llm2" not in top.split("\n# Issues")[0]
    assert "sh -s -- plan" in top and re.search(r"^#    1\. Record where the run begins", top, re.M)
    numbered = re.findall(r"^#\s+(\d+)\. ", top, re.M)
    steps = re.findall(r"^  step (\d+) ", script, re.M)
    assert numbered == steps


ALL_PROGRAMS = [f"steps/{n}.sh" for n in host.step_names()]


def shellcheck(text: str, tmp_path: Path, *excluded: str) -> subprocess.CompletedProcess:
    """shellcheck (the Debian package, as CI installs it) on TEXT as a POSIX sh file."""
    assert shutil.which("shellcheck"), "shellcheck is not installed: run scripts/setup.sh"
    path = tmp_path / "program.sh"
    path.write_text("#!/bin/sh\n" + text)
    argv = ["shellcheck", "-s", "sh", *(["-e", ",".join(excluded)] if excluded else [])]
    return subprocess.run([*argv, str(path)], capture_output=True, text=True)


HOST_FILES = sorted(
    str(p.relative_to(PROJECT / "remedy" / "host"))
    for p in (PROJECT / "remedy" / "host").rglob("*.sh")
    if p.parent.name != "steps"  # each is checked whole: the library and the step
)


@pytest.mark.parametrize("name", HOST_FILES)
def test_every_host_file_is_shellcheck_clean_on_its_own(name, tmp_path):
    """Each file as a fragment: what it shares with the program that includes it (a
    variable set or read there: SC2154, SC2034; a function another part calls: SC2317)
    is checked where they are whole (the steps, the runner, the facts' scripts below);
    SC1003 is sed's '$a\\'. Every other check holds for each file."""
    ran = shellcheck(host.text(name), tmp_path, "SC2154", "SC2034", "SC2317", "SC1003")
    assert ran.returncode == 0, ran.stdout[:3000]


@pytest.mark.parametrize("name", host.step_names())
def test_each_step_program_is_shellcheck_clean(name, tmp_path):
    ran = shellcheck(host.step_program(name), tmp_path)
    assert ran.returncode == 0, ran.stdout[:3000]


def test_the_manual_runner_is_shellcheck_clean(tmp_path):
    ran = shellcheck(render("006", None), tmp_path)
    assert ran.returncode == 0, ran.stdout[:3000]


def fact_scripts():
    """Each fact's command as pyinfra runs it (remedy/host/facts), with stand-in
    arguments: the script is its longest part (the others are quoted host data)."""
    import inspect

    from pyinfra.api import FactBase

    import facts.memory
    import facts.nix
    import facts.serving
    import facts.settings

    for module in (facts.memory, facts.nix, facts.serving, facts.settings):
        for name, cls in sorted(vars(module).items()):
            if not (inspect.isclass(cls) and issubclass(cls, FactBase)):
                continue
            if cls.__module__ != module.__name__:
                continue
            params = list(inspect.signature(cls.command).parameters.values())[1:]
            args = {p.name: "x" for p in params if p.default is inspect.Parameter.empty}
            bits = [str(getattr(b, "obj", b)) for b in cls().command(**args).bits]
            yield pytest.param(max(bits, key=len), id=name)


@pytest.mark.parametrize("script", list(fact_scripts()))
def test_each_fact_script_is_shellcheck_clean(script, tmp_path):
    ran = shellcheck(script, tmp_path)
    assert ran.returncode == 0, ran.stdout[:3000]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize("name", host.step_names())
def test_each_step_program_parses_and_answers_a_bad_mode(shell, name):
    text = host.step_program(name)
    assert subprocess.run([*shell, "-n", "-c", text]).returncode == 0
    ran = subprocess.run([*shell, "-c", text, f"remedy-{name}"], capture_output=True, text=True)
    assert ran.stdout == f"@@remedy give-up remedy-{name}: no mode (check or apply)\n"
    ran = subprocess.run([*shell, "-c", text, f"remedy-{name}", "check", "bad key=1"],
                         capture_output=True, text=True)  # fmt: skip
    assert ran.stdout == f"@@remedy give-up bad value for remedy-{name}: bad key=1\n"


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_missing_value_is_named(shell):
    text = host.step_program("gate")
    ran = subprocess.run([*shell, "-c", text, "remedy-gate", "check", "min_gb=4"],
                         capture_output=True, text=True)  # fmt: skip
    assert ran.stdout == "@@remedy give-up remedy-gate needs the value doing\n"


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
@pytest.mark.parametrize(("avail_kb", "min_gb", "cap_gb"),
                         [(24_000_000, 4.0, None), (24_000_000, 4.0, 2.5), (3_000_000, 4.0, None),
                          (23_437_500, 23.9, None)])  # fmt: skip
def test_the_librarys_nix_bound_is_the_python_one(tmp_path, shell, avail_kb, min_gb, cap_gb):
    info = tmp_path / "meminfo"
    info.write_text(f"MemTotal: 25000000 kB\nMemAvailable: {avail_kb} kB\n")
    headroom = mem.MemoryHeadroom(avail_kb, 25_000_000)
    want = mem.nix_memory_bound(headroom, min_gb, cap_gb)
    ran = subprocess.run(
        [*shell, "-c", host.text("lib.sh") + "nix_bound", "t", "apply",
         f"min_gb={min_gb:g}", f"nix_memory_max_gb={cap_gb if cap_gb else ''}",
         f"meminfo={info}"], capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert abs(int(ran.stdout) - want) <= 1, (ran.stdout, want)


def test_the_values_of_a_step_are_one_dataclass_the_planner_builds():
    """Item 5: a step's values in one form, the planner's, given to the operation and to
    the manual renderer alike."""
    s = from_host_data("cfx-llm2", {})
    plan = plan_restore(snapshot("fresh"), s, desired.ALL)
    planned = steps_core.plan_steps(plan, snapshot("fresh"), s, "r")
    for st in planned.steps:
        assert isinstance(st.values, sv.StepValues), st.template.key
        if st.values.PROGRAM:
            assert st.values.PROGRAM in host.step_names()
