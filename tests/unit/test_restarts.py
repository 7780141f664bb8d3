"""The restart policy: windows in the host's local time, urgency, the drain's answer."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from remedy.core.config import restarts
from remedy.core.config.restarts import parse_window

CET = timezone(timedelta(hours=1))


def at(text: str) -> datetime:
    """A local time of the host: 2026-12-01 is a Tuesday."""
    return datetime.fromisoformat(text).replace(tzinfo=CET)


@pytest.mark.parametrize(
    "window, local, open_",
    [
        ("02:00-04:00", "2026-12-01T02:00", True),
        ("02:00-04:00", "2026-12-01T03:59", True),
        ("02:00-04:00", "2026-12-01T04:00", False),
        ("Mon..Fri 02:00-04:00", "2026-12-05T03:00", False),  # Saturday
        ("Mon..Fri 02:00-04:00", "2026-12-04T03:00", True),  # Friday
        ("Sat..Sun 02:00-04:00", "2026-12-06T03:00", True),  # Sunday
        ("Fri..Mon 02:00-04:00", "2026-12-07T03:00", True),  # Monday, wrapping the week
        ("Fri..Mon 02:00-04:00", "2026-12-08T03:00", False),  # Tuesday
        ("Mon,Wed 02:00-04:00", "2026-12-02T02:30", True),
        ("22:00-02:00", "2026-12-01T23:30", True),
        ("22:00-02:00", "2026-12-02T01:59", True),
        ("22:00-02:00", "2026-12-02T02:00", False),
        ("Fri 22:00-02:00", "2026-12-05T01:00", True),  # Friday's window, Saturday night
        ("Fri 22:00-02:00", "2026-12-06T01:00", False),
        ("always", "2026-12-01T12:00", True),
        ("never", "2026-12-01T12:00", False),
    ],
)
def test_a_window_is_open_in_the_hosts_local_time(window, local, open_):
    assert parse_window(window).is_open(at(local)) is open_


def test_day_names_in_any_case_and_extra_spaces_are_the_same_window():
    assert parse_window("mon..FRI   02:00-04:00") == parse_window("Mon..Fri 02:00-04:00")
    assert parse_window(" Always ") == parse_window("always")


def test_the_next_window_starts_on_the_next_allowed_day():
    w = parse_window("Mon..Fri 02:00-04:00")
    assert w.next_start(at("2026-12-04T05:00")) == at("2026-12-07T02:00")  # Fri -> Mon
    assert w.next_start(at("2026-12-01T01:00")) == at("2026-12-01T02:00")
    assert parse_window("never").next_start(at("2026-12-01T01:00")) is None


@pytest.mark.parametrize(
    "text, problem",
    [
        ("sometimes", "must be like"),
        ("2:00-4:00", "must be like"),
        ("24:00-01:00", "not a time of day"),
        ("02:00-02:00", "same minute"),
        ("Mon..Fry 02:00-04:00", "Fry is not a day"),
        ("Monday 02:00-04:00", "must be like"),
    ],
)
def test_a_bad_window_says_what_is_wrong(text, problem):
    with pytest.raises(restarts.WindowError, match=problem):
        parse_window(text)


def test_a_now_setting_restarts_at_once_and_window_ones_wait():
    never = parse_window("never")
    now = restarts.decide({"tool_call_parser": "now", "runtime_override": "window"}, never, None,
                          at("2026-12-01T12:00"))  # fmt: skip
    assert now.allowed and now.urgent == ["tool_call_parser"] and now.when == "now"
    waits = restarts.decide({"runtime_override": "window"}, never, None, at("2026-12-01T12:00"))
    assert not waits.allowed and waits.pending == ["runtime_override"]
    assert waits.when.startswith("at next boot")


def test_outside_the_window_the_next_start_is_named_and_restart_now_overrides_it():
    w = parse_window("02:00-04:00")
    needs = {"QWEN36_MERGE_BATCH_GUARD": "window"}
    d = restarts.decide(needs, w, None, at("2026-12-01T12:00"))
    assert not d.allowed and d.when == "in the next window, Wed 2026-12-02 02:00 +0100"
    assert restarts.decide(needs, w, "now", at("2026-12-01T12:00")).allowed
    assert restarts.decide(needs, w, None, at("2026-12-02T02:10")).allowed
    assert not restarts.decide(needs, parse_window("always"), "never", None).allowed


def test_reboot_settings_never_restart_the_server():
    d = restarts.decide({"hugepages": "reboot"}, parse_window("always"), "now", None)
    assert not d.allowed and d.pending == ["hugepages"] and d.when == "at next boot"
