"""Shared fixtures. Twin tests boot real twins and always power them off."""

from __future__ import annotations

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
