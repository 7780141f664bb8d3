"""Nix facts: the version (and its update-input command), a flake input, generations.

lock = host.get_fact(FlakeInput, flake_dir="/etc/nixos", flake_input="tt-stack")
lock.rev, lock.nar_hash, lock.url
"""

from __future__ import annotations

import json
import os

from pyinfra.api import FactBase, QuoteString, StringCommand

from facts import _remote
from remedy import host
from remedy.core.config import options
from remedy.core.programs import commands
from remedy.core.readings import nix, sections
from remedy.core.readings.snapshot import (
    Checkout,
    read_checkout,
    read_flake_input,
    read_generations,
)


class NixInfo(FactBase[nix.NixInfo | None]):
    """The Nix version and the command that updates one flake input on it
    (``nix flake lock --update-input`` up to 2.18, ``nix flake update NAME`` from 2.19).
    None when Nix is not installed."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

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

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(self, flake_dir: str = "/etc/nixos", flake_input: str = "tt-stack"):
        return _remote.command(
            [_remote.FLAKE], {"REMEDY_FLAKE_DIR": flake_dir, "REMEDY_FLAKE_INPUT": flake_input}
        )

    def process(self, output):
        return read_flake_input(sections.split(output, "FlakeInput"))


class FlakeCheckout(FactBase[Checkout]):
    """Whether FLAKE_DIR is a git checkout, its HEAD and uncommitted changes."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(self, flake_dir: str = "/etc/nixos"):
        return _remote.command(
            [_remote.FLAKE], {"REMEDY_FLAKE_DIR": flake_dir, "REMEDY_FLAKE_INPUT": ""}
        )

    def process(self, output):
        return read_checkout(sections.split(output, "FlakeCheckout"))


class SystemGenerations(FactBase[nix.SystemGenerations]):
    """/run/current-system, /run/booted-system, the system profile and its generations."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(self):
        return _remote.command([_remote.GENERATIONS], {})

    def process(self, output):
        return read_generations(sections.split(output, "SystemGenerations"))


OPTIONS_SH = host.text("facts/options.sh").replace("@END@", sections.END)


class OptionDefinitions(FactBase[options.OptionDefinitions]):
    """What the host's configuration defines for the options remedy's managed file
    forces, evaluated without that file: per managed_options name, whether the option
    exists, its highestPrio and definitionsWithLocations (``remedy.core.config.options``).
    One ``nix eval`` as the checkout's OWNER, in a scope bounded to MEMORY_MAX bytes
    when given (the host has systemd-run). With RECORD_KEY, an answer (exit 0) is kept
    on the host in ``options.RECORD`` under that key, in the same round trip."""

    def command(
        self,
        flake_dir: str,
        flake_host: str,
        managed_file: str,
        managed_options: dict[str, str],
        owner: str | None = None,
        home: str | None = None,
        memory_max: int | None = None,
        timeout_s: int = 1800,
        record_key: str | None = None,
    ):
        argv = commands.as_owner(
            owner,
            home,
            [
                "env",
                f"REMEDY_FLAKE_DIR={flake_dir}",
                f"REMEDY_FLAKE_HOST={flake_host}",
                f"REMEDY_MANAGED_FILE={managed_file}",
                f"REMEDY_OPTIONS={json.dumps(managed_options, sort_keys=True)}",
                *commands.nix("eval", "--impure", "--json", "--expr", options.EXPR),
            ],
        )
        # a scope's name is unique on the host: this process's (none without a bound)
        name = f"remedy-nix-options-{os.getpid()}" if memory_max else "remedy-nix-options"
        argv = commands.nix_bounded(argv, memory_max, name, timeout_s)
        record = [options.RECORD if record_key else "", record_key or ""]
        return StringCommand(
            "sh", "-c", QuoteString(OPTIONS_SH), "sh", *map(QuoteString, [*record, *argv])
        )

    def process(self, output):
        found = sections.split(output, "OptionDefinitions").get("nix.options")
        return options.parse(found[0].lines if found else [], {})


def read_option_definitions(
    host, s, snap, scope, evaluate: bool = True
) -> options.OptionDefinitions | None:
    """The OptionDefinitions of host HOST (settings S, its HostSnapshot SNAP) when the
    managed file carries a value for SCOPE; None when there is nothing to evaluate.
    remedy's record on the host (read in the snapshot's round trip) answers while what
    the answer depends on is unchanged (``options.record_key``): no evaluation, no
    second round trip. Not evaluated unless EVALUATE (a builder builds), nor below the
    memory gate: the evaluation of a NixOS
    system takes GBs."""
    from remedy.core.config import desired
    from remedy.core.readings import memory as mem

    if not desired.managed_values(s, scope) or snap.nix is None:
        return None
    if not snap.checkout.is_checkout or snap.checkout.problem:
        return options.OptionDefinitions(error=f"not evaluated: {snap.checkout.problem}")
    key = options.record_key(s, snap)
    rec = options.read_record(getattr(snap, "options_record", None))
    if key and rec and rec.key == key:
        recorded = options.from_record(rec, s.managed_options)
        if not recorded.error:
            return recorded
    if not evaluate:  # a builder builds: no nix evaluates on the serving host
        return options.OptionDefinitions(
            error=f"not evaluated: the builder {s.build_host} builds, and no nix evaluates here"
        )
    gb = snap.memory.mem_available_kb * 1024 / 1e9
    if gb < s.min_mem_available_gb:
        return options.OptionDefinitions(
            error=f"not evaluated: MemAvailable {gb:.1f} GB is below min_mem_available_gb"
            + ("" if key is None or rec is None or rec.problem else " (remedy's record on"
               " the host is of an earlier HEAD, flake.lock, remedy's file or managed_options)")
        )  # fmt: skip
    bound = mem.nix_memory_bound(snap.memory, s.min_mem_available_gb, s.nix_memory_max_gb)
    found = host.get_fact(
        OptionDefinitions,
        flake_dir=s.flake_dir,
        flake_host=s.flake_host,
        managed_file=s.managed_file,
        managed_options=dict(sorted(s.managed_options.items())),
        owner=snap.checkout.owner,
        home=snap.checkout.home,
        memory_max=bound if snap.tools.systemd_run else None,
        timeout_s=s.nix_timeout_s,
        record_key=key,
    )
    if found is None:
        return options.OptionDefinitions(error="not evaluated: the remote read failed")
    return options.named(found, s.managed_options)
