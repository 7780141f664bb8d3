"""Nix operations of the durable path: bump the input, prove the fix, commit, switch.

Each takes the host's ``RestoreRun`` (``remedy.core.plan``): it decides from
what the plan and the earlier steps found, and says why when it does nothing.
git and nix run as the flake checkout's owner (``RestoreRun.as_owner``) with the
flake features on the command line; only the profile and the activation run as
root. A step that fails abandons the durable path (``durable_failed``) and the
run goes on to the fallback: it never stops with production half-changed.
"""

from __future__ import annotations

import json
import os
import re

from pyinfra import host, state
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import FactProcessError

from facts.memory import MemoryHeadroom
from facts.nix import FlakeInput, SystemGenerations
from facts.serving import BuiltService
from remedy.core import commands, desired, signers
from remedy.core import memory as mem
from remedy.core import nix as nix_core
from remedy.core.plan import Proof, RestoreRun
from remedy.operations.argv import failure, run


def _abandon(r: RestoreRun, why: str) -> None:
    """Give up the durable path (at execution), say why. The checkout was never touched:
    the bump lives in the scratch clone, which goes."""
    r.durable_failed = why
    host.log_styled(f"durable path abandoned: {why}", fg="yellow")
    _drop_scratch(r)
    if r.new_rev and r.new_rev != r.old_rev:
        r.notes.append(f"{r.settings.flake_dir}/flake.lock left at {(r.old_rev or '?')[:12]}")
    r.new_rev = r.old_rev


def _drop_scratch(r: RestoreRun) -> None:
    if r.scratch:
        run(host, r.as_owner(commands.remove_tree(r.scratch)))
        r.scratch = None


def lock_message(r: RestoreRun) -> str:
    s = r.settings
    old, new = (r.old_rev or "?")[:12], (r.new_rev or "(bumped)")[:12]
    return (
        f"flake.lock: bump {s.flake_input} {old} -> {new} (tt-stack#49)\n\n"
        f"Deploys the tool-call parser fix (tt-stack#34, tt-stack#44): "
        f"--tool-call-parser {s.tool_call_parser}.\nCommitted by remedy's "
        f"restore_toolcalling deploy."
    )


@operation(is_idempotent=False)
def flake_input_updated(r: RestoreRun):
    """In a scratch clone of ``flake_dir`` (as the checkout's owner), bump the serving
    input (``flake_input``) with the host's Nix command and commit flake.lock there. The
    checkout itself is not touched until the fix is proven, so an interrupted run leaves
    it as it was. If Nix cannot fetch the input, the durable path is abandoned with Nix's
    own error and the fallback takes over.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.rebuild:
        host.noop("the deployed configuration holds every durable setting; no rebuild")
        return
    yield FunctionCommand(_bump, (r,), {})


def _bump(state, host, r: RestoreRun) -> bool:
    s = r.settings
    owner = r.before.checkout.owner or "root"
    run(host, r.as_owner(commands.stale_scratch_removed(owner)))
    made = run(host, r.as_owner(commands.scratch_dir()))
    if not made.ok:
        _abandon(r, f"cannot make a scratch directory as {owner}: {made.why}")
        return True
    r.scratch = made.stdout.strip()
    cloned = run(host, r.as_owner(commands.scratch_clone(s.flake_dir, r.scratch)))
    if not cloned.ok:
        _abandon(r, f"cannot clone {s.flake_dir} into {r.scratch}: {cloned.why}")
        return True
    if not r.plan.update_input:
        r.notes.append(f"{s.flake_input} not bumped: the next boot already has what it gives")
        return True
    locked = r.before.flake_input
    url = locked.url if locked else "?"
    pinned = s.pinned_rev
    if pinned:
        if why := _not_on_branch(r, pinned):
            _abandon(r, why)
            return True
        ref = f"?ref={locked.ref}" if locked.ref and url.startswith("git+") else ""
        argv = commands.pin_input(r.scratch, s.flake_input, url + ref, pinned)
    else:
        argv = commands.update_input(r.before.nix.update_input_argv, r.scratch, s.flake_input)
    ran = run(host, r.as_owner(argv))
    if not ran.ok:
        what = (
            f"locking {s.flake_input} to bump_to {pinned}" if pinned else f"bumping {s.flake_input}"
        )
        _abandon(r, f"{what} failed: {ran.why} (can the host fetch {url} as {owner}?)")
        return True
    lock = host.get_fact(FlakeInput, flake_dir=r.scratch, flake_input=s.flake_input)
    r.new_rev = lock.rev if lock else None
    r.new_url = lock.url if lock else None
    if run(host, r.as_owner(commands.lock_changed(r.scratch))).ok:
        r.notes.append(f"{s.flake_input} is already at {(r.new_rev or '?')[:12]}")
        return True
    if r.allowed_signers is not None and (why := _untrusted(r)):
        _abandon(r, why)
        return True
    committed = run(
        host, r.as_owner(commands.lock_commit(r.scratch, lock_message(r), s.flake_host))
    )
    if not committed.ok:
        _abandon(r, f"cannot commit flake.lock in the scratch clone: {committed.why}")
    else:
        r.scratch_commits += 1
    return True


def _not_on_branch(r: RestoreRun, rev: str) -> str | None:
    """Why bump_to REV may not be taken: it is not on the input's branch (None: it is)."""
    locked = r.before.flake_input
    remote = nix_core.git_remote(locked.url or "") if locked else None
    if remote is None:
        return f"bump_to {rev}: cannot check that {locked.url if locked else '?'} holds it"
    ran = run(host, r.as_owner(commands.rev_on_branch(remote, rev, locked.ref)))
    said = (ran.stdout.strip().splitlines() or [""])[-1]
    if ran.ok and said == "on-branch: yes":
        return None
    if ran.ok and said == "on-branch: no":
        return (
            f"bump_to {rev} is not on {locked.ref or 'the default branch'} of {remote}: "
            "refused (a rev a person approved is on the branch the input follows)"
        )
    return f"bump_to {rev}: cannot check the branch of {remote}: {ran.why}"


