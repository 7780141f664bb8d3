"""Issue 32 item 6 without a host: the manual script's record, read back and imported."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from remedy import audit
from remedy.core.config.host_data import HostData
from remedy.core.programs import journal
from remedy.core.render import manual_flow

UNIT = "tenstorrent-serving.service"
RECORD = {
    "host": "cfx-llm2", "result": "ok", "time": "2026-12-02T03:00:00Z",
    "operator": "manual script, root@cfx-llm2", "runbook": "001", "issues": ["tt-stack#49"],
    "path": "durable",
    "details": {"run_id": "manual:cfx-llm2:42:1", "exit": 0, "manual_script": True},
}  # fmt: skip


def test_the_snapshot_finds_the_manual_runs_file_where_the_script_writes_it():
    """The remote read derives the file from the journal's path in shell."""
    shell = 'j=$1\nm=${j%/run-*}/manual-runs-${j##*/run-}\nm=${m%.json}.jsonl\nprintf %s "$m"'
    proc = subprocess.run(["sh", "-c", shell, "sh", journal.path(UNIT)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert proc.stdout == journal.manual_runs_path(UNIT)
    script = "\n".join(manual_flow._manual_record(HostData(), "h", "001", []))
    assert f"manual_runs={journal.manual_runs_path(UNIT)}" in script


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


def test_each_program_is_written_once_at_the_top_and_runs_by_name():
    """Issue 33 item 8: the script a person reviews at 3 a.m. The programs (the drain, the
    switch, the bump, ...) were quoted inline ('"'"' at every quote), once per use. Now
    each is a quoted here-document after `set -eu`, named wherever it runs; data (a
    commit message, remedy.nix) stays where it is used, byte for byte."""
    import re

    from remedy.core.programs import bump
    from remedy.core.render import manual
    from remedy.runbooks import discover

    project = Path(__file__).resolve().parents[2]
    entry = next(e for e in discover(project) if e.id == "006")
    script = manual.render(entry.runbook, {"_host_name": "cfx-llm2"})
    defined = re.findall(r"^(remedy_program_\d+)=\$\(cat <<'(REMEDY_PROGRAM_*)'$", script, re.M)
    assert len(defined) >= 5, defined
    for name, _tag in defined:
        assert f'"${name}"' in script.split(f"{name}=$(cat", 1)[1], name  # used below
    first = bump.PROGRAM.strip("\n").splitlines()[0]
    assert script.count(first) == 1  # the bump program: once
    assert script.count("vllm:num_requests_(running|waiting)") == 1  # the drain: once
    assert script.index("set -eu") < script.index("remedy_program_1=") < script.index("step_1()")
    assert script.count("'\"'\"'") < 20, script.count("'\"'\"'")
