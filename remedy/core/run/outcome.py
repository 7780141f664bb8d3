"""What a run did, from pyinfra's results of its steps: parsing and adapting, no decision.

The run's result, its path, its exit code and the line people read are decided on the
host, by the run's outcome program (``remedy/host/steps/outcome.sh``), from what the
steps answered: the deploy's last step runs it, and the manual script's ``finish``
runs the same text. Here its answer (``outcome_*``, on the outcome step's pyinfra
result) becomes the audit's record, with the details the steps said. Only a run whose
host never gave its outcome is classified here, from what remedy itself saw: given up
at its deadline ("given up"), ended by a second signal ("interrupted"), its host lost
("failed", or "crashed" when steps never ran), or still running.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from remedy.core.run.plan import DURABLE, FALLBACK, NOOP

CHANGED, NO_CHANGE, ERROR, NOT_RUN = "changed", "noop", "error", "not run"


@dataclass(frozen=True)
class StepResult:
    op: str
    stage: str
    name: str
    status: str  # CHANGED, NO_CHANGE, ERROR, NOT_RUN
    ignorable: bool = False
    said: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    result: str
    path: str
    details: dict
    line: str

    @property
    def failed(self) -> bool:
        return self.result not in ("ok",)


def _first(results, key):
    for r in results:
        if r.said.get(key):
            return r.said[key]
    return None


TOLD = "serving.outcome_reported"  # the step that runs the host's outcome program


def told_by_host(results: list[StepResult]) -> dict | None:
    """What the host's outcome program answered (its ``outcome_*`` values), or None."""
    return next((r.said for r in results if r.op == TOLD and r.said.get("outcome_result")),
                None)  # fmt: skip


def outcome(
    plan_path: str,
    reasons: list[str],
    results: list[StepResult],
    *,
    old_rev: str | None = None,
    flake_input: str = "tt-stack",
    interrupted: str | None = None,
    host_failed: bool = False,
    unhealthy: str | None = None,
    ended: bool = True,
    given_up: str | None = None,
) -> Outcome:
    """The run's outcome: as the host's outcome program said it, with the steps' details.
    Without its answer (see the module's doc): ENDED, every step had its turn;
    GIVEN_UP, why the run stopped waiting for the host; INTERRUPTED, the stop request;
    HOST_FAILED, pyinfra lost the host."""
    told = None if given_up else told_by_host(results)
    notes = [n for r in results if r.op != TOLD for n in r.said.get("notes") or []]
    if told is not None:
        return _as_told(told, results, old_rev, notes)
    # the host gave no outcome: what remedy saw of its steps
    boot_pending = _first(results, "boot_pending")
    path = plan_path if plan_path == NOOP else _reached(results, boot_pending)
    never_ran = [r.name for r in results if r.status == NOT_RUN] if ended else []
    if given_up:
        result, why = "given up", given_up
    elif interrupted:
        result, why = "interrupted", interrupted
    elif host_failed:
        result = "failed"
        why = (_stopped_before(never_ran[0]) if never_ran
               else "pyinfra reported the host as failed; see its output")  # fmt: skip
    elif never_ran:
        result, why = "crashed", _stopped_before(never_ran[0])
        notes.append(f"the run stopped before: {never_ran[0]}")
    else:
        result, why = "running", None
    details = _details(results, old_rev, old_rev, notes)
    details.update(interrupted=interrupted, failed=given_up or (why if result in (
        "failed", "crashed") else None), boot_pending=boot_pending)  # fmt: skip
    if given_up:
        details["given_up"] = given_up
    exit_code = {"interrupted": _signalled(interrupted)}.get(result, 1)
    details["exit"] = exit_code
    parts = [f"path {path}"] + ([f"GIVEN UP: {given_up}"] if given_up else [])
    parts += [f"restarts {details['restarts']}", *notes]
    return Outcome(result, path, details, "; ".join(parts))


def _signalled(why: str | None) -> int:
    """The exit code of a run stopped by WHY (130 SIGINT, 143 SIGTERM)."""
    return 130 if "SIGINT" in (why or "") else 143 if "SIGTERM" in (why or "") else 1


