"""The ``remedy`` command: a thin layer that parses options and calls the library.

Each command group lives in its own module and is registered here. Expected
failures (``RemedyError``) are turned into one clear message and their exit
code here, once; nothing below catches them for printing.
"""

from __future__ import annotations

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


def main(argv: list[str] | None = None) -> None:
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
