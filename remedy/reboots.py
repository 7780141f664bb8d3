"""``remedy reboot`` over SSH: each host's planned, proven reboot, through the rollout.

What each step decides is its host program's (``remedy/host/steps/reboot*.sh``, the
drain's and the verify's); the order, the gates and the words are
``remedy.core.run.reboot``'s; the budget is the rollout's (``remedy.core.run.rollout``),
as a converge's; rotation_out and rotation_in run as a converge runs them
(``remedy.rollout.rotate``). Here: the SSH sessions, one greenlet a host, the wait for
a host that reboots (a new session, a new boot id), the stop request and the audit.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from remedy import audit, fleet, session, trial_boot
from remedy.core.config import desired
from remedy.core.config import host_data as settings_mod
from remedy.core.programs import step_values as sv
from remedy.core.readings import answer as answer_core
from remedy.core.readings.trial import BootReading
from remedy.core.run import reboot as core
from remedy.core.run import rollout as rollout_core
from remedy.core.run.stop import StopRequest
from remedy.core.run.trial import TrialBoot, not_back_note
from remedy.operations.argv import Ran
from remedy.operations.argv import run as run_argv

BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass
class RebootRun:
    hosts: dict[str, core.HostReboot]
    rollout: rollout_core.Rollout | None = None
    stopped: str | None = None  # the stop request, if one came
    plan: list[str] = field(default_factory=list)  # --dry: the plan's lines


def answer(host, values: sv.StepValues, mode: str) -> answer_core.Answer:
    """HOST's step program VALUES in MODE, now, and its answer."""
    r: Ran = run_argv(host, sv.argv(values, mode))
    return answer_core.parse(r.stdout, r.stderr, None if r.ok else 1)


def reboot_hosts(
    inventory: str,
    names: list[str],
    policy: rollout_core.Policy,
    *,
    now: bool,
    dry: bool,
    run_id: str,
    stop: StopRequest,
    say: Callable[[str], None],
    converge_cmd: Callable[[str], str],
    trial: bool = False,
) -> RebootRun:
    """Reboot NAMES of INVENTORY (or with DRY, only plan it) under POLICY. TRIAL: each
    new generation boots once (systemd-boot's one-shot entry), blessed after the
    verify, else the host is rebooted into the boot default it kept."""
    import logging

    import gevent

    # the sessions the reboots cut are expected: paramiko's "Socket exception" is no news
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    out = RebootRun({n: core.HostReboot(n) for n in names})
    with session.connected(inventory, names) as (state, hosts, failed):
        for name, why in failed.items():
            rec = out.hosts[name]
            rec.outcome, rec.why = core.UNREACHED, f"could not connect over SSH: {why}"
        greenlets = {h.name: gevent.spawn(_gates, h, out.hosts[h.name], now, run_id, say,
                                          converge_cmd, trial, dry) for h in hosts}  # fmt: skip
        gevent.joinall(list(greenlets.values()))
        ready = {name: g.get() for name, g in greenlets.items()}
        turns = [
            rollout_core.Turn(n, bool(ready.get(n)), bool(ready.get(n)))
            if ready.get(n)
            else rollout_core.Turn(
                n, False, False, state=rollout_core.NOT_STARTED, why=out.hosts[n].why
            )  # fmt: skip
            for n in names
        ]
        rollout = rollout_core.Rollout.of(policy, turns)
        out.rollout = rollout
        for t in rollout.turns.values():
            out.hosts[t.host].canary = t.canary
        if dry:
            out.plan = _plan_lines(out, ready, rollout)
            return out
        budget = _Budget(rollout, stop, say)
        work = [gevent.spawn(_reboot_one, h, ready[h.name], out.hosts[h.name], run_id, budget,
                             stop, say) for h in hosts if ready.get(h.name)]  # fmt: skip
        gevent.joinall(work)
        for name, rec in out.hosts.items():  # every host tried, refused ones too
            _audit(name, dict(state.inventory.get_host(name).data.dict()), rec, run_id)
    out.stopped = stop.why
    return out


@dataclass
class _Ready:
    """A host that passed the gates before its turn: its data and its read."""

    s: settings_mod.HostData
    read: fleet.HostRead
    trial: BootReading | None = None  # --trial: the loader's reading before


