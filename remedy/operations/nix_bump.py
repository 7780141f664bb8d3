"""The bump phase's bodies: the scratch clone, the approved bump of the input and
its lock commit, and remedy's managed file committed there (``nix.flake_input_updated``,
``nix.managed_file_written``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyinfra import host

from remedy.core.programs import builder as builder_core
from remedy.core.programs import bump as bump_core
from remedy.core.programs import commands
from remedy.core.programs import journal as journal_core
from remedy.core.readings import nix as nix_core
from remedy.operations import journal
from remedy.operations.argv import ran
from remedy.operations.nix_body import Body, give_up, guarded, owned
from remedy.operations.said import note, say


@dataclass(frozen=True)
class Bump:
    """The values of ``nix.flake_input_updated``'s body (its docstring says each)."""

    journal_path: str
    run_id: str
    owner: str
    home: str | None
    flake_dir: str
    flake_input: str
    flake_host: str
    update: bool
    update_argv: list[str]
    base_head: str | None
    pinned_rev: str | None
    allowed_signers: str | None
    trusted_signers: str | None
    required_fix_rev: str | None
    lock_message: str
    builder: builder_core.Builder | None = None


@dataclass(frozen=True)
class ManagedFile:
    """The values of ``nix.managed_file_written``'s body (its docstring says each)."""

    journal_path: str
    run_id: str
    owner: str
    home: str | None
    managed_file: str
    text: str
    message: str
    flake_host: str
    builder: builder_core.Builder | None = None


def where(owner: str, home: str | None, b: builder_core.Builder | None):
    """How a command on the flake's scratch clone runs: as the checkout's owner on the
    serving host, or as the builder's user on the builder."""
    if b is None:
        return lambda argv: owned(owner, home, argv)
    return lambda argv: builder_core.on_builder(b, argv)


def on_builder_failed(b: builder_core.Builder, what: str, why: str) -> str:
    return f"{what} on the builder {b.label} failed: {why}"


@guarded
def _bump(a: Bump) -> Body:
    owner, home, journal_path, run_id = a.owner, a.home, a.journal_path, a.run_id

    def as_owner(argv):
        return ran(run_id, owned(owner, home, argv))

    yield from ran(run_id, commands.STALE_NIX_SCOPES)  # a killed run's hung build (ours: the lock)
    yield from as_owner(commands.stale_scratch_removed(owner))
    made = yield from as_owner(commands.scratch_dir())
    if not made.ok:
        return (yield from give_up(f"cannot make a scratch directory as {owner}: {made.why}"))
    scratch = made.stdout.strip()
    fresh = {"run_id": run_id, "started": _now(), "scratch": scratch, "base_head": a.base_head}
    known = journal_core.RunJournal(fresh)
    wrote = yield from ran(run_id, journal.write_argv(journal_path, fresh))
    if not wrote.ok:
        return (yield from give_up(f"cannot write the run journal {journal_path}: {wrote.why}"))
    cloned = yield from as_owner(_clone(a, scratch))
    if not cloned.ok:
        return (yield from give_up(f"cannot clone {a.flake_dir} into {scratch}: {cloned.why}"))
    there, update_argv = scratch, a.update_argv
    if b := a.builder:
        sent = yield from _sent_to_builder(a, b, scratch, known)
        if not sent:
            return False
        there, update_argv = sent  # the bump runs with the builder's own Nix
        known = journal_core.RunJournal(known.merged(builder=b.name, builder_scratch=there))
    if not a.update:
        note(f"{a.flake_input} not bumped: the next boot already has what it gives")
        return True
    name = a.flake_input
    on_flake = where(owner, home, a.builder)

    def at_flake(argv):
        return ran(run_id, on_flake(argv))

    answer = yield from at_flake(_approved_bump(a, there, update_argv))
    bumped = bump_core.parse(answer.stdout, answer.why)
    for line in bumped.said:
        host.log_styled(line, fg="green")
    if bumped.new_rev:
        say(new_rev=bumped.new_rev)
    if bumped.signature is not None:
        say(signature=bumped.signature)
    if bumped.refused:
        at = f" (on the builder {a.builder.label})" if a.builder else ""
        return (yield from give_up(bumped.refused + at))
    new_rev, new_url = bumped.new_rev, bumped.new_url
    if bumped.unchanged:
        note(f"{name} is already at {(new_rev or '?')[:12]}")
        return (
            yield from journal.record(journal_path, run_id, known, new_rev=new_rev, new_url=new_url)
        )
    committed = yield from at_flake(_lock_commit(a, there, (new_rev or "(bumped)")[:12]))
    if not committed.ok:
        at = f" on the builder {a.builder.label}" if a.builder else ""
        why = f"cannot commit flake.lock in the scratch clone{at}: {committed.why}"
        return (yield from give_up(why))
    head = yield from at_flake(commands.head(there))
    return (
        yield from journal.record(
            journal_path,
            run_id,
            known,
            new_rev=new_rev,
            new_url=new_url,
            commits=1,
            scratch_head=head.stdout.strip() if head.ok else None,
        )
    )


