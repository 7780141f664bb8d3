"""The run journal: the values one step of a run makes and a later step needs.

A step that makes a value (the scratch clone, the proven toplevel, the lock commit,
whether it switched, the MainPID the /run override took) writes it here, on the
host, before the run goes on; a later step reads it back as a fact. Nothing passes
between steps in Python memory, so a run that is killed leaves everything the next
run needs to finish its work, or to undo it.

The file is ``/var/lib/remedy/run-<unit>.json``: root's, mode 0600, written
atomically, one key per line (the snapshot's shell reads two keys with sed). The
run that ends removes it together with the host lock's step journal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from remedy import host
from remedy.core.programs import hostlock
from remedy.core.programs.commands import SCRATCH_PREFIX


def path(unit: str) -> str:
    return f"{hostlock.JOURNAL_DIR}/run-{unit}.json"


def text(values: dict) -> str:
    """The file's bytes for VALUES: sorted keys, one per line."""
    return json.dumps(values, indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class RunJournal:
    """What an earlier step (of this run, or of one that died) wrote, as read now."""

    values: dict = field(default_factory=dict)
    mtime: int | None = None  # when it was last written (epoch seconds)
    boot_time: int | None = None  # when the host booted (btime)
    scratch_head: str | None = None  # the scratch clone's HEAD now ("" if it is gone)
    toplevel_present: bool | None = None  # the proven toplevel is in the store now
    problem: str | None = None  # why it could not be read
    # scratch clones under /tmp now (a killed run's, or the one the journal names)
    scratch_clones: tuple[str, ...] = ()
    # the manual script's audit records on the host (remedy imports each once)
    manual_runs: tuple[dict, ...] = ()

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    @property
    def present(self) -> bool:
        return bool(self.values)

    @property
    def died_with_boot(self) -> bool:
        return bool(self.mtime and self.boot_time and self.mtime < self.boot_time)

    def merged(self, **values) -> dict:
        """The journal's values with VALUES set (None removes a key)."""
        out = dict(self.values)
        for key, value in values.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def resumable(self, checkout_head: str | None) -> str | None:
        """Why the next run can finish what this journal's run proved, without building
        again (None: it cannot): a proven toplevel still in the store, its scratch
        clone still at the proven commit, and the checkout where that run found it."""
        v = self.values
        top, proven, base = v.get("toplevel"), v.get("proven_head"), v.get("base_head")
        if not (top and proven and base) or v.get("lock_commit"):
            return None
        if not self.toplevel_present or self.scratch_head != proven:
            return None
        if checkout_head != base:
            return None
        when = v.get("started", "?")
        how = "the host rebooted during it" if self.died_with_boot else "it did not end"
        return (
            f"finishing the earlier run {v.get('run_id', '?')} (started {when}; {how}): "
            f"it proved {top}; fast-forward the checkout to its commits and switch, "
            "without building again"
        )


# remedy writes the journal as root, mode 0600, JSON in printable ASCII (json.dumps'
# own). A journal that is anything else (a symbolic link, another owner or mode, bytes
# remedy never writes) is never read: its content does not leave the host, no run
# finishes what it names, and the next write sets it aside.
TRUST_SH = host.text("journal_trust.sh")
# For the snapshot (facts/_remote.py), which reads up to four of remedy's files: their
# owner, mode and bytes in one stat and one grep, kept in _jt for journal_trust. A name
# with a newline or a tab, or an answer that does not pair up, and each is asked alone.
TRUST_ALL_SH = host.text("journal_trust_all.sh").replace("@TAB@", "\t")


def untrusted(path: str, why: str) -> str:
    return (
        f"the run journal {path} cannot be trusted ({why}): ignored, and set aside by the "
        "next run's first write; look at who made it"
    )


def parse(lines: list[str]) -> RunJournal:
    """The ``run.journal`` section: ``key value`` lines, then ``json`` and the file."""
    info: dict[str, str] = {}
    clones: list[str] = []
    manual: list[dict] = []
    body: list[str] | None = None
    for line in lines:
        if body is not None:
            body.append(line)
        elif line.strip() == "json":
            body = []
        else:
            key, _, value = line.partition(" ")
            if key == "manual_run":
                try:
                    record = json.loads(value)
                except ValueError:
                    continue  # a torn line (the script was killed while writing it)
                if isinstance(record, dict) and record.get("details", {}).get("run_id"):
                    manual.append(record)
            elif key == "scratch_clone":
                clones.append(value.strip())
            elif key == "untrusted":
                where, _, why = value.partition(": ")
                return RunJournal(
                    problem=untrusted(where, why),
                    scratch_clones=tuple(clones),
                    manual_runs=tuple(manual),
                )
            else:
                info[key] = value.strip()
    if body is None:
        return RunJournal(scratch_clones=tuple(clones), manual_runs=tuple(manual))

    def number(key: str) -> int | None:
        try:
            return int(info[key])
        except (KeyError, ValueError):
            return None

    try:
        values = json.loads("\n".join(body))
        if not isinstance(values, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        return RunJournal(
            problem=f"unreadable run journal ({exc}): ignored",
            scratch_clones=tuple(clones),
            manual_runs=tuple(manual),
        )
    present = info.get("toplevel_present")
    return RunJournal(
        values,
        number("mtime"),
        number("btime"),
        info.get("scratch_head"),
        None if present is None else present == "yes",
        scratch_clones=tuple(clones),
        manual_runs=tuple(manual),
    )


# The remote side (facts/_remote.py), for the file at $REMEDY_JOURNAL.
SNIPPET = host.text("journal_read.sh").replace("@SCRATCH_PREFIX@", SCRATCH_PREFIX)
