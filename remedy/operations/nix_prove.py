"""The prove phase's body (``nix.fix_proven``): what the bump would compile, the
memory-gated and bounded build of the toplevel, its start script against the desired
state, what the switch changes beyond it, and the flake checks."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from pyinfra import host

from facts.memory import MemoryHeadroom
from facts.serving import BuiltService
from remedy.core.config import desired, options
from remedy.core.config.host_data import HostData
from remedy.core.programs import builder as builder_core
from remedy.core.programs import checks as checks_core
from remedy.core.programs import commands
from remedy.core.readings import changes as changes_core
from remedy.core.readings import memory as mem
from remedy.core.readings import nix as nix_core
from remedy.core.run.plan import Proof
from remedy.operations import journal
from remedy.operations.argv import ran
from remedy.operations.memory import refusal
from remedy.operations.nix_body import Body, give_up, guarded, owned
from remedy.operations.said import lost, say


@dataclass(frozen=True)
class Build:
    """The values of ``nix.fix_proven``'s body (its docstring says each)."""

    journal_path: str
    run_id: str
    owner: str
    home: str | None
    host_data: HostData
    prove: list[str]
    nix_label: str
    new_derivation_cli: bool
    systemd_run: bool
    current_system: str | None
    builder: builder_core.Builder | None = None


@guarded
def _prove(a: Build) -> Body:
    s: HostData = a.host_data
    j = journal.read(a.journal_path, a.run_id)
    if a.builder:
        return (yield from _prove_on_builder(a, j))
    scratch, new_rev = j.get("scratch"), j.get("new_rev")
    if not scratch:
        return (yield from give_up("no scratch clone to build"))
    short = (new_rev or "?")[:12]

    def as_owner(argv):
        return owned(a.owner, a.home, argv)

    bound, why = _gate(s, "evaluating")
    if why:
        return (yield from give_up(why))
    dry = commands.dry_run_toplevel(scratch, s.flake_host)
    heavy, problem = yield from _local_builds(as_owner, a, dry, bound)
    if problem:
        return (yield from give_up(problem))
    say(local_builds=heavy)
    if heavy and not s.allow_local_build:
        return (yield from give_up(_compile_refused(heavy, "the bump")))
    bound, why = _gate(s, "building")
    if why:
        return (yield from give_up(why))
    toplevel, why = yield from _built_toplevel(as_owner, a, scratch, bound)
    if why or (why := _not_proven(a, toplevel, short)):
        return (yield from give_up(why))
    held = ", ".join(desired.BY_KEY[k].label for k in a.prove)
    host.log_styled(f"proven: {toplevel} holds {held}", fg="green")
    if current := a.current_system:
        yield from _say_changes(a.run_id, current, toplevel)
    if why := (yield from _flake_checks(as_owner, a, scratch)):
        return (yield from give_up(why))
    say(toplevel=toplevel)
    head = yield from ran(a.run_id, as_owner(commands.head(scratch)))
    return (
        yield from journal.record(
            a.journal_path,
            a.run_id,
            j,
            toplevel=toplevel,
            proven_head=head.stdout.strip() if head.ok else None,
        )
    )


