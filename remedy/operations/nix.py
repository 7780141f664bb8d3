"""Nix operations of the durable path: bump the input, prove the fix, commit, switch.

Each takes plain values (``remedy.core.steps``) and decides when it runs, from the
facts it reads then and the run journal (``remedy.core.journal``): the scratch
clone, the proven toplevel and the lock commit go there, not through Python
memory. git and nix run as the flake checkout's owner, with the flake features on
the command line; only the profile and the activation run as root. A step that
gives up fails with its reason (ignored: the run goes on to the fallback); it
never leaves production half-changed.
"""

from __future__ import annotations

import functools
import json
import re
import time

from paramiko.ssh_exception import SSHException
from pyinfra import host, state
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import FactProcessError

from facts.memory import MemoryHeadroom
from facts.nix import SystemGenerations
from facts.serving import BuiltService
from remedy.core import bump as bump_core
from remedy.core import changes as changes_core
from remedy.core import checks as checks_core
from remedy.core import commands, desired, options
from remedy.core import journal as journal_core
from remedy.core import memory as mem
from remedy.core import nix as nix_core
from remedy.core import switch as switch_core
from remedy.core.plan import Proof
from remedy.core.settings import Settings
from remedy.operations import journal
from remedy.operations.argv import command, run
from remedy.operations.memory import refusal
from remedy.operations.said import gave_up, lost, note, say
from remedy.operations.serving import cut_by_restart


def _owned(owner: str, home: str | None, argv: list[str]) -> list[str]:
    return commands.as_owner(owner, home, argv)


def _guarded(function):
    """A FunctionCommand's body whose connection goes away (a reboot mid-run) gives up
    with that reason instead of a traceback: the step fails and the run goes on."""

    @functools.wraps(function)
    def guarded(state, host, *args):
        try:
            return function(state, host, *args)
        except (EOFError, OSError, SSHException) as exc:
            args[-1]["why"] = f"the connection to {host.name} was lost ({exc!r})"
            return True

    return guarded


def _then_fail(found: dict):
    """After a FunctionCommand that recorded why it gave up in FOUND: fail the step."""
    if found.get("why"):
        yield from gave_up(found["why"], fg="yellow")


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
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    found: dict = {}
    yield FunctionCommand(_bump, (dict(locals()), found), {})
    yield from _then_fail(found)


@_guarded
def _bump(state, host, a: dict, found: dict) -> bool:
    owner, home, journal_path, run_id = a["owner"], a["home"], a["journal_path"], a["run_id"]

    def as_owner(argv):
        return _owned(owner, home, argv)

    run(host, commands.STALE_NIX_SCOPES)  # a killed run's hung build (the host lock is ours)
    run(host, as_owner(commands.stale_scratch_removed(owner)))
    made = run(host, as_owner(commands.scratch_dir()))
    if not made.ok:
        found["why"] = f"cannot make a scratch directory as {owner}: {made.why}"
        return True
    scratch = made.stdout.strip()
    started = _now()
    fresh = {"run_id": run_id, "started": started, "scratch": scratch, "base_head": a["base_head"]}
    known = journal_core.RunJournal(fresh)
    if not run(host, journal.write_argv(journal_path, fresh)).ok:
        found["why"] = f"cannot write the run journal {journal_path}"
        return True
    cloned = run(host, as_owner(commands.scratch_clone(a["flake_dir"], scratch)))
    if not cloned.ok:
        found["why"] = f"cannot clone {a['flake_dir']} into {scratch}: {cloned.why}"
        return True
    if not a["update"]:
        note(f"{a['flake_input']} not bumped: the next boot already has what it gives")
        return True
    name = a["flake_input"]
    # the approval is decided on the host by the program the manual script runs too
    argv = bump_core.argv(
        scratch,
        name,
        commands.update_input(a["update_argv"], scratch, name),
        a["pinned_rev"],
        a["allowed_signers"],
        a["trusted_signers"],
        a["required_fix_rev"],
    )
    ran = run(host, as_owner(argv))
    bumped = bump_core.parse(ran.stdout, ran.why)
    for line in bumped.said:
        host.log_styled(line, fg="green")
    if bumped.new_rev:
        say(new_rev=bumped.new_rev)
    if bumped.signature is not None:
        say(signature=bumped.signature)
    if bumped.refused:
        found["why"] = bumped.refused
        return True
    new_rev, new_url = bumped.new_rev, bumped.new_url
    if bumped.unchanged:
        note(f"{name} is already at {(new_rev or '?')[:12]}")
        return journal.record(journal_path, run_id, known, new_rev=new_rev, new_url=new_url)
    message = a["lock_message"].replace("{new}", (new_rev or "(bumped)")[:12])
    committed = run(host, as_owner(commands.lock_commit(scratch, message, a["flake_host"])))
    if not committed.ok:
        found["why"] = f"cannot commit flake.lock in the scratch clone: {committed.why}"
        return True
    head = run(host, as_owner(commands.head(scratch)))
    return journal.record(
        journal_path,
        run_id,
        known,
        new_rev=new_rev,
        new_url=new_url,
        commits=1,
        scratch_head=head.stdout.strip() if head.ok else None,
    )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if state.is_executing and not journal.read(journal_path, run_id).get("scratch"):
        yield from gave_up("no scratch clone to write the managed file in")
        return
    found: dict = {}
    yield FunctionCommand(_write_managed, (dict(locals()), found), {})
    yield from _then_fail(found)


