"""A trial boot that falls back by itself (issue 46 item 4), on real twins.

The twin boots as systemd-boot does (remedy/twin/files/nixos-twin-boot-generator: the
one-shot entry read and removed, then LoaderEntryDefault, then loader.conf's default)
and keeps the EFI variables in efivarfs' format at /sys/firmware/efi/efivars. The
pieces run over the twin's real SSH (``remedy.core.trial.TrialBoot``); what the tests
check is read on their own: the generation that booted (/run/booted-system) and the
variables, decoded here from the files.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

from remedy import session
from remedy.core.run.trial import TrialBoot
from remedy.trial_boot import of_pyinfra_host, over_ssh
from remedy.twin import fixtures, machine
from tests.conftest import owner_git, sudo_rebuild, twin_inventory

CONFIG = f"{fixtures.NIXOS_DIR}/hosts/{fixtures.FLAKE_HOST}/configuration.nix"
FLAKE = f"{fixtures.NIXOS_DIR}#{fixtures.FLAKE_HOST}"
EFIVARS = "/sys/firmware/efi/efivars"
GUID = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
RECORD = "/var/lib/remedy/trial-default-before"  # arm's record of the default before
PROFILE = "/nix/var/nix/profiles/system"


def new_generation(twin: machine.Twin, name: str, value: str) -> str:
    """The owner adds NAME=VALUE to the serving unit's environment and commits; then
    `sudo nixos-rebuild boot`: a new generation, loader.conf's default. Its toplevel."""
    text = twin.exec(["cat", CONFIG]).stdout
    twin.exec(["tee", CONFIG], input=fixtures.with_serving_env(text, name, value))
    owner_git(twin, "commit", "-q", "-am", f"serving: {name}")
    sudo_rebuild(twin, "boot", "--flake", FLAKE)
    return realpath(twin, "/nix/var/nix/profiles/system")


def realpath(twin: machine.Twin, path: str) -> str:
    return twin.exec(["readlink", "-f", path]).stdout.strip()


def entry_of(twin: machine.Twin, toplevel: str) -> str:
    """The boot entry whose init is TOPLEVEL's (grep, not remedy's reading)."""
    out = twin.exec(["grep", "-l", f"init={toplevel}/init", "-r", "/boot/loader/entries"])
    names = [line.rsplit("/", 1)[-1] for line in out.stdout.split()]
    assert len(names) == 1, names
    return names[0]


def conf_default(twin: machine.Twin) -> str:
    """loader.conf's default entry (its last "default" line)."""
    text = twin.exec(["cat", "/boot/loader/loader.conf"]).stdout
    return [line.split()[1] for line in text.splitlines() if line.startswith("default ")][-1]


def efivar(twin: machine.Twin, name: str) -> str | None:
    """Variable NAME decoded from its efivarfs file: 4 bytes of attributes, then
    UTF-16LE up to its NUL; None when unset."""
    path = f"{EFIVARS}/{name}-{GUID}"
    ran = twin.exec(["base64", "-w0", path], check=False)
    if ran.returncode != 0:
        return None
    raw = base64.b64decode(ran.stdout)
    return raw[4:].decode("utf-16-le").split("\0", 1)[0]


def boot_state(twin: machine.Twin) -> dict:
    return {
        "booted": realpath(twin, "/run/booted-system"),
        "selected": efivar(twin, "LoaderEntrySelected"),
        "default": efivar(twin, "LoaderEntryDefault"),
        "oneshot": efivar(twin, "LoaderEntryOneShot"),
    }


def trial_boot(twin: machine.Twin) -> TrialBoot:
    """The pieces over the twin's SSH. With REMEDY_RECORD_TRIAL=DIR each answer is
    also kept there (the unit tests' recorded output, tests/unit/trial_answers)."""
    run = over_ssh(twin.ssh_argv())
    folder = os.environ.get("REMEDY_RECORD_TRIAL")
    if not folder:
        return TrialBoot(run)

    def recording(argv: list[str]) -> tuple[int, str, str]:
        code, out, err = run(argv)
        name, mode, values = argv[3].removeprefix("remedy-trial-"), argv[4], argv[5:]
        record = {"program": name, "mode": mode, "values": values}
        record |= {"code": code, "stdout": out, "stderr": err}
        n = len(list(Path(folder).glob("*.json")))
        path = Path(folder) / f"{n:02d}-{name}-{mode}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        return code, out, err

    return TrialBoot(recording)


