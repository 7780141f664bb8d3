"""The one console of the CLI. Results go to stdout; diagnostics to stderr.

Diagnostics, and everything a pyinfra run logs (``-v``, ``-vv``: each command it runs),
go through ``MaskedLines``: a secret's value never reaches the terminal or a log file.
"""

from __future__ import annotations

import sys

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def said_folded(label: str, text: str, style: str | None = None) -> None:
    """LABEL TEXT folded at 80 columns; a `command` in backquotes is never broken, so it
    can be pasted (a command longer than a line gets a line of its own)."""
    import re

    words = re.findall(r"\S*`[^`]*`\S*|\S+", text)  # a command and what clings to it
    lines, line = [], label.rstrip()
    for word in words:
        if len(line) + 1 + len(word) > 80 and line.strip():
            lines.append(line)
            line = " " * len(label) + word
        else:
            line = f"{line} {word}" if line.strip() else label + word
    lines.append(line)
    console.print("\n".join(lines), style=style, markup=False, highlight=False, soft_wrap=True)


def progress(message: str) -> None:
    """One event of a run's progress, on stderr. On a terminal: dim, after "… ", folded
    at its width as today. To a pipe or a file (a timer's journal): each line whole,
    as said (it starts with the host's name), never wrapped: the journal wraps for its
    reader, and a piece such as "(11s)" never stands alone."""
    from rich.text import Text

    if err_console.is_terminal:
        err_console.print(Text(f"… {message}", style="dim"))
        return
    for line in message.splitlines() or [""]:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


class MaskedLines:
    """A text stream that writes whole lines, each masked as every output of remedy is
    (remedy.core.config.secrets): what pyinfra logs at ``-v`` and ``-vv`` (the commands
    it runs with their arguments, what a step said) and remedy's own diagnostics. A line
    is held until its end (or a flush), so a secret written in pieces is masked whole."""

    def __init__(self, stream):
        self._stream = stream
        self._held = ""

    def write(self, text: str) -> int:
        from remedy.core.config.secrets import masked

        self._held += text
        if "\n" in self._held:
            lines, _, self._held = self._held.rpartition("\n")
            self._stream.write(masked(lines + "\n"))
        return len(text)

    def flush(self) -> None:
        from remedy.core.config.secrets import masked

        if self._held:
            held, self._held = self._held, ""
            self._stream.write(masked(held))
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def mask_streams(*names: str) -> None:
    """sys.NAME (``stdout``, ``stderr``) as MaskedLines, once."""
    for name in names:
        stream = getattr(sys, name)
        if not isinstance(stream, MaskedLines):
            setattr(sys, name, MaskedLines(stream))
