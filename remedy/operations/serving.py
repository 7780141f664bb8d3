"""Serving operations: the /run override (remove or write), the drain, the restart,
the verification, and the outcome.

Each takes its step's values (``remedy.core.programs.step_values``) and runs its host
program (``remedy/host/steps/*.sh``), which decides when it runs, from the host as it
is then: what systemd runs, its MainPID, memory, the probe, the run journal. Every
file written on a host goes to a temporary name in the same directory, gets its
exact mode and owner, and is renamed into place.
"""

from __future__ import annotations

import dataclasses
import time

from pyinfra import host, state
from pyinfra.api import operation

from remedy.core.programs import step_values as sv
from remedy.core.readings import answer as answer_core
from remedy.core.run.stop import NOT_STOPPED, StopRequest
from remedy.operations import program

DRAIN_SLICE_S = 5  # one call of the drain's program waits at most this long


@operation(is_idempotent=False)
def runtime_override_removed(values: sv.RemoveOverride, stop: StopRequest = NOT_STOPPED):
    """Remove the stale /run override (the managed drop-in, every /run drop-in of the
    unit that sets ExecStart, and the /run start scripts they ran) and daemon-reload,
    before the switch, so the durable configuration takes over with a single restart.
    Not when the drain postponed the restart: the override keeps live right until then.

    + values: the step's values (``step_values.RemoveOverride``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from program.operate(values, stop=stop)


@operation(is_idempotent=False)
def runtime_carriers_removed(values: sv.RemoveCarriers, stop: StopRequest = NOT_STOPPED):
    """Remove the /run drop-ins of the unit (its items), which carry only data settings
    (what `remedy adopt` made a setting of) that the next boot now holds, and
    daemon-reload: after the verify, so a durable path that fails leaves them holding
    live right. The running server keeps what it started with: no restart.

    + values: the step's values (``step_values.RemoveCarriers``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from program.operate(values, stop=stop)


@operation()
def drained(values: sv.Drain, stop: StopRequest = NOT_STOPPED):
    """Wait for an idle server before the restart: read vLLM's /metrics until
    vllm:num_requests_running and vllm:num_requests_waiting are both 0 and no
    connection to the server's port is busy (a response still streaming is not in the
    engine's gauges; without the gauges every open connection counts), bounded by
    timeout_s. Past the bound an urgent restart (a setting that cannot wait, or
    --restart now) goes ahead and says how many requests it cuts; a window restart is
    postponed (the run journal says so: no override goes, the switch only sets the boot
    default, nothing restarts). The program waits in slices, so a stop request ends the
    wait between two.

    + values: the step's values (``step_values.Drain``)
    + stop: the run's stop request (SIGINT, SIGTERM) ends the wait
    """
    will = (
        f"will wait up to {values.timeout_s}s for no request in flight "
        f"({values.server_url}/metrics)"
    )
    yield from program.operate(values, stop=stop, prepare=will, act=_drain, watch=stop)


def _drain(values: sv.Drain, watch: StopRequest):
    """The drain at execution: the program waits a slice a call; a stop request ends
    the wait between two."""
    deadline = time.monotonic() + values.timeout_s
    first = True
    while True:
        left = max(int(deadline - time.monotonic()), 0)
        now = dataclasses.replace(
            values, wait_s=min(DRAIN_SLICE_S, left), last=left <= DRAIN_SLICE_S, first=first
        )
        a = program.checked(now)  # the program says it waits, the first time it does
        if a.verdict != answer_core.WAIT:
            break
        first = False
        if stopping := watch.why:
            host.noop(f"{stopping} while waiting for an idle server: nothing restarts")
            return
    if a.verdict == answer_core.NOOP:
        host.noop(a.text)
        return
    if a.verdict != answer_core.ACT:
        yield from program.give_up(a)
        return
    # a postponement: recorded in the run journal, without waiting again
    yield from program.step(dataclasses.replace(values, decided=a.text))


@operation(is_idempotent=False)
def runtime_override_written(values: sv.Override, stop: StopRequest = NOT_STOPPED):
    """Write the fallback: the override start script (the durable start script with the
    wanted parser and variables, 0755) and the drop-in that points ExecStart at it
    (0644), with the data settings' variables and properties it carries, atomically,
    then daemon-reload and check the override is what systemd runs. A memory gate that
    would refuse the restart leaves nothing written (pending). The data settings'
    sysctls that differ live are set first (sysctl -w), whatever the override.

    + values: the step's values (``step_values.Override``)
    + stop: the run's stop request: then the override is put back, with no gate
    """
    yield from program.operate(values, stop=stop, act=_override, watch=stop)


def _override(values: sv.Override, watch: StopRequest):
    if watch.why:
        # Stopped between removing the old override and switching: put it back (no
        # restart), so the host is as before: never hermes on disk with no override.
        host.log_styled(f"{watch.why}: putting the /run override back", fg="yellow")
        values = dataclasses.replace(values, putting_back=True)
    yield from program.step(values)


@operation(is_idempotent=False)
def restarted(values: sv.Restart, stop: StopRequest = NOT_STOPPED):
    """Restart the unit unless something restarted it already in this run (the switch,
    or the rollback onto the override), or it still runs an override that was parsed
    before the run, or the drain postponed the restart. Memory-gated: a refusal fails
    the step.

    + values: the step's values (``step_values.Restart``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from program.operate(values, stop=stop)


@operation()
def toolcalling_verified(values: sv.Verify, stop: StopRequest = NOT_STOPPED):
    """Wait (bounded by ``ready_timeout_s``) for the server, then require the serving
    process to have the wanted parser and variables and the tool-call probe to be
    ``parsed``. A check: it changes nothing. In the durable stage a failure gives up
    the durable path.

    + values: the step's values (``step_values.Verify``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    will = "will wait for the server, then send a tool call"
    yield from program.operate(values, stop=stop, prepare=will, act=program.check)


@operation(is_idempotent=False)
def outcome_reported(values: sv.Outcome, stop: StopRequest = NOT_STOPPED):
    """Say what was done: the host's outcome program (``remedy/host/steps/outcome.sh``)
    reads what the steps answered in this run and classifies it (result, path, exit
    code, the line), as the manual script's end does; the run fails (exit != 0) when
    it failed, was refused or interrupted, or leaves a server that does not answer tool
    calls unrestarted. It changes nothing.

    + values: the step's values (``step_values.Outcome``)
    + stop: the run's stop request (a run stopped is interrupted)
    """
    if not state.is_executing:
        host.noop(values.reasons)
        return
    a = program.checked(dataclasses.replace(values, stopped=stop.why or ""))
    line = a.said.get("outcome_line") or a.text
    host.log_styled(f"outcome: {line}", fg="green" if a.said.get("outcome_exit") == 0 else "yellow")
    if a.verdict == answer_core.NOOP:
        host.noop(line)
        return
    yield from program.give_up(a)


@operation(is_idempotent=False)
def run_begun(values: sv.Begin, stop: StopRequest = NOT_STOPPED):
    """Record where the run begins in the run journal (the system profile and
    /run/current-system, the checkout's HEAD, the serving unit's main PID), before
    anything changes: the rollback returns to exactly them, the restart and the verify
    know what restarted. A plan made for a host that has changed since stops here.

    + values: the step's values (``step_values.Begin``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    will = "will record where the run begins (the run journal)"
    yield from program.operate(values, stop=stop, prepare=will, act=program.check)
