"""Starting a restore on a host and recording it when pyinfra is done.

``begin_restore`` is called from a deploy file, once per host, at prepare time, with
the process's run (``remedy.lifecycle.Run``, passed explicitly): one ``HostSnapshot``
read, the pure plan, and the decision printed (this is what ``--dry`` shows). The
audit lines are written by the run when it ends (its ``writer`` is ``write_records``),
from pyinfra's own record of which operations changed something, so recording does
not itself count as a change. Nothing here is module state: the run holds the hosts'
entries, the locks, the stop request and the recording.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import textwrap
import time
from pathlib import Path

import gevent
import yaml
from pyinfra import host, logger, state
from pyinfra.api.state import BaseStateCallback, StateStage
from pyinfra.context import ctx_host, ctx_state

from facts.nix import read_option_definitions
from facts.review import read_bump, read_system
from facts.serving import HostSnapshot, ToolCallProbe
from remedy import audit, connect, lifecycle
from remedy import lock as host_lock
from remedy.core.config import desired, volatile
from remedy.core.config import host_data as settings_mod
from remedy.core.config.host_data import HostData
from remedy.core.programs import builder as builder_core
from remedy.core.programs import commands
from remedy.core.readings.review import Review
from remedy.core.readings.snapshot import HostSnapshot as Snapshot
from remedy.core.run import outcome as outcome_core
from remedy.core.run import steps as steps_core
from remedy.core.run.plan import RestorePlan, plan_restore, unhealthy
from remedy.core.run.stop import StopRequest
from remedy.errors import ConfigError
from remedy.lifecycle import GIVEN_UP, Run
from remedy.operations import pyinfra_private
from remedy.operations.results import step_results

DEFAULT_RUNBOOK = "001"  # the runbook this deploy carries out when not run by `apply`
EXIT_LOCKED = 5  # another run holds the host lock


class HostStopped(SystemExit):
    """This host's run stops before its steps, with WHY (already audited). Under
    pyinfra's CLI (one host per process) it is the exit with CODE, as SystemExit; a
    fleet run (``remedy.fleet``) catches it per host: it fails that host only."""

    def __init__(self, code: int, why: str):
        super().__init__(code)
        self.why = why


@dataclasses.dataclass(frozen=True)
class Restore:
    """One host's run as planned: read once, decided, then carried out by its steps."""

    host: str
    host_data: HostData
    before: Snapshot
    plan: RestorePlan
    steps: steps_core.Steps
    stop: StopRequest
    # each step with its pyinfra result (an OperationMeta), as the deploy adds them:
    # what the outcome reads (``remedy.operations.results``)
    flow: list = dataclasses.field(default_factory=list)

    def as_owner(self, argv: list[str]) -> list[str]:
        checkout = self.before.checkout
        return commands.as_owner(checkout.owner, checkout.home, argv)