def _gates(host, rec: core.HostReboot, now: bool, run_id: str, say, converge_cmd,
           trial: bool = False, dry: bool = False) -> _Ready | None:  # fmt: skip
    """The read and the gates before a host's turn: the next boot, the window. None:
    refused or unreadable (REC says why). First, an earlier run's fall back that was
    never settled (stopped while the host came back) is settled (DRY: said)."""
    read = fleet._read_one(host, say)
    if read.error or read.snapshot is None:
        rec.outcome, rec.why = core.UNREACHED, read.error or "the host could not be read"
        return None
    s = read.host_data
    if _settle_earlier(host, s, rec, dry, say):  # the profile moved: read it again
        read = fleet._read_one(host, say)
        if read.error or read.snapshot is None:
            rec.outcome, rec.why = core.UNREACHED, read.error or "the host could not be read"
            return None
    _status(rec, read)
    rec.mem_before_kb = read.snapshot.memory.mem_available_kb
    rec.probe_before = read.snapshot.probe.outcome
    a = answer(host, core.ready(s, run_id), sv.CHECK)
    rec.boot_id_before = a.said.get("boot_id") or None
    rec.boot_default = a.said.get("boot_default") or None
    if journal := a.said.get("earlier"):
        say(f"{host.name}: {journal}")
        rec.earlier = f"{journal}; {rec.earlier}" if rec.earlier else journal
    if a.verdict != answer_core.NOOP:
        return _refuse(rec, core.NEXT_BOOT, core.lacks_refusal(a.text, converge_cmd(host.name)),
                       say)  # fmt: skip
    rec.steps.append(a.text)
    if why := core.window_refusal(s, now, read.snapshot.clock):
        return _refuse(rec, core.WINDOW, why, say)
    say(f"{host.name}: {a.text}")
    reading = None
    if trial:
        reading = trial_boot.of_pyinfra_host(host).read()
        if not reading.supported:
            return _refuse(rec, core.TRIAL, f"boots with {reading.loader}: {reading.why}; not "
                           "supported (reboot it without --trial)", say)  # fmt: skip
    return _Ready(s, read, reading)


def _settle_earlier(host, s, rec: core.HostReboot, dry: bool, say) -> bool:
    """An earlier trial's fall back whose run stopped before it settled (its record is
    on the host): the profile and loader.conf still name the failed generation, so
    the next-boot gate would read it. Settled now (DRY: said); True when it changed
    the host. Nothing without the record; only where the host boots with
    systemd-boot."""
    if s.boot_loader != "systemd-boot":
        return False
    t = trial_boot.of_pyinfra_host(host)
    settled = t.settle(lock_wait_s=s.lock_wait_s, check=dry)
    if settled.verdict == answer_core.NOOP and settled.text.startswith("no fall back"):
        return False
    would = "would " if dry and settled.verdict == answer_core.ACT else ""
    line = f"an earlier trial's fall back: {would}{settled.text}"
    rec.earlier = f"{rec.earlier}; {line}" if rec.earlier else line
    rec.steps.append(f"trial boot: settle: {settled.text}")
    say(f"{host.name}: {line}")
    return settled.changed


def _refuse(rec: core.HostReboot, gate: str, why: str, say) -> None:
    rec.outcome, rec.gate, rec.why = core.REFUSED, gate, why
    say(f"{rec.host}: refused ({gate}): {why}")
    return None


def _status(rec: core.HostReboot, read: fleet.HostRead) -> None:
    from remedy.core.render.report import host_status

    status = host_status(read.name, read.host_data, read.snapshot)
    rec.status_code, rec.status_verdict = status.exit_code, status.verdict


def _plan_lines(out: RebootRun, ready: dict, rollout) -> list[str]:
    """--dry: what the run would do, host by host, in the rollout's order (a host's
    first line starts with its name and a colon, the rest are indented)."""
    lines = [f"rollout: {rollout.policy.describe()}"]
    for name, rec in out.hosts.items():
        r = ready.get(name)
        if r is None:
            gate = f" at the gate {rec.gate!r}" if rec.gate else ""
            lines.append(f"{name}: {rec.outcome}{gate}: {rec.why}")
            continue
        s = r.s
        canary = " (canary)" if rec.canary else ""
        lines.append(f"{name}{canary}: would reboot into {rec.boot_default}")
        if s.rotation_out:
            lines.append(f"  rotation_out: {' '.join(s.rotation_out)}")
        if r.trial is not None:
            t = r.trial
            lines.append(
                f"  trial boot: {t.conf_default} once (systemd-boot's one-shot entry), the "
                f"default stays {t.running_entry}; blessed after the verify, else rebooted "
                "into the default"
                if t.conf_default and t.conf_default != t.running_entry
                else f"  trial boot: none, the next boot is the running {t.running_entry}"
            )
        lines += [
            f"  drain: wait up to drain_timeout_s={s.drain_timeout_s}s for an idle server",
            "  reboot, then a new SSH session with a new boot id within "
            f"reboot_timeout_s={s.reboot_timeout_s}s",
            f"  verify: tool calls parsed within ready_timeout_s={s.ready_timeout_s}s, every "
            f"setting in sync, MemAvailable at least {s.min_mem_available_gb:g} GB "
            "(min_mem_available_gb)",
        ]
        if s.rotation_in:
            lines.append(f"  rotation_in: {' '.join(s.rotation_in)}")
    return lines


