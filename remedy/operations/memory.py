"""Memory operations: release free hugepages, then gate any restart on MemAvailable.

Booting vLLM below ~4 GB of MemAvailable can hard-freeze the host; only free
hugepages can be released, so the pool is reduced before (re)starting.
"""

from __future__ import annotations

from pyinfra import host, state
from pyinfra.api import operation

from facts.memory import MemoryHeadroom
from remedy.core import commands
from remedy.core import memory as mem
from remedy.core.plan import RestoreRun, hugepage_releases
from remedy.operations.argv import command, failure

SIZES = mem.SIZES_BY_LABEL  # page size label -> kB


@operation()
def hugepages_reduced(r: RestoreRun, stage: str = "durable"):
    """Release free hugepages above ``hugepages_target`` (runtime only: the next boot's
    kernel parameters give their own count). Only free pages go: the kernel keeps pages
    in use. When the hugepage pool is a managed setting (converge) this stands alone;
    for a restore it frees memory before a restart.

    + r: the host's RestoreRun
    + stage: "durable" or "fallback"
    """
    if reason := r.idle_reason(stage):
        host.noop(reason)
        return
    managed = "hugepages" in r.plan.scope
    if not managed and not r.restart_ahead(stage):
        host.noop("no restart ahead")
        return
    if not r.settings.hugepages_target:
        host.noop("no hugepages_target set for this host")
        return
    releases = hugepage_releases(r.settings, r.before.memory)
    if not releases or r.hugepages_released:
        host.noop(
            "no free hugepages above the target" if not releases else "released earlier in this run"
        )
        return
    targets = {SIZES[label]: n for label, n in r.settings.hugepages_target.items()}
    for size, old, new in releases:
        host.log_styled(f"hugepages {mem.size_label(size)}: {old} -> {new}", fg="blue")
        yield command(commands.release_hugepages(size, targets[size]))
    r.hugepages_released = True  # runs once the commands above have run


@operation()
def headroom_gated(r: RestoreRun, stage: str = "durable"):
    """Refuse to go on if MemAvailable < ``min_mem_available_gb``: nothing is restarted.
    A check, not a change: it reads memory right before the restart, on the run itself.

    + r: the host's RestoreRun
    + stage: "durable" or "fallback"
    """
    if not r.restart_ahead(stage):
        host.noop(r.idle_reason(stage) or "no restart ahead")
        return
    if not state.is_executing:
        host.noop(
            f"will require MemAvailable >= {r.settings.min_mem_available_gb:g} GB right "
            f"before the restart (now {r.before.memory.mem_available_kb * 1024 / 1e9:.1f} GB)"
        )
        return
    yield from gate(r, stage)


def gate(r: RestoreRun, stage: str):
    """Inside an operation, at execution: read MemAvailable now. Passing says so and yields
    nothing; a refusal is recorded and yields a failing command (the operation errors)."""
    headroom = host.get_fact(MemoryHeadroom)
    refusal = r.memory_refusal(headroom)
    if refusal:
        r.refused = refusal
        host.log_styled(refusal, fg="red")
        yield failure()
        return
    r.gated.add(stage)
    gb = headroom.mem_available_kb * 1024 / 1e9
    message = f"memory gate: MemAvailable {gb:.1f} GB >= {r.settings.min_mem_available_gb:g} GB"
    host.log_styled(message, fg="green")
    host.noop(message)
