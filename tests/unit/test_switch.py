"""switch-to-configuration's outcomes, read from output recorded on a twin
(python -m tests.facts.record): the switch's own words and systemd's journal of
nixos-rebuild-ng's transient unit. The switch is the host library's switch_to
(remedy/host/lib.sh), run here with the recorded output in place of the switch."""

from __future__ import annotations

import subprocess
from pathlib import Path

from remedy import host
from remedy.core.programs import commands
from remedy.core.readings import switch

RAW = Path(__file__).parents[1] / "facts" / "raw"


def switch_to(
    run: str, action: str = "switch", wait_s: str = "30", transient: bool = True,
    bound_s: str = "1234",
):  # fmt: skip
    """lib.sh's switch_to with its switch (SWITCH_RUN: remedy/host/switch_run.sh and the
    arguments it is given) replaced by the program RUN, on a host with systemd-run or
    (TRANSIENT false) without, its end waited for up to BOUND_S: (switch_exit,
    switch_outcome, switch_said)."""
    script = host.text("lib.sh") + (
        'SWITCH_RUN() { printf "%s" "$run"; }\n'
        f"transient() {{ {'true' if transient else 'false'}; }}\n"
        'switch_to /nix/store/x-system "$action" "$wait_s" "$bound_s"\n'
        'printf "%s\\n" "$switch_exit" "$switch_outcome" "$switch_said"\n'
    )
    ran = subprocess.run(
        ["sh", "-c", script, "remedy-t", "apply", f"run={run}", f"action={action}",
         f"wait_s={wait_s}", f"bound_s={bound_s}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    code, outcome, said = ran.stdout.split("\n", 2)
    return code, outcome, said


def recorded(name: str) -> tuple[int | None, switch.Outcome]:
    """The exit code switch_to reads from the recorded switch NAME, and the outcome it
    decides, which is the Python model's (remedy.core.readings.switch)."""
    said = (RAW / name).read_text()
    code, outcome, _ = switch_to(f"cat {RAW / name}")
    found = switch.outcome(int(code) if code else None, said)
    assert outcome.replace("-", " ") == found.kind, (outcome, found.kind)
    return found.code, found


def section(name: str) -> list[str]:
    return section_of(RAW / name)


def section_of(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return lines[lines.index("@@remedy:section nix.switch") + 1 :]


def test_exit_4_names_the_units_that_failed():
    code, found = recorded("switch.exit_4.txt")
    assert code == 4
    assert found.kind == switch.UNITS_FAILED
    assert found.failed_units == ("tenstorrent-serving.service",)


def test_the_journal_of_the_transient_unit_gives_the_last_exit_code():
    after_4 = switch.parse_last_switch(section("switch.last_exit_4.txt"))
    assert after_4.exit_code == 4 and not after_4.running
    after_0 = switch.parse_last_switch(section("switch.last_exit_0.txt"))
    assert after_0.exit_code == 0 and after_0.units_failed == ()


def test_the_other_outcomes():
    assert switch.outcome(0, "").kind == switch.DONE
    assert switch.outcome(100, "").kind == switch.BOOT_PENDING
    assert switch.outcome(11, "Could not acquire lock").kind == switch.LOCKED
    busy = (
        "Failed to start transient service unit: Unit "
        "nixos-rebuild-switch-to-configuration.service was already loaded or has a "
        "fragment file."
    )
    assert switch.outcome(1, busy).kind == switch.LOCKED
    assert switch.outcome(2, "error: the activation script failed").kind == switch.FAILED
    assert switch.outcome(None, "").kind == switch.FAILED


# A switch that prints the arguments switch_to gives switch_run.sh, one a line.
ITS_ARGUMENTS = 'printf "%s\\n" "$@"'


def test_the_switch_runs_in_nixos_rebuild_ngs_transient_unit():
    argv = switch_to(ITS_ARGUMENTS, "switch", "30")[2].splitlines()
    assert argv[:6] == [
        "nixos-rebuild-switch-to-configuration", "30", "1234", "env",
        "NIXOS_INSTALL_BOOTLOADER=0", "systemd-run",
    ]  # fmt: skip
    assert f"--unit={commands.SWITCH_UNIT}" in argv
    assert argv[-2:] == ["/nix/store/x-system/bin/switch-to-configuration", "switch"]
    plain = switch_to(ITS_ARGUMENTS, "boot", "0", transient=False)[2].splitlines()
    assert "systemd-run" not in plain and plain[-1] == "boot" and plain[0] == ""


def test_the_switch_bound_is_remedys_one_value_given_to_the_host_programs():
    """The bound is commands.SWITCH_BOUND_S: the switch and rollback steps are given
    it, no host program holds a number of its own, and one not given is refused."""
    from remedy.core.programs import step_values as sv

    run = {"journal": "/j", "run_id": "r"}
    steps = [
        sv.Switch(**run, toplevel=None, set_profile=True, action="switch", unit="u",
                  lock_wait_s=30, server_url=None),
        sv.Rollback(**run, unit="u", flake_dir="/f", flake_host="h", min_gb=4,
                    lock_wait_s=30, host="h"),
    ]  # fmt: skip
    for step in steps:
        assert f"switch_bound_s={commands.SWITCH_BOUND_S}" in step.words()
        assert "switch_bound_s" in host.step_program(step.PROGRAM)
    for text in (host.text("lib.sh"), host.text("switch_run.sh")):
        assert str(commands.SWITCH_BOUND_S) not in text
    script = host.text("lib.sh") + (
        "SWITCH_RUN() { echo 'echo ran'; }\nswitch_to /nix/store/x-system switch 30 ''\n"
    )
    ran = subprocess.run(["sh", "-c", script, "remedy-t", "apply"], capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert ran.stdout == "@@remedy give-up no switch bound (switch_bound_s)\n"


def test_the_switchs_output_is_the_journal_not_the_ssh_session():
    # switch-to-configuration-ng panics (exit 101) writing to a closed pipe
    # (nixpkgs#462179): with --pipe its stderr would be remedy's SSH channel
    argv = switch_to(ITS_ARGUMENTS)[2].splitlines()
    assert "--pipe" not in argv and "--pty" not in argv
    assert "--wait" in argv  # systemd-run waits for the unit, its words come from the journal
    said = (RAW / "switch.exit_4.txt").read_text()  # recorded: the journal's lines, in order
    assert said.splitlines()[-2:] == [
        "warning: the following units failed: tenstorrent-serving.service",
        "@@remedy:switch-exit 4",
    ]


def test_the_switch_inhibitors_are_not_a_failed_switch():
    code, found = recorded("switch.inhibited.txt")
    assert (code, found.kind) == (1, switch.INHIBITED)
    # `boot` skips that check
    assert recorded("switch.inhibited_boot.txt")[1].kind == switch.DONE
    failed = "Pre-switch check 'firmwareUnchanged' failed\nPre-switch checks failed\n"
    assert switch.outcome(1, failed).kind == switch.FAILED  # another check: a failed switch


def test_a_held_lock_names_what_blocked_the_switch():
    found = recorded("switch.lock_held.txt")[1]
    assert found.kind == switch.LOCKED and found.holders == ("Could not acquire lock",)


def test_holders_are_read_from_the_snippets_lines():
    out = "holder nixos-rebuild-switch-to-configuration.service (pid 42)\nnoise\n"
    assert commands.parse_holders(out) == ["nixos-rebuild-switch-to-configuration.service (pid 42)"]


def test_a_persons_switch_under_the_26_05_pre_unit_name_holds_the_switch():
    # nixos-rebuild-switch-to-configuration-<8 hex> (nixpkgs#463029, reverted by #499837)
    out = (RAW / "switch.holders_suffixed.txt").read_text()
    holders = commands.parse_holders(out)
    assert holders[0].startswith("nixos-rebuild-switch-to-configuration-9767bc07.service (pid ")
    last = switch.parse_last_switch(section_of(RAW / "switch.last_suffixed.txt"))
    assert last.running


def test_the_switch_inhibitors_are_read_from_the_state_not_the_journals_words():
    # a person's switch says its words on their terminal (nixos-rebuild-ng --pipe): the
    # recorded journal has the refused switch's words, but words never decide; without
    # the state's lines (inhibitors booted|profile, recorded before they existed) a
    # switch is not known to be refused (tests/twin/test_switch_upstream.py reads them)
    last = switch.parse_last_switch(section("switch.last_inhibited.txt"))
    assert not last.inhibited and last.exit_code == 0 and not last.running


def test_a_boot_default_whose_switch_inhibitors_differ_from_the_booted_ones_is_inhibited():
    # recorded (tests/facts/record.py --list-property): the owner listed a switch
    # inhibitor and ran `nixos-rebuild boot`; the booted system's switch-inhibitors is
    # empty, the boot default's lists it
    lines = section("switch.last_inhibitors.txt")
    said = dict(ln.split(" ", 2)[1:] for ln in lines if ln.startswith("inhibitors "))
    assert set(said) == {"booted", "profile"} and said["booted"] != said["profile"], said
    assert switch.parse_last_switch(lines).inhibited
    # the same boot default over a booted system that lists the same: not inhibited
    same = [f"inhibitors booted {said['profile']}" if ln.startswith("inhibitors booted ")
            else ln for ln in lines]  # fmt: skip
    assert not switch.parse_last_switch(same).inhibited
    # a side without the file has nothing to check (switchable-system.nix)
    gone = [ln for ln in lines if not ln.startswith("inhibitors booted ")]
    assert not switch.parse_last_switch(gone).inhibited