class _Budget:
    """The rollout's turns for the reboots (a place held from rotation_out to
    rotation_in) and who waits for one."""

    def __init__(self, rollout, stop: StopRequest, say):
        from gevent.event import Event

        self.rollout, self.stop, self.say = rollout, stop, say
        self._changed = Event()

    def notify(self) -> None:
        from gevent.event import Event

        changed, self._changed = self._changed, Event()
        changed.set()

    def take(self, name: str) -> str:
        """GO, or why the host may not start (the rollout stopped, a stop request)."""
        said = None
        while True:
            if self.stop.why:
                self.rollout.not_started(name, f"{self.stop.why} before its turn",
                                         time.monotonic())  # fmt: skip
                return f"{self.stop.why} before its turn"
            decided = self.rollout.turn(name, time.monotonic())
            if decided == rollout_core.GO:
                self.notify()
                return decided
            if decided != rollout_core.WAIT:
                self.rollout.not_started(name, decided, time.monotonic())
                self.notify()
                return decided
            waits = self.rollout.waits_for(name)
            if waits != said:
                self.say(f"{name}: {waits}")
                said = waits
            self._changed.wait(1.0)

    def end(self, name: str, failed: str | None) -> None:
        self.rollout.finished(name, failed, 1 if failed is None else 0, time.monotonic())
        self.notify()


def _reboot_one(host, r: _Ready, rec: core.HostReboot, run_id: str, budget: _Budget,
                stop: StopRequest, say) -> None:  # fmt: skip
    """One host's reboot, from its turn to its rotation_in; its audit line at the end."""
    try:
        decided = budget.take(host.name)
        if decided != rollout_core.GO:
            rec.outcome, rec.why = core.NOT_STARTED, decided
            say(f"{host.name}: not started: {decided}")
            return
        turn = budget.rollout.turns[host.name]
        say(f"{host.name}: took the restart budget ({'canary, ' if turn.canary else ''}"
            f"wave {turn.wave})")  # fmt: skip
        _run(host, r, rec, run_id, stop, say)
    except Exception as exc:  # a lost connection mid-step: this host's run ends here
        if rec.outcome == core.PLANNED:
            rec.outcome, rec.why = core.FAILED, f"the run stopped: {exc!r}"
    finally:
        if rec.outcome == core.REFUSED or (
            rec.outcome == core.INTERRUPTED and rec.reboot_at is None
        ):  # never rebooted: it did not start, it did not fail
            why = f"refused at {rec.gate}: {rec.why}" if rec.gate else rec.why
            budget.rollout.not_started(host.name, why or "", time.monotonic())
            budget.notify()
        elif rec.outcome != core.NOT_STARTED:
            failed = None if rec.outcome == core.REBOOTED else rec.why
            budget.end(host.name, failed)
            if failed:
                say(f"{host.name}: failed: {failed}")


