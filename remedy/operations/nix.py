"""Nix operations of the durable path: bump the input, prove the fix, commit, switch.

Each takes plain values (``remedy.core.run.steps``) and decides when it runs, from the
facts it reads then and the run journal (``remedy.core.programs.journal``): the scratch
clone, the proven toplevel and the lock commit go there, not through Python
memory. git and nix run as the flake checkout's owner, with the flake features on
the command line; only the profile and the activation run as root. A step that
gives up fails with its reason (ignored: the run goes on to the fallback); it
never leaves production half-changed.

This module is the operations (the runbooks name them ``nix.<operation>``); their
bodies live by phase: ``nix_bump`` (the scratch clone, the bump, the managed file),
``nix_prove`` (the build and its proof), ``nix_switch`` (the fast-forward, the
switch), ``nix_rollback``; ``nix_body`` is what they share. Each body gets the
step's values as one dataclass and answers True (done) or False (gave up, said why).
"""

from __future__ import annotations

from pyinfra import host, state
from pyinfra.api import operation

from facts.nix import SystemGenerations
from remedy.core.config.host_data import HostData
from remedy.core.programs import builder as builder_core
from remedy.core.programs import commands
from remedy.core.programs.builder import Builder
from remedy.core.readings import switch as switch_core
from remedy.operations import journal
from remedy.operations.argv import command, ran, read
from remedy.operations.nix_body import owned, preview
from remedy.operations.nix_bump import (
    Bump,
    ManagedFile,
    _bump,
    _write_managed,
    preview_bump,
    preview_managed,
)
from remedy.operations.nix_prove import Build, _prove
from remedy.operations.nix_prove import preview as preview_build
from remedy.operations.nix_rollback import Rollback, _roll_back
from remedy.operations.nix_switch import (
    Publish,
    Switch,
    _publish,
    _switch,
    preview_publish,
    preview_switch,
)
from remedy.operations.said import gave_up, lost, note


@operation(is_idempotent=False)
def flake_input_updated(
    journal_path: str,
    run_id: str,
    owner: str,
    home: str | None,
    flake_dir: str,
    flake_input: str,
    flake_host: str,
    update: bool,
    update_argv: list[str],
    locked_url: str,
    locked_ref: str | None,
    old_rev: str | None,
    base_head: str | None,
    pinned_rev: str | None,
    allowed_signers: str | None,
    trusted_signers: str | None,
    required_fix_rev: str | None,
    lock_message: str,
    builder: Builder | None = None,
    skip=None,
):
    """In a scratch clone of FLAKE_DIR (as OWNER), bump FLAKE_INPUT with the host's Nix
    command (UPDATE_ARGV), or lock it to PINNED_REV, and commit flake.lock there. The
    checkout itself is not touched until the fix is proven. The scratch clone's path
    starts the run journal. A fetch that fails, a rev off the branch or an untrusted
    signature gives up the durable path.

    + journal_path: the run journal
    + run_id: this run
    + owner: the checkout's owner (git and nix run as them)
    + home: the owner's home
    + flake_dir: the host flake's checkout
    + flake_input: the input to bump
    + flake_host: the host's name in the flake (commits are remedy@flake_host)
    + update: the input needs a bump (else only the scratch clone)
    + update_argv: the host's Nix command that updates one input
    + locked_url: the input's locked url
    + locked_ref: the branch it follows
    + old_rev: the locked rev now
    + base_head: the checkout's HEAD now
    + pinned_rev: the rev a person approved (bump_to), or None for the latest
    + allowed_signers: trusted_signers' text, or None: no signature check
    + trusted_signers: where that text came from, for messages
    + required_fix_rev: a rev the bumped input's history must contain, or None
    + lock_message: the lock commit's message ({new} for the new rev)
    + builder: the builder the bump and build run on (host data build_host), or None
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    values = Bump(
        journal_path,
        run_id,
        owner,
        home,
        flake_dir,
        flake_input,
        flake_host,
        update,
        update_argv,
        base_head,
        pinned_rev,
        allowed_signers,
        trusted_signers,
        required_fix_rev,
        lock_message,
        builder,
    )
    if not state.is_executing:
        yield from preview(f"the bump of {flake_input}", preview_bump(values))
        return
    yield from _bump(values)


@operation(is_idempotent=False)
def managed_file_written(
    journal_path: str,
    run_id: str,
    owner: str,
    home: str | None,
    managed_file: str,
    text: str,
    message: str,
    flake_host: str,
    builder: Builder | None = None,
    skip=None,
):
    """Write remedy's managed Nix file (MANAGED_FILE, imported by the host's
    configuration) with TEXT in the scratch clone, as the checkout's owner, and commit
    it there naming its issues. The checkout moves only with the proven commits.

    + journal_path: the run journal (where the scratch clone is)
    + run_id: this run
    + owner: the checkout's owner
    + home: the owner's home
    + managed_file: the file, relative to the checkout
    + text: its content (the same desired state gives the same bytes)
    + message: the commit message
    + flake_host: the host's name in the flake
    + builder: the builder the scratch clone is on, or None
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if state.is_executing and not journal.read(journal_path, run_id).get("scratch"):
        yield from gave_up("no scratch clone to write the managed file in")
        return
    values = ManagedFile(
        journal_path, run_id, owner, home, managed_file, text, message, flake_host, builder
    )
    if not state.is_executing:
        yield from preview(f"writing {managed_file}", preview_managed(values))
        return
    yield from _write_managed(values)


