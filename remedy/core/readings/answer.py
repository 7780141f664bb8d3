"""What a step's host program answered (remedy/host/lib.sh says the lines): pure.

Its verdict (``act``: in check mode, it would act; ``done``; ``noop``; ``give-up``;
``wait``: the drain, not done waiting), the reason, the progress it logged, the values
it said for the outcome (typed as ``remedy.core.run.report_keys`` declares them), its
notes, what the switch would change, and the output of a nix that failed. A program
that printed no verdict (a lost connection, a shell that died) answers give-up with
what it said.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MARK = "@@remedy "
ACT, DONE, NOOP, GIVE_UP, WAIT = "act", "done", "noop", "give-up", "wait"
VERDICTS = (ACT, DONE, NOOP, GIVE_UP, WAIT)
INTS = (
    "switch_exit",
    "restarts",
    "requests_cut",
    "server_starts",
    "outcome_exit",
    "outcome_restarts",
)
BOOLS = ("rolled_back", "override_written")


@dataclass
class Answer:
    verdict: str = GIVE_UP
    text: str = ""
    logs: list[tuple[str, str]] = field(default_factory=list)  # (color, text)
    said: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # system_boot's lines, "diff …"
    output: list[str] = field(default_factory=list)  # a failed nix's last lines
    other: list[str] = field(default_factory=list)  # lines that are no answer


def _typed(key: str, value: str):
    if key in INTS:
        return None if value in ("", "none") else int(value)
    if key in BOOLS:
        return value == "true"
    return value


def parse(stdout: str, stderr: str = "", code: int | None = 0) -> Answer:
    """The answer in STDOUT (STDERR and CODE: how the program ended, for one that gave
    no verdict)."""
    out = Answer()
    verdict = None
    for line in stdout.splitlines():
        if not line.startswith(MARK):
            if line.strip():
                out.other.append(line)
            continue
        word, _, rest = line[len(MARK) :].partition(" ")
        if word == "log":
            color, _, text = rest.partition(" ")
            out.logs.append((color, text))
        elif word == "say":
            key, _, value = rest.partition(" ")
            out.said[key] = _typed(key, value)
        elif word == "say+":
            key, _, value = rest.partition(" ")
            out.said.setdefault(key, []).append(value)
        elif word == "note":
            out.notes.append(rest)
        elif word == "changes":
            out.changes.append(rest)
        elif word == "output":
            out.output.append(rest)
        elif word in VERDICTS:
            verdict = (word, rest)
    if verdict is None:
        lines = [x for x in (stderr + "\n" + "\n".join(out.other)).splitlines() if x.strip()]
        tail = lines[-1].strip()[:300] if lines else "no output"
        how = "" if code in (None, 0) else f"; exit {code}"
        out.verdict, out.text = GIVE_UP, f"the step's program gave no answer: {tail}{how}"
    else:
        out.verdict, out.text = verdict
    return out
