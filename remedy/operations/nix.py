"""Nix operations of the durable path: bump the input, prove the fix, commit, switch.

Each takes the host's ``RestoreRun`` (``remedy.core.plan``): it decides from
what the plan and the earlier steps found, and says why when it does nothing.
"""

from __future__ import annotations

import json
import re

from pyinfra import host, state
from pyinfra.api import FunctionCommand, operation

from facts.nix import FlakeInput
from facts.serving import BuiltService
from remedy.core import commands
from remedy.core.plan import Proof, RestoreRun
from remedy.operations.argv import command, run
from remedy.operations.memory import gate


@operation(is_idempotent=False)
def flake_input_updated(r: RestoreRun):
    """Bump the serving input (``flake_input``) in ``flake_dir`` with the host's Nix command.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.bump:
        host.noop(f"the deployed configuration already runs {r.settings.tool_call_parser}")
        return
    s = r.settings
    yield command(commands.update_input(r.before.nix.update_input_argv, s.flake_dir, s.flake_input))


@operation()
def fix_proven(r: RestoreRun):
    """Build the new toplevel and read its start script: it must run the wanted parser and
    environment (and contain ``required_fix_rev`` when set). If so this is a check and
    changes nothing; if not, flake.lock is reverted and the fallback takes over: nothing
    is switched.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.bump:
        host.noop("nothing was bumped")
        return
    if not state.is_executing:
        host.noop("will build the bumped configuration and read its start script")
        return
    why = _missing_fix(r)
    if why is None:
        message = f"proven: {r.proof.toplevel} runs --tool-call-parser {r.proof.parser}"
        host.log_styled(message, fg="green")
        host.noop(message)
        return
    # The lock was clean before the bump (a plan precondition): restore it whatever the
    # update rewrote, not only when the tt-stack rev moved.
    r.durable_failed = why
    host.log_styled(f"durable path aborted: {why}; reverting flake.lock", fg="yellow")
    if r.new_rev != r.old_rev:
        r.notes.append(f"reverted {r.settings.flake_dir}/flake.lock to {(r.old_rev or '?')[:12]}")
    r.new_rev = r.old_rev
    yield command(commands.lock_revert(r.settings.flake_dir))


def _missing_fix(r: RestoreRun) -> str | None:
    """Why the bumped configuration does not carry the fix, or None if it does."""
    s = r.settings
    lock = host.get_fact(FlakeInput, flake_dir=s.flake_dir, flake_input=s.flake_input)
    r.new_rev = lock.rev if lock else None
    short = (r.new_rev or "?")[:12]
    if r.new_rev == r.old_rev:
        r.notes.append(f"{s.flake_input} is already at its newest commit {short}")
    if s.required_fix_rev:
        url = (lock.url or "") if lock else ""
        m = re.match(r"^git\+file://(/[^?]*)", url)
        if not m:
            return (
                f"cannot check required_fix_rev against {url}: only git+file:// inputs "
                "can be checked on the host"
            )
        if not run(host, commands.is_ancestor(m.group(1), s.required_fix_rev, r.new_rev)).ok:
            return (
                f"{s.flake_input} at {short} does not contain required_fix_rev "
                f"{s.required_fix_rev[:12]}"
            )
    host.log_styled(f"building {commands.toplevel_attr(s.flake_dir, s.flake_host)}", fg="blue")
    built = run(host, commands.build_toplevel(s.flake_dir, s.flake_host))
    if not built.ok:
        return f"the new configuration does not build: {built.tail}"
    try:  # stdout only: warnings on stderr may contain brackets
        toplevel = json.loads(built.stdout)[0]["outputs"]["out"]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"unreadable nix build output: {built.stdout[:200]}"
    service = host.get_fact(BuiltService, toplevel=toplevel, unit=s.unit)
    script = service.script if service else None
    r.proof = Proof(
        toplevel,
        script.path if script else None,
        script.tool_call_parser if script else "none",
        dict(service.environment) if service else {},
    )
    if missing := r.proof.missing(s):
        return (
            f"{s.flake_input} at {short} builds a start script without "
            f"{'; '.join(missing)} (the fix is not in)"
        )
    return None


@operation(is_idempotent=False)
def flake_lock_committed(r: RestoreRun):
    """Commit flake.lock in the checkout, naming tt-stack#49 and the old and new rev.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.bump or (state.is_executing and r.new_rev == r.old_rev):
        host.noop("flake.lock is unchanged; nothing to commit")
        return
    s = r.settings
    old, new = (r.old_rev or "?")[:12], (r.new_rev or "(bumped)")[:12]
    message = (
        f"flake.lock: bump {s.flake_input} {old} -> {new} (tt-stack#49)\n\n"
        f"Deploys the tool-call parser fix (tt-stack#34, tt-stack#44): "
        f"--tool-call-parser {s.tool_call_parser}.\nCommitted by remedy's "
        f"restore_toolcalling deploy."
    )
    yield command(commands.lock_commit(s.flake_dir, message, s.flake_host))
    # Resumed once the commit ran (at execution only): remember it for a rollback.
    ran = run(host, commands.head(s.flake_dir))
    r.lock_commit = ran.stdout.strip() if ran.ok else None


@operation(is_idempotent=False)
def system_switched(r: RestoreRun):
    """``nixos-rebuild switch --flake DIR#HOST`` once the fix is proven (restarts the
    server if its unit changed).

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.bump:
        host.noop("the deployed configuration already has the fix; no switch needed")
        return
    yield FunctionCommand(_switch, (r,), {})


def _switch(state, host, r: RestoreRun) -> bool:
    """A failed switch may have half-activated the new system: roll back, then fall back."""
    s = r.settings
    host.log_styled(f"nixos-rebuild switch --flake {s.flake_dir}#{s.flake_host}", fg="blue")
    ran = run(host, commands.switch(s.flake_dir, s.flake_host))
    r.switched = True
    if not ran.ok:
        why = f"nixos-rebuild switch failed: {ran.tail}"
        r.verification_failed = why
        r.durable_failed = why
        host.log_styled(f"{why}; rolling back, then the fallback", fg="red")
    return True


@operation(is_idempotent=False)
def system_rolled_back(r: RestoreRun):
    """``nixos-rebuild switch --rollback`` when the switched system failed verification
    (memory-gated: it restarts the server).

    + r: the host's RestoreRun
    """
    if not (r.switched and r.verification_failed):
        host.noop("no failed switch to roll back")
        return
    yield from gate(r, "rollback")  # the rollback restarts the server too
    if r.refused:
        return
    yield command(commands.rollback())
    r.rolled_back = True
    r.notes.append("rolled back to the previous system generation")
    if r.lock_commit:  # or the next run would bump, switch and fail again
        s = r.settings
        yield command(commands.lock_commit_revert(s.flake_dir, r.lock_commit, s.flake_host))
        r.notes.append(f"reverted the lock commit {r.lock_commit[:12]} in {s.flake_dir}")
