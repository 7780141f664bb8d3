"""A review before the switch (issue 45 item 6), as ``ansible --check --diff`` or ``nvd
diff`` give one: the rev the bump takes and its approval, and what the new system
changes where it is built already (pure; the reads are ``facts.review``).

* The rev: ``bump_to`` when a person pinned it; else the tip of the input's branch at
  its remote now, read with ``git ls-remote`` from the host (nothing fetched), bounded
  in time; when it cannot be read, why. A signature is checked once the rev is
  fetched: the run does that, before the build.
* What the new system changes (``remedy.core.readings.changes``: kernel, initrd and
  modules, kernel parameters, packages and versions from ``nix store
  diff-closures``), between the running system and one already in the host's store:
  the proven build that a run left for its switch (the run journal), else the boot
  default when it is not what runs. Nothing is built for it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from remedy.core.readings.changes import SystemChanges, to_json

PINNED, SIGNED, UNCHECKED = "pinned", "signed", "unchecked"
APPROVAL = {
    PINNED: "pinned by a person (bump_to)",
    SIGNED: "signed: a key of trusted_signers must have signed it (checked once fetched)",
    UNCHECKED: "unchecked: neither bump_to nor trusted_signers is set",
}


@dataclass(frozen=True)
class BumpReview:
    flake_input: str
    locked: str | None  # the rev locked now
    approval: str  # PINNED, SIGNED or UNCHECKED
    takes: str | None = None  # the rev the bump takes (None: unknown, see unread)
    source: str = ""  # where that rev was read: "bump_to", "the tip of master at URL"
    unread: str | None = None  # why the rev it takes is not known
    blocked: str | None = None  # why this run may not take it

    def to_json(self) -> dict:
        return {
            "input": self.flake_input,
            "locked": self.locked,
            "approval": self.approval,
            "takes": self.takes,
            "source": self.source,
            "unread": self.unread,
            "blocked": self.blocked,
        }


@dataclass(frozen=True)
class SystemReview:
    current: str  # the running system
    new: str  # the built system it would switch to
    what: str  # which build that is ("the boot default", "the proven build of run R")
    changes: SystemChanges

    def to_json(self) -> dict:
        return {"current": self.current, "new": self.new, "what": self.what,
                **to_json(self.changes)}  # fmt: skip


@dataclass(frozen=True)
class Review:
    bump: BumpReview | None = None
    system: SystemReview | None = None

    def lines(self) -> list[str]:
        """For people, one line each (the printer folds them at 80 columns)."""
        out: list[str] = []
        if b := self.bump:
            locked = (b.locked or "?")[:12]
            if b.takes:
                rev = f"takes {b.takes[:12]} ({b.source}; locked {locked})"
            else:
                rev = f"takes a rev not known now ({b.unread}; locked {locked})"
            out.append(f"bump {b.flake_input}: {rev}; approval: {APPROVAL[b.approval]}")
            if b.blocked:
                out.append(f"bump {b.flake_input} blocked in this run: {b.blocked}")
        if s := self.system:
            said = s.changes.summary()
            out.append(
                f"{s.what} ({s.new}) changes, from the running system: " + "; ".join(said)
                if said
                else f"{s.what} ({s.new}) changes no package version, kernel or kernel "
                "parameter of the running system"
            )
        return out

    def folded(self, prefix: str, width: int = 80) -> list[str]:
        """lines() after PREFIX, folded at WIDTH columns (a path longer than a line is
        folded, never cut)."""
        return [f for line in self.lines() for f in _fold(prefix + line, width)]

    def to_json(self) -> dict:
        return {
            "bump": self.bump.to_json() if self.bump else None,
            "system_changes": self.system.to_json() if self.system else None,
        }


def _fold(line: str, width: int = 80) -> list[str]:
    indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=True,
                         break_on_hyphens=False) or [""]  # fmt: skip


def parse_tip(lines: list[str]) -> tuple[str | None, str | None]:
    """``remedy/host/tip_rev.sh``'s answer: (the rev, None) or (None, why not)."""
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        if word == "tip" and rest:
            return rest, None
        if word == "unread":
            return None, rest or "no reason given"
    return None, "the read of the remote's tip gave no answer"
