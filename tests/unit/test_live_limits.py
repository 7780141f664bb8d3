"""A process's resource limits as the snapshot reads them (/proc/PID/limits, runtime.sh's
``limit`` lines) and as systemctl show words a unit's (issue 43 E7: live is what the
process has). tests/unit/proc_limits.txt is a real /proc/1/limits (Linux 6.18)."""

from __future__ import annotations

from pathlib import Path

from remedy.core.readings import runtime

RECORDED = (Path(__file__).parent / "proc_limits.txt").read_text().splitlines()


def test_the_rows_of_proc_limits_are_read_by_name_soft_then_hard():
    state = runtime.parse(["pid 42", *(f"limit {row}" for row in RECORDED)], [])
    limits = state.process.limits
    assert len(limits) == len(RECORDED) - 1  # every row but the header
    assert limits["Max stack size"] == ("8388608", "unlimited")
    assert limits["Max nice priority"] == ("0", "0")  # no unit word after it
    # as systemctl show says a unit's: the hard limit, its Soft, infinity
    props = runtime.limit_properties(limits)
    assert props["LimitSTACK"] == "infinity" and props["LimitSTACKSoft"] == "8388608"
    assert props["LimitNOFILE"] == props["LimitNOFILESoft"] == "65536"
    assert set(runtime.LIMIT_NAMES) == set(limits)  # every row the kernel prints, named


def test_a_snapshot_without_limit_lines_has_none_read():
    state = runtime.parse(["pid 42", "arg serve", "env A=1"], [])
    assert state.process.limits is None
