"""The suite's check of root's real state (tests/conftest.py): what it counts as a change."""

from __future__ import annotations

import json
import os

import tests.conftest as suite

VAR_LIB = suite._REAL_STATE["/var/lib/remedy"]  # its rule, for a directory of the test's


def snap(monkeypatch, top):
    monkeypatch.setattr(suite, "_REAL_STATE", {str(top): VAR_LIB})
    return suite.real_state()


def test_a_file_written_outside_the_twins_is_a_change_and_a_twin_is_not(monkeypatch, tmp_path):
    (tmp_path / "twins" / "t1-0").mkdir(parents=True)
    before = snap(monkeypatch, tmp_path)
    (tmp_path / "twins" / "t2-0").mkdir()  # another session's twin
    (tmp_path / "twins" / "t1-0" / "state.json").write_text("{}")
    assert suite.state_changes(before, snap(monkeypatch, tmp_path)) == []
    (tmp_path / "options.record").write_text("x")
    assert suite.state_changes(before, snap(monkeypatch, tmp_path)) == [
        f"new: {tmp_path / 'options.record'}"
    ]


def test_the_audit_log_may_gain_only_other_processes_twins_records(monkeypatch, tmp_path):
    log = tmp_path / "audit.jsonl"
    monkeypatch.setattr(suite, "_AUDIT", str(log))
    log.write_text('{"host": "cfx-llm2"}\n')

    def stat():
        st = os.stat(log)
        return {str(log): ("file", st.st_size, st.st_mode, st.st_mtime_ns)}

    before = stat()
    with log.open("a") as fh:
        fh.write(json.dumps({"host": "t99999-4"}) + "\n")  # no pytest of this pid
    assert suite.state_changes(before, stat()) == []
    for host in (f"t{os.getpid() % 100000}-0", "cfx-llm2"):  # this session's, a unit test's
        with log.open("a") as fh:
            fh.write(json.dumps({"host": host}) + "\n")
        assert suite.state_changes(before, stat()) == [f"changed: {log}"], host