@_guarded
def _write_managed(state, host, a: dict, found: dict) -> bool:
    j = journal.read(a["journal_path"], a["run_id"])
    scratch, rel = j.get("scratch"), a["managed_file"]

    def as_owner(argv):
        return _owned(a["owner"], a["home"], argv)

    wrote = run(host, as_owner(commands.file_written(scratch, rel, a["text"])))
    if not wrote.ok:
        found["why"] = f"cannot write {rel} in the scratch clone: {wrote.why}"
        return True
    committed = run(
        host, as_owner(commands.file_commit(scratch, rel, a["message"], a["flake_host"]))
    )
    if not committed.ok:
        found["why"] = f"cannot commit {rel} in the scratch clone: {committed.why}"
        return True
    head = run(host, as_owner(commands.head(scratch)))
    return journal.record(
        a["journal_path"],
        a["run_id"],
        j,
        commits=int(j.get("commits") or 0) + 1,
        scratch_head=head.stdout.strip() if head.ok else None,
    )


@operation()
def fix_proven(
    journal_path: str,
    run_id: str,
    owner: str,
    home: str | None,
    settings: Settings,
    prove: list[str],
    nix_label: str,
    new_derivation_cli: bool,
    systemd_run: bool,
    current_system: str | None = None,
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
    + settings: the host's settings (the desired values, build bounds, the memory gate)
    + prove: the managed settings the built system must hold
    + nix_label: the host's Nix, for messages
    + new_derivation_cli: the host's Nix has `nix derivation show`
    + systemd_run: the host has systemd-run (the owner's nix runs bounded)
    + current_system: the running system, to say what the switch changes beyond the settings
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if not state.is_executing:  # the build adds the new system and its proof: a change
        checks, default = settings.checks
        named = ", ".join(checks) + (" if it exists" if default else "")
        host.log_styled(
            "will ask Nix what the bump builds, then build the bumped configuration "
            "and read its start script, then build the flake checks "
            f"({named or 'none: flake_checks is empty'}); what the switch changes beyond "
            "the managed settings (kernel, kernel parameters, package versions) is known "
            "after the build",
            fg="blue",
        )
    found: dict = {}
    yield FunctionCommand(_prove, (dict(locals()), found), {})
    yield from _then_fail(found)


@_guarded
def _prove(state, host, a: dict, found: dict) -> bool:
    s: Settings = a["settings"]
    j = journal.read(a["journal_path"], a["run_id"])
    scratch, new_rev = j.get("scratch"), j.get("new_rev")
    if not scratch:
        found["why"] = "no scratch clone to build"
        return True
    short = (new_rev or "?")[:12]

    def as_owner(argv):
        return _owned(a["owner"], a["home"], argv)

    bound, why = _gated_bound(s, "evaluating")
    if why:
        found["why"] = why
        if not why.startswith(LOST):  # the memory gate refused, not a lost connection
            say(refused=why)
        return True
    dry = commands.dry_run_toplevel(scratch, s.flake_host)
    heavy, problem = _local_builds(as_owner, a, dry, bound)
    if problem:
        found["why"] = problem
        return True
    say(local_builds=heavy)
    if heavy and not s.allow_local_build:
        found["why"] = _compile_refused(heavy, "the bump")
        return True
    bound, why = _gated_bound(s, "building")
    if why:
        found["why"] = why
        if not why.startswith(LOST):  # the memory gate refused, not a lost connection
            say(refused=why)
        return True
    attr = commands.toplevel_attr(scratch, s.flake_host)
    host.log_styled(
        f"building {attr} (max-jobs {s.build_max_jobs}, cores {s.build_cores})", fg="blue"
    )
    build = commands.build_toplevel(scratch, s.flake_host, s.build_max_jobs, s.build_cores)
    built = run(host, _owner_nix(as_owner, a, build, "build", bound))
    if not built.ok:
        found["why"] = (
            _bound_hit(built, "build", bound, s.nix_timeout_s)
            or options.evaluation_blocker(built.stderr + "\n" + built.stdout, s)
            or f"the new configuration does not build: {built.why}"
        )
        return True
    try:  # stdout only: warnings on stderr may contain brackets
        toplevel = json.loads(built.stdout)[0]["outputs"]["out"]
    except (ValueError, KeyError, IndexError, TypeError):
        found["why"] = f"unreadable nix build output: {built.stdout[:200]}"
        return True
    service = host.get_fact(BuiltService, toplevel=toplevel, unit=s.unit)
    if service is None:
        found["why"] = lost(f"the unit in {toplevel}")
        return True
    script = service.script
    proof = Proof(
        toplevel,
        script.path if script else None,
        script.tool_call_parser if script else "none",
        dict(service.environment) if service else {},
        tuple(script.flags) if script else (),
        service.kernel_params if service else None,
    )
    if missing := proof.missing(s, tuple(a["prove"])):
        found["why"] = (
            f"{s.flake_input} at {short} builds a system without "
            f"{'; '.join(missing)} (the fix is not in)"
        )
        return True
    held = ", ".join(desired.BY_KEY[k].label for k in a["prove"])
    host.log_styled(f"proven: {toplevel} holds {held}", fg="green")
    if current := a.get("current_system"):
        _say_changes(current, toplevel)
    if why := _flake_checks(as_owner, a, scratch):
        found["why"] = why
        return True
    say(toplevel=toplevel)
    head = run(host, as_owner(commands.head(scratch)))
    return journal.record(
        a["journal_path"],
        a["run_id"],
        j,
        toplevel=toplevel,
        proven_head=head.stdout.strip() if head.ok else None,
    )


def _say_changes(current: str, toplevel: str) -> None:
    """What the switch from CURRENT to TOPLEVEL changes beyond the managed settings: a
    new kernel, initrd or kernel modules, the kernel parameters (each needs a reboot),
    and the packages whose versions change."""
    boot = run(host, commands.system_boot(current, toplevel))
    files, removed, added = changes_core.parse_boot(boot.stdout.splitlines())
    diff = run(host, commands.diff_closures(current, toplevel))
    found = changes_core.SystemChanges(
        files,
        removed,
        added,
        changes_core.parse_diff_closures(diff.stdout) if diff.ok else (),
        None if diff.ok else f"nix store diff-closures failed: {diff.why}",
    )
    for line in found.summary():
        host.log_styled(line, fg="blue")
    say(
        switch_changes={
            "reboot_for": found.reboot_for,
            "kernel_params_removed": list(found.params_removed),
            "kernel_params_added": list(found.params_added),
            "packages": list(found.packages),
            "packages_unread": found.unread,
        }
    )


def _owner_nix(as_owner, a: dict, argv: list[str], what: str, bound: int | None) -> list[str]:
    """ARGV as the checkout's owner, bounded in time (nix_timeout_s) and, when the host has
    systemd-run (every NixOS host), in a scope with MemoryMax=BOUND: Nix's evaluation of a
    system takes GBs."""
    s: Settings = a["settings"]
    scope = re.sub(r"[^A-Za-z0-9]+", "-", a["run_id"]).strip("-")
    memory = bound if a["systemd_run"] else None
    return commands.nix_bounded(
        as_owner(argv), memory, f"remedy-nix-{what}-{scope}", s.nix_timeout_s
    )


def _bound_hit(ran, what: str, bound: int | None, timeout_s: int | None = None) -> str | None:
    if commands.TIME_BOUND_HIT in ran.stderr:
        return (
            f"the {what} ran past its time bound (nix_timeout_s={timeout_s or '?'}) and was "
            "stopped: a build or check that hangs must not hold the host; find what hangs, "
            "or raise nix_timeout_s"
        )
    if bound is None or commands.MEMORY_BOUND_HIT not in ran.stderr:
        return None
    return (
        f"the {what} hit its memory bound ({bound / 1e9:.1f} GB, MemoryMax of the owner's nix): "
        "the host cannot spare more above min_mem_available_gb; free memory (a reboot "
        "reclaims the tenstorrent pinned-page leak) or raise nix_memory_max_gb"
    )


LOST = "cannot read"  # how said.lost() begins: a lost connection is not a refusal


def _gated_bound(s: Settings, doing: str) -> tuple[int | None, str | None]:
    """(the bound the owner's nix runs under: what the host can spare above the gate's
    threshold now, why the memory gate refuses to run it at all)."""
    headroom = host.get_fact(MemoryHeadroom)
    if headroom is None:
        return None, lost("MemAvailable")
    if why := refusal(s.min_mem_available_gb, headroom, f"{doing} on the host"):
        host.log_styled(why, fg="red")
        return None, why
    return mem.nix_memory_bound(headroom, s.min_mem_available_gb, s.nix_memory_max_gb), None


def _local_builds(
    as_owner, a: dict, dry_argv: list[str], bound, what: str = "the new configuration", dry=None
) -> tuple[list[str], str | None]:
    """(derivations Nix would compile on the host for DRY_ARGV, a ``--dry-run`` (DRY: its
    result when it already ran); why it could not tell)."""
    s: Settings = a["settings"]
    if dry is None:
        dry = run(host, _owner_nix(as_owner, a, dry_argv, "eval", bound))
    if not dry.ok:
        if hit := _bound_hit(dry, "evaluation", bound, s.nix_timeout_s):
            return [], hit
        said = dry.stderr + "\n" + dry.stdout
        return [], options.evaluation_blocker(said, s) or (f"{what} does not evaluate: {dry.why}")
    planned = nix_core.parse_dry_run((dry.stderr + "\n" + dry.stdout).splitlines())
    if not planned.built:
        return [], None
    shown = run(host, as_owner(commands.show_derivations(a["new_derivation_cli"], planned.built)))
    if not shown.ok:
        return [], f"cannot read the derivations to build: {shown.why}"
    try:
        return nix_core.local_build_derivations(shown.stdout, a["nix_label"]), None
    except FactProcessError as exc:  # names the Nix whose answer it could not read
        return [], str(exc)


def _compile_refused(heavy: list[str], what: str) -> str:
    names = ", ".join(h.rsplit("/", 1)[-1] for h in heavy[:5])
    return (
        f"{what} needs {len(heavy)} derivation(s) compiled on the serving host "
        f"({names}): a build competes with the model server for memory; push "
        "binaries to a cache the host substitutes from, or set allow_local_build=true "
        "(bounded by build_max_jobs/build_cores)"
    )


def _flake_checks(as_owner, a: dict, scratch: str) -> str | None:
    """Build each of host data's flake_checks for the bumped lock (the same dry-run guard
    and memory gate as the system's build): why the durable path must stop, or None.
    An absent output is said and skipped."""
    s: Settings = a["settings"]
    checks, default = s.checks
    results: list[checks_core.CheckResult] = []
    why = None
    for check in checks:
        what = f"flake check {check}"
        bound, why = _gated_bound(s, f"evaluating {what}")
        if why:
            if not why.startswith(LOST):  # the memory gate refused
                say(refused=why)
            break
        argv = commands.flake_check(scratch, check, dry=True)
        dry = run(host, _owner_nix(as_owner, a, argv, "eval", bound))
        if not dry.ok and checks_core.absent(dry.stderr + dry.stdout):
            results.append(checks_core.CheckResult(check, checks_core.ABSENT))
            continue
        heavy, why = _local_builds(as_owner, a, argv, bound, what, dry)
        if why:
            break
        if heavy and not s.allow_local_build:
            why = _compile_refused(heavy, what)
            break
        bound, why = _gated_bound(s, f"building {what}")
        if why:
            if not why.startswith(LOST):
                say(refused=why)
            break
        host.log_styled(f"building {what}", fg="blue")
        argv = commands.flake_check(scratch, check, False, s.build_max_jobs, s.build_cores)
        built = run(host, _owner_nix(as_owner, a, argv, "check", bound))
        if built.ok:
            results.append(checks_core.CheckResult(check, checks_core.PASSED))
            continue
        if hit := _bound_hit(built, what, bound, s.nix_timeout_s):
            why = hit
            break
        tail = checks_core.log_tail(built.stderr + "\n" + built.stdout)
        results.append(checks_core.CheckResult(check, checks_core.FAILED, " / ".join(tail)))
        why = (
            f"{what} failed for {s.flake_input} at the bumped rev: {tail[-1] if tail else '?'} "
            "(the switch would deploy what the check rejects)"
        )
        break
    for r in results:
        quiet = default and r.result == checks_core.ABSENT
        host.log_styled(
            r.line(), fg="blue" if quiet else "green" if r.result == "passed" else "red"
        )
    say(flake_checks=[r.to_json() for r in results])
    return why


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
    found: dict = {}
    yield FunctionCommand(_publish, (dict(locals()), found), {})
    yield from _then_fail(found)


@_guarded
def _publish(state, host, a: dict, found: dict) -> bool:
    j = a["j"] or journal.read(a["journal_path"], a["run_id"])
    flake_dir = a["flake_dir"]

    def as_owner(argv):
        return _owned(a["owner"], a["home"], argv)

    ran = run(host, as_owner(commands.fast_forward(flake_dir, j.get("scratch"))))
    if not ran.ok:
        text = ran.stderr + "\n" + ran.stdout
        if "untracked working tree files" in text:
            files = [x.strip() for x in text.splitlines() if x.startswith(("\t", "    "))]
            hint = f"untracked files in the way: {', '.join(files) or '?'}; move them away"
        else:
            hint = f"{ran.why} (did someone commit meanwhile? run again)"
        found["why"] = f"cannot fast-forward {flake_dir} to the proven commits: {hint}"
        return True
    head = run(host, as_owner(commands.head(flake_dir)))
    lock_commit = head.stdout.strip() if head.ok else None
    say(lock_commit=lock_commit)
    return journal.record(a["journal_path"], a["run_id"], j, lock_commit=lock_commit)


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

    Its exit code decides (``remedy.core.switch``): 0 is done; 4 is done if the serving
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
    found: dict = {}
    yield FunctionCommand(_switch, (dict(locals()), toplevel, found), {})
    yield from _then_fail(found)


def switch_holders(wait_s: float) -> list[str]:
    """Who holds the switch after waiting up to WAIT_S for them to finish (none: free)."""
    deadline = time.monotonic() + wait_s
    while True:
        ran = run(host, commands.switch_holders())
        holders = commands.parse_holders(ran.stdout) if ran.ok else []
        if not holders or time.monotonic() >= deadline:
            return holders
        time.sleep(1)


@_guarded
def _switch(state, host, a: dict, toplevel: str, found: dict) -> bool:
    """A failed switch may have moved the profile or half-activated: the rollback step
    returns to the recorded generation, the fallback restores tool calling."""
    path, run_id, j = a["journal_path"], a["run_id"], a["j"]
    if holders := switch_holders(a["lock_wait_s"]):
        found["why"] = switch_core.locked(holders, a["lock_wait_s"])
        say(switch_locked=holders)
        journal.record(path, run_id, j, switch_exit=switch_core.LOCKED)
        return True
    host.log_styled(f"switching to {toplevel}", fg="blue")
    journal.record(path, run_id, j, switching=toplevel)
    before = None
    if a["set_profile"]:
        was = run(host, ["readlink", "-f", commands.SYSTEM_PROFILE])
        before = was.stdout.strip() if was.ok else None
        ran = run(host, commands.profile_set(toplevel))
        if not ran.ok:
            found["why"] = f"setting the system profile to {toplevel} failed: {ran.why}"
            return True
    action = a["action"]
    if action == "switch" and (postponed := j.get("restart_postponed")):
        host.log_styled(f"{postponed}: making {toplevel} the boot default only", fg="yellow")
        action = "boot"
    if action == "switch" and (cut := cut_by_restart(a["server_url"])):
        say(requests_cut=cut)
    ran = run(host, commands.switch(toplevel, action, a["transient"], a["lock_wait_s"]))
    code = commands.switch_exit(ran.stdout)
    said_text = ran.stdout + "\n" + ran.stderr
    outcome = switch_core.outcome(code, said_text)
    journal.record(
        path, run_id, j, switching=toplevel, switch_exit=outcome.code if code is not None else None
    )
    say(switch_exit=code, switch_failed_units=list(outcome.failed_units) or None)
    if outcome.kind == switch_core.INHIBITED and action == "switch":
        return _inhibited(a, toplevel, found)
    if outcome.kind == switch_core.LOCKED:
        # another switch took the lock after the check: put the profile back, as it was
        if before:
            run(host, commands.profile_set(before))
        found["why"] = switch_core.locked(outcome.holders or ["another switch"], 0)
        say(switch_locked=outcome.holders or ["another switch"])
        journal.record(path, run_id, j, switch_exit=switch_core.LOCKED)
        return True
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
    if outcome.kind == switch_core.UNITS_FAILED:
        active = run(host, ["systemctl", "is-active", a["unit"]])
        serving_ok = active.stdout.strip() == "active" and a["unit"] not in outcome.failed_units
        if serving_ok:
            host.log_styled(f"switch exit 4: {', '.join(outcome.failed_units)} failed", fg="yellow")
            return True
        found["why"] = (
            f"switch-to-configuration exited 4: {a['unit']} is not active "
            f"(failed: {', '.join(outcome.failed_units) or 'not named'}); the fallback takes over"
        )
    elif outcome.kind == switch_core.BOOT_PENDING:
        say(boot_pending=toplevel)
        found["why"] = (
            "switch-to-configuration exited 100: the init interface changed, so the new "
            "generation is the boot default and nothing was activated (a reboot activates "
            "it); the /run override keeps live right until then"
        )
    elif code is None:
        found["why"] = f"switch-to-configuration switch did not report: {ran.why}"
    else:
        found["why"] = f"switch-to-configuration switch exited {code}: {ran.why}"
    then = (
        "the /run override goes back; the new generation stays the boot default"
        if outcome.kind == switch_core.BOOT_PENDING
        else "the /run override goes back, then the rollback"
    )
    host.log_styled(f"{found['why']}; {then}", fg="red")
    return True


def _inhibited(a: dict, toplevel: str, found: dict) -> bool:
    """NixOS 26.05's switch inhibitors refused a live switch (exit 1, before anything
    was done); `boot` skips that check: the new generation becomes the boot default and
    a reboot activates it, as after exit 100. The /run override keeps live right."""
    path, run_id = a["journal_path"], a["run_id"]
    refused = (
        "switch-to-configuration switch exited 1: Pre-switch check 'switchInhibitors' "
        "failed (the new generation changes a package NixOS will not switch live)"
    )
    host.log_styled(f"{refused}; making {toplevel} the boot default", fg="yellow")
    ran = run(host, commands.switch(toplevel, "boot", a["transient"], a["lock_wait_s"]))
    code = commands.switch_exit(ran.stdout)
    if code != 0:
        said = f"exited {code}" if code is not None else "did not report"
        found["why"] = f"{refused}; switch-to-configuration boot {said}: {ran.why}"
        host.log_styled(f"{found['why']}; the /run override goes back, then the rollback", fg="red")
        return True
    journal.record(path, run_id, None, boot_pending=toplevel)
    say(boot_pending=toplevel, boot_pending_reason="switch inhibitors")
    found["why"] = (
        f"{refused}; switch-to-configuration boot made it the boot default and nothing was "
        "activated (a reboot activates it); the /run override keeps live right until then"
    )
    then = "the /run override goes back; the new generation stays the boot default"
    host.log_styled(f"{found['why']}; {then}", fg="yellow")
    return True


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
    if exit_ == 100:
        host.noop(
            "the switch exited 100: the new generation is the boot default, kept (a reboot "
            "activates it)"
        )
        return
    if j.get("boot_pending"):
        host.noop(
            "the switch inhibitors refused a live switch: the new generation is the boot "
            "default, kept (a reboot activates it)"
        )
        return
    switched = exit_ not in (None, switch_core.LOCKED)
    moved_profile = bool(profile and now.profile != profile)
    moved_system = bool(current_system and now.current_system != current_system)
    if not (moved_profile or moved_system or lock_commit or switched):
        host.noop("/run/current-system and the profile never moved: nothing to roll back")
        return
    found: dict = {}
    yield FunctionCommand(_roll_back, (dict(locals()), now, found), {})
    yield from _then_fail(found)


def _restore_generation(a: dict, failed: list[str]) -> None:
    """The recorded generation's switch-to-configuration, as --rollback runs it."""
    profile, current = a["profile"] or a["current_system"], a["current_system"] or a["profile"]
    if not profile:
        return
    actions = [(profile, "boot")]
    if a["moved_system"]:
        headroom = host.get_fact(MemoryHeadroom)
        why = lost("MemAvailable") if headroom is None else refusal(a["min_gb"], headroom)
        if why:
            failed.append(f"not activating the old generation (its boot entry is set): {why}")
        elif profile == current:
            actions = [(profile, "switch")]
        else:  # a person's `nixos-rebuild boot` before the run: boot that, run this
            actions.append((current, "test"))
    wait_s = a["lock_wait_s"]
    if holders := switch_holders(wait_s):  # a person's switch started since the run's
        failed.append(
            f"switch-to-configuration {actions[0][1]} of {actions[0][0]} did not run: another "
            f"switch holds the system after waiting {wait_s:g} s (lock_wait_s): "
            f"{'; '.join(holders)}; run again once it is done"
        )
        return
    for toplevel, action in actions:
        ran = run(host, commands.switch(toplevel, action, a["transient"], wait_s))
        code = commands.switch_exit(ran.stdout)
        outcome = switch_core.outcome(code, ran.stdout + "\n" + ran.stderr)
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
            failed.append(f"switch-to-configuration {action} of {toplevel} failed: {ran.why}")


@_guarded
def _roll_back(state, host, a: dict, now, found: dict) -> bool:
    failed: list[str] = []
    if a["exit_"] != switch_core.LOCKED:
        if a["moved_profile"]:
            ran = run(host, commands.profile_set(a["profile"]))
            if ran.ok:
                note(f"system profile set back to {a['profile']}")
            else:
                failed.append(f"setting the profile back failed: {ran.why}")
        _restore_generation(a, failed)
    if lock_commit := a["lock_commit"]:  # or the next run would bump, switch and fail again
        argv = commands.lock_commit_revert(
            a["flake_dir"], lock_commit, a["flake_host"], a["base_head"]
        )
        ran = run(host, _owned(a["owner"], a["home"], argv))
        if ran.ok:
            note(f"reverted the lock commit {lock_commit[:12]} in {a['flake_dir']}")
            say(lock_reverted=lock_commit)
        else:
            note(f"could not revert the lock commit {lock_commit[:12]}: {ran.why}")
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
        found["why"] = why
    elif failed:
        say(rollback_failed="; ".join(failed))
        found["why"] = f"rollback FAILED: {'; '.join(failed)}; going on to the fallback"
    else:
        say(rolled_back=True)
    return True


@operation(is_idempotent=False)
def scratch_removed(
    journal_path: str,
    run_id: str,
    owner: str,
    home: str | None,
    made: bool = False,
    left: list[str] | None = None,
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
    """
    if not (made or left):
        host.noop("no scratch clone")
        return
    if not state.is_executing:
        yield command(_owned(owner, home, commands.stale_scratch_removed(owner)))
        return
    listed = run(host, _owned(owner, home, commands.stale_scratch_listed(owner)))
    found = listed.stdout.split() if listed.ok else []
    if not found:
        host.noop("no scratch clone")
        return
    # this run's own, and those the snapshot found: a killed run's (the journal may
    # still name one; a journal whose clone is gone finishes nothing)
    if left:
        note(f"removed {len(left)} scratch clone(s) that a killed run left")
    yield command(_owned(owner, home, commands.stale_scratch_removed(owner)))
