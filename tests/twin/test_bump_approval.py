"""Issue 18: a bump takes only what a person approved.

The twin's tt-stack has its fix commits SSH-signed by the maintainers' key; tests add
commits that are unsigned or signed by a stranger's key, as a push to the branch
could. The management side (this test) holds the allowed-signers file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import (
    PROJECT,
    not_owned_by_owner,
    owner_git,
    probe_inside,
    run_restore,
    twin_inventory,
)

pytestmark = pytest.mark.twin

DROPIN = "/run/systemd/system/tenstorrent-serving.service.d/override.conf"


def out_of(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def audit(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def allowed_signers(twin, tmp_path):
    pub = twin.exec(["cat", fixtures.MAINTAINER_KEY + ".pub"]).stdout.split()
    path = tmp_path / "allowed_signers"
    path.write_text(f'{fixtures.MAINTAINER_PRINCIPAL} namespaces="git" {pub[0]} {pub[1]}\n')
    return path


def head_of_tt_stack(twin) -> str:
    return owner_git(twin, "rev-parse", "HEAD", repo=fixtures.TT_STACK_DIR).stdout.strip()


def locked_rev(twin) -> str:
    lock = json.loads(twin.exec(["cat", f"{fixtures.NIXOS_DIR}/flake.lock"]).stdout)
    return lock["nodes"]["tt-stack"]["locked"]["rev"]


def checkout_clean(twin) -> bool:
    return owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""


@pytest.mark.nix_cli
def test_a_head_signed_by_a_trusted_key_goes_durable_and_the_audit_names_the_signer(
    make_twin, tmp_path
):
    twin = make_twin(with_emergency_override=True)
    signers = allowed_signers(twin, tmp_path)
    machine.commit_as_owner(
        twin, fixtures.TT_STACK_DIR, fixtures.later_commit(fixtures.MAINTAINER_KEY)
    )
    head = head_of_tt_stack(twin)
    proc = run_restore(twin, "--data", f"trusted_signers={signers}", audit_log=tmp_path / "a")
    assert proc.returncode == 0, out_of(proc)[-3000:]
    record = audit(tmp_path / "a")[-1]
    assert record["path"] == "durable", out_of(proc)[-3000:]
    assert locked_rev(twin) == head
    signature = record["details"]["signature"]
    assert signature["state"] == "G" and signature["signer"] == fixtures.MAINTAINER_PRINCIPAL
    assert signature["rev"] == head and signature["key"].startswith("SHA256:")
    assert probe_inside(twin).outcome == "parsed" and not_owned_by_owner(twin) == []


@pytest.mark.nix_cli
@pytest.mark.parametrize("who", ["unsigned", "stranger"])
def test_an_unapproved_head_is_blocked_before_any_build_and_the_fallback_holds(
    make_twin, tmp_path, who
):
    twin = make_twin(with_emergency_override=True)
    signers = allowed_signers(twin, tmp_path)
    key = fixtures.STRANGER_KEY if who == "stranger" else None
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(key))
    head, before = head_of_tt_stack(twin), locked_rev(twin)
    dry = run_restore(twin, "--dry", "--data", f"trusted_signers={signers}")
    said = "unsigned" if who == "unsigned" else "signed by a key that is not in trusted_signers"
    assert f"the bump would take tt-stack {head}: {head[:12]} by ops" in out_of(dry), out_of(dry)[
        -3000:
    ]
    assert said in out_of(dry) and locked_rev(twin) == before  # --dry changes nothing
    proc = run_restore(twin, "--data", f"trusted_signers={signers}", audit_log=tmp_path / "a")
    out = out_of(proc)
    assert proc.returncode == 0, out[-3000:]
    assert f"tt-stack at {head[:12]} by ops (cfx-llm2) <ops@cfx-llm2>" in out, out[-3000:]
    if who == "unsigned":
        assert "unsigned: not built" in out
    else:
        fingerprint = twin.exec(["ssh-keygen", "-lf", fixtures.STRANGER_KEY + ".pub"]).stdout
        assert "signed by a key that is not in trusted_signers" in out
        assert fingerprint.split()[1] in out  # the stranger's key, named
    assert "building " not in out  # blocked before the build
    assert audit(tmp_path / "a")[-1]["path"] == "durable+fallback"
    assert locked_rev(twin) == before and checkout_clean(twin)
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode == 0
    assert probe_inside(twin).outcome == "parsed"


@pytest.mark.nix_cli
def test_bump_to_locks_exactly_the_approved_rev_and_refuses_one_off_the_branch(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    revs = owner_git(twin, "log", "--format=%H", repo=fixtures.TT_STACK_DIR).stdout.split()
    fix = revs[0]  # #44, the tip before the branch moves on
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(None))
    # a rev that is on no branch the input follows
    owner_git(twin, "checkout", "-q", "-b", "side", revs[1], repo=fixtures.TT_STACK_DIR)
    side = machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(None, 2))
    owner_git(twin, "checkout", "-q", "master", repo=fixtures.TT_STACK_DIR)

    proc = run_restore(twin, "--data", f"bump_to={side}", audit_log=tmp_path / "a")
    assert proc.returncode == 0, out_of(proc)[-3000:]
    # the branch as the lock names it: refs/heads/master (Nix 2.26) or master (2.8)
    assert re.search(rf"bump_to {side} is not on (refs/heads/)?master of ", out_of(proc)), out_of(
        proc
    )[-3000:]
    assert checkout_clean(twin) and audit(tmp_path / "a")[-1]["path"] == "durable+fallback"

    proc = run_restore(twin, "--data", f"bump_to={fix}", audit_log=tmp_path / "a")
    assert proc.returncode == 0, out_of(proc)[-3000:]
    assert audit(tmp_path / "a")[-1]["path"] == "durable", out_of(proc)[-3000:]
    assert locked_rev(twin) == fix  # not the branch's newer head
    assert probe_inside(twin).outcome == "parsed"


def test_an_unattended_run_with_nothing_to_verify_by_does_not_bump(make_twin, tmp_path):
    """The schedule's service runs `remedy converge --unattended`: neither bump_to nor
    trusted_signers is set, so it keeps the fallback, exits 3 and says why."""
    twin = make_twin(with_emergency_override=True)
    before = locked_rev(twin)
    inventory = twin_inventory(tmp_path / "inv.py", twin)
    textfile = tmp_path / "remedy.prom"
    proc = subprocess.run(
        ["remedy", "converge", str(inventory), "--unattended", "--json",
         "--textfile", str(textfile)],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
    )  # fmt: skip
    doc = json.loads(proc.stdout)
    host = doc["hosts"][0]
    assert proc.returncode == 3, host["verdict"]
    assert host["bump_blocked"] == "unattended and neither bump_to nor trusted_signers is set"
    blocked = "durable path not possible: bump skipped: unattended"
    assert any(p.startswith(blocked) for p in host["problems"]), host["problems"]
    assert host["outcome"].startswith("path fallback"), host
    assert locked_rev(twin) == before
    assert probe_inside(twin).outcome == "parsed"
    metrics = textfile.read_text()
    assert 'remedy_bump_blocked{host="' + twin.name + '",reason="unattended and neither' in metrics

    # the table a person reads says the same (issue 28 item 7): why no bump, what the
    # run did, and the command to run next, at 80 columns
    proc = subprocess.run(
        ["remedy", "converge", str(inventory), "--unattended"],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
        env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    said = " ".join(proc.stdout.split())
    assert "! durable path not possible: bump skipped: unattended and neither bump_to" in said
    assert "set bump_to (a rev a person approved)" in said
    assert "outcome: path fallback;" in said and "restarts 0" in said, said
    assert "next: fix what blocks the durable path (above), then run `remedy converge" in said
    # stderr is no terminal here: each step is still said as it starts (issue 33 item 1),
    # one whole line each, starting with the host's name (issue 45 item 4)
    steps = [ln.split(": ", 1)[1] for ln in proc.stderr.splitlines()
             if ln.startswith(f"{twin.name}: ") and "(tt-stack#" in ln]  # fmt: skip
    assert steps[0] == "Record where the run begins (tt-stack#49)", steps
    assert "Memory gate before Nix evaluates and builds (tt-stack#49)" in steps
    assert "Scratch clone; bump the tt-stack input (tt-stack#49)" in steps
    assert steps[-1] == "Report the outcome (tt-stack#49)", steps
    # a command is folded between its words (a backslash-newline): only a line that
    # is one word of it, longer than a line by itself, may be longer
    long = [ln for ln in proc.stdout.splitlines() if len(ln) > 80]
    assert all(re.fullmatch(r" *`?[^\s`]+`?[.,;)]*( \\)?", ln) for ln in long), long
