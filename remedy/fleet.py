"""Many hosts at once: read every host's snapshot, or converge them all in one pyinfra run.

``read_hosts`` reads (``remedy status``, ``converge --check``). ``converge_hosts``
runs ``deploys/converge.py`` on every host in this process, with pyinfra's own
parallel greenlets: each host's steps run on their own, through the rollout's gates
(``remedy.rollout``), and the report comes from what the run read and did (the
deploy's own snapshot, or one read after a change). A host that is down,
unreachable, has a bad key, holds another run's lock or fails a step fails only
itself: its reason is kept, the others go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from remedy import session
from remedy.core.config import host_data as settings_mod
from remedy.core.config.host_data import HostData
from remedy.core.readings.snapshot import HostSnapshot

# Where deploys/ and runbooks/ live: the checkout this package runs from, or, for an
# installed wheel, REMEDY_PROJECT (the schedule's service sets it).
PROJECT = Path(os.environ.get("REMEDY_PROJECT") or Path(__file__).resolve().parent.parent)


@dataclass
class HostRead:
    name: str
    host_data: HostData | None = None
    snapshot: HostSnapshot | None = None
    error: str | None = None  # why the host could not be read
    ssh: str = ""  # a pasteable ssh that reaches it as the inventory does


def read_hosts(
    inventory: str, limit: list[str] | None, progress: Callable[[str], None] = lambda _m: None
) -> list[HostRead]:
    """One remote read (facts.serving.HostSnapshot) per host, in parallel."""
    import gevent

    out: list[HostRead] = []
    with session.connected(inventory, limit) as (_state, hosts, failed):
        for name, why in failed.items():
            out.append(HostRead(name, error=f"could not connect over SSH: {why}"))
        greenlets = [gevent.spawn(_read_one, h, progress) for h in hosts]
        gevent.joinall(greenlets)
        out += [g.get() for g in greenlets]
        for r in out:
            r.ssh = ssh_of(_state.inventory.get_host(r.name))
    return sorted(out, key=lambda r: r.name)


def ssh_of(host) -> str:
    """HOST's pasteable ssh, from its pyinfra data (remedy.core.render.report)."""
    from remedy.core.render.report import ssh_command

    keys = ("ssh_hostname", "ssh_port", "ssh_user", "ssh_key", "ssh_known_hosts_file")
    return ssh_command(host.name, {k: host.data.get(k) for k in keys})


def _read_one(host, progress: Callable[[str], None], s: HostData | None = None) -> HostRead:
    """One remote read of HOST (facts.serving.HostSnapshot), with what remedy's forced
    values win over."""
    from facts.serving import HostSnapshot as SnapshotFact

    s = s or settings_mod.from_host_data(host.name, host.data)
    progress(f"{host.name}: reading the host")
    try:
        snap = host.get_fact(SnapshotFact, **s.snapshot_kwargs())
    except Exception as exc:  # a fact that cannot be parsed names itself
        return HostRead(host.name, s, error=f"the remote read failed: {exc}")
    if snap is None:
        return HostRead(host.name, s, error="the remote read failed")
    _import_manual_runs(host, snap, progress)
    snap = _with_definitions(host, s, snap)
    return HostRead(host.name, s, _with_review(host, s, snap))


def _with_review(host, s: HostData, snap: HostSnapshot) -> HostSnapshot:
    """SNAP with the review before the switch (facts.review): the rev a planned bump
    takes, and what a system built already changes."""
    from facts.review import read_review

    return dataclasses.replace(snap, review=read_review(host, s, snap))


def _with_definitions(host, s: HostData, snap: HostSnapshot) -> HostSnapshot:
    """SNAP with what remedy's forced values win over (from the record kept on the host
    while it holds; else one evaluation of the configuration)."""
    from facts.nix import read_option_definitions
    from remedy.core.config import desired
    from remedy.core.config.options import OptionDefinitions

    try:
        defs = read_option_definitions(host, s, snap, desired.ALL, s.build_host == "serving")
    except Exception as exc:
        defs = OptionDefinitions(error=f"not evaluated: {exc}")
    return dataclasses.replace(snap, definitions=defs)


