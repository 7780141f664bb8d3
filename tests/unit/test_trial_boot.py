"""The trial boot's Python side (remedy.core.run.trial, its programs and readings): the
argv it builds, and its readings of the programs' answers, replayed from real output
recorded on twins (tests/unit/trial_answers, by tests/twin/test_trial_boot.py with
REMEDY_RECORD_TRIAL=DIR). The expectations are written here, by hand. The programs
themselves: shellcheck-clean as a whole, parsed by dash and bash --posix."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from remedy import host
from remedy.core.config import host_data
from remedy.core.programs import trial as programs
from remedy.core.readings import trial as readings
from remedy.core.run import trial
from remedy.errors import ConfigError

ANSWERS = Path(__file__).parent / "trial_answers"


def recorded(name: str) -> dict:
    return json.loads((ANSWERS / f"{name}.json").read_text())


def reading(name: str) -> readings.BootReading:
    r = recorded(name)
    assert r["program"] == "read"
    return readings.parse_reading(r["stdout"], r["stderr"], r["code"])


def step(name: str) -> readings.TrialStep:
    r = recorded(name)
    return readings.parse_step(r["stdout"], r["stderr"], r["code"])


def test_a_host_whose_next_boot_is_a_new_generation_is_read_as_no_trial_yet():
    r = reading("read_none_new_generation_pending")
    assert r.supported and r.loader_info == "systemd-boot 257 (nixos-twin)"
    assert (r.trial, r.armed, r.on_trial) == ("none", False, False)
    assert (r.booted_entry, r.running_entry) == ("nixos-generation-2.conf",) * 2
    assert (r.conf_default, r.next_entry) == ("nixos-generation-3.conf",) * 2
    assert (r.default_entry, r.oneshot_entry) == ("", "")
    assert r.booted_system.startswith("/nix/store/") and r.why == ""


def test_an_armed_trial_is_read_with_its_one_shot_and_the_pinned_default():
    r = reading("read_armed")
    assert r.armed and not r.on_trial
    assert r.oneshot_entry == "nixos-generation-3.conf"
    assert r.default_entry == "nixos-generation-2.conf"
    assert r.next_entry == "nixos-generation-3.conf"  # the one-shot comes first


def test_a_boot_on_trial_is_read_with_the_default_as_the_next_boot():
    r = reading("read_on_trial")
    assert r.on_trial and not r.armed
    assert (r.booted_entry, r.default_entry) == (
        "nixos-generation-3.conf",
        "nixos-generation-2.conf",
    )
    assert r.oneshot_entry == ""  # read and removed at boot
    assert r.next_entry == "nixos-generation-2.conf"  # a power cycle falls back


def test_after_a_bless_the_pin_is_gone_and_loader_conf_rules():
    r = reading("read_none_blessed")
    assert r.trial == "none" and r.default_entry == ""
    assert r.booted_entry == r.conf_default == r.next_entry == "nixos-generation-3.conf"


@pytest.mark.parametrize(
    "name, why",
    [
        (
            "read_grub_uefi",
            "its boot loader sets no LoaderInfo: it does not implement systemd's Boot "
            "Loader Interface",
        ),
        ("read_no_uefi", "not booted with UEFI (no /sys/firmware/efi/efivars)"),
    ],
)
def test_grub_is_named_and_unsupported(name, why):
    r = reading(name)
    assert (r.loader, r.trial, r.supported) == ("GRUB", "unsupported", False)
    assert r.why == why
    assert r.booted_entry == "" and r.next_entry == ""  # no variable is read


def test_arm_says_what_it_did_and_what_it_would_not_do_twice():
    done = step("arm_done")
    assert done.changed and not done.refused
    assert (done.trial, done.previous) == ("nixos-generation-3.conf", "nixos-generation-2.conf")
    assert "default stays nixos-generation-2.conf" in done.text
    again = step("arm_armed_already")
    assert again.verdict == "noop" and again.text.startswith("armed already")


def test_arm_on_grub_is_refused_by_name():
    s = step("arm_grub_refused")
    assert s.refused and not s.changed
    assert "this host boots with GRUB" in s.text and s.text.endswith("not supported")


def test_bless_needs_a_passing_verify_and_says_the_entry():
    failed = step("bless_verify_failed")
    assert failed.refused and "no passing verify (verify=failed)" in failed.text
    done = step("bless_done")
    assert done.changed and done.booted == "nixos-generation-3.conf"
    assert done.previous == "nixos-generation-2.conf"
    already = step("bless_default_already")
    assert already.verdict == "noop" and "default already" in already.text


def test_fall_back_names_the_default_it_reboots_into():
    checked = step("fallback_check_act")
    assert checked.verdict == "act" and not checked.changed
    done = step("fallback_done")
    assert done.changed and done.previous == "nixos-generation-2.conf"
    assert done.booted == "nixos-generation-3.conf"
    assert done.text.startswith("rebooting into nixos-generation-2.conf")
    none = step("fallback_no_trial")
    assert none.verdict == "noop" and "no trial" in none.text


def test_an_answer_cut_off_is_a_give_up_and_a_reading_cut_off_raises():
    cut = readings.parse_step("@@remedy say previous x.conf\n", "Connection closed", 255)
    assert cut.refused and "Connection closed" in cut.text and "exit 255" in cut.text
    with pytest.raises(ValueError, match="could not be read"):
        readings.parse_reading("", "ssh: connect to host h port 22: refused", 255)


def test_argv_keeps_the_program_and_each_value_one_word():
    argv = programs.argv("arm", "check", esp="/boot", trial="nixos generation 3.conf")
    assert argv[:2] == ["sh", "-c"] and argv[3:5] == ["remedy-trial-arm", "check"]
    assert argv[5:] == ["esp=/boot", "trial=nixos generation 3.conf"]
    assert "# ---- the trial program: arm" in argv[2]
    with pytest.raises(ValueError):
        programs.argv("reboot")
    with pytest.raises(ValueError):
        programs.argv("arm", "maybe")


def test_trial_boot_passes_the_callers_verdict_and_mode():
    seen: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        seen.append(argv)
        return 0, "@@remedy give-up x\n", ""

    tb = trial.TrialBoot(run, esp="/efi")
    tb.bless(verify_passed=False)
    tb.fall_back(reboot=False, check=True)
    assert seen[0][3:] == ["remedy-trial-bless", "apply", "esp=/efi", "verify=failed"]
    assert seen[1][3:] == ["remedy-trial-fallback", "check", "esp=/efi", "reboot=no"]


def test_host_data_naming_another_loader_is_refused_before_connecting():
    def run(argv: list[str]) -> tuple[int, str, str]:
        raise AssertionError("connected")

    tb = trial.TrialBoot.of_host("h", host_data.from_host_data("h", {"esp_path": "/efi"}), run)
    assert tb._values == {"esp": "/efi"}
    grub = host_data.from_host_data("h", {"boot_loader": "grub"})
    with pytest.raises(ConfigError, match="boot_loader is grub: not supported"):
        trial.TrialBoot.of_host("h", grub, run)
    with pytest.raises(ConfigError, match="boot_loader"):
        host_data.from_host_data("h", {"boot_loader": "lilo"})


@pytest.mark.parametrize("name", programs.PROGRAMS)
def test_each_trial_program_is_shellcheck_clean_and_posix(name, tmp_path):
    text = programs.program(name)
    path = tmp_path / f"{name}.sh"
    path.write_text(text)
    assert shutil.which("shellcheck"), "shellcheck is not installed: run scripts/setup.sh"
    ran = subprocess.run(["shellcheck", "-s", "sh", str(path)], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout
    for shell in (["dash"], ["bash", "--posix"]):
        parsed = subprocess.run([*shell, "-n", str(path)], capture_output=True, text=True)
        assert parsed.returncode == 0, (shell, parsed.stderr)
    assert max(len(line) for line in (host.text(f"trial/{name}.sh")).splitlines()) <= 80


def test_a_trial_that_does_not_come_back_is_reported_with_its_power_cycle():
    armed = step("arm_done")
    note = trial.not_back_note("cfx-llm2", armed)
    assert note == (
        "cfx-llm2 did not come back from its trial boot of nixos-generation-3.conf: a "
        "power cycle boots nixos-generation-2.conf, the boot default (the generation "
        "that ran before); the one-shot entry was spent on the trial"
    )
    assert trial.not_back_note("h", readings.TrialStep("noop", "x")) == ""


def test_arm_refuses_an_entry_that_is_not_there_before_writing():
    s = step("arm_entry_missing")
    assert s.refused and s.previous == "" and s.trial == ""
    assert s.text == "the entry to try, nixos-generation-9.conf, is not in /boot/loader/entries"


def test_disarm_restores_the_default_before_arm_and_leaves_a_pin_it_did_not_arm():
    done = step("disarm_done")
    assert done.changed and done.trial == "nixos-generation-3.conf"
    assert done.text == (
        "disarmed: nixos-generation-3.conf no longer boots once; LoaderEntryDefault is "
        "removed, as before arm"
    )
    kept = step("disarm_nothing_armed")
    assert kept.verdict == "noop"
    assert kept.text == (
        "no trial is armed (LoaderEntryDefault nixos-generation-2.conf is left as it is)"
    )


def test_arm_on_a_trial_boot_is_refused():
    s = step("arm_on_trial_refused")
    assert s.refused and s.previous == "" and s.trial == ""
    assert s.text == (
        "on trial: nixos-generation-3.conf booted, the default is nixos-generation-2.conf; "
        "bless it or fall back first"
    )


def test_settle_names_the_failed_generation_and_what_it_rolls_back():
    checked = step("settle_check_act")
    assert checked.verdict == "act" and not checked.changed
    assert (checked.failed_entry, checked.failed_generation) == ("nixos-generation-3.conf", "3")
    assert checked.failed_system.startswith("/nix/store/")
    assert (checked.previous, checked.booted, checked.booted_generation) == (
        "nixos-generation-2.conf",
        "nixos-generation-2.conf",
        "2",
    )
    assert checked.text == (
        "settle the fall back from nixos-generation-3.conf: the system profile back to "
        f"generation 2 (from the failed generation 3, {checked.failed_system}); "
        "loader.conf's default to the booted generation (nixos-generation-3.conf now); "
        "remove LoaderEntryDefault nixos-generation-2.conf"
    )


def test_settle_stopped_by_another_switch_says_to_run_it_again_and_then_finishes():
    held = step("settle_locked")
    assert held.refused and held.failed_generation == "3"
    assert held.text.endswith("did not run: Could not acquire lock; run again once it is done")
    done = step("settle_done")
    assert done.changed and done.failed_entry == "nixos-generation-3.conf"
    assert done.text == (
        "settled: rolled back from the failed nixos-generation-3.conf; generation 2 "
        "(nixos-generation-2.conf) is the system profile and loader.conf's default, no "
        "LoaderEntryDefault; the failed generation 3 stays in the profile's history, not "
        "current"
    )
    none = step("settle_nothing_recorded")
    assert none.verdict == "noop" and none.failed_generation == ""
    assert none.text == "no fall back to settle (no record in /var/lib/remedy/trial-fell-back)"


def test_settle_passes_the_lock_wait_and_the_switch_bound():
    seen: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        seen.append(argv)
        return 0, "@@remedy noop x\n", ""

    trial.TrialBoot(run).settle(lock_wait_s=7.5, check=True)
    assert seen[0][3:] == ["remedy-trial-settle", "check", "esp=/boot", "lock_wait_s=7.5",
                           "switch_bound_s=3600"]  # fmt: skip
