"""The run's state across pyinfra's two passes: nothing written at prepare leaks."""

from __future__ import annotations

import dataclasses

from pyinfra.api import FunctionCommand
from pyinfra.context import ctx_host, ctx_state
from pyinfra_testing.util import FakeState, create_host

from remedy.core import desired
from remedy.core.plan import RestoreRun, plan_restore
from remedy.core.settings import from_host_data
from remedy.operations import serving
from tests.operations.test_operation_cases import recorded


def run_op(op, r: RestoreRun, executing: bool, **kwargs):
    state = FakeState()
    state.is_executing = executing
    host = create_host(state, name="cfx-llm2")
    host.log_styled = lambda *a, **k: None
    with ctx_state.use(state), ctx_host.use(host):
        return list(op._inner(r, **kwargs)), host.noop_description


def test_a_failure_found_at_prepare_is_found_again_at_execute_not_stopped_earlier():
    snap = recorded("serving.HostSnapshot", "fresh")
    unit = dataclasses.replace(snap.unit, fragment_view=None)  # no store script
    snap = dataclasses.replace(snap, unit=unit)
    s = from_host_data("cfx-llm2", {"durable": False})
    r = RestoreRun("cfx-llm2", s, snap, plan_restore(snap, s, desired.ALL))

    commands, _ = run_op(serving.runtime_override_written, r, executing=False)
    assert r.failed and "no start script" in r.failed
    assert [type(c) for c in commands] == [FunctionCommand]

    r.begin_execution()  # what pyinfra's first operation_start does (remedy.operations.run)
    assert r.failed is None and not r.stopped
    commands, noop = run_op(serving.runtime_override_written, r, executing=True)
    assert noop is None and [type(c) for c in commands] == [FunctionCommand]
    assert "no start script" in r.failed  # its own reason, not "stopped earlier: …"


def test_begin_execution_keeps_a_signal_received_during_prepare():
    snap = recorded("serving.HostSnapshot", "fresh")
    s = from_host_data("cfx-llm2", {})
    r = RestoreRun("cfx-llm2", s, snap, plan_restore(snap, s))
    r.restarts, r.override_removed, r.interrupted = 1, True, "interrupted by SIGINT"
    r.begin_execution()
    assert (r.restarts, r.override_removed) == (0, False)
    assert r.interrupted == "interrupted by SIGINT"
