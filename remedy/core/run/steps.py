"""The run as a list of steps with values: what every deploy carries out, in order.

``plan_steps`` is pure. From the plan (``remedy.core.run.plan``), the snapshot and the
host's settings it gives every step of the run, for every host in the same order:
the operation, plain-value arguments (the desired state and what the snapshot
read), its stage and its issue. A step this host does not need carries ``skip``,
the reason it says when it does nothing.

Stages:

* ``durable``: make the fix durable (bump, prove, fast-forward, switch, verify).
  A durable step that gives up fails, ignored: the fallback then runs.
* ``fallback``: the /run override, the rollback, the restart onto it, verify.
  They run when the plan's path is the fallback, or once a durable step failed.
* ``always``: clean up and say what was done.

The memory gates and the fallback's restart and verification are not ignorable:
a run that may not restart the server, or whose fallback fails, stops and fails.
The override and the rollback fail ignored: a rollback runs even when the
override cannot take effect, and no restart follows an override that did not.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

from remedy.core.config import desired, guard, volatile
from remedy.core.config.host_data import HostData
from remedy.core.programs import commands, journal
from remedy.core.programs import step_values as sv
from remedy.core.programs.builder import Builder
from remedy.core.readings import memory as mem
from remedy.core.readings import probe
from remedy.core.readings.snapshot import HostSnapshot
from remedy.core.run.plan import (
    DURABLE,
    FALLBACK,
    NOOP,
    SERVING_PARSER_ENV,
    RestorePlan,
    override_in_place,
)

ALWAYS = "always"


@dataclass(frozen=True)
class StepTemplate:
    """A step of every run: its key (what gives it its values: never its human name),
    its operation, what it says, its stage and its issue."""

    key: str
    op: str  # "<module>.<operation>" of remedy.operations
    name: str
    stage: str
    issue: str = "tt-stack#49"
    ignorable: bool = False  # a failure gives up the durable path; the run goes on

    @property
    def title(self) -> str:
        return f"{self.name} ({self.issue})"


D, F, A = DURABLE, FALLBACK, ALWAYS
T = StepTemplate
# The run's order: the deploy, --dry, the manual script and the runbooks' check read it here.
TEMPLATES: tuple[StepTemplate, ...] = (
    # where the run begins, in the run journal; a plan made for another state stops here
    T("begin", "serving.run_begun", "Record where the run begins", A),
    # the gate first: a refusal (the run stops) leaves no scratch clone behind
    T("gate_nix", "memory.headroom_gated", "Memory gate before Nix evaluates and builds", D),
    T("bump", "nix.flake_input_updated", "Scratch clone; bump the tt-stack input", D,
      ignorable=True),
    T("managed", "nix.managed_file_written", "Write remedy's managed Nix file", D,
      "tt-stack#52", ignorable=True),
    T("prove", "nix.fix_proven", "Prove the build holds the desired state", D,
      "tt-stack#34", ignorable=True),
    T("hugepages", "memory.hugepages_reduced", "Release free hugepages", D, ignorable=True),
    T("gate_switch", "memory.headroom_gated", "Memory gate before the switch", D),
    T("drain", "serving.drained", "Wait for an idle server before the restart", D,
      ignorable=True),
    T("remove_override", "serving.runtime_override_removed", "Remove the stale /run override",
      D, ignorable=True),
    # the checkout moves right before the switch: a gate that refuses, a drain, or the
    # removal of the stale override that fails leaves both where they were
    T("fast_forward", "nix.flake_lock_committed",
      "Fast-forward the checkout to the proven commits", D, ignorable=True),
    T("switch", "nix.system_switched", "Switch to the proven system", D, ignorable=True),
    T("restart", "serving.restarted", "Restart if what systemd starts changed", D,
      ignorable=True),
    T("verify", "serving.toolcalling_verified", "Verify tool calling", D, ignorable=True),
    # once the next boot holds what a /run drop-in carried (remedy adopt): after the verify
    T("remove_carriers", "serving.runtime_carriers_removed",
      "Remove the /run drop-ins the next boot now carries", D, "tt-stack#60", ignorable=True),
    # Fallback: the override first, so a failed durable path never leaves hermes on disk
    T("override", "serving.runtime_override_written", "Write the /run fallback override", F,
      ignorable=True),
    T("rollback", "nix.system_rolled_back", "Roll back to the recorded generation", F,
      ignorable=True),
    T("hugepages_fallback", "memory.hugepages_reduced",
      "Release free hugepages for the fallback", F),
    T("gate_fallback", "memory.headroom_gated", "Memory gate before the fallback", F),
    T("drain_fallback", "serving.drained",
      "Wait for an idle server before the fallback restart", F, ignorable=True),
    T("restart_fallback", "serving.restarted", "Restart onto the /run override", F),
    T("verify_fallback", "serving.toolcalling_verified", "Verify the fallback", F),
    T("scratch_removed", "nix.scratch_removed", "Remove the scratch clone", A),
    T("outcome", "serving.outcome_reported", "Report the outcome", A),
)  # fmt: skip


@dataclass(frozen=True)
class Step:
    template: StepTemplate
    values: sv.StepValues

    @property
    def op(self) -> str:
        return self.template.op

    @property
    def stage(self) -> str:
        return self.template.stage


@dataclass(frozen=True)
class Steps:
    """A host's run: its steps, and why it finishes an earlier run (or None)."""

    steps: tuple[Step, ...]
    resuming: str | None = None

    def find(self, op: str, stage: str | None = None) -> int:
        for i, step in enumerate(self.steps):
            if step.op == op and (stage is None or step.stage == stage):
                return i
        raise KeyError(op)