def begin_restore(
    run: Run, scope: tuple[str, ...] = desired.TOOL_CALLING, runbook: str = DEFAULT_RUNBOOK
) -> Restore:
    began = time.monotonic()
    project = Path(os.environ.get("REMEDY_PROJECT", os.getcwd()))
    if why := run.stop.why:  # stopped while pyinfra loaded and connected
        _record_early(run, project, runbook, "interrupted", f"{why} before the run began")
        raise SystemExit(f"remedy: {host.name}: {why} before the run began; nothing changed")
    try:
        s = settings_mod.from_host_data(host.name, host.data)
    except ConfigError as exc:
        _record_early(run, project, runbook, "failed", f"bad host data: {exc}")
        raise SystemExit(f"remedy: {exc}") from None
    if not _dry_run() and not run.fleet:
        _watch_deadline(run, ctx_state.get(), ctx_host.get(), s.deadline_s, began)
    if not _dry_run():
        # One run per host, whatever starts it: taken before the host is read, so the
        # plan sees what the other run left. Its session keeps this run's journal on the
        # host; a journal left there is a run that died, recorded now.
        header = host_lock.journal_header(run.run_id, _runbook_of(project, runbook)[0])
        try:
            lock = host_lock.acquire(
                host, s.unit, s.lock_wait_s, host_lock.holder_text(), logger.warning, header
            )
            run.locks[host.name] = lock
            if lock.dead is not None:
                _record_dead(lock.dead)
        except host_lock.LockHeld as exc:
            logger.error(f"remedy: {exc}")
            _record_early(run, project, runbook, "locked", str(exc))
            raise HostStopped(EXIT_LOCKED, str(exc)) from None
        except host_lock.LockError as exc:
            logger.warning(f"remedy: {exc}; going on without the host lock")
    snap = host.get_fact(HostSnapshot, **s.snapshot_kwargs())
    if snap is None:
        _record_early(run, project, runbook, "failed", "could not read the host")
        raise SystemExit(f"remedy: {host.name}: could not read the host (see above)")
    if blocked := volatile.unshowable(snap, s):  # every step would lose sight of the unit
        _record_early(run, project, runbook, "failed", blocked[0])
        raise SystemExit(f"remedy: {host.name}: {blocked[0]}")
    if snap.journal.problem:
        logger.warning(f"{host.name}: {snap.journal.problem}")
    if snap.journal.manual_runs and not _dry_run():
        for run_id in audit.import_manual_runs(
            audit.log_path_for(dict(host.data.dict())), host.name, snap.journal.manual_runs
        ):
            logger.info(f"{host.name}: audited the manual run {run_id} (from the host)")
    snap = _wait_while_starting(s, snap)
    plan = plan_restore(snap, s, scope)
    builder = _builder(run, project, runbook, s)
    if builder is not None and (lock := run.locks.get(host.name)) is not None:
        lock.builds_also_on(builder_core.builds_stopped(builder))
    if plan.managed_text is not None:
        # The run writes remedy's file: name what its forced values win over, from one
        # evaluation of the configuration without it (not here when a builder builds).
        defs = read_option_definitions(host, s, snap, scope, builder is None)
        snap = dataclasses.replace(snap, definitions=defs)
        plan = plan_restore(snap, s, scope)
    if (plan.rebuild or plan.finish_switch) and snap.tools.systemd_run:
        _wait_for_other_switch(run, project, runbook, s)
    allowed = None
    if s.trusted_signers:  # read here, on the machine that runs remedy; sent with the check
        allowed = _allowed_signers(run, project, runbook, s.trusted_signers)
    runbook_id, issues = _runbook_of(project, runbook)  # the commits name them
    ran = steps_core.Ran(runbook_id, tuple(issues))
    planned = steps_core.plan_steps(
        plan, snap, s, run.run_id, unhealthy(plan, snap), builder, host.name, ran
    )
    if allowed is not None:
        planned = steps_core.with_allowed_signers(planned, allowed)
    r = Restore(host.name, s, snap, plan, planned, run.stop)
    if _dry_run() and plan.update_input and not planned.resuming:
        _review(Review(bump=read_bump(host, s, snap)))
        if s.pinned_rev or allowed is not None:  # what only the fetched commit tells
            _preview_bump(r, allowed)
    if _dry_run():
        builder_name = None if s.build_host == "serving" else s.build_host
        _review(Review(system=read_system(host, snap, builder_name)))
    logger.info(plan.summary(host.name))
    if plan.rebuild and not planned.resuming:
        said = _built_on(builder) if builder is not None else _bounded(s)
        logger.info(
            "\n".join(textwrap.wrap(f"{host.name}: {said}", 76,
                                     subsequent_indent="  ", break_on_hyphens=False))
        )  # fmt: skip
    if planned.resuming:
        logger.info(f"{host.name}: {planned.resuming}")
    run.entries[host.name] = r
    start_recording(run, state, project, runbook)
    return r


def _watch_deadline(run: Run, st, h, limit_s: float, began: float) -> None:
    """Host H's deadline in a run of pyinfra's CLI (a fleet bounds its hosts itself,
    remedy.fleet): LIMIT_S (host data host_deadline_s) from BEGAN, as a fleet counts it.
    Past it, while the run's steps go on, the host is given up and named: its connection
    is closed (a command waiting on a frozen host ends with it, and pyinfra fails the
    host), its lock dropped (releasing it would wait on the host), and the audit records
    it as given up, in the step it was in."""

    def watch() -> None:
        gevent.sleep(max(began + limit_s - time.monotonic(), 0))
        if st.current_stage >= StateStage.Disconnect or run.phase != lifecycle.RUNNING:
            return  # its steps are over
        if h.name in run.given_up or h in st.failed_hosts:
            return
        gave_up = lifecycle.at_deadline(limit_s, run.in_progress)
        run.given_up[h.name] = gave_up
        run.locks.pop(h.name, None)
        # pyinfra indents a log line by 4: 76 columns of it fit 80
        said = textwrap.wrap(f"remedy: {h.name}: {gave_up.why}", 76, subsequent_indent="  ",
                             break_on_hyphens=False)  # fmt: skip
        logger.error("\n".join(said))
        connect.close(h)

    gevent.spawn(watch)


