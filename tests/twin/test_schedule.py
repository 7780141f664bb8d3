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
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PROJECT, probe_inside

pytestmark = pytest.mark.twin

# A cache, as the twins' root file systems under /var/cache/remedy/twin are: derived
# (pip download of the list below), keyed by what it holds, written whole (a temporary
# directory renamed) and reused by any run; not remedy's state, so the suite's check of
# root's real state (tests/conftest.py) leaves /var/cache/remedy out. Its first fill needs
# the package registry.
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
    tmp = final.with_name(f"{final.name}.tmp{os.getpid()}")  # sessions fill it at once
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    argv = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(tmp),
            "--only-binary=:all:", "--python-version", py, "--implementation", "cp"]  # fmt: skip
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    subprocess.run([*argv, *DEPENDENCIES], check=True, timeout=900)
    (tmp / ".complete").write_text("")
    try:
        tmp.rename(final)
    except OSError:  # another session's came first: the same wheels
        shutil.rmtree(tmp, ignore_errors=True)
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


def inventory_for(mgmt, target, at: str = "/etc/remedy/fleet.py", **data) -> str:
    """An inventory inside MGMT for TARGET, at AT: its key and known_hosts copied in."""
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
    path = Path(mgmt.merged) / at.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "from remedy.inventory import checked_hosts\n\n"
        f"hosts = checked_hosts([({target.name!r}, {options!r})])\n"
    )
    return at


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
    # --reboot-if-needed: the timer's converge takes it (a volatile host, exit 3, is
    # never rebooted: its runs restore it as without the flag)
    installed = mgmt.exec(
        ["env", "REMEDY_PROJECT=/opt/remedy-src", "/opt/remedy/bin/remedy", "schedule",
         "install", inventory, "--interval", "20s", "--reboot-if-needed"],
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
    assert "--reboot-if-needed" in doc["command"], doc["command"]
    assert doc["timer"]["ActiveState"] == "active"

    removed = mgmt.exec(["/opt/remedy/bin/remedy", "schedule", "remove"], check=False)
    assert removed.returncode == 0, removed.stderr
    gone = mgmt.exec(["test", "-e", "/etc/systemd/system/remedy-converge.timer"], check=False)
    assert gone.returncode != 0


def service_props(twin) -> dict[str, str]:
    out = twin.exec(
        [
            "systemctl",
            "show",
            "remedy-converge.service",
            "-p",
            "ActiveState",
            "-p",
            "Result",
            "-p",
            "ExecMainStatus",
            "-p",
            "ExecMainExitTimestamp",
        ]
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)  # fmt: skip


def ended(twin, status: str | None = None) -> dict[str, str] | None:
    """The service's props once a run ended (with exit STATUS, if given)."""
    props = service_props(twin)
    done = props["ActiveState"] in ("inactive", "failed") and props["ExecMainExitTimestamp"]
    return props if done and status in (None, props["ExecMainStatus"]) else None


def test_a_schedule_with_a_blank_a_percent_and_a_dollar_in_its_paths_runs_as_given(
    make_twin, tmp_path
):
    """Issue 43 F5: a path with a blank was written unquoted into ExecStart= (every run
    exited 2), a % was expanded as a specifier (x%n.prom became
    xremedy-converge.service.prom), and status exited 0 after a run that exited 2, with a
    blank next. One twin is both the management host and the serving host it reads, in
    the seed's state (the /run override holds tool calling): a check exits 3."""
    twin = make_twin(with_emergency_override=True)
    install_remedy(twin, tmp_path)
    inventory = inventory_for(twin, twin, at="/etc/remedy/my fleet %n $HOME/fleet %n.py")
    textfile = "/var/lib/remedy metrics/x%n $HOME \\q\"it's.prom"
    twin.exec(["mkdir", "-p", str(Path(textfile).parent)])
    remedy = ["env", "REMEDY_PROJECT=/opt/remedy-src", "/opt/remedy/bin/remedy", "schedule"]
    installed = twin.exec(
        [*remedy, "install", inventory, "--check-only", "--interval", "20s",
         "--textfile", textfile],
        check=False, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, (installed.stdout + installed.stderr)[-2000:]

    # The timer's run reads the host and writes the textfile at the path given, no other
    first = wait_for("the first run to end", lambda: ended(twin), timeout=300)
    assert first["Result"] == "success" and first["ExecMainStatus"] in ("0", "3", "6"), first
    written = twin.exec(["ls", "-A", str(Path(textfile).parent)]).stdout.splitlines()
    assert written == [Path(textfile).name], written
    status = twin.exec([*remedy, "status", "--json"], check=False)
    doc = json.loads(status.stdout)
    assert doc["command"][1:] == ["converge", inventory, "--unattended", "--wait", "30",
                                  "--check", "--interval", "20s",
                                  "--textfile", textfile]  # fmt: skip
    # the run says its interval, for the alert on a run that is late (issue 45)
    said = twin.exec(["cat", textfile]).stdout
    assert f'remedy_run_interval_seconds{{host="{twin.name}"}} 20.0' in said, said
    assert status.returncode == doc["last_run"]["exit_code"] == int(first["ExecMainStatus"])

    # A run that exits 2 (the inventory now has a key remedy does not know): status says
    # so, with its code, and when the next run is
    bad = "from remedy.inventory import checked_hosts\n\n"
    bad += "hosts = checked_hosts([('h', {'no_such_key': 1})])\n"
    (Path(twin.merged) / inventory.lstrip("/")).write_text(bad)
    wait_for("a run that exits 2", lambda: ended(twin, "2"), timeout=300)
    status = twin.exec([*remedy, "status"], check=False)
    said = " ".join(status.stdout.split())
    assert status.returncode == 2, status.stdout + status.stderr
    assert ": exit 2 (bad input" in said and "no_such_key" in said, status.stdout
    (timer,) = [line for line in status.stdout.splitlines() if line.startswith("timer:")]
    assert re.search(r"next run \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", timer), timer
