"""Issue 43, item C, on a twin: no secret in any output of a run.

A person put credentials on the host: ``systemctl set-environment MY_API_TOKEN=…`` (then
a restart, so the server has it), a /run drop-in with ``Environment=SMTP_PASS=…`` and an
``HTTPS_PROXY`` whose URL carries a password; and one in a setting file (a proxy URL
with a password, as a data setting of remedy's). Then every output of a run: status as
text and ``--json``, ``converge --check`` as text, ``--json`` and ``--textfile``,
``remedy adopt`` of each (refused, naming the variable), the deploy with ``-vv`` (every
command it runs), the audit log and ``remedy audit`` as text and ``--json``, a converge
after with its textfile. None holds a value planted; the names are said.
"""

from __future__ import annotations

import subprocess

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, twin_inventory

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
DROPIN = f"/run/systemd/system/{UNIT}.d/zz-secret.conf"
PLANTED = {
    "manager environment": "s3cr3tvalue",
    "drop-in SMTP_PASS": "hunter2",
    "drop-in HTTPS_PROXY password": "dr0pinpw",
    "setting file ALL_PROXY password": "s3ttingpw",
}
SETTING = """\
issue: tt-stack#60
kind: environment
name: ALL_PROXY
value: http://user:s3ttingpw@proxy.example:3128
urgency: window
"""


def run(*argv: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=PROJECT, timeout=timeout)


def test_no_output_of_a_run_holds_a_secret_planted_on_the_host(make_twin, tmp_path, monkeypatch):
    # this test's own audit log, locks and settings (the commands inherit them)
    (tmp_path / "lock").mkdir()
    (tmp_path / "settings").mkdir()
    (tmp_path / "settings" / "all-proxy.yaml").write_text(SETTING)
    monkeypatch.setenv("REMEDY_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    monkeypatch.setenv("REMEDY_LOCK_DIR", str(tmp_path / "lock"))
    monkeypatch.setenv("REMEDY_SETTINGS_DIR", str(tmp_path / "settings"))
    twin = make_twin()
    inventory = str(twin_inventory(tmp_path / "inventory.py", twin))
    twin.exec(["systemctl", "set-environment", "MY_API_TOKEN=s3cr3tvalue"])
    twin.exec(["mkdir", "-p", DROPIN.rsplit("/", 1)[0]])
    twin.exec(["tee", DROPIN], input=(
        "[Service]\n"
        'Environment=SMTP_PASS=hunter2 "HTTPS_PROXY=http://user:dr0pinpw@proxy.example:3128"\n'
    ))  # fmt: skip
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)

    said: dict[str, str] = {}

    def output(name: str, proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
        said[name] = proc.stdout + proc.stderr
        return proc

    status = output("status", run("remedy", "status", inventory))
    assert "SMTP_PASS" in status.stdout and "MY_API_TOKEN" in status.stdout, status.stdout
    assert "HTTPS_PROXY=http://…@proxy.example:3128" in status.stdout, status.stdout
    output("status --json", run("remedy", "status", inventory, "--json"))
    prom = tmp_path / "check.prom"
    output("converge --check", run("remedy", "converge", inventory, "--check",
                                   "--textfile", str(prom)))  # fmt: skip
    output("converge --check --json", run("remedy", "converge", inventory, "--check", "--json"))
    for subject, name in (
        ("Environment=SMTP_PASS=hunter2", "SMTP_PASS"),
        ("HTTPS_PROXY", "HTTPS_PROXY"),
        ("MY_API_TOKEN", "MY_API_TOKEN"),
        (DROPIN, "SMTP_PASS"),
    ):
        refused = output(f"adopt {subject}", run(
            "remedy", "adopt", inventory, "--host", twin.name, subject, "--issue", "t#1"
        ))  # fmt: skip
        assert refused.returncode == 2 and name in refused.stderr, refused.stderr
        assert "looks like a secret" in refused.stderr or subject == DROPIN, refused.stderr
    assert "`--adopt-secret HTTPS_PROXY`" in said["adopt HTTPS_PROXY"], said["adopt HTTPS_PROXY"]
    assert sorted(p.name for p in (tmp_path / "settings").iterdir()) == ["all-proxy.yaml"]

    deploy = output("pyinfra -vv", run(
        "pyinfra", "-y", "-vv", "--data", "restart=now", inventory, "deploys/converge.py"
    ))  # fmt: skip
    assert deploy.returncode == 0, deploy.stderr[-4000:]
    assert ">>> " in deploy.stderr  # -vv: each command as it runs
    # the setting's value went to the host in those commands (remedy.nix holds it)
    remedy_nix = f"{fixtures.NIXOS_DIR}/hosts/{fixtures.FLAKE_HOST}/remedy.nix"
    assert "s3ttingpw" in twin.exec(["cat", remedy_nix]).stdout
    for argv in (("remedy", "audit"), ("remedy", "audit", "--json")):
        done = output(" ".join(argv), run(*argv))
        assert done.returncode == 0 and twin.name in done.stdout, done.stdout + done.stderr
    after = tmp_path / "after.prom"
    output("converge", run("remedy", "converge", inventory, "--textfile", str(after)))
    output("status after", run("remedy", "status", inventory, "--json"))
    for path in (tmp_path / "audit.jsonl", prom, after):
        said[path.name] = path.read_text()

    found = [
        f"{where}: {name}"
        for where, text in said.items()
        for name, value in PLANTED.items()
        if value in text
    ]
    assert found == [], found