def test_a_trial_boots_once_and_only_a_blessed_one_becomes_the_default(make_twin):
    """Arm, reboot: the new generation booted, the default unchanged. A power cycle
    without a bless: the previous generation again. Armed again and blessed after the
    verify: the new one is the default and the next boot keeps it."""
    twin = make_twin()
    previous = realpath(twin, "/run/booted-system")
    new = new_generation(twin, "REMEDY_TRIAL_MARK", "1")
    old_entry, new_entry = entry_of(twin, previous), entry_of(twin, new)
    trial = trial_boot(twin)

    reading = trial.read()
    assert reading.supported and reading.trial == "none", reading
    assert (reading.running_entry, reading.next_entry) == (old_entry, new_entry)
    armed = trial.arm()
    assert armed.changed, armed
    assert (armed.trial, armed.previous) == (new_entry, old_entry)
    state = boot_state(twin)
    assert (state["oneshot"], state["default"]) == (new_entry, old_entry), state
    assert trial.read().armed
    assert trial.arm().verdict == "noop"  # armed already: said, not done twice
    record = twin.exec(["stat", "-c", "%a %U", RECORD]).stdout.split()
    assert record == ["600", "root"] and twin.exec(["cat", RECORD]).stdout == "none\n"

    disarmed = trial.disarm()  # a reboot called off: as before arm
    assert disarmed.changed, disarmed
    assert boot_state(twin)["oneshot"] is None and boot_state(twin)["default"] is None
    assert twin.exec(["test", "-e", RECORD], check=False).returncode == 1
    assert trial.read().trial == "none"
    assert trial.arm().changed  # armed again for the reboot

    machine.reboot(twin.name)
    on_trial = boot_state(twin)
    assert on_trial == {
        "booted": new,
        "selected": new_entry,
        "default": old_entry,  # the default stayed on the generation that ran
        "oneshot": None,  # read and removed at boot
    }, on_trial
    assert trial.read().on_trial
    again = trial.arm()  # on trial, arming again would pin the untried one
    assert again.refused and again.text.startswith("on trial:"), again
    assert trial.disarm().refused
    assert boot_state(twin) == on_trial

    machine.reboot(twin.name)  # a power cycle, no bless: the previous generation
    cycled = boot_state(twin)
    assert cycled == {
        "booted": previous,
        "selected": old_entry,
        "default": old_entry,
        "oneshot": None,
    }, cycled
    kept = trial.disarm()  # nothing armed: the pin left as it is
    assert kept.verdict == "noop" and old_entry in kept.text, kept

    assert trial.arm().changed
    machine.reboot(twin.name)
    assert boot_state(twin)["booted"] == new
    refused = trial.bless(verify_passed=False)
    assert refused.refused and "no passing verify" in refused.text, refused
    assert boot_state(twin)["default"] == old_entry  # a failed verify blesses nothing
    blessed = trial.bless(verify_passed=True)
    assert blessed.changed and blessed.booted == new_entry, blessed
    # loader.conf names the new one (nixos-rebuild boot put it there): the pin goes
    assert boot_state(twin)["default"] is None
    assert twin.exec(["test", "-e", RECORD], check=False).returncode == 1
    after = trial.read()
    assert (after.trial, after.next_entry) == ("none", new_entry), after
    assert trial.bless(verify_passed=True).verdict == "noop"

    machine.reboot(twin.name)
    assert boot_state(twin)["booted"] == new