def start_recording(run: Run, state, project: Path, runbook: str) -> None:
    """Once a run: its writer of the audit lines, the step journal, and the project's
    commits, read now (at exit pyinfra's gevent hub is already winding down). The run
    is claimed before the read, which yields to the other hosts' greenlets (a fleet
    prepares its hosts at once): it ran git for every host before."""
    if run.recording is not None:
        return
    commits: dict = {}
    run.recording = {"state": state, "commits": commits, "runbook": _runbook_of(project, runbook)}
    run.writer = write_records
    state.add_callback_handler(_StepJournal(run))
    commits.update(audit.commits_of(project))


def _bounded(s) -> str:
    """What the memory bound bounds when this host builds (issue 44 item 7)."""
    cap = f", at most nix_memory_max_gb={s.nix_memory_max_gb:g} GB" if s.nix_memory_max_gb else ""
    return (
        "will evaluate and build here, memory-gated; bounded in memory: the owner's nix "
        "in a transient scope (MemoryMax), and nix-daemon.service's builds by a "
        "runtime MemoryMax for the run, restored after (the builds run in the daemon's "
        "cgroup, not in the scope); the bound is what the host can spare above "
        f"min_mem_available_gb={s.min_mem_available_gb:g} GB{cap}"
    )


def _built_on(b) -> str:
    if b.signed:
        trust = "signatures checked against trusted-public-keys"
        check = "verify the whole closure's contents and signatures (nix store verify -r)"
    else:
        trust = "--no-check-sigs: builder_unsigned_copy, root trusts the builder's user"
        check = "verify the whole closure's contents only (nix store verify -r --no-trust)"
    return (
        f"will build on the builder {b.label}, not here: the bumped configuration and "
        f"the flake checks; then copy the built system's closure here (nix copy --from "
        f"{b.store}, {trust}), {check} and read its start script; no nix "
        "evaluates here"
    )


def _builder(run: Run, project: Path, runbook: str, s: HostData):
    """The builder that host data build_host names, from its data in the inventory (the
    inventory's check made sure it is a builder there), or None: this host builds."""
    if s.build_host == "serving":
        return None
    other = state.inventory.get_host(s.build_host)
    if other is None:  # checked when the inventory loaded; a --data override may differ
        why = f"build_host names {s.build_host!r}, which is not a host of the inventory"
        _record_early(run, project, runbook, "failed", why)
        raise SystemExit(f"remedy: {host.name}: {why}")
    try:
        where = f"{host.data.get('ssh_hostname') or host.name}:{host.data.get('ssh_port') or 22}"
        return settings_mod.builder_of(s, other.name, dict(other.data.dict()), host.name, where)
    except ConfigError as exc:
        _record_early(run, project, runbook, "failed", f"bad builder data: {exc}")
        raise SystemExit(f"remedy: {exc}") from None


def _wait_for_other_switch(run: Run, project: Path, runbook: str, s) -> None:
    """A switch that another holds (a person's nixos-rebuild, its transient unit): wait
    up to lock_wait_s, then stop before anything changes (exit 5, naming it)."""
    from remedy.core.readings import switch as switch_core

    if _dry_run():
        if holders := switch_holders(0):
            logger.warning(
                f"{host.name}: {switch_core.locked(holders, 0)} (a run waits up to "
                f"lock_wait_s={s.lock_wait_s:g} s for it, then exits {EXIT_LOCKED})"
            )
        return
    holders = switch_holders(0)
    if holders:
        logger.warning(f"{host.name}: waiting up to {s.lock_wait_s:g} s for: {'; '.join(holders)}")
        holders = switch_holders(s.lock_wait_s)
    if holders:
        why = switch_core.locked(holders, s.lock_wait_s)
        logger.error(f"remedy: {host.name}: {why}")
        _record_early(run, project, runbook, "locked", why)
        raise HostStopped(EXIT_LOCKED, f"{host.name}: {why}")


