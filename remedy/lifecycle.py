"""One process's run of remedy over its hosts, as a value, and where it ends.

A ``Run`` holds what a process knows of its run: its id, the stop request, each host's
planned run (``entries``), the host locks, the recording (the project's commits and
the runbook, read once), the step pyinfra runs now, and how far the audit lines are
written. It is made once a process (``process_run``: pyinfra's config.py, or
``remedy converge``'s fleet) and passed explicitly to what needs it.

Signals and the audit's writing meet here, and nowhere else:

* the first SIGINT or SIGTERM is the run's stop request: no further step starts (the
  conditions read ``stop``), a build in progress is stopped on the hosts; a fleet
  (``remedy.fleet``) gives each phase's work in progress ``STOP_GRACE_S`` more, then
  gives up the hosts still in it, so the whole run ends within ``STOP_BOUND_S``;
* a second, before the audit lines are written, writes them as killed (during the
  step in progress) and exits 128+N at once;
* a second while the lines are being written lets them finish, then exits 128+N
  (recording from the handler would wait for ever on the audit log's lock, which the
  same process holds);
* a second after they are written exits 128+N without a second line;
* at exit, the lines are written once, and a stopped run never exits 0 (pyinfra's own
  handler exits 0, "Exiting upon user request!").

The decisions are ``Run.on_signal`` and ``Run.exit_code``: pure, tested without pyinfra
(tests/unit/test_lifecycle.py). What writes the lines is the run's ``writer``, given by
who records the run (remedy.operations.run); the host locks' ``stop_builds`` is the
stop's reach to the hosts.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from remedy.core.run.stop import StopRequest

RUNNING, WRITING, WRITTEN = "running", "writing", "written"
# After a first SIGINT or SIGTERM, what a fleet's phase has in progress (the steps, the
# reads of the report) gets this long to end; a host still in it then is given up.
STOP_GRACE_S = 30.0
# The whole run ends this soon after a first SIGINT or SIGTERM, whatever a host does
# (README, "Exit codes"): three phases' grace, then the audit and the locks' release.
STOP_BOUND_S = 120.0
GIVEN_UP = "given up"  # the audit's result of a host given up at its deadline


@dataclass(frozen=True)
class GivenUp:
    """A host this run stopped waiting for: at its deadline (RESULT GIVEN_UP) or at the
    stop request's grace (RESULT "interrupted"), WHY, in step IN_STEP (None: between
    steps, or before them)."""

    why: str
    result: str = GIVEN_UP
    in_step: str | None = None


def at_deadline(limit_s: float, step: str | None, where: str | None = None) -> GivenUp:
    """A host given up at its deadline (host data host_deadline_s, LIMIT_S), during STEP,
    else WHERE it was (a fleet's phase), else before its steps."""
    where = f"during '{step}'" if step else where or "before its steps"
    why = f"given up at its deadline (host_deadline_s={limit_s:g}) {where}"
    return GivenUp(why, GIVEN_UP, step)


STOP, KILL, DEFER, EXIT = "stop", "kill", "defer", "exit"


@dataclass
class Run:
    """One process's run (see the module's doc)."""

    run_id: str
    stop: StopRequest = field(default_factory=StopRequest)
    entries: dict = field(default_factory=dict)  # host name -> its planned run (Restore)
    locks: dict = field(default_factory=dict)  # host name -> its host lock
    # the recording, claimed once (a fleet prepares its hosts in greenlets at once)
    recording: dict | None = None  # {"state", "commits", "runbook"}
    writer: Callable[[Run, str | None], None] | None = None  # writes the audit lines
    in_progress: str | None = None  # the step pyinfra runs now (for one killed in it)
    # a fleet's hosts, each on its own (remedy.fleet): the step each runs now (None:
    # between steps, or waiting for its turn), those whose steps are all over, those
    # given up; and, once a stop came, which were over and which step each was in then
    steps_now: dict = field(default_factory=dict)
    ended: set = field(default_factory=set)
    given_up: dict = field(default_factory=dict)  # host name -> GivenUp
    # a fleet (remedy.fleet) bounds each host's part itself; else each host's deploy
    # starts its own deadline watch (remedy.operations.run: pyinfra's CLI)
    fleet: bool = False
    at_stop: dict | None = None  # {"ended": set, "steps": dict}
    stopped_at: float | None = None  # time.monotonic() of the stop request
    killed_by: str | None = None  # the second signal's name
    phase: str = RUNNING
    pending_exit: int = 0  # a signal that came while the lines were written
    installed: bool = False

    # -- pure ---------------------------------------------------------------------
    def on_signal(self, signum: int) -> str:
        """What SIGNUM means now: STOP (the first: the run's stop request), KILL (a
        second before the lines are written: write them as killed, exit), DEFER (a
        second while they are written: exit once they are), EXIT (after: exit)."""
        if self.stop.request(signum, self.in_progress):
            return STOP
        if self.phase == WRITING:
            self.pending_exit = 128 + signum
            return DEFER
        if self.phase == WRITTEN:
            return EXIT
        return KILL

    def exit_code(self) -> int | None:
        """The code a run that was stopped exits with (None: it was not stopped)."""
        why = self.stop.why
        if not why:
            return None
        return 143 if "SIGTERM" in why else 130

    def host_interrupted(self, name: str, killed: str | None = None) -> str | None:
        """Why host NAME's run was interrupted, as true for that host: None when its
        steps were all over before the stop came (it is recorded with its own result);
        else during the step it was in then. A run that tracks no host (pyinfra's CLI,
        one host) says the process's why. KILLED: the process's why of a second
        signal."""
        why = self.stop.why
        if not why:
            return None
        if self.at_stop is None or not (self.at_stop["steps"] or self.at_stop["ended"]):
            return killed or why
        if name in self.at_stop["ended"]:
            return None
        said = why.split(" during '")[0]
        if step := self.at_stop["steps"].get(name):
            said += f" during '{step}'"
        if killed and self.killed_by:
            said += f", then killed by a second {self.killed_by}"
        return said

    def snapshot_at_stop(self) -> None:
        """Which hosts were over, and which step each was in, when the stop came."""
        self.stopped_at = time.monotonic()
        self.at_stop = {"ended": set(self.ended), "steps": dict(self.steps_now)}

    def killed_why(self, signum: int) -> str:
        step = f"during '{self.in_progress or '?'}'"
        killed = f"{self.stop.why}, then killed by a second {signal.Signals(signum).name}"
        return killed if (self.stop.why or "").endswith(step) else f"{killed} {step}"

    # -- the audit lines -----------------------------------------------------------
    def write(self, killed: str | None = None) -> None:
        """Write the run's audit lines, once: at exit, when a fleet reports, or, KILLED
        (why), from a second signal. A signal while they are written waits for them."""
        if self.writer is None or self.phase != RUNNING:
            return
        if killed is not None:
            self.writer(self, killed)
            self.phase = WRITTEN
            return
        self.phase = WRITING
        try:
            self.writer(self, None)
        finally:
            self.phase = WRITTEN
            if self.pending_exit:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(self.pending_exit)

    # -- signals and exit ----------------------------------------------------------
    def install(self) -> None:
        """Take over SIGINT and SIGTERM, and the exit, for this run (once)."""
        if self.installed:
            return
        self.installed = True
        atexit.register(self._never_0_when_stopped)  # registered first: runs last
        atexit.register(self.write)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum, _frame) -> None:
        said = self.on_signal(signum)
        if said == STOP:
            self.snapshot_at_stop()
            print(
                f"remedy: {signal.Signals(signum).name}: stopping after the step in "
                "progress (again to kill); a Nix build or evaluation in progress is "
                f"stopped now; the run ends within {STOP_BOUND_S:.0f}s",
                file=sys.stderr,
            )
            import gevent  # each in its own greenlet: a frozen host holds none of it

            for lock in list(self.locks.values()):  # a hung build must not hold the step
                gevent.spawn(lock.stop_builds)
        elif said == KILL:
            self.killed_by = signal.Signals(signum).name
            try:
                self.write(killed=self.killed_why(signum))
            except Exception as exc:  # dying anyway: say what could not be recorded
                print(f"remedy: could not record the killed run: {exc!r}", file=sys.stderr)
            os._exit(128 + signum)
        elif said == EXIT:
            os._exit(128 + signum)

    def _never_0_when_stopped(self) -> None:
        code = self.exit_code()
        if code is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def new_run_id() -> str:
    """This run, in the journals it keeps on its hosts and in its audit lines: a run
    that dies is recorded once, by the next run, under this id."""
    return f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}"


_PROCESS: list[Run] = []  # the one run of this process (see process_run)


def process_run() -> Run:
    """The run of this process, made on first use: signals and the exit are its own from
    then on. pyinfra's config.py asks first, before the inventory loads or connects."""
    if not _PROCESS:
        _PROCESS.append(Run(new_run_id()))
        _PROCESS[0].install()
    return _PROCESS[0]