def _run(host, r: _Ready, rec: core.HostReboot, run_id: str, stop: StopRequest, say) -> None:
    from remedy import rollout as rollout_mod

    s = r.s
    if s.rotation_out:
        if why := rollout_mod.rotate("rotation_out", s.rotation_out, host.name, s.server_url,
                                     say, stop):  # fmt: skip
            rec.outcome, rec.gate, rec.why = core.REFUSED, core.ROTATION_OUT, why
            return
        rec.rotated_out = True
    try:
        if not _drained(host, s, rec, run_id, stop, say):
            return
        trial = _arm(host, r, rec, say) if r.trial is not None else None
        if rec.outcome == core.REFUSED:
            return
        if stop.why:  # after the drain, before the reboot: as before arm
            _disarm(host, trial, rec, say)
            rec.outcome, rec.why = core.INTERRUPTED, f"{stop.why} before the reboot; not rebooted"
            return
        a = answer(host, core.reboot(host.name, run_id), sv.APPLY)
        if a.verdict != answer_core.DONE:
            _disarm(host, trial, rec, say)
            rec.outcome, rec.why = core.FAILED, f"the reboot: {a.text}"
            return
        rec.reboot_at = time.time()
        rec.boot_id_before = a.said.get("boot_id") or rec.boot_id_before
        rec.steps.append(a.text)
        say(f"{host.name}: {a.text}")
        host.disconnect()
        if not _back(host, s, rec, stop, say):
            if trial is not None and rec.fault == core.NOT_BACK:
                rec.trial_outcome = "not back"
                rec.why = f"{rec.why}; {rec.trial_armed_note}"
            return
        _after(host, s, rec, run_id, say, trial, stop)
    finally:
        _rotate_in(host, s, rec, say)


def _arm(host, r: _Ready, rec: core.HostReboot, say) -> TrialBoot | None:
    """--trial, after the drain: the next boot's entry once, the default kept. The
    TrialBoot when a trial is armed; None when the next boot is the running generation
    (rebooted without a trial, said). Refused (REC) when arm refuses."""
    trial = trial_boot.of_pyinfra_host(host)
    armed = trial.arm()
    if armed.refused:
        rec.outcome, rec.gate, rec.why = core.REFUSED, core.TRIAL, armed.text
        say(f"{host.name}: refused ({core.TRIAL}): {armed.text}")
        return None
    if not armed.trial or armed.trial == armed.previous:
        rec.trial_outcome = "not armed"
        say(f"{host.name}: no trial boot: {armed.text}")
        return None
    rec.trial_entry, rec.trial_previous, rec.trial_outcome = armed.trial, armed.previous, "armed"
    rec.trial_armed_note = not_back_note(host.name, armed)
    rec.trial_defaults.append(_default(trial.read()))
    rec.steps.append(f"trial boot: {armed.text}")
    say(f"{host.name}: trial boot: {armed.text}")
    return trial


def _default(reading: BootReading) -> str:
    """The entry a boot without a one-shot picks: systemd-boot's LoaderEntryDefault,
    else loader.conf's."""
    return reading.default_entry or reading.conf_default


def _disarm(host, trial: TrialBoot | None, rec: core.HostReboot, say) -> None:
    if trial is None:
        return
    d = trial.disarm()
    rec.trial_outcome = "disarmed" if not d.refused else f"not disarmed: {d.text}"
    rec.steps.append(f"trial boot: {d.text}")
    say(f"{host.name}: trial boot: {d.text}")


def _drained(host, s, rec: core.HostReboot, run_id: str, stop: StopRequest, say) -> bool:
    """The drain, a slice a call: True when the server is idle (or answers nothing)."""
    started = time.monotonic()
    while True:
        if stop.why:
            rec.outcome, rec.why = core.INTERRUPTED, f"{stop.why} during the drain; not rebooted"
            return False
        a = answer(host, core.drain(s, run_id, time.monotonic() - started), sv.APPLY)
        for _color, text in a.logs:
            say(f"{host.name}: {text}")
        if a.verdict == answer_core.WAIT:
            continue
        if a.verdict == answer_core.NOOP:
            rec.steps.append(f"drain: {a.text}")
            return True
        why = a.text.replace("the window restart is postponed to the next run",
                             "the reboot is postponed")  # fmt: skip
        rec.outcome, rec.gate, rec.why = core.REFUSED, core.DRAIN, why
        return False


def _back(host, s, rec: core.HostReboot, stop: StopRequest, say) -> bool:
    """Until a new SSH session reads a new boot id, within reboot_timeout_s."""
    deadline = time.monotonic() + s.reboot_timeout_s
    said_at = time.monotonic()
    while True:
        if stop.why:
            rec.outcome = core.INTERRUPTED
            rec.why = (
                f"{stop.why} while {host.name} was coming back (boot id before "
                f"{rec.boot_id_before}): its reboot journal says so to the next run"
            )
            return False
        boot_id = _boot_id(host)
        if boot_id and boot_id != rec.boot_id_before:
            rec.back_at, rec.boot_id_after = time.time(), boot_id
            say(f"{host.name}: back over a new SSH session after "
                f"{rec.back_at - rec.reboot_at:.0f}s (boot id {boot_id})")  # fmt: skip
            return True
        if time.monotonic() >= deadline:
            rec.outcome, rec.fault = core.FAILED, core.NOT_BACK
            rec.why = (
                f"did not come back within reboot_timeout_s={s.reboot_timeout_s}s: no new "
                f"SSH session with a new boot id (before {rec.boot_id_before})"
            )
            return False
        if time.monotonic() - said_at >= 15:
            left = deadline - time.monotonic()
            say(f"{host.name}: waiting for it to come back ({left:.0f}s left)")
            said_at = time.monotonic()
        time.sleep(core.BACK_POLL_S)


