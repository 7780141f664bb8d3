"""Issue 2 acceptance: the twin reproduces production, its reboot and its rebuilds."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from remedy.core import probe
from remedy.errors import TwinError
from remedy.twin import machine
from tests.conftest import probe_inside, wait_probe

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
DROPIN_DIR = "/run/systemd/system/tenstorrent-serving.service.d"


def write_emergency_dropin(twin):
    """The incident's hand-made override, written the way the on-call engineer did."""
    store_script = twin.exec(["systemctl", "show", "-P", "ExecStart", UNIT]).stdout
    path = store_script.split("path=")[1].split(" ;")[0]
    script = twin.exec(["cat", path]).stdout.replace(
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


def test_hand_bump_and_rebuild_survive_reboot_and_roll_back(twin):
    version = twin.exec(["nix", "--version"]).stdout.split()[-1]
    major, minor = (int(x) for x in version.split(".")[:2])
    bump = (
        ["nix", "flake", "update", "tt-stack"]
        if (major, minor) >= (2, 19)
        else ["nix", "flake", "lock", "--update-input", "tt-stack"]
    )
    twin.exec(["sh", "-c", 'cd /etc/nixos && exec "$@"', "sh", *bump])
    twin.exec(["nixos-rebuild", "switch", "--flake", "/etc/nixos#cfx-llm2"])
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
    twin.exec(["sh", "-c", "cd /etc/nixos && nix flake lock --update-input tt-stack"])
    twin.exec(["nixos-rebuild", "test", "--flake", "/etc/nixos#cfx-llm2"])
    assert wait_probe(twin).outcome == probe.PARSED
    current = twin.exec(["readlink", "/run/current-system"]).stdout
    booted = twin.exec(["readlink", "/run/booted-system"]).stdout
    assert current != booted
    machine.reboot(twin.name, progress=lambda _m: None)
    assert probe_inside(twin).outcome == probe.UNPARSED  # test is undone by a reboot
    twin.exec(["nixos-rebuild", "boot", "--flake", "/etc/nixos#cfx-llm2"])
    assert probe_inside(twin).outcome == probe.UNPARSED  # boot waits for the reboot
    machine.reboot(twin.name, progress=lambda _m: None)
    assert probe_inside(twin).outcome == probe.PARSED
    assert (
        twin.exec(["readlink", "/run/current-system"]).stdout
        == twin.exec(["readlink", "/run/booted-system"]).stdout
    )
    kernel_params = twin.exec(["cat", "/run/booted-system/kernel-params"]).stdout
    assert "hugepages=4" in kernel_params  # nixos-llm pins hugepagesPerCard = 2


def test_two_twins_at_once_do_not_clash(make_twin):
    a, b = make_twin(), make_twin()
    assert {a.ssh_port, a.server_port}.isdisjoint({b.ssh_port, b.server_port})
    write_emergency_dropin(a)
    assert wait_probe(a).outcome == probe.PARSED
    assert probe_inside(b).outcome == probe.UNPARSED
    assert debug_config(b)["argv"][5] == str(b.server_port)
    hosts = dict(machine.inventory_hosts())
    assert hosts[a.name]["ssh_port"] != hosts[b.name]["ssh_port"]


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


def test_strict_host_key_checking_rejects_a_wrong_key(twin):
    twin.known_hosts.write_text(twin.known_hosts.read_text().replace("AAAA", "AAAB", 1))
    proc = subprocess.run([*twin.ssh_argv(), "true"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0


def test_down_leaves_nothing_running(make_twin):
    twin = make_twin()
    sup = twin.supervisor_pid
    machine.down(twin.name, progress=lambda _m: None)
    assert not os.path.exists(f"/proc/{sup}")
    assert not twin.dir.exists()
    assert twin.name not in dict(machine.inventory_hosts())


def test_unknown_twin_name_is_a_clear_error():
    with pytest.raises(TwinError, match="no twin named 'no-such-twin'"):
        machine.reboot("no-such-twin")
    with pytest.raises(TwinError, match="invalid twin name"):
        machine.load("Bad Name")
