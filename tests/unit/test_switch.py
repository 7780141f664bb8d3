"""switch-to-configuration's outcomes, read from output recorded on a twin
(python -m tests.facts.record): the switch's own words and systemd's journal of
nixos-rebuild-ng's transient unit."""

from __future__ import annotations

from pathlib import Path

from remedy.core import commands, switch

RAW = Path(__file__).parents[1] / "facts" / "raw"


def section(name: str) -> list[str]:
    lines = (RAW / name).read_text().splitlines()
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
    argv = commands.switch("/nix/store/x-system", "switch", transient=True)
    assert argv[4:7] == ["env", "NIXOS_INSTALL_BOOTLOADER=0", "systemd-run"]
    assert "--unit=nixos-rebuild-switch-to-configuration" in argv
    assert argv[-2:] == ["/nix/store/x-system/bin/switch-to-configuration", "switch"]
    plain = commands.switch("/nix/store/x-system", "boot", transient=False)
    assert "systemd-run" not in plain and plain[-1] == "boot"


def test_holders_are_read_from_the_snippets_lines():
    out = "holder nixos-rebuild-switch-to-configuration.service (pid 42)\nnoise\n"
    assert commands.parse_holders(out) == ["nixos-rebuild-switch-to-configuration.service (pid 42)"]
