"""The one console of the CLI. Results go to stdout; diagnostics to stderr."""

from __future__ import annotations

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
