"""Issue 43, item C: no secret in any output, and none adopted into the repository.

A person put credentials on the host: ``systemctl set-environment MY_API_TOKEN=…`` (the
manager's environment, which the server then has), a /run drop-in with
``Environment=SMTP_PASS=…`` and an ``HTTPS_PROXY`` whose URL carries a password, and a
server flag ``--api-key``. Whatever remedy writes (the status as text and ``--json``,
``converge --check``, the audit log, the textfile metrics, the lines pyinfra logs) holds
their names and none of their values; ``remedy adopt`` refuses them, naming the
variable and what to do, never the value.

Recorded twin snapshots (tests/facts) with the credentials planted in them.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest

import facts.serving
from remedy import audit, metrics
from remedy.core.config import adopt
from remedy.core.config.host_data import from_host_data
from remedy.core.readings.runtime import RuntimeFile, ServingProcess
from remedy.core.render import report

FIXTURES = Path(__file__).parent.parent / "facts" / "serving.HostSnapshot"
UNIT = "tenstorrent-serving.service"
DROPIN = f"/run/systemd/system/{UNIT}.d/zz-secret.conf"
DROPIN_TEXT = (
    '[Service]\nEnvironment=SMTP_PASS=hunter2 "HTTPS_PROXY=http://user:pr0xypw@proxy:3128"\n'
)
SECRETS = ("s3cr3tvalue", "hunter2", "pr0xypw", "sk-apikey")


def snapshot(case: str):
    lines = json.loads((FIXTURES / f"{case}.json").read_text())["output"]
    return facts.serving.HostSnapshot().process(lines)


def settings(**data):
    return from_host_data("cfx-llm2", data)


def planted(case: str = "set_environment"):
    """CASE with the credentials of the module's docstring planted where they would be."""
    snap = snapshot(case)
    runtime = snap.runtime
    files = [*runtime.files, RuntimeFile(DROPIN, None, DROPIN_TEXT)]
    proc = runtime.process
    env = {
        **proc.environ,
        "MY_API_TOKEN": "s3cr3tvalue",
        "SMTP_PASS": "hunter2",
        "HTTPS_PROXY": "http://user:pr0xypw@proxy:3128",
    }
    process = ServingProcess(proc.pid, [*proc.argv, "--api-key", "sk-apikey"], env)
    manager = {**runtime.manager_env, "MY_API_TOKEN": "s3cr3tvalue"}
    runtime = dataclasses.replace(runtime, files=files, process=process, manager_env=manager)
    return dataclasses.replace(snap, runtime=runtime)