def _sent_to_builder(a: Bump, b: builder_core.Builder, scratch: str, known):
    """The scratch clone, at its HEAD, cloned on the builder B (after a look that B
    answers and has Nix): the builder clone's path, recorded in the run journal; ""
    when B cannot take it (said: the durable path gives up)."""
    run_id = a.run_id
    up = yield from ran(run_id, builder_core.reachable(b))
    nix = nix_core.parse_nix_version(up.stdout.splitlines()) if up.ok else None
    if nix is None:
        why = up.why if not up.ok else f"no Nix version in its answer {up.stdout[:80]!r}"
        yield from give_up(f"the builder {b.label} cannot be reached or has no Nix: {why}")
        return ""
    host.log_styled(f"the builder {b.label} answers: {nix.label}", fg="blue")
    # a killed run's build there (this host's lock says no run of it is live)
    yield from ran(run_id, builder_core.builds_stopped(b))
    yield from ran(run_id, builder_core.stale_scratch_removed(b, b.tag))
    sent = yield from ran(run_id, builder_core.clone_sent(b, b.tag, a.owner, a.home, scratch))
    there = sent.stdout.strip().splitlines()[-1:] if sent.ok else []
    if not there:
        yield from give_up(on_builder_failed(b, "the scratch clone", sent.why))
        return ""
    wrote = yield from journal.record(
        a.journal_path, run_id, known, builder=b.name, builder_scratch=there[0]
    )
    return (there[0], list(nix.update_input_argv)) if wrote is not False else ""


def _clone(a: Bump, scratch: str) -> list[str]:
    return commands.scratch_clone(a.flake_dir, scratch)


def _approved_bump(a: Bump, scratch: str, update_argv: list[str] | None = None) -> list[str]:
    """The bump with its approval, decided on the host by the program the manual script
    runs too (remedy.core.programs.bump), with the Nix command form of the host it runs
    on (UPDATE_ARGV: the builder's; else the serving host's)."""
    name = a.flake_input
    update = commands.update_input(update_argv or a.update_argv, scratch, name)
    return bump_core.argv(
        scratch, name, update, a.pinned_rev, a.allowed_signers, a.trusted_signers,
        a.required_fix_rev,
    )  # fmt: skip


def _lock_commit(a: Bump, scratch: str, new: str) -> list[str]:
    return commands.lock_commit(scratch, a.lock_message.replace("{new}", new), a.flake_host)


def preview_bump(a: Bump) -> list[list[str]]:
    """The bump's commands, as it runs them: the scratch clone, the approved bump, the
    lock commit (as the checkout's owner)."""
    scratch = "$scratch"
    steps = [owned(a.owner, a.home, argv) for argv in (commands.scratch_dir(), _clone(a, scratch))]
    there = scratch
    if b := a.builder:
        there = "$builder_scratch"
        steps += [
            builder_core.reachable(b),
            builder_core.stale_scratch_removed(b, b.tag),
            builder_core.clone_sent(b, b.tag, a.owner, a.home, scratch),
        ]
    on_flake = where(a.owner, a.home, a.builder)
    if a.update:
        steps += [
            on_flake(_approved_bump(a, there)),
            on_flake(_lock_commit(a, there, "$new_rev")),
        ]
    return steps


def _file_written(a: ManagedFile, scratch: str) -> list[str]:
    return commands.file_written(scratch, a.managed_file, a.text)


def _file_commit(a: ManagedFile, scratch: str) -> list[str]:
    return commands.file_commit(scratch, a.managed_file, a.message, a.flake_host)


def preview_managed(a: ManagedFile) -> list[list[str]]:
    there = "$builder_scratch" if a.builder else "$scratch"
    steps = [_file_written(a, there), _file_commit(a, there)]
    return [where(a.owner, a.home, a.builder)(argv) for argv in steps]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@guarded
def _write_managed(a: ManagedFile) -> Body:
    j = journal.read(a.journal_path, a.run_id)
    scratch, rel = j.get("builder_scratch" if a.builder else "scratch"), a.managed_file
    if not scratch:
        return (yield from give_up("no scratch clone on the builder to write the file in"))
    on_flake = where(a.owner, a.home, a.builder)

    def as_owner(argv):
        return ran(a.run_id, on_flake(argv))

    there = (
        f"the scratch clone on the builder {a.builder.label}" if a.builder else "the scratch clone"
    )
    wrote = yield from as_owner(_file_written(a, scratch))
    if not wrote.ok:
        return (yield from give_up(f"cannot write {rel} in {there}: {wrote.why}"))
    committed = yield from as_owner(_file_commit(a, scratch))
    if not committed.ok:
        return (yield from give_up(f"cannot commit {rel} in {there}: {committed.why}"))
    head = yield from as_owner(commands.head(scratch))
    return (
        yield from journal.record(
            a.journal_path,
            a.run_id,
            j,
            commits=int(j.get("commits") or 0) + 1,
            scratch_head=head.stdout.strip() if head.ok else None,
        )
    )
