"""Issue 2 acceptance: the twin reproduces production, its reboot and its rebuilds.
Issue 8: and production's traps (owner of the checkout, flakes off in nix.conf, the
bootloader step of a switch, `script =` units, a realistic model, local compiles)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from remedy.core.readings import probe
from remedy.errors import TwinError
from remedy.twin import fixtures, machine
from tests.conftest import (
    as_owner,
    is_prose,
    nix_version,
    not_owned_by_owner,
    owner_bump,
    owner_git,
    probe_inside,
    probe_once,
    sudo_rebuild,
    wait_probe,
)

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
DROPIN_DIR = "/run/systemd/system/tenstorrent-serving.service.d"


FLAKE_FLAGS = ["--extra-experimental-features", "nix-command flakes"]
TOPLEVEL = f'{fixtures.NIXOS_DIR}#nixosConfigurations."cfx-llm2".config.system.build.toplevel'
FLAKE = f"{fixtures.NIXOS_DIR}#{fixtures.FLAKE_HOST}"


def write_emergency_dropin(twin):
    """The incident's hand-made override, written the way the on-call engineer did: the
    flags script the unit script execs, with qwen3_xml for hermes."""
    exec_start = twin.exec(["systemctl", "show", "-P", "ExecStart", UNIT]).stdout
    unit_script = exec_start.split("path=")[1].split(" ;")[0]
    flags_path = fixtures.exec_target(twin.exec(["cat", unit_script]).stdout)
    script = twin.exec(["cat", flags_path]).stdout.replace(
        "--tool-call-parser hermes", "--tool-call-parser qwen3_xml"
    )
    twin.exec(
        ["install", "-D", "-m", "0755", "/dev/stdin", "/run/tt-serving-override/start"],
        input=script,
    )
    twin.exec(
        ["install", "-D", "-m", "0644", "/dev/stdin", f"{DROPIN_DIR}/override.conf"],
        input="[Service]\nExecStart=\nExecStart=/run/tt-serving-override/start\n"
        "Environment=QWEN36_SDPA_STREAMING=1\n",
    )
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", UNIT])


def debug_config(twin):
    return json.loads(twin.exec(["curl", "-sS", twin.server_url + "/debug/config"]).stdout)


def test_fresh_twin_fails_silently(twin):
    result = probe_inside(twin)
    assert result.outcome == probe.UNPARSED, result
    assert result.status == 200
    assert "<function=get_weather>" in result.content
    health = twin.exec(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", twin.server_url + "/health"]
    ).stdout
    assert health == "200"
    assert twin.exec(["ls", "-A", "/run/systemd/system"], check=False).stdout.strip() == ""
    config = debug_config(twin)
    assert config["tool_call_parser"] == "hermes"
    assert config["env"]["QWEN36_SDPA_STREAMING"] is None


def test_emergency_dropin_works_until_reboot(twin):
    write_emergency_dropin(twin)
    assert wait_probe(twin).outcome == probe.PARSED
    assert debug_config(twin)["env"]["QWEN36_SDPA_STREAMING"] == "1"
    machine.reboot(twin.name, progress=lambda _m: None)
    assert twin.exec(["test", "-e", DROPIN_DIR], check=False).returncode == 1
    assert twin.exec(["test", "-e", "/run/tt-serving-override"], check=False).returncode == 1
    assert probe_inside(twin).outcome == probe.UNPARSED


def test_with_emergency_override_starts_in_the_seed_state(make_twin):
    twin = make_twin(with_emergency_override=True)
    assert probe_inside(twin).outcome == probe.PARSED
    assert twin.exec(["test", "-f", f"{DROPIN_DIR}/override.conf"], check=False).returncode == 0


@pytest.mark.nix_cli
def test_hand_bump_and_rebuild_survive_reboot_and_roll_back(twin):
    owner_bump(twin)
    sudo_rebuild(twin, "switch", "--flake", FLAKE)
    assert wait_probe(twin).outcome == probe.PARSED
    assert debug_config(twin)["env"]["QWEN36_MERGE_BATCH_GUARD"] == "1"
    machine.reboot(twin.name, progress=lambda _m: None)
    assert probe_inside(twin).outcome == probe.PARSED
    gens = json.loads(twin.exec(["nixos-rebuild", "list-generations", "--json"]).stdout)
    assert len(gens) >= 2 and gens[-1]["current"]
    twin.exec(["nixos-rebuild", "switch", "--rollback"])
    assert wait_probe(twin).outcome == probe.UNPARSED
    assert debug_config(twin)["tool_call_parser"] == "hermes"


def test_nixos_rebuild_test_is_undone_and_boot_waits_for_reboot(twin):
    owner_bump(twin)
    sudo_rebuild(twin, "test", "--flake", FLAKE)
    assert wait_probe(twin).outcome == probe.PARSED
    current = twin.exec(["readlink", "/run/current-system"]).stdout
    booted = twin.exec(["readlink", "/run/booted-system"]).stdout
    assert current != booted
    machine.reboot(twin.name, progress=lambda _m: None)
    assert probe_inside(twin).outcome == probe.UNPARSED  # test is undone by a reboot
    sudo_rebuild(twin, "boot", "--flake", FLAKE)
    assert probe_inside(twin).outcome == probe.UNPARSED  # boot waits for the reboot
    machine.reboot(twin.name, progress=lambda _m: None)
    assert probe_inside(twin).outcome == probe.PARSED
    assert (
        twin.exec(["readlink", "/run/current-system"]).stdout
        == twin.exec(["readlink", "/run/booted-system"]).stdout
    )
    kernel_params = twin.exec(["cat", "/run/booted-system/kernel-params"]).stdout
    assert "hugepages=4" in kernel_params  # nixos-llm pins hugepagesPerCard = 2


# -- issue 8: production's traps ---------------------------------------------------


@pytest.mark.nix_cli
def test_checkout_belongs_to_ops_and_roots_git_refuses_it(twin):
    assert twin.suite == os.environ.get("REMEDY_TWIN_SUITE", "trixie")
    ident = twin.exec(["id", fixtures.OWNER]).stdout
    assert ident.startswith("uid=1000(ops) gid=1000(ops)") and "nix-users" in ident
    assert twin.exec(["stat", "-c", "%U:%G", "/etc/nixos", "/srv/git/tt-stack"]).stdout.split() == [
        "ops:ops",
        "ops:ops",
    ]
    assert not_owned_by_owner(twin) == []
    # Root has no git identity and marks nothing safe: git refuses the checkout.
    assert twin.exec(["test", "-e", "/root/.gitconfig"], check=False).returncode == 1
    refused = twin.exec(["git", "-C", "/etc/nixos", "status"], check=False)
    assert refused.returncode == 128 and "dubious ownership" in refused.stderr
    assert owner_git(twin, "status", "--porcelain").stdout == ""
    lock = json.loads(twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout)
    assert lock["nodes"]["tt-stack"]["original"]["url"] == "file:///srv/git/tt-stack"
    assert lock["nodes"]["tt-stack"]["original"]["type"] == "git"


@pytest.mark.nix_cli
def test_flakes_are_off_in_nix_conf_and_nix_runs_as_ops_through_the_daemon(twin):
    conf = twin.exec(["cat", "/etc/nix/nix.conf"]).stdout
    assert "experimental-features" not in conf and "sandbox = false" in conf
    assert twin.exec(["systemctl", "is-active", "nix-daemon.socket"]).stdout.strip() == "active"
    bare = as_owner(twin, "nix", "flake", "metadata", "/etc/nixos", check=False)
    assert bare.returncode != 0
    assert "experimental Nix feature 'nix-command' is disabled" in bare.stderr
    meta = as_owner(twin, "nix", *FLAKE_FLAGS, "flake", "metadata", "--json", "/etc/nixos")
    assert json.loads(meta.stdout)["locks"]["nodes"]["tt-stack"]["locked"]["rev"]
    as_root = twin.exec(["nix", *FLAKE_FLAGS, "flake", "metadata", "/etc/nixos"], check=False)
    assert as_root.returncode != 0  # root may not open ops's checkout
    if nix_version(twin) >= (2, 20):  # libgit2
        assert "is not owned by current user" in as_root.stderr
    assert not_owned_by_owner(twin) == []


def test_unit_is_a_script_unit_whose_script_execs_the_flags_script(twin):
    unit = twin.exec(["cat", f"/run/current-system/etc/systemd/system/{UNIT}"]).stdout
    [line] = [x for x in unit.splitlines() if x.startswith("ExecStart=")]
    m = re.fullmatch(
        r"ExecStart=(/nix/store/[a-z0-9]{32}-unit-script-tenstorrent-serving-start"
        r"/bin/tenstorrent-serving-start) ",  # NixOS's trailing space
        line,
    )
    assert m, repr(line)
    unit_script = twin.exec(["cat", m.group(1)]).stdout
    flags_path = fixtures.exec_target(unit_script)
    assert re.fullmatch(r"/nix/store/[a-z0-9]{32}-start-tenstorrent-serving", flags_path)
    assert unit_script == f"#!/bin/sh\nset -e\nexec {flags_path}\n"
    assert "--tool-call-parser" not in unit_script
    flags = twin.exec(["cat", flags_path]).stdout
    assert "--tool-call-parser hermes" in flags
    assert f"--served-model-name {fixtures.SERVED_MODEL}" in flags
    assert re.search(r"^export VLLM_TT_PACKAGE=/nix/store/\S+-vllm-tt-", flags, re.MULTILINE)
    shown = twin.exec(["systemctl", "show", "-P", "ExecStart", UNIT]).stdout
    assert f"path={m.group(1)} ;" in shown
    assert machine.flags_script(twin) == flags


def test_model_is_served_under_its_served_name_and_sometimes_answers_in_prose(twin):
    models = json.loads(twin.exec(["curl", "-sS", twin.server_url + "/v1/models"]).stdout)
    assert [m["id"] for m in models["data"]] == [fixtures.SERVED_MODEL]
    assert models["data"][0]["root"] == fixtures.MODEL
    wrong = probe_once(twin, model=fixtures.MODEL)
    assert wrong.status == 404 and f"The model `{fixtures.MODEL}` does not exist." in wrong.reason
    twin.exec(["install", "-D", "/dev/stdin", "/var/lib/vllm-double/mode"], input="prose\n")
    prose = [probe_once(twin) for _ in range(2)]
    assert all(is_prose(r) for r in prose), prose
    assert "I can't check live weather" in prose[0].content
    twin.exec(["rm", "/var/lib/vllm-double/mode"])
    # Default rotation: never two prose answers in a row, so three tries always settle.
    outcomes = [probe_inside(twin).outcome for _ in range(6)]
    assert outcomes == [probe.UNPARSED] * 6  # hermes: raw <tool_call> text, HTTP 200


def profile_generation(twin) -> int:
    """N of the system-N-link the profile points at (a twin on a slot > 0 has two)."""
    link = twin.exec(["readlink", "/nix/var/nix/profiles/system"]).stdout.strip()
    return int(link.split("-")[1])


def test_failed_bootloader_install_stops_the_switch_before_activation(twin):
    n = profile_generation(twin)
    entries = twin.exec(["ls", "/boot/loader/entries"]).stdout.split()
    assert f"nixos-generation-{n}.conf" in entries
    assert (
        f"default nixos-generation-{n}.conf"
        in twin.exec(["cat", "/boot/loader/loader.conf"]).stdout
    )
    before = twin.exec(["readlink", "/run/current-system"]).stdout.strip()
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    owner_bump(twin)
    twin.exec(["mount", "-t", "tmpfs", "-o", "ro,size=1M", "tmpfs", "/boot"])
    failed = sudo_rebuild(twin, "switch", "--flake", FLAKE, check=False)
    assert failed.returncode != 0
    assert "Failed to install bootloader" in failed.stderr
    assert twin.exec(["readlink", "/run/current-system"]).stdout.strip() == before
    assert twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip() == pid
    assert profile_generation(twin) == n + 1  # the profile moved before the bootloader step
    # A rollback re-runs the bootloader step and fails the same way.
    rolled = twin.exec(["nixos-rebuild", "switch", "--rollback"], check=False)
    assert rolled.returncode != 0 and "Failed to install bootloader" in rolled.stderr
    assert profile_generation(twin) == n
    assert twin.exec(["readlink", "/run/current-system"]).stdout.strip() == before
    assert not_owned_by_owner(twin) == []
    # Pre-switch checks run first and stop everything too.
    twin.exec(["umount", "/boot"])
    fake = "/tmp/failing-toplevel"
    twin.exec(["cp", "-a", before, fake])
    twin.exec(["chmod", "-R", "u+w", fake])
    twin.exec(
        ["install", "-m", "0755", "/dev/stdin", f"{fake}/bin/pre-switch-check"],
        input="#!/bin/sh\nexit 1\n",
    )
    checked = twin.exec(
        ["/usr/local/lib/nixos-twin/switch-to-configuration", fake, "switch"], check=False
    )
    # upstream's words (switchable-system.nix: each check says itself, then the verdict)
    said = checked.stderr.strip().splitlines()
    assert (checked.returncode, said[-1]) == (1, "Pre-switch checks failed"), said
    assert twin.exec(["ls", "/boot/loader/entries"]).stdout.split() == entries
    assert twin.exec(["readlink", "/run/current-system"]).stdout.strip() == before


def test_reboot_starts_the_boot_loaders_default_not_the_profile(twin):
    n = profile_generation(twin)
    before = twin.exec(["readlink", "/run/current-system"]).stdout.strip()
    owner_bump(twin)
    twin.exec(["mount", "-t", "tmpfs", "-o", "ro,size=1M", "tmpfs", "/boot"])
    assert sudo_rebuild(twin, "boot", "--flake", FLAKE, check=False).returncode != 0
    machine.reboot(twin.name, progress=lambda _m: None)  # the tmpfs is gone after a reboot
    assert profile_generation(twin) == n + 1
    assert twin.exec(["readlink", "/run/current-system"]).stdout.strip() == before
    assert probe_inside(twin).outcome == probe.UNPARSED


def dry_run_builds(twin) -> list[str]:
    """The .drv paths `nix build --dry-run` of the toplevel says "will be built"."""
    out = as_owner(twin, "nix", *FLAKE_FLAGS, "build", "--dry-run", "--no-link", TOPLEVEL)
    text = out.stdout + out.stderr
    assert "will be fetched" not in text  # offline: nothing to substitute
    return re.findall(r"^\s+(/nix/store/\S+\.drv)$", text.split("will be built:")[-1], re.M)


def prefers_local_build(twin, drvs: list[str]) -> dict[str, bool]:
    show = ["derivation", "show"] if nix_version(twin) >= (2, 15) else ["show-derivation"]
    doc = json.loads(as_owner(twin, "nix", *FLAKE_FLAGS, *show, *drvs).stdout)
    return {
        re.sub(r"^/nix/store/[a-z0-9]{32}-|\.drv$", "", path): d["env"].get("preferLocalBuild")
        == "1"
        for path, d in doc.items()
    }


@pytest.mark.nix_cli
def test_a_bump_of_the_heavy_package_would_compile_on_the_host(twin):
    owner_bump(twin)  # pre-fix -> #44: only config derivations to build
    assert prefers_local_build(twin, dry_run_builds(twin)) == {
        "start-tenstorrent-serving": True,
        "unit-script-tenstorrent-serving-start": True,
        "nixos-system-cfx-llm2": True,
    }
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
    owner_bump(twin)
    built = prefers_local_build(twin, dry_run_builds(twin))
    assert built.pop(f"vllm-tt-{fixtures.HEAVY_VLLM_VERSION}") is False  # a compile on the host
    assert set(built.values()) == {True}
    assert not_owned_by_owner(twin) == []


def test_two_twins_at_once_do_not_clash(make_twin):
    a, b = make_twin(), make_twin()
    assert {a.ssh_port, a.server_port}.isdisjoint({b.ssh_port, b.server_port})
    write_emergency_dropin(a)
    assert wait_probe(a).outcome == probe.PARSED
    assert probe_inside(b).outcome == probe.UNPARSED
    argv = debug_config(b)["argv"]
    assert argv[argv.index("--port") + 1] == str(b.server_port)
    hosts = dict(machine.inventory_hosts())
    assert hosts[a.name]["ssh_port"] != hosts[b.name]["ssh_port"]


def test_a_twins_cgroup_tree_holds_its_own_units_only(make_twin):
    """One systemd per kernel on production: a twin's systemd must not see (nor remove) a
    cgroup of another twin's unit. They shared one tree once, and a scope named alike in
    two twins was one cgroup: one twin's systemd removed it as the other's started."""
    a, b = make_twin(), make_twin()
    listed = "sleep 1; ls /sys/fs/cgroup/systemd/system.slice /sys/fs/cgroup/unified/system.slice"
    scope = "systemd-run --scope --unit=remedy-probe-b sleep 60 >/dev/null 2>&1 </dev/null &"
    started = b.exec(["sh", "-c", f"{scope} {listed}"], check=False)
    try:
        assert "remedy-probe-b.scope" in started.stdout, started  # b's systemd sees its own
        seen = a.exec(["sh", "-c", listed], check=False).stdout
        assert "remedy-probe-b.scope" not in seen, seen
        assert "ssh.service" in seen  # and a's tree holds a's units
    finally:
        b.exec(["systemctl", "stop", "remedy-probe-b.scope"], check=False)


def test_plain_openssh_client_and_pyinfra_reach_the_twin(twin):
    out = subprocess.run(
        [*twin.ssh_argv(), "hostname"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert out.strip() == "cfx-llm2"
    env = dict(os.environ)
    proc = subprocess.run(
        ["pyinfra", "-y", "--limit", twin.name, "inventory/twin.py", "exec", "--", "uname", "-n"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "cfx-llm2" in proc.stdout + proc.stderr


def test_strict_host_key_checking_rejects_a_wrong_key(twin, tmp_path):
    """The same ssh that connects with the twin's key is refused for its host key once
    known_hosts holds another valid key for it (not for any other reason: a refused
    connection, a bad user key, a known_hosts line ssh cannot read)."""
    argv = [*twin.ssh_argv(), "true"]
    good = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stderr
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, key = other.with_suffix(".pub").read_text().split()[:2]
    lines = [ln.split() for ln in twin.known_hosts.read_text().splitlines() if ln.strip()]
    assert lines and all(ln[1] == kind for ln in lines), lines  # one key, the same type
    twin.known_hosts.write_text("".join(f"{ln[0]} {kind} {key}\n" for ln in lines))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 255, proc.stderr  # ssh's own failure, not the command's
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in proc.stderr, proc.stderr
    assert "Host key verification failed." in proc.stderr, proc.stderr


def test_down_leaves_nothing_running(make_twin):
    twin = make_twin()
    sup = twin.supervisor_pid
    machine.down(twin.name, progress=lambda _m: None)
    assert not os.path.exists(f"/proc/{sup}")
    assert not twin.dir.exists()
    assert twin.name not in dict(machine.inventory_hosts())
    assert [d for d in machine._cgroup_dirs(twin.name) if d.exists()] == []


def test_unknown_twin_name_is_a_clear_error():
    with pytest.raises(TwinError, match="no twin named 'no-such-twin'"):
        machine.reboot("no-such-twin")
    with pytest.raises(TwinError, match="invalid twin name"):
        machine.load("Bad Name")