@dataclass(frozen=True)
class Ran:
    """What the steps carry out: the runbook (its id) and its issues. The deploy and the
    manual script of the same runbook give the same, so their commits say the same."""

    runbook: str
    issues: tuple[str, ...] = ()

    def __str__(self) -> str:
        issues = f" ({', '.join(self.issues)})" if self.issues else ""
        return f"remedy's runbook {self.runbook}{issues}"


def lock_message(s: HostData, old_rev: str | None, ran: Ran | None = None) -> str:
    """The lock commit's message (the new rev is known once Nix fetched it: {new})."""
    return (
        f"flake.lock: bump {s.flake_input} {(old_rev or '?')[:12]} -> {{new}} (tt-stack#49)\n\n"
        f"Deploys the tool-call parser fix (tt-stack#34, tt-stack#44): "
        f"--tool-call-parser {s.tool_call_parser}.\nCommitted by {ran or 'remedy'}."
    )


def managed_message(s: HostData, scope: tuple[str, ...], ran: Ran | None = None) -> str:
    issues = sorted(
        {
            desired.BY_KEY[k].issue
            for k in scope
            if desired.BY_KEY[k].durable == desired.MANAGED_FILE
        }
    )
    return (
        f"{s.managed_file}: remedy's managed settings ({', '.join(issues)})\n\n"
        "Values tt-stack's defaults do not give this host: the hugepage pool and the\n"
        f"Phase 2a options. Written by {ran or 'remedy'} from its host data."
    )


def _durable_skip(plan: RestorePlan) -> str | None:
    if plan.path == NOOP:
        return f"nothing to do: {plan.reasons[0]}"
    if plan.path != DURABLE:
        why = "; ".join(plan.durable_blockers) or plan.path
        return f"durable path not taken ({why})"
    return None


def _fallback_skip(plan: RestorePlan) -> str | None:
    if plan.path == NOOP:
        return f"nothing to do: {plan.reasons[0]}"
    return None


UNREAD_CARRIERS = (
    "the host was not read: the /run drop-ins that carry data settings (remedy adopt) "
    "stay; a reboot removes them, or run the deploy"
)
NO_REBUILD = "the deployed configuration holds every durable setting; no rebuild"


