"""Issue 46 item 2 on a twin: status, --json and the metrics say when a reboot is
needed, and why. A converge under the default policy leaves the host boot pending (with
its age, read on the host's own clock and links); a restart now activates the pending
generation, whose kernel parameters the booted kernel does not have (the twin's
kernel-params come from the generation: remedy/twin/files/twin-kernel); a reboot leaves
nothing needed."""

from __future__ import annotations

import subprocess
from datetime import datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, owner_git, remedy_json, run_deploy, sudo_rebuild

pytestmark = pytest.mark.twin

PROFILE = "/nix/var/nix/profiles/system"
SYSTEM_LIB = f"{fixtures.NIXOS_DIR}/lib/system.nix"  # the twin's toplevel, in its checkout
FLAKE = f"{fixtures.NIXOS_DIR}#{fixtures.FLAKE_HOST}"
PARAMS_LINE = """printf '%s' "$kernelParams" > $out/kernel-params\n"""


def out_of(proc) -> str:
    return proc.stdout + proc.stderr


def reboot_needed(twin) -> tuple[int, dict]:
    code, doc = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    (host,) = doc["hosts"]
    return code, host["reboot_needed"]


def status_text(twin) -> str:
    proc = subprocess.run(
        ["remedy", "status", "inventory/twin.py", "--limit", twin.name],
        capture_output=True, text=True, cwd=PROJECT, timeout=300,
    )  # fmt: skip
    return proc.stdout


def host_seconds(twin) -> int:
    return int(twin.exec(["date", "+%s"]).stdout)


def link_mtime(twin, path: str) -> int:
    return int(twin.exec(["stat", "-c", "%Y", path]).stdout)


def reboot_metrics(twin, tmp_path) -> dict:
    prom = tmp_path / "remedy.prom"
    proc = subprocess.run(
        ["remedy", "converge", "inventory/twin.py", "--limit", twin.name, "--check",
         "--textfile", str(prom)],
        capture_output=True, text=True, cwd=PROJECT, timeout=600,
    )  # fmt: skip
    assert prom.exists(), out_of(proc)[-3000:]
    return {
        (s.name, s.labels.get("reason")): s.value
        for family in text_string_to_metric_families(prom.read_text())
        for s in family.samples
        if s.labels.get("host") == twin.name
    }


def with_kernel(twin, version: str) -> None:
    """The owner's configuration gives its system kernel and initrd links (store files
    that say VERSION; the twin's base systems have none), committed."""
    text = twin.exec(["cat", SYSTEM_LIB]).stdout
    text = "".join(x for x in text.splitlines(keepends=True) if "twin-kernel-link" not in x)
    assert PARAMS_LINE in text, text
    links = (
        f'      ln -s ${{builtins.toFile "bzImage" "twin kernel {version}"}} $out/kernel'
        "  # twin-kernel-link\n"
        f'      ln -s ${{builtins.toFile "initrd" "twin initrd {version}"}} $out/initrd'
        "  # twin-kernel-link\n"
    )
    twin.exec(["tee", SYSTEM_LIB], input=text.replace(PARAMS_LINE, PARAMS_LINE + links, 1))
    owner_git(twin, "commit", "-q", "-am", f"kernel and initrd {version}")