def _boot_id(host) -> str | None:
    """The boot id over a new SSH session (None: none could be made)."""
    from pyinfra.api.exceptions import PyinfraError

    try:
        host.disconnect()
    except Exception:  # a session the reboot cut
        pass
    try:
        host.connect(show_errors=False, raise_exceptions=True)
    except (PyinfraError, OSError, EOFError):
        return None
    r = run_argv(host, ["cat", BOOT_ID])
    return r.stdout.strip() if r.ok else None


def _after(host, s, rec: core.HostReboot, run_id: str, say, trial: TrialBoot | None = None,
           stop: StopRequest | None = None) -> None:  # fmt: skip
    """The checks after the boot, each named when it fails. TRIAL (armed before the
    reboot): blessed after a passing verify; else, on a host that came back, rebooted
    into the boot default it kept, and the run ends there."""
    failed = fault = None
    a = answer(host, core.back(s, run_id, rec.boot_id_before or ""), sv.CHECK)
    rec.steps.append(a.text)
    say(f"{host.name}: {a.text}")
    if a.verdict != answer_core.NOOP:
        failed, fault = a.text, core.NO_UNIT
    else:
        v = answer(host, core.verify(s, run_id), sv.CHECK)
        rec.steps.append(v.text)
        rec.probe_after = v.said.get("probe_after") or None
        if v.verdict == answer_core.NOOP and v.said.get("probe_after") == "parsed":
            rec.verified_at = time.time()
            say(f"{host.name}: tool calls parsed after the boot")
        elif v.verdict == answer_core.NOOP:
            say(f"{host.name}: {v.text}")
        else:
            failed, fault = v.text, core.UNVERIFIED
    if trial is not None:
        rec.trial_defaults.append(_default(trial.read()))
        if failed is None:
            b = trial.bless(verify_passed=True)
            rec.trial_outcome = "blessed" if not b.refused else f"not blessed: {b.text}"
            rec.steps.append(f"trial boot: {b.text}")
            say(f"{host.name}: trial boot: {b.text}")
        else:
            _fall_back(host, s, rec, trial, failed, fault, stop or StopRequest(), say)
            return
    d = answer(host, core.done(host.name, s, run_id, failed), sv.APPLY)
    if d.said.get("mem_available_kb"):
        rec.mem_after_kb = int(d.said["mem_available_kb"])
    if d.verdict == answer_core.GIVE_UP and fault is None:
        fault = core.LOW_MEMORY
    read = fleet._read_one(host, say, s)
    rec.read_after = read
    if read.error is None and read.snapshot is not None:
        _status(rec, read)
        lacking = [x.label for x in desired.drifts(read.snapshot, s) if not x.in_sync]
        if lacking and d.verdict != answer_core.GIVE_UP:
            d.verdict, fault = answer_core.GIVE_UP, core.OUT_OF_SYNC
            d.text = f"back, but not every setting is in sync: {', '.join(lacking)}"
    elif d.verdict != answer_core.GIVE_UP:
        d.verdict, fault = answer_core.GIVE_UP, core.OUT_OF_SYNC
        d.text = f"back, but not read: {read.error}"
    # GUARD_SEAM (issue 46 item 1): the guard is the managed setting memory_guard, so
    # "every setting in sync" above is the guard in place after the boot (and the
    # next-boot gate proved it before)
    if d.verdict == answer_core.GIVE_UP:
        rec.outcome, rec.why, rec.fault = core.FAILED, d.text, fault
        return
    rec.outcome = core.REBOOTED
    rec.steps.append(d.text)


