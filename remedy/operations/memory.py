"""Memory operations: release free hugepages, then gate any restart on MemAvailable.

Booting vLLM below ~4 GB of MemAvailable can hard-freeze the host; only free
hugepages can be released, so the pool is reduced before (re)starting. Each runs
its step's host program (``remedy/host/steps/hugepages.sh``, ``gate.sh``), which
decides from the pools and memory as they are when it runs.
"""

from __future__ import annotations

from pyinfra.api import operation

from remedy.core.programs import step_values as sv
from remedy.core.run.stop import NOT_STOPPED, StopRequest
from remedy.operations import program


@operation()
def hugepages_reduced(values: sv.Hugepages, stop: StopRequest = NOT_STOPPED):
    """Release free hugepages above the targets (page size -> pages; runtime only: the
    next boot's kernel parameters give their own count). Only free pages go: the kernel
    keeps pages in use.

    + values: the step's values (``remedy.core.programs.step_values.Hugepages``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from program.operate(values, stop=stop)


@operation()
def headroom_gated(values: sv.Gate, stop: StopRequest = NOT_STOPPED):
    """Refuse to go on if MemAvailable < min_gb: nothing is restarted or built, and the
    run stops. A check, not a change: it reads memory right before the step it guards.

    + values: the step's values (``remedy.core.programs.step_values.Gate``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    now = values.now_gb if values.now_gb is not None else "?"
    will = (
        f"will require MemAvailable >= {values.min_gb:g} GB right before {values.doing} "
        f"(now {now} GB)"
    )
    yield from program.operate(values, stop=stop, prepare=will, act=program.check)