def _prove_on_builder(a: Build, j) -> Body:
    """The build and the flake checks on the builder, as its user; the proven closure
    copied here and checked valid; the proof read from its files here (no nix); then
    the builder clone's commits into the scratch clone here, for the fast-forward."""
    b, s, run_id = a.builder, a.host_data, a.run_id
    there, scratch = j.get("builder_scratch"), j.get("scratch")
    if not (there and scratch):
        return (yield from give_up(f"no scratch clone on the builder {b.name} to build"))
    short = (j.get("new_rev") or "?")[:12]
    host.log_styled(
        f"building the new system on {b.name} (max-jobs {b.max_jobs}, cores {b.cores})",
        fg="blue",
    )
    build = commands.build_toplevel(there, s.flake_host, b.max_jobs, b.cores)
    built = yield from ran(run_id, _nix_at(a, None, build, "build", None))
    if not built.ok:
        why = (
            _bound_hit(built, f"build on the builder {b.name}", None, b.timeout_s)
            or options.evaluation_blocker(built.stderr + "\n" + built.stdout, s)
            or f"the new configuration does not build on the builder {b.label}: {built.why}"
        )
        return (yield from give_up(why))
    try:
        toplevel = json.loads(built.stdout)[0]["outputs"]["out"]
    except (ValueError, KeyError, IndexError, TypeError):
        return (yield from give_up(f"unreadable nix build output: {built.stdout[:200]}"))
    if why := (yield from _flake_checks(None, a, there)):
        return (yield from give_up(why))
    if j.get("commits"):  # first: then a run killed after the copy resumes from it
        argv = builder_core.commits_fetched(b, there, a.owner, a.home, scratch)
        fetched = yield from ran(run_id, argv)
        if not fetched.ok:
            why = f"cannot bring the proven commits from the builder {b.label}: {fetched.why}"
            return (yield from give_up(why))
    head = yield from ran(run_id, owned(a.owner, a.home, commands.head(scratch)))
    host.log_styled(f"copying {toplevel} from {b.name}", fg="blue")
    copied = yield from ran(run_id, _copy(a, toplevel))
    if not copied.ok:
        return (yield from give_up(_copy_failed(b, toplevel, copied, s.nix_timeout_s)))
    valid = yield from ran(run_id, builder_core.path_valid(toplevel))
    if not valid.ok:
        why = f"{toplevel} is not valid here after the copy from {b.label}: {valid.why}"
        return (yield from give_up(why))
    if why := _not_proven(a, toplevel, short):
        return (yield from give_up(why))
    say(toplevel=toplevel, built_on=b.name)
    yield from journal.record(
        a.journal_path,
        run_id,
        j,
        toplevel=toplevel,
        proven_head=head.stdout.strip() if head.ok else None,
    )
    held = ", ".join(desired.BY_KEY[k].label for k in a.prove)
    host.log_styled(f"proven: {toplevel} holds {held}", fg="green")
    if current := a.current_system:
        yield from _say_changes(run_id, current, toplevel, packages=b)
    return True


def _copy(a: Build, toplevel: str) -> list[str]:
    """The copy's receiving side, bounded as the owner's nix is: in time (nix_timeout_s),
    and in a scope (which a stop request stops) with what the host can spare in memory."""
    s: HostData = a.host_data
    bound = None
    if a.systemd_run and (headroom := host.get_fact(MemoryHeadroom)) is not None:
        bound = mem.nix_memory_bound(headroom, s.min_mem_available_gb, s.nix_memory_max_gb)
    scope = re.sub(r"[^A-Za-z0-9]+", "-", a.run_id).strip("-")
    return commands.nix_bounded(
        builder_core.closure_copied(a.builder, toplevel),
        bound,
        f"remedy-nix-copy-{scope}",
        s.nix_timeout_s,
    )


def _copy_failed(b: builder_core.Builder, toplevel: str, copied, timeout_s: int) -> str:
    said = copied.stderr + copied.stdout
    hint = ""
    if hit := _bound_hit(copied, "copy", None, timeout_s):
        hint = f" ({hit})"
    elif "lacks a signature" in said or ("signature" in said and b.signed):
        hint = (
            " (copy_signed is true: the builder must sign with secret-key-files and this "
            "host trust its key in trusted-public-keys)"
        )
    elif "No space left" in said:
        hint = " (this host's store is full: collect garbage, nix-collect-garbage -d)"
    return f"the copy of {toplevel} from the builder {b.label} failed: {copied.why}{hint}"


def _nix_at(a: Build, as_owner, argv: list[str], what: str, bound) -> list[str]:
    """A nix of the proof where it runs: on the builder, as its user, bounded in time by
    the builder's data; else as the checkout's owner here, bounded (``_owner_nix``)."""
    if b := a.builder:
        scope = re.sub(r"[^A-Za-z0-9]+", "-", a.run_id).strip("-")
        return builder_core.bounded(b, argv, f"remedy-nix-{what}-{scope}")
    return _owner_nix(as_owner, a, argv, what, bound)


def _built_toplevel(as_owner, a: Build, scratch: str, bound):
    """Build the scratch clone's toplevel, bounded: (its store path, why it did not)."""
    s: HostData = a.host_data
    attr = commands.toplevel_attr(scratch, s.flake_host)
    host.log_styled(
        f"building {attr} (max-jobs {s.build_max_jobs}, cores {s.build_cores})", fg="blue"
    )
    built = yield from ran(a.run_id, _owner_nix(as_owner, a, _build(s, scratch), "build", bound))
    if not built.ok:
        return "", (
            _bound_hit(built, "build", bound, s.nix_timeout_s)
            or options.evaluation_blocker(built.stderr + "\n" + built.stdout, s)
            or f"the new configuration does not build: {built.why}"
        )
    try:  # stdout only: warnings on stderr may contain brackets
        return json.loads(built.stdout)[0]["outputs"]["out"], None
    except (ValueError, KeyError, IndexError, TypeError):
        return "", f"unreadable nix build output: {built.stdout[:200]}"


