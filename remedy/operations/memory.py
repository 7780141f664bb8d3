"""Memory operations: release free hugepages, then gate any restart on MemAvailable.

Booting vLLM below ~4 GB of MemAvailable can hard-freeze the host; only free
hugepages can be released, so the pool is reduced before (re)starting. Each runs
its step's host program (``remedy/host/steps/hugepages.sh``, ``gate.sh``), which
decides from the pools and memory as they are when it runs.
"""

from __future__ import annotations

from pyinfra import host, state
from pyinfra.api import operation

from remedy.core.programs import step_values as sv
from remedy.operations import program

CONTINGENT = "runs only if the durable path fails"


@operation()
def hugepages_reduced(values: sv.Hugepages):
    """Release free hugepages above the targets (page size -> pages; runtime only: the
    next boot's kernel parameters give their own count). Only free pages go: the kernel
    keeps pages in use.

    + values: the step's values (``remedy.core.programs.step_values.Hugepages``)
    """
    if values.skip:
        host.noop(values.skip)
        return
    if values.contingent and not state.is_executing:
        host.noop(CONTINGENT)
        return
    if not state.is_executing:
        yield from program.preview(values)
        return
    yield from program.step(values)


@operation()
def headroom_gated(values: sv.Gate):
    """Refuse to go on if MemAvailable < min_gb: nothing is restarted or built, and the
    run stops. A check, not a change: it reads memory right before the step it guards.

    + values: the step's values (``remedy.core.programs.step_values.Gate``)
    """
    if values.skip:
        host.noop(values.skip)
        return
    if not state.is_executing:
        now = values.now_gb if values.now_gb is not None else "?"
        host.noop(
            CONTINGENT
            if values.contingent
            else f"will require MemAvailable >= {values.min_gb:g} GB right before "
            f"{values.doing} (now {now} GB)"
        )
        return
    yield from program.check(values)
