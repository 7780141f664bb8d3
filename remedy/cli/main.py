"""The ``remedy`` command: a thin layer that parses options and calls the library.

Each command group lives in its own module and is registered here. Expected
failures (``RemedyError``) are turned into one clear message and their exit
code here, once; nothing below catches them for printing. A reader that goes away
(``remedy status … | head -1``) is survived here too, once for every command.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module

import click

from remedy.console import err_console
from remedy.errors import RemedyError

# name -> "module:attribute"; imported lazily so `remedy twin ...` does not pay
# for pyinfra and `remedy status` does not pay for the twin builder.
COMMANDS = {
    "twin": "remedy.cli.twin:twin",
    "status": "remedy.cli.status:status",
    "converge": "remedy.cli.converge:converge",
    "reboot": "remedy.cli.reboot:reboot",
    "schedule": "remedy.cli.schedule:schedule",
    "runbooks": "remedy.cli.runbooks:runbooks",
    "audit": "remedy.cli.audit:audit",
    "adopt": "remedy.cli.adopt:adopt",
    "settings": "remedy.cli.settings:settings",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        try:
            return getattr(import_module(module), attr)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                return None
            raise


@click.group(cls=LazyGroup)
@click.version_option(package_name="remedy")
def cli():
    """Keep an LLM-serving NixOS host correct, and recover it safely when it drifts."""


class ReaderGone:
    """A standard stream whose reader may close the pipe (``remedy status | head -1``).

    A write to a closed pipe raises BrokenPipeError (Python ignores SIGPIPE), and the
    command would end with exit 1 and nothing said (rich's console exits 1 itself). Here
    the stream's descriptor is pointed at /dev/null instead, and the command goes on to
    its end, quietly: a status keeps its own exit code, which is its answer, and a
    converge is never cut short by its reader."""

    def __init__(self, stream):
        self._stream = stream
        self.gone = False  # the reader closed the pipe: what follows goes to /dev/null

    def _away(self) -> None:
        self.gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._away()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._away()
            self._stream.flush()  # what was buffered goes to /dev/null

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _guard_streams() -> None:
    """stdout and stderr as ReaderGone (once; a stream without a descriptor is left)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, ReaderGone):
            continue
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue  # not a file (a test's capture): nothing to point elsewhere
        setattr(sys, name, ReaderGone(stream))


def main(argv: list[str] | None = None) -> None:
    from remedy.console import mask_streams

    # diagnostics, and what the fleet's pyinfra run logs there, with every secret masked
    # (stdout carries results, masked where they are made: a manual script keeps its values)
    mask_streams("stderr")
    _guard_streams()
    try:
        # In non-standalone mode click returns ctx.exit()'s code instead of exiting.
        code = cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except RemedyError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", markup=True, soft_wrap=True)
        sys.exit(exc.exit_code)
    except SystemExit:
        raise
    else:
        sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