def _untrusted(r: RestoreRun) -> str | None:
    """Why the newly locked rev may not be built: its signature is not a good one by a
    key in trusted_signers (None: it is). Checked as the owner, before any build."""
    s = r.settings
    url = r.new_url or ""
    m = re.match(r"^git\+file://(/[^?]*)", url)
    remote = nix_core.git_remote(url) or url
    argv = commands.commit_signature(
        r.new_rev or "", remote, m.group(1) if m else "", r.allowed_signers
    )
    ran = run(host, r.as_owner(argv))
    signature = signers.parse_signature(
        (ran.stdout.strip().splitlines() or [""])[-1], r.new_rev or ""
    )
    if signature is None:
        return (
            f"cannot check the signature of {s.flake_input} at {(r.new_rev or '?')[:12]}: {ran.why}"
        )
    r.signature = signature
    if signature.trusted:
        host.log_styled(f"{s.flake_input} at {signature.describe()}", fg="green")
        return None
    return (
        f"{s.flake_input} at {signature.describe()}: not built (trusted_signers "
        f"{s.trusted_signers}); a person signs it, or sets bump_to to a rev they approved"
    )


def managed_message(r: RestoreRun) -> str:
    issues = sorted(
        {
            desired.BY_KEY[k].issue
            for k in r.plan.scope
            if desired.BY_KEY[k].durable == desired.MANAGED_FILE
        }
    )
    return (
        f"{r.settings.managed_file}: remedy's managed settings ({', '.join(issues)})\n\n"
        "Values tt-stack's defaults do not give this host: the hugepage pool and the\n"
        "Phase 2a options. Written by remedy's converge deploy from its host data."
    )


