"""Issue 10 on twins: the converge timer, installed in a management twin, under real systemd.

A second twin plays the management host: remedy is installed in it from a
wheelhouse built on this machine for the twin's Python (``pip install
--no-index``), with the project tree beside it. Its inventory points at the
serving twin over SSH. `remedy schedule install` writes the units and enables
the timer; systemd inside the management twin fires it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT, probe_inside

pytestmark = pytest.mark.twin

CACHE = Path("/var/cache/remedy/wheelhouse")
DEPENDENCIES = [
    "pip",
    "pyinfra>=3.10,<4",
    "jsonschema>=4.20",
    "click>=8.1",
    "gitpython>=3.1",
    "rich>=13",
    "PyYAML>=6",
    "prometheus-client>=0.20",
]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64"]  # fmt: skip


def wheelhouse(py: str) -> Path:
    """Binary wheels of remedy's dependencies for CPython PY ("3.13"), cached by the
    dependency list: built once with `pip download`, reused by later runs."""
    key = hashlib.sha256(json.dumps([py, DEPENDENCIES]).encode()).hexdigest()[:12]
    final = CACHE / f"cp{py.replace('.', '')}-{key}"
    if (final / ".complete").exists():
        return final
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    argv = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(tmp),
            "--only-binary=:all:", "--python-version", py, "--implementation", "cp"]  # fmt: skip
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    subprocess.run([*argv, *DEPENDENCIES], check=True, timeout=900)
    (tmp / ".complete").write_text("")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def install_remedy(mgmt, tmp_path: Path) -> None:
    """remedy in /opt/remedy (a venv) and its project tree in /opt/remedy-src."""
    py = mgmt.exec(
        ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    ).stdout.strip()
    wheels = wheelhouse(py)
    own = tmp_path / "own"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(own), PROJECT],
        check=True,
        timeout=600,
    )
    root = Path(mgmt.merged)
    shutil.copytree(wheels, root / "opt/wheelhouse", dirs_exist_ok=True)
    for wheel in own.glob("*.whl"):
        shutil.copy(wheel, root / "opt/wheelhouse")
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=PROJECT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        if rel.startswith("tests/"):
            continue
        dest = root / "opt/remedy-src" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(PROJECT) / rel, dest)
    pip = next((root / "opt/wheelhouse").glob("pip-*.whl")).name
    mgmt.exec(["python3", "-m", "venv", "--without-pip", "/opt/remedy"])
    mgmt.exec(
        ["/opt/remedy/bin/python", f"/opt/wheelhouse/{pip}/pip", "install", "-q",
         "--no-index", "--find-links", "/opt/wheelhouse", "remedy"],
        timeout=600,
    )  # fmt: skip


def inventory_for(mgmt, target, **data) -> str:
    """An inventory inside MGMT for TARGET: its key and known_hosts copied in."""
    inv = Path(mgmt.merged) / "etc/remedy"
    inv.mkdir(parents=True, exist_ok=True)
    target_data = target.inventory_data()
    shutil.copy(target_data["ssh_key"], inv / "target_key")
    (inv / "target_key").chmod(0o600)
    shutil.copy(target.known_hosts, inv / "known_hosts")
    options = dict(target_data)
    options.update(
        ssh_key="/etc/remedy/target_key",
        ssh_known_hosts_file="/etc/remedy/known_hosts",
        audit_log="/var/log/remedy/audit.jsonl",
        **data,
    )
    (inv / "fleet.py").write_text(
        "from remedy.inventory import checked_hosts\n\n"
        f"hosts = checked_hosts([({target.name!r}, {options!r})])\n"
    )
    return "/etc/remedy/fleet.py"


def audit_entries(mgmt) -> list[dict]:
    out = mgmt.exec(["cat", "/var/log/remedy/audit.jsonl"], check=False).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def wait_for(what: str, check, timeout: float = 240, interval: float = 3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_the_timer_in_a_management_twin_restores_a_rebooted_serving_twin(make_twin, tmp_path):
    from remedy.twin import machine

    target = make_twin()
    mgmt = make_twin()
    install_remedy(mgmt, tmp_path)
    inventory = inventory_for(mgmt, target, durable=False)  # the fallback path: volatile
    installed = mgmt.exec(
        ["env", "REMEDY_PROJECT=/opt/remedy-src", "/opt/remedy/bin/remedy", "schedule",
         "install", inventory, "--interval", "20s"],
        check=False, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    props = mgmt.exec(["systemctl", "show", "-P", "ActiveState", "remedy-converge.timer"])
    assert props.stdout.strip() == "active"

    # The first firing (OnBootSec) converges the target onto the /run fallback.
    first = wait_for("the first run's audit entry", lambda: audit_entries(mgmt))
    assert first[0]["host"] == target.name and first[0]["runbook"] == "006"
    assert probe_inside(target).outcome == "parsed"

    # A reboot wipes /run: the next firing (OnUnitActiveSec) restores it, with no person.
    before = len(audit_entries(mgmt))
    machine.reboot(target.name, progress=lambda _m: None)
    wait_for(
        "a run after the reboot that restores tool calling",
        lambda: len(audit_entries(mgmt)) > before and probe_inside(target).outcome == "parsed",
    )
    latest = audit_entries(mgmt)[-1]
    assert latest["result"] == "ok" and latest["path"] == "fallback", latest

    status = mgmt.exec(
        ["env", "REMEDY_PROJECT=/opt/remedy-src", "/opt/remedy/bin/remedy", "schedule",
         "status", "--json"],
        check=False,
    )  # fmt: skip
    doc = json.loads(status.stdout)
    assert doc["command"][1:3] == ["converge", inventory]
    assert doc["timer"]["ActiveState"] == "active"

    removed = mgmt.exec(["/opt/remedy/bin/remedy", "schedule", "remove"], check=False)
    assert removed.returncode == 0, removed.stderr
    gone = mgmt.exec(["test", "-e", "/etc/systemd/system/remedy-converge.timer"], check=False)
    assert gone.returncode != 0
