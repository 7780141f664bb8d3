"""The run journal from inside an operation: read it as a fact, write it atomically."""

from __future__ import annotations

from pyinfra import host

from facts.serving import RunJournal
from remedy.core.programs import commands, hostlock
from remedy.core.programs import journal as journal_core
from remedy.operations.argv import command


def read(path: str, run_id: str) -> journal_core.RunJournal:
    """The journal at PATH if it is this run's (RUN_ID), else an empty one: a journal
    that another run left says nothing about this one."""
    found = host.get_fact(RunJournal, path=path)
    if found is None:  # unreadable (a lost connection): the commands that follow say so
        return journal_core.RunJournal({"run_id": run_id}, problem=f"cannot read {path}")
    if found.get("run_id") != run_id:
        return journal_core.RunJournal({"run_id": run_id})
    return found


WRITE_SH = (
    journal_core.TRUST_SH
    + 'install -d -m 0755 "$1" || exit 1; j=$2; shift 2\n'
    + journal_core.SET_ASIDE_SH
    + 'exec "$@"\n'
)


def write_argv(path: str, values: dict) -> list[str]:
    """Write VALUES as the journal at PATH, atomically, root's, mode 0600; a file there
    that is not remedy's journal is set aside first."""
    return [
        "sh", "-c", WRITE_SH, "sh", hostlock.JOURNAL_DIR, path,
        *commands.written_atomically(
            path, "0600", commands.text_argv(journal_core.text(values)), "root:root"
        ),
    ]  # fmt: skip


def written(path: str, run_id: str, **values):
    """A command that sets VALUES in this run's journal (read now, at execution)."""
    return command(write_argv(path, read(path, run_id).merged(**values)))


def record(path: str, run_id: str, known=None, **values):
    """Inside a step's body: the command that sets VALUES in the journal, over KNOWN
    (the journal as the step read it already; read again otherwise). A journal that
    cannot be written fails the step. ``yield from journal.record(...)``: True."""
    base = known if known is not None else read(path, run_id)
    yield command(write_argv(path, base.merged(**values)))
    return True
