"""The switch phase's bodies: the fast-forward of the checkout to the proven commits
(``nix.flake_lock_committed``) and the switch (``nix.system_switched``), read by its
exit code; who holds the switch."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyinfra import host

from remedy.core.programs import commands
from remedy.core.programs.journal import RunJournal
from remedy.core.readings import switch as switch_core
from remedy.operations import journal
from remedy.operations.argv import ran, read
from remedy.operations.nix_body import Body, give_up, guarded, owned
from remedy.operations.said import say
from remedy.operations.serving import cut_by_restart


@dataclass(frozen=True)
class Publish:
    """The values of ``nix.flake_lock_committed``'s body."""

    journal_path: str
    run_id: str
    owner: str
    home: str | None
    flake_dir: str
    j: RunJournal | None  # the run journal as the step read it


@dataclass(frozen=True)
class Switch:
    """The values of ``nix.system_switched``'s body."""

    journal_path: str
    run_id: str
    j: RunJournal  # the run journal as the step read it
    toplevel: str
    set_profile: bool
    action: str
    unit: str
    transient: bool
    lock_wait_s: float
    server_url: str | None


@guarded
def _publish(a: Publish) -> Body:
    j = a.j or journal.read(a.journal_path, a.run_id)
    flake_dir = a.flake_dir

    def as_owner(argv):
        return ran(a.run_id, owned(a.owner, a.home, argv))

    moved = yield from as_owner(commands.fast_forward(flake_dir, j.get("scratch")))
    if not moved.ok:
        text = moved.stderr + "\n" + moved.stdout
        if "untracked working tree files" in text:
            files = [x.strip() for x in text.splitlines() if x.startswith(("\t", "    "))]
            hint = f"untracked files in the way: {', '.join(files) or '?'}; move them away"
        else:
            hint = f"{moved.why} (did someone commit meanwhile? run again)"
        why = f"cannot fast-forward {flake_dir} to the proven commits: {hint}"
        return (yield from give_up(why))
    head = yield from as_owner(commands.head(flake_dir))
    lock_commit = head.stdout.strip() if head.ok else None
    say(lock_commit=lock_commit)
    return (yield from journal.record(a.journal_path, a.run_id, j, lock_commit=lock_commit))


def preview_publish(a: Publish) -> list[list[str]]:
    """The fast-forward, as it runs (the scratch clone is the run journal's)."""
    return [owned(a.owner, a.home, commands.fast_forward(a.flake_dir, "$scratch"))]


def preview_switch(a: Switch) -> list[list[str]]:
    """The switch, as it runs: the profile, then switch-to-configuration of the proven
    toplevel (the run journal's, when it is not known yet)."""
    toplevel = a.toplevel or "$toplevel"
    steps = [commands.profile_set(toplevel)] if a.set_profile else []
    return [*steps, commands.switch(toplevel, a.action, a.transient, a.lock_wait_s)]


