"""What a deploy is doing, for the person who waits: pyinfra's output, read line by line.

``remedy converge`` runs each host's deploy in a pyinfra process of its own. pyinfra says
``--> Starting operation: NAME`` when a step starts and ``[HOST] Success`` (``No
changes``, ``Error: …``, ``Ignored error …``) when it ends; remedy's steps say what they
wait for as ``[HOST] text``. ``StepWatch`` turns those lines into one-line messages (a
step's end only where it changed something, failed or took a while), and says how long a
step has run when it takes longer than a few seconds (a NixOS build takes minutes:
silence looks like a hang).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# pyinfra.api.util.log_operation_start: "--> Starting operation: NAME [(ARGS)]", also
# "--> Starting serial operation: …" and "… run once operation: …"
_STEP = re.compile(r"^--> Starting (?:[\w ,]+ )?operation: (?P<name>.*?)\s*$")
_HOST = re.compile(r"^\s*\[(?P<host>[^\]]+)\] (?P<text>.*?)\s*$")
# pyinfra.api.operations: how a step ended on a host
_RESULTS = ("Success", "No changes", "Error", "Ignored error", "Success on retry")


@dataclass
class StepWatch:
    """The step a host's deploy is in, from its output (FEED each line as it comes)."""

    host: str
    step: str | None = None
    since: float = 0.0  # when the step started (a monotonic clock)
    said_at: float = 0.0  # the last heartbeat

    def feed(self, line: str, now: float) -> list[str]:
        """The messages LINE gives (none for most of pyinfra's output)."""
        line = _ANSI.sub("", line.rstrip("\n"))
        if m := _STEP.match(line):
            self.step, self.since, self.said_at = m.group("name"), now, now
            return [f"{self.host}: {self.step}"]
        m = _HOST.match(line)
        if not m or m.group("host") != self.host or not m.group("text"):
            return []
        text = m.group("text")
        if self.step and text.startswith(_RESULTS):
            took = now - self.since
            step, self.step = self.step, None
            if text == "No changes" and took < 5:
                return []  # a step with nothing to do: its start line said enough
            return [f"{self.host}: {step}: {text}" + (f" ({took:.0f}s)" if took >= 5 else "")]
        return [f"{self.host}: {text}"]

    def heartbeat(self, now: float, every: float = 10.0) -> str | None:
        """'still at STEP (N s)' once every EVERY seconds of a step that runs long."""
        if self.step is None or now - self.said_at < every:
            return None
        self.said_at = now
        return f"{self.host}: {self.step}: still running ({now - self.since:.0f}s)"