def _not_proven(a: Build, toplevel: str, short: str) -> str | None:
    """Why the system built at TOPLEVEL lacks a setting it must prove (its start script,
    environment, kernel parameters, as the built unit shows them), or None."""
    s: HostData = a.host_data
    service = host.get_fact(BuiltService, toplevel=toplevel, unit=s.unit)
    if service is None:
        return lost(f"the unit in {toplevel}")
    script = service.script
    proof = Proof(
        toplevel,
        script.path if script else None,
        script.tool_call_parser if script else "none",
        dict(service.environment) if service else {},
        tuple(script.flags) if script else (),
        service.kernel_params if service else None,
        getattr(service, "sysctl", None),
        getattr(service, "properties", None),
    )
    if missing := proof.missing(s, tuple(a.prove)):
        return (
            f"{s.flake_input} at {short} builds a system without "
            f"{'; '.join(missing)} (the fix is not in)"
        )
    return None


def _say_changes(run_id: str, current: str, toplevel: str, packages=None):
    """What the switch from CURRENT to TOPLEVEL changes beyond the managed settings: a
    new kernel, initrd or kernel modules, the kernel parameters (each needs a reboot),
    and the packages whose versions change (not read when the system was built on the
    builder PACKAGES: no nix runs here but the copy's)."""
    boot = yield from ran(run_id, commands.system_boot(current, toplevel))
    files, removed, added = changes_core.parse_boot(boot.stdout.splitlines())
    if packages is not None:
        unread = f"not read: built on the builder {packages.name}, and no nix runs here"
        found = changes_core.SystemChanges(files, removed, added, (), unread)
    else:
        diff = yield from ran(run_id, commands.diff_closures(current, toplevel))
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


def preview(a: Build) -> list[list[str]]:
    """The proof's commands, as it runs them (the memory bound is known at execution):
    the dry run, the build of the toplevel, each flake check's dry run and build."""
    s: HostData = a.host_data

    def as_owner(argv):
        return owned(a.owner, a.home, argv)

    if b := a.builder:  # on the builder; here only the copy's receiving side
        there, scratch = "$builder_scratch", "$scratch"
        steps = [_nix_at(a, None, commands.build_toplevel(there, s.flake_host, b.max_jobs,
                                                          b.cores), "build", None)]  # fmt: skip
        for check in s.checks[0]:
            steps += [
                _nix_at(a, None, commands.flake_check(there, check, dry=True), "eval", None),
                _nix_at(a, None, commands.flake_check(there, check, False, b.max_jobs,
                                                      b.cores), "check", None),
            ]  # fmt: skip
        return [
            *steps,
            builder_core.commits_fetched(b, there, a.owner, a.home, scratch),
            commands.nix_bounded(  # the memory bound is known at execution
                builder_core.closure_copied(b, "$toplevel"), None, "remedy-nix-copy",
                s.nix_timeout_s,
            ),
            builder_core.path_valid("$toplevel"),
        ]  # fmt: skip
    scratch = "$scratch"
    steps = [
        _owner_nix(as_owner, a, commands.dry_run_toplevel(scratch, s.flake_host), "eval", 0),
        _owner_nix(as_owner, a, _build(s, scratch), "build", 0),
    ]
    for check in s.checks[0]:
        steps += [
            _owner_nix(as_owner, a, commands.flake_check(scratch, check, dry=True), "eval", 0),
            _owner_nix(as_owner, a, _check(s, scratch, check), "check", 0),
        ]
    return steps


def _build(s: HostData, scratch: str) -> list[str]:
    return commands.build_toplevel(scratch, s.flake_host, s.build_max_jobs, s.build_cores)


def _check(s: HostData, scratch: str, check: str) -> list[str]:
    return commands.flake_check(scratch, check, False, s.build_max_jobs, s.build_cores)


def _owner_nix(as_owner, a: Build, argv: list[str], what: str, bound: int | None) -> list[str]:
    """ARGV as the checkout's owner, bounded in time (nix_timeout_s) and, when the host has
    systemd-run (every NixOS host), in a scope with MemoryMax=BOUND: Nix's evaluation of a
    system takes GBs."""
    s: HostData = a.host_data
    scope = re.sub(r"[^A-Za-z0-9]+", "-", a.run_id).strip("-")
    memory = bound if a.systemd_run else None
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


def _gate(s: HostData, doing: str) -> tuple[int | None, str | None]:
    """``_gated_bound``, with the memory gate's refusal said as one (a lost connection
    is no refusal)."""
    bound, why = _gated_bound(s, doing)
    if why and not why.startswith(LOST):
        say(refused=why)
    return bound, why