def _import_manual_runs(host, snap, progress) -> None:
    """The manual script's records on the host, into this machine's audit log, once."""
    from remedy import audit

    if not snap.journal.manual_runs:
        return
    path = audit.log_path_for(dict(host.data.dict()))
    try:
        done = audit.import_manual_runs(path, host.name, snap.journal.manual_runs)
    except OSError as exc:
        progress(f"{host.name}: could not import its manual runs into {path}: {exc}")
        return
    for run_id in done:
        progress(f"{host.name}: audited the manual run {run_id} (from the host)")


# ---------------------------------------------------------------- one pyinfra run


@dataclass
class HostRun:
    """One host's part of a fleet run, as this process saw it."""

    host: str
    returncode: int = 0  # 0 it ran (see its outcome), 1 it failed, 5 a lock was held
    seconds: float = 0.0
    started: float = 0.0  # wall clock (time.time()) when the run began
    lines: list[str] = field(default_factory=list, repr=False)  # what pyinfra said of it
    why: str | None = None  # why it failed or stopped, if it did
    audited: bool = False  # its audit line is written (by the deploy's own code)
    given_up: bool = False  # the run stopped waiting for it (its deadline, a stop)

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.lines[-lines:])


@dataclass
class FleetRun:
    runs: dict[str, HostRun]
    reads: list[HostRead]
    rollout: object  # remedy.core.run.rollout.Rollout


DEPLOY = "converge.py"


def converge_hosts(
    inventory: str,
    hosts: list[str],
    data: dict,
    policy,
    progress: Callable[[str], None] = lambda _m: None,
) -> FleetRun:
    """``deploys/converge.py`` on HOSTS (DATA over their data), in one pyinfra run in this
    process, under the rollout POLICY (``remedy.core.run.rollout``); then what each host is
    now, from the run's own read or one read after a change."""
    from pyinfra_cli.util import parse_cli_arg

    from remedy import connect, lifecycle
    from remedy.core.run import rollout as rollout_core
    from remedy.operations import run as run_mod

    connect.guard()  # what the project's config.py installs for pyinfra's CLI
    the_run = lifecycle.process_run()
    the_run.fleet = True  # _Bounds gives up a host past its deadline
    data = {key: parse_cli_arg(value) for key, value in data.items()}  # as --data gives them
    began = time.time()
    runs = {name: HostRun(name, started=began) for name in hosts}
    deploy = str(PROJECT / "deploys" / DEPLOY)
    with (
        contextlib.redirect_stdout(sys.stderr),  # --json owns stdout
        session.connected(inventory, hosts, data) as (state, connected, failed),
        _watched(runs, progress) as watch,
    ):
        for name, why in failed.items():
            runs[name].returncode, runs[name].why = 1, f"could not connect over SSH: {why}"
        bounds = _Bounds(the_run, state, connected, time.monotonic(), runs, watch.progress)
        _prepare(state, connected, deploy, runs, progress, bounds)
        restores = {h.name: r for h in connected if (r := run_mod.restore_of(the_run, h.name))}
        rollout = rollout_core.Rollout.of(policy, [_turn(n, restores, runs) for n in hosts])
        bounds.rollout = rollout
        live = [h for h in connected if h.name in restores and h.name not in the_run.given_up]
        _execute(the_run, state, live, restores, rollout, watch, bounds)
        run_mod.record_runs(the_run)
        reads = _reads_after(state, connected, restores, progress, bounds)
        reads += [HostRead(name, error=runs[name].why) for name in failed]
        for r in reads:
            r.ssh = ssh_of(state.inventory.get_host(r.name))
    return FleetRun(runs, sorted(reads, key=lambda r: r.name), rollout)


class HostGivenUp(BaseException):
    """Raised in the greenlet of a host the run gave up (not an Exception: no step's
    handler takes it for a failure of its own and goes on)."""


