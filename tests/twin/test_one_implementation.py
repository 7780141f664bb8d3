"""Issue 27: the manual script runs what the deploy runs.

The bump is one host-side program (remedy.core.bump) that both renderers run with the
same values: the manual script honours bump_to and trusted_signers exactly as the
deploy does (test_bump_approval.py holds the deploy's side), and from the seed state
the two leave the same checkout, the same next-boot system and the same restarts.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from remedy.core.plan import FALLBACK
from remedy.core.steps import TEMPLATES
from remedy.twin import fixtures, machine
from tests.conftest import (
    PROJECT,
    owner_git,
    probe_inside,
    run_restore,
    server_starts,
    status_settings,
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
    assert f"takes exactly bump_to {side}" in script  # said before it runs
    proc = over_ssh(twin, script)
    said = out_of(proc)
    assert re.search(
        rf"durable path abandoned: bump_to {side} is not on (refs/heads/)?master", said
    ), said[-3000:]
    assert "VOLATILE" in said and locked_rev(twin) == before and checkout_clean(twin)

    proc = over_ssh(
        twin, manual_script(twin_inventory(tmp_path / "fix.py", twin, bump_to=fix), twin)
    )
    assert proc.returncode == 0, out_of(proc)[-3000:]
    assert "durable path abandoned" not in out_of(proc), out_of(proc)[-3000:]
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


def _changes(twin, base: str) -> list[str]:
    """What the run's commits changed: path, mode and blob of every file, from BASE (the
    twins' checkouts differ in their own port commit; the messages differ by renderer)."""
    raw = owner_git(twin, "diff", "--raw", "--no-abbrev", base, "HEAD").stdout
    return sorted(line.split(None, 3)[3] + " " + line.split()[3] for line in raw.splitlines())


def _next_boot(twin) -> dict:
    """What the next boot runs, per managed setting (remedy status, as remedy reads it)."""
    _code, settings = status_settings(twin)
    return {key: (d["next_boot"], d["state"]) for key, d in settings.items()}


def test_from_the_seed_state_the_manual_script_and_the_deploy_leave_the_same_host(make_twin):
    by_deploy, by_script = (
        make_twin(with_emergency_override=True),
        make_twin(with_emergency_override=True),
    )
    base = {
        t.name: owner_git(t, "rev-parse", "HEAD").stdout.strip() for t in (by_deploy, by_script)
    }
    starts = {t.name: server_starts(t) for t in (by_deploy, by_script)}

    deploy = run_restore(by_deploy, "-v")  # restart now: a person's run, as the script is
    assert deploy.returncode == 0, out_of(deploy)[-3000:]
    script = over_ssh(by_script, manual_script("inventory/twin.py", by_script))
    assert script.returncode == 0, out_of(script)[-3000:]
    # per step: what the deploy did (pyinfra's own result) and what the script ran
    did = re.findall(
        r"--> Starting operation: (.+?) *\n(?:.*\n)*?\s+\[[^]]+\]\s+(Success|No changes|Error)",
        deploy.stdout + deploy.stderr,
    )
    ran = re.findall(r"^== \d+\. (.+)$", script.stderr, re.M)
    print("deploy:", did, "\nmanual script:", ran)
    titles = [title for title, _ in did]
    assert ran == [t for t in titles if t in ran]  # the same steps, in the same order
    assert {t for t, result in did if result == "Success"} <= set(ran)
    fallback = {t.title for t in TEMPLATES if t.stage == FALLBACK}
    assert fallback & set(titles) == fallback and not fallback & set(ran)

    changes = {t.name: _changes(t, base[t.name]) for t in (by_deploy, by_script)}
    assert changes[by_deploy.name] == changes[by_script.name] != [], changes
    commits = {t.name: owner_git(t, "rev-list", "--count", f"{base[t.name]}..HEAD").stdout
               for t in (by_deploy, by_script)}  # fmt: skip
    assert commits[by_deploy.name] == commits[by_script.name] == "1\n"
    assert _next_boot(by_deploy) == _next_boot(by_script)
    restarts = {t.name: server_starts(t) - starts[t.name] for t in (by_deploy, by_script)}
    assert restarts[by_deploy.name] == restarts[by_script.name] == 1, restarts
    for t in (by_deploy, by_script):
        assert probe_inside(t).outcome == "parsed" and checkout_clean(t)
        assert t.exec(["test", "-e", DROPIN], check=False).returncode != 0  # override gone
