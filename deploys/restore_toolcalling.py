"""Restore production tool calling (tt-stack#49), durably where possible.

    pyinfra inventory/twin.py deploys/restore_toolcalling.py -y
    pyinfra inventory/production.py deploys/restore_toolcalling.py --dry

Durable path: bump the tt-stack input (as the checkout's owner), ask Nix what
it would compile, prove the built start script runs the wanted parser, commit
flake.lock, memory gate, remove the stale /run override, switch to the proven
system, verify. If any of it fails, the /run override goes back first, then the
rollback to the recorded generation, then the fallback (memory gate, restart,
verify). The decision is made before anything acts and printed first.
"""

from remedy.operations import memory, nix, serving
from remedy.operations.run import begin_restore

r = begin_restore()

# Durable path
nix.flake_input_updated(r, name="Bump the tt-stack input (tt-stack#49)")
nix.fix_proven(r, name="Prove the new start script runs the fix (tt-stack#34, tt-stack#44)")
nix.flake_lock_committed(r, name="Commit flake.lock (tt-stack#49)")
memory.hugepages_reduced(r, stage="durable", name="Release free hugepages (tt-stack#49)")
memory.headroom_gated(r, stage="durable", name="Memory gate before the switch (tt-stack#49)")
serving.runtime_override_removed(r, name="Remove the stale /run override (tt-stack#49)")
nix.system_switched(r, name="nixos-rebuild switch (tt-stack#49)")
serving.restarted(
    r, stage="durable", name="Restart if the effective ExecStart changed (tt-stack#49)"
)
serving.toolcalling_verified(r, stage="durable", name="Verify tool calling (tt-stack#49)")

# Fallback path: the override first, so a failed durable path never leaves hermes on disk
serving.runtime_override_written(r, name="Write the /run fallback override (tt-stack#49)")
nix.system_rolled_back(r, name="Roll back to the recorded generation (tt-stack#49)")
memory.hugepages_reduced(
    r, stage="fallback", name="Release free hugepages before the fallback (tt-stack#49)"
)
memory.headroom_gated(
    r, stage="fallback", name="Memory gate before the fallback restart (tt-stack#49)"
)
serving.restarted(r, stage="fallback", name="Restart onto the /run override (tt-stack#49)")
serving.toolcalling_verified(
    r, stage="fallback", name="Verify tool calling on the fallback (tt-stack#49)"
)

serving.outcome_reported(r, name="Report the outcome (tt-stack#49)")