class _Values:
    """The values of each step of one host's run: a method per template key, each
    giving the step's typed values (``remedy.core.programs.step_values``)."""

    def __init__(
        self, plan, snap, s: HostData, run_id: str, unhealthy, builder=None, name=None, ran=None
    ):
        self.plan, self.snap, self.s, self.unhealthy = plan, snap, s, unhealthy
        self.ran = ran
        self.host_name = name or s.flake_host
        self.builder = builder
        self.resuming = None
        if plan.path == DURABLE and plan.rebuild and snap is not None:
            self.resuming = snap.journal.resumable(snap.checkout.head)
        if self.resuming:
            run_id = snap.journal.get("run_id") or run_id  # go on with that run's journal
        self.durable_skip, self.fallback_skip = _durable_skip(plan), _fallback_skip(plan)
        self.contingent = plan.path == DURABLE  # the fallback runs if the durable path fails
        self.run = {"journal": journal.path(s.unit), "run_id": run_id}
        self.restart_ahead = plan.restart_expected
        self.locked = snap.flake_input if snap is not None else None

    def skip_durable(self, own: str | None) -> str | None:
        return self.durable_skip or own

    @property
    def managed_before(self) -> str | None:
        """remedy's managed file as the run found it (what its earlier run made)."""
        return self.snap.managed.content if self.snap is not None else None

    def begin(self) -> sv.Begin:
        s, snap = self.s, self.snap
        skip = f"nothing to do: {self.plan.reasons[0]}" if self.plan.path == NOOP else None
        expect = {}
        if snap is not None:  # the host as the plan read it
            expect = {
                "expect_machine_id": snap.machine_id or "",
                "expect_head": snap.checkout.head or "",
                "expect_profile": snap.generations.profile or "",
                "expect_current": snap.generations.current_system or "",
                # what systemd starts the server with (the seed's /run override, the
                # durable script): the steps' decisions rest on it
                "expect_exec_start": snap.unit.now.exec_start or "",
            }
            said = "\0".join([*expect.values(), *self.plan.reasons])
            expect["plan_id"] = hashlib.sha256(said.encode()).hexdigest()[:16]
        return sv.Begin(
            **self.run, unit=s.unit, flake_dir=s.flake_dir, host=self.host_name,
            **expect, skip=skip,
        )  # fmt: skip

    def gate(self, doing: str, own: str | None, skip: str | None) -> sv.Gate:
        now = None
        if self.snap is not None:
            now = round(self.snap.memory.mem_available_kb * 1024 / 1e9, 1)
        return sv.Gate(
            **self.run, min_gb=self.s.min_mem_available_gb, doing=doing, host=self.host_name,
            now_gb=now, skip=skip or own,
        )  # fmt: skip

    def hugepages_of(self, skip: str | None, restart: bool, contingent: bool) -> sv.Hugepages:
        """The pool is a managed setting (converge), or only headroom before a restart."""
        managed = "hugepages" in self.plan.scope
        own = None
        if not self.s.hugepages_target:
            own = "no hugepages_target set for this host"
        elif not managed and not restart:
            own = "no restart ahead"
        pools = sorted(self.s.hugepages_target.items())
        targets = tuple(f"{mem.SIZES_BY_LABEL[label]}:{n}" for label, n in pools)
        return sv.Hugepages(
            **self.run, items=targets, managed=managed, skip=skip or own, contingent=contingent
        )

    def bump(self) -> sv.Bump:
        s, plan, locked = self.s, self.plan, self.locked
        own = None if plan.rebuild else NO_REBUILD
        return sv.Bump(
            **self.run,
            flake_dir=s.flake_dir,
            flake_input=s.flake_input,
            flake_host=s.flake_host,
            update=plan.update_input,
            pinned_rev=s.pinned_rev,
            allowed_signers=None,  # read on this machine at prepare (remedy.operations)
            trusted_signers=s.trusted_signers,
            required_fix_rev=s.required_fix_rev,
            lock_message=lock_message(s, locked.rev if locked else None, self.ran),
            builder=self.builder,
            skip=self.skip_durable(self.resuming or own),
        )

    def managed(self) -> sv.Managed:
        s, plan = self.s, self.plan
        in_scope = [
            desired.BY_KEY[k].label
            for k in plan.scope
            if desired.BY_KEY[k].durable == desired.MANAGED_FILE
        ]
        if plan.managed_text is None:
            own = (
                f"the next boot already has {', '.join(in_scope)}, or {s.managed_file} says so"
                if in_scope
                else f"no setting in scope lives in {s.managed_file}"
            )
        else:
            own = self.resuming
        return sv.Managed(
            **self.run,
            flake_dir=s.flake_dir,
            managed_file=s.managed_file,
            text=plan.managed_text or "",
            message=managed_message(s, plan.scope, self.ran),
            flake_host=s.flake_host,
            builder=self.builder,
            skip=self.skip_durable(own),
        )

    def gate_nix(self) -> sv.Gate:
        own = self.resuming or (None if self.plan.rebuild else "nothing to build")
        if not own and self.builder:
            own = f"the builder {self.builder.name} evaluates and builds: no nix evaluates here"
        return self.gate("evaluating and building the new system", own, self.durable_skip)

    def prove(self) -> sv.Prove:
        s = self.s
        own = self.resuming or (None if self.plan.rebuild else "nothing was bumped")
        checks, default = s.checks
        items = (
            *(f"check:{c}" for c in checks),
            *desired.proof_items(s, tuple(self.plan.prove), self.managed_before),
        )
        return sv.Prove(
            **self.run,
            flake_dir=s.flake_dir,
            flake_host=s.flake_host,
            flake_input=s.flake_input,
            unit=s.unit,
            min_gb=s.min_mem_available_gb,
            nix_memory_max_gb=s.nix_memory_max_gb,
            nix_timeout_s=s.nix_timeout_s,
            build_max_jobs=s.build_max_jobs,
            build_cores=s.build_cores,
            allow_local_build=s.allow_local_build,
            checks_default=default,
            builder=self.builder,
            items=items,
            checks=tuple(checks),
            host_data=s,
            skip=self.skip_durable(own),
        )

    def fast_forward(self) -> sv.FastForward:
        return sv.FastForward(
            **self.run,
            flake_dir=self.s.flake_dir,
            skip=self.skip_durable(None if self.plan.rebuild else NO_REBUILD),
        )

    def hugepages(self) -> sv.Hugepages:
        return self.hugepages_of(self.durable_skip, self.restart_ahead, False)

    def gate_switch(self) -> sv.Gate:
        own = None if self.restart_ahead else "no restart ahead"
        return self.gate("restarting the server", own, self.durable_skip)

    def _drain(self, stage: str, own: str | None, skip: str | None) -> sv.Drain:
        return sv.Drain(
            **self.run,
            server_url=self.s.server_url,
            timeout_s=self.s.drain_timeout_s,
            wait_s=self.s.drain_timeout_s,  # one call waits it all (the manual script)
            urgent=self.plan.urgent,
            contingent=self.contingent and stage == F,
            skip=skip or own,
        )

    def drain(self) -> sv.Drain:
        own = None
        if not self.restart_ahead:
            own = (
                "no restart ahead: durable at next boot"
                if self.plan.boot_only
                else ("no restart ahead")
            )
        return self._drain(D, own, self.durable_skip)

    def drain_fallback(self) -> sv.Drain:
        own = None if (self.contingent or self.plan.restart_expected) else "no restart ahead"
        return self._drain(F, own, self.fallback_skip)

    def remove_override(self) -> sv.RemoveOverride:
        s = self.s
        # an override the plan keeps is said as the plan says it (kept until the next
        # boot, or for the fallback), not as none
        kept = [p.action for p in self.plan.settings
                if p.drift.key == "runtime_override" and p.action.startswith("kept")]  # fmt: skip
        own = None if self.plan.remove_override else (kept or ["no runtime override to remove"])[0]
        return sv.RemoveOverride(
            **self.run, unit=s.unit, dropin=s.override_dropin, script=s.override_script,
            skip=self.skip_durable(own),
        )  # fmt: skip

    def remove_carriers(self) -> sv.RemoveCarriers:
        """The /run drop-ins of data settings (volatile.carriers) whose every setting the
        next boot holds now, or holds once this run's proven system is the boot default."""
        if self.snap is None:
            return sv.RemoveCarriers(**self.run, unit=self.s.unit, skip=UNREAD_CARRIERS)
        plan, now = self.plan, {d.key: d for d in desired.drifts(self.snap, self.s)}
        proven = set(plan.prove) if plan.path == DURABLE and plan.rebuild else set()

        def held(key: str) -> bool:
            d = now.get(key)
            return key in proven or (d is not None and d.next_boot == d.desired)

        paths = [
            path
            for path, keys in volatile.carriers(self.snap, self.s).items()
            if all(k in plan.scope and held(k) for k in keys)
        ]
        own = None if paths else "no /run drop-in carries what the next boot holds"
        # a run with nothing else to do still removes one (the next boot holds it already)
        skip = own if plan.path == NOOP else self.skip_durable(own)
        return sv.RemoveCarriers(**self.run, unit=self.s.unit, items=tuple(paths), skip=skip)

    def switch(self) -> sv.Switch:
        plan = self.plan
        own = None
        if not (plan.rebuild or plan.finish_switch):
            own = "the deployed configuration already has the fix; no switch needed"
        return sv.Switch(
            **self.run,
            toplevel=plan.finish_switch,
            set_profile=not plan.finish_switch,
            action="boot" if plan.boot_only else "switch",
            unit=self.s.unit,
            lock_wait_s=self.s.lock_wait_s,
            server_url=self.s.server_url,
            skip=self.skip_durable(own),
        )

    def _restart(self, stage: str, own: str | None, skip: str | None) -> sv.Restart:
        plan, snap, s = self.plan, self.snap, self.s
        ran_override_before = (
            snap is not None
            and override_in_place(snap, s, plan.scope)
            and (snap.probe.parsed or snap.probe.inconclusive)
        )
        return sv.Restart(
            **self.run,
            unit=s.unit,
            stage=stage,
            min_gb=s.min_mem_available_gb,
            may_restart=bool(plan.restart is None or plan.restart.allowed),
            reason=plan.restart.why if plan.restart else "",
            override_ran_before=ran_override_before,
            server_url=s.server_url,
            host=self.host_name,
            contingent=self.contingent and stage == F,
            skip=skip or own,
        )

    def restart(self) -> sv.Restart:
        own = None
        if self.plan.boot_only:
            own = f"durable at next boot, no restart now: {self.plan.restart.why}"
        elif not self.restart_ahead:
            own = "the effective ExecStart did not change"
        return self._restart(D, own, self.durable_skip)

    def restart_fallback(self) -> sv.Restart:
        return self._restart(F, None, self.fallback_skip)

    def _verify(self, stage: str, skip: str | None) -> sv.Verify:
        s, deferred = self.s, set(self.plan.deferred)
        head, _, tail = probe.request_body(probe.MODEL_MARK).partition(probe.MODEL_MARK)
        items = (
            *serving_wanted(s, deferred),
            *(f"later:{k}" for k in SERVING_PARSER_ENV if s.urgency(k) != "now"),
        )
        return sv.Verify(
            **self.run,
            unit=s.unit,
            stage=stage,
            server_url=s.server_url,
            model=s.model,
            probe_timeout_s=s.probe_timeout_s,
            ready_timeout_s=s.ready_timeout_s,
            parsed_before=bool(self.snap and self.snap.probe.parsed),
            probe_head=head,
            probe_tail=tail,
            items=items,
            contingent=self.contingent and stage == F,
            skip=skip,
        )

    def verify(self) -> sv.Verify:
        return self._verify(D, self.durable_skip)

    def verify_fallback(self) -> sv.Verify:
        return self._verify(F, self.fallback_skip)

    def override(self) -> sv.Override:
        """The /run override, and what it carries of the data settings in scope (their
        variables and properties in its drop-in; their sysctls, with sysctl -w)."""
        plan, s = self.plan, self.s
        carried = desired.fallback_carried(s, plan.scope, self.snap)
        write = not (not plan.write_override and plan.path == FALLBACK)
        own = None
        if not write and not carried.sysctls:
            own = "the server runs the wanted parser and environment; no override needed"
        env = {**carried.env, **s.required_env}
        return sv.Override(
            **self.run,
            unit=s.unit,
            parser=s.tool_call_parser,
            exports="\n".join(f"{k}={v}" for k, v in sorted(s.required_env.items())),
            override_script=s.override_script,
            override_dropin=s.override_dropin,
            dropin_text=commands.dropin_text(
                s.override_script,
                env,
                carried.properties,
                guard.arguments(s) if "memory_guard" in plan.scope else None,
            ),  # fmt: skip
            min_gb=s.min_mem_available_gb,
            write=write,
            lacking=", ".join(carried.lacking),
            host=self.host_name,
            items=(
                *serving_wanted(s, set(plan.deferred)),
                *(f"sysctl:{k}={v}" for k, v in sorted(carried.sysctls.items())),
            ),
            contingent=self.contingent,
            skip=self.fallback_skip or own,
        )

    def rollback(self) -> sv.Rollback:
        s = self.s
        return sv.Rollback(
            **self.run, unit=s.unit, flake_dir=s.flake_dir, flake_host=s.flake_host,
            min_gb=s.min_mem_available_gb, lock_wait_s=s.lock_wait_s, host=self.host_name,
            skip=None if self.plan.path == DURABLE else "no switch in this run",
        )  # fmt: skip

    def hugepages_fallback(self) -> sv.Hugepages:
        restart = self.contingent or self.plan.restart_expected  # a failed durable path restarts
        return self.hugepages_of(self.fallback_skip, restart, self.contingent)

    def gate_fallback(self) -> sv.Gate:
        own = None
        if self.plan.path == FALLBACK and not self.plan.restart_expected:
            own = "no restart ahead"
        gate = self.gate("restarting the server", own, self.fallback_skip)
        return dataclasses.replace(gate, contingent=self.contingent)

    def scratch_removed(self) -> sv.ScratchRemoved:
        made = self.plan.path == DURABLE and self.plan.rebuild
        left = tuple(self.snap.journal.scratch_clones) if self.snap is not None else ()
        return sv.ScratchRemoved(
            **self.run, flake_dir=self.s.flake_dir, builder=self.builder if made else None,
            made=made, left=left, skip=None if (made or left) else "no scratch clone",
        )  # fmt: skip

    def outcome(self) -> sv.Outcome:
        locked = self.locked
        return sv.Outcome(
            **self.run,
            plan_path=self.plan.path,
            reasons="; ".join(self.plan.reasons),
            old_rev=locked.rev if locked else None,
            flake_input=self.s.flake_input,
            unhealthy=self.unhealthy,
        )