def test_a_trial_whose_server_fails_falls_back_and_the_default_is_never_the_failed_one(
    make_twin, tmp_path
):
    """A trial into a generation whose model server fails after boot: the host comes
    back reachable, unhealthy; fall back reboots it into the previous generation, and
    the boot default never named the failed one. Then settle, stopped half-way by a
    switch another holds and run again: the profile and loader.conf's default are the
    previous generation, the pin gone, the failed generation kept in the history."""
    twin = make_twin()
    previous = realpath(twin, "/run/booted-system")
    bad = new_generation(twin, fixtures.FAILING_SERVER_ENV, "no Tenstorrent device")
    old_entry, bad_entry = entry_of(twin, previous), entry_of(twin, bad)
    trial = trial_boot(twin)
    defaults = []

    assert trial.arm().changed
    defaults.append(boot_state(twin)["default"])
    machine.reboot(twin.name, serving=False)
    state = boot_state(twin)
    defaults.append(state["default"])
    assert (state["booted"], state["selected"]) == (bad, bad_entry), state
    # unhealthy: the server's start failed, in vLLM's words (an event, not a wait)
    journal = ""
    for _ in range(120):
        journal = twin.exec(
            ["journalctl", "-b", "-u", "tenstorrent-serving.service", "-o", "cat"]
        ).stdout
        if "Engine core initialization failed" in journal:
            break
        time.sleep(1)
    assert "Engine core initialization failed" in journal, journal[-2000:]
    assert machine.server_health(twin) != 200

    assert trial.bless(verify_passed=False).refused
    defaults.append(boot_state(twin)["default"])
    checked = trial.fall_back(check=True)
    assert checked.verdict == "act" and old_entry in checked.text, checked
    nspawn = twin.nspawn_pid
    fell = trial.fall_back()
    assert fell.changed and fell.previous == old_entry and fell.booted == bad_entry, fell
    machine.wait_rebooted(twin, nspawn)  # serving again
    back = boot_state(twin)
    defaults.append(back["default"])
    assert (back["booted"], back["selected"]) == (previous, old_entry), back
    assert machine.server_health(twin) == 200
    assert defaults == [old_entry] * 4, defaults  # never the failed one
    assert twin.exec(["test", "-e", RECORD], check=False).returncode == 1
    assert trial.fall_back().verdict == "noop"  # no trial now: nothing to fall back from

    # settle: the failed generation is still the profile and loader.conf's default
    assert realpath(twin, PROFILE) == bad and conf_default(twin) == bad_entry
    bad_gen = bad_entry.removeprefix("nixos-generation-").removesuffix(".conf")
    checked = trial.settle(check=True)
    assert checked.verdict == "act", checked
    assert (checked.failed_entry, checked.failed_system, checked.failed_generation) == (
        bad_entry, bad, bad_gen)  # fmt: skip
    assert realpath(twin, PROFILE) == bad  # check mode changes nothing
    # another switch holds the system: the profile is rolled back, then the switch
    # cannot run; settle stops there and says so
    twin.exec(["mkdir", "-p", "/run/nixos"])
    twin.exec(["systemd-run", "--unit=test-switch-holder", "flock",
               "/run/nixos/switch-to-configuration.lock", "sleep", "600"])  # fmt: skip
    held = trial.settle(lock_wait_s=0)
    assert held.refused and "did not run" in held.text, held
    assert realpath(twin, PROFILE) == previous and conf_default(twin) == bad_entry
    assert boot_state(twin)["default"] == old_entry
    twin.exec(["systemctl", "stop", "test-switch-holder"])
    # the next `remedy reboot` finishes what is left before its gates (here the run
    # that fell back stopped before it settled): --dry says so and changes nothing
    from tests.twin.test_reboot import remedy

    inventory = str(twin_inventory(tmp_path / "inv.py", twin))
    log = tmp_path / "audit.jsonl"
    _, doc, said = remedy("reboot", inventory, "--now", "--dry", log=log)
    (host,) = doc["hosts"]
    assert "an earlier trial's fall back: would settle" in host["earlier"], said[-3000:]
    assert conf_default(twin) == bad_entry and boot_state(twin)["default"] == old_entry
    _, doc, said = remedy("reboot", inventory, "--now", log=log)
    (host,) = doc["hosts"]
    earlier = host["earlier"] or ""
    assert "an earlier trial's fall back: settled: rolled back" in earlier, (host, said[-3000:])
    assert f"the failed generation {bad_gen} stays in the profile's history" in earlier
    # then its gates read the settled profile: the seed generation, which lacks the fix
    assert host["outcome"] == "refused" and host["gate"] == "next boot", host
    assert boot_state(twin)["booted"] == previous  # not rebooted
    assert realpath(twin, PROFILE) == previous and conf_default(twin) == old_entry
    assert boot_state(twin)["default"] is None
    listed = twin.exec(["nix-env", "-p", PROFILE, "--list-generations"]).stdout
    assert any(g.split()[0] == bad_gen for g in listed.splitlines()), listed
    assert trial.settle().verdict == "noop"  # nothing recorded now: nothing to settle
    machine.reboot(twin.name)  # a plain boot: the previous generation
    assert boot_state(twin)["booted"] == previous


