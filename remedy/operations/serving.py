"""Serving operations: the /run override (remove or write), restart, verification.

Each takes plain values (``remedy.core.run.steps``) and decides, when it runs, from
the facts it reads then: what systemd runs, its MainPID, memory, the probe. Every
file written on a host goes to a temporary name in the same directory, gets its
exact mode and owner, and is renamed into place.
"""

from __future__ import annotations

import time

from pyinfra import host, state
from pyinfra.api import operation

from facts.memory import MemoryHeadroom
from facts.serving import ServingUnit, ToolCallProbe
from remedy.core.config import restarts
from remedy.core.config.host_data import HostData
from remedy.core.programs import commands
from remedy.core.readings import probe
from remedy.core.run import plan
from remedy.core.run.stop import NOT_STOPPED, StopRequest
from remedy.operations import journal
from remedy.operations.argv import command, ran, read
from remedy.operations.memory import CONTINGENT, refusal
from remedy.operations.said import gave_up, lost, say

PROSE_ROUNDS = 3  # probe facts in a row that stay in prose (each asks DEFAULT_TRIES times)


@operation(is_idempotent=False)
def runtime_override_removed(
    journal_path: str, run_id: str, unit: str, dropin: str, scripts: list[str], skip=None
):
    """Remove the stale /run override (the managed drop-in, every /run drop-in of UNIT
    that sets ExecStart, and SCRIPTS) and daemon-reload, before the switch, so the
    durable configuration takes over with a single restart. Not when the drain
    postponed the restart: the override keeps live right until then.

    + journal_path: the run journal (a postponed restart)
    + run_id: this run
    + unit: the serving unit
    + dropin: the managed /run drop-in
    + scripts: the /run start scripts the overrides ran
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if state.is_executing and (why := _postponed(journal_path, run_id)):
        host.noop(f"kept: {why}")
        return
    # The same command as the manual script: the managed drop-in and every /run drop-in
    # of the unit that sets ExecStart (never other runtime drop-ins), and their scripts.
    yield command(commands.runtime_overrides_removed(unit, dropin, *scripts))
    yield command(commands.daemon_reload())


@operation(is_idempotent=False)
def runtime_carriers_removed(unit: str, paths: list[str], skip=None):
    """Remove the /run drop-ins of UNIT in PATHS, which carry only data settings (what
    `remedy adopt` made a setting of) that the next boot now holds, and daemon-reload:
    after the verify, so a durable path that fails leaves them holding live right. The
    running server keeps what it started with: no restart.

    + unit: the serving unit
    + paths: the drop-ins (remedy.core.config.volatile.carriers, the planner's choice)
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    host.log_styled(f"the next boot holds what {', '.join(paths)} carried", fg="blue")
    yield command(commands.remove_files(*paths))
    yield command(commands.daemon_reload())


def _drain(server_url: str, timeout_s: int, stop: StopRequest):
    """Poll /metrics once a second (one poll per round trip, so a STOP request is seen
    between two) until no request is in flight, the server has no /metrics or does not
    answer, or TIMEOUT_S passed: (the last answer, its command's result, a stop request)."""
    deadline = time.monotonic() + timeout_s
    said_at = time.monotonic()
    while True:
        ran = read(commands.drain(server_url, 0))
        found = restarts.parse_drain(ran.stdout if ran.ok else "")
        if found.outcome != "busy" or time.monotonic() >= deadline:
            return found, ran, None
        if stopping := stop.why:
            return found, ran, stopping
        if time.monotonic() - said_at >= 10:
            host.log_styled(
                f"{found.running} running, {found.waiting} waiting; "
                f"{max(deadline - time.monotonic(), 0):.0f}s left",
                fg="blue",
            )
            said_at = time.monotonic()
        time.sleep(1)


def _postponed(journal_path: str, run_id: str) -> str | None:
    """Why this run's restart was postponed (the drain), or None."""
    return journal.read(journal_path, run_id).get("restart_postponed")


@operation()
def drained(
    journal_path: str,
    run_id: str,
    server_url: str,
    timeout_s: int,
    urgent: bool,
    contingent: bool = False,
    stop: StopRequest = NOT_STOPPED,
    skip=None,
):
    """Wait for an idle server before the restart: poll vLLM's /metrics until
    vllm:num_requests_running and vllm:num_requests_waiting are both 0, bounded by
    TIMEOUT_S. Past the bound an URGENT restart goes ahead and says how many requests
    it cuts; a window restart is postponed (the run journal says so: no override goes,
    the switch only sets the boot default, nothing restarts). A server without /metrics
    (404) is treated as idle, and said. A check: it changes nothing.

    + journal_path: the run journal (a postponed restart goes there)
    + run_id: this run
    + server_url: the server, as the host sees it
    + timeout_s: drain_timeout_s
    + urgent: the restart is for a setting that cannot wait
    + contingent: part of the fallback of a durable plan
    + stop: the run's stop request (SIGINT, SIGTERM) ends the wait
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if not state.is_executing:
        host.noop(
            CONTINGENT
            if contingent
            else f"will wait up to {timeout_s}s for no request in flight ({server_url}/metrics)"
        )
        return
    if why := _postponed(journal_path, run_id):
        host.noop(f"restart postponed already: {why}")
        return
    host.log_styled(
        f"waiting up to {timeout_s}s for an idle server ({server_url}/metrics)", fg="blue"
    )
    found, ran, stopped = _drain(server_url, timeout_s, stop)
    if stopped:
        host.noop(f"{stopped} while waiting for an idle server: nothing restarts")
        return
    if found.outcome == "idle":
        host.noop("the server is idle: no request in flight")
    elif found.outcome == "unreachable":
        host.noop(f"the server does not answer ({found.detail or ran.why}): nothing to drain")
    else:
        said_, postponed = _after_drain(found, server_url, timeout_s, urgent)
        if postponed:  # the switch, the override and the restart read it from the journal
            yield from journal.record(journal_path, run_id, None, restart_postponed=postponed)
            return
        host.noop(said_)
    yield from ()  # a check: every answer above is a noop with its reason


def _after_drain(found, server_url, timeout_s, urgent) -> tuple[str, str | None]:
    """What the drain's answer FOUND (no /metrics, load unknown, still busy) means for
    the restart, said and logged: (what to say, why the restart is postponed or None)."""
    if found.outcome == "no-metrics":
        note_ = f"{server_url}/metrics answers 404: no request count, treated as idle"
        host.log_styled(note_, fg="yellow")
        say(notes=[note_])
        return note_, None
    if found.outcome == "unknown" and urgent:
        message = (
            f"load unknown ({found.detail}): restarting anyway (a setting that cannot "
            "wait); whatever is in flight is cut"
        )
        host.log_styled(message, fg="yellow")
        say(notes=[message])
        return message, None
    if urgent:
        cut = found.in_flight
        message = (
            f"still {found.running} running, {found.waiting} waiting after {timeout_s}s: "
            f"restarting anyway (a setting that cannot wait), cutting {cut} request(s)"
        )
        host.log_styled(message, fg="yellow")  # counted at the restart, read once more then
        return message, None
    if found.outcome == "unknown":
        why = f"load unknown ({found.detail}): the window restart is postponed to the next run"
    else:
        why = (
            f"{found.in_flight} request(s) still in flight after drain_timeout_s="
            f"{timeout_s}: the window restart is postponed to the next run"
        )
    host.log_styled(why, fg="yellow")
    say(restart_postponed=why)
    return why, why


def _in_place(view, s: HostData, deferred=()) -> bool:
    """What systemd runs is a /run override with the wanted parser and environment, but
    for the DEFERRED settings (judged by effect: a hand-made override that works is left
    alone)."""
    running = view.exec_start or ""
    return running.startswith("/run/") and not plan.serving_lacks(view, s, deferred)


@operation(is_idempotent=False)
def runtime_override_written(
    journal_path: str,
    run_id: str,
    host_data: HostData,
    store_script: str | None,
    problem: str | None = None,
    contingent: bool = False,
    deferred: list[str] | None = None,
    write: bool = True,
    carried_env: dict[str, str] | None = None,
    carried_properties: dict[str, str] | None = None,
    carried_lacking: list[str] | None = None,
    sysctls: dict[str, str] | None = None,
    stop: StopRequest = NOT_STOPPED,
    skip=None,
):
    """Write the fallback: the override start script (STORE_SCRIPT with the wanted parser
    and environment, 0755) and the drop-in that points ExecStart at it (0644), with the
    data settings' variables and properties it carries, atomically, then daemon-reload
    and check the override is what systemd runs. A memory gate that would refuse the
    restart leaves nothing written (pending). The data settings' sysctls that differ
    live are set first (sysctl -w), whatever the override.

    + journal_path: the run journal (the MainPID the override took goes there)
    + run_id: this run
    + host_data: the host's data (parser, environment, unit, paths)
    + store_script: the start script in the store the override derives from
    + problem: why no override can be derived from it
    + contingent: part of the fallback of a durable plan
    + deferred: settings the restart policy leaves for later (an override without them
      that runs the wanted parser is kept)
    + write: the override is needed (else only the sysctls)
    + carried_env: the data settings' variables the drop-in carries
    + carried_properties: the data settings' [Service] properties the drop-in carries
    + carried_lacking: the carried settings live lacks (an override in place without
      them is written again)
    + sysctls: the data settings' sysctls that differ live: set with sysctl -w
    + stop: the run's stop request: then the override is put back, with no gate
    + skip: why this host does not need it
    """
    s = host_data
    stopping = stop.why
    if skip:
        host.noop(skip)
        return
    if contingent and not state.is_executing:
        host.noop(CONTINGENT)
        return
    if stopping:
        # Stopped between removing the old override and switching: put it back (no
        # restart), so the host is as before: never hermes on disk with no override.
        host.log_styled(f"{stopping}: putting the /run override back", fg="yellow")
    else:
        yield from _sysctls_set(run_id, sysctls or {})
    if not write:
        if not sysctls or stopping:
            host.noop("no /run override needed, and no sysctl to set")
        return
    if problem:
        yield from gave_up(problem, failed=problem)
        return
    unit = host.get_fact(ServingUnit, unit=s.unit)
    if unit is None:
        yield from gave_up(lost(s.unit), failed=lost(s.unit))
        return
    if _in_place(unit.now, s, tuple(deferred or ())) and not carried_lacking:
        if not sysctls or stopping:
            host.noop(f"the /run override is already in place with {s.tool_call_parser}")
        return
    if state.is_executing and not stopping and (refused := _override_refused(s)):
        yield from gave_up(**refused)
        return
    yield from _override_writes(s, store_script, carried_env or {}, carried_properties or {})
    if not state.is_executing:
        return
    # Resumed after the daemon-reload ran: is the override what systemd runs now?
    unit = host.get_fact(ServingUnit, unit=s.unit)
    if unit is None:
        yield from gave_up(lost(s.unit), failed=lost(s.unit))
        return
    say(override_written=True)
    yield journal.written(journal_path, run_id, pid_at_override=unit.main_pid or 0)
    if unit.now.exec_start != s.override_script:
        why = (
            f"the /run override is written but systemd runs ExecStart={unit.now.exec_start} "
            f"set by {unit.now.exec_start_via}: that file shadows {s.override_dropin} "
            "(drop-ins apply in lexical order of file name; /etc beats /run for the same name)"
        )
        yield from gave_up(why, failed=why)


def _sysctls_set(run_id: str, sysctls: dict[str, str]):
    """Each data setting's sysctl that differs live, with sysctl -w. One that fails is
    said, as the manual script says it, and the step goes on: the override that holds
    tool calling never waits on a data setting."""
    for key, value in sorted(sysctls.items()):
        argv = commands.sysctl_written(key, value)
        if not state.is_executing:
            yield command(argv)
            continue
        done = yield from ran(run_id, argv)
        if not done.ok:
            note_ = f"could not set {key}={value} ({done.why}): the fallback does not carry it"
            host.log_styled(note_, fg="yellow")
            say(notes=[note_])


def _override_refused(s: HostData) -> dict | None:
    """What to give up with when the memory gate leaves the override unwritten, or None.
    Written and loaded, the override would be what the next start runs, by systemd or a
    person, with no gate: nothing is loaded, and it is said to be pending."""
    headroom = host.get_fact(MemoryHeadroom)
    if headroom is None:
        return {"why": lost("MemAvailable"), "failed": lost("MemAvailable")}
    if why := refusal(s.min_mem_available_gb, headroom):
        pending = (
            f"{why} Pending: the /run override ({s.override_dropin}) is not "
            "written, so no later start takes it without the gate; run again once "
            "MemAvailable is back above the threshold."
        )
        return {"why": pending, "refused": pending, "notes": [pending]}
    return None


def _override_writes(s: HostData, store_script: str | None, env: dict, properties: dict):
    """The override's start script and drop-in (with the data settings' variables ENV
    and properties PROPERTIES), each written atomically, then the daemon-reload."""
    script_dir = s.override_script.rsplit("/", 1)[0]
    dropin_dir = s.override_dropin.rsplit("/", 1)[0]
    # both places first: a read-only /run/systemd/system left the script without its drop-in
    yield command(commands.writable(script_dir, dropin_dir))
    yield command(commands.make_dir(script_dir))
    script = commands.override_script_argv(store_script, s.tool_call_parser, s.required_env)
    yield command(commands.written_atomically(s.override_script, "0755", script, "root:root"))
    yield command(commands.make_dir(dropin_dir))
    text = commands.dropin_text(s.override_script, {**env, **s.required_env}, properties)
    dropin = commands.text_argv(text)
    yield command(commands.written_atomically(s.override_dropin, "0644", dropin, "root:root"))
    yield command(commands.daemon_reload())


@operation(is_idempotent=False)
def restarted(
    journal_path: str,
    run_id: str,
    unit: str,
    stage: str,
    pid_before: int | None,
    override_ran_before: bool,
    min_gb: float,
    contingent: bool = False,
    may_restart: bool = True,
    reason: str = "",
    server_url: str | None = None,
    skip=None,
):
    """Restart UNIT unless something restarted it already in this run (the switch, or
    the rollback onto the override), or it still runs an override that was parsed
    before the run, or the drain postponed the restart. Memory-gated: a refusal fails
    the step.

    + journal_path: the run journal (the MainPID the override took)
    + run_id: this run
    + unit: the serving unit
    + stage: "durable" or "fallback"
    + pid_before: MainPID when the run read the host
    + override_ran_before: the /run override ran and was parsed before the run
    + min_gb: min_mem_available_gb
    + contingent: part of the fallback of a durable plan
    + may_restart: the restart policy allows a restart in this run (a fallback after a
      failed durable path restarts only then, or onto an override it wrote)
    + reason: why the policy allows it (for the audit)
    + server_url: the server, whose /metrics is read once more just before the restart
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if contingent and not state.is_executing:
        host.noop(CONTINGENT)
        return
    if state.is_executing:
        if why := _postponed(journal_path, run_id):
            host.noop(f"not restarting: {why}")
            return
        now = host.get_fact(ServingUnit, unit=unit)
        if now is None:
            yield from gave_up(lost(unit), failed=lost(unit))
            return
        running = now.active_state == "active" and now.main_pid
        if stage == "fallback" and running:
            at_override = journal.read(journal_path, run_id).get("pid_at_override")
            if why := _no_fallback_restart(now, at_override, pid_before, override_ran_before):
                host.noop(why)
                return
            if not may_restart and not at_override:
                host.noop("the restart policy allows no restart now; nothing new to run")
                return
        if stage == "durable" and running and now.main_pid != pid_before:
            message = (
                f"already restarted (pid {pid_before} -> {now.main_pid}) by "
                "nixos-rebuild switch; not restarting again"
            )
            host.log_styled(message, fg="blue")
            say(restarts=1, restart_reason=f"the switch activated the proven system; {reason}")
            host.noop(message)
            return
        headroom = host.get_fact(MemoryHeadroom)
        if headroom is None:
            yield from gave_up(lost("MemAvailable"), failed=lost("MemAvailable"))
            return
        if why := refusal(min_gb, headroom):
            yield from gave_up(why, refused=why)
            return
        cut = cut_by_restart(server_url)
        host.log_styled(f"restarting {unit}", fg="blue")
        cut_said = {"requests_cut": cut} if cut else {}
        say(restarts=1, restart_reason=f"{stage}: {reason}", **cut_said)
    yield command(commands.restart(unit))


