"""Issue 32 item 6 without a host: the manual script's record, read back and imported."""

from __future__ import annotations

import json
import os
import subprocess

from remedy import audit
from remedy.core.programs import journal

UNIT = "tenstorrent-serving.service"
RECORD = {
    "host": "cfx-llm2", "result": "ok", "time": "2026-12-02T03:00:00Z",
    "operator": "manual script, root@cfx-llm2", "runbook": "001", "issues": ["tt-stack#49"],
    "path": "durable",
    "details": {"run_id": "manual:cfx-llm2:42:1", "exit": 0, "manual_script": True},
}  # fmt: skip


def test_the_snapshot_finds_the_manual_runs_file_where_the_script_writes_it(tmp_path):
    """The manual script's runner writes its record, a JSON line, beside the run journal;
    the remote read (journal.SNIPPET) derives that file from the journal's path in shell
    and takes the line in. Its result, path and exit code are the outcome program's
    (remedy/host/steps/outcome.sh), from the steps' answers kept beside the journal."""
    from remedy import host

    j = tmp_path / f"run-{UNIT}.json"
    answers = tmp_path / f"run-{UNIT}.answers"
    answers.write_text(
        "run manual:h:1:2\n"
        'step bump durable gives-up give-up the bump: "no" fetch\n'
        'say durable_failed the bump: "no" fetch\n'
        "step override override gives-up done wrote the /run override\n"
        "step restart fallback stops done restarted\nsay restarts 1\n"
        "step verify fallback stops noop tool calls parsed\nsay probe_after parsed\n"
    )
    answers.chmod(0o600)
    program = host.step_program("outcome").replace("'", "'\\''")
    runner = host.text("manual_runner.sh") + (
        f"journal={j} runbook=001 host_name=h issues='\"tt-stack#49\"' path=durable\n"
        f"run_id=manual:h:1:2 started=2026-12-05T00:00:00Z holder={tmp_path}/holder\n"
        "mode=run stopped='' lock_commit='' told='' o_why='' current=x\n"
        'toplevel=\'\' ops="1\tBump it\terror\tno \\"fetch\\"$_nl"\n'
        f"values_outcome() {{ sh -c '{program}' remedy-outcome \"$1\" journal={j} \\\n"
        "  run_id=manual:h:1:2 plan_path=$path reasons=r old_rev= flake_input=tt-stack \\\n"
        "  unhealthy= stopped=; }\n"
        "trap 'finish_record $?' EXIT\n"
        "finish\n"
    )
    ran = subprocess.run(["sh", "-c", runner], capture_output=True, text=True)
    assert ran.returncode == 3, ran.stderr
    assert "outcome: path durable+fallback; durable path abandoned: the bump" in ran.stderr
    assert len((tmp_path / f"manual-runs-{UNIT}.jsonl").read_text().splitlines()) == 1
    env = {**os.environ, "REMEDY_JOURNAL": str(j)}
    read = subprocess.run(
        ["sh", "-c", journal.SNIPPET], env=env, capture_output=True, text=True, check=True
    )
    section, *lines = read.stdout.splitlines()
    assert section == "@@remedy:section run.journal"
    (record,) = journal.parse(lines).manual_runs
    assert record["path"] == "durable+fallback" and record["result"] == "ok"
    assert record["details"]["exit"] == 3 and record["details"]["restarts"] == 1
    assert record["operations"] == [
        {"name": "Bump it", "changed": False, "succeeded": False, "why": 'no "fetch"'}
    ]


def test_manual_run_lines_are_read_and_a_torn_one_left_out():
    found = journal.parse(
        ["manual_run " + json.dumps(RECORD), 'manual_run {"host": "cfx-', "scratch_clone /tmp/x"]
    )
    assert found.manual_runs == (RECORD,) and found.scratch_clones == ("/tmp/x",)


def test_a_manual_run_is_imported_once_under_the_inventory_name(tmp_path):
    log = tmp_path / "audit.jsonl"
    assert audit.import_manual_runs(log, "prod-1", [RECORD]) == ["manual:cfx-llm2:42:1"]
    assert audit.import_manual_runs(log, "prod-1", [RECORD]) == []
    (record,) = audit.read(log)
    assert record.host == "prod-1" and record.details["manual_script"] is True
    assert audit.import_manual_runs(log, "prod-1", [{"details": {"run_id": "x"}}]) == []
