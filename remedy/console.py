"""The one console of the CLI. Results go to stdout; diagnostics to stderr.

Diagnostics, and everything a pyinfra run logs (``-v``, ``-vv``: each command it runs),
go through ``MaskedLines``: a secret's value never reaches the terminal or a log file.
"""

from __future__ import annotations

import sys

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


# a shell word as written: quoted parts and escapes kept whole
_SHELL_WORD = r"""(?:'[^']*'|"(?:\\.|[^"\\])*"|\\.|[^\s'"])+"""


def folded_lines(label: str, text: str, width: int = 80) -> list[str]:
    """LABEL TEXT folded at WIDTH columns. A `command` in backquotes stays pasteable: it
    is broken only between its shell words, each break a backslash-newline (a shell's
    line continuation), so the lines pasted together run the same command."""
    import re

    words = re.findall(r"\S*`[^`]*`\S*|\S+", text)  # a command and what clings to it
    indent = " " * len(label)
    lines, line = [], label.rstrip()
    for word in words:
        if len(line) + 1 + len(word) <= width or not line.strip():
            line = f"{line} {word}" if line.strip() else label + word
            continue
        if "`" in word and len(indent) + len(word) > width:  # a long command: its own lines
            lines.append(line)
            lines += _command_lines(word, indent, width)
            line = lines.pop()
            continue
        lines.append(line)
        line = indent + word
    lines.append(line)
    return lines


def _command_lines(word: str, indent: str, width: int) -> list[str]:
    """WORD (text`command`text) on lines after INDENT, broken between the command's
    shell words with a backslash-newline."""
    import re

    head, rest = word.split("`", 1)
    command, tail = rest.rsplit("`", 1)
    parts = re.findall(_SHELL_WORD, command) or [""]
    parts[0], parts[-1] = f"{head}`{parts[0]}", f"{parts[-1]}`{tail}"
    lines, line = [], indent + parts[0]
    for part in parts[1:]:
        if len(line) + 1 + len(part) + 2 > width:  # room for " \\"
            lines.append(line + " \\")
            line = indent + "  " + part
        else:
            line = f"{line} {part}"
    return [*lines, line]


def said_folded(label: str, text: str, style: str | None = None) -> None:
    """LABEL TEXT folded at 80 columns (folded_lines): a command stays pasteable."""
    console.print(
        "\n".join(folded_lines(label, text)), style=style, markup=False, highlight=False,
        soft_wrap=True,
    )  # fmt: skip


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