def _no_fallback_restart(now, at_override, pid_before, override_ran_before) -> str | None:
    """Why the fallback does not restart a unit that runs (NOW): it restarted onto the
    override already (pid AT_OVERRIDE), or still runs the override it ran before."""
    if at_override and now.main_pid != at_override:
        return (
            f"already restarted onto the /run override (pid {at_override} -> "
            f"{now.main_pid}); not restarting again"
        )
    if override_ran_before and now.main_pid == pid_before:
        return (
            f"pid {now.main_pid} still runs the override it ran before this run "
            "(parsed then); not restarting"
        )
    return None


def cut_by_restart(server_url: str | None) -> int:
    """What is in flight right now, read once more just before a restart: a request that
    arrived after the drain's idle read is cut by the restart, and counted (0 when the
    load cannot be read: the drain said so)."""
    if not server_url:
        return 0
    found = restarts.parse_drain(read(commands.drain(server_url, 0)).stdout)
    if found.outcome != "busy":
        return 0
    host.log_styled(
        f"{found.in_flight} request(s) in flight at the restart ({found.running} running, "
        f"{found.waiting} waiting): the restart cuts them",
        fg="yellow",
    )
    return found.in_flight


@operation()
def toolcalling_verified(
    journal_path: str,
    run_id: str,
    host_data: HostData,
    stage: str,
    pid_before: int | None,
    parsed_before: bool,
    contingent: bool = False,
    deferred: list[str] | None = None,
    skip=None,
):
    """Wait (bounded by ``ready_timeout_s``) for the server, then require the effective
    parser to be the wanted one and the tool-call probe to be ``parsed``. A check: it
    changes nothing. In the durable stage a failure gives up the durable path.

    + journal_path: the run journal (a postponed restart)
    + run_id: this run
    + host_data: the host's data (the server, the model, the parser, timeouts)
    + stage: "durable" or "fallback"
    + pid_before: MainPID when the run read the host
    + parsed_before: the probe was parsed when the run read the host
    + contingent: part of the fallback of a durable plan
    + deferred: settings the restart policy leaves for a window or the next boot
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if not state.is_executing:
        host.noop(CONTINGENT if contingent else "will wait for the server, then send a tool call")
        return
    s, later = host_data, tuple(deferred or ())
    now = host.get_fact(ServingUnit, unit=s.unit)
    if now is None:
        yield from gave_up(lost(s.unit), failed=lost(s.unit))
        return
    if _postponed(journal_path, run_id):  # live waits for the postponed restart
        later = later + tuple(k for k in plan.SERVING_PARSER_ENV if s.urgency(k) != "now")
    if parsed_before and now.main_pid == pid_before and not plan.serving_lacks(now.now, s, later):
        # what the record says after the run is a probe of now, not an earlier step's
        found = host.get_fact(
            ToolCallProbe, url=s.server_url, model=s.model, timeout_s=s.probe_timeout_s
        )
        if found is not None:
            say(probe_after=found.outcome)
        host.noop("nothing was restarted and the probe was parsed before the run")
        return
    why, unverified = _wait_until_parsed(s, later)
    if why is None and unverified:
        host.log_styled(f"NOT VERIFIED: {unverified}", fg="yellow")
        say(unverified=unverified)
        host.noop(f"not verified: {unverified}")
    elif why is None:
        host.noop("verified: the tool-call probe is parsed")
    elif stage == "durable":
        host.log_styled(f"durable path failed verification: {why}; rolling back", fg="red")
        yield from gave_up(f"verification failed: {why}", verification=why)
    else:
        reason = f"fallback verification failed: {why}"
        yield from gave_up(reason, failed=reason, verification=why)


def _wait_until_parsed(s: HostData, deferred=()) -> tuple[str | None, str | None]:
    """Poll the probe (bounded by ready_timeout_s): (None, None) once parsed with the
    wanted parser and environment, (None, why) if the configuration is right and the
    model keeps answering in prose, else (why not, None)."""
    deadline = time.monotonic() + s.ready_timeout_s
    started, last_note = time.monotonic(), 0.0
    unparsed_in_a_row = prose_in_a_row = 0
    while True:
        result = host.get_fact(
            ToolCallProbe, url=s.server_url, model=s.model, timeout_s=s.probe_timeout_s
        )
        if result is None:
            return lost("the tool-call probe"), None
        elapsed = time.monotonic() - started
        prose_in_a_row = prose_in_a_row + 1 if result.inconclusive else 0
        if result.parsed or prose_in_a_row >= PROSE_ROUNDS:
            unit = host.get_fact(ServingUnit, unit=s.unit)
            if unit is None:
                return lost(s.unit), None
            lacking = plan.serving_lacks(unit.now, s, deferred)
            say(probe_after=result.outcome)
            if lacking:
                return (
                    f"the probe is parsed but systemd runs without {'; '.join(lacking)} "
                    f"({unit.now.parser.describe('parser')})"
                ), None
            if result.inconclusive:
                # The configuration is right; the model keeps answering in prose. Not a
                # reason to roll back or restart: report it, and let the next run check.
                return None, (
                    f"{unit.now.parser.describe('parser')}, but the model answered in prose "
                    f"{PROSE_ROUNDS * probe.DEFAULT_TRIES} times: {result.reason}"
                )
            host.log_styled(
                f"verified after {elapsed:.0f}s: "
                f"{unit.now.parser.describe('parser')}; probe parsed",
                fg="green",
            )
            return None, None
        if result.outcome == probe.UNPARSED:
            unparsed_in_a_row += 1
            if unparsed_in_a_row >= 3:
                say(probe_after=result.outcome)
                return f"the probe stays unparsed: {result.reason}", None
        if time.monotonic() > deadline:
            say(probe_after=result.outcome)
            return (
                f"not ready after {s.ready_timeout_s}s (ready_timeout_s): "
                f"{result.outcome}: {result.reason}"
            ), None
        if elapsed - last_note >= 5:
            host.log_styled(
                f"waiting for the server ({result.outcome}, {elapsed:.0f}s of "
                f"{s.ready_timeout_s}s)",
                fg="blue",
            )
            last_note = elapsed
        time.sleep(1)


@operation(is_idempotent=False)
def outcome_reported(
    plan_path: str,
    summary: str,
    old_rev: str | None = None,
    flake_input: str = "tt-stack",
    unhealthy: str | None = None,
    flow: list | None = None,
    stop: StopRequest = NOT_STOPPED,
):
    """Say what was done, from pyinfra's results of the steps before (a pure outcome,
    ``remedy.core.run.outcome``), and fail the run (exit != 0) if it failed, was refused
    or interrupted, or leaves a server that does not answer tool calls unrestarted.

    + plan_path: the plan's path (noop, durable, fallback)
    + summary: the plan's reasons
    + old_rev: the input's locked rev before the run
    + flake_input: the input's name
    + unhealthy: why the plan leaves tool calls broken, or None
    + flow: the run's steps and their pyinfra results so far (``(step, meta)`` pairs)
    + stop: the run's stop request
    """
    if not state.is_executing:
        host.noop(summary)
        return
    from remedy.core.run.outcome import outcome
    from remedy.operations.results import step_results

    done = outcome(
        plan_path,
        summary.split("; ") if summary else [],
        step_results(flow or []),
        old_rev=old_rev,
        flake_input=flake_input,
        interrupted=stop.why,
        unhealthy=unhealthy,
        ended=False,
    )
    if done.result == "unhealthy":
        # the audit says "unhealthy" and the run exits non-zero: they agree
        yield from gave_up(unhealthy or done.line)
        return
    if done.result in ("failed", "refused", "interrupted"):
        why = (
            done.details["interrupted"]
            or done.details["failed"]
            or done.details["refused"]
            or done.details["durable_failed"]
        )
        yield from gave_up(f"restore FAILED: {why}; {done.line}")
        return
    fallback = done.path != plan_path or plan_path == "fallback"
    host.log_styled(f"outcome: {done.line}", fg="yellow" if fallback else "green")
    host.noop(done.line)
