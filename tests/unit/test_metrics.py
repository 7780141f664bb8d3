"""The textfile metrics: written with prometheus-client, read back with its parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from remedy import metrics
from remedy.cli.converge import worst
from remedy.errors import ConfigError


def read(path) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
    }


def test_a_host_that_could_not_be_read_has_only_host_up_zero(tmp_path):
    path = tmp_path / "remedy.prom"
    hosts = [
        metrics.HostMetrics(
            "cfx-llm2",
            True,
            drift={"hugepages": True, "tool_call_parser": False},
            volatile={"tool_call_parser": True},
            probe_ok=True,
            mem_available_bytes=24_000_000_000,
        ),
        metrics.HostMetrics("cfx-llm3", False, exit_code=1, run_ok=False),
    ]
    metrics.write(str(path), hosts, 1_790_000_000.0, 12.5)
    values = read(path)
    assert values[("remedy_host_up", (("host", "cfx-llm2"),))] == 1
    assert values[("remedy_host_up", (("host", "cfx-llm3"),))] == 0
    assert values[("remedy_setting_drift", (("host", "cfx-llm2"), ("setting", "hugepages")))] == 1
    key = ("remedy_setting_volatile", (("host", "cfx-llm2"), ("setting", "tool_call_parser")))
    assert values[key] == 1
    assert values[("remedy_mem_available_bytes", (("host", "cfx-llm2"),))] == 24e9
    # what the run knows of an unreadable host: that it is, when, and no stale value
    said = {k[0] for k, v in values.items() if ("host", "cfx-llm3") in k[1] and v}
    assert said == {"remedy_host_state", "remedy_last_run_timestamp_seconds",
                    "remedy_host_exit_code"}, said  # fmt: skip
    assert {k[0] for k in values if ("host", "cfx-llm3") in k[1]} == {
        "remedy_host_up", "remedy_host_state", "remedy_host_exit_code",
        "remedy_last_run_success", "remedy_last_run_timestamp_seconds",
    }  # fmt: skip
    unreadable = (("host", "cfx-llm3"), ("state", "unreadable"))
    assert values[("remedy_host_state", unreadable)] == 1
    assert values[("remedy_last_run_success", (("host", "cfx-llm3"),))] == 0
    assert values[("remedy_run_duration_seconds", ())] == 12.5
    assert not list(tmp_path.glob("*.tmp*"))  # written under a temporary name, renamed


@pytest.mark.parametrize(
    ("path", "words"),
    [("/nonexistent/dir/r.prom", "does not exist"), ("/", "is a directory")],
)
def test_an_unusable_textfile_path_is_a_clear_error(path, words):
    with pytest.raises(ConfigError, match=words):
        metrics.check_writable(path)


def test_the_exit_code_is_the_worst_hosts():
    assert worst([0, 3, 0]) == 3
    assert worst([3, 5]) == 5
    assert worst([5, 4]) == 4
    assert worst([4, 1, 0]) == 1
    assert worst([]) == 0


def test_the_memory_guard_state_and_last_refusal_are_series(tmp_path):
    path = tmp_path / "remedy.prom"
    hosts = [
        metrics.HostMetrics("a", True, guard_state="volatile", guard_last_refusal_s=1_796_450_000),
        metrics.HostMetrics("b", True, guard_state="durable"),
    ]
    metrics.write(str(path), hosts, 1_796_460_000.0, 3.0)
    values = read(path)
    states = {k[1][1][1]: v for k, v in values.items()
              if k[0] == "remedy_memory_guard" and k[1][0] == ("host", "a")}  # fmt: skip
    assert states == {"durable": 0, "volatile": 1, "missing": 0}
    key = ("remedy_memory_guard_last_refusal_timestamp_seconds", (("host", "a"),))
    assert values[key] == 1_796_450_000
    assert values[("remedy_memory_guard", (("host", "b"), ("state", "durable")))] == 1
    # no refusal kept: no series (not a zero that reads as 1970)
    assert ("remedy_memory_guard_last_refusal_timestamp_seconds", (("host", "b"),)) not in values
