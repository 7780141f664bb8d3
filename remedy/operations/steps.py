"""The run, in order: one list of steps that every deploy carries out.

``deploys/converge.py`` runs it for every managed setting and
``deploys/restore_toolcalling.py`` for the tool-calling subset: the same
operations, each deciding from the host's plan whether its setting needs it.

Durable path: scratch clone (bump the input, write remedy's managed file),
prove the build, fast-forward the checkout, release hugepages, memory gate,
remove the stale /run override, switch, restart if needed, verify. If any of it
fails, the /run override goes back first, then the rollback to the recorded
generation, then the fallback (hugepages, memory gate, restart, verify).
"""

from __future__ import annotations

from remedy.core import desired
from remedy.operations import memory, nix, serving
from remedy.operations.run import begin_restore


def converge(scope: tuple[str, ...] = desired.ALL, runbook: str = "006"):
    """Add the run's operations for this host, converging the settings in SCOPE; the
    audit records RUNBOOK (unless `remedy runbooks apply` names another)."""
    r = begin_restore(scope, runbook)

    nix.flake_input_updated(r, name="Scratch clone; bump the tt-stack input (tt-stack#49)")
    nix.managed_file_written(r, name="Write remedy's managed Nix file (tt-stack#49, tt-stack#52)")
    nix.fix_proven(r, name="Prove the build holds the desired state (tt-stack#34, tt-stack#44)")
    nix.flake_lock_committed(
        r, name="Fast-forward the checkout to the proven commits (tt-stack#49)"
    )
    memory.hugepages_reduced(r, stage="durable", name="Release free hugepages (tt-stack#49)")
    memory.headroom_gated(r, stage="durable", name="Memory gate before the switch (tt-stack#49)")
    serving.runtime_override_removed(r, name="Remove the stale /run override (tt-stack#49)")
    nix.system_switched(r, name="Switch to the proven system (tt-stack#49)")
    serving.restarted(
        r, stage="durable", name="Restart if what systemd starts changed (tt-stack#49)"
    )
    serving.toolcalling_verified(r, stage="durable", name="Verify tool calling (tt-stack#49)")

    # Fallback: the override first, so a failed durable path never leaves hermes on disk
    serving.runtime_override_written(r, name="Write the /run fallback override (tt-stack#49)")
    nix.system_rolled_back(r, name="Roll back to the recorded generation (tt-stack#49)")
    memory.hugepages_reduced(
        r, stage="fallback", name="Release free hugepages for the fallback (tt-stack#49)"
    )
    memory.headroom_gated(r, stage="fallback", name="Memory gate before the fallback (tt-stack#49)")
    serving.restarted(r, stage="fallback", name="Restart onto the /run override (tt-stack#49)")
    serving.toolcalling_verified(r, stage="fallback", name="Verify the fallback (tt-stack#49)")

    serving.outcome_reported(r, name="Report the outcome (tt-stack#49)")
    return r