def _preview_bump(r: Restore, allowed: str | None) -> None:
    """--dry: say which rev the bump would take and its signature state (a fetch into a
    temporary repository on the host, as the checkout's owner; nothing else changes)."""
    from remedy.core.programs import signers
    from remedy.core.readings import nix as nix_core
    from remedy.operations.argv import run

    locked, s = r.before.flake_input, r.host_data
    remote = nix_core.git_remote(locked.url or "") if locked else None
    if remote is None:
        logger.info(f"{host.name}: the rev a bump takes is known once Nix fetches it")
        return
    argv = commands.preview_bump(remote, locked.ref, s.pinned_rev, allowed or "")
    ran = run(host, r.as_owner(argv))
    lines = ran.stdout.strip().splitlines()
    rev = next((ln[11:] for ln in lines if ln.startswith("would-take ")), None)
    if not ran.ok or rev is None:
        logger.warning(f"{host.name}: cannot tell which rev a bump would take: {ran.why}")
        return
    said = next((ln for ln in lines if ln.startswith("signature ")), "")
    signature = signers.parse_signature(said, rev)
    author = signature.author if signature else "?"
    if signature and allowed is not None:
        state = signature.describe()
    else:
        state = f"{rev[:12]} by {author} (no trusted_signers: not checked)"
    logger.info(f"{host.name}: the bump would take {s.flake_input} {rev}: {state}")


def _review(found) -> None:
    """--dry: the review before the switch (remedy.core.readings.review): the rev a bump
    takes, read from the remote without fetching; what a system built already (a run's
    proven build, a boot default that does not run) changes; nothing is built."""
    from remedy.core.config.secrets import masked

    if lines := found.folded(f"{host.name}: ", 76):
        logger.info("\n".join(masked(x) for x in lines))


def _allowed_signers(run: Run, project: Path, runbook: str, path: str) -> str:
    from remedy.core.programs.signers import check_allowed_signers

    try:
        text = Path(path).read_text()
        check_allowed_signers(text, path)
    except (OSError, UnicodeDecodeError, ConfigError) as exc:
        why = f"trusted_signers {path}: {exc.strerror if isinstance(exc, OSError) else exc}"
        _record_early(run, project, runbook, "failed", why)
        raise SystemExit(f"remedy: {host.name}: {why}") from None
    return text


def _dry_run() -> bool:
    return "--dry" in sys.argv


def _wait_while_starting(s, snap):
    """A server that is starting (activating, or started less than ready_timeout_s ago
    and not answering yet) is waited for, never restarted: a second restart while vLLM
    loads only starts the load over. Then the host is read again."""
    started = snap.unit.active_for_s
    starting = snap.unit.active_state == "activating" or (
        snap.unit.active_state == "active"
        and snap.probe.outcome == "unreachable"
        and not snap.probe.timed_out  # refused: still loading; a hang times out
        and started is not None
        and started < s.ready_timeout_s
    )
    if not starting or _dry_run():
        return snap
    deadline = time.monotonic() + s.ready_timeout_s - (started or 0)
    logger.info(
        f"{host.name}: {s.unit} is starting (active for {started or 0:.0f}s): waiting up "
        f"to {max(deadline - time.monotonic(), 0):.0f}s for it to answer, not restarting"
    )
    while time.monotonic() < deadline:
        result = host.get_fact(
            ToolCallProbe, url=s.server_url, model=s.model, timeout_s=s.probe_timeout_s
        )
        if result.outcome != "unreachable":
            break
        time.sleep(2)
    return host.get_fact(HostSnapshot, **s.snapshot_kwargs()) or snap


def _record_early(run: Run, project: Path, runbook: str, result: str, why: str) -> None:
    """A run that stops before its operations (bad data, the host lock, an unreadable
    host) is audited too, with the reason. A dry run records nothing."""
    if _dry_run():
        return
    rb = _runbook_of(project, runbook)
    record = audit.AuditRecord(
        host=host.name,
        result=result,
        runbook=rb[0],
        commits=audit.commits_of(project),
        issues=rb[1],
        path="none",
        details={"failed": why, "run_id": run.run_id},
    )
    try:
        audit.append(audit.log_path_for(dict(host.data.dict())), record)
    except Exception as exc:
        print(f"remedy: could not write the audit line for {host.name}: {exc!r}", file=sys.stderr)
    lock = run.locks.pop(host.name, None)
    if lock is not None:  # recorded: this run's journal goes with the lock
        lock.release(result)


