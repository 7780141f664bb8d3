"""What a run did, from pyinfra's results of its steps: pure.

The run's result for the audit (ok, failed, refused, interrupted, crashed,
unhealthy), the path it took, its details and the line people read are computed
here from each step's status (changed, noop, error, not run) and what it said
(``remedy.operations.said``), never from flags set along the way.
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
    """The run's outcome. ENDED: every step had its turn (False while the last step
    itself asks, before it is complete). GIVEN_UP: why the run stopped waiting for the
    host (its deadline). A run interrupted or given up took only the path it reached."""
    # a durable step that gave up its stage (the fallback takes over); one that stops the
    # run (a memory gate) is the run's failure, not a fallback (remedy/host/lib.sh)
    durable_errors = [
        r for r in results if r.stage == DURABLE and r.status == ERROR and r.ignorable
    ]
    durable_failed = (
        (durable_errors[0].said.get("why") or durable_errors[0].name) if (durable_errors) else None
    )
    errors = [r for r in results if r.status == ERROR]
    failed = next((r.said.get("failed") for r in errors if r.said.get("failed")), None)
    for r in errors:  # the fallback's override did not take: tool calling is not restored
        if not failed and r.op == "serving.runtime_override_written":
            failed = r.said.get("why") or f"{r.name} failed: see its output above"
    boot_pending = _first(results, "boot_pending")  # switch exit 100: a reboot activates it
    switch_locked = _first(results, "switch_locked")  # another switch held the system
    breaking = [
        r
        for r in durable_errors
        if r.op in ("nix.system_switched", "serving.toolcalling_verified")
        and not (boot_pending or switch_locked)
    ]
    notes = [n for r in results for n in r.said.get("notes") or []]
    new_rev = _new_rev(results, old_rev, durable_failed, notes)
    if plan_path == DURABLE and boot_pending:
        path = "durable at next boot"
    elif plan_path == DURABLE and durable_failed:
        path = "durable+fallback"
    else:
        path = plan_path
    if (interrupted or given_up) and plan_path != NOOP:
        path = _reached(results, boot_pending)
    never_ran = [r.name for r in results if r.status == NOT_RUN] if ended else []
    fatal = [r for r in results if r.status == ERROR and not r.ignorable]
    result = "given up" if given_up else _result(
        interrupted, switch_locked, failed, _first(results, "refused"),
        bool(breaking or host_failed or (fatal and ended)), never_ran, unhealthy,
    )  # fmt: skip
    why = None
    if result == "failed" and not (failed or durable_failed):
        why = (
            _stopped_before(never_ran[0])
            if never_ran
            else (fatal[0].said.get("why") if fatal else None)
            or "pyinfra reported the host as failed; see its output"
        )
    if result == "crashed":
        notes.append(f"the run stopped before: {never_ran[0]}")
        why = _stopped_before(never_ran[0])
    details = _details(results, old_rev, new_rev, notes)
    details.update(
        durable_failed=durable_failed, interrupted=interrupted, failed=given_up or failed or why,
        switch_locked=switch_locked, boot_pending=boot_pending,
    )  # fmt: skip
    if given_up:
        details["given_up"] = given_up
    return Outcome(result, path, details, _line(plan_path, reasons, path, details, flake_input))


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


def _new_rev(results, old_rev, durable_failed, notes: list[str]) -> str | None:
    """The rev the checkout's lock holds after the run, noted when a durable path that
    failed left it (or not): it holds the bump only once the fast-forward ran, until a
    rollback reverts it."""
    new_rev = _first(results, "new_rev") or old_rev
    fast_forwarded = any(
        r.op == "nix.flake_lock_committed" and r.status == CHANGED for r in results
    )
    if durable_failed and new_rev != old_rev:
        if not fast_forwarded or _first(results, "lock_reverted"):
            notes.append(f"flake.lock left at {(old_rev or '?')[:12]}")
            return old_rev
        notes.append(f"flake.lock holds {new_rev[:12]} (the fast-forward stands)")
    return new_rev


def _result(interrupted, switch_locked, failed, refused, broke, never_ran, unhealthy) -> str:
    if interrupted:
        return "interrupted"
    if switch_locked and not failed:
        return "locked"
    if refused:
        return "refused"
    if failed or broke:
        return "failed"
    if never_ran:
        return "crashed"
    return "unhealthy" if unhealthy else "ok"


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


def _override_said(probe: str | None) -> str:
    """What the /run override holds, as the probe after it said (its class)."""
    if probe in ("parsed", "inconclusive"):  # the server answers tool calls
        return (
            "VOLATILE: tool calling rests on the /run override until the durable "
            "fix is deployed; a reboot reverts it"
        )
    return (
        f"the /run override is in place, but the probe after it is {probe or 'not run'}: "
        "tool calling is not restored"
    )


def _line(plan_path, reasons, path, d, flake_input) -> str:
    if plan_path == NOOP:
        return "nothing to do: " + "; ".join(reasons)
    parts = [f"path {path}"]
    if d.get("given_up"):
        parts.append(f"GIVEN UP: {d['given_up']}")
    if d["new_rev"] and d["new_rev"] != d["old_rev"]:
        parts.append(f"{flake_input} {(d['old_rev'] or '?')[:12]} -> {d['new_rev'][:12]}")
    if d["boot_pending"] and d.get("boot_pending_reason") == "restart policy":
        parts.append(
            f"durable at next boot; running the old generation until a reboot or a "
            f"restart window: {d['boot_pending']} is the boot default"
            + ("; the /run override keeps live right until then" if path else "")
        )
    elif d["boot_pending"] and d.get("boot_pending_reason") == "switch inhibitors":
        parts.append(
            f"durable at next boot; reboot to activate: {d['boot_pending']} is the boot "
            "default (the switch inhibitors refuse a live switch); the /run override keeps "
            "live right until then"
        )
    elif d["boot_pending"]:
        parts.append(
            f"durable at next boot; reboot to activate: {d['boot_pending']} is the boot "
            "default (switch exit 100: the init interface changed); the /run override keeps "
            "live right until then"
        )
    elif d["durable_failed"]:
        parts.append(f"durable path abandoned: {d['durable_failed']}")
    if (changes := d["switch_changes"]) and changes.get("reboot_for"):
        parts.append(f"the new generation needs a reboot for: {', '.join(changes['reboot_for'])}")
    if d["switch_failed_units"]:
        parts.append(f"switch exit 4: failed units {', '.join(d['switch_failed_units'])}")
    if d["rollback_failed"]:
        parts.append(f"ROLLBACK FAILED: {d['rollback_failed']}")
    elif d.get("rollback_not_run"):
        parts.append(d["rollback_not_run"])
    if d["unverified"]:
        parts.append(f"NOT VERIFIED: {d['unverified']}")
    if path in ("durable+fallback", FALLBACK) and not d["switch_locked"] and d["override_held"]:
        parts.append(_override_said(d["probe_after"]))
    if d.get("restart_postponed"):
        parts.append(f"restart postponed: {d['restart_postponed']}")
    parts.append(f"restarts {d['restarts']}")
    if d.get("requests_cut"):
        parts.append(f"requests cut {d['requests_cut']}")
    parts += d["notes"]
    return "; ".join(parts)