def test_boot_pending_and_its_age_then_kernel_params_then_nothing_after_a_reboot(
    make_twin, tmp_path
):
    """Then (issue 46 item 4 of the helper's brief) the kernel and initrd reasons on the
    same twin: the owner's configuration gives the system kernel and initrd links, the
    host boots it, a switch to other ones needs a reboot for both, the reboot clears
    them."""
    twin = make_twin(with_emergency_override=True)
    _code, before = reboot_needed(twin)
    assert before["needed"] == [], before
    assert before["memory_headroom"]["unknown"].startswith("no memory guard line")

    # the default policy: durable at next boot, no restart
    proc = run_deploy(twin, "converge", restart=None)
    assert proc.returncode == 0, out_of(proc)[-4000:]
    asked = host_seconds(twin)
    code, need = reboot_needed(twin)
    answered = host_seconds(twin)
    assert code == 6 and need["needed"] == ["boot_pending"], need
    # the clock: the later change of the profile link and /run/current-system; the
    # converge set the profile after the boot
    profile, current = link_mtime(twin, PROFILE), link_mtime(twin, "/run/current-system")
    assert profile > current
    since = datetime.fromisoformat(need["boot_pending_since"]).timestamp()
    assert since == profile
    assert asked - profile <= need["boot_pending_age_s"] <= answered - profile
    said = " ".join(status_text(twin).split())
    assert "reboot needed: yes (boot pending)" in said, said
    assert "boot pending: for at least " in said and "the next boot runs /nix/store/" in said
    values = reboot_metrics(twin, tmp_path)
    assert values[("remedy_reboot_needed", "boot_pending")] == 1
    assert values[("remedy_reboot_needed", "kernel_params")] == 0
    assert values[("remedy_boot_pending_age_seconds", None)] >= need["boot_pending_age_s"]

    # a restart now activates the pending generation: the booted kernel's parameters
    # (hugepages=4) are not the current system's (hugepages=2)
    proc = run_deploy(twin, "converge", restart="now")
    assert proc.returncode == 0, out_of(proc)[-4000:]
    code, need = reboot_needed(twin)
    assert need["needed"] == ["kernel_params"], need
    assert "hugepages=4" in need["why"]["kernel_params"].split("; current:")[0]
    assert "hugepages=2" in need["why"]["kernel_params"].split("; current:")[1]
    assert need["boot_pending_age_s"] is None
    values = reboot_metrics(twin, tmp_path)
    assert values[("remedy_reboot_needed", "kernel_params")] == 1
    assert values[("remedy_reboot_needed", "boot_pending")] == 0
    assert ("remedy_boot_pending_age_seconds", None) not in values

    machine.reboot(twin.name, progress=lambda _m: None)
    code, need = reboot_needed(twin)
    assert code == 0 and need["needed"] == [], need
    assert "reboot needed: no" in status_text(twin)
    values = reboot_metrics(twin, tmp_path)
    assert {r: v for (n, r), v in values.items() if n == "remedy_reboot_needed"} == {
        "boot_pending": 0, "kernel": 0, "initrd": 0, "kernel_params": 0, "memory_headroom": 0,
    }  # fmt: skip

    # booted into a system with kernel and initrd links: the same links, nothing needed
    with_kernel(twin, "1")
    sudo_rebuild(twin, "boot", "--flake", FLAKE)
    machine.reboot(twin.name, progress=lambda _m: None)
    for name, said in zip(("kernel", "initrd"), ("twin kernel 1", "twin initrd 1"), strict=True):
        assert twin.exec(["cat", f"/run/booted-system/{name}"]).stdout == said
    code, need = reboot_needed(twin)
    assert need["needed"] == [], need
    # a switch to another kernel and initrd: the booted ones are not the current system's
    with_kernel(twin, "2")
    sudo_rebuild(twin, "switch", "--flake", FLAKE)
    code, need = reboot_needed(twin)
    assert need["needed"] == ["kernel", "initrd"], need
    for name in ("kernel", "initrd"):
        booted, current = (
            twin.exec(["readlink", f"/run/{side}-system/{name}"]).stdout.strip()
            for side in ("booted", "current")
        )
        assert booted != current, (name, booted)
        assert need["why"][name] == f"{name}: booted {booted}, current {current}", need["why"]
    said = " ".join(status_text(twin).split())
    assert "reboot needed: yes (kernel, initrd)" in said, said
    values = reboot_metrics(twin, tmp_path)
    assert {r: v for (n, r), v in values.items() if n == "remedy_reboot_needed"} == {
        "boot_pending": 0, "kernel": 1, "initrd": 1, "kernel_params": 0, "memory_headroom": 0,
    }  # fmt: skip
    machine.reboot(twin.name, progress=lambda _m: None)
    assert twin.exec(["cat", "/run/booted-system/kernel"]).stdout == "twin kernel 2"
    code, need = reboot_needed(twin)
    assert need["needed"] == [], need


def test_the_memory_headroom_is_this_boots_guard_lines_and_unknown_after_a_reboot(
    make_twin, tmp_path
):
    """The guard's lines stand in for remedy's memory guard (issue 46 item 1) until it
    lands: tests/facts/record.py's ExecStartPre writes one a start in its contract."""
    from tests.facts.record import GUARD_DROPIN, GUARD_STANDIN

    twin = make_twin()
    twin.exec(["install", "-D", "-m", "0755", "/dev/stdin", "/run/guard-standin.sh"],
              input=GUARD_STANDIN)  # fmt: skip
    twin.exec(["install", "-D", "-m", "0644", "/dev/stdin", GUARD_DROPIN],
              input="[Service]\nExecStartPre=/bin/sh /run/guard-standin.sh\n")  # fmt: skip
    twin.exec(["systemctl", "daemon-reload"])
    for n in range(1, 4):
        twin.exec(["systemctl", "restart", "tenstorrent-serving.service"])
        machine.wait_serving(twin)
        _code, need = reboot_needed(twin)
        h = need["memory_headroom"]
        assert len(h["starts"]) == n, h  # one line a start, each read
    # three starts: 9, 7.5, 6 GiB; at 1.5 GiB a start, 4.5 stays above 4 GB, 3 does not
    assert [s["mem_available_kb"] for s in h["starts"]] == [9437184, 7864320, 6291456]
    assert h["leak_since_boot_kb"] == 9437184 - 6291456 and h["starts_left"] == 1
    assert need["needed"] == [], need
    assert "start 2 from now falls below the threshold" in " ".join(status_text(twin).split())
    twin.exec(["systemctl", "restart", "tenstorrent-serving.service"])
    machine.wait_serving(twin)
    _code, need = reboot_needed(twin)
    assert need["needed"] == ["memory_headroom"], need
    values = reboot_metrics(twin, tmp_path)
    assert values[("remedy_reboot_needed", "memory_headroom")] == 1
    assert values[("remedy_mem_starts_left", None)] == 0
    assert values[("remedy_mem_guard_starts", None)] == 4

    machine.reboot(twin.name, progress=lambda _m: None)  # the /run stand-in is gone
    _code, need = reboot_needed(twin)
    assert need["needed"] == [] and need["memory_headroom"]["starts"] == []
    assert need["memory_headroom"]["unknown"].startswith("no memory guard line in this boot")
    values = reboot_metrics(twin, tmp_path)
    assert values[("remedy_mem_guard_starts", None)] == 0
    assert ("remedy_mem_starts_left", None) not in values