def switch_holders(wait_s: float) -> list[str]:
    """Who holds the switch after waiting up to WAIT_S for them to finish (none: free)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = read(commands.switch_holders())
        holders = commands.parse_holders(found.stdout) if found.ok else []
        if not holders or time.monotonic() >= deadline:
            return holders
        time.sleep(1)


@guarded
def _switch(a: Switch) -> Body:
    """A failed switch may have moved the profile or half-activated: the rollback step
    returns to the recorded generation, the fallback restores tool calling."""
    path, run_id, j, toplevel = a.journal_path, a.run_id, a.j, a.toplevel
    if holders := switch_holders(a.lock_wait_s):
        say(switch_locked=holders)
        yield from journal.record(path, run_id, j, switch_exit=switch_core.LOCKED)
        return (yield from give_up(switch_core.locked(holders, a.lock_wait_s)))
    host.log_styled(f"switching to {toplevel}", fg="blue")
    yield from journal.record(path, run_id, j, switching=toplevel)
    before = None
    if a.set_profile:
        was = read(["readlink", "-f", commands.SYSTEM_PROFILE])
        before = was.stdout.strip() if was.ok else None
        set_ = yield from ran(run_id, commands.profile_set(toplevel))
        if not set_.ok:
            why = f"setting the system profile to {toplevel} failed: {set_.why}"
            return (yield from give_up(why))
    action = a.action
    if action == "switch" and (postponed := j.get("restart_postponed")):
        host.log_styled(f"{postponed}: making {toplevel} the boot default only", fg="yellow")
        action = "boot"
    if action == "switch" and (cut := cut_by_restart(a.server_url)):
        say(requests_cut=cut)
    switched = yield from ran(run_id, commands.switch(toplevel, action, a.transient, a.lock_wait_s))
    code = commands.switch_exit(switched.stdout)
    said_text = switched.stdout + "\n" + switched.stderr
    outcome = switch_core.outcome(code, said_text)
    exit_ = outcome.code if code is not None else None
    yield from journal.record(path, run_id, j, switching=toplevel, switch_exit=exit_)
    say(switch_exit=code, switch_failed_units=list(outcome.failed_units) or None)
    if outcome.kind == switch_core.INHIBITED and action == "switch":
        return (yield from _inhibited(a, toplevel))
    if outcome.kind == switch_core.LOCKED:
        # another switch took the lock after the check: put the profile back, as it was
        if before:
            yield from ran(run_id, commands.profile_set(before))
        say(switch_locked=outcome.holders or ["another switch"])
        yield from journal.record(path, run_id, j, switch_exit=switch_core.LOCKED)
        return (yield from give_up(switch_core.locked(outcome.holders or ["another switch"], 0)))
    if outcome.kind == switch_core.DONE and action == "boot":
        host.log_styled(
            f"durable at next boot: {toplevel} is the boot default; running the old "
            "generation until a reboot or a restart window",
            fg="green",
        )
        say(boot_pending=toplevel, boot_pending_reason="restart policy")
        return True
    if outcome.kind == switch_core.DONE:
        return True
    return (yield from _failed(a, toplevel, outcome, code, switched))


def _failed(a: Switch, toplevel: str, outcome, code: int | None, switched) -> Body:
    """The switch exited 4 (done if the serving unit is active), 100 (the boot default,
    nothing activated) or failed: say why the durable path stops, and what follows."""
    if outcome.kind == switch_core.UNITS_FAILED:
        active = read(["systemctl", "is-active", a.unit])
        serving_ok = active.stdout.strip() == "active" and a.unit not in outcome.failed_units
        if serving_ok:
            host.log_styled(f"switch exit 4: {', '.join(outcome.failed_units)} failed", fg="yellow")
            return True
        why = (
            f"switch-to-configuration exited 4: {a.unit} is not active "
            f"(failed: {', '.join(outcome.failed_units) or 'not named'}); the fallback takes over"
        )
    elif outcome.kind == switch_core.BOOT_PENDING:
        say(boot_pending=toplevel)
        why = (
            "switch-to-configuration exited 100: the init interface changed, so the new "
            "generation is the boot default and nothing was activated (a reboot activates "
            "it); the /run override keeps live right until then"
        )
    elif code is None:
        why = f"switch-to-configuration switch did not report: {switched.why}"
    else:
        why = f"switch-to-configuration switch exited {code}: {switched.why}"
    then = (
        "the /run override goes back; the new generation stays the boot default"
        if outcome.kind == switch_core.BOOT_PENDING
        else "the /run override goes back, then the rollback"
    )
    host.log_styled(f"{why}; {then}", fg="red")
    return (yield from give_up(why))


def _inhibited(a: Switch, toplevel: str) -> Body:
    """NixOS 26.05's switch inhibitors refused a live switch (exit 1, before anything
    was done); `boot` skips that check: the new generation becomes the boot default and
    a reboot activates it, as after exit 100. The /run override keeps live right."""
    path, run_id = a.journal_path, a.run_id
    refused = (
        "switch-to-configuration switch exited 1: Pre-switch check 'switchInhibitors' "
        "failed (the new generation changes a package NixOS will not switch live)"
    )
    host.log_styled(f"{refused}; making {toplevel} the boot default", fg="yellow")
    booted = yield from ran(run_id, commands.switch(toplevel, "boot", a.transient, a.lock_wait_s))
    code = commands.switch_exit(booted.stdout)
    if code != 0:
        said = f"exited {code}" if code is not None else "did not report"
        why = f"{refused}; switch-to-configuration boot {said}: {booted.why}"
        host.log_styled(f"{why}; the /run override goes back, then the rollback", fg="red")
        return (yield from give_up(why))
    yield from journal.record(path, run_id, None, boot_pending=toplevel)
    say(boot_pending=toplevel, boot_pending_reason="switch inhibitors")
    why = (
        f"{refused}; switch-to-configuration boot made it the boot default and nothing was "
        "activated (a reboot activates it); the /run override keeps live right until then"
    )
    then = "the /run override goes back; the new generation stays the boot default"
    host.log_styled(f"{why}; {then}", fg="yellow")
    return (yield from give_up(why))
