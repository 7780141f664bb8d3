"""Issue 21: faults and bad input that got through, where no twin is needed.

A missing SSH key file: pyinfra's key loading raised a bare PyinfraError inside
the connecting greenlet, so every entry point printed gevent's traceback and no
audit line was written. The inventory's connect guard (``remedy.connect``) makes
it one line naming the host and the key, exit 1, and an audit line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent.parent
KEY = "/nonexistent/remedy-test/id_ed25519"


@pytest.fixture
def keyless_inventory(tmp_path):
    path = tmp_path / "inventory.py"
    path.write_text(
        "from remedy.inventory import checked_hosts\n"
        "hosts = checked_hosts([('cfx-llm2', {'ssh_hostname': '127.0.0.1', 'ssh_port': 9,\n"
        f"    'ssh_user': 'root', 'ssh_key': {KEY!r}}})])\n"
    )
    return path


def _run(argv, audit_log):
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(audit_log), "COLUMNS": "80"}
    return subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT, env=env, timeout=120)


@pytest.mark.parametrize(
    "argv, runbook",
    [
        (["pyinfra", "-y", "INVENTORY", "deploys/restore_toolcalling.py"], "001"),
        (["pyinfra", "-y", "INVENTORY", "deploys/converge.py"], "006"),
        (["remedy", "converge", "INVENTORY"], "006"),
    ],
)
def test_a_missing_ssh_key_is_one_line_exit_1_and_one_audit_line(
    keyless_inventory, tmp_path, argv, runbook
):
    log = tmp_path / "audit.jsonl"
    proc = _run([str(keyless_inventory) if a == "INVENTORY" else a for a in argv], log)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out and "PyinfraError" not in out, out
    assert f"cfx-llm2: ssh_key {KEY} does not exist here" in " ".join(out.split())
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 1, records
    assert records[0]["result"] == "failed" and records[0]["runbook"] == runbook
    assert KEY in records[0]["details"]["failed"]


def test_a_dry_run_with_a_missing_key_records_nothing(keyless_inventory, tmp_path):
    log = tmp_path / "audit.jsonl"
    argv = ["pyinfra", "--dry", str(keyless_inventory), "deploys/converge.py"]
    proc = _run(argv, log)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert not log.exists()


def test_remedy_status_with_a_missing_key_audits_nothing(keyless_inventory, tmp_path):
    """status is a read, not a run: it names the key and writes no audit line."""
    log = tmp_path / "audit.jsonl"
    proc = _run(["remedy", "status", str(keyless_inventory)], log)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out
    assert "ssh_key" in out and KEY in " ".join(out.split())
    assert not log.exists()


# -- item 8: output a person reads fits 80 columns, and nothing that matters is cut ----


def _at_80(argv: list[str]) -> list[str]:
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_the_audit_table_fits_80_columns_and_keeps_issue_names_whole(tmp_path):
    record = {
        "host": "cfx-llm2", "result": "failed", "time": "2026-12-01T03:04:05Z",
        "operator": "root@mgmt", "runbook": "006", "commits": {},
        "issues": ["tt-stack#49", "tt-stack#44", "tt-stack#52"], "path": "durable+fallback",
        "operations": [{"name": "x", "changed": True}], "probe_before": "unparsed",
        "probe_after": "inconclusive", "dirty_override": False,
        "details": {"durable_failed": "switch-to-configuration switch failed: Failed to "
                    "install bootloader (/boot is read-only)"},
    }  # fmt: skip
    log = tmp_path / "audit.jsonl"
    log.write_text(json.dumps(record) + "\n")
    lines = _at_80(["remedy", "audit", "--log", str(log)])
    assert max(len(line) for line in lines) <= 80, lines
    text = "\n".join(lines)
    for whole in ("tt-stack#49", "tt-stack#44", "tt-stack#52", "durable+fallback", "inconclusive"):
        assert whole in text, (whole, lines)
    assert "Failed to install bootloader" in " ".join(text.split())


def test_status_fits_80_columns_and_names_every_path_in_full():
    script = (
        "import json, facts.serving\n"
        "from remedy.core.render.report import host_status\n"
        "from remedy.core.config.host_data import from_host_data\n"
        "from remedy.cli.status import _print, _print_where\n"
        "lines = json.load(open('tests/facts/serving.HostSnapshot/emergency_override.json'))"
        "['output']\n"
        "snap = facts.serving.HostSnapshot().process(lines)\n"
        "r = host_status('cfx-llm2', from_host_data('cfx-llm2', {}), snap)\n"
        "_print(r)\n"
        "_print_where(r)\n"
    )
    lines = _at_80([sys.executable, "-c", script])
    assert max(len(line) for line in lines) <= 80, lines
    text = "\n".join(line.strip() for line in lines)
    for whole in (
        "QWEN36_MERGE_BATCH_GUARD",
        "/run/tt-serving-override/start",
        "/run/systemd/system/tenstorrent-serving.service.d/override.conf",
        "/nix/var/nix/profiles/system/etc/systemd/system/tenstorrent-serving.service",
    ):
        assert whole in text, (whole, lines)
    assert "…" not in text  # nothing is cut


# -- item 4: a person's commit to remedy's managed file --------------------------------


def _with_managed(content: str, author=("1f" * 20, "jane@ops.example", "Jane Ops")):
    import dataclasses

    import facts.serving
    from remedy.core.readings.snapshot import ManagedFile

    path = PROJECT / "tests/facts/serving.HostSnapshot/durable.json"
    snap = facts.serving.HostSnapshot().process(json.loads(path.read_text())["output"])
    managed = ManagedFile(
        "hosts/cfx-llm2/remedy.nix",
        content,
        ["/etc/nixos/hosts/cfx-llm2/configuration.nix"],
        False,
        author,
    )
    # the recording's checkout holds its hand bump uncommitted: a person's commit is clean
    checkout = dataclasses.replace(snap.checkout, changes=[])
    return dataclasses.replace(snap, managed=managed, checkout=checkout)


def _person_text() -> str:
    from remedy.core.config import desired
    from remedy.core.config.host_data import from_host_data

    text = desired.managed_nix(from_host_data("cfx-llm2", {}), desired.ALL)
    return text.replace("hugepagesPerCard = lib.mkForce 1;", "hugepagesPerCard = lib.mkForce 2;")


def test_a_persons_commit_to_the_managed_file_is_named_kept_and_not_called_durable():
    from remedy.core.config import desired
    from remedy.core.config.host_data import from_host_data
    from remedy.core.render.report import host_status
    from remedy.core.run import plan

    s = from_host_data("cfx-llm2", {})
    snap = _with_managed(_person_text())
    conflict = plan.managed_conflict(snap, s)
    assert conflict.startswith("hosts/cfx-llm2/remedy.nix differs from host data: commit ")
    assert "1f1f1f1f1f1f by Jane Ops <jane@ops.example>" in conflict
    assert (
        "sets hardware.tenstorrent.hugepagesPerCard = lib.mkForce 2; where host data gives "
        "hardware.tenstorrent.hugepagesPerCard = lib.mkForce 1;"
    ) in conflict
    p = plan.plan_restore(snap, s, desired.ALL)
    assert p.managed_text is None and p.managed_conflict == conflict
    assert any(r.startswith("kept: hosts/cfx-llm2/remedy.nix differs") for r in p.reasons)
    actions = {sp.drift.key: sp.action for sp in p.settings}
    assert actions["hugepages"].startswith("kept: remedy.nix is a person's")
    status = host_status("cfx-llm2", s, snap)
    assert status.exit_code == 3 and "durable" not in status.verdict, status.verdict
    assert any("the next rebuild takes the checkout's value" in x for x in status.problems)


def test_managed_file_conflict_overwrite_writes_host_datas_file_and_says_whose_it_was():
    from remedy.core.config import desired
    from remedy.core.config.host_data import from_host_data
    from remedy.core.run import plan

    s = from_host_data("cfx-llm2", {"managed_file_conflict": "overwrite"})
    p = plan.plan_restore(_with_managed(_person_text()), s, desired.ALL)
    assert p.managed_text == desired.managed_nix(s, desired.ALL)
    assert any(r.startswith("overwrites: ") and "Jane Ops" in r for r in p.reasons)


def test_remedys_own_older_file_is_no_conflict():
    from remedy.core.config.host_data import from_host_data
    from remedy.core.run import plan

    s = from_host_data("cfx-llm2", {})
    snap = _with_managed(_person_text(), ("2e" * 20, "remedy@cfx-llm2", "remedy"))
    assert plan.managed_conflict(snap, s) is None


def test_a_bad_managed_file_conflict_value_is_refused_naming_the_key():
    from remedy.core.config.host_data import from_host_data
    from remedy.errors import ConfigError

    with pytest.raises(ConfigError, match="managed_file_conflict.*keep, overwrite"):
        from_host_data("cfx-llm2", {"managed_file_conflict": "merge"})


# -- item 7: the audit agrees with the exit code for a hung server ----------------------


def test_a_hung_server_that_the_run_leaves_alone_is_unhealthy_not_ok():
    """The probe timed out on an active unit: the plan restarts nothing (a person must
    look), and the run says unhealthy: its audit result and its exit agree."""
    import dataclasses

    from remedy.core.config import desired
    from remedy.core.readings import probe
    from remedy.core.run import plan

    snap = _with_managed(None)
    hung = probe.ProbeResult(probe.UNREACHABLE, None, None, None, "timed out after 3s", True)
    snap = dataclasses.replace(snap, probe=hung)
    from remedy.core.config.host_data import from_host_data

    s = from_host_data("cfx-llm2", {})
    p = plan.plan_restore(snap, s, desired.TOOL_CALLING)
    assert p.path == plan.NOOP, p.reasons
    why = plan.unhealthy(p, snap)
    assert why and why.startswith("unhealthy: the probe is unreachable")
    parsed = dataclasses.replace(snap, probe=dataclasses.replace(hung, outcome=probe.PARSED))
    assert plan.unhealthy(p, parsed) is None


# -- issue 32 item 7: guards that hold for every inventory and every phase -----------


def test_a_raw_inventory_with_a_missing_key_is_one_line_too(tmp_path):
    """An inventory that does not call checked_hosts: the project's config.py, which
    pyinfra runs before it loads the inventory, installs the same connect guard."""
    raw = tmp_path / "raw.py"
    raw.write_text(
        "hosts = [('cfx-llm2', {'ssh_hostname': '127.0.0.1', 'ssh_port': 9,\n"
        f"    'ssh_user': 'root', 'ssh_key': {KEY!r}}})]\n"
    )
    log = tmp_path / "audit.jsonl"
    proc = _run(["pyinfra", "-y", str(raw), "deploys/restore_toolcalling.py"], log)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out and "PyinfraError" not in out, out
    assert f"cfx-llm2: ssh_key {KEY} does not exist here" in " ".join(out.split())
    assert json.loads(log.read_text().splitlines()[-1])["result"] == "failed"


def test_ctrl_c_while_pyinfra_prepares_never_exits_0(tmp_path):
    """SIGINT while pyinfra loads the inventory (before remedy's run begins): pyinfra's
    own handler exited 0, "Exiting upon user request!". The run stops, changes nothing,
    exits non-zero and is audited as interrupted."""
    import signal
    import time

    slow = tmp_path / "slow.py"
    ready = tmp_path / "loading"
    go = tmp_path / "go"
    slow.write_text(  # an inventory that takes its time (a slow lookup): until GO exists
        "import pathlib, time\n"
        f"pathlib.Path({str(ready)!r}).write_text('x')\n"
        "for _ in range(6000):\n"
        f"    if pathlib.Path({str(go)!r}).exists():\n"
        "        break\n"
        "    time.sleep(0.1)\n"
        "hosts = [('@local', {})]\n"
    )
    log = tmp_path / "audit.jsonl"
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log), "COLUMNS": "80"}
    proc = subprocess.Popen(
        ["pyinfra", "-y", str(slow), "deploys/restore_toolcalling.py"],
        cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120  # the inventory loads: a cap, not a speed
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # while the inventory loads, whatever the machine's speed
    time.sleep(0.5)
    go.write_text("")  # the lookup ends
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "Exiting upon user request" not in out
    assert "SIGINT before the run began; nothing changed" in " ".join(out.split()), out
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["result"] == "interrupted" and record["host"] == "@local"
