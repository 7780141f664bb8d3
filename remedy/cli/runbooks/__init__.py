"""``remedy runbooks list|show|check|apply``: find, read, check and run the runbooks.

Every command acts on the project in the current directory (``--project``
points elsewhere) and takes ``--json``. The work is done by
``remedy.runbooks``, ``remedy.inventory`` and ``remedy.audit``; this
module parses options and renders.
"""

from __future__ import annotations

import click

from remedy.cli.runbooks.apply import apply
from remedy.cli.runbooks.check import check
from remedy.cli.runbooks.list import list_
from remedy.cli.runbooks.show import show


@click.group()
def runbooks():
    """Find, read, check and apply the runbooks of the project."""


for command in (list_, show, check, apply):
    runbooks.add_command(command)
