"""The one console of the CLI. Results go to stdout; diagnostics to stderr."""

from __future__ import annotations

from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)
