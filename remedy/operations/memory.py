"""Memory operations: release free hugepages, then gate any restart on MemAvailable.

Booting vLLM below ~4 GB of MemAvailable can hard-freeze the host; only free
hugepages can be released, so the pool is reduced before (re)starting.
"""

from __future__ import annotations

from pyinfra import host, state
from pyinfra.api import operation

from facts.memory import MemoryHeadroom
from remedy.core.programs import commands
from remedy.core.readings import memory as mem
from remedy.operations.argv import command
from remedy.operations.said import gave_up, lost, say

SIZES = mem.SIZES_BY_LABEL  # page size label -> kB
CONTINGENT = "runs only if the durable path fails"


releases = mem.releases


@operation()
def hugepages_reduced(
    targets: dict[str, int], managed: bool = False, contingent: bool = False, skip=None
):
    """Release free hugepages above TARGETS (page size label -> pages; runtime only: the
    next boot's kernel parameters give their own count). Only free pages go: the kernel
    keeps pages in use. Decided from the pools as they are when it runs.

    + targets: the hugepage pool sizes wanted, e.g. {"1G": 2}
    + managed: the pool is a managed setting of this run (converge), not only headroom
    + contingent: part of the fallback of a durable plan
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if contingent and not state.is_executing:
        host.noop(CONTINGENT)
        return
    headroom = host.get_fact(MemoryHeadroom)
    if headroom is None:
        yield from gave_up(lost("the hugepage pools"))
        return
    found = releases(targets, headroom)
    if not found:
        host.noop("no free hugepages above the target")
        return
    for size, old, new in found:
        host.log_styled(f"hugepages {mem.size_label(size)}: {old} -> {new}", fg="blue")
        yield command(commands.release_hugepages(size, targets[mem.size_label(size)]))


def refusal(min_gb: float, headroom: mem.MemoryHeadroom, doing: str = "restarting the server"):
    """Why MemAvailable is too low for DOING, or None."""
    gb = headroom.mem_available_kb * 1024 / 1e9
    if gb >= min_gb:
        return None
    return (
        f"{host.name}: MemAvailable {gb:.1f} GB is below min_mem_available_gb "
        f"{min_gb:g} GB; not {doing} (a vLLM boot below ~4 GB can hard-freeze the host). "
        f"{mem.LEAK_ADVICE}."
    )


@operation()
def headroom_gated(
    min_gb: float,
    doing: str = "restarting the server",
    now_gb: float | None = None,
    contingent: bool = False,
    skip=None,
):
    """Refuse to go on if MemAvailable < MIN_GB: nothing is restarted or built, and the
    run stops. A check, not a change: it reads memory right before the step it guards.

    + min_gb: min_mem_available_gb
    + doing: what the gate guards, for its message
    + now_gb: MemAvailable when the run was planned (for --dry)
    + contingent: part of the fallback of a durable plan
    + skip: why this host does not need it
    """
    if skip:
        host.noop(skip)
        return
    if not state.is_executing:
        host.noop(
            CONTINGENT
            if contingent
            else f"will require MemAvailable >= {min_gb:g} GB right before {doing} "
            f"(now {now_gb if now_gb is not None else '?'} GB)"
        )
        return
    headroom = host.get_fact(MemoryHeadroom)
    if headroom is None:
        yield from gave_up(lost("MemAvailable"), failed=lost("MemAvailable"))
        return
    if why := refusal(min_gb, headroom, doing):
        yield from gave_up(why, refused=why)
        return
    gb = headroom.mem_available_kb * 1024 / 1e9
    message = f"memory gate: MemAvailable {gb:.1f} GB >= {min_gb:g} GB"
    host.log_styled(message, fg="green")
    say(gate=message)
    host.noop(message)