def serving_wanted(s: HostData, deferred: set[str]) -> tuple[str, ...]:
    """What the serving process must have (want:KEY=VALUE): the parser and the variables
    of SERVING_PARSER_ENV, but for the DEFERRED settings."""
    out = []
    for key in SERVING_PARSER_ENV:
        if key in deferred:
            continue
        if key == "tool_call_parser":
            out.append(f"want:tool_call_parser={s.tool_call_parser}")
        elif key in s.required_env:
            out.append(f"want:{key}={s.required_env[key]}")
    return tuple(out)


def plan_steps(
    plan: RestorePlan,
    snap: HostSnapshot,
    s: HostData,
    run_id: str,
    unhealthy: str | None = None,
    builder: Builder | None = None,
    host_name: str | None = None,
    ran: Ran | None = None,
) -> Steps:
    """Every step of this host's run with its values (see the module's doc); BUILDER:
    the builder its build_host names (the inventory knows it), or None; RAN: the
    runbook the run carries out (its commits name it and its issues)."""
    values = _Values(plan, snap, s, run_id, unhealthy, builder, host_name, ran)
    path = FALLBACK if plan.path == FALLBACK else DURABLE
    steps = tuple(Step(t, staged(t, getattr(values, t.key)(), path)) for t in TEMPLATES)
    return Steps(steps, values.resuming)


