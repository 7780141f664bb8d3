"""Issue 9 acceptance on twins: deploys/converge.py brings every managed setting back."""

from __future__ import annotations

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import (
    hugepages_1g,
    not_owned_by_owner,
    out_of_sync,
    owner_git,
    probe_inside,
    remedy_json,
    run_deploy,
    server_starts,
    status_settings,
    unit_props,
)

pytestmark = pytest.mark.twin

PHASE2A = ("--enable-prefix-caching", "--device-resident-decode")
NEXT_BOOT = "/nix/var/nix/profiles/system"
OVERRIDE = "/run/systemd/system/tenstorrent-serving.service.d/override.conf"


def out_of(proc) -> str:
    return proc.stdout + proc.stderr


def assert_serving_config(twin, system: str) -> None:
    script = machine.flags_script(twin, system)
    assert "--tool-call-parser qwen3_xml" in script, script
    assert "QWEN36_SDPA_STREAMING=1" in script and "QWEN36_MERGE_BATCH_GUARD=1" in script
    assert not [flag for flag in PHASE2A if flag in script]


@pytest.mark.nix_cli
def test_converge_from_the_emergency_override_is_durable_at_next_boot_with_no_restart(make_twin):
    """Production's seed state under the default policy (restart_window never): the next
    boot is wrong but nothing live needs a restart now. Every setting is made durable at
    next boot with zero restarts; a reboot, with no run, activates it."""
    twin = make_twin(with_emergency_override=True)
    code, before = status_settings(twin)
    assert code == 3
    assert {"tool_call_parser", "QWEN36_SDPA_STREAMING", "hugepages"} <= out_of_sync(before)
    assert before["tool_call_parser"]["state"] == "volatile"
    pid, starts = unit_props(twin)["MainPID"], server_starts(twin)

    config = owner_git(twin, "show", "HEAD:hosts/cfx-llm2/configuration.nix").stdout
    assert "hardware.tenstorrent.hugepagesPerCard = 2;" in config  # the host's own value
    proc = run_deploy(twin, "converge", restart=None)
    assert proc.returncode == 0, out_of(proc)[-4000:]
    said = " ".join(out_of(proc).split())
    # the plan names what remedy's forced value wins over, from the evaluation
    assert (
        "overrides: configuration.nix sets hugepagesPerCard = 2; remedy.nix forces 1 (tt-stack#49)"
    ) in said, out_of(proc)[-4000:]
    # what the switch changes beyond the settings: the kernel command line, after a reboot
    assert "the new generation needs a reboot to take full effect: the kernel parameters" in said
    assert "kernel parameters: -hugepages=4 +hugepages=2" in said
    assert "durable at next boot; running the old generation until a reboot" in said
    # zero restarts: the same process, never started again this boot, the override kept
    assert unit_props(twin)["MainPID"] == pid and server_starts(twin) == starts
    assert twin.exec(["test", "-e", OVERRIDE], check=False).returncode == 0
    assert probe_inside(twin).outcome == "parsed"
    assert hugepages_1g(twin) == 2  # the free pages released
    # the boot default holds every setting; /run/current-system is the old generation
    assert_serving_config(twin, NEXT_BOOT)
    params = twin.exec(["cat", f"{NEXT_BOOT}/kernel-params"]).stdout
    assert "hugepagesz=1G hugepages=2" in params
    code, host = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    (host,) = host["hosts"]
    # boot pending is not volatile: a monitor tells them apart (issue 33 item 3)
    assert code == 6 and host["verdict"].startswith("boot pending"), host["verdict"]
    # what the reboot brings is wanted: no problem, and no window that is never promised
    assert host["problems"] == [], host["problems"]
    assert "until a reboot (restart_window is never" in host["verdict"], host["verdict"]
    assert any(n.startswith("at the next boot: /run/tt-serving-override/start") for n in
               host["notes"]), host["notes"]  # fmt: skip
    assert host["boot_pending"] == twin.exec(["readlink", "-f", NEXT_BOOT]).stdout.strip()
    assert "QWEN36_MERGE_BATCH_GUARD" in host["pending"]  # a window setting
    # what the pending generation brings is boot pending, not unmanaged volatile state
    assert host["unmanaged_volatile"] == [], host["unmanaged_volatile"]
    # the person's configuration.nix is unchanged: remedy.nix is a module that forces 1
    assert owner_git(twin, "show", "HEAD:hosts/cfx-llm2/configuration.nix").stdout == config
    managed = owner_git(twin, "show", "HEAD:hosts/cfx-llm2/remedy.nix").stdout
    assert "hardware.tenstorrent.hugepagesPerCard = lib.mkForce 1;" in managed
    assert "services.tenstorrent-serving.enablePrefixCaching = lib.mkForce false;" in managed
    assert owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert not_owned_by_owner(twin) == []

    again = run_deploy(twin, "converge", restart=None)  # remedy's own pending generation
    assert again.returncode == 0, out_of(again)[-3000:]
    assert "path noop" in out_of(again) and "boot pending" in out_of(again)
    assert unit_props(twin)["MainPID"] == pid  # no restart
    # a run with --restart now (or in a window) would activate it: one restart, no build
    dry = run_deploy(twin, "converge", "--dry", restart="now")
    said = " ".join(out_of(dry).split())
    assert "holds every setting in scope but is not running: activate it" in said, said[-3000:]
    assert "the server WILL restart (memory-gated, after waiting for an idle server)" in said
    assert unit_props(twin)["MainPID"] == pid

    machine.reboot(twin.name, progress=lambda _m: None)
    assert probe_inside(twin).outcome == "parsed"  # with zero runs
    code, rebooted = status_settings(twin)
    assert code == 0 and out_of_sync(rebooted) == set(), rebooted
    assert twin.exec(["test", "-e", OVERRIDE], check=False).returncode != 0
    assert hugepages_1g(twin) == 2
    assert_serving_config(twin, "/run/current-system")


