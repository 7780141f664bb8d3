"""Emergency manual recovery: a runbook as a POSIX shell script for a person with SSH.

    remedy runbooks show 001 --manual --inventory inventory/production.py --host cfx-llm2 > r.sh
    ssh root@cfx-llm2 sh -s -- plan < r.sh   # what it will do; changes nothing
    ssh root@cfx-llm2 sh -s < r.sh

A flow runbook (001, 003, 006) is the deploy's own plan and steps: the planner plans
from the host as ``runbooks show`` read it (or, when it could not, a plan whose every
step decides on the host), and each step runs the same host program the deploy runs
(``remedy.core.render.manual_flow``). The person who runs it is the restart policy:
the restart is now, and the build is on the host. Another runbook's steps run their
operations' programs with the host data's values, or its commands as written.
"""

from __future__ import annotations

import dataclasses
import shlex

from remedy.core.config import desired
from remedy.core.config import host_data as settings_mod
from remedy.core.programs import journal
from remedy.core.programs import step_values as sv
from remedy.core.readings import probe
from remedy.core.render import manual_flow as flow
from remedy.core.run import steps as steps_core
from remedy.core.run.plan import plan_restore, unhealthy

# Host data that changes what the deploy does but not what this script does (a person
# runs it), said at its top when set.
NOT_CARRIED = {
    "unattended": "a person runs this script; unattended runs are the schedule's",
    "restart_window": "the person who runs this script is the restart policy: the restart is now",
    "restart_urgency": "the person who runs this script is the restart policy",
    "restart": "the person who runs this script is the restart policy",
    "build_host": "this script builds on the host, memory-gated and bounded; run the "
    "deploy to build on the builder",
    "builder_key": "this script builds on the host (see build_host)",
    "builder_unsigned_copy": "this script builds on the host: nothing is copied",
}
MANUAL_RUN_ID = "manual"  # the run id of a plan made for the script (it makes its own)


def approval(s) -> str:
    """What the bump may take, said in the plan (host data bump_to, trusted_signers,
    required_fix_rev; the bump's program decides on the host)."""
    if s.pinned_rev:
        what = f"exactly bump_to {s.pinned_rev} (it must be on the input's branch)"
    elif s.trusted_signers:
        what = f"the branch's head, if a key of trusted_signers {s.trusted_signers} signed it"
    else:
        what = "the branch's head (no bump_to, no trusted_signers: not verified)"
    fix = ""
    if s.required_fix_rev:
        fix = f"; it must contain required_fix_rev {s.required_fix_rev[:12]}"
    return f"the bump of {s.flake_input} takes {what}{fix}"


def as_person(s):
    """S as a person runs the script: restart now, build on the host, attended."""
    return dataclasses.replace(s, restart="now", build_host="serving", unattended=False)


def not_carried(s) -> list[str]:
    """Why each key of NOT_CARRIED that differs from its default is not carried out."""
    defaults = {f.name: f for f in dataclasses.fields(s)}
    out = []
    for key, why in NOT_CARRIED.items():
        f = defaults[key]
        default = f.default_factory() if callable(f.default_factory) else f.default
        value = getattr(s, key)
        if value != default:
            out.append(f"host data {key}={value!r} is not carried out: {why}")
    return out


def render(
    runbook,
    host_data: dict,
    allowed_signers: str | None = None,
    snapshot=None,
    host: str | None = None,
    inventory: str = "",
    read: str = "",
) -> str:
    """RUNBOOK as a script for HOST (its inventory name) with its HOST_DATA, planned
    from SNAPSHOT (the host as read; None: it could not be read, and READ says why).
    ALLOWED_SIGNERS: the text of host data's trusted_signers file, read here."""
    data = dict(host_data)
    host = host or data.get("flake_host") or "cfx-llm2"
    s = settings_mod.from_host_data(host, data)
    rb = runbook.data
    scope = desired.ALL if rb.get("deploy") == "deploys/converge.py" else desired.TOOL_CALLING
    r = flow.Rendering(
        host, rb["id"], rb["title"], tuple(rb["issues"]),
        read or "the host was not read", inventory, approval(s),
    )  # fmt: skip
    if s.trusted_signers and allowed_signers is None:
        raise ValueError("trusted_signers is set: render with its text (allowed_signers)")
    person = as_person(s)
    ran = steps_core.Ran(rb["id"], tuple(rb["issues"]))  # as the deploy's commits say
    if "nix.flake_input_updated" not in runbook.step_operations():
        return _standalone(runbook, person, r)
    if snapshot is not None:
        plan = plan_restore(snapshot, person, scope)
        planned = steps_core.plan_steps(
            plan, snapshot, person, MANUAL_RUN_ID, unhealthy(plan, snapshot), None, host, ran
        )
    else:
        plan = steps_core.unread_plan(person, scope)
        planned = steps_core.plan_steps(plan, None, person, MANUAL_RUN_ID, None, None, host, ran)
    if allowed_signers is not None and s.trusted_signers:
        planned = steps_core.with_allowed_signers(planned, allowed_signers)
    plan.reasons[:0] = not_carried(s)
    return flow.render(plan, planned, r)


def _standalone(runbook, s, r: flow.Rendering) -> str:
    """A runbook that is not the run's flow: its steps in its order, each operation's
    program with the host data's values, each command as written."""
    run = {"journal": journal.path(s.unit), "run_id": MANUAL_RUN_ID}
    head, _, tail = probe.request_body(probe.MODEL_MARK).partition(probe.MODEL_MARK)
    wanted = steps_core.serving_wanted(s, set())
    values = {
        "memory.headroom_gated": sv.Gate(
            **run, min_gb=s.min_mem_available_gb, doing="restarting the server", host=r.host
        ),
        "memory.hugepages_reduced": sv.Hugepages(
            **run, items=tuple(f"{steps_core.mem.SIZES_BY_LABEL[k]}:{n}"
                               for k, n in sorted(s.hugepages_target.items())),
        ),  # fmt: skip
        "serving.toolcalling_verified": sv.Verify(
            **run, unit=s.unit, stage="fallback", server_url=s.server_url, model=s.model,
            probe_timeout_s=s.probe_timeout_s, ready_timeout_s=s.ready_timeout_s,
            parsed_before=False, probe_head=head, probe_tail=tail, items=wanted,
        ),
    }  # fmt: skip
    steps = []
    for step in runbook.data["steps"]:
        op = step.get("operation")
        if op in values:
            steps.append((step["id"], values[op]))
        elif op:
            steps.append((step["id"], f"echo 'run the deploy operation {op}' >&2"))
        else:
            steps.append((step["id"], "\n".join(step["manual"]["commands"])))
    return flow.render_standalone(steps, r, s.unit)


def quote(word: str) -> str:
    return shlex.quote(word)
