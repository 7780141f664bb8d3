"""Converge every managed setting of a serving host (tt-stack#49, #44, #52).

    pyinfra -y inventory/twin.py deploys/converge.py --limit NAME
    pyinfra inventory/production.py deploys/converge.py --dry

The six settings of ``remedy.core.config.desired``: the tool-call parser, SDPA
streaming, the merge batch guard, the hugepage pool (live and at next boot),
the Phase 2a options (off) and no stale /run override. Durable first: bump the
tt-stack input and write remedy's managed Nix file in a scratch clone, prove the
built system holds all of it, fast-forward the checkout, switch. Then the
fallback for what has a runtime form (the /run override for the parser and the
environment, released hugepages). At most one restart, memory-gated, verified
with a real tool call. `--dry` prints the plan per setting.
"""

from remedy.core.config import desired
from remedy.operations.flow import converge

converge(desired.ALL)
