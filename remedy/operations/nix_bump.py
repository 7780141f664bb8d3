"""The bump phase's bodies: the scratch clone, the approved bump of the input and
its lock commit, and remedy's managed file committed there (``nix.flake_input_updated``,
``nix.managed_file_written``)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from remedy.core import bump as bump_core
from remedy.core import commands
from remedy.core import journal as journal_core
from remedy.operations import journal
from remedy.operations.argv import run
from remedy.operations.nix_body import give_up, guarded, owned
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


@guarded
def _bump(state, host, a: Bump) -> bool:
    owner, home, journal_path, run_id = a.owner, a.home, a.journal_path, a.run_id

    def as_owner(argv):
        return owned(owner, home, argv)

    run(host, commands.STALE_NIX_SCOPES)  # a killed run's hung build (the host lock is ours)
    run(host, as_owner(commands.stale_scratch_removed(owner)))
    made = run(host, as_owner(commands.scratch_dir()))
    if not made.ok:
        return give_up(f"cannot make a scratch directory as {owner}: {made.why}")
    scratch = made.stdout.strip()
    started = _now()
    fresh = {"run_id": run_id, "started": started, "scratch": scratch, "base_head": a.base_head}
    known = journal_core.RunJournal(fresh)
    if not run(host, journal.write_argv(journal_path, fresh)).ok:
        return give_up(f"cannot write the run journal {journal_path}")
    cloned = run(host, as_owner(commands.scratch_clone(a.flake_dir, scratch)))
    if not cloned.ok:
        return give_up(f"cannot clone {a.flake_dir} into {scratch}: {cloned.why}")
    if not a.update:
        note(f"{a.flake_input} not bumped: the next boot already has what it gives")
        return True
    name = a.flake_input
    # the approval is decided on the host by the program the manual script runs too
    argv = bump_core.argv(
        scratch,
        name,
        commands.update_input(a.update_argv, scratch, name),
        a.pinned_rev,
        a.allowed_signers,
        a.trusted_signers,
        a.required_fix_rev,
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
        return give_up(bumped.refused)
    new_rev, new_url = bumped.new_rev, bumped.new_url
    if bumped.unchanged:
        note(f"{name} is already at {(new_rev or '?')[:12]}")
        return journal.record(journal_path, run_id, known, new_rev=new_rev, new_url=new_url)
    message = a.lock_message.replace("{new}", (new_rev or "(bumped)")[:12])
    committed = run(host, as_owner(commands.lock_commit(scratch, message, a.flake_host)))
    if not committed.ok:
        return give_up(f"cannot commit flake.lock in the scratch clone: {committed.why}")
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


@guarded
def _write_managed(state, host, a: ManagedFile) -> bool:
    j = journal.read(a.journal_path, a.run_id)
    scratch, rel = j.get("scratch"), a.managed_file

    def as_owner(argv):
        return owned(a.owner, a.home, argv)

    wrote = run(host, as_owner(commands.file_written(scratch, rel, a.text)))
    if not wrote.ok:
        return give_up(f"cannot write {rel} in the scratch clone: {wrote.why}")
    committed = run(host, as_owner(commands.file_commit(scratch, rel, a.message, a.flake_host)))
    if not committed.ok:
        return give_up(f"cannot commit {rel} in the scratch clone: {committed.why}")
    head = run(host, as_owner(commands.head(scratch)))
    return journal.record(
        a.journal_path,
        a.run_id,
        j,
        commits=int(j.get("commits") or 0) + 1,
        scratch_head=head.stdout.strip() if head.ok else None,
    )
