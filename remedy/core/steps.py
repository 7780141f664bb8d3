"""The run as a list of steps with values: what every deploy carries out, in order.

``plan_steps`` is pure. From the plan (``remedy.core.plan``), the snapshot and the
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

from remedy.core import desired, journal
from remedy.core import nix as nix_core
from remedy.core.plan import DURABLE, FALLBACK, NOOP, RestorePlan, override_in_place
from remedy.core.settings import Settings
from remedy.core.snapshot import HostSnapshot

ALWAYS = "always"


@dataclass(frozen=True)
class StepTemplate:
    """A step of every run: its operation, what it says, its stage and its issue."""

    op: str  # "<module>.<operation>" of remedy.operations
    name: str
    stage: str
    issue: str = "tt-stack#49"
    ignorable: bool = False  # a failure gives up the durable path; the run goes on

    @property
    def title(self) -> str:
        return f"{self.name} ({self.issue})"


D, F, A = DURABLE, FALLBACK, ALWAYS
TEMPLATES: tuple[StepTemplate, ...] = (
    StepTemplate("nix.flake_input_updated", "Scratch clone; bump the tt-stack input", D,
                 ignorable=True),
    StepTemplate("nix.managed_file_written", "Write remedy's managed Nix file", D,
                 "tt-stack#52", ignorable=True),
    StepTemplate("memory.headroom_gated", "Memory gate before Nix evaluates and builds", D),
    StepTemplate("nix.fix_proven", "Prove the build holds the desired state", D,
                 "tt-stack#34", ignorable=True),
    StepTemplate("nix.flake_lock_committed", "Fast-forward the checkout to the proven commits",
                 D, ignorable=True),
    StepTemplate("memory.hugepages_reduced", "Release free hugepages", D, ignorable=True),
    StepTemplate("memory.headroom_gated", "Memory gate before the switch", D),
    StepTemplate("serving.drained", "Wait for an idle server before the restart", D,
                 "tt-stack#49", ignorable=True),
    StepTemplate("serving.runtime_override_removed", "Remove the stale /run override", D,
                 ignorable=True),
    StepTemplate("nix.system_switched", "Switch to the proven system", D, ignorable=True),
    StepTemplate("serving.restarted", "Restart if what systemd starts changed", D,
                 ignorable=True),
    StepTemplate("serving.toolcalling_verified", "Verify tool calling", D, ignorable=True),
    # Fallback: the override first, so a failed durable path never leaves hermes on disk
    StepTemplate("serving.runtime_override_written", "Write the /run fallback override", F,
                 ignorable=True),
    StepTemplate("nix.system_rolled_back", "Roll back to the recorded generation", F,
                 ignorable=True),
    StepTemplate("memory.hugepages_reduced", "Release free hugepages for the fallback", F),
    StepTemplate("memory.headroom_gated", "Memory gate before the fallback", F),
    StepTemplate("serving.drained", "Wait for an idle server before the fallback restart", F,
                 "tt-stack#49", ignorable=True),
    StepTemplate("serving.restarted", "Restart onto the /run override", F),
    StepTemplate("serving.toolcalling_verified", "Verify the fallback", F),
    StepTemplate("nix.scratch_removed", "Remove the scratch clone", A),
    StepTemplate("serving.outcome_reported", "Report the outcome", A),
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


def lock_message(s: Settings, old_rev: str | None, by: str = "restore_toolcalling deploy") -> str:
    """The lock commit's message (the new rev is known once Nix fetched it: {new})."""
    return (
        f"flake.lock: bump {s.flake_input} {(old_rev or '?')[:12]} -> {{new}} (tt-stack#49)\n\n"
        f"Deploys the tool-call parser fix (tt-stack#34, tt-stack#44): "
        f"--tool-call-parser {s.tool_call_parser}.\nCommitted by remedy's {by}."
    )


def managed_message(s: Settings, scope: tuple[str, ...]) -> str:
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