def test_fallback_covers_the_parser_the_environment_and_live_hugepages(twin):
    proc = run_deploy(twin, "converge", "--data", "durable=false")
    assert proc.returncode == 0, out_of(proc)[-4000:]
    assert probe_inside(twin).outcome == "parsed"
    assert hugepages_1g(twin) == 2
    code, settings = status_settings(twin)
    assert code == 3
    for key in (
        "tool_call_parser",
        "QWEN36_SDPA_STREAMING",
        "QWEN36_MERGE_BATCH_GUARD",
        "hugepages",
    ):
        assert settings[key]["state"] == "volatile", settings[key]
    assert settings["tool_call_parser"]["next_boot"] == "hermes"
    assert settings["hugepages"]["next_boot"] == "1G×4"


def test_a_host_configuration_without_the_import_is_told_the_line_to_add(twin):
    config = "hosts/cfx-llm2/configuration.nix"
    text = twin.exec(["cat", f"{fixtures.NIXOS_DIR}/{config}"]).stdout
    assert fixtures.MANAGED_IMPORT_LINE in text
    machine.commit_as_owner(
        twin,
        fixtures.NIXOS_DIR,
        fixtures.Commit(
            "hosts: no remedy import",
            {config: text.replace(fixtures.MANAGED_IMPORT_LINE, fixtures.NO_MANAGED_IMPORT)},
            "2026-10-01T10:00:00+02:00",
        ),
    )
    proc = run_deploy(twin, "converge", "--dry")
    out = out_of(proc)
    assert proc.returncode == 0, out[-3000:]
    assert "imports = [ ./remedy.nix ];" in out and config in out


def test_an_uncommitted_managed_file_is_named_before_any_work(twin):
    from tests.conftest import as_owner

    as_owner(twin, "sh", "-c", "printf '{ }\\n' > /etc/nixos/hosts/cfx-llm2/remedy.nix")
    proc = run_deploy(twin, "converge", "--dry")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0, out[-3000:]
    assert (
        "durable path not possible: /etc/nixos/hosts/cfx-llm2/remedy.nix exists but "
        "is not committed" in out
    )