def not_started(run: Run, h, why: str) -> None:
    """Host H's run was held back before any step that changes it (a fleet's rollout
    stopped, or its rotation_out failed): audited now as "not started", with WHY, and
    its lock released; the records written at the end leave it out."""
    run.entries.pop(h.name, None)
    if run.recording is None:
        return
    runbook = run.recording["runbook"][0]
    project = Path(os.environ.get("REMEDY_PROJECT", os.getcwd()))
    with ctx_host.use(h):
        _record_early(run, project, runbook, "not started", why)


def restore_of(run: Run, name: str) -> Restore | None:
    """Host NAME's run as this process planned it (None: it stopped before its plan)."""
    return run.entries.get(name)


def record_runs(run: Run) -> None:
    """Write every run's audit line now, not at exit: a fleet run (``remedy.fleet``)
    reports from them while this process goes on. Once only."""
    run.write()
    run.entries.clear()


def _record_dead(dead: host_lock.DeadRun) -> None:
    """The audit line of a run that died holding this host's lock (its journal), once:
    not if that run wrote its own line (a lost connection, where the process lived on)."""
    path = audit.log_path_for(dict(host.data.dict()))
    try:
        if any((r.details or {}).get("run_id") == dead.run_id for r in audit.read(path, host.name)):
            logger.warning(f"remedy: {host.name}: an earlier run died: {dead.reason}")
            return
    except Exception:  # an unreadable log: record it all the same
        pass
    logger.warning(f"remedy: {host.name}: recording an earlier run that died: {dead.reason}")
    record = audit.AuditRecord(
        host=host.name,
        result="killed",
        runbook=dead.runbook,
        commits={},
        issues=[],
        path="unknown",
        operations=[
            {"name": name, "changed": result == "changed", "succeeded": result != "error"}
            for name, result in dead.steps
        ],
        details={"run_id": dead.run_id, "failed": dead.reason, "command": dead.command},
    )
    try:
        audit.append(path, record)
    except Exception as exc:
        print(f"remedy: could not write the audit line for {host.name}: {exc!r}", file=sys.stderr)


class _StepJournal(BaseStateCallback):
    """Each operation's result goes into the run's step journal on its host (the host
    lock's session), so a run that dies is recorded by the next one; and the step in
    progress is the run's (for a run killed during it)."""

    def __init__(self, run: Run):
        self.run = run

    def _journal(self, st, h, op_hash, failed: bool) -> None:
        """pyinfra completes the operation's meta right after this callback returns: the
        journal line is sent from a greenlet that runs once it has (the next switch)."""
        lock = self.run.locks.get(h.name)
        if lock is None:
            return
        name = ", ".join(st.get_op_meta(op_hash).names)

        def send() -> None:
            meta = pyinfra_private.meta_in(st, h, op_hash)
            for _ in range(100):
                if meta is None or meta.operation_meta.is_complete():
                    break
                gevent.sleep(0.01)
            done = meta is not None and meta.operation_meta.is_complete()
            changed = done and meta.operation_meta.did_change()
            lock.step(name, "error" if failed else "changed" if changed else "noop")

        gevent.spawn(send)

    def operation_start(self, st, op_hash) -> None:
        self.run.in_progress = ", ".join(st.get_op_meta(op_hash).names)

    def operation_host_success(self, st, h, op_hash, retry_count: int = 0) -> None:
        self._journal(st, h, op_hash, False)

    def operation_host_error(self, st, h, op_hash, retry_count: int = 0, max_retries: int = 0):
        self._journal(st, h, op_hash, True)


