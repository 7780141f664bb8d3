"""The rollback phase's body (``nix.system_rolled_back``): back to the generation
recorded before the run, as ``nixos-rebuild --rollback``, and the lock commit reverted."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host

from facts.memory import MemoryHeadroom
from remedy.core.programs import commands
from remedy.core.readings import switch as switch_core
from remedy.operations.argv import ran
from remedy.operations.memory import refusal
from remedy.operations.nix_body import Body, give_up, guarded, owned
from remedy.operations.nix_switch import switch_holders
from remedy.operations.said import lost, note, say


@dataclass(frozen=True)
class Rollback:
    """The values of ``nix.system_rolled_back``'s body: its arguments (its docstring
    says each) and what it read from the host and the run journal."""

    owner: str
    home: str | None
    profile: str | None
    current_system: str | None
    flake_dir: str
    flake_host: str
    base_head: str | None
    min_gb: float
    transient: bool
    lock_wait_s: float
    run_id: str
    lock_commit: str | None  # the run journal's
    switch_exit: int | None  # the run journal's
    moved_profile: bool  # the system profile is not the one recorded before the run
    moved_system: bool  # /run/current-system is not the one recorded before the run


def _restore_generation(a: Rollback, failed: list[str]):
    """The recorded generation's switch-to-configuration, as --rollback runs it."""
    profile, current = a.profile or a.current_system, a.current_system or a.profile
    if not profile:
        return
    actions = [(profile, "boot")]
    if a.moved_system:
        headroom = host.get_fact(MemoryHeadroom)
        why = lost("MemAvailable") if headroom is None else refusal(a.min_gb, headroom)
        if why:
            failed.append(f"not activating the old generation (its boot entry is set): {why}")
        elif profile == current:
            actions = [(profile, "switch")]
        else:  # a person's `nixos-rebuild boot` before the run: boot that, run this
            actions.append((current, "test"))
    wait_s = a.lock_wait_s
    if holders := switch_holders(wait_s):  # a person's switch started since the run's
        failed.append(
            f"switch-to-configuration {actions[0][1]} of {actions[0][0]} did not run: another "
            f"switch holds the system after waiting {wait_s:g} s (lock_wait_s): "
            f"{'; '.join(holders)}; run again once it is done"
        )
        return
    for toplevel, action in actions:
        switched = yield from ran(a.run_id, commands.switch(toplevel, action, a.transient, wait_s))
        code = commands.switch_exit(switched.stdout)
        outcome = switch_core.outcome(code, switched.stdout + "\n" + switched.stderr)
        if code == 0:
            note(f"{toplevel}: switch-to-configuration {action}")
        elif code == 4:
            note(f"{toplevel}: switch-to-configuration {action} exited 4 (a unit failed)")
        elif outcome.kind == switch_core.LOCKED:
            failed.append(
                f"switch-to-configuration {action} of {toplevel} did not run: "
                f"{'; '.join(h.rstrip('.') for h in outcome.holders)}"
            )
        else:
            failed.append(f"switch-to-configuration {action} of {toplevel} failed: {switched.why}")


@guarded
def _roll_back(a: Rollback) -> Body:
    failed: list[str] = []
    if a.switch_exit != switch_core.LOCKED:
        if a.moved_profile:
            set_ = yield from ran(a.run_id, commands.profile_set(a.profile))
            if set_.ok:
                note(f"system profile set back to {a.profile}")
            else:
                failed.append(f"setting the profile back failed: {set_.why}")
        yield from _restore_generation(a, failed)
    if lock_commit := a.lock_commit:  # or the next run would bump, switch and fail again
        argv = commands.lock_commit_revert(a.flake_dir, lock_commit, a.flake_host, a.base_head)
        reverted = yield from ran(a.run_id, owned(a.owner, a.home, argv))
        if reverted.ok:
            note(f"reverted the lock commit {lock_commit[:12]} in {a.flake_dir}")
            say(lock_reverted=lock_commit)
        else:
            note(f"could not revert the lock commit {lock_commit[:12]}: {reverted.why}")
    lost_connection = [f for f in failed if "was lost" in f]
    if lost_connection:
        # not a failed rollback: none could run. The switch runs in its own transient unit
        # and may well have finished; the next run reads what the host shows.
        why = (
            f"the rollback did not run: the connection to {host.name} was lost; the switch "
            "may have finished in its transient unit: run again, it reads the host and "
            "finishes the switch or rolls it back"
        )
        say(rollback_not_run=why)
        return (yield from give_up(why))
    if failed:
        say(rollback_failed="; ".join(failed))
        why = f"rollback FAILED: {'; '.join(failed)}; going on to the fallback"
        return (yield from give_up(why))
    say(rolled_back=True)
    return True
