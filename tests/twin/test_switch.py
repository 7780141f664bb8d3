"""Issue 15 on twins: the switch as NixOS does it.

remedy runs switch-to-configuration in nixos-rebuild-ng's transient unit, its output
in the journal (a closed pipe kills switch-to-configuration-ng, nixpkgs#462179), and
acts on its exit code: 0 verify, 4 (a unit failed) done or fall back, 100 durable at
next boot, the switch inhibitors durable at next boot (`boot`), a lock another holds
changes nothing, anything else is rolled back with the restored generation's
switch-to-configuration, so the boot entry is right again. None of this depends on
Nix's CLI: trixie only.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from remedy.core.programs import commands
from remedy.twin import fixtures, machine
from tests.conftest import (
    PROJECT,
    RESTART_NOW,
    converge_json,
    owner_git,
    probe_inside,
    run_deploy,
    status_settings,
    unit_props,
    wait_probe,
)

pytestmark = pytest.mark.twin

KNOBS = "/etc/nixos-twin"
PROFILE = "/nix/var/nix/profiles/system"
OVERRIDE = "/run/systemd/system/tenstorrent-serving.service.d/override.conf"
SWITCH_UNIT = "nixos-rebuild-switch-to-configuration"
# the unit of some 26.05-pre nixos-rebuild-ng builds (nixpkgs#463029, reverted by #499837)
SUFFIXED_UNIT = "nixos-rebuild-switch-to-configuration-0123abcd"


def out_of(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())


def knob(twin, name: str, value: str | None) -> None:
    if value is None:
        twin.exec(["rm", "-f", f"{KNOBS}/{name}"])
    else:
        twin.exec(["mkdir", "-p", KNOBS])
        twin.exec(["tee", f"{KNOBS}/{name}"], input=value + "\n")


def systems(twin) -> dict[str, str]:
    """The profile, /run/current-system and the boot loader's default toplevel."""
    script = (
        f"readlink -f {PROFILE}; readlink -f /run/current-system; "
        "e=$(sed -n 's/^default //p' /boot/loader/loader.conf); "
        "sed -n 's|^options init=\\([^ ]*\\)/init.*|\\1|p' /boot/loader/entries/$e"
    )
    profile, current, boot = twin.exec(["sh", "-c", script]).stdout.split()
    return {"profile": profile, "current": current, "boot": boot}


def wait_switch_running(twin, until=lambda: False, timeout: float = 120, unit=SWITCH_UNIT) -> None:
    """Until nixos-rebuild-ng's transient unit runs and its switch-to-configuration holds
    the switch lock (or UNTIL() is true)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until():
        if twin.exec(["systemctl", "-q", "is-active", unit], check=False).returncode == 0:
            held = twin.exec(commands.switch_holders(), check=False).stdout
            if "holder pid " in held:
                return
        time.sleep(0.3)


def wait_said(twin, unit: str, words: str, timeout: float = 60) -> None:
    """Until UNIT's journal (this boot) has WORDS."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        said = twin.exec(["journalctl", "-q", "-b", "-u", unit, "-o", "cat"], check=False)
        if words in said.stdout:
            return
        time.sleep(0.3)
    raise AssertionError(f"{unit} never said {words!r}")


def audit_of(log) -> dict:
    return json.loads(log.read_text().splitlines()[-1])