@operation(is_idempotent=False)
def managed_file_written(r: RestoreRun):
    """Write remedy's managed Nix file (``managed_file``, imported by the host's
    configuration) in the scratch clone, as the checkout's owner, and commit it there
    naming its issues. The checkout moves only with the proven commits.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if r.plan.managed_text is None:
        in_file = [
            desired.BY_KEY[k].label
            for k in r.plan.scope
            if desired.BY_KEY[k].durable == desired.MANAGED_FILE
        ]
        host.noop(
            f"the next boot already has {', '.join(in_file)}, or {r.settings.managed_file} says so"
            if in_file
            else f"no setting in scope lives in {r.settings.managed_file}"
        )
        return
    yield FunctionCommand(_write_managed, (r,), {})


def _write_managed(state, host, r: RestoreRun) -> bool:
    s = r.settings
    if not r.scratch:
        return True  # the scratch clone was abandoned: the reason is logged
    wrote = run(
        host, r.as_owner(commands.file_written(r.scratch, s.managed_file, r.plan.managed_text))
    )
    if not wrote.ok:
        _abandon(r, f"cannot write {s.managed_file} in the scratch clone: {wrote.why}")
        return True
    committed = run(
        host,
        r.as_owner(
            commands.file_commit(r.scratch, s.managed_file, managed_message(r), s.flake_host)
        ),
    )
    if not committed.ok:
        _abandon(r, f"cannot commit {s.managed_file} in the scratch clone: {committed.why}")
        return True
    r.scratch_commits += 1
    return True


@operation()
def fix_proven(r: RestoreRun):
    """Ask Nix what the bumped configuration needs (``--dry-run``): derivations to compile
    (no ``preferLocalBuild``) block the durable path unless ``allow_local_build``. Then,
    memory-gated and bounded by ``build_max_jobs``/``build_cores``, build the new toplevel
    and read its start script: it must run the wanted parser and environment (and contain
    ``required_fix_rev`` when set). If so this is a check and changes nothing; if not,
    flake.lock is reverted and the fallback takes over: nothing is switched.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.rebuild:
        host.noop("nothing was bumped")
        return
    if not state.is_executing:
        host.noop(
            "will ask Nix what the bump builds, then build the bumped configuration "
            "and read its start script"
        )
        return
    why = _missing_fix(r)
    if r.refused:
        _drop_scratch(r)
        yield failure()
        return
    if why is None:
        held = ", ".join(desired.BY_KEY[k].label for k in r.plan.prove)
        message = f"proven: {r.proof.toplevel} holds {held}"
        host.log_styled(message, fg="green")
        host.noop(message)
        return
    _abandon(r, why)
    host.noop(f"durable path abandoned: {why}")
    yield from ()


def _owner_nix(r: RestoreRun, argv: list[str], what: str, bound: int | None) -> list[str]:
    """ARGV as the checkout's owner, inside a scope with MemoryMax=BOUND when the host has
    systemd-run (every NixOS host): Nix's evaluation of a system takes GBs."""
    owned = r.as_owner(argv)
    if bound is None or not r.before.tools.systemd_run:
        return owned
    return commands.memory_bounded(owned, bound, f"remedy-nix-{what}-{os.getpid()}")


def _bound_hit(r: RestoreRun, ran, what: str, bound: int | None) -> str | None:
    if bound is None or "killed at its memory bound" not in ran.stderr:
        return None
    return (
        f"the {what} hit its memory bound ({bound / 1e9:.1f} GB, MemoryMax of the owner's nix): "
        "the host cannot spare more above min_mem_available_gb; free memory (a reboot "
        "reclaims the tenstorrent pinned-page leak) or raise nix_memory_max_gb"
    )


def _local_builds(r: RestoreRun, bound: int | None) -> tuple[list[str], str | None]:
    """(derivations Nix would compile on the host, why it could not tell)."""
    s = r.settings
    dry = run(
        host, _owner_nix(r, commands.dry_run_toplevel(r.scratch, s.flake_host), "eval", bound)
    )
    if not dry.ok:
        if hit := _bound_hit(r, dry, "evaluation", bound):
            return [], hit
        return [], f"the new configuration does not evaluate: {dry.why}"
    planned = nix_core.parse_dry_run((dry.stderr + "\n" + dry.stdout).splitlines())
    if not planned.built:
        return [], None
    new_cli = nix_core.derivation_show_is_new(r.before.nix)
    shown = run(host, r.as_owner(commands.show_derivations(new_cli, planned.built)))
    if not shown.ok:
        return [], f"cannot read the derivations to build: {shown.why}"
    try:
        return nix_core.local_build_derivations(shown.stdout, r.before.nix.label), None
    except FactProcessError as exc:  # names the Nix whose answer it could not read
        return [], str(exc)


