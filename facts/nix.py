"""Nix facts: the version (and its update-input command), a flake input, generations.

lock = host.get_fact(FlakeInput, flake_dir="/etc/nixos", flake_input="tt-stack")
lock.rev, lock.nar_hash, lock.url
"""

from __future__ import annotations

from pyinfra.api import FactBase

from facts import _remote
from remedy.core import nix, sections
from remedy.core.snapshot import Checkout, read_checkout, read_flake_input, read_generations


class NixInfo(FactBase[nix.NixInfo | None]):
    """The Nix version and the command that updates one flake input on it
    (``nix flake lock --update-input`` up to 2.18, ``nix flake update NAME`` from 2.19).
    None when Nix is not installed."""

    def command(self):
        return _remote.command([_remote.NIX_VERSION], {})

    def process(self, output):
        return nix.parse_nix_version(
            sections.one(sections.split(output, "NixInfo"), "nix.version", "NixInfo").lines
        )


class FlakeInput(FactBase[nix.FlakeInput]):
    """The locked rev, narHash, lastModified and url of input FLAKE_INPUT in FLAKE_DIR/flake.lock,
    following a node key that differs from the name and ``follows`` paths. A missing
    flake.lock or input is a FactProcessError naming the file and the input."""

    def command(self, flake_dir: str = "/etc/nixos", flake_input: str = "tt-stack"):
        return _remote.command(
            [_remote.FLAKE], {"REMEDY_FLAKE_DIR": flake_dir, "REMEDY_FLAKE_INPUT": flake_input}
        )

    def process(self, output):
        return read_flake_input(sections.split(output, "FlakeInput"))


class FlakeCheckout(FactBase[Checkout]):
    """Whether FLAKE_DIR is a git checkout, its HEAD and uncommitted changes."""

    def command(self, flake_dir: str = "/etc/nixos"):
        return _remote.command(
            [_remote.FLAKE], {"REMEDY_FLAKE_DIR": flake_dir, "REMEDY_FLAKE_INPUT": ""}
        )

    def process(self, output):
        return read_checkout(sections.split(output, "FlakeCheckout"))


class SystemGenerations(FactBase[nix.SystemGenerations]):
    """/run/current-system, /run/booted-system, the system profile and its generations."""

    def command(self):
        return _remote.command([_remote.GENERATIONS], {})

    def process(self, output):
        return read_generations(sections.split(output, "SystemGenerations"))
