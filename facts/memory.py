"""Memory facts: MemAvailable, hugepage pools, and the kernel parameters behind them.

headroom = host.get_fact(MemoryHeadroom)
headroom.mem_available_gb, headroom.pools[1048576].free, headroom.next_boot_pools()
"""

from __future__ import annotations

from pyinfra.api import FactBase, QuoteString, StringCommand

from facts import _remote
from remedy.core.readings import sections
from remedy.core.readings.memory import GUARD_REFUSAL, GuardRefusal, parse_guard_refusal
from remedy.core.readings.memory import MemoryHeadroom as Headroom
from remedy.core.readings.snapshot import read_memory


class MemoryHeadroom(FactBase[Headroom]):
    """MemAvailable and MemTotal; hugepages of every size (total, free); the kernel
    parameters of this boot (/proc/cmdline) and of the next (the system profile's
    kernel-params, else /run/current-system's); the tenstorrent module's refcount."""

    shell_executable = _remote.SHELL  # the script is POSIX sh

    def command(self):
        return _remote.command([_remote.MEMORY], {})

    def process(self, output):
        return read_memory(sections.split(output, "MemoryHeadroom"))


class MemoryGuardRefusal(FactBase[GuardRefusal | None]):
    """The memory guard's last refusal of a start of the serving unit (its record in
    /var/lib/remedy), or None: it refused none that it kept."""

    def command(self):
        return StringCommand("cat", "--", QuoteString(GUARD_REFUSAL), "2>/dev/null", "||", "true")

    def process(self, output):
        return parse_guard_refusal(list(output))