def _fix_ancestry(r: RestoreRun) -> str | None:
    """Why the bumped input does not contain required_fix_rev (None: it does), checked
    through the input's git history: the checkout of a git+file input, else what Nix
    fetched (its git cache, or the remote again), whatever the input's scheme."""
    s = r.settings
    short, url = (r.new_rev or "?")[:12], r.new_url or ""  # as the bump read it
    fix = s.required_fix_rev
    m = re.match(r"^git\+file://(/[^?]*)", url)
    if m:
        if run(host, r.as_owner(commands.is_ancestor(m.group(1), fix, r.new_rev))).ok:
            return None
        return f"{s.flake_input} at {short} does not contain required_fix_rev {fix[:12]}"
    remote = nix_core.git_remote(url)
    if remote is None:
        return (
            f"cannot check required_fix_rev against {url or 'an unknown url'}: git cannot "
            "fetch that kind of input; unset required_fix_rev or use a git input"
        )
    ran = run(host, r.as_owner(commands.fetched_ancestry(remote, fix, r.new_rev or "")))
    said = ran.stdout.strip().splitlines()[-1:] or [""]
    if ran.ok and said[0].startswith("ancestry: yes"):
        host.log_styled(f"required_fix_rev {fix[:12]} is in {short}: {said[0][14:]}", fg="green")
        return None
    if ran.ok and said[0].startswith("ancestry: no"):
        return (
            f"{s.flake_input} at {short} does not contain required_fix_rev {fix[:12]} "
            f"{said[0][13:]}"
        )
    return f"cannot check required_fix_rev against {url}: {ran.why}"


def _gated_bound(r: RestoreRun, doing: str) -> int | None:
    """The memory gate before the owner's nix runs (sets ``r.refused``), and the bound it
    runs under: what the host can spare above the gate's threshold now."""
    s = r.settings
    headroom = host.get_fact(MemoryHeadroom)
    if refusal := r.memory_refusal(headroom):
        r.refused = refusal.replace("not restarting the server", f"not {doing} on the host")
        host.log_styled(r.refused, fg="red")
        return None
    return mem.nix_memory_bound(headroom, s.min_mem_available_gb, s.nix_memory_max_gb)


def _missing_fix(r: RestoreRun) -> str | None:
    """Why the bumped configuration does not carry the fix, or None if it does."""
    s = r.settings
    short = (r.new_rev or "?")[:12]
    if s.required_fix_rev and (why := _fix_ancestry(r)):
        return why
    # The dry run is a whole NixOS evaluation (GBs on a real host): gated and bounded too.
    bound = _gated_bound(r, "evaluating")
    if r.refused:
        return r.refused
    heavy, problem = _local_builds(r, bound)
    if problem:
        return problem
    r.local_builds = heavy
    if heavy and not s.allow_local_build:
        names = ", ".join(h.rsplit("/", 1)[-1] for h in heavy[:5])
        return (
            f"the bump needs {len(heavy)} derivation(s) compiled on the serving host "
            f"({names}): a build competes with the model server for memory; push "
            "binaries to a cache the host substitutes from, or set allow_local_build=true "
            "(bounded by build_max_jobs/build_cores)"
        )
    bound = _gated_bound(r, "building")
    if r.refused:
        return r.refused
    attr = commands.toplevel_attr(r.scratch, s.flake_host)
    host.log_styled(
        f"building {attr} (max-jobs {s.build_max_jobs}, cores {s.build_cores})", fg="blue"
    )
    built = run(
        host,
        _owner_nix(
            r,
            commands.build_toplevel(r.scratch, s.flake_host, s.build_max_jobs, s.build_cores),
            "build",
            bound,
        ),
    )
    if not built.ok:
        if hit := _bound_hit(r, built, "build", bound):
            return hit
        return f"the new configuration does not build: {built.why}"
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
        tuple(script.flags) if script else (),
        service.kernel_params if service else None,
    )
    if missing := r.proof.missing(s, r.plan.prove):
        return (
            f"{s.flake_input} at {short} builds a system without "
            f"{'; '.join(missing)} (the fix is not in)"
        )
    return None


