"""Serving operations: the /run override (remove or write), restart, verification.

Every file written on a host goes to a temporary name in the same directory,
gets its exact mode and owner, and is renamed into place.
"""

from __future__ import annotations

import time

from pyinfra import host, state
from pyinfra.api import operation

from facts.memory import MemoryHeadroom
from facts.serving import ServingUnit, ToolCallProbe
from remedy.core import commands, plan, probe
from remedy.core.plan import RestoreRun
from remedy.operations.argv import command, failure, run
from remedy.operations.memory import gate

PROSE_ROUNDS = 3  # probe facts in a row that stay in prose (each asks DEFAULT_TRIES times)


@operation(is_idempotent=False)
def runtime_override_removed(r: RestoreRun):
    """Remove the stale /run override (start script and drop-in) and daemon-reload, before
    the switch, so the durable configuration takes over with a single restart.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.remove_override:
        host.noop("no runtime override to remove")
        return
    s = r.settings
    scripts = [s.override_script]
    running = r.before.unit.now.exec_start
    if running and running.startswith("/run/") and running != s.override_script:
        scripts.append(running)
    # The same command as the manual script: the managed drop-in and every /run drop-in
    # of the unit that sets ExecStart (never other runtime drop-ins), and their scripts.
    yield command(commands.runtime_overrides_removed(s.unit, s.override_dropin, *scripts))
    yield command(commands.daemon_reload())
    r.override_removed = True


def _override_problem(r: RestoreRun) -> str | None:
    """Why no override can be derived from the store start script, if it cannot."""
    store = r.before.unit.store_script
    if store is None:
        return f"{r.settings.unit} has no start script in its fragment to derive an override from"
    if store.parser_flag_count != 1:
        return (
            f"{store.path}: --tool-call-parser appears {store.parser_flag_count} times, "
            "expected exactly once; not deriving an override from it"
        )
    return None


def override_in_place(r: RestoreRun) -> bool:
    """The override runs with the wanted parser and env, and this run has not removed it."""
    return not r.override_removed and plan.override_in_place(r.before, r.settings)


@operation(is_idempotent=False)
def runtime_override_written(r: RestoreRun):
    """Write the fallback: /run/tt-serving-override/start (the store start script with the
    wanted parser and environment, 0755) and the drop-in that points ExecStart at it (0644),
    atomically, then daemon-reload and check the override is what systemd runs.

    + r: the host's RestoreRun
    """
    if r.interrupted and r.override_removed and not r.switched:
        # Stopped between removing the old override and switching: put it back (no
        # restart), so the host is as before: never hermes on disk with no override.
        host.log_styled(f"{r.interrupted}: putting the /run override back", fg="yellow")
    elif reason := r.idle_reason("fallback"):
        host.noop(reason)
        return
    elif not r.plan.write_override:
        host.noop("the server runs the wanted parser and environment; no override needed")
        return
    s = r.settings
    if problem := _override_problem(r):
        yield from _fail(r, problem)
        return
    if override_in_place(r):
        host.noop(f"the /run override is already in place with {s.tool_call_parser}")
        return
    if state.is_executing and not r.interrupted and (pending := _pending_override(r)):
        # Written and loaded, the override would be what the next start runs, by systemd
        # or a person, with no gate: leave nothing loaded, and say what is pending.
        r.refused = pending
        r.notes.append(pending)
        host.log_styled(pending, fg="red")
        host.noop(pending)
        return
    store = r.before.unit.store_script
    script_dir = s.override_script.rsplit("/", 1)[0]
    dropin_dir = s.override_dropin.rsplit("/", 1)[0]
    yield command(commands.make_dir(script_dir))
    script = commands.override_script_argv(store.path, s.tool_call_parser, s.required_env)
    yield command(commands.written_atomically(s.override_script, "0755", script, "root:root"))
    yield command(commands.make_dir(dropin_dir))
    dropin = commands.text_argv(commands.dropin_text(s.override_script, s.required_env))
    yield command(commands.written_atomically(s.override_dropin, "0644", dropin, "root:root"))
    yield command(commands.daemon_reload())
    # Resumed after the daemon-reload ran: is the override what systemd runs now?
    r.override_written = True
    unit = host.get_fact(ServingUnit, unit=s.unit)
    r.pid_at_override = unit.main_pid
    if unit.now.exec_start != s.override_script:
        yield from _fail(
            r,
            (
                f"the /run override is written but systemd runs ExecStart={unit.now.exec_start} "
                f"set by {unit.now.exec_start_via}: that file shadows {s.override_dropin} "
                "(drop-ins apply in lexical order of file name; /etc beats /run for the same name)"
            ),
        )


def _pending_override(r: RestoreRun) -> str | None:
    """Why the fallback's override must wait (the memory gate refuses the restart that
    would take it), or None."""
    refusal = r.memory_refusal(host.get_fact(MemoryHeadroom))
    if refusal is None:
        return None
    return (
        f"{refusal} Pending: the /run override ({r.settings.override_dropin}) is not "
        "written, so no later start takes it without the gate; run again once "
        "MemAvailable is back above the threshold."
    )


def _fail(r: RestoreRun, why: str):
    r.failed = why
    host.log_styled(why, fg="red")
    yield failure()


@operation(is_idempotent=False)
def restarted(r: RestoreRun, stage: str = "durable"):
    """Restart the server only if what systemd would start changed since it started (and
    nothing else restarted it already), or if it is not running. Memory-gated.

    + r: the host's RestoreRun
    + stage: "durable" or "fallback"
    """
    if reason := r.idle_reason(stage):
        host.noop(reason)
        return
    if stage == "durable" and not r.plan.restart_expected:
        host.noop("the effective ExecStart did not change")
        return
    ran_override_before = plan.override_in_place(r.before, r.settings) and (
        r.before.probe.parsed or r.before.probe.inconclusive
    )
    if stage == "fallback" and override_in_place(r) and ran_override_before:
        host.noop("the override was already running and parsed")
        return
    s = r.settings
    if state.is_executing:
        unit = host.get_fact(ServingUnit, unit=s.unit)
        running = unit.active_state == "active" and unit.main_pid
        if stage == "fallback" and running:
            if r.pid_at_override is not None and unit.main_pid != r.pid_at_override:
                message = (
                    f"already restarted onto the /run override (pid {r.pid_at_override} -> "
                    f"{unit.main_pid}); not restarting again"
                )
                host.noop(message)
                return
            if ran_override_before and unit.main_pid == r.unit_pid_before:
                host.noop(
                    f"pid {unit.main_pid} still runs the override it ran before this run "
                    "(parsed then); not restarting"
                )
                return
        if (
            unit.active_state == "active"
            and unit.main_pid
            and unit.main_pid != r.unit_pid_before
            and not r.override_written
        ):
            r.restarts += 1
            message = (
                f"already restarted (pid {r.unit_pid_before} -> {unit.main_pid}) by "
                "nixos-rebuild switch; not restarting again"
            )
            host.log_styled(message, fg="blue")
            host.noop(message)
            return
        if stage not in r.gated:  # every restart passes the gate, planned or not
            yield from gate(r, stage)
            if r.refused:
                return
        host.log_styled(f"restarting {s.unit}", fg="blue")
    yield command(commands.restart(s.unit))
    r.restarts += 1


@operation()
def toolcalling_verified(r: RestoreRun, stage: str = "durable"):
    """Wait (bounded by ``ready_timeout_s``) for the server, then require the effective
    parser to be the wanted one and the tool-call probe to be ``parsed``.

    + r: the host's RestoreRun
    + stage: "durable" or "fallback"
    """
    if reason := r.idle_reason(stage):
        host.noop(reason)
        return
    if r.before.probe.parsed and not (
        r.restarts or r.switched or r.override_written
        if state.is_executing
        else r.plan.restart_expected
    ):
        host.noop("nothing was restarted and the probe was parsed before the run")
        return
    if not state.is_executing:
        host.noop("will wait for the server, then send a real tool call")
        return
    why = _wait_until_parsed(r)
    if why is None and r.unverified:
        host.log_styled(f"NOT VERIFIED: {r.unverified}", fg="yellow")
        host.noop(f"not verified: {r.unverified}")
    elif why is None:
        host.noop("verified: the tool-call probe is parsed")
    elif stage == "durable":
        r.verification_failed = why
        r.durable_failed = f"verification failed: {why}"
        host.log_styled(f"durable path failed verification: {why}; rolling back", fg="red")
    else:
        yield from _fail(r, f"fallback verification failed: {why}")


def _wait_until_parsed(r: RestoreRun) -> str | None:
    """Poll the probe (bounded by ready_timeout_s); None once parsed with the wanted
    parser and environment, else why not."""
    s = r.settings
    deadline = time.monotonic() + s.ready_timeout_s
    started, last_note = time.monotonic(), 0.0
    unparsed_in_a_row = prose_in_a_row = 0
    while True:
        result = host.get_fact(
            ToolCallProbe, url=s.server_url, model=s.model, timeout_s=s.probe_timeout_s
        )
        elapsed = time.monotonic() - started
        prose_in_a_row = prose_in_a_row + 1 if result.inconclusive else 0
        if result.parsed or prose_in_a_row >= PROSE_ROUNDS:
            unit = host.get_fact(ServingUnit, unit=s.unit)
            lacking = plan.serving_lacks(unit.now, s)
            if lacking:
                why = (
                    f"the probe is parsed but systemd runs without {'; '.join(lacking)} "
                    f"({unit.now.parser.describe('parser')})"
                )
                break
            r.probe_after = result
            if result.inconclusive:
                # The configuration is right; the model keeps answering in prose. Not a
                # reason to roll back or restart: report it, and let the next run check.
                r.unverified = (
                    f"{unit.now.parser.describe('parser')}, but the model answered in prose "
                    f"{PROSE_ROUNDS * probe.DEFAULT_TRIES} times: {result.reason}"
                )
                return None
            host.log_styled(
                f"verified after {elapsed:.0f}s: "
                f"{unit.now.parser.describe('parser')}; probe parsed",
                fg="green",
            )
            return None
        if result.outcome == probe.UNPARSED:
            unparsed_in_a_row += 1
            if unparsed_in_a_row >= 3:
                why = f"the probe stays unparsed: {result.reason}"
                break
        if time.monotonic() > deadline:
            why = (
                f"not ready after {s.ready_timeout_s}s (ready_timeout_s): "
                f"{result.outcome}: {result.reason}"
            )
            break
        if elapsed - last_note >= 5:
            host.log_styled(
                f"waiting for the server ({result.outcome}, {elapsed:.0f}s of "
                f"{s.ready_timeout_s}s)",
                fg="blue",
            )
            last_note = elapsed
        time.sleep(1)
    r.probe_after = result
    return why


def outcome(r: RestoreRun) -> str:
    s = r.settings
    if r.plan.path == "noop":
        return "nothing to do: " + "; ".join(r.plan.reasons)
    parts = [f"path {r.path_taken}"]
    if r.new_rev and r.new_rev != r.old_rev:
        parts.append(f"{s.flake_input} {(r.old_rev or '?')[:12]} -> {r.new_rev[:12]}")
    if r.durable_failed:
        parts.append(f"durable path abandoned: {r.durable_failed}")
    if r.rollback_failed:
        parts.append(f"ROLLBACK FAILED: {r.rollback_failed}")
    if r.unverified:
        parts.append(f"NOT VERIFIED: {r.unverified}")
    if r.fallback_active or r.path_taken == "fallback":
        parts.append(
            "VOLATILE: tool calling rests on the /run override until the durable "
            "fix is deployed; a reboot reverts it"
        )
    parts.append(f"restarts {r.restarts}")
    parts += r.notes
    return "; ".join(parts)


@operation(is_idempotent=False)
def outcome_reported(r: RestoreRun):
    """Say what was done; fail the run (exit != 0) if verification failed at any stage.

    + r: the host's RestoreRun
    """
    if state.is_executing and (unhealthy := r.unhealthy):
        # the audit says "unhealthy" and the run exits non-zero: they agree
        host.log_styled(unhealthy, fg="red")
        yield failure()
        return
    if not (r.failed or r.verification_failed or r.refused or r.interrupted):
        if state.is_executing:
            host.log_styled(f"outcome: {outcome(r)}", fg="yellow" if r.fallback_active else "green")
        host.noop(outcome(r))
        return
    if r.scratch:  # a scratch clone of an interrupted or refused run
        run(host, r.as_owner(commands.remove_tree(r.scratch)))
    why = r.interrupted or r.failed or r.verification_failed or r.refused
    host.log_styled(f"restore FAILED: {why}; {outcome(r)}", fg="red")
    yield failure()