@operation()
def fix_proven(
    journal_path: str,
    run_id: str,
    owner: str,
    home: str | None,
    host_data: HostData,
    prove: list[str],
    nix_label: str,
    new_derivation_cli: bool,
    systemd_run: bool,
    current_system: str | None = None,
    builder: Builder | None = None,
    skip=None,
):
    """Ask Nix what the scratch clone's configuration needs (``--dry-run``): derivations
    to compile (no ``preferLocalBuild``, no text file) give up the durable path unless
    ``allow_local_build``. Then, memory-gated and bounded, build its toplevel and read
    its start script: it must hold every setting in PROVE (and contain
    ``required_fix_rev`` when set). The proven toplevel goes into the run journal.

    + journal_path: the run journal (the scratch clone, the new rev; then the proof)
    + run_id: this run
    + owner: the checkout's owner
    + home: the owner's home
    + host_data: the host's data (the desired values, build bounds, the memory gate)
    + prove: the managed settings the built system must hold
    + nix_label: the host's Nix, for messages
    + new_derivation_cli: the host's Nix has `nix derivation show`
    + systemd_run: the host has systemd-run (the owner's nix runs bounded)
    + current_system: the running system, to say what the switch changes beyond the settings
    + builder: the builder that builds and checks, whose closure is copied here; or None
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if not state.is_executing and builder:
        host.log_styled("the builder builds: see the plan", fg="blue")
    elif not state.is_executing:  # the build adds the new system and its proof: a change
        checks, default = host_data.checks
        named = ", ".join(checks) + (" if it exists" if default else "")
        host.log_styled(
            "will ask Nix what the bump builds, then build the bumped configuration "
            "and read its start script, then build the flake checks "
            f"({named or 'none: flake_checks is empty'}); what the switch changes beyond "
            "the managed settings (kernel, kernel parameters, package versions) is known "
            "after the build",
            fg="blue",
        )
    values = Build(
        journal_path,
        run_id,
        owner,
        home,
        host_data,
        prove,
        nix_label,
        new_derivation_cli,
        systemd_run,
        current_system,
        builder,
    )
    if not state.is_executing:
        yield from preview("the proof", preview_build(values))
        return
    yield from _prove(values)


@operation(is_idempotent=False)
def flake_lock_committed(
    journal_path: str, run_id: str, owner: str, home: str | None, flake_dir: str, skip=None
):
    """Bring the proven commits (the lock naming tt-stack#49 and the revs, the managed
    file) from the scratch clone into FLAKE_DIR, as its owner, by a fast-forward: HEAD
    and flake.lock move in one short step, or not at all if someone committed
    meanwhile. The new HEAD goes into the run journal, for a rollback.

    + journal_path: the run journal (the scratch clone, what it proved)
    + run_id: this run
    + owner: the checkout's owner
    + home: the owner's home
    + flake_dir: the host flake's checkout
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    j = None
    if state.is_executing:
        j = journal.read(journal_path, run_id)
        if not j.get("commits"):
            host.noop("no new commit in the scratch clone; nothing to bring into the checkout")
            return
        if not j.get("toplevel"):
            yield from gave_up("nothing was proven: the checkout is not moved")
            return
    values = Publish(journal_path, run_id, owner, home, flake_dir, j)
    if not state.is_executing:
        yield from preview("the fast-forward", preview_publish(values))
        return
    yield from _publish(values)