def test_exit_100_is_durable_at_next_boot_and_a_reboot_activates_it(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    before = systems(twin)
    knob(twin, "init-interface-changed", "")
    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", audit_log=log)
    out = out_of(proc)
    assert "outcome: path durable at next boot" in out, out[-3000:]
    assert "durable at next boot; reboot to activate" in out
    after = systems(twin)
    assert after["current"] == before["current"]  # nothing activated
    assert after["boot"] == after["profile"] != before["profile"]  # the new one boots
    assert twin.exec(["test", "-e", OVERRIDE], check=False).returncode == 0
    assert probe_inside(twin).outcome == "parsed"
    record = audit_of(log)
    assert record["details"]["boot_pending"] == after["profile"], record
    code, settings = status_settings(twin)
    assert code == 6  # boot pending: the old system runs, on the override; the next boot is right
    assert settings["tool_call_parser"]["next_boot"] == "qwen3_xml"

    # a run before the reboot switches nothing again (it would exit 100 again) and
    # restarts nothing: it waits for the reboot
    pid = unit_props(twin)["MainPID"]
    again = run_deploy(twin, "converge", audit_log=log)
    said = out_of(again)
    assert again.returncode == 0 and "path noop" in said, said[-3000:]
    assert "durable at next boot; reboot to activate" in said
    assert unit_props(twin)["MainPID"] == pid and systems(twin) == after

    knob(twin, "init-interface-changed", None)
    machine.reboot(twin.name, progress=lambda _m: None)
    code, settings = status_settings(twin)
    assert code == 0, settings  # with no run
    assert systems(twin)["current"] == after["profile"]


def test_a_failed_switch_rolls_back_the_boot_entry_and_another_failing_unit_is_named(
    make_twin, tmp_path
):
    twin = make_twin(with_emergency_override=True)
    before = systems(twin)
    lock = owner_git(twin, "show", "HEAD:flake.lock").stdout

    # the serving unit fails during activation (exit 4): the fallback, and the rollback
    # sets the boot entry back to the recorded generation
    knob(twin, "fail-units", "tenstorrent-serving.service")
    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", audit_log=log)
    out = out_of(proc)
    assert "switch-to-configuration exited 4: tenstorrent-serving.service is not active" in out, (
        out[-3000:]
    )
    assert "path durable+fallback" in out and proc.returncode != 0  # the switch broke
    assert probe_inside(twin).outcome == "parsed"  # on the /run override
    assert systems(twin) == before, out[-4000:]  # profile, live and boot: the recorded one
    assert owner_git(twin, "show", "HEAD:flake.lock").stdout == lock  # lock commit reverted
    knob(twin, "fail-units", None)
    machine.reboot(twin.name, progress=lambda _m: None)
    booted = twin.exec(["readlink", "-f", "/run/booted-system"]).stdout.strip()
    assert booted == before["current"]

    # another unit fails (exit 4): the serving unit is active and parsed, no rollback
    config = "hosts/cfx-llm2/configuration.nix"
    text = twin.exec(["cat", f"{fixtures.NIXOS_DIR}/{config}"]).stdout
    failing = (
        '  systemd.units."tt-telemetry.service" = "[Service]\\nType=oneshot\\n'
        'ExecStart=/bin/false\\n";\n}\n'
    )
    machine.commit_as_owner(
        twin,
        fixtures.NIXOS_DIR,
        fixtures.Commit(
            "hosts: tt-telemetry",
            {config: text.rstrip().removesuffix("}") + failing},
            "2026-10-02T10:00:00+02:00",
        ),
    )
    machine.apply_emergency_override(twin)  # the reboot wiped it: production's trap
    starts = unit_props(twin)["NRestarts"]
    proc = run_deploy(twin, "converge", audit_log=log)
    out = out_of(proc)
    assert proc.returncode == 0, out[-3000:]
    assert "switch exit 4: failed units tt-telemetry.service" in out, out[-3000:]
    journal = twin.exec(["journalctl", "-u", "tenstorrent-serving.service", "-o",
                         "short-precise", "--no-pager"]).stdout  # fmt: skip
    assert "outcome: path durable;" in out and "restarts 1" in out, (
        out[-3000:] + "\nJOURNAL\n" + journal[-6000:]
    )
    now = systems(twin)
    assert now["current"] == now["profile"] == now["boot"] != before["current"]
    assert probe_inside(twin).outcome == "parsed"
    assert audit_of(log)["details"]["switch_failed_units"] == ["tt-telemetry.service"]
    code, doc = converge_json("--check", "--limit", twin.name)
    assert any("tt-telemetry.service failed" in p for p in doc["hosts"][0]["problems"]), doc
    metrics = tmp_path / "remedy.prom"
    _, doc = converge_json("--check", "--limit", twin.name, "--textfile", str(metrics))
    said = metrics.read_text()
    assert f'remedy_switch_failed_units{{host="{twin.name}"}} 1.0' in said, (said, doc)
    assert unit_props(twin)["NRestarts"] == starts  # no crash loop


def test_a_held_switch_changes_nothing_and_a_dropped_session_lets_the_switch_finish(
    make_twin, tmp_path
):
    twin = make_twin(with_emergency_override=True)
    before = systems(twin)
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    # a person's 26.05-pre nixos-rebuild holds the switch (the stand-in, slowed by a
    # knob), in its transient unit named with a suffix
    knob(twin, "hold-lock-s", "25")
    twin.exec(
        [
            "systemd-run", "--unit=person-rebuild", "--service-type=exec", "systemd-run",
            "-E", "LOCALE_ARCHIVE", "--collect", "--wait", "--no-ask-password", "--quiet",
            "--service-type=exec", f"--unit={SUFFIXED_UNIT}",
            f"{before['current']}/bin/switch-to-configuration", "test",
        ]
    )  # fmt: skip
    wait_switch_running(twin, unit=SUFFIXED_UNIT)
    wait_said(twin, SUFFIXED_UNIT, "holding the switch lock")  # it read the knob
    knob(twin, "hold-lock-s", None)  # remedy's own switch does not wait
    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", "--data", "lock_wait_s=1", audit_log=log)
    out = out_of(proc)
    assert proc.returncode == 5, out[-3000:]
    assert "another switch holds the system" in out
    assert f"{SUFFIXED_UNIT}.service" in out  # named as a person's switch
    assert systems(twin) == before
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head
    assert probe_inside(twin).outcome == "parsed"
    assert audit_of(log)["result"] == "locked"
    subprocess.run(
        [*twin.ssh_argv(), "while systemctl -q is-active person-rebuild; do sleep 1; done"],
        timeout=120,
        check=True,
    )

    # the rerun converges; its SSH session is killed while the switch holds its lock,
    # before the stand-in writes its next lines: a write to a closed pipe panics
    # switch-to-configuration-ng (exit 101) as it would under `systemd-run --pipe`; its
    # output is the journal, so the switch finishes
    knob(twin, "hold-lock-s", "6")
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    run = subprocess.Popen(
        ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "inventory/twin.py",
         "deploys/converge.py"],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wait_switch_running(twin, until=lambda: run.poll() is not None, timeout=180)
    # every sshd session process but this command's own
    twin.exec(
        [
            "sh", "-c",
            'for p in $(pgrep -f "^sshd(-session)?: root@notty"); do '
            '[ "$p" = "$PPID" ] || kill -9 "$p"; done',
        ],
        check=False,
    )  # fmt: skip
    said, _ = run.communicate(timeout=300)
    knob(twin, "hold-lock-s", None)
    assert run.returncode != 0, said[-3000:]
    subprocess.run(
        [
            *twin.ssh_argv(),
            "while systemctl -q is-active nixos-rebuild-switch-to-configuration; do sleep 1; done",
        ],
        timeout=120,
        check=True,
    )
    ended = twin.exec(["journalctl", "-q", "-b", "-u", SWITCH_UNIT, "-o", "cat", "-n", "20"]).stdout
    assert "activating the configuration..." in ended and "status=101" not in ended, ended
    now = systems(twin)
    assert now["current"] == now["profile"] == now["boot"] != before["current"], now
    assert wait_probe(twin).outcome == "parsed"  # the server the activation restarted
    assert twin.exec(["test", "-e", OVERRIDE], check=False).returncode != 0
    record = audit_of(log)
    assert record["result"] != "ok" and "connection" in json.dumps(record), record
    pid = unit_props(twin)["MainPID"]
    again = run_deploy(twin, "converge", audit_log=log)
    assert again.returncode == 0, out_of(again)[-3000:]
    assert unit_props(twin)["MainPID"] == pid  # no restart
    assert systems(twin) == now  # and no switch


def test_the_switch_inhibitors_make_it_durable_at_next_boot_without_a_rollback(make_twin, tmp_path):
    """NixOS 26.05: `switch` exits 1 with "Pre-switch check 'switchInhibitors' failed"
    when the new generation changes an inhibiting package; `boot` skips that check."""
    twin = make_twin(with_emergency_override=True)
    before = systems(twin)
    from tests.twin.test_switch_upstream import commit_inhibitor

    commit_inhibitor(twin)  # the new generation's inhibitors differ from the booted one's
    log = tmp_path / "a.jsonl"
    proc = run_deploy(twin, "converge", audit_log=log)
    out = out_of(proc)
    assert "Pre-switch check 'switchInhibitors' failed" in out, out[-3000:]
    assert "durable at next boot" in out and "rollback FAILED" not in out, out[-3000:]
    after = systems(twin)
    assert after["current"] == before["current"]  # nothing activated
    assert after["boot"] == after["profile"] != before["profile"]  # the new one boots
    assert twin.exec(["test", "-e", OVERRIDE], check=False).returncode == 0
    assert probe_inside(twin).outcome == "parsed"
    record = audit_of(log)
    assert record["details"]["boot_pending"] == after["profile"], record
    assert "rolled_back" not in json.dumps(record), record
    machine.reboot(twin.name, progress=lambda _m: None)
    code, _ = status_settings(twin)
    assert code == 0  # with no run
    assert systems(twin)["current"] == after["profile"]


def test_the_manual_script_takes_the_switch_inhibitors_as_the_deploy_does(make_twin):
    from tests.twin.test_one_implementation import manual_script, over_ssh

    twin = make_twin(with_emergency_override=True)
    before = systems(twin)
    from tests.twin.test_switch_upstream import commit_inhibitor

    commit_inhibitor(twin)  # the new generation's inhibitors differ from the booted one's
    script = over_ssh(twin, manual_script("inventory/twin.py", twin))
    said = out_of(script)
    assert script.returncode == 6, said[-3000:]  # boot pending, as status says after it
    assert "Pre-switch check 'switchInhibitors' failed" in said, said[-3000:]
    assert "durable at next boot" in said and "ROLLBACK FAILED" not in said, said[-3000:]
    after = systems(twin)
    assert after["current"] == before["current"]  # nothing activated
    assert after["boot"] == after["profile"] != before["profile"]  # the new one boots
    assert twin.exec(["test", "-e", OVERRIDE], check=False).returncode == 0
    assert probe_inside(twin).outcome == "parsed"