def _gate_here(a: Build, doing: str) -> tuple[int | None, str | None]:
    """The memory gate of a nix on this host; none for one on the builder."""
    return (None, None) if a.builder else _gate(a.host_data, doing)


def _gated_bound(s: HostData, doing: str) -> tuple[int | None, str | None]:
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
    as_owner, a: Build, dry_argv: list[str], bound, what: str = "the new configuration", dry=None
):
    """(derivations Nix would compile on the host for DRY_ARGV, a ``--dry-run`` (DRY: its
    result when it already ran); why it could not tell)."""
    s: HostData = a.host_data
    if dry is None:
        dry = yield from ran(a.run_id, _owner_nix(as_owner, a, dry_argv, "eval", bound))
    if not dry.ok:
        if hit := _bound_hit(dry, "evaluation", bound, s.nix_timeout_s):
            return [], hit
        said = dry.stderr + "\n" + dry.stdout
        return [], options.evaluation_blocker(said, s) or (f"{what} does not evaluate: {dry.why}")
    planned = nix_core.parse_dry_run((dry.stderr + "\n" + dry.stdout).splitlines())
    if not planned.built:
        return [], None
    # decided on the host, by the program the manual script runs too
    program = commands.local_builds(a.new_derivation_cli, planned.built)
    found = yield from ran(a.run_id, as_owner(program))
    if not found.ok:
        return [], f"cannot read the derivations to build ({a.nix_label}): {found.why}"
    return [x for x in found.stdout.split() if x.startswith("/nix/store/")], None


def _compile_refused(heavy: list[str], what: str) -> str:
    names = ", ".join(h.rsplit("/", 1)[-1] for h in heavy[:5])
    return (
        f"{what} needs {len(heavy)} derivation(s) compiled on the serving host "
        f"({names}): a build competes with the model server for memory; push "
        "binaries to a cache the host substitutes from, or set allow_local_build=true "
        "(bounded by build_max_jobs/build_cores)"
    )


def _flake_checks(as_owner, a: Build, scratch: str):
    """Build each of host data's flake_checks for the bumped lock (the same dry-run guard
    and memory gate as the system's build): why the durable path must stop, or None.
    An absent output is said and skipped."""
    s: HostData = a.host_data
    checks, default = s.checks
    results: list[checks_core.CheckResult] = []
    why = None
    for check in checks:
        what = f"flake check {check}"
        bound, why = _gate_here(a, f"evaluating {what}")
        if why:
            break
        argv = commands.flake_check(scratch, check, dry=True)
        dry = yield from ran(a.run_id, _nix_at(a, as_owner, argv, "eval", bound))
        if not dry.ok and checks_core.absent(dry.stderr + dry.stdout):
            results.append(checks_core.CheckResult(check, checks_core.ABSENT))
            continue
        if a.builder:  # a builder is for building: allow_local_build is this host's
            on = f"{what} does not evaluate on the builder {a.builder.label}: {dry.why}"
            heavy, why = [], None if dry.ok else on
        else:
            heavy, why = yield from _local_builds(as_owner, a, argv, bound, what, dry)
        if why:
            break
        if heavy and not s.allow_local_build:
            why = _compile_refused(heavy, what)
            break
        bound, why = _gate_here(a, f"building {what}")
        if why:
            break
        host.log_styled(
            f"building {what}" + (f" on {a.builder.name}" if a.builder else ""), fg="blue"
        )
        argv = _check(s, scratch, check)
        if a.builder:
            argv = commands.flake_check(scratch, check, False, a.builder.max_jobs, a.builder.cores)
        built = yield from ran(a.run_id, _nix_at(a, as_owner, argv, "check", bound))
        if built.ok:
            results.append(checks_core.CheckResult(check, checks_core.PASSED))
            continue
        timeout_s = a.builder.timeout_s if a.builder else s.nix_timeout_s
        on = f"{what} on the builder {a.builder.name}" if a.builder else what
        if hit := _bound_hit(built, on, bound, timeout_s):
            why = hit
            break
        tail = checks_core.log_tail(built.stderr + "\n" + built.stdout)
        results.append(checks_core.CheckResult(check, checks_core.FAILED, " / ".join(tail)))
        where = f" on the builder {a.builder.label}" if a.builder else ""
        why = (
            f"{what} failed{where} for {s.flake_input} at the bumped rev: "
            f"{tail[-1] if tail else '?'} (the switch would deploy what the check rejects)"
        )
        break
    for r in results:
        quiet = default and r.result == checks_core.ABSENT
        host.log_styled(
            r.line(), fg="blue" if quiet else "green" if r.result == "passed" else "red"
        )
    say(flake_checks=[r.to_json() for r in results])
    return why
