"""Does the host's configuration take remedy's managed file as the settings write it?

    found = host.get_fact(ManagedFileEvaluated, flake_dir="/etc/nixos",
                          flake_host="cfx-llm2", managed_file="hosts/cfx-llm2/remedy.nix",
                          text=desired.managed_nix(settings), owner="ops", home="/home/ops")
    found.ok, found.error    # NixOS's own message, e.g. "The option `…' does not exist."

One ``nix eval`` of the system's derivation with remedy's file replaced by TEXT: its
path disabled (``disabledModules``, as ``remedy.core.config.options`` evaluates without it)
and TEXT added as a module, as the checkout's owner, bounded in time and memory as
every evaluation of the owner's nix is. ``remedy settings check --inventory`` runs it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pyinfra.api import FactBase, QuoteString, StringCommand

from remedy import host
from remedy.core.config import options
from remedy.core.programs import commands
from remedy.core.readings import sections

EXPR = host.text("facts/settings.nix")

EVAL_SH = host.text("facts/settings_eval.sh").replace("@END@", sections.END)


@dataclass(frozen=True)
class Evaluated:
    ok: bool
    error: str | None = None  # Nix's last error message, its lines joined
    output: str = ""


class ManagedFileEvaluated(FactBase[Evaluated]):
    """Whether the system evaluates with remedy's managed file as TEXT (see the module)."""

    def command(
        self,
        flake_dir: str,
        flake_host: str,
        managed_file: str,
        text: str,
        owner: str | None = None,
        home: str | None = None,
        memory_max: int | None = None,
        timeout_s: int = 1800,
    ):
        given = {"DIR": flake_dir, "HOST": flake_host, "FILE": managed_file, "TEXT": text}
        env = [f"REMEDY_{k}={v}" for k, v in given.items()]
        nix = commands.nix("eval", "--impure", "--raw", "--expr", EXPR)
        argv = commands.as_owner(owner, home, ["env", *env, *nix])
        name = f"remedy-nix-settings-{os.getpid()}" if memory_max else "remedy-nix-settings"
        argv = commands.nix_bounded(argv, memory_max, name, timeout_s)
        return StringCommand("sh", "-c", QuoteString(EVAL_SH), "sh", *map(QuoteString, argv))

    def process(self, output):
        found = sections.split(output, "ManagedFileEvaluated").get("settings.eval")
        lines = found[0].lines if found else []
        rc = next((ln.split()[-1] for ln in lines if ln.startswith("@@remedy:exit ")), "1")
        body = [ln for ln in lines if not ln.startswith("@@remedy:exit ")]
        if rc == "0":
            return Evaluated(True, output="\n".join(body))
        error = options._nix_error(body) or f"nix eval exited {rc}: {' '.join(body)[-300:]}"
        return Evaluated(False, error, "\n".join(body))
