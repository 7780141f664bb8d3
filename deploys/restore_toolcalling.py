"""Restore production tool calling (tt-stack#49), durably where possible.

    pyinfra inventory/twin.py deploys/restore_toolcalling.py -y
    pyinfra inventory/production.py deploys/restore_toolcalling.py --dry

The tool-calling subset of ``deploys/converge.py`` (the parser, SDPA streaming,
the merge batch guard, no stale /run override), with the same steps
(``remedy.operations.flow``): bump the tt-stack input as the checkout's owner in
a scratch clone, prove the built start script, fast-forward the checkout, memory
gate, switch, verify; on any failure the /run override, the rollback and the
fallback. The decision is made before anything acts and printed first.
"""

from remedy.core.config import desired
from remedy.operations.flow import converge

converge(desired.TOOL_CALLING, runbook="001")