class _Bounds:
    """Every host's deadline (host data host_deadline_s, from the run's start, its
    waits for its turn not counted) and the stop request's grace
    (lifecycle.STOP_GRACE_S a phase): a host past either is given up and named, its
    greenlet ended, its connection closed, and the run goes on with the others."""

    def __init__(self, the_run, state, hosts: list, began: float, runs: dict, say):
        self.the_run, self.state, self.runs, self.say = the_run, state, runs, say
        self.hosts = {h.name: h for h in hosts}
        self.began, self.rollout = began, None
        self.deadline_s = {}
        for h in hosts:
            try:
                self.deadline_s[h.name] = settings_mod.from_host_data(h.name, h.data).deadline_s
            except Exception:  # bad data: the deploy refuses it, and records why
                self.deadline_s[h.name] = settings_mod.HostData().deadline_s

    def over(self, name: str, phase: str, phase_began: float, now: float):
        """Why host NAME is given up now (a GivenUp), or None."""
        from remedy import lifecycle

        step = self.the_run.steps_now.get(name)
        where = f"during '{step}'" if step else f"in {phase}"
        waited = self.rollout.waited(name, now) if self.rollout is not None else 0.0
        limit = self.deadline_s[name]
        if now - self.began - waited >= limit:
            return lifecycle.at_deadline(limit, step, f"in {phase}")
        stopped = self.the_run.stopped_at
        if stopped is not None and now - max(stopped, phase_began) >= lifecycle.STOP_GRACE_S:
            base = (self.the_run.stop.why or "interrupted").split(" during '")[0]
            why = (
                f"{base} {where}; given up: it did not end within "
                f"{lifecycle.STOP_GRACE_S:.0f}s of the stop"
            )
            return lifecycle.GivenUp(why, "interrupted", step)
        return None

    def join(self, greenlets: dict, phase: str) -> None:
        """Wait for GREENLETS ({host name: greenlet}) of PHASE, giving up each host past
        its bound; a host given up is not waited for."""
        import gevent

        phase_began = time.monotonic()
        while True:
            alive = {
                n: g for n, g in greenlets.items() if not g.dead and n not in self.the_run.given_up
            }
            if not alive:
                return
            now = time.monotonic()
            for name, greenlet in alive.items():
                if gave_up := self.over(name, phase, phase_began, now):
                    self.give_up(name, greenlet, gave_up)
            gevent.wait(list(alive.values()), timeout=0.5, count=1)

    def give_up(self, name: str, greenlet, gave_up) -> None:
        import gevent

        from remedy import connect

        self.the_run.given_up[name] = gave_up
        self.the_run.locks.pop(name, None)  # never released: that would wait on the host
        run = self.runs[name]
        run.returncode, run.why, run.given_up = 1, gave_up.why, True
        run.lines.append(gave_up.why)
        self.say(f"{name}: {gave_up.why}")
        greenlet.kill(HostGivenUp(gave_up.why), block=False)
        host = self.hosts.get(name)
        if host is not None:
            gevent.spawn(connect.close, host)  # a frozen peer's reads end with it
            _fail(self.state, {host})
        greenlet.join(timeout=5)  # its own ending (the rollout learns it failed)


def _turn(name: str, restores: dict, runs: dict[str, HostRun]):
    """Host NAME's place in the rollout, from its plan (or why it has none)."""
    from remedy.core.run import plan as plan_core
    from remedy.core.run import rollout as rollout_core

    if (r := restores.get(name)) is None:
        stopped = rollout_core.LOCKED if runs[name].returncode == 5 else rollout_core.UNREACHED
        return rollout_core.Turn(name, False, False, state=stopped, why=runs[name].why)
    return rollout_core.Turn(name, r.plan.path != plan_core.NOOP, rollout_core.needs_budget(r.plan))


def _fail(state, hosts: set) -> None:
    """HOSTS fail in pyinfra's state (no further step); the others go on."""
    from pyinfra.api.exceptions import PyinfraError

    try:
        state.fail_hosts(hosts)
    except PyinfraError:  # "No hosts remaining!": each host's run has ended already
        pass


