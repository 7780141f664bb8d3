"""Issue 8: the restore on a twin with production's traps.

Modern Nix (libgit2 ownership checks) on the default base, a checkout owned by a
person, flakes not enabled in nix.conf, NixOS's boot-entry install and rollback,
a `script =` unit, a model that answers in prose now and then, and a bump that
would compile on the serving host. Each test failed on the engine before its fix.
"""

from __future__ import annotations

import json

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import (
    as_owner,
    not_owned_by_owner,
    owner_git,
    probe_inside,
    remedy_json,
    run_restore,
    unit_props,
)

pytestmark = pytest.mark.twin

DROPIN = "/run/systemd/system/tenstorrent-serving.service.d/override.conf"
SCRIPT = "/run/tt-serving-override/start"


def checkout_changes(twin) -> str:
    return owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout


def model_answers_in_prose(twin) -> None:
    """The double's test knob: every answer in prose from now on."""
    twin.exec(["mkdir", "-p", "/var/lib/vllm-double"])
    twin.exec(["tee", "/var/lib/vllm-double/mode"], input="prose\n")


def current_system(twin) -> str:
    return twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip()


def profile(twin) -> str:
    return twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout.strip()


def exists(twin, path) -> bool:
    return twin.exec(["test", "-e", path], check=False).returncode == 0


def out_of(proc) -> str:
    return proc.stdout + proc.stderr