def leaked(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_the_status_says_each_variable_by_name_and_no_secret_as_text_or_json():
    status = report.host_status("cfx-llm2", settings(), planted())
    text = "\n".join([status.verdict, *status.unmanaged_lines, *status.notes, *status.problems])
    assert "SMTP_PASS" in text and "MY_API_TOKEN" in text and "--api-key" in text, text
    assert "HTTPS_PROXY=http://…@proxy:3128" in text, text
    assert leaked(text) == [], text
    doc = json.dumps(status.to_json(), default=str)
    assert leaked(doc) == [], [doc[max(0, doc.find(s) - 200) : doc.find(s) + 40] for s in
                               leaked(doc)]  # fmt: skip
    # the manager's environment: names, and the values of systemd's own only
    manager = status.to_json()["snapshot"]["runtime"]["manager_env"]
    assert manager["MY_API_TOKEN"] == "…" and manager["PATH"].startswith("/")


def test_a_drop_in_is_summed_up_with_its_secrets_masked_before_it_is_cut():
    status = report.host_status("cfx-llm2", settings(), planted())
    (entry,) = [e for e in status.unmanaged if e.subject == DROPIN]
    assert entry.now.startswith('Environment=SMTP_PASS=… "HTTPS_PROXY=http://…@proxy'), entry
    assert not any(s[:4] in entry.now for s in SECRETS), entry.now


def test_converge_check_reports_no_secret(capsys):
    from remedy import fleet
    from remedy.cli import converge

    read = fleet.HostRead("cfx-llm2", settings(), planted())
    rep = converge._report(read, None, True)
    converge._output(rep["exit_code"], [rep], None, as_json=True)
    converge._output(rep["exit_code"], [rep], None, as_json=False)
    out = capsys.readouterr().out
    assert "SMTP_PASS" in out and leaked(out) == [], out


def test_the_audit_log_never_holds_a_secret_and_an_old_one_is_masked_when_read(tmp_path):
    log = tmp_path / "audit.jsonl"
    record = audit.AuditRecord(
        host="cfx-llm2",
        result="ok",
        details={
            "outcome": f"kept {DROPIN}: Environment=SMTP_PASS=hunter2",
            "environment": {"MY_API_TOKEN": "s3cr3tvalue"},
            "argv": ["vllm", "serve", "--api-key", "sk-apikey"],
        },
        probe_after="HTTPS_PROXY=http://user:pr0xypw@proxy:3128",
    )
    audit.append(log, record)
    assert leaked(log.read_text()) == [], log.read_text()
    # a record written before remedy masked (or by another writer) is masked when read
    old = {**record.to_dict(), "host": "old"}
    with open(log, "a") as handle:
        handle.write(json.dumps(old) + "\n")
    [_, read] = audit.read(log)
    assert read.host == "old" and leaked(json.dumps(read.to_dict())) == []


def test_the_textfile_holds_no_secret(tmp_path):
    path = tmp_path / "remedy.prom"
    host = metrics.HostMetrics("cfx-llm2", True, bump_blocked="fetch of http://u:pr0xypw@h")
    metrics.write(str(path), [host], 1_790_000_000.0, 1.0)
    assert "remedy_bump_blocked" in path.read_text() and leaked(path.read_text()) == []


def test_the_lines_pyinfra_logs_are_masked():
    from remedy.console import MaskedLines

    out = io.StringIO()
    stream = MaskedLines(out)
    stream.write(">>> sh -c 'export SMTP_PASS=hunter2; curl http://user:pr0xypw@proxy'")
    stream.write(" --api-key sk-apikey\n    [cfx-llm2] done\n")
    stream.write("MY_API_TOKEN=s3cr3tvalue")
    stream.flush()
    assert leaked(out.getvalue()) == [] and "[cfx-llm2] done" in out.getvalue(), out.getvalue()
    # remedy's own words pass as they are: an option that names a variable
    said = "say so: `--adopt-secret HTTPS_PROXY` writes its value; --api-key gone\n"
    stream.write(said)
    assert out.getvalue().endswith(said)


@pytest.mark.parametrize(
    "name",
    ["SMTP_PASS", "DB_PASSWORD", "HF_TOKEN", "MY_API_TOKEN", "AWS_SECRET_ACCESS_KEY",
     "OPENAI_APIKEY", "GOOGLE_CREDENTIALS", "BASIC_AUTH", "SetCredential", "--api-key"],
)  # fmt: skip
def test_a_name_like_a_secrets_is_one(name):
    from remedy.core.config import secrets

    assert secrets.secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["VLLM_LOGGING_LEVEL", "TOKENIZERS_PARALLELISM", "MAX_TOKENS", "--max-num-batched-tokens",
     "EnvironmentFile", "LimitNOFILE", "HF_HOME"],
)  # fmt: skip
def test_a_name_like_a_setting_is_none(name):
    from remedy.core.config import secrets

    assert not secrets.secret_name(name)


# -- adopt --------------------------------------------------------------------------


def test_adopt_refuses_a_secret_naming_the_variable_and_what_to_do_never_the_value():
    for subject, name in (
        ("Environment=SMTP_PASS=hunter2", "SMTP_PASS"),
        ("SMTP_PASS", "SMTP_PASS"),
        ("HTTPS_PROXY", "HTTPS_PROXY"),
        ("MY_API_TOKEN", "MY_API_TOKEN"),
    ):
        with pytest.raises(adopt.AdoptRefused) as refused:
            adopt.adoption(planted(), settings(), subject, "t#1", "window", "cfx-llm2")
        said = str(refused.value)
        assert f"{name} looks like a secret" in said and "EnvironmentFile=" in said, said
        assert leaked(said) == [], said


def test_adopt_takes_a_value_like_a_secret_only_when_told_so():
    a = adopt.adoption(planted(), settings(), "HTTPS_PROXY", "t#1", "window", "cfx-llm2",
                       adopt_secret="HTTPS_PROXY")  # fmt: skip
    assert a.setting.value == "http://user:pr0xypw@proxy:3128"
    # told for another variable: still refused
    with pytest.raises(adopt.AdoptRefused, match="HTTPS_PROXY looks like a secret"):
        adopt.adoption(planted(), settings(), "HTTPS_PROXY", "t#1", "window", "cfx-llm2",
                       adopt_secret="SMTP_PASS")  # fmt: skip