def _as_told(told: dict, results, old_rev, notes: list[str]) -> Outcome:
    """The outcome as the host's program said it (TOLD), with the steps' details."""
    result, why = told["outcome_result"], told.get("outcome_why") or None
    new_rev = told.get("outcome_new_rev") or old_rev
    details = _details(results, old_rev, new_rev, notes)
    details.update(
        restarts=int(told.get("outcome_restarts") or 0),
        durable_failed=_durable_failed(results),
        interrupted=why if result == "interrupted" else None,
        failed=why if result in ("failed", "unhealthy") else _first(results, "failed"),
        switch_locked=_first(results, "switch_locked"),
        boot_pending=_first(results, "boot_pending"),
        exit=told.get("outcome_exit"),
    )  # fmt: skip
    line = told.get("outcome_line") or ""
    # what the workstation added to a give-up (the host data to fix), not the host's
    hints = [r.said["hint"] for r in results if r.said.get("hint")]
    line = "; ".join([line, *(h for h in hints if h not in line)]) if hints else line
    return Outcome(result, told["outcome_path"], details, line)


def _durable_failed(results: list[StepResult]) -> str | None:
    """Why the durable path gave up, as its step said it (the fallback took over)."""
    return next((r.said.get("durable_failed") for r in results
                 if r.said.get("durable_failed")), None)  # fmt: skip


def _reached(results: list[StepResult], boot_pending) -> str:
    """The path a run that stopped early reached: the durable one once its switch ran
    (or set the next boot), the fallback once the /run override holds, else none."""
    durable = boot_pending or any(
        r.op == "nix.system_switched" and r.status == CHANGED for r in results
    )
    fallback = any(
        r.op == "serving.runtime_override_written" and r.status in (CHANGED, NO_CHANGE)
        for r in results
    )
    if durable and fallback:
        return "durable+fallback"
    if durable:
        return "durable at next boot" if boot_pending else DURABLE
    return FALLBACK if fallback else "none"


def _stopped_before(step: str) -> str:
    return (
        f"the run stopped before '{step}': the connection to the host was lost (a reboot?) "
        "or pyinfra failed; see its output"
    )


def _details(results: list[StepResult], old_rev, new_rev, notes: list[str]) -> dict:
    """What the audit records of the run, from what its steps said."""
    signature = _first(results, "signature")
    probe_after = next(
        (r.said["probe_after"] for r in reversed(results) if r.said.get("probe_after")), None
    )
    # the /run override holds tool calling only where the fallback's override step wrote it
    # or found it in place (not where it failed, was refused or never ran)
    override_held = any(
        r.op == "serving.runtime_override_written" and r.status in (CHANGED, NO_CHANGE)
        for r in results
    )
    return {
        "old_rev": old_rev,
        "new_rev": new_rev,
        # the server's starts as the host's journal counts them (a switch or a rollback
        # starts it too), at least the restarts the steps made
        "restarts": max(
            [
                sum(int(r.said.get("restarts") or 0) for r in results),
                *(int(r.said.get("server_starts") or 0) for r in results),
            ]
        ),
        "durable_failed": None,
        "rollback_failed": _first(results, "rollback_failed"),
        "rollback_not_run": _first(results, "rollback_not_run"),
        "unverified": _first(results, "unverified"),
        "local_builds": _first(results, "local_builds") or [],
        "refused": _first(results, "refused"),
        "interrupted": None,
        "failed": None,
        "signature": dataclasses.asdict(signature)
        if dataclasses.is_dataclass(signature)
        else signature,
        "notes": notes,
        "probe_after": probe_after,
        "changed": [r.name for r in results if r.status == CHANGED],
        "switch_exit": _first(results, "switch_exit"),
        "switch_failed_units": _first(results, "switch_failed_units") or [],
        "switch_locked": None,
        "boot_pending": None,
        "switch_changes": _first(results, "switch_changes"),
        "flake_checks": _first(results, "flake_checks") or [],
        "boot_pending_reason": _first(results, "boot_pending_reason"),
        "restart_reasons": [
            r.said["restart_reason"] for r in results if r.said.get("restart_reason")
        ],  # fmt: skip
        "requests_cut": sum(int(r.said.get("requests_cut") or 0) for r in results),
        "restart_postponed": _first(results, "restart_postponed"),
        "override_held": override_held,
    }