def _runbook_of(project: Path, default: str = DEFAULT_RUNBOOK) -> tuple[str, list[str]]:
    """(id, issues) of the runbook this run carries out: the one `remedy runbooks apply`
    names (REMEDY_RUNBOOK), else this deploy's own; its issues from its file. Read lean
    (one file, no schema): every deploy run pays for it."""
    runbook_id = (os.environ.get("REMEDY_RUNBOOK") or default).strip()
    runbook_id = runbook_id.zfill(3) if runbook_id.isdigit() else runbook_id
    files = sorted((project / "runbooks").glob(f"{runbook_id}-*.yaml"))
    try:
        st = files[0].stat()
        found, issues = _runbook_file(files[0], st.st_mtime_ns, st.st_size)
        return found, list(issues)
    except (IndexError, OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        logger.warning(f"remedy: runbook {runbook_id}: cannot read its issues ({exc!r})")
        return runbook_id, []


@functools.lru_cache(maxsize=16)
def _runbook_file(path: Path, _mtime_ns: int, _size: int) -> tuple[str, tuple[str, ...]]:
    """(id, issues) of the runbook file PATH as it is now (its time and size are the
    key): parsed once a run, not once a host."""
    data = yaml.load(path.read_text(encoding="utf-8"),
                     Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # fmt: skip
    return str(data["id"]), tuple(str(i) for i in data.get("issues") or [])


def write_records(run: Run, killed: str | None = None) -> None:
    """The run's audit lines, one a host that planned (the run's writer), from pyinfra's
    results of its steps; KILLED: why a second signal ended it (then no lock is
    released: exiting closes their sessions)."""
    st, commits = run.recording["state"], run.recording["commits"]
    runbook = run.recording["runbook"]
    if st.current_stage < StateStage.Execute:
        return  # a dry run records nothing
    for h in st.inventory.iter_activated_hosts():
        r = run.entries.get(h.name)
        if r is None:
            continue
        results = step_results(r.flow)
        # each host's own: one whose steps were over before a stop is not interrupted,
        # one given up is recorded as such, in the step it was in
        gave_up = run.given_up.get(h.name)
        done = outcome_core.outcome(
            r.plan.path,
            r.plan.reasons,
            results,
            old_rev=r.before.flake_input.rev if r.before.flake_input else None,
            flake_input=r.host_data.flake_input,
            interrupted=gave_up.why
            if gave_up and gave_up.result != GIVEN_UP
            else run.host_interrupted(h.name, killed),
            host_failed=h in st.failed_hosts,
            unhealthy=unhealthy(r.plan, r.before),
            given_up=gave_up.why if gave_up and gave_up.result == GIVEN_UP else None,
        )
        touched = any(
            x.status == outcome_core.CHANGED
            for x in results
            if x.op
            in (
                "serving.restarted",
                "nix.system_switched",
                "serving.runtime_override_written",
                "nix.system_rolled_back",
            )
        )
        after = done.details.pop("probe_after") or (None if touched else r.before.probe.outcome)
        details = {
            **done.details,
            "managed_conflict": r.plan.managed_conflict,
            "bump_blocked": r.plan.bump_blocked,
            # why the durable path was not taken (e.g. Nix's version unreadable)
            "durable_blockers": list(r.plan.durable_blockers),
            "run_id": run.run_id,
            # the line the deploy printed: `remedy converge` shows it to the person
            "outcome": done.line,
        }
        if r.steps.resuming:
            details["resumed"] = r.steps.resuming
        if gave_up and gave_up.in_step:
            details["in_step"] = gave_up.in_step
        record = audit.AuditRecord(
            host=h.name,
            result=done.result,
            runbook=runbook[0],
            commits=commits,
            issues=runbook[1],
            path=done.path,
            operations=[
                {
                    "name": x.name,
                    "changed": x.status == outcome_core.CHANGED,
                    "succeeded": x.status in (outcome_core.CHANGED, outcome_core.NO_CHANGE),
                    **({"executed": False} if x.status == outcome_core.NOT_RUN else {}),
                    **({"why": x.said["why"]} if x.said.get("why") else {}),
                }
                for x in results
            ],
            probe_before=r.before.probe.outcome,
            probe_after=after,
            dirty_override=os.environ.get("REMEDY_FORCE_DIRTY") == "1",
            details=details,
        )
        try:
            audit.append(audit.log_path_for(dict(h.data.dict())), record)
        except Exception as exc:  # never hide the run's own outcome behind the log
            print(f"remedy: could not write the audit line for {h.name}: {exc!r}", file=sys.stderr)
        lock = run.locks.pop(h.name, None)
        if lock is not None and killed is None:  # ended and recorded: its journal goes
            lock.release(done.result)
        # killed (a signal handler): no round trip; exiting closes the lock's session


def switch_holders(wait_s: float) -> list[str]:
    """Who holds the switch after waiting up to WAIT_S for them to finish (none: free):
    a read at prepare, before the run plans its switch."""
    from remedy.operations.argv import read

    deadline = time.monotonic() + wait_s
    while True:
        found = read(commands.switch_holders())
        holders = commands.parse_holders(found.stdout) if found.ok else []
        if not holders or time.monotonic() >= deadline:
            return holders
        time.sleep(1)
