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

from dataclasses import dataclass, field

from remedy.core.config import desired, volatile
from remedy.core.config.host_data import HostData
from remedy.core.programs import journal
from remedy.core.programs.builder import Builder
from remedy.core.readings import nix as nix_core
from remedy.core.readings.snapshot import HostSnapshot
from remedy.core.run.plan import DURABLE, FALLBACK, NOOP, RestorePlan, override_in_place

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
    # the gate first: a refusal (the run stops) leaves no scratch clone behind
    T("gate_nix", "memory.headroom_gated", "Memory gate before Nix evaluates and builds", D),
    T("bump", "nix.flake_input_updated", "Scratch clone; bump the tt-stack input", D,
      ignorable=True),
    T("managed", "nix.managed_file_written", "Write remedy's managed Nix file", D,
      "tt-stack#52", ignorable=True),
    T("prove", "nix.fix_proven", "Prove the build holds the desired state", D,
      "tt-stack#34", ignorable=True),
    T("fast_forward", "nix.flake_lock_committed",
      "Fast-forward the checkout to the proven commits", D, ignorable=True),
    T("hugepages", "memory.hugepages_reduced", "Release free hugepages", D, ignorable=True),
    T("gate_switch", "memory.headroom_gated", "Memory gate before the switch", D),
    T("drain", "serving.drained", "Wait for an idle server before the restart", D,
      ignorable=True),
    T("remove_override", "serving.runtime_override_removed", "Remove the stale /run override",
      D, ignorable=True),
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
    args: dict = field(default_factory=dict)

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


def lock_message(s: HostData, old_rev: str | None, by: str = "restore_toolcalling deploy") -> str:
    """The lock commit's message (the new rev is known once Nix fetched it: {new})."""
    return (
        f"flake.lock: bump {s.flake_input} {(old_rev or '?')[:12]} -> {{new}} (tt-stack#49)\n\n"
        f"Deploys the tool-call parser fix (tt-stack#34, tt-stack#44): "
        f"--tool-call-parser {s.tool_call_parser}.\nCommitted by remedy's {by}."
    )


def managed_message(s: HostData, scope: tuple[str, ...]) -> str:
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
        "Phase 2a options. Written by remedy's converge deploy from its host data."
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


def _override_problem(unit, s: HostData) -> str | None:
    """Why the fallback cannot derive an override from the unit's start script."""
    store = unit.store_script
    if store is None:
        return f"{s.unit} has no start script in its fragment to derive an override from"
    if store.parser_flag_count != 1:
        return (
            f"{store.path}: --tool-call-parser appears {store.parser_flag_count} times, "
            "expected exactly once; not deriving an override from it"
        )
    return None


NO_REBUILD = "the deployed configuration holds every durable setting; no rebuild"


