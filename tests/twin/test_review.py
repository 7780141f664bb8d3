"""Issue 45 item 6 on twins: a review before the switch, as `ansible --check --diff` or
`nvd diff` give one.

`remedy status` (and `converge --check`, which reads hosts the same way) names the rev
the planned bump takes before anything is fetched: a person's bump_to, or the tip of
the input's branch read from the host with `git ls-remote` (a commit pushed since is
seen; a remote that cannot be read is said, with git's reason), and its approval
(pinned, signed, unchecked). Where a built system is in the store already (here the
boot default a durable-at-next-boot run left), status, `converge --check --json` and
`--dry` show what it changes from the running system: the fork's new version from
`nix store diff-closures` and the kernel parameters. Text lines fit 80 columns; --json
carries both. The lock's ref and diff-closures' lines are Nix's: nix_cli.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, run_restore, twin_inventory
from tests.twin.test_bump_approval import allowed_signers, head_of_tt_stack, locked_rev, out_of

pytestmark = [pytest.mark.twin, pytest.mark.nix_cli]


def status(inventory, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["remedy", "status", str(inventory), *argv], capture_output=True,
                          text=True, cwd=PROJECT, timeout=600)  # fmt: skip


def review_of(inventory) -> dict:
    proc = status(inventory, "--json")
    (host,) = json.loads(proc.stdout)["hosts"]
    return host["review"] or {}


def too_wide(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > 80]


def test_status_names_the_rev_the_bump_takes_read_from_the_remote_and_its_approval(twin, tmp_path):
    inventory = twin_inventory(tmp_path / "inv.py", twin)
    head, locked = head_of_tt_stack(twin), locked_rev(twin)
    assert head != locked  # production's state: the fix is merged, not deployed
    bump = review_of(inventory)["bump"]
    assert bump["takes"] == head and bump["locked"] == locked, bump
    assert bump["approval"] == "unchecked" and bump["unread"] is None, bump
    assert bump["source"].startswith("the tip of ") and fixtures.TT_STACK_DIR in bump["source"]
    text = status(inventory)
    assert f"takes {head[:12]}" in out_of(text) and "approval: unchecked" in out_of(text)
    assert too_wide(text.stdout) == [], too_wide(text.stdout)

    # a schedule's run (--unattended) never takes an unverified latest: said so
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    check = subprocess.run(["remedy", "converge", str(inventory), "--check", "--unattended",
                            "--json"], capture_output=True, text=True, cwd=PROJECT,
                           timeout=600, env=env)  # fmt: skip
    (host,) = json.loads(check.stdout)["hosts"]
    assert host["review"]["bump"]["takes"] == head, host["review"]
    assert host["bump_blocked"] is not None, host
    assert host["review"]["bump"]["blocked"] == host["bump_blocked"], host["review"]

    # a commit pushed since: the remote is asked, not the lock or a cache
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.later_commit(None))
    later = head_of_tt_stack(twin)
    assert later != head and review_of(inventory)["bump"]["takes"] == later
    assert locked_rev(twin) == locked  # nothing was fetched into the lock
    dry = run_restore(twin, "--dry")  # the same words, read the same way
    assert dry.returncode == 0, out_of(dry)[-3000:]
    assert f"bump tt-stack: takes {later[:12]} (the tip of " in out_of(dry), out_of(dry)[-3000:]
    assert "approval: unchecked" in out_of(dry) and locked_rev(twin) == locked

    # a remote that cannot be read: said, with git's reason; the report goes on
    away = fixtures.TT_STACK_DIR + ".away"
    twin.exec(["mv", fixtures.TT_STACK_DIR, away])
    try:
        proc = status(inventory, "--json")
        (host,) = json.loads(proc.stdout)["hosts"]
        bump = host["review"]["bump"]
        assert bump["takes"] is None and "git ls-remote of " in bump["unread"], bump
        assert "failed: fatal:" in bump["unread"] and host["settings"], bump
        assert "takes a rev not known now" in out_of(status(inventory))
    finally:
        twin.exec(["mv", away, fixtures.TT_STACK_DIR])

    # approved by a person: bump_to, no remote read; by a signature: trusted_signers
    pinned = twin_inventory(tmp_path / "pinned.py", twin, bump_to=head)
    bump = review_of(pinned)["bump"]
    assert (bump["approval"], bump["takes"], bump["source"]) == ("pinned", head, "bump_to")
    signers = allowed_signers(twin, tmp_path)
    signed = twin_inventory(tmp_path / "signed.py", twin, trusted_signers=str(signers))
    bump = review_of(signed)["bump"]
    assert (bump["approval"], bump["takes"]) == ("signed", later), bump
    assert "approval: signed" in out_of(status(signed))


def test_status_check_and_dry_show_what_the_built_boot_default_changes(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)  # live holds the parser: no restart now
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
    inventory = twin_inventory(tmp_path / "inv.py", twin, allow_local_build=True)
    assert review_of(inventory).get("system_changes") is None  # nothing built yet

    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl"),
           "REMEDY_LOCK_DIR": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}  # fmt: skip
    ran = subprocess.run(["remedy", "converge", str(inventory), "--restart", "never"],
                         capture_output=True, text=True, cwd=PROJECT, timeout=900,
                         env=env)  # fmt: skip
    assert ran.returncode == 6, out_of(ran)[-3000:]  # boot pending
    current = twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip()
    boots = twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout.strip()
    assert boots != current, out_of(ran)[-3000:]  # durable at next boot

    wanted = f"vllm-tt: {fixtures.VLLM_VERSION} → {fixtures.HEAVY_VLLM_VERSION}"
    proc = status(inventory, "--json")
    assert proc.returncode == 6, proc.stdout[-2000:] + proc.stderr[-2000:]
    system = json.loads(proc.stdout)["hosts"][0]["review"]["system_changes"]
    assert (system["current"], system["new"], system["what"]) == (
        current,
        boots,
        "the boot default",
    )
    assert any(p.startswith(wanted) for p in system["packages"]), system
    assert system["packages_unread"] is None, system
    # hugepagesPerCard 2 -> 1 (remedy's file): the kernel command line of the next boot
    assert "hugepages=2" in system["kernel_params_added"], system
    assert "hugepages=4" in system["kernel_params_removed"], system
    text = status(inventory)
    assert f"package {wanted}" in out_of(text) and "the boot default" in out_of(text)
    assert too_wide(text.stdout) == [], too_wide(text.stdout)

    check = subprocess.run(["remedy", "converge", str(inventory), "--check", "--json"],
                           capture_output=True, text=True, cwd=PROJECT, timeout=600,
                           env=env)  # fmt: skip
    (host,) = json.loads(check.stdout)["hosts"]
    assert host["review"]["system_changes"]["new"] == boots, host["review"]

    dry = run_restore(twin, "--dry", "--data", "allow_local_build=true", restart="never")
    assert dry.returncode == 0, out_of(dry)[-3000:]
    assert f"package {wanted}" in out_of(dry), out_of(dry)[-3000:]
    assert twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip() == current


def test_the_build_a_run_proved_and_did_not_switch_is_reviewed(make_twin, tmp_path):
    """A run proved its build and waits in its drain (a request in flight) when it is
    killed: nothing switched, and the run journal names the proven system, still in the
    store, for the next run to finish. Status reviews that build against the running
    system, naming the run that proved it."""
    from tests.conftest import HeldRequest

    twin = make_twin(with_emergency_override=True)
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
    current = twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip()
    journal_path = "/var/lib/remedy/run-tenstorrent-serving.service.json"
    held = HeldRequest(twin, hold_s=120)  # the drain waits for it, after the proof
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")}
    run = subprocess.Popen(["pyinfra", "-y", "--limit", twin.name, "--data", "restart=now",
                            "--data", "allow_local_build=true", "inventory/twin.py",
                            "deploys/restore_toolcalling.py"], cwd=PROJECT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)  # fmt: skip
    journal: dict = {}
    try:
        deadline = time.monotonic() + 600
        while run.poll() is None and time.monotonic() < deadline:
            read = twin.exec(["cat", journal_path], check=False).stdout
            journal = json.loads(read) if '"toplevel"' in read else {}
            if journal:
                break
            time.sleep(0.2)
        assert run.poll() is None and journal, "the run never proved its build"
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert held.status is None  # still in flight: the run was in its drain
    assert twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip() == current

    inventory = twin_inventory(tmp_path / "inv.py", twin)
    system = review_of(inventory)["system_changes"]
    assert system["new"] == journal["toplevel"] != current, (system, journal)
    assert system["what"] == f"the system run {journal['run_id']} built and proved", system
    wanted = f"vllm-tt: {fixtures.VLLM_VERSION} → {fixtures.HEAVY_VLLM_VERSION}"
    assert any(p.startswith(wanted) for p in system["packages"]), system
    assert too_wide(status(inventory).stdout) == []