def _prepare(
    state, hosts: list, deploy: str, runs: dict[str, HostRun], progress, bounds: _Bounds
) -> None:
    """Every host's deploy file at once (its read, plan and steps), each in its greenlet. A
    host that stops (its lock held, an unreadable host: ``run.HostStopped``) or fails
    here fails alone, with its reason; the run audited it (HostStopped, SystemExit)."""
    import gevent
    from pyinfra.api.state import StateStage
    from pyinfra.context import ctx_config, ctx_host
    from pyinfra_cli.util import exec_file

    from remedy.operations.run import HostStopped

    state.set_stage(StateStage.Prepare)
    state.current_deploy_filename = deploy

    def load(host) -> tuple[int, str, bool] | None:
        try:
            with ctx_config.use(state.config.copy()), ctx_host.use(host):
                exec_file(deploy)
        except HostStopped as exc:
            return int(exc.code), exc.why, True
        except SystemExit as exc:  # begin_restore audited it, with its reason
            return 1, str(exc.code).removeprefix("remedy: "), True
        except Exception as exc:  # pyinfra wraps the deploy's exception
            cause = next((a for a in exc.args if isinstance(a, BaseException)), exc)
            return 1, f"{host.name}: the deploy could not plan: {cause!r}", False
        return None

    greenlets = {host: gevent.spawn(load, host) for host in hosts}
    bounds.join({h.name: g for h, g in greenlets.items()}, "its read and plan")
    stopped = set()
    for host, greenlet in greenlets.items():
        run = runs[host.name]
        if run.given_up:  # audited when the run ends (its plan made), else by converge
            run.audited = host.name in bounds.the_run.entries
            stopped.add(host)
            continue
        if (said := greenlet.get()) is None:
            run.audited = True  # its audit line is written when the run ends
            continue
        run.returncode, run.why, run.audited = said
        run.lines.append(run.why)
        progress(run.why if run.why.startswith(host.name) else f"{host.name}: {run.why}")
        stopped.add(host)
    _fail(state, stopped)


def _execute(
    the_run, state, hosts: list, restores: dict, rollout, watch: _Watch, bounds: _Bounds
) -> None:
    """Each host's steps in a greenlet of its own (pyinfra's --no-wait), through the
    rollout's gates; a failing step fails that host only."""
    import gevent
    from pyinfra.api.state import StateStage

    from remedy import rollout as rollout_mod

    state.set_stage(StateStage.Execute)
    state.is_executing = True
    gates = rollout_mod.Gates(
        rollout, restores, the_run.stop, watch.progress, given_up=the_run.given_up
    )
    for h in hosts:  # each host's step, for a stop request that comes during it
        the_run.steps_now[h.name] = None
    # not pyinfra's pool: a host that waits for its turn must not keep another from its own
    greenlets = {
        h.name: gevent.spawn(_run_host, the_run, state, h, restores[h.name], gates, watch)
        for h in hosts
    }
    bounds.join(greenlets, "its steps")


def _run_host(the_run, state, host, restore, gates, watch: _Watch) -> None:
    from pyinfra.api.operations import run_host_op
    from pyinfra.context import ctx_host

    from remedy.operations import pyinfra_private
    from remedy.operations import run as run_mod

    keys = {pyinfra_private.op_hash(meta): step.template.key for step, meta in restore.flow}
    started = time.monotonic()
    try:
        for op_hash in state.get_op_order():
            if host not in state.active_hosts:
                break
            if not gates.before(host.name, keys.get(op_hash)):
                continue
            title = ", ".join(state.get_op_meta(op_hash).names)
            watch.step(host.name, title)
            the_run.steps_now[host.name] = title
            state.trigger_callbacks("operation_start", op_hash)
            with ctx_host.use(host):
                done = run_host_op(state, host, op_hash)
            the_run.steps_now[host.name] = None
            if not done:
                _fail(state, {host})
        the_run.ended.add(host.name)  # its steps are over: its record is its own
    except Exception as exc:  # a connection lost mid-step: this host's run ends here
        watch.said(host.name, f"{host.name}: the run stopped: {exc}")
        _fail(state, {host})
    finally:
        failed = gates.end(host.name, host in state.failed_hosts)
        run = watch.runs[host.name]
        run.seconds = time.monotonic() - started
        if host.name in the_run.given_up:
            run.returncode, run.why = 1, the_run.given_up[host.name].why
        elif host.name in gates.held_back:
            run.why = gates.held_back[host.name]
            # held back before its turn: not started, unless a stop request held it
            # after steps that ran (a clone, a bump, a proof): then its record is the
            # interrupted run's, with them and the step the signal came during
            restore = run_mod.restore_of(the_run, host.name)
            ran = restore is not None and any(meta.executed for _s, meta in restore.flow)
            if not (the_run.stop.why and ran):
                run_mod.not_started(the_run, host, run.why)
        elif host in state.failed_hosts or failed:
            run.returncode, run.why = 1, failed or "a step failed"
        if host.name in the_run.ended:  # the person hears of each host as it ends
            watch.progress(f"{host.name}: its steps are over" + (f" ({run.why})" if failed else ""))


