"""The reads of a review before the switch (``remedy.core.readings.review``): the tip
of the bumped input's branch at its remote (``git ls-remote``, as the checkout's owner:
the owner's git config and keys reach the remote as a bump does), and what the new
system changes where it is in the store already. Both read only, bounded in time.

review = read_review(host, host_data, snapshot)
"""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand

from remedy.core.config import desired
from remedy.core.programs import commands
from remedy.core.readings import changes, review
from remedy.core.readings import nix as nix_core


def _quoted(argv: list[str]) -> StringCommand:
    return StringCommand(*(QuoteString(a) for a in argv))


class TipRev(FactBase[tuple[str | None, str | None]]):
    """(the rev REF has at the git remote URL now, None) or (None, why it is unknown):
    ``remedy/host/tip_rev.sh``, as the checkout's OWNER."""

    def command(self, url: str, ref: str | None, owner: str | None, home: str | None,
                bound_s: int = commands.TIP_BOUND_S):  # fmt: skip
        return _quoted(commands.as_owner(owner, home, commands.tip_rev(url, ref, bound_s)))

    def process(self, output):
        return review.parse_tip(list(output))


class SystemChanges(FactBase[changes.SystemChanges]):
    """What a switch from CURRENT to NEW changes beyond the settings
    (``remedy/host/system_changes.sh``): both in the store, nothing built."""

    def command(self, current: str, new: str, builder: str | None = None):
        return _quoted(commands.system_changes(current, new, builder))

    def process(self, output):
        return changes.read_answer([line.rstrip("\n") for line in output])


def read_review(host, s, snap) -> review.Review | None:
    """The review of host HOST (host data S, its snapshot SNAP): the rev the planned
    bump takes and its approval, and what a built system in the store changes; None
    when there is neither (no bump, nothing built)."""
    from remedy.core.run.plan import plan_restore

    plan = plan_restore(snap, s, desired.ALL)
    bump = read_bump(host, s, snap) if plan.update_input else None
    system = read_system(host, snap, None if s.build_host == "serving" else s.build_host)
    return review.Review(bump, system) if bump or system else None


def read_bump(host, s, snap) -> review.BumpReview:
    """The rev a bump of S's input takes (bump_to, else the tip of its branch at its
    remote now) and its approval."""
    from remedy.core.run.plan import bump_approval, bump_blocked

    locked = snap.flake_input
    base = review.BumpReview(s.flake_input, locked.rev if locked else None, bump_approval(s),
                             blocked=bump_blocked(s))  # fmt: skip
    if s.pinned_rev:
        return _replace(base, takes=s.pinned_rev, source="bump_to")
    remote = nix_core.git_remote(locked.url or "") if locked else None
    if remote is None:
        kind = (locked.url or "?").split(":", 1)[0] if locked else "?"
        why = f"a {kind} input has no git remote to ask: known once Nix fetches it"
        return _replace(base, unread=why)
    ref = locked.ref or "HEAD"
    try:
        found = host.get_fact(TipRev, url=remote, ref=ref, owner=snap.checkout.owner,
                              home=snap.checkout.home)  # fmt: skip
    except Exception as exc:  # a read that fails names itself; the report goes on
        found = None, f"the read failed: {exc}"
    rev, why = found or (None, "the read failed")
    if rev is None:
        return _replace(base, unread=why)
    return _replace(base, takes=rev, source=f"the tip of {ref} at {remote} now")


def _replace(b: review.BumpReview, **changed) -> review.BumpReview:
    import dataclasses

    return dataclasses.replace(b, **changed)


def read_system(host, snap, builder: str | None = None) -> review.SystemReview | None:
    """Between the running system and one built already: the proven build a run left
    for its switch (in the run journal, still in the store), else the boot default
    when it is not what runs. With a BUILDER (host data build_host) no nix runs on
    the host: the kernel and its parameters are read, the packages are not."""
    current = snap.generations.current_system
    top, j = snap.journal.get("toplevel"), snap.journal
    if not current:
        return None
    if top and j.toplevel_present and top != current:
        new, what = top, f"the system run {j.get('run_id', '?')} built and proved"
    elif snap.generations.profile and snap.generations.profile != current:
        new, what = snap.generations.profile, "the boot default"
    else:
        return None
    try:
        found = host.get_fact(SystemChanges, current=current, new=new, builder=builder)
    except Exception as exc:
        found = changes.SystemChanges(unread=f"the read failed: {exc}")
    if found is None:
        found = changes.SystemChanges(unread="the read failed")
    return review.SystemReview(current, new, what, found)