def plan_steps(
    plan: RestorePlan, snap: HostSnapshot, s: Settings, run_id: str, unhealthy: str | None = None
) -> Steps:
    """Every step of this host's run with its values (see the module's doc)."""
    checkout, locked, unit = snap.checkout, snap.flake_input, snap.unit
    owner, home = checkout.owner or "root", checkout.home
    jpath = journal.path(s.unit)
    resuming = None
    if plan.path == DURABLE and plan.rebuild:
        resuming = snap.journal.resumable(checkout.head)
    if resuming:
        run_id = snap.journal.get("run_id") or run_id  # go on with that run's journal
    durable_skip = _durable_skip(plan)
    fallback_skip = _fallback_skip(plan)
    contingent = plan.path == DURABLE  # the fallback runs only if the durable path fails
    common = {"journal_path": jpath, "run_id": run_id}
    owned = {"owner": owner, "home": home}
    no_rebuild = "the deployed configuration holds every durable setting; no rebuild"
    restart_ahead = plan.restart_expected
    headroom_gb = snap.memory.mem_available_kb * 1024 / 1e9
    pinned = s.pinned_rev
    ref = locked.ref if locked else None
    url = locked.url if locked else ""
    ran_override_before = override_in_place(snap, s) and (
        snap.probe.parsed or snap.probe.inconclusive
    )
    store = unit.store_script
    if store is None:
        override_problem = (
            f"{s.unit} has no start script in its fragment to derive an override from"
        )
    elif store.parser_flag_count != 1:
        override_problem = (
            f"{store.path}: --tool-call-parser appears {store.parser_flag_count} times, "
            "expected exactly once; not deriving an override from it"
        )
    else:
        override_problem = None
    running = unit.now.exec_start
    scripts = [s.override_script]
    if running and running.startswith("/run/") and running != s.override_script:
        scripts.append(running)
    managed_in_scope = [
        desired.BY_KEY[k].label
        for k in plan.scope
        if desired.BY_KEY[k].durable == desired.MANAGED_FILE
    ]

    def skip_durable(own: str | None) -> str | None:
        return durable_skip or own

    def bump_args() -> dict:
        own = None if plan.rebuild else no_rebuild
        return {
            **common,
            **owned,
            "flake_dir": s.flake_dir,
            "flake_input": s.flake_input,
            "flake_host": s.flake_host,
            "update": plan.update_input,
            "update_argv": list(snap.nix.update_input_argv) if snap.nix else [],
            "locked_url": url,
            "locked_ref": ref,
            "old_rev": locked.rev if locked else None,
            "base_head": checkout.head,
            "pinned_rev": pinned,
            "allowed_signers": None,  # read on this machine at prepare (remedy.operations)
            "trusted_signers": s.trusted_signers,
            "required_fix_rev": s.required_fix_rev,
            "lock_message": lock_message(s, locked.rev if locked else None),
            "skip": skip_durable(resuming or own),
        }

    def managed_args() -> dict:
        if plan.managed_text is None:
            own = (
                f"the next boot already has {', '.join(managed_in_scope)}, or "
                f"{s.managed_file} says so"
                if managed_in_scope
                else f"no setting in scope lives in {s.managed_file}"
            )
        else:
            own = resuming
        return {
            **common,
            **owned,
            "managed_file": s.managed_file,
            "text": plan.managed_text or "",
            "message": managed_message(s, plan.scope),
            "flake_host": s.flake_host,
            "skip": skip_durable(own),
        }

    def gate_args(doing: str, own: str | None, skip: str | None) -> dict:
        return {
            "min_gb": s.min_mem_available_gb,
            "doing": doing,
            "now_gb": round(headroom_gb, 1),
            "contingent": False,
            "skip": skip or own,
        }

    def proven_args() -> dict:
        return {
            **common,
            **owned,
            "settings": s,
            "prove": list(plan.prove),
            "nix_label": snap.nix.label if snap.nix else "Nix",
            "new_derivation_cli": bool(snap.nix and nix_core.derivation_show_is_new(snap.nix)),
            "systemd_run": snap.tools.systemd_run,
            "current_system": snap.generations.current_system,
            "skip": skip_durable(resuming or (None if plan.rebuild else "nothing was bumped")),
        }

    def hugepages_args(skip: str | None, restart: bool) -> dict:
        """The pool is a managed setting (converge), or only headroom before a restart."""
        managed = "hugepages" in plan.scope
        own = None
        if not s.hugepages_target:
            own = "no hugepages_target set for this host"
        elif not managed and not restart:
            own = "no restart ahead"
        return {"targets": dict(s.hugepages_target), "managed": managed, "skip": skip or own}

    steps: list[Step] = []
    for t in TEMPLATES:
        args: dict
        if t.op == "nix.flake_input_updated":
            args = bump_args()
        elif t.op == "nix.managed_file_written":
            args = managed_args()
        elif t.op == "memory.headroom_gated" and t.stage == D and "Nix" in t.name:
            args = gate_args(
                "evaluating and building the new system",
                resuming or (None if plan.rebuild else "nothing to build"),
                durable_skip,
            )
        elif t.op == "nix.fix_proven":
            args = proven_args()
        elif t.op == "nix.flake_lock_committed":
            args = {
                **common,
                **owned,
                "flake_dir": s.flake_dir,
                "skip": skip_durable(None if plan.rebuild else no_rebuild),
            }
        elif t.op == "memory.hugepages_reduced" and t.stage == D:
            args = {**hugepages_args(durable_skip, restart_ahead), "contingent": False}
        elif t.op == "memory.headroom_gated" and t.stage == D:
            args = gate_args(
                "restarting the server",
                None if restart_ahead else "no restart ahead",
                durable_skip,
            )
        elif t.op == "serving.drained":
            own = None
            if t.stage == D and not restart_ahead:
                own = (
                    "no restart ahead: durable at next boot"
                    if plan.boot_only
                    else "no restart ahead"
                )
            elif t.stage == F and not (contingent or plan.restart_expected):
                own = "no restart ahead"
            args = {
                **common,
                "server_url": s.server_url,
                "timeout_s": s.drain_timeout_s,
                "urgent": plan.urgent,
                "contingent": contingent and t.stage == F,
                "skip": (durable_skip if t.stage == D else fallback_skip) or own,
            }
        elif t.op == "serving.runtime_override_removed":
            args = {
                **common,
                "unit": s.unit,
                "dropin": s.override_dropin,
                "scripts": scripts,
                "skip": skip_durable(
                    None if plan.remove_override else "no runtime override to remove"
                ),
            }
        elif t.op == "nix.system_switched":
            args = {
                **common,
                "action": "boot" if plan.boot_only else "switch",
                "toplevel": plan.finish_switch,
                "set_profile": not plan.finish_switch,
                "unit": s.unit,
                "transient": snap.tools.systemd_run,
                "lock_wait_s": s.lock_wait_s,
                "skip": skip_durable(
                    None
                    if plan.rebuild or plan.finish_switch
                    else "the deployed configuration already has the fix; no switch needed"
                ),
            }
        elif t.op == "serving.restarted":
            own = None
            if t.stage == D and plan.boot_only:
                own = f"durable at next boot, no restart now: {plan.restart.why}"
            elif t.stage == D and not restart_ahead:
                own = "the effective ExecStart did not change"
            args = {
                **common,
                "unit": s.unit,
                "stage": t.stage,
                "pid_before": unit.main_pid,
                "override_ran_before": ran_override_before,
                "min_gb": s.min_mem_available_gb,
                "contingent": contingent and t.stage == F,
                "may_restart": bool(plan.restart is None or plan.restart.allowed),
                "reason": plan.restart.why if plan.restart else "",
                "skip": (durable_skip if t.stage == D else fallback_skip) or own,
            }
        elif t.op == "serving.toolcalling_verified":
            args = {
                **common,
                "deferred": list(plan.deferred),
                "settings": s,
                "stage": t.stage,
                "pid_before": unit.main_pid,
                "parsed_before": snap.probe.parsed,
                "contingent": contingent and t.stage == F,
                "skip": durable_skip if t.stage == D else fallback_skip,
            }
        elif t.op == "serving.runtime_override_written":
            own = None
            if not plan.write_override and plan.path == FALLBACK:
                own = "the server runs the wanted parser and environment; no override needed"
            args = {
                **common,
                "settings": s,
                "deferred": list(plan.deferred),
                "store_script": store.path if store else None,
                "problem": override_problem,
                "contingent": contingent,
                "skip": fallback_skip or own,
            }
        elif t.op == "nix.system_rolled_back":
            g = snap.generations
            args = {
                **common,
                **owned,
                "profile": g.profile,
                "current_system": g.current_system,
                "flake_dir": s.flake_dir,
                "flake_host": s.flake_host,
                "base_head": checkout.head,
                "min_gb": s.min_mem_available_gb,
                "transient": snap.tools.systemd_run,
                "skip": None if plan.path == DURABLE else "no switch in this run",
            }
        elif t.op == "memory.hugepages_reduced":
            restart = contingent or plan.restart_expected  # a failed durable path restarts
            args = {**hugepages_args(fallback_skip, restart), "contingent": contingent}
        elif t.op == "memory.headroom_gated":
            own = None
            if plan.path == FALLBACK and not plan.restart_expected:
                own = "no restart ahead"
            args = {
                **gate_args("restarting the server", own, fallback_skip),
                "contingent": contingent,
            }
        elif t.op == "nix.scratch_removed":
            args = {
                **common,
                **owned,
                "made": plan.path == DURABLE and plan.rebuild,
                "left": list(snap.journal.scratch_clones),
            }
        elif t.op == "serving.outcome_reported":
            args = {
                "plan_path": plan.path,
                "summary": "; ".join(plan.reasons),
                "old_rev": locked.rev if locked else None,
                "flake_input": s.flake_input,
                "unhealthy": unhealthy,
            }
        else:  # pragma: no cover - a template without values is a programming error
            raise KeyError(t.op)
        steps.append(Step(t, args))
    return Steps(tuple(steps), resuming)


def with_allowed_signers(planned: Steps, allowed: str) -> Steps:
    """PLANNED with the bump checking signatures against ALLOWED (trusted_signers' text,
    read on the machine that runs remedy)."""
    out = []
    for step in planned.steps:
        if step.op == "nix.flake_input_updated":
            step = Step(step.template, {**step.args, "allowed_signers": allowed})
        out.append(step)
    return Steps(tuple(out), planned.resuming)
