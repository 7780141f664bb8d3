"""Memory headroom: MemAvailable, hugepage pools, kernel parameters.

Booting vLLM below ~4 GB of MemAvailable can hard-freeze cfx-llm2; the
tenstorrent module leaks pinned pages that only a reboot reclaims.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyinfra.api.exceptions import FactProcessError

LEAK_ADVICE = "reboot reclaims the tenstorrent pinned-page leak; a module reload does not"
GIB = 1024 * 1024  # kB
# where the memory guard keeps its last refusal (remedy/host/memory_guard.sh: $state)
GUARD_REFUSAL = "/var/lib/remedy/memory-guard.last-refusal"


@dataclass(frozen=True)
class GuardRefusal:
    """The memory guard's last refusal of a start: when (epoch seconds), MemAvailable
    then and the threshold, in kB."""

    at: int
    mem_available_kb: int
    threshold_kb: int


def parse_guard_refusal(lines: list[str]) -> GuardRefusal | None:
    """The guard's record, ``EPOCH MEMAVAILABLE_KB THRESHOLD_KB`` (nothing, or another
    line: no refusal kept)."""
    words = " ".join(lines).split()
    if len(words) != 3 or not all(w.isdigit() for w in words):
        return None
    return GuardRefusal(*map(int, words))


def parse_meminfo(lines: list[str]) -> dict[str, int]:
    """/proc/meminfo in kB (HugePages_* are counts)."""
    out = {}
    for line in lines:
        m = re.match(r"^([A-Za-z0-9_()]+):\s+(\d+)(?:\s+kB)?\s*$", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    if "MemAvailable" not in out or "MemTotal" not in out:
        raise FactProcessError(
            f"/proc/meminfo: MemAvailable or MemTotal missing (got {len(out)} fields)"
        )
    return out


@dataclass
class HugePool:
    size_kb: int
    total: int
    free: int


def parse_hugepages(size_arg: str, lines: list[str]) -> HugePool:
    """One ``nr=N free=M`` line for /sys/kernel/mm/hugepages/hugepages-<size>kB."""
    m = re.fullmatch(r"(\d+)kB", size_arg.strip())
    values = dict(re.findall(r"(\w+)=(\d+)", " ".join(lines)))
    if not m or "nr" not in values or "free" not in values:
        raise FactProcessError(f"hugepages: unreadable pool {size_arg!r}: {lines[:2]}")
    return HugePool(int(m.group(1)), int(values["nr"]), int(values["free"]))


def size_kb(text: str) -> int | None:
    """A kernel page-size parameter (``2M``, ``1G``, ``1GB``) in kB."""
    m = re.fullmatch(r"(\d+)([KMG])", text.strip().upper().removesuffix("B"))
    if not m:
        return None
    return int(m.group(1)) * {"K": 1, "M": 1024, "G": GIB}[m.group(2)]


def hugepages_from_params(params: str, default_size_kb: int = 2048) -> dict[int, int]:
    """Requested pools per page size (kB) from kernel parameters.

    ``hugepagesz=1G hugepages=4`` pairs a size with the count that follows it;
    a count before any ``hugepagesz`` uses ``default_hugepagesz`` (or 2 MiB).
    """
    pools: dict[int, int] = {}
    current = None
    default = default_size_kb
    for word in params.split():
        key, _, value = word.partition("=")
        if key == "default_hugepagesz":
            default = size_kb(value) or default
        elif key == "hugepagesz":
            current = size_kb(value)
        elif key == "hugepages" and value.isdigit():
            pools[current or default] = int(value)
    return pools


@dataclass
class MemoryHeadroom:
    mem_available_kb: int
    mem_total_kb: int
    pools: dict[int, HugePool] = field(default_factory=dict)  # by page size in kB
    booted_params: str = ""  # /proc/cmdline
    next_boot_params: str | None = None  # the generation the next boot runs
    tenstorrent_refcnt: int | None = None

    @property
    def mem_available_gb(self) -> float:
        return self.mem_available_kb / 1e6 * 1.024  # kB → GB (10^9 bytes)

    def booted_pools(self) -> dict[int, int]:
        return hugepages_from_params(self.booted_params)

    def next_boot_pools(self) -> dict[int, int] | None:
        if self.next_boot_params is None:
            return None
        return hugepages_from_params(self.next_boot_params)


def size_label(kb: int) -> str:
    return f"{kb // GIB}G" if kb >= GIB and kb % GIB == 0 else f"{kb // 1024}M"


SIZES_BY_LABEL = {"2M": 2048, "1G": GIB}


def nix_memory_bound(headroom: MemoryHeadroom, min_gb: float, cap_gb: float | None) -> int:
    """The MemoryMax, in bytes, of the owner's nix evaluation and build client: what the
    host can spare above the memory gate's threshold (so that evaluation never pushes
    MemAvailable below it), at most CAP_GB (host data ``nix_memory_max_gb``)."""
    spare = headroom.mem_available_kb * 1024 - min_gb * 1e9
    bound = spare if cap_gb is None else min(spare, cap_gb * 1e9)
    return max(int(bound), 1)


def releases(targets: dict[str, int], headroom: MemoryHeadroom) -> list[tuple[int, int, int]]:
    """(size_kb, current total, new total) for the pools with free pages above TARGETS
    (page size label -> pages): only free pages can be released."""
    out = []
    for label, target in sorted(targets.items()):
        size = SIZES_BY_LABEL[label]
        pool = headroom.pools.get(size)
        if pool is None or pool.total <= target:
            continue
        new_total = max(target, pool.total - pool.free)
        if new_total < pool.total:
            out.append((size, pool.total, new_total))
    return out
