"""The audit log: whole lines only, no secrets, readable by `remedy audit`."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import git
import pytest
from click.testing import CliRunner

from remedy import audit
from remedy.cli.audit import audit as audit_cli


def record(**overrides) -> audit.AuditRecord:
    values = dict(
        host="cfx-llm2",
        result="ok",
        runbook="001",
        commits={"runbooks": "a" * 40, "deploys": "b" * 40},
        issues=["tt-stack#49"],
        path="durable",
        operations=[
            {"name": "nix.flake_input_updated", "changed": True},
            {"name": "serving.restarted", "changed": False},
        ],
        probe_before="unparsed",
        probe_after="parsed",
    )
    values.update(overrides)
    return audit.AuditRecord(**values)


def test_record_defaults_are_utc_and_the_operator():
    rec = audit.AuditRecord(host="h", result="ok")
    assert rec.time.endswith("Z")
    assert abs(rec.timestamp - datetime.now(UTC)) < timedelta(minutes=1)
    assert "@" in rec.operator
    assert rec.commits == {"runbooks": None, "deploys": None}
    assert rec.path == "noop" and rec.dirty_override is False and rec.details == {}


def test_append_and_read_round_trip(tmp_path):
    log = tmp_path / "state" / "remedy" / "audit.jsonl"
    first, second = record(), record(host="twin-1", result="failed", path="fallback")
    audit.append(log, first)
    audit.append(log, second)
    assert [r.to_dict() for r in audit.read(log)] == [first.to_dict(), second.to_dict()]
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    lines = log.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    assert json.loads(lines[0])["probe_before"] == "unparsed"


def test_read_missing_log_is_empty(tmp_path):
    assert audit.read(tmp_path / "nothing.jsonl") == []


def test_read_filters_by_host_and_since(tmp_path):
    log = tmp_path / "audit.jsonl"
    audit.append(log, record(host="a", time="2026-09-20T08:00:00Z"))
    audit.append(log, record(host="b", time="2026-09-21T08:00:00Z"))
    audit.append(log, record(host="a", time="2026-09-22T08:00:00Z"))
    assert [r.time for r in audit.read(log, host="a")] == [
        "2026-09-20T08:00:00Z",
        "2026-09-22T08:00:00Z",
    ]
    since = audit.parse_since("2026-09-21")
    assert [r.host for r in audit.read(log, since=since)] == ["b", "a"]
    assert [r.host for r in audit.read(log, host="a", since=since)] == ["a"]
    naive = datetime(2026, 9, 21, 9, 0)  # taken as UTC
    assert [r.time for r in audit.read(log, since=naive)] == ["2026-09-22T08:00:00Z"]


def test_a_large_record_is_one_line_in_one_write(tmp_path, monkeypatch):
    log = tmp_path / "audit.jsonl"
    big = "x" * 100_000
    writes = []
    real_write = os.write

    def counting_write(fd, data):
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(audit.os, "write", counting_write)
    audit.append(log, record(details={"stdout": big}))
    monkeypatch.undo()
    assert len(writes) == 1 and writes[0] > 100_000
    raw = log.read_bytes()
    assert raw.count(b"\n") == 1 and raw.endswith(b"\n")
    [rec] = audit.read(log)
    assert rec.details["stdout"] == big


def _append_many(path: str, worker: int) -> None:
    for index in range(40):
        audit.append(path, record(host=f"w{worker}", details={"i": index, "pad": "y" * 5000}))


def test_concurrent_appenders_never_interleave(tmp_path):
    log = tmp_path / "audit.jsonl"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_append_many, args=(str(log), n)) for n in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    lines = log.read_bytes().split(b"\n")
    assert lines[-1] == b""
    parsed = [json.loads(line) for line in lines[:-1]]  # every line is whole JSON
    assert len(parsed) == 160
    for worker in range(4):
        mine = [p["details"]["i"] for p in parsed if p["host"] == f"w{worker}"]
        assert mine == list(range(40))


def test_secrets_never_land_in_the_log(tmp_path):
    log = tmp_path / "audit.jsonl"
    key = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        "b3BlbnNzaC1rZXktdjEAAAAA\n"
        "-----END OPENSSH PRIVATE KEY-----"
    )
    details = {
        "ssh_key": "/root/.ssh/id_ed25519",
        "ssh_password": "hunter2",
        "ssh_key_password": "correct horse",
        "host_data": {"sudo_password": "s3cret-sudo", "API-Token": "tok-123", "flake_dir": "/etc"},
        "stderr": key,
        "lines": ["fine", key],
        "max_tokens": 64,
    }
    audit.append(log, record(details=details))
    text = log.read_text()
    secrets = ("hunter2", "correct horse", "s3cret-sudo", "tok-123", "PRIVATE KEY", "id_ed25519")
    for secret in secrets:
        assert secret not in text, secret
    [rec] = audit.read(log)
    assert rec.details["ssh_password"] == audit.SCRUBBED
    assert rec.details["host_data"]["flake_dir"] == "/etc"
    assert rec.details["lines"] == ["fine", audit.SCRUBBED]
    assert rec.details["max_tokens"] == 64


def test_a_key_outside_details_is_refused(tmp_path):
    log = tmp_path / "audit.jsonl"
    leaked = record(operations=[{"name": "-----BEGIN RSA PRIVATE KEY-----", "changed": True}])
    with pytest.raises(ValueError, match="secret"):
        audit.append(log, leaked)
    assert not log.exists()


def test_trailing_partial_line_is_skipped_with_a_warning(tmp_path):
    log = tmp_path / "audit.jsonl"
    audit.append(log, record(host="before"))
    with open(log, "ab") as handle:
        handle.write(b'{"time": "2026-09-2')  # a run killed mid-line (not by append)
    with pytest.warns(audit.AuditLogWarning, match="last line, torn"):
        assert [r.host for r in audit.read(log)] == ["before"]
    # the next append starts on a fresh line, so it stays readable
    audit.append(log, record(host="after"))
    with pytest.warns(audit.AuditLogWarning, match=r"audit.jsonl:2: skipped a line"):
        assert [r.host for r in audit.read(log)] == ["before", "after"]


def test_default_log_path(monkeypatch, tmp_path):
    monkeypatch.delenv(audit.LOG_ENV, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert audit.default_log_path() == tmp_path / "xdg" / "remedy" / "audit.jsonl"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert audit.default_log_path() == tmp_path / "home" / ".local/state/remedy/audit.jsonl"
    assert audit.log_path_for({"audit_log": str(tmp_path / "h.jsonl")}) == tmp_path / "h.jsonl"
    monkeypatch.setenv(audit.LOG_ENV, str(tmp_path / "env.jsonl"))
    assert audit.default_log_path() == tmp_path / "env.jsonl"
    assert audit.log_path_for({"audit_log": "/elsewhere"}) == tmp_path / "env.jsonl"


def test_parse_since():
    now = datetime(2026, 9, 24, 12, 0, tzinfo=UTC)
    assert audit.parse_since("2h", now) == now - timedelta(hours=2)
    assert audit.parse_since("3d", now) == now - timedelta(days=3)
    assert audit.parse_since("30m", now) == now - timedelta(minutes=30)
    assert audit.parse_since("1w", now) == now - timedelta(weeks=1)
    assert audit.parse_since("2026-09-20") == datetime(2026, 9, 20, tzinfo=UTC)
    assert audit.parse_since("2026-09-20T08:00:00+02:00") == datetime(2026, 9, 20, 6, tzinfo=UTC)
    assert audit.parse_since("2026-09-20T08:00Z") == datetime(2026, 9, 20, 8, tzinfo=UTC)
    for bad in ("yesterday", "2 hours", "-2h", ""):
        with pytest.raises(ValueError, match="relative age"):
            audit.parse_since(bad, now)


def test_commits_of(tmp_path):
    assert audit.commits_of(tmp_path) == {"runbooks": None, "deploys": None}
    repo = git.Repo.init(tmp_path)
    with repo.config_writer() as config:
        config.set_value("user", "name", "T")
        config.set_value("user", "email", "t@example.invalid")
    assert audit.commits_of(tmp_path) == {"runbooks": None, "deploys": None}  # no commits
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "001-x.yaml").write_text("id: '001'\n")
    repo.index.add(["runbooks/001-x.yaml"])
    runbooks_commit = repo.index.commit("runbook").hexsha
    (tmp_path / "deploys").mkdir()
    (tmp_path / "deploys" / "x.py").write_text("")
    repo.index.add(["deploys/x.py"])
    deploys_commit = repo.index.commit("deploy").hexsha
    assert audit.commits_of(tmp_path) == {"runbooks": runbooks_commit, "deploys": deploys_commit}


# --------------------------------------------------------------------------- remedy audit


@pytest.fixture
def log(tmp_path) -> Path:
    path = tmp_path / "audit.jsonl"
    audit.append(path, record(host="cfx-llm2", time="2026-09-20T08:00:00Z"))
    audit.append(path, record(host="twin-1", time="2026-09-21T08:00:00Z", dirty_override=True))
    return path


def test_audit_json(log):
    result = CliRunner().invoke(audit_cli, ["--log", str(log), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["host"] for r in rows] == ["cfx-llm2", "twin-1"]
    assert rows[0]["commits"] == {"runbooks": "a" * 40, "deploys": "b" * 40}
    assert rows[0]["probe_before"] == "unparsed" and rows[0]["probe_after"] == "parsed"
    assert rows[1]["dirty_override"] is True


def test_audit_filters_and_env_log(log, monkeypatch):
    monkeypatch.setenv(audit.LOG_ENV, str(log))
    result = CliRunner().invoke(audit_cli, ["--host", "twin-1", "--json"])
    assert [r["host"] for r in json.loads(result.stdout)] == ["twin-1"]
    result = CliRunner().invoke(audit_cli, ["--since", "2026-09-21", "--json"])
    assert [r["host"] for r in json.loads(result.stdout)] == ["twin-1"]
    result = CliRunner().invoke(audit_cli, ["--since", "1h", "--json"])
    assert json.loads(result.stdout) == []


def test_audit_table(log):
    result = CliRunner().invoke(audit_cli, ["--log", str(log)])
    assert result.exit_code == 0
    assert "cfx-llm2" in result.stdout and "twin-1" in result.stdout
    assert "dirty" in result.stdout
    assert max(map(len, result.stdout.splitlines())) <= 80, result.stdout


def test_audit_bad_since_names_the_accepted_forms(log):
    result = CliRunner().invoke(audit_cli, ["--log", str(log), "--since", "last tuesday"])
    assert result.exit_code == 2
    assert "Invalid value for '--since'" in result.output
    assert "2h" in result.output and "ISO date" in result.output


def test_audit_warns_about_a_torn_line_on_stderr(log):
    with open(log, "ab") as handle:
        handle.write(b'{"host": "x"')
    result = CliRunner().invoke(audit_cli, ["--log", str(log), "--json"])
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)) == 2
    assert "torn" in result.stderr


def test_the_table_says_how_often_each_run_restarted_and_why(tmp_path):
    path = tmp_path / "audit.jsonl"
    audit.append(path, record(host="cfx-llm2", time="2026-09-20T08:00:00Z"))
    details = {
        "restarts": 1,
        "restart_reasons": ["the parser cannot wait (now)"],
        "requests_cut": 2,
        "outcome": "path durable; tt-stack ce1f90bd7b01 -> 7291b49161f6; restarts 1",
        "old_rev": "ce1f90bd7b01" + "0" * 28,
        "new_rev": "7291b49161f6" + "0" * 28,
    }
    audit.append(path, record(host="cfx-llm2", time="2026-09-21T08:00:00Z", details=details))
    table = CliRunner().invoke(audit_cli, ["--log", str(path)])
    assert table.exit_code == 0, table.output
    rows = [ln.split() for ln in table.stdout.splitlines() if ln.startswith("2026-")]
    assert [row[6] for row in rows] == ["0", "1"]  # the rs column
    said = " ".join(table.stdout.split())
    assert "cfx-llm2 restarted: 1x: the parser cannot wait (now); 2 request(s) cut" in said
    assert said.count("restarted:") == 1  # the run that did not restart says nothing

    last = CliRunner().invoke(audit_cli, ["--log", str(path), "--host", "cfx-llm2", "--last"])
    assert last.exit_code == 0, last.output
    said = " ".join(last.stdout.split())
    assert "time (UTC) 2026-09-21T08:00:00Z" in said and "2026-09-20" not in said
    assert "outcome path durable; tt-stack ce1f90bd7b01 -> 7291b49161f6; restarts 1" in said
    assert "revs ce1f90bd7b01 -> 7291b49161f6" in said
    assert "restarts 1x: the parser cannot wait (now); 2 request(s) cut" in said
    assert max(map(len, last.stdout.splitlines())) <= 80


def test_a_mark_reads_only_what_was_appended_after_it(tmp_path):
    """A run's report reads its own records, not the whole log (it grows every run)."""
    log = tmp_path / "audit.jsonl"
    assert audit.mark(log) is None  # no log yet: everything is new
    audit.append(log, record(host="old-1"))
    audit.append(log, record(host="old-2"))
    at = audit.mark(log)
    assert at is not None and at.size == log.stat().st_size
    assert audit.read(log, after=at) == []
    audit.append(log, record(host="new"))
    assert [r.host for r in audit.read(log, after=at)] == ["new"]
    assert [r.host for r in audit.read(log, after=None)] == ["old-1", "old-2", "new"]


