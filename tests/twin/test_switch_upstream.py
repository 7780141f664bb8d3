"""Issue 44 items 3, 4, 8 and 9 on twins: the switch as upstream does it, not as remedy
expected it.

* 3: `systemd-run --wait` can return before the switch's unit ends (PID 1 re-executes
  during the switch, systemd#27204): remedy waits for the unit, not for systemd-run.
* 4: released nixos-rebuild-ng runs the switch with `--pipe`: a person's refused switch
  says so on their terminal, not in the journal; remedy reads the system's state.
* 8: switch-to-configuration-ng goes on after a failing activation script and exits 2 at
  the end: the serving unit has restarted by then; the rollback counts it and the
  fallback does not restart a third time.
* 9: NixOS 26.05's switch inhibitors compare the new system with the *booted* one.

None of this depends on Nix's CLI: trixie only.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import (
    PROJECT,
    RESTART_NOW,
    owner_git,
    probe_inside,
    run_deploy,
    status_settings,
    unit_props,
)
from tests.twin.test_switch import (
    SWITCH_UNIT,
    audit_of,
    knob,
    out_of,
    systems,
    wait_switch_running,
)

pytestmark = pytest.mark.twin

CONFIG = f"{fixtures.NIXOS_DIR}/hosts/cfx-llm2/configuration.nix"
FLAKE = f"{fixtures.NIXOS_DIR}#{fixtures.FLAKE_HOST}"
# what a 26.05 host lists as a switch inhibitor (a store path whose change refuses a switch)
INHIBITOR = "/nix/store/6ld3ahx4bq6dy0fk0cq2dzcfbjqc5fr4-systemd-258.1"
AS_SUDO = {"SUDO_UID": str(fixtures.OWNER_UID), "SUDO_USER": fixtures.OWNER}


def commit_inhibitor(twin) -> None:
    """The owner lists INHIBITOR in system.switch.inhibitors and commits it."""
    text = twin.exec(["cat", CONFIG]).stdout
    anchor = "hardware.tenstorrent.hugepagesPerCard = 2;"
    assert anchor in text
    text = text.replace(anchor, f'{anchor}\n  system.switch.inhibitors = [ "{INHIBITOR}" ];')
    twin.exec(["tee", CONFIG], input=text)
    owner_git(twin, "commit", "-q", "-am", "list systemd as a switch inhibitor")


def rebuild(twin, action: str):
    """A person's `sudo nixos-rebuild ACTION --flake …` over SSH: what their terminal shows
    (stdout and stderr) and its exit code."""
    env = " ".join(f"{k}={v}" for k, v in AS_SUDO.items())
    return subprocess.run(
        [*twin.ssh_argv(), f"env {env} nixos-rebuild {action} --flake {FLAKE} 2>&1"],
        capture_output=True,
        text=True,
        timeout=600,
    )


def switch_journal(twin) -> str:
    return twin.exec(["journalctl", "-q", "-b", "-u", SWITCH_UNIT, "-o", "cat"]).stdout


def switch_starts(twin) -> int:
    return switch_journal(twin).count(f"Started {SWITCH_UNIT}.service")


def test_the_switch_ends_when_its_unit_ends_not_when_systemd_run_returns(make_twin, tmp_path):
    """Item 3. The new generation's systemd differs from PID 1's, so the switch
    re-executes PID 1 (switch-to-configuration-ng, main.rs). On NixOS 24.11's systemd
    `systemd-run --wait` can then return while the switch goes on (systemd#27204); the
    twins' systemd (257, and 252 in a container) keeps waiting across a re-exec (checked),
    so the test ends remedy's systemd-run client while the switch holds its lock, as
    #27204 ends it. The switch's end is its unit's: remedy waits and reads exit 0."""
    twin = make_twin(with_emergency_override=True)
    before = systems(twin)
    knob(twin, "systemd-changed", "")
    knob(twin, "hold-lock-s", "20")
    log = tmp_path / "a.jsonl"
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    run = subprocess.Popen(
        ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py",
         "deploys/converge.py"],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_switch_running(twin, until=lambda: run.poll() is not None, timeout=300)
    client = twin.exec(["pgrep", "-x", "systemd-run"], check=False).stdout.split()
    assert len(client) == 1, client  # remedy's own, and only it
    twin.exec(["kill", client[0]])
    said, _ = run.communicate(timeout=400)
    knob(twin, "hold-lock-s", None)
    knob(twin, "systemd-changed", None)
    said = " ".join(said.split())
    assert run.returncode == 0, said[-3000:]
    assert "systemd-run returned (exit 143)" in said and "waiting for the unit to end" in said
    ended = switch_journal(twin)
    assert "restarting systemd..." in ended, ended  # PID 1 re-executed during the switch
    now = systems(twin)
    assert now["current"] == now["profile"] == now["boot"] != before["current"], now
    record = audit_of(log)
    assert record["result"] == "ok", record
    assert "rolled_back" not in json.dumps(record)
    assert probe_inside(twin).outcome == "parsed"


def test_a_persons_refused_switch_is_read_from_the_state_not_the_journal(make_twin, tmp_path):
    """Item 4. After remedy's converge, a person lists a switch inhibitor and runs
    `nixos-rebuild switch` (released: `systemd-run --pipe`): refused, it says so on their
    terminal and not in the journal; they make it the boot default (`nixos-rebuild
    boot`). remedy reads from the state (the boot default's switch-inhibitors against the
    booted system's) that a switch would be refused: durable at next boot, no switch."""
    twin = make_twin(with_emergency_override=True)
    log = tmp_path / "a.jsonl"
    first = run_deploy(twin, "converge", audit_log=log)
    assert first.returncode == 0, out_of(first)[-3000:]
    converged = systems(twin)

    commit_inhibitor(twin)
    refused = rebuild(twin, "switch")
    terminal = refused.stdout + refused.stderr
    assert refused.returncode == 1, terminal[-3000:]
    assert "Pre-switch check 'switchInhibitors' failed" in terminal
    assert "switchInhibitors" not in switch_journal(twin)  # --pipe: not in the journal
    assert rebuild(twin, "boot").returncode == 0
    pending = systems(twin)
    assert pending["boot"] == pending["profile"] != converged["current"] == pending["current"]

    code, _ = status_settings(twin)
    assert code == 6  # boot pending
    # a /run override brought back makes remedy want a restart: the boot default holds
    # every setting, and a switch of it would be refused, so remedy waits for the reboot
    machine.apply_emergency_override(twin)
    starts, pid = switch_starts(twin), unit_props(twin)["MainPID"]
    again = run_deploy(twin, "converge", audit_log=log)
    out = out_of(again)
    assert again.returncode == 0 and "path noop" in out, out[-3000:]
    assert "durable at next boot; reboot to activate" in out
    assert "switch-inhibitors differ from the booted system's" in out
    assert switch_starts(twin) == starts  # no switch attempted
    assert unit_props(twin)["MainPID"] == pid and systems(twin) == pending


def test_exit_2_comes_after_the_restart_and_the_rollback_counts_it(make_twin, tmp_path):
    """Item 8. A failing activation script sets exit code 2 and the activation goes on:
    the serving unit restarts onto the new generation before exit 2 comes (main.rs). The
    switch step counts that restart, the rollback its own, and the fallback's restart
    step restarts nothing more."""
    twin = make_twin(with_emergency_override=True)
    before = systems(twin)
    knob(twin, "activation-fails", "once")
    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", audit_log=log)
    knob(twin, "activation-fails", None)
    out = out_of(proc)
    assert "switch-to-configuration switch exited 2" in out, out[-3000:]
    assert "the activation went on: tenstorrent-serving.service restarted during the switch" in out
    ended = switch_journal(twin)
    failed_at = ended.index("Failed to run activate script")
    assert "restarting the following units: tenstorrent-serving.service" in ended[failed_at:]
    assert "already had restarted" not in out
    assert "the failed switch had already restarted tenstorrent-serving.service" in out
    now = systems(twin)
    assert now["current"] == before["current"] and now["boot"] == before["boot"], now
    record = audit_of(log)
    # the switch's restart and the rollback's: no third
    assert record["details"]["restarts"] == 2, record
    assert probe_inside(twin).outcome == "parsed"


def test_the_switch_inhibitors_compare_the_new_system_with_the_booted_one(make_twin, tmp_path):
    """Item 9. A person lists a switch inhibitor and switches to it once since boot,
    skipping the check (NIXOS_NO_CHECK=1): the running system has the new inhibitors, the
    booted one not. remedy's switch to a generation with the same inhibitors as the
    running one is refused all the same (NixOS compares with /run/booted-system): it
    becomes the boot default, and after the reboot a switch is no longer refused."""
    twin = make_twin(with_emergency_override=True)
    booted = systems(twin)["current"]
    commit_inhibitor(twin)
    assert rebuild(twin, "boot").returncode == 0
    forced = twin.exec(
        ["env", "NIXOS_NO_CHECK=1", "/nix/var/nix/profiles/system/bin/switch-to-configuration",
         "switch"],
        check=False,
    )  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    once = systems(twin)
    assert once["current"] == once["profile"] != booted  # switched once since boot
    assert twin.exec(["readlink", "-f", "/run/booted-system"]).stdout.strip() == booted

    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", audit_log=log)
    out = out_of(proc)
    assert "Pre-switch check 'switchInhibitors' failed" in out, out[-3000:]
    assert "durable at next boot" in out and "rollback FAILED" not in out, out[-3000:]
    after = systems(twin)
    assert after["current"] == once["current"]  # nothing activated
    assert after["boot"] == after["profile"] != once["profile"]
    assert audit_of(log)["details"]["boot_pending"] == after["profile"]
    assert probe_inside(twin).outcome == "parsed"

    machine.reboot(twin.name, progress=lambda _m: None)
    assert systems(twin)["current"] == after["profile"]
    code, _ = status_settings(twin)
    assert code == 0