def when_of(t: StepTemplate) -> str:
    """When a step runs (remedy/host/lib.sh ``stage_off`` decides it on the host): its
    stage, and the override and the rollback have conditions of their own."""
    if t.op == "serving.runtime_override_written":
        return "override"
    if t.op == "nix.system_rolled_back":
        return "rollback"
    return t.stage


def staged(t: StepTemplate, values: sv.StepValues, path: str) -> sv.StepValues:
    """VALUES with what its program needs to decide when it runs."""
    if not isinstance(values, sv.RunValues) or isinstance(values, sv.Outcome):
        return values  # (the outcome has no stage: it reads the run's answers)
    failure = "gives-up" if t.ignorable else "stops"
    return dataclasses.replace(values, when=when_of(t), failure=failure, path=path)


def with_allowed_signers(planned: Steps, allowed: str) -> Steps:
    """PLANNED with the bump checking signatures against ALLOWED (trusted_signers' text,
    read on the machine that runs remedy)."""
    out = []
    for step in planned.steps:
        if step.op == "nix.flake_input_updated":
            step = Step(step.template, dataclasses.replace(step.values, allowed_signers=allowed))
        out.append(step)
    return Steps(tuple(out), planned.resuming)


UNREAD = "the host was not read when the plan was made: each step decides on the host"


def unread_plan(s: HostData, scope: tuple[str, ...]) -> RestorePlan:
    """The plan for a host that could not be read (the manual script, rendered where
    remedy cannot reach it): durable, every step on, the fallback if the durable path
    gives up; each step's program decides on the host whether it has work. The settings
    of remedy's managed file are written and proven only when the host's configuration
    imports it, which the plan cannot know: it proves the tool-calling settings."""
    from remedy.core.config import restarts

    proven = tuple(k for k in scope if desired.BY_KEY[k].durable == desired.FLAKE_INPUT)
    return RestorePlan(
        DURABLE if s.durable else FALLBACK,
        [UNREAD],
        rebuild=s.durable,
        remove_override=True,
        restart_expected=True,
        update_input=True,
        write_override=True,
        scope=scope,
        prove=proven,
        restart=restarts.RestartDecision(
            True, list(scope), [], "now", "a person runs it: the restart is now"
        ),
    )