def _reads_after(state, hosts: list, restores: dict, progress, bounds: _Bounds) -> list[HostRead]:
    """What each host is now: the run's own snapshot where nothing changed, else one read
    (a host whose run stopped before its plan is read once here)."""
    import gevent

    def after(host) -> HostRead:
        r = restores.get(host.name)
        ran = r is not None and any(meta.executed for _step, meta in r.flow)  # a command
        if r is None or ran or host in state.failed_hosts:
            return _read_one(host, progress, r.host_data if r else None)
        if r.before.definitions is not None:  # the plan asked already
            return HostRead(host.name, r.host_data, r.before)
        return HostRead(host.name, r.host_data, _with_definitions(host, r.host_data, r.before))

    given_up = bounds.the_run.given_up
    greenlets = {h.name: gevent.spawn(after, h) for h in hosts if h.name not in given_up}
    bounds.join(greenlets, "its read after the run")
    out = []
    for h in hosts:
        r = restores.get(h.name)
        if h.name in given_up:
            out.append(HostRead(h.name, r.host_data if r else None, error=given_up[h.name].why))
        else:
            out.append(greenlets[h.name].get())
    return out


# ---------------------------------------------------------------- what the run says

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX = re.compile(r"^\s*\[(?P<host>[^\]]+)\]\s*")
_NAMED = re.compile(r"^(?:remedy: )?(?P<host>[^\s:]+):")


class _Watch(logging.Handler):
    """pyinfra's log of the run: each record to the host it names (the tail a failed
    host's report shows) and through that host's StepWatch (remedy.core.run.progress) to the
    person who waits: a line per step, and how long a long step has run."""

    def __init__(self, runs: dict[str, HostRun], progress: Callable[[str], None]):
        from remedy.core.run.progress import StepWatch

        super().__init__(logging.INFO)
        self.runs, self.progress = runs, progress
        self.watches = {name: StepWatch(name) for name in runs}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = _ANSI.sub("", record.getMessage())
        except Exception:  # a record that cannot be formatted says nothing
            return
        lines = text.splitlines() or [""]
        m = _PREFIX.match(lines[0]) or _NAMED.match(lines[0])
        name = m.group("host") if m else None
        if name not in self.runs:
            return
        if _PREFIX.match(lines[0]):  # "[host]   Success": pyinfra pads the names
            lines[0] = _PREFIX.sub(f"[{name}] ", lines[0])
        self.said(name, *lines)

    def said(self, name: str, *lines: str) -> None:
        self.runs[name].lines.extend(lines)
        for message in self.watches[name].feed(lines[0], time.monotonic()):
            self.progress(message)

    def step(self, name: str, title: str) -> None:
        for message in self.watches[name].feed(f"--> Starting operation: {title}",
                                               time.monotonic()):  # fmt: skip
            self.progress(message)

    def beat(self) -> None:
        for watch in self.watches.values():
            if said := watch.heartbeat(time.monotonic()):
                self.progress(said)


@contextlib.contextmanager
def _watched(runs: dict[str, HostRun], progress) -> Iterator[_Watch]:
    """pyinfra's log goes to a _Watch (not the terminal) while the run lasts."""
    import gevent

    watch = _Watch(runs, progress)
    log = logging.getLogger("pyinfra")
    level, propagate = log.level, log.propagate
    log.setLevel(logging.INFO)
    log.propagate = False
    log.addHandler(watch)

    def beating() -> None:
        while True:
            gevent.sleep(1)
            watch.beat()

    beat = gevent.spawn(beating)
    try:
        yield watch
    finally:
        beat.kill()
        log.removeHandler(watch)
        log.setLevel(level)
        log.propagate = propagate