def test_a_trial_boot_is_refused_by_name_where_the_loader_is_not_systemd_boot(make_twin):
    """A twin booted by a loader without systemd's Boot Loader Interface (GRUB): the
    reading names it, arm refuses by name and writes no variable; a twin without UEFI
    the same, saying so."""
    twin = make_twin()
    twin.exec(["mkdir", "-p", "/etc/nixos-twin", "/boot/grub"])
    twin.exec(["tee", "/etc/nixos-twin/boot-loader"], input="grub\n")
    twin.exec(["tee", "/boot/grub/grub.cfg"], input="set default=0\n")
    machine.reboot(twin.name)
    trial = trial_boot(twin)
    reading = trial.read()
    assert (reading.loader, reading.trial) == ("GRUB", "unsupported"), reading
    assert "Boot Loader Interface" in reading.why
    refused = trial.arm()
    assert refused.refused and "boots with GRUB" in refused.text, refused
    assert "not supported" in refused.text
    state = boot_state(twin)
    assert (state["default"], state["oneshot"]) == (None, None), state
    assert trial.fall_back().refused
    out = twin.exec(["bootctl", "set-oneshot", "x.conf"], check=False)
    assert (out.returncode, out.stderr.strip()) == (1, "Not booted with a supported boot loader.")

    twin.exec(["tee", "/etc/nixos-twin/firmware"], input="bios\n")
    machine.reboot(twin.name)
    assert twin.exec(["test", "-d", "/sys/firmware/efi"], check=False).returncode != 0
    out = twin.exec(["bootctl", "set-oneshot", "x.conf"], check=False)
    assert (out.returncode, out.stderr.strip()) == (1, "Not booted with UEFI.")
    reading = trial.read()
    assert reading.loader == "GRUB" and "not booted with UEFI" in reading.why, reading


def test_the_twins_bootctl_and_systemd_boot_are_as_unkind_as_upstream(make_twin, tmp_path):
    """What the stand-ins do where upstream is unkind: bootctl takes an id that names no
    entry, and systemd-boot passes over it at boot and still spends it; the one-shot is
    a case-folded glob; special ids and their failures in bootctl's words. remedy's arm
    refuses an entry that is not there before writing anything."""
    twin = make_twin()
    booted = realpath(twin, "/run/booted-system")
    first = realpath(twin, "/nix/var/nix/profiles/system-1-link")
    if first == booted:
        # the first slot serves on the base's port, so no generation of its own yet:
        # the owner makes one, and the twin boots it (loader.conf's default)
        booted = new_generation(twin, "REMEDY_TWIN_SECOND", "1")
        machine.reboot(twin.name)
        assert realpath(twin, "/run/booted-system") == booted
    assert first != booted  # the base's generation 1, then the twin's own

    # the same reading over a pyinfra connection, as remedy's commands hold one
    inventory = twin_inventory(tmp_path / "inv.py", twin)
    with session.connected(str(inventory), [twin.name]) as (_state, hosts, failed):
        assert not failed, failed
        over_pyinfra = of_pyinfra_host(hosts[0]).read()
    assert over_pyinfra == trial_boot(twin).read()
    assert over_pyinfra.booted_system == booted and over_pyinfra.trial == "none"

    def bootctl(*args: str):
        ran = twin.exec(["bootctl", *args], check=False)
        return ran.returncode, ran.stderr.strip()

    refused = trial_boot(twin).arm(trial="nixos-generation-9.conf")
    assert refused.refused and "is not in /boot/loader/entries" in refused.text, refused
    assert boot_state(twin)["oneshot"] is None and boot_state(twin)["default"] is None

    # an entry with a boot counter (nixpkgs' boot counting names it so): refused
    entries = "/boot/loader/entries"
    twin.exec(["cp", f"{entries}/nixos-generation-1.conf", f"{entries}/nixos-generation-7+3.conf"])
    counted = trial_boot(twin).arm(trial="nixos-generation-7+3.conf")
    assert counted.refused and "has a boot counter" in counted.text, counted
    twin.exec(["rm", f"{entries}/nixos-generation-7+3.conf"])
    assert boot_state(twin)["oneshot"] is None and boot_state(twin)["default"] is None

    assert bootctl("set-oneshot", "nixos-generation-9.conf") == (0, "")  # not checked
    assert bootctl("set-default", "@bogus") == (1, "Unsupported special entry identifier: @bogus")
    assert bootctl("set-default") == (1, "Too few arguments.")
    assert bootctl("set-oneshot", "@default") == (
        1,
        "Failed to get EFI variable 'LoaderEntryDefault': No such file or directory",
    )
    machine.reboot(twin.name)
    state = boot_state(twin)
    assert (state["booted"], state["oneshot"]) == (booted, None), state  # spent, passed over

    assert bootctl("set-oneshot", "NIXOS-GENERATION-1*") == (0, "")
    machine.reboot(twin.name, serving=False)  # generation 1 serves on the base's port
    state = boot_state(twin)
    assert (state["booted"], state["selected"]) == (first, "nixos-generation-1.conf"), state
    assert bootctl("set-default", "@current") == (0, "")
    assert boot_state(twin)["default"] == "nixos-generation-1.conf"
    assert bootctl("set-default", "") == (0, "") and bootctl("set-default", "") == (0, "")
    assert boot_state(twin)["default"] is None
    machine.reboot(twin.name)  # loader.conf's default again
    assert boot_state(twin)["booted"] == booted
