"""switch-to-configuration's outcomes, read from output recorded on a twin
(python -m tests.facts.record): the switch's own words and systemd's journal of
nixos-rebuild-ng's transient unit."""

from __future__ import annotations

from pathlib import Path

from remedy.core.programs import commands
from remedy.core.readings import switch

RAW = Path(__file__).parents[1] / "facts" / "raw"


def section(name: str) -> list[str]:
    return section_of(RAW / name)


def section_of(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return lines[lines.index("@@remedy:section nix.switch") + 1 :]


def test_exit_4_names_the_units_that_failed():
    said = (RAW / "switch.exit_4.txt").read_text()
    code = commands.switch_exit(said)
    assert code == 4
    found = switch.outcome(code, said)
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


def test_the_switch_runs_in_nixos_rebuild_ngs_transient_unit():
    argv = commands.switch("/nix/store/x-system", "switch", transient=True, wait_s=30)
    assert argv[4:9] == [
        "nixos-rebuild-switch-to-configuration", "30", "env", "NIXOS_INSTALL_BOOTLOADER=0",
        "systemd-run",
    ]  # fmt: skip
    assert "--unit=nixos-rebuild-switch-to-configuration" in argv
    assert argv[-2:] == ["/nix/store/x-system/bin/switch-to-configuration", "switch"]
    plain = commands.switch("/nix/store/x-system", "boot", transient=False)
    assert "systemd-run" not in plain and plain[-1] == "boot" and plain[4] == ""


def test_the_switchs_output_is_the_journal_not_the_ssh_session():
    # switch-to-configuration-ng panics (exit 101) writing to a closed pipe
    # (nixpkgs#462179): with --pipe its stderr would be remedy's SSH channel
    argv = commands.switch("/nix/store/x-system", "switch", transient=True)
    assert "--pipe" not in argv and "--pty" not in argv
    assert "--wait" in argv  # systemd-run waits for the unit, its words come from the journal
    said = (RAW / "switch.exit_4.txt").read_text()  # recorded: the journal's lines, in order
    assert said.splitlines()[-2:] == [
        "warning: the following units failed: tenstorrent-serving.service",
        "@@remedy:switch-exit 4",
    ]


def test_the_switch_inhibitors_are_not_a_failed_switch():
    said = (RAW / "switch.inhibited.txt").read_text()
    code = commands.switch_exit(said)
    assert (code, switch.outcome(code, said).kind) == (1, switch.INHIBITED)
    boot = (RAW / "switch.inhibited_boot.txt").read_text()  # `boot` skips that check
    assert switch.outcome(commands.switch_exit(boot), boot).kind == switch.DONE
    failed = "Pre-switch check 'firmwareUnchanged' failed\nPre-switch checks failed\n"
    assert switch.outcome(1, failed).kind == switch.FAILED  # another check: a failed switch


def test_a_held_lock_names_what_blocked_the_switch():
    said = (RAW / "switch.lock_held.txt").read_text()
    found = switch.outcome(commands.switch_exit(said), said)
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


def test_the_journal_says_when_the_switch_inhibitors_refused_the_last_switch():
    # the refused `switch`, then the `boot` that made it the boot default (exit 0)
    last = switch.parse_last_switch(section("switch.last_inhibited.txt"))
    assert last.inhibited and last.exit_code == 0 and not last.running
    assert not switch.parse_last_switch(section("switch.last_exit_0.txt")).inhibited