@operation(is_idempotent=False)
def flake_lock_committed(r: RestoreRun):
    """Bring the proven lock commit (naming tt-stack#49 and the revs) from the scratch
    clone into the checkout, as its owner, by a fast-forward: HEAD and flake.lock move
    in one short step, or not at all if someone committed meanwhile. Then the scratch
    clone goes.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.rebuild or (state.is_executing and not r.scratch_commits):
        if state.is_executing:
            _drop_scratch(r)
        host.noop("no new commit in the scratch clone; nothing to bring into the checkout")
        return
    yield FunctionCommand(_publish, (r,), {})


def _publish(state, host, r: RestoreRun) -> bool:
    s = r.settings
    ran = run(host, r.as_owner(commands.fast_forward(s.flake_dir, r.scratch)))
    if not ran.ok:
        text = ran.stderr + "\n" + ran.stdout
        if "untracked working tree files" in text:
            files = [x.strip() for x in text.splitlines() if x.startswith(("\t", "    "))]
            hint = f"untracked files in the way: {', '.join(files) or '?'}; move them away"
        else:
            hint = f"{ran.why} (did someone commit meanwhile? run again)"
        _abandon(r, f"cannot fast-forward {s.flake_dir} to the proven commits: {hint}")
        return True
    head = run(host, r.as_owner(commands.head(s.flake_dir)))
    r.lock_commit = head.stdout.strip() if head.ok else None  # for a rollback
    _drop_scratch(r)
    return True


@operation(is_idempotent=False)
def system_switched(r: RestoreRun):
    """Switch to the proven toplevel, as ``nixos-rebuild switch`` ends: set the system
    profile to it, then run its ``switch-to-configuration switch`` (boot entry, then
    activation; restarts the server if its unit changed). What was proven is what runs.

    + r: the host's RestoreRun
    """
    if reason := r.idle_reason("durable"):
        host.noop(reason)
        return
    if not r.plan.rebuild and not r.plan.finish_switch:
        host.noop("the deployed configuration already has the fix; no switch needed")
        return
    yield FunctionCommand(_switch, (r,), {})


def _switch(state, host, r: RestoreRun) -> bool:
    """A failed switch may have moved the profile or half-activated: the rollback step
    returns to the recorded generation, the fallback restores tool calling."""
    toplevel = r.proof.toplevel if r.proof else r.plan.finish_switch
    host.log_styled(f"switching to {toplevel}", fg="blue")
    if not r.plan.finish_switch:  # a finished switch: the profile is there already
        ran = run(host, commands.profile_set(toplevel))
        if not ran.ok:
            r.durable_failed = f"setting the system profile to {toplevel} failed: {ran.why}"
            host.log_styled(r.durable_failed, fg="red")
            return True
    r.switched = True
    ran = run(host, commands.activate(toplevel))
    if not ran.ok:
        why = f"switch-to-configuration switch failed: {ran.why}"
        r.verification_failed = why
        r.durable_failed = why
        host.log_styled(f"{why}; the /run override goes back, then the rollback", fg="red")
    return True


@operation(is_idempotent=False)
def system_rolled_back(r: RestoreRun):
    """After a failed switch or verification, return to exactly the generation recorded
    before the run: the profile only if it moved, the activation (memory-gated, it
    restarts the server) only if /run/current-system moved. A failed rollback is
    reported and the run still goes on to the fallback.

    + r: the host's RestoreRun
    """
    if not (r.switched and r.durable_failed):
        host.noop("no failed switch to roll back")
        return
    yield FunctionCommand(_roll_back, (r,), {})


def _roll_back(state, host, r: RestoreRun) -> bool:
    s, recorded = r.settings, r.before.generations
    now = host.get_fact(SystemGenerations)
    if recorded.profile and now.profile != recorded.profile:
        ran = run(host, commands.profile_set(recorded.profile))
        if ran.ok:
            r.notes.append(f"system profile set back to {recorded.profile}")
        else:
            r.rollback_failed = f"setting the profile back failed: {ran.why}"
    if recorded.current_system and now.current_system != recorded.current_system:
        refusal = r.memory_refusal(host.get_fact(MemoryHeadroom))
        if refusal:
            r.rollback_failed = f"not activating the old generation: {refusal}"
        else:
            ran = run(host, commands.activate(recorded.current_system))
            r.rolled_back = ran.ok
            if ran.ok:
                r.notes.append(f"activated the recorded generation {recorded.current_system}")
            else:
                r.rollback_failed = f"activating {recorded.current_system} failed: {ran.why}"
    elif not r.rollback_failed:
        r.rolled_back = True
        r.notes.append("/run/current-system never moved: nothing to activate")
    if r.lock_commit:  # or the next run would bump, switch and fail again
        ran = run(
            host,
            r.as_owner(
                commands.lock_commit_revert(
                    s.flake_dir, r.lock_commit, s.flake_host, r.before.checkout.head
                )
            ),
        )
        if ran.ok:
            r.notes.append(f"reverted the lock commit {r.lock_commit[:12]} in {s.flake_dir}")
        else:
            r.notes.append(f"could not revert the lock commit {r.lock_commit[:12]}: {ran.why}")
    if r.rollback_failed:
        host.log_styled(f"rollback FAILED: {r.rollback_failed}; going on to the fallback", fg="red")
    return True