class _Values:
    """The values of each step of one host's run: a method per template key."""

    def __init__(self, plan, snap, s: HostData, run_id: str, unhealthy, builder=None):
        self.plan, self.snap, self.s, self.unhealthy = plan, snap, s, unhealthy
        self.builder = builder
        self.resuming = None
        if plan.path == DURABLE and plan.rebuild:
            self.resuming = snap.journal.resumable(snap.checkout.head)
        if self.resuming:
            run_id = snap.journal.get("run_id") or run_id  # go on with that run's journal
        self.durable_skip, self.fallback_skip = _durable_skip(plan), _fallback_skip(plan)
        self.contingent = plan.path == DURABLE  # the fallback runs if the durable path fails
        self.common = {"journal_path": journal.path(s.unit), "run_id": run_id}
        self.owned = {"owner": snap.checkout.owner or "root", "home": snap.checkout.home}
        self.restart_ahead = plan.restart_expected
        self.locked = snap.flake_input

    def skip_durable(self, own: str | None) -> str | None:
        return self.durable_skip or own

    def gate(self, doing: str, own: str | None, skip: str | None) -> dict:
        headroom_gb = self.snap.memory.mem_available_kb * 1024 / 1e9
        return {
            "min_gb": self.s.min_mem_available_gb,
            "doing": doing,
            "now_gb": round(headroom_gb, 1),
            "contingent": False,
            "skip": skip or own,
        }

    def hugepages_of(self, skip: str | None, restart: bool) -> dict:
        """The pool is a managed setting (converge), or only headroom before a restart."""
        managed = "hugepages" in self.plan.scope
        own = None
        if not self.s.hugepages_target:
            own = "no hugepages_target set for this host"
        elif not managed and not restart:
            own = "no restart ahead"
        return {"targets": dict(self.s.hugepages_target), "managed": managed, "skip": skip or own}

    def bump(self) -> dict:
        s, plan, locked, snap = self.s, self.plan, self.locked, self.snap
        own = None if plan.rebuild else NO_REBUILD
        return {
            **self.common,
            **self.owned,
            "flake_dir": s.flake_dir,
            "flake_input": s.flake_input,
            "flake_host": s.flake_host,
            "update": plan.update_input,
            "update_argv": list(snap.nix.update_input_argv) if snap.nix else [],
            "locked_url": locked.url if locked else "",
            "locked_ref": locked.ref if locked else None,
            "old_rev": locked.rev if locked else None,
            "base_head": snap.checkout.head,
            "pinned_rev": s.pinned_rev,
            "allowed_signers": None,  # read on this machine at prepare (remedy.operations)
            "trusted_signers": s.trusted_signers,
            "required_fix_rev": s.required_fix_rev,
            "lock_message": lock_message(s, locked.rev if locked else None),
            "builder": self.builder,
            "skip": self.skip_durable(self.resuming or own),
        }

    def managed(self) -> dict:
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
        return {
            **self.common,
            **self.owned,
            "managed_file": s.managed_file,
            "text": plan.managed_text or "",
            "message": managed_message(s, plan.scope),
            "flake_host": s.flake_host,
            "builder": self.builder,
            "skip": self.skip_durable(own),
        }

    def gate_nix(self) -> dict:
        own = self.resuming or (None if self.plan.rebuild else "nothing to build")
        if not own and self.builder:
            own = f"the builder {self.builder.name} evaluates and builds: no nix evaluates here"
        return self.gate("evaluating and building the new system", own, self.durable_skip)

    def prove(self) -> dict:
        snap = self.snap
        own = self.resuming or (None if self.plan.rebuild else "nothing was bumped")
        return {
            **self.common,
            **self.owned,
            "host_data": self.s,
            "prove": list(self.plan.prove),
            "nix_label": snap.nix.label if snap.nix else "Nix",
            "new_derivation_cli": bool(snap.nix and nix_core.derivation_show_is_new(snap.nix)),
            "systemd_run": snap.tools.systemd_run,
            "current_system": snap.generations.current_system,
            "builder": self.builder,
            "skip": self.skip_durable(own),
        }

    def fast_forward(self) -> dict:
        return {
            **self.common,
            **self.owned,
            "flake_dir": self.s.flake_dir,
            "skip": self.skip_durable(None if self.plan.rebuild else NO_REBUILD),
        }

    def hugepages(self) -> dict:
        return {**self.hugepages_of(self.durable_skip, self.restart_ahead), "contingent": False}

    def gate_switch(self) -> dict:
        own = None if self.restart_ahead else "no restart ahead"
        return self.gate("restarting the server", own, self.durable_skip)

    def _drain(self, stage: str, own: str | None, skip: str | None) -> dict:
        return {
            **self.common,
            "server_url": self.s.server_url,
            "timeout_s": self.s.drain_timeout_s,
            "urgent": self.plan.urgent,
            "contingent": self.contingent and stage == F,
            "skip": skip or own,
        }

    def drain(self) -> dict:
        own = None
        if not self.restart_ahead:
            own = (
                "no restart ahead: durable at next boot"
                if self.plan.boot_only
                else ("no restart ahead")
            )
        return self._drain(D, own, self.durable_skip)

    def drain_fallback(self) -> dict:
        own = None if (self.contingent or self.plan.restart_expected) else "no restart ahead"
        return self._drain(F, own, self.fallback_skip)

    def remove_override(self) -> dict:
        s, running = self.s, self.snap.unit.now.exec_start
        scripts = [s.override_script]
        if running and running.startswith("/run/") and running != s.override_script:
            scripts.append(running)
        own = None if self.plan.remove_override else "no runtime override to remove"
        return {
            **self.common,
            "unit": s.unit,
            "dropin": s.override_dropin,
            "scripts": scripts,
            "skip": self.skip_durable(own),
        }

    def remove_carriers(self) -> dict:
        """The /run drop-ins of data settings (volatile.carriers) whose every setting the
        next boot holds now, or holds once this run's proven system is the boot default."""
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
        return {"unit": self.s.unit, "paths": paths, "skip": skip}

    def switch(self) -> dict:
        plan, snap = self.plan, self.snap
        own = None
        if not (plan.rebuild or plan.finish_switch):
            own = "the deployed configuration already has the fix; no switch needed"
        return {
            **self.common,
            "action": "boot" if plan.boot_only else "switch",
            "toplevel": plan.finish_switch,
            "set_profile": not plan.finish_switch,
            "unit": self.s.unit,
            "transient": snap.tools.systemd_run,
            "lock_wait_s": self.s.lock_wait_s,
            "server_url": self.s.server_url,
            "skip": self.skip_durable(own),
        }

    def _restart(self, stage: str, own: str | None, skip: str | None) -> dict:
        plan, snap, s = self.plan, self.snap, self.s
        ran_override_before = override_in_place(snap, s, plan.scope) and (
            snap.probe.parsed or snap.probe.inconclusive
        )
        return {
            **self.common,
            "unit": s.unit,
            "stage": stage,
            "pid_before": snap.unit.main_pid,
            "override_ran_before": ran_override_before,
            "min_gb": s.min_mem_available_gb,
            "contingent": self.contingent and stage == F,
            "may_restart": bool(plan.restart is None or plan.restart.allowed),
            "reason": plan.restart.why if plan.restart else "",
            "server_url": s.server_url,
            "skip": skip or own,
        }

    def restart(self) -> dict:
        own = None
        if self.plan.boot_only:
            own = f"durable at next boot, no restart now: {self.plan.restart.why}"
        elif not self.restart_ahead:
            own = "the effective ExecStart did not change"
        return self._restart(D, own, self.durable_skip)

    def restart_fallback(self) -> dict:
        return self._restart(F, None, self.fallback_skip)

    def _verify(self, stage: str, skip: str | None) -> dict:
        snap = self.snap
        return {
            **self.common,
            "deferred": list(self.plan.deferred),
            "host_data": self.s,
            "stage": stage,
            "pid_before": snap.unit.main_pid,
            "parsed_before": snap.probe.parsed,
            "contingent": self.contingent and stage == F,
            "skip": skip,
        }

    def verify(self) -> dict:
        return self._verify(D, self.durable_skip)

    def verify_fallback(self) -> dict:
        return self._verify(F, self.fallback_skip)

    def override(self) -> dict:
        """The /run override, and what it carries of the data settings in scope (their
        variables and properties in its drop-in; their sysctls, with sysctl -w)."""
        plan, store = self.plan, self.snap.unit.store_script
        carried = desired.fallback_carried(self.s, plan.scope, self.snap)
        write = not (not plan.write_override and plan.path == FALLBACK)
        own = None
        if not write and not carried.sysctls:
            own = "the server runs the wanted parser and environment; no override needed"
        return {
            **self.common,
            "host_data": self.s,
            "deferred": list(plan.deferred),
            "store_script": store.path if store else None,
            "problem": _override_problem(self.snap.unit, self.s) if write else None,
            "contingent": self.contingent,
            "write": write,
            "carried_env": carried.env,
            "carried_properties": carried.properties,
            "carried_lacking": list(carried.lacking),
            "sysctls": carried.sysctls,
            "skip": self.fallback_skip or own,
        }

    def rollback(self) -> dict:
        g, s = self.snap.generations, self.s
        return {
            **self.common,
            **self.owned,
            "profile": g.profile,
            "current_system": g.current_system,
            "flake_dir": s.flake_dir,
            "flake_host": s.flake_host,
            "base_head": self.snap.checkout.head,
            "min_gb": s.min_mem_available_gb,
            "transient": self.snap.tools.systemd_run,
            "lock_wait_s": s.lock_wait_s,
            "skip": None if self.plan.path == DURABLE else "no switch in this run",
        }

    def hugepages_fallback(self) -> dict:
        restart = self.contingent or self.plan.restart_expected  # a failed durable path restarts
        return {**self.hugepages_of(self.fallback_skip, restart), "contingent": self.contingent}

    def gate_fallback(self) -> dict:
        own = None
        if self.plan.path == FALLBACK and not self.plan.restart_expected:
            own = "no restart ahead"
        return {
            **self.gate("restarting the server", own, self.fallback_skip),
            "contingent": self.contingent,
        }

    def scratch_removed(self) -> dict:
        return {
            **self.common,
            **self.owned,
            "made": self.plan.path == DURABLE and self.plan.rebuild,
            "left": list(self.snap.journal.scratch_clones),
            "builder": self.builder,
        }

    def outcome(self) -> dict:
        locked = self.locked
        return {
            "plan_path": self.plan.path,
            "summary": "; ".join(self.plan.reasons),
            "old_rev": locked.rev if locked else None,
            "flake_input": self.s.flake_input,
            "unhealthy": self.unhealthy,
        }


def plan_steps(
    plan: RestorePlan,
    snap: HostSnapshot,
    s: HostData,
    run_id: str,
    unhealthy: str | None = None,
    builder: Builder | None = None,
) -> Steps:
    """Every step of this host's run with its values (see the module's doc); BUILDER:
    the builder its build_host names (the inventory knows it), or None."""
    values = _Values(plan, snap, s, run_id, unhealthy, builder)
    steps = tuple(Step(t, getattr(values, t.key)()) for t in TEMPLATES)
    return Steps(steps, values.resuming)


def with_allowed_signers(planned: Steps, allowed: str) -> Steps:
    """PLANNED with the bump checking signatures against ALLOWED (trusted_signers' text,
    read on the machine that runs remedy)."""
    out = []
    for step in planned.steps:
        if step.op == "nix.flake_input_updated":
            step = Step(step.template, {**step.args, "allowed_signers": allowed})
        out.append(step)
    return Steps(tuple(out), planned.resuming)
