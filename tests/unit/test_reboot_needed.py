"""Issue 46 item 2, replayed from a twin (tests/facts/record.py record_guard_standin):
whether a reboot is needed, and why, from the snapshot's reboot sections.

The guard's lines in the recording stand for remedy's memory guard (issue 46 item 1)
until it lands: a stand-in ExecStartPre of the serving unit wrote them, one a start, in
the guard's contract (`remedy-memory-guard: <verdict>: … [MemAvailable_kB=N
threshold_kB=N]`), with figures falling 1.5 GiB a start from 9 GiB; journalctl read
them as the snapshot reads them."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from facts.serving import HostSnapshot
from remedy import metrics
from remedy.core.config.host_data import from_host_data
from remedy.core.readings import reboot
from remedy.core.render.report import host_status, reboot_lines

CASES = Path(__file__).parents[1] / "facts" / "serving.HostSnapshot"
GUARD = CASES / "guard_standin.json"
STANDIN = [9437184 - i * 1572864 for i in range(4)]  # tests/facts/record.py GUARD_STANDIN
THRESHOLD_KB = 3906250  # min_mem_available_gb 4, in kB


def output(case: Path = GUARD) -> list[str]:
    return json.loads(case.read_text())["output"]


def guard_lines(lines: list[str]) -> list[int]:
    """The indexes of the guard's journal lines in a recorded answer."""
    start = lines.index("@@remedy:section reboot.guard$")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("@@remedy:"))
    return list(range(start + 1, end))


def without_guard_lines(keep: int) -> list[str]:
    """The recording with only its first KEEP guard lines (a boot with fewer starts)."""
    lines = output()
    drop = guard_lines(lines)[keep:]
    return [line for i, line in enumerate(lines) if i not in drop]


def need_of(lines: list[str]) -> reboot.RebootNeed:
    snap = HostSnapshot().process(lines)
    return host_status("cfx-llm2", from_host_data("cfx-llm2", {}), snap).reboot


def test_the_guards_lines_are_read_one_a_start_oldest_first():
    snap = HostSnapshot().process(output())
    starts = snap.reboot.guard
    assert [s.mem_available_kb for s in starts] == STANDIN
    assert {s.threshold_kb for s in starts} == {THRESHOLD_KB}
    assert {s.verdict for s in starts} == {"allowed"}
    assert len({s.invocation for s in starts}) == 4  # four starts of the unit
    assert [s.at_us for s in starts] == sorted(s.at_us for s in starts)


def test_at_the_rate_seen_the_next_start_falls_below_the_threshold():
    need = need_of(output())
    h = need.headroom
    assert (h.first_kb, h.last_kb) == (STANDIN[0], STANDIN[-1])
    assert h.leak_kb == STANDIN[0] - STANDIN[-1]
    assert h.leak_per_start_kb == 1572864
    assert STANDIN[-1] - h.leak_per_start_kb < THRESHOLD_KB and h.starts_left == 0
    assert need.needed == ["memory_headroom"]
    title, lines = reboot_lines(need)
    assert title == "reboot needed: yes (memory headroom)"
    assert lines[-1].endswith("the next start falls below the threshold"), lines


def test_two_starts_leave_room_for_two_more_and_need_no_reboot():
    need = need_of(without_guard_lines(2))
    assert need.headroom.starts_left == 2  # 6.0 and 4.5 GiB stay above, 3.0 does not
    assert need.reasons["memory_headroom"] is False
    _title, lines = reboot_lines(need)
    assert lines[-1].endswith("start 3 from now falls below the threshold"), lines


def test_one_start_gives_no_rate_and_none_gives_an_unknown_headroom_with_its_reason():
    one = need_of(without_guard_lines(1))
    assert one.headroom.leak_per_start_kb is None and one.headroom.starts_left is None
    assert "one start since boot: no leak rate yet" in reboot_lines(one)[1][-1]
    none = need_of(without_guard_lines(0))
    assert none.headroom.starts == [] and not none.reasons["memory_headroom"]
    said = reboot_lines(none)[1][-1]
    assert said.startswith("memory headroom: unknown: no memory guard line in this boot's")
    assert "tenstorrent-serving.service" in said


def test_a_refused_last_start_needs_a_reboot_whatever_the_rate():
    lines = output()
    last = guard_lines(lines)[-1]
    lines[last] = lines[last].replace("guard: allowed: ", "guard: refused: ")
    need = need_of(lines)
    assert need.headroom.starts[-1].verdict == "refused"
    assert need.reasons["memory_headroom"]
    assert "the last start was refused by the guard" in need.why["memory_headroom"]


def test_a_line_that_breaks_the_contract_is_not_a_start_and_journal_errors_are_said():
    lines = output()
    first = guard_lines(lines)[0]
    lines[first] = lines[first].replace("threshold_kB=", "limit_kB=")
    assert [s.mem_available_kb for s in HostSnapshot().process(lines).reboot.guard] == STANDIN[1:]
    lines = without_guard_lines(0)
    at = lines.index("@@remedy:section reboot.guard$") + 1
    lines.insert(at, "Failed to open journal: Permission denied$")
    need = need_of(lines)
    assert need.headroom.unknown.startswith("journalctl could not be read: Failed to open")


def test_the_same_booted_and_current_system_need_no_reboot_for_the_kernel():
    need = need_of(output())
    assert not need.reasons["boot_pending"] and need.pending_age_s is None
    assert not (need.reasons["kernel"] or need.reasons["initrd"] or need.reasons["kernel_params"])


def test_a_recording_without_the_sections_says_unknown_not_no():
    need = need_of(output(CASES / "fresh.json"))
    assert need.unread and need.needed == []
    assert reboot_lines(need)[0] == "reboot needed: unknown"


def test_the_metrics_carry_each_reason_and_the_headroom(tmp_path):
    need = need_of(output())
    host = metrics.HostMetrics("cfx-llm2", True, reboot=metrics.RebootMetrics.of(need))
    path = tmp_path / "remedy.prom"
    metrics.write(str(path), [host], 1_790_000_000.0, 1.0)
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
    }
    reasons = {
        dict(labels)["reason"]: v
        for (name, labels), v in values.items()
        if name == "remedy_reboot_needed"
    }
    assert reasons == {r: (1 if r == "memory_headroom" else 0) for r in reboot.REASONS}
    host_label = (("host", "cfx-llm2"),)
    assert values[("remedy_mem_guard_starts", host_label)] == 4
    assert values[("remedy_mem_available_first_start_bytes", host_label)] == STANDIN[0] * 1024
    assert values[("remedy_mem_available_last_start_bytes", host_label)] == STANDIN[-1] * 1024
    leak = (STANDIN[0] - STANDIN[-1]) * 1024
    assert values[("remedy_mem_leak_since_boot_bytes", host_label)] == leak
    assert values[("remedy_mem_starts_left", host_label)] == 0
    assert ("remedy_boot_pending_age_seconds", host_label) not in values  # not pending