@operation(is_idempotent=False)
def system_switched(
    journal_path: str,
    run_id: str,
    toplevel: str | None,
    set_profile: bool,
    action: str = "switch",
    unit: str = "tenstorrent-serving.service",
    transient: bool = True,
    lock_wait_s: float = 30.0,
    server_url: str | None = None,
    skip=None,
):
    """Switch to the proven toplevel (TOPLEVEL, or the one the run journal holds), as
    ``nixos-rebuild switch`` ends: wait for a switch that another holds (a person's
    nixos-rebuild), set the system profile, then run its ``switch-to-configuration
    switch`` in nixos-rebuild-ng's transient unit. What was proven is what runs.

    Its exit code decides (``remedy.core.readings.switch``): 0 is done; 4 is done if the serving
    unit is active (the failed units are named), else the fallback takes over; 100 made
    the new generation the boot default and activated nothing (a reboot activates it):
    the fallback keeps live right and the rollback keeps the boot entry; a switch held
    by another changes nothing durable; anything else is rolled back.

    + journal_path: the run journal (the proven toplevel; the switch's exit code)
    + run_id: this run
    + toplevel: the system to activate when it is known beforehand (an unfinished switch)
    + set_profile: set the system profile first (not for an unfinished switch)
    + action: "switch", or "boot" where the restart policy allows no restart now: the
      proven system becomes the boot default and nothing is activated (also when the
      drain postponed the restart)
    + unit: the serving unit
    + transient: run it in the transient unit (the host is booted with systemd)
    + lock_wait_s: how long to wait for another switch
    + server_url: the server, whose /metrics is read once more just before the switch
      restarts it
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    j = None
    if state.is_executing:
        j = journal.read(journal_path, run_id)
        toplevel = toplevel or j.get("toplevel")
        if not toplevel:
            yield from gave_up("no proven toplevel to switch to")
            return
    values = Switch(
        journal_path,
        run_id,
        j,
        toplevel,
        set_profile,
        action,
        unit,
        transient,
        lock_wait_s,
        server_url,
    )
    if not state.is_executing:
        yield from preview("the switch", preview_switch(values))
        return
    yield from _switch(values)


@operation(is_idempotent=False)
def system_rolled_back(
    journal_path: str,
    run_id: str,
    owner: str,
    home: str | None,
    profile: str | None,
    current_system: str | None,
    flake_dir: str,
    flake_host: str,
    base_head: str | None,
    min_gb: float,
    transient: bool = True,
    lock_wait_s: float = 30.0,
    skip=None,
):
    """After a failed switch or verification, return to exactly the generation recorded
    before the run (PROFILE, CURRENT_SYSTEM), as ``nixos-rebuild --rollback`` does: the
    profile back, then always the restored generation's switch-to-configuration, so
    the boot entry is right again (``boot`` when only it moved, or when the memory gate
    refuses the restart an activation would cause; ``switch`` when /run/current-system
    moved); and revert the lock commit the journal names. Not after a switch that
    exited 100, or that the switch inhibitors turned into a `boot` (the new generation
    is meant to boot), nor one another switch held. Another switch, or the last one's
    transient unit not yet collected, is waited for up to LOCK_WAIT_S. A failed
    rollback fails this step (ignored): the run goes on to the fallback.

    + journal_path: the run journal (the lock commit, the switch's exit code)
    + run_id: this run
    + owner: the checkout's owner
    + home: the owner's home
    + profile: the system profile before the run
    + current_system: /run/current-system before the run
    + flake_dir: the host flake's checkout
    + flake_host: the host's name in the flake
    + base_head: the checkout's HEAD before the run
    + min_gb: min_mem_available_gb
    + transient: switch in the transient unit (the host is booted with systemd)
    + lock_wait_s: how long to wait for another switch (or the last one's unit)
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if not state.is_executing:
        host.noop("runs only if the switch or its verification fails")
        return
    now = host.get_fact(SystemGenerations)
    if now is None:
        yield from gave_up(lost("the system generations"), rollback_failed=lost("them"))
        return
    j = journal.read(journal_path, run_id)
    lock_commit, exit_ = j.get("lock_commit"), j.get("switch_exit")
    moved_profile = bool(profile and now.profile != profile)
    moved_system = bool(current_system and now.current_system != current_system)
    if why := _nothing_to_roll_back(j, moved_profile or moved_system):
        host.noop(why)
        return
    values = Rollback(
        owner, home, profile, current_system, flake_dir, flake_host, base_head, min_gb,
        transient, lock_wait_s, run_id, lock_commit, exit_, moved_profile, moved_system,
    )  # fmt: skip
    yield from _roll_back(values)


def _nothing_to_roll_back(j, moved: bool) -> str | None:
    """Why the rollback has nothing to do, from the run journal J and whether the
    profile or /run/current-system MOVED since the run began; None: it rolls back."""
    exit_ = j.get("switch_exit")
    if exit_ == 100:
        return (
            "the switch exited 100: the new generation is the boot default, kept (a reboot "
            "activates it)"
        )
    if j.get("boot_pending"):
        return (
            "the switch inhibitors refused a live switch: the new generation is the boot "
            "default, kept (a reboot activates it)"
        )
    switched = exit_ not in (None, switch_core.LOCKED)
    if not (moved or j.get("lock_commit") or switched):
        return "/run/current-system and the profile never moved: nothing to roll back"
    return None


@operation(is_idempotent=False)
def scratch_removed(
    journal_path: str,
    run_id: str,
    owner: str,
    home: str | None,
    made: bool = False,
    left: list[str] | None = None,
    builder: Builder | None = None,
):
    """Remove the scratch clone the run journal names, whatever happened before (the
    checkout has what was proven, or nothing), and any a killed run left (LEFT, as the
    snapshot saw them): every run that makes one holds the host lock, so none of them
    is in use. A run that made none and found none reads nothing more.

    + journal_path: the run journal
    + run_id: this run
    + owner: the checkout's owner
    + home: the owner's home
    + made: the run makes a scratch clone (its plan rebuilds)
    + left: the scratch clones the snapshot found
    + builder: the builder this host builds on, whose clones of this host go too
    """
    if builder and made:
        if not state.is_executing:
            yield command(builder_core.stale_scratch_removed(builder, builder.tag))
        elif journal.read(journal_path, run_id).get("builder_scratch"):
            yield from ran(run_id, builder_core.stale_scratch_removed(builder, builder.tag))
    if not (made or left):
        host.noop("no scratch clone")
        return
    if not state.is_executing:
        yield command(owned(owner, home, commands.stale_scratch_removed(owner)))
        return
    listed = read(owned(owner, home, commands.stale_scratch_listed(owner)))
    found = listed.stdout.split() if listed.ok else []
    if not found:
        host.noop("no scratch clone")
        return
    # this run's own, and those the snapshot found: a killed run's (the journal may
    # still name one; a journal whose clone is gone finishes nothing)
    if left:
        note(f"removed {len(left)} scratch clone(s) that a killed run left")
    yield command(owned(owner, home, commands.stale_scratch_removed(owner)))