def audit(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.nix_cli
def test_durable_restore_as_the_owner_without_flakes_in_nix_conf(twin, tmp_path):
    conf = twin.exec(["cat", "/etc/nix/nix.conf"]).stdout
    assert "experimental-features" not in conf  # the trap is really there
    proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    assert proc.returncode == 0, out_of(proc)[-4000:]
    assert audit(tmp_path / "a.jsonl")[-1]["path"] == "durable"
    assert probe_inside(twin).outcome == "parsed"
    assert "tt-stack#49" in owner_git(twin, "log", "-1", "--format=%B").stdout
    assert checkout_changes(twin) == ""
    assert not_owned_by_owner(twin) == []
    # the next boot runs the fix too: the unit script execs the flags script with qwen3_xml
    code, doc = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    after = doc["hosts"][0]["snapshot"]["unit"]["after_reboot"]["parser"]
    assert after["value"] == "qwen3_xml", doc["hosts"][0]["problems"]
    # a restore converges tool calling only: the hugepage pool and the memory guard are
    # converge's (exit 3)
    lagging = {d["key"] for d in doc["hosts"][0]["settings"] if d["state"] != "in sync"}
    assert code == 3 and lagging == {"hugepages", "memory_guard"}, doc["hosts"][0]["problems"]
    assert after["source"].endswith("-start-tenstorrent-serving")


def test_bootloader_failure_keeps_production_parsed_and_the_system_as_before(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    before_current, before_profile = current_system(twin), profile(twin)
    twin.exec(["mount", "-t", "tmpfs", "-o", "ro,size=1M", "tmpfs", "/boot"])
    proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    out = out_of(proc)
    assert proc.returncode != 0, out[-4000:]
    assert "switch-to-configuration switch exited 1" in out
    assert "Failed to install bootloader" in out
    assert probe_inside(twin).outcome == "parsed"
    assert exists(twin, DROPIN) and exists(twin, SCRIPT)
    assert checkout_changes(twin) == ""
    assert current_system(twin) == before_current
    assert profile(twin) == before_profile  # back on exactly the recorded generation
    assert not_owned_by_owner(twin) == []
    record = audit(tmp_path / "a.jsonl")[-1]
    assert record["result"] == "failed" and record["path"] == "durable+fallback"
    assert "bootloader" in record["details"]["durable_failed"]


@pytest.mark.nix_cli
def test_a_bump_that_would_compile_on_the_host_is_blocked_unless_allowed(twin, tmp_path):
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
    rev = json.loads(twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout)
    proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    out = out_of(proc)
    assert proc.returncode == 0, out[-4000:]
    assert "compiled on the serving host" in out and "vllm-tt" in out
    assert "allow_local_build" in out
    assert json.loads(twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout) == rev
    assert checkout_changes(twin) == ""
    assert exists(twin, DROPIN) and probe_inside(twin).outcome == "parsed"

    allowed = run_restore(twin, "--data", "allow_local_build=true", audit_log=tmp_path / "a.jsonl")
    assert allowed.returncode == 0, out_of(allowed)[-4000:]
    assert "max-jobs 1, cores 2" in out_of(allowed)
    # what the switch changes beyond the settings: the fork's new version, by name
    said = " ".join(out_of(allowed).split())
    assert f"package vllm-tt: {fixtures.VLLM_VERSION} → {fixtures.HEAVY_VLLM_VERSION}" in said, (
        said[-3000:]
    )
    changes = audit(tmp_path / "a.jsonl")[-1]["details"]["switch_changes"]
    assert any(p.startswith("vllm-tt: ") for p in changes["packages"]), changes
    assert audit(tmp_path / "a.jsonl")[-1]["path"] == "durable"
    assert not exists(twin, DROPIN) and probe_inside(twin).outcome == "parsed"
    assert not_owned_by_owner(twin) == []


def test_a_profile_that_differs_from_the_running_system_blocks_the_switch(twin, tmp_path):
    running = current_system(twin)
    other = twin.exec(["sh", "-c", "ls -d /nix/store/*-start-tenstorrent-serving | head -n 1"])
    twin.exec(["nix-env", "-p", "/nix/var/nix/profiles/system", "--set", other.stdout.strip()])
    moved = profile(twin)
    assert moved != running
    proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    out = out_of(proc)
    assert proc.returncode == 0, out[-4000:]
    assert "differs from /run/current-system" in out
    assert audit(tmp_path / "a.jsonl")[-1]["path"] == "fallback"
    assert profile(twin) == moved and current_system(twin) == running  # nothing switched
    assert probe_inside(twin).outcome == "parsed"


def test_a_model_answering_in_prose_is_never_a_reason_to_restart_or_roll_back(twin, tmp_path):
    first = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    assert first.returncode == 0, out_of(first)[-3000:]
    twin.exec(
        ["sh", "-c", "mkdir -p /var/lib/vllm-double && echo prose > /var/lib/vllm-double/mode"]
    )
    before = unit_props(twin)
    again = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    assert again.returncode == 0, out_of(again)[-3000:]
    assert "inconclusive" in out_of(again)
    assert unit_props(twin) == before  # no restart
    assert audit(tmp_path / "a.jsonl")[-1]["path"] == "noop"
    code, doc = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    assert code == 3 and doc["hosts"][0]["verdict"].startswith("unverified")


def test_prose_after_a_switch_is_reported_not_rolled_back(twin, tmp_path):
    twin.exec(
        ["sh", "-c", "mkdir -p /var/lib/vllm-double && echo prose > /var/lib/vllm-double/mode"]
    )
    proc = run_restore(twin, "--data", "ready_timeout_s=60", audit_log=tmp_path / "a.jsonl")
    out = out_of(proc)
    assert proc.returncode == 0, out[-4000:]
    assert "NOT VERIFIED" in out and "rolling back" not in out.lower()
    assert audit(tmp_path / "a.jsonl")[-1]["path"] == "durable"
    assert not exists(twin, DROPIN)
    twin.exec(["rm", "-f", "/var/lib/vllm-double/mode"])
    assert probe_inside(twin).outcome == "parsed"


@pytest.mark.nix_cli
def test_missing_git_and_an_unfetchable_input_are_named_and_fall_back(twin, tmp_path):
    git = twin.exec(["sh", "-c", "command -v git"]).stdout.strip()
    twin.exec(["mv", git, git + ".off"])
    try:
        proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    finally:
        twin.exec(["mv", git + ".off", git])
    out = out_of(proc)
    assert proc.returncode == 0, out[-4000:]
    assert "git is not installed on the host" in out
    assert probe_inside(twin).outcome == "parsed"

    twin.exec(["mv", fixtures.TT_STACK_DIR, fixtures.TT_STACK_DIR + ".gone"])
    twin.exec(["sh", "-c", f"rm -f {DROPIN} {SCRIPT} && systemctl daemon-reload"])
    try:
        proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    finally:
        twin.exec(["mv", fixtures.TT_STACK_DIR + ".gone", fixtures.TT_STACK_DIR])
    out = out_of(proc)
    assert proc.returncode == 0, out[-4000:]
    assert "bumping tt-stack failed" in out and "can the host fetch" in out
    assert checkout_changes(twin) == ""
    assert probe_inside(twin).outcome == "parsed"


def test_untracked_files_do_not_block_the_durable_path(twin, tmp_path):
    as_owner(twin, "ln", "-s", "/nix/store", f"{fixtures.NIXOS_DIR}/result")
    proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    assert proc.returncode == 0, out_of(proc)[-3000:]
    assert audit(tmp_path / "a.jsonl")[-1]["path"] == "durable"


def test_a_binary_execstart_in_an_etc_dropin_is_read_and_named_as_the_shadow(twin, tmp_path):
    shadow = "/etc/systemd/system/tenstorrent-serving.service.d/overrides.conf"
    twin.exec(["mkdir", "-p", shadow.rsplit("/", 1)[0]])
    twin.exec(
        ["tee", shadow],
        input="[Service]\nExecStart=\nExecStart=/bin/sh -c 'exec /usr/local/bin/vllm serve x'\n",
    )
    twin.exec(["systemctl", "daemon-reload"])
    code, doc = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    assert code == 4 and doc["hosts"][0]["snapshot"]["unit"]["now"]["exec_start"] == "/bin/sh"
    proc = run_restore(twin, "--data", "durable=false", audit_log=tmp_path / "a.jsonl")
    out = out_of(proc)
    assert proc.returncode != 0 and "Traceback" not in out
    assert f"set by {shadow}: that file shadows" in out.replace("\n", " ")


def test_required_fix_rev_is_checked_against_the_bumped_input(twin, tmp_path):
    revs = owner_git(twin, "log", "--format=%H", repo=fixtures.TT_STACK_DIR).stdout.split()
    missing = "f" * 40  # in no history (all digits would reach us as an int)
    proc = run_restore(twin, "--data", f"required_fix_rev={missing}", audit_log=tmp_path / "a")
    assert proc.returncode == 0, out_of(proc)[-3000:]
    assert f"does not contain required_fix_rev {missing[:12]}" in out_of(proc)
    assert checkout_changes(twin) == ""
    fix = revs[1]  # #34, the parser fix
    proc = run_restore(twin, "--data", f"required_fix_rev={fix}", audit_log=tmp_path / "a")
    assert proc.returncode == 0, out_of(proc)[-3000:]
    assert audit(tmp_path / "a")[-1]["path"] == "durable"
