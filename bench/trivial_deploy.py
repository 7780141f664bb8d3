"""The baseline for bench/restore.py: a trivial pyinfra deploy, one command."""

from pyinfra.operations import server

server.shell(name="A trivial command (bench baseline, tt-stack#49)", commands=["true"])
