"""Options and helpers the runbooks commands share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


def _project_option(function):
    return click.option(
        "--project",
        "project_dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="The remedy project (its runbooks/, deploys/, inventory/). Default: the current "
        "directory.",
    )(function)


def _json_option(function):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(
        function
    )


def _project(project_dir: Path | None) -> Path:
    return (project_dir or Path.cwd()).resolve()


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, default=str))
