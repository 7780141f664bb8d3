"""Issue 5 acceptance on twins: manual recovery over plain SSH, apply, the audit log."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from remedy.twin import fixtures
from tests.conftest import (
    PROJECT,
    hugepages_1g,
    out_of_sync,
    owner_git,
    probe_inside,
    remedy_json,
    run_deploy,
    run_restore,
    status_settings,
    twin_inventory,
    unit_props,
)

pytestmark = pytest.mark.twin


def manual_script(twin, *extra: str, runbook: str = "001") -> str:
    proc = subprocess.run(
        [
            "remedy",
            "runbooks",
            "show",
            runbook,
            "--manual",
            "--inventory",
            "inventory/twin.py",
            "--host",
            twin.name,
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        check=True,
    )
    return proc.stdout


def over_ssh(twin, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*twin.ssh_argv(), "sh", "-s", *(["--", *args] if args else [])],
        input=script,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.nix_cli
def test_manual_commands_restore_tool_calling_over_plain_ssh(twin):
    script = manual_script(twin)
    assert twin.server_url in script  # the host's data fills in the values
    proc = over_ssh(twin, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert probe_inside(twin).outcome == "parsed"
    log = owner_git(twin, "log", "-1", "--format=%B").stdout
    assert "tt-stack#49" in log


def test_manual_fallback_and_its_memory_gate(twin, tmp_path):
    inventory = twin_inventory(tmp_path / "strict.py", twin, min_mem_available_gb=100000)
    refused = subprocess.run(
        [
            "remedy",
            "runbooks",
            "show",
            "001",
            "--manual",
            "--inventory",
            str(inventory),
            "--host",
            twin.name,
        ],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        check=True,
    ).stdout
    pid = unit_props(twin)["MainPID"]
    proc = over_ssh(twin, refused, "fallback")
    assert proc.returncode != 0
    assert "is below min_mem_available_gb 100000 GB" in proc.stderr, proc.stderr[-3000:]
    assert unit_props(twin)["MainPID"] == pid  # nothing restarted
    proc = over_ssh(twin, manual_script(twin), "fallback")
    assert proc.returncode == 3, proc.stderr[-3000:]  # the fallback holds: volatile
    assert "VOLATILE" in proc.stderr
    assert probe_inside(twin).outcome == "parsed"


def test_audit_after_a_restore(twin, tmp_path):
    log = tmp_path / "audit.jsonl"
    assert run_restore(twin, audit_log=log).returncode == 0
    code, entries = remedy_json("audit", "--log", str(log), "--host", twin.name)
    assert code == 0
    (entry,) = entries
    assert entry["runbook"] == "001" and "tt-stack#49" in entry["issues"]
    assert entry["commits"]["runbooks"]  # the runbooks' last commit
    assert entry["path"] == "durable"
    assert (entry["probe_before"], entry["probe_after"]) == ("unparsed", "parsed")
    assert any(op["changed"] for op in entry["operations"])
    text = log.read_text()
    assert "BEGIN OPENSSH PRIVATE KEY" not in text and str(twin.key) not in text


def test_apply_on_a_dirty_production_checkout_refuses_unless_forced(twin, tmp_path):
    clone = tmp_path / "project"
    subprocess.run(["git", "clone", "-q", PROJECT, str(clone)], check=True)
    for rel in ("remedy", "facts", "deploys", "runbooks"):  # this tree, as under review
        subprocess.run(["cp", "-a", f"{PROJECT}/{rel}/.", str(clone / rel)], check=True)
    subprocess.run(["git", "-C", str(clone), "add", "-A"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(clone),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "snapshot",
            "--allow-empty",
        ],
        check=True,
    )
    runbook = clone / "runbooks/001-toolcalling-run-only.yaml"
    runbook.write_text(runbook.read_text().replace("risk:", "# edited on the box\nrisk:", 1))
    inventory = twin_inventory(tmp_path / "production.py", twin, remedy_environment="production")
    log = tmp_path / "audit.jsonl"
    base = [
        "remedy",
        "runbooks",
        "apply",
        "001",
        str(inventory),
        "--project",
        str(clone),
        "--audit-log",
        str(log),
    ]
    refused = subprocess.run(base, capture_output=True, text=True)
    assert refused.returncode != 0
    assert "001-toolcalling-run-only.yaml" in refused.stderr
    assert "--force-dirty" in refused.stderr
    assert probe_inside(twin).outcome == "unparsed"
    forced = subprocess.run([*base, "--force-dirty"], capture_output=True, text=True, timeout=900)
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert probe_inside(twin).outcome == "parsed"
    last = json.loads(Path(log).read_text().splitlines()[-1])
    assert last["dirty_override"] is True and last["result"] == "ok"


def test_apply_records_the_runbooks_own_id_and_issues(twin, tmp_path):
    log = tmp_path / "audit.jsonl"
    inventory = twin_inventory(tmp_path / "inv.py", twin)
    applied = subprocess.run(
        ["remedy", "runbooks", "apply", "004", str(inventory), "--audit-log", str(log)],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        timeout=900,
    )
    assert applied.returncode == 0, applied.stderr[-3000:]
    plain = run_restore(twin, audit_log=log)
    assert plain.returncode == 0, plain.stdout[-3000:]
    records = [json.loads(x) for x in log.read_text().splitlines()]
    assert (records[-2]["runbook"], records[-2]["issues"]) == ("004", ["tt-stack#49"])
    assert (records[-1]["runbook"], records[-1]["issues"]) == (
        "001",
        ["tt-stack#49", "tt-stack#34", "tt-stack#44"],
    )


def converged_state(twin) -> dict:
    """What converge is judged by, comparable across twins (commit ids and the
    toplevel differ: they carry the commit date and the configuration revision)."""
    from remedy.twin import machine

    lock = json.loads(twin.exec(["cat", "/etc/nixos/flake.lock"]).stdout)
    overrides = twin.exec(
        ["sh", "-c", "ls /run/systemd/system/tenstorrent-serving.service.d /run/tt-serving-override"
         " 2>/dev/null || true"]
    ).stdout  # fmt: skip

    def script(system: str) -> str:  # each twin serves on its own port
        return re.sub(r"--port \d+", "--port PORT", machine.flags_script(twin, system))

    return {
        "flags script": script("/nix/var/nix/profiles/system"),
        "running script": script("/run/current-system"),
        "kernel params": twin.exec(["cat", "/nix/var/nix/profiles/system/kernel-params"]).stdout,
        "managed file": owner_git(twin, "show", "HEAD:hosts/cfx-llm2/remedy.nix").stdout,
        "tt-stack": lock["nodes"]["tt-stack"]["locked"]["rev"],
        "hugepages 1G": hugepages_1g(twin),
        "/run overrides": overrides,
        "checkout changes": owner_git(twin, "status", "--porcelain", "--untracked-files=no").stdout,
    }


def test_the_manual_converge_and_the_deploy_leave_the_same_state(make_twin):
    by_hand = make_twin(with_emergency_override=True)
    by_deploy = make_twin(with_emergency_override=True)
    script = manual_script(by_hand, runbook="006")
    proc = over_ssh(by_hand, script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    deploy = run_deploy(by_deploy, "converge")
    assert deploy.returncode == 0, (deploy.stdout + deploy.stderr)[-3000:]
    for twin in (by_hand, by_deploy):
        code, settings = status_settings(twin)
        assert code == 0 and out_of_sync(settings) == set(), (twin.name, settings)
    assert converged_state(by_hand) == converged_state(by_deploy)


def test_a_manual_run_is_audited_once_by_the_next_remedy_command(twin, tmp_path):
    """Issue 32 item 6: runs of the manual script, one that switched and restarted the
    server included, left no record. The script leaves its record on the host; the next
    remedy command that reads the host imports it, once."""
    import os

    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    strict = twin_inventory(tmp_path / "strict.py", twin, min_mem_available_gb=100000)
    refused = subprocess.run(
        ["remedy", "runbooks", "show", "001", "--manual", "--inventory", str(strict),
         "--host", twin.name], capture_output=True, text=True, cwd=PROJECT, check=True,
    ).stdout  # fmt: skip
    gated = over_ssh(twin, refused)  # the memory gate fails it before anything changes
    assert gated.returncode == 1, gated.stderr[-3000:]
    assert "is below min_mem_available_gb 100000 GB" in " ".join(gated.stderr.split())
    proc = over_ssh(twin, manual_script(twin))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for _ in range(2):  # the second read finds them imported already
        status = subprocess.run(
            ["remedy", "status", "inventory/twin.py", "--limit", twin.name],
            capture_output=True, text=True, cwd=PROJECT, env=env, timeout=300,
        )  # fmt: skip
        assert "Traceback" not in status.stderr, status.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 2, records
    failed, ran = records
    assert ran["host"] == twin.name and ran["runbook"] == "001"
    assert (ran["result"], ran["path"]) == ("ok", "durable"), ran
    assert ran["details"]["manual_script"] is True and ran["details"]["restarts"] == 1
    assert ran["details"]["toplevel"].startswith("/nix/store/")
    assert ran["details"]["run_id"].startswith("manual:")
    assert "tt-stack#49" in ran["issues"] and ran["operator"].startswith("manual script, root@")
    # the memory gate refused it: "refused", as the deploy records it, exit 1 (issue 42)
    assert failed["result"] == "refused" and failed["details"]["exit"] == 1
    mode = twin.exec(["stat", "-c", "%u %a", "/var/lib/remedy/manual-runs-"
                      "tenstorrent-serving.service.jsonl"]).stdout.split()  # fmt: skip
    assert mode == ["0", "600"]


def test_the_manual_script_refuses_a_dirty_checkout_before_it_bumps(twin):
    """Issue 33: the deploy refuses a checkout with a person's uncommitted changes; the
    manual script switched on it. Now its plan (read from the host) takes the fallback
    and names the change and what to do; rendered without reading the host, its bump
    step refuses the checkout before it clones or bumps. Either way tool calling holds
    on the fallback and the checkout and the profile are as they were."""
    config = f"{fixtures.NIXOS_DIR}/hosts/cfx-llm2/configuration.nix"
    twin.exec(["sh", "-c", f"echo '# a note' >> {config}"], user=fixtures.OWNER)
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    before = twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout
    proc = over_ssh(twin, manual_script(twin, runbook="006"))
    said = " ".join(proc.stderr.split())
    assert "path: the /run fallback" in said, proc.stderr[-3000:]
    assert "/etc/nixos has uncommitted changes" in said and "commit or stash them" in said
    assert "== 3. Scratch clone" not in said  # no bump step in the plan
    assert "outcome: path fallback; VOLATILE: tool calling rests on the /run" in said
    assert proc.returncode == 3
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head
    assert twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout == before
    proc = over_ssh(twin, manual_script(twin, "--no-read", runbook="006"))
    said = " ".join(proc.stderr.split())
    assert (
        "GAVE UP: /etc/nixos has uncommitted changes ( M "
        "hosts/cfx-llm2/configuration.nix;); commit or stash them first"
    ) in said, proc.stderr[-3000:]
    assert "the durable path is abandoned" in said and "/tmp/remedy-bump." not in said
    # the one line of the outcome program, the deploy's words too (issue 42)
    assert (
        "outcome: path durable+fallback; durable path abandoned: /etc/nixos has uncommitted changes"
    ) in said, said[-3000:]
    assert "VOLATILE: tool calling rests on the /run override" in said
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head
    assert twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout == before
    assert probe_inside(twin).outcome == "parsed"  # on the /run fallback


@pytest.mark.nix_cli
def test_after_a_default_converge_the_manual_script_activates_the_pending_generation(
    make_twin,
):
    """After `remedy converge` under the default policy (boot pending: the profile holds
    every setting, the old generation runs), the manual script called that generation a
    blocker ('reconcile them by hand') and restarted onto the fallback. A person running
    it is the restart policy: it activates the pending generation with one restart, no
    bump and no build."""
    twin = make_twin(with_emergency_override=True)
    assert run_deploy(twin, "converge", restart=None).returncode == 0
    code, _ = status_settings(twin)
    assert code == 6  # boot pending
    pending = twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout.strip()
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    proc = over_ssh(twin, manual_script(twin, runbook="006"))
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "holds every setting in scope but is not running: activate it" in said
    assert "reconcile them by hand" not in said and "abandoned" not in said, said[-3000:]
    assert "outcome: path durable; restarts 1" in said, said[-3000:]
    assert "bump of tt-stack takes" not in said
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head
    assert twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip() == pending
    code, settings = status_settings(twin)
    assert code == 0 and out_of_sync(settings) == set(), settings
