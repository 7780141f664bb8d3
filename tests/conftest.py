"""Shared fixtures. Twin tests boot real twins and always power them off."""

from __future__ import annotations

# pyinfra's CLI package runs gevent's monkey.patch_all() when imported (pyinfra-testing
# imports it). Patching halfway through a session breaks subprocess for later tests, so
# patch first, as pyinfra's own CLI does.
from gevent import monkey

monkey.patch_all()

import itertools
import os

import pytest

from remedy.core import probe
from remedy.twin import machine

_counter = itertools.count()


def _twin_name() -> str:
    return f"t{os.getpid() % 100000}-{next(_counter)}"


class TwinFactory:
    def __init__(self):
        self.names: list[str] = []

    def __call__(self, *, with_emergency_override: bool = False) -> machine.Twin:
        name = _twin_name()
        self.names.append(name)
        return machine.up(
            name, with_emergency_override=with_emergency_override, progress=lambda _m: None
        )

    def close(self):
        for name in self.names:
            try:
                machine.down(name, progress=lambda _m: None)
            except Exception as exc:  # keep powering the others off
                print(f"could not take twin {name} down: {exc}")


@pytest.fixture(scope="session", autouse=True)
def _clear_dead_test_twins():
    """A killed test run can leave a test twin's overlay mounted and its slot taken;
    remove such leftovers (names t<pid>-<n>, no supervisor). Live twins are left alone."""
    import re

    for t in machine.all_twins():
        if re.fullmatch(r"t\d+-\d+", t.name) and not t.running:
            machine.down(t.name, progress=lambda _m: None)
    yield


@pytest.fixture
def make_twin():
    if os.environ.get("REMEDY_SKIP_TWIN") == "1":
        pytest.skip("REMEDY_SKIP_TWIN=1")
    factory = TwinFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def twin(make_twin):
    return make_twin()


def probe_inside(twin: machine.Twin) -> probe.ProbeResult:
    """Send the field-notes tool call from inside the twin."""
    proc = twin.exec(probe.curl_argv(twin.server_url, "Qwen/Qwen3.6-27B"), check=False)
    return probe.read_curl_output((proc.stdout + "\n" + proc.stderr).splitlines())


def wait_probe(twin: machine.Twin, timeout: float = 60) -> probe.ProbeResult:
    """Probe until the server answers (it loads for a few seconds after a restart)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        result = probe_inside(twin)
        if result.outcome != probe.UNREACHABLE or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_restore(twin: machine.Twin, *extra: str, audit_log=None, debug: bool = False):
    """``pyinfra inventory/twin.py deploys/restore_toolcalling.py -y`` on one twin."""
    import subprocess

    argv = ["pyinfra", "-y", "--limit", twin.name, *extra]
    if debug:
        argv.append("--debug")
    argv += ["inventory/twin.py", "deploys/restore_toolcalling.py"]
    env = dict(os.environ)
    if audit_log is not None:
        env["REMEDY_AUDIT_LOG"] = str(audit_log)
    return subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT, env=env, timeout=900)


def remedy_json(*argv: str):
    """Run ``remedy ARGV --json``; (exit code, parsed document)."""
    import json
    import subprocess

    proc = subprocess.run(
        ["remedy", *argv, "--json"], capture_output=True, text=True, cwd=PROJECT, timeout=300
    )
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"remedy {' '.join(argv)}: not JSON: {proc.stdout!r} {proc.stderr!r}"
        ) from None
    return proc.returncode, doc


def unit_props(twin: machine.Twin) -> dict:
    out = twin.exec(
        ["systemctl", "show", "tenstorrent-serving.service", "-p", "MainPID", "-p", "NRestarts"]
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def server_starts(twin: machine.Twin) -> int:
    """How many times the model server finished loading (its own log line, per process)."""
    out = twin.exec(
        ["journalctl", "-q", "-u", "tenstorrent-serving.service", "-o", "cat"], check=False
    ).stdout
    return out.count("Application startup complete")


def twin_inventory(path, twin: machine.Twin, **data):
    """Write a pyinfra inventory file at PATH holding TWIN only, with DATA over its data."""
    path.write_text(
        "from remedy.twin.machine import inventory_hosts\n"
        f"hosts = [(n, {{**d, **{data!r}}}) for n, d in inventory_hosts() if n == {twin.name!r}]\n"
    )
    return path
