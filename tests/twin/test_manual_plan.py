"""Issue 42: the manual script a person reads and runs as root.

``sh -s -- plan`` prints the numbered plan and the commands and changes nothing; the
script run on a host other than the one it was rendered for stops before changing
anything, and names both hosts.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from remedy.core.programs import journal
from tests.conftest import owner_git, unit_props
from tests.twin.test_one_implementation import manual_script

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"


def host_state(twin) -> dict:
    """What a run would change: the checkout, /run's units and override, the system
    profile and the running system, the server's process, remedy's journal, the
    scratch clones."""
    listing = (
        "find /run/systemd/system /run/tt-serving-override -printf '%p %m %s %T@\\n' "
        "2>/dev/null | sort; find /var/lib/remedy -mindepth 1 -not -name 'manual-runs-*' "
        "-not -name 'run-*.answers' -printf '%p %m %s %T@\\n' 2>/dev/null | sort; "
        "ls -d /tmp/remedy-bump.* 2>/dev/null"
    )  # remedy's record of the manual run is its audit, and what the run's steps answered
    # (lib.sh kept: the outcome's input) is its record too, not the host's state
    return {
        "head": owner_git(twin, "rev-parse", "HEAD").stdout,
        "status": owner_git(twin, "status", "--porcelain").stdout,
        "files": twin.exec(["sh", "-c", listing], check=False).stdout,
        "profile": twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout,
        "current": twin.exec(["readlink", "-f", "/run/current-system"]).stdout,
        "main_pid": unit_props(twin)["MainPID"],
        "journal": twin.exec(["cat", journal.path(UNIT)], check=False).stdout,
    }


def run_script(twin, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*twin.ssh_argv(), "sh", "-s", "--", *args], input=script, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip


def test_plan_prints_the_numbered_plan_and_the_commands_and_changes_nothing(make_twin):
    twin = make_twin(with_emergency_override=True)
    script = manual_script("inventory/twin.py", twin)
    before = host_state(twin)
    proc = run_script(twin, script, "plan")
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan, sep, commands = proc.stdout.partition("The commands, in order")
    assert sep, proc.stdout[-3000:]
    for part in (plan, commands):  # each numbered from 1, in order
        numbered = [int(n) for n in re.findall(r"^\s*(\d+)\. ", part, re.M)]
        assert numbered and numbered == list(range(1, len(numbered) + 1)), part[:3000]
    assert f"for {twin.name}" in proc.stdout or twin.name in proc.stdout.split("\n\n")[0]
    assert host_state(twin) == before


def test_a_script_rendered_for_another_host_stops_naming_both(make_twin):
    rendered_for = make_twin(with_emergency_override=True)
    run_on = make_twin(with_emergency_override=True)
    ids = {t.name: t.exec(["cat", "/etc/machine-id"]).stdout.strip() for t in (rendered_for,
                                                                             run_on)}  # fmt: skip
    assert ids[rendered_for.name] != ids[run_on.name], "the twins share a machine-id"
    script = manual_script("inventory/twin.py", rendered_for)
    before = host_state(run_on)
    proc = run_script(run_on, script)
    said = " ".join(proc.stderr.split())
    assert proc.returncode != 0, said[-3000:]
    assert (
        f"this is not the host the plan was made for: it was rendered for {rendered_for.name} "
        f"(machine-id {ids[rendered_for.name]})"
    ) in said, said[-3000:]
    assert f"(machine-id {ids[run_on.name]}); nothing changed" in said
    after = host_state(run_on)
    assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}
