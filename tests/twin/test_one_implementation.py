"""Issue 27: the manual script runs what the deploy runs.

The bump is one host program (remedy/host/steps/bump.sh) that both paths run with the
same values: the manual script honours bump_to and trusted_signers exactly as the
deploy does (test_bump_approval.py holds the deploy's side; test_engines_agree.py runs
both from the same states and compares the hosts they leave).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import (
    PROJECT,
    owner_git,
    probe_inside,
    run_restore,
    twin_inventory,
)
from tests.twin.test_bump_approval import (
    DROPIN,
    allowed_signers,
    audit,
    checkout_clean,
    head_of_tt_stack,
    locked_rev,
    out_of,
)

pytestmark = [pytest.mark.twin, pytest.mark.nix_cli]


def manual_script(inventory, twin, runbook: str = "001") -> str:
    proc = subprocess.run(
        ["remedy", "runbooks", "show", runbook, "--manual", "--inventory", str(inventory),
         "--host", twin.name],
        capture_output=True, text=True, cwd=PROJECT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def over_ssh(twin, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*twin.ssh_argv(), "sh", "-s"], input=script, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip


def test_the_manual_script_locks_exactly_bump_to_and_refuses_a_rev_off_the_branch(twin, tmp_path):
    revs = owner_git(twin, "log", "--format=%H", repo=fixtures.TT_STACK_DIR).stdout.split()
    fix = revs[0]  # #44, the tip before the branch moves on
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(None))
    tip = head_of_tt_stack(twin)
    owner_git(twin, "checkout", "-q", "-b", "side", revs[1], repo=fixtures.TT_STACK_DIR)
    side = machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(None, 2))
    owner_git(twin, "checkout", "-q", "master", repo=fixtures.TT_STACK_DIR)
    before = locked_rev(twin)

    script = manual_script(twin_inventory(tmp_path / "side.py", twin, bump_to=side), twin)
    plan = " ".join(x.lstrip("#").strip() for x in script.split("set -eu")[0].splitlines())
    assert f"takes exactly bump_to {side}" in plan  # said in the plan, before it runs
    proc = over_ssh(twin, script)
    said = out_of(proc)
    assert re.search(rf"GAVE UP: bump_to {side} is not on (refs/heads/)?master", said), said[-3000:]
    assert "the durable path is abandoned; the /run fallback takes over" in said
    assert "VOLATILE" in said and locked_rev(twin) == before and checkout_clean(twin)

    proc = over_ssh(
        twin, manual_script(twin_inventory(tmp_path / "fix.py", twin, bump_to=fix), twin)
    )
    assert proc.returncode == 0, out_of(proc)[-3000:]
    assert "the durable path is abandoned" not in out_of(proc), out_of(proc)[-3000:]
    assert locked_rev(twin) == fix != tip  # exactly the approved rev, not the branch's head
    assert checkout_clean(twin) and probe_inside(twin).outcome == "parsed"


def test_the_manual_script_refuses_an_unsigned_tip_with_trusted_signers(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    signers = allowed_signers(twin, tmp_path)
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(None))
    head, before = head_of_tt_stack(twin), locked_rev(twin)
    inventory = twin_inventory(tmp_path / "inv.py", twin, trusted_signers=str(signers))
    script = manual_script(inventory, twin)
    proc = over_ssh(twin, script)
    said = out_of(proc)
    # the same words as the deploy's refusal (test_bump_approval.py)
    assert (
        f"tt-stack at {head[:12]} by ops (cfx-llm2) <ops@cfx-llm2>: unsigned: not built" in said
    ), said[-3000:]
    assert f"(trusted_signers {signers})" in said
    assert "building " not in said and "proven:" not in said  # refused before any build
    assert "VOLATILE" in said  # the fallback holds
    assert locked_rev(twin) == before and checkout_clean(twin)
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode == 0
    assert probe_inside(twin).outcome == "parsed"

    # the same file, the deploy: the same refusal, the same fallback
    proc = run_restore(twin, "--data", f"trusted_signers={signers}", audit_log=tmp_path / "a")
    assert (
        f"tt-stack at {head[:12]} by ops (cfx-llm2) <ops@cfx-llm2>: unsigned: not built"
        in out_of(proc)
    )
    assert audit(tmp_path / "a")[-1]["path"] == "durable+fallback"
    assert locked_rev(twin) == before and checkout_clean(twin)


def test_dry_v_shows_the_bump_and_the_build_as_the_programs_they_run(make_twin):
    """Issue 27, then 42: `pyinfra --dry -v` of the converge on a broken twin shows the
    Nix steps as what the run then yields to pyinfra: each step's host program and its
    values, not a Python function; nothing changes on the host."""
    twin = make_twin(with_emergency_override=True)
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    proc = subprocess.run(
        ["pyinfra", "--dry", "-v", "--limit", twin.name, "inventory/twin.py",
         "deploys/converge.py"],
        capture_output=True, text=True, cwd=PROJECT, timeout=600,
    )  # fmt: skip
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    flat = " ".join(re.sub(r"\[[^]]+\]", " ", said).split())  # the host prefix, wrapping
    assert "will run remedy/host/steps/bump.sh apply, with:" in flat, said[-3000:]
    assert "flake_dir=/etc/nixos flake_input=tt-stack flake_host=cfx-llm2 update=yes" in flat
    assert "will run remedy/host/steps/prove.sh apply, with:" in flat
    assert "build_max_jobs=1 build_cores=2" in flat
    assert "will run remedy/host/steps/switch.sh apply, with:" in flat
    assert "set_profile=yes action=" in flat
    assert "FunctionCommand" not in said and "function" not in said.lower()
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head  # a dry run changes nothing
    # each program's values, said within 80 columns with pyinfra's host prefix
    values = [ln for ln in said.splitlines() if f"[{twin.name}]       " in ln]
    assert values and all(len(ln) <= 80 for ln in values), [x for x in values if len(x) > 80]