def test_a_mark_on_a_rotated_or_truncated_log_reads_it_all(tmp_path):
    log = tmp_path / "audit.jsonl"
    audit.append(log, record(host="a"))
    audit.append(log, record(host="b"))
    at = audit.mark(log)
    log.rename(tmp_path / "audit.jsonl.1")  # rotated: a new file takes the name
    audit.append(log, record(host="c"))
    audit.append(log, record(host="d"))
    audit.append(log, record(host="e"))
    assert [r.host for r in audit.read(log, after=at)] == ["c", "d", "e"]
    at = audit.mark(log)
    log.write_bytes(b"")  # truncated in place: the same file, shorter
    audit.append(log, record(host="f"))
    assert [r.host for r in audit.read(log, after=at)] == ["f"]


def test_a_mark_inside_a_torn_line_starts_at_the_next_whole_one(tmp_path):
    log = tmp_path / "audit.jsonl"
    audit.append(log, record(host="a"))
    with open(log, "ab") as f:
        f.write(b'{"host": "torn", "res')  # a writer killed mid-line
    at = audit.mark(log)
    audit.append(log, record(host="b"))  # append ends the torn line first
    with pytest.warns(audit.AuditLogWarning) as seen:
        everything = audit.read(log)
    assert [r.host for r in everything] == ["a", "b"] and len(seen) == 1
    assert [r.host for r in audit.read(log, after=at)] == ["b"]


def test_a_record_with_an_unknown_result_and_brackets_is_printed_as_text(tmp_path):
    """Issue 42: a record of a result the table did not know ("not started") and fields
    with a stray [ or ] made `remedy audit` crash with rich's MarkupError (exit 1)."""
    path = tmp_path / "audit.jsonl"
    odd = record(
        host="[bold]h[/]", result="not started", runbook="[/]", path="durable [x]",
        details={"failed": "a [red]why[/] with ] and [", "outcome": "[/bold] out"},
        operations=[{"name": "[Step] ]", "changed": True, "succeeded": True, "why": "[/]"}],
    )  # fmt: skip
    audit.append(path, odd)
    for argv in (["--log", str(path)], ["--log", str(path), "--last"]):
        result = CliRunner().invoke(audit_cli, argv)
        assert result.exit_code == 0, (argv, result.output, result.exception)
        out = result.stdout
        assert "[bold]h[/]" in out.replace("\n", "") or "[bold]h" in out, out
        assert "not started" in out and "a [red]why[/] with ] and [" in " ".join(out.split())