def _fall_back(host, s, rec: core.HostReboot, trial: TrialBoot, failed: str, fault: str,
               stop: StopRequest, say) -> None:  # fmt: skip
    """A trial boot back but unhealthy: rebooted into the boot default (the generation
    that ran before), a second wait, and the entry it booted read. Always a failure:
    no further host reboots."""
    rec.outcome, rec.fault, rec.why = core.FAILED, fault, failed
    say(f"{host.name}: trial boot failed: {failed}; rebooting into {rec.trial_previous}")
    fell = trial.fall_back()  # the program reboots: its answer may be lost with the session
    rec.steps.append(f"trial boot: fall back: {fell.text}")
    if fell.refused and fell.text and "no answer" not in fell.text:
        rec.trial_outcome = f"not fallen back: {fell.text}"
        rec.why = f"the trial boot of {rec.trial_entry} failed ({failed}); {fell.text}"
        return
    host.disconnect()
    first = (rec.boot_id_before, rec.reboot_at)
    rec.boot_id_before, rec.reboot_at = rec.boot_id_after, time.time()
    back = _back(host, s, rec, stop, say)
    rec.boot_id_before, rec.reboot_at = first
    if not back:
        rec.outcome, rec.fault = core.FAILED, fault
        rec.trial_outcome = "fell back, not back"
        rec.why = f"the trial boot of {rec.trial_entry} failed ({failed}); {rec.why}"
        return
    reading = trial.read()
    rec.trial_defaults.append(_default(reading))
    rec.trial_outcome = "fell back"
    rec.why = core.fell_back_why(host.name, failed, rec.trial_entry or "",
                                 rec.trial_previous or "", reading.booted_entry,
                                 rec.trial_defaults)  # fmt: skip
    say(f"{host.name}: {rec.why}")
    # the failed generation is still the profile and loader.conf's default: settle
    settled = trial.settle(lock_wait_s=s.lock_wait_s)
    rec.steps.append(f"trial boot: settle: {settled.text}")
    rec.trial_settled = settled.text
    rec.trial_failed = settled.failed_system
    rec.trial_failed_generation = settled.failed_generation
    rec.why = core.settled_why(rec.why, settled.text, settled.refused)
    say(f"{host.name}: trial boot: {settled.text}")


def _rotate_in(host, s, rec: core.HostReboot, say) -> None:
    """Back into rotation when its server answers tool calls: after the verify, or
    when it was never rebooted (a drain postponed, a stop request before the reboot)."""
    from remedy import rollout as rollout_mod

    if not (s.rotation_in and rec.rotated_out):
        return
    serving = rec.reboot_at is None or rec.verified_at is not None
    if not serving:
        say(f"{host.name}: left out of rotation: {rec.why}")
        return
    if why := rollout_mod.rotate("rotation_in", s.rotation_in, host.name, s.server_url, say):
        rec.steps.append(why)
        if rec.outcome == core.REBOOTED:
            rec.outcome, rec.why = core.FAILED, why
        return
    rec.rotated_in = True


def _audit(name: str, data: dict, rec: core.HostReboot, run_id: str) -> None:
    from remedy.console import err_console

    doc = rec.to_json()
    keys = ("outcome", "gate", "why", "boot_id_before", "boot_id_after",
            "mem_available_before_kb", "mem_available_after_kb", "mem_reclaimed_gb",
            "downtime_s", "earlier", "rotated_in", "trial")  # fmt: skip
    details = {k: doc[k] for k in keys}
    details["run_id"] = run_id
    details["verdict"] = rec.verdict()
    if rec.reboot_at is not None:  # the server stopped with the host and started once
        details["restarts"] = 1
        details["restart_reasons"] = ["remedy reboot"]
    record = audit.AuditRecord(
        host=name, result=rec.audit_result(), runbook="reboot",
        commits=audit.commits_of(fleet.PROJECT), issues=["tt-stack#49"], path="reboot",
        probe_before=rec.probe_before, probe_after=rec.probe_after, details=details,
    )  # fmt: skip
    try:
        audit.append(audit.log_path_for(data), record)
    except Exception as exc:  # never hide the report behind the log
        err_console.print(f"could not write the audit line for {name}: {exc!r}")


def install_stop(stop: StopRequest, say) -> None:
    """The first SIGINT or SIGTERM is the stop request: no host starts its reboot after
    it, a drain ends, a host waited for is recorded as such; the second exits at once."""
    import os

    import gevent

    def handler(signum: int) -> None:
        if not stop.request(signum):
            os._exit(128 + signum)
        say(f"{stop.why}: no further reboot starts")

    for signum in (signal.SIGINT, signal.SIGTERM):
        gevent.signal_handler(signum, handler, signum)
