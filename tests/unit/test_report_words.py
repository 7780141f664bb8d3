"""What the human report says, per state (issue 28 item 7): the blocker of the durable
path, the pending notes that are true, and the next command for each verdict. Each
sentence is checked in a state where it must appear and one where it must not; the
snapshots are recorded from twins (tests/facts/serving.HostSnapshot)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

import facts.serving
from remedy.core.config.host_data import from_host_data
from remedy.core.render import report
from remedy.errors import EXIT_ERROR, EXIT_LOCKED, EXIT_OK, EXIT_UNHEALTHY, EXIT_VOLATILE

FIXTURES = Path(__file__).parent.parent / "facts" / "serving.HostSnapshot"
BLOCKED = "durable path not possible: "


def snapshot(case: str):
    lines = json.loads((FIXTURES / f"{case}.json").read_text())["output"]
    return facts.serving.HostSnapshot().process(lines)


def status(case: str, **data):
    return report.host_status("cfx-llm2", from_host_data("cfx-llm2", data), snapshot(case))


def test_a_blocked_durable_path_is_a_problem_with_what_to_do():
    said = status("emergency_override", durable=False).problems
    assert f"{BLOCKED}disabled by host data (durable=false)" in said
    # a person's hand bump left flake.lock uncommitted; the pool wants remedy.nix
    said = status("durable").problems
    assert any(p.startswith(f"{BLOCKED}/etc/nixos/flake.lock has uncommitted") for p in said)


@pytest.mark.parametrize(
    "case, data",
    [
        ("emergency_override", {}),  # the durable path is open: nothing blocks it
        ("fresh", {"allow_local_build": True}),
    ],
)
def test_no_blocker_is_said_where_the_durable_path_is_open(case, data):
    assert not [p for p in status(case, **data).problems if p.startswith(BLOCKED)]


def test_what_the_next_boot_lacks_is_not_called_pending():
    """On the override, the next boot has neither the merge guard nor a parser that
    works: neither waits for a window or a reboot, and the override going at the reboot
    is the problem itself, not something pending."""
    notes = status("emergency_override").notes
    assert not [n for n in notes if n.startswith("pending: ")], notes


@pytest.mark.parametrize(
    "code, kwargs, expect",
    [
        (EXIT_OK, {}, None),
        (EXIT_VOLATILE, {}, "make it durable: `remedy converge inv.py --limit h1`"),
        (
            EXIT_VOLATILE,
            {"blocked": True},
            "fix what blocks the durable path (above), then run "
            "`remedy converge inv.py --limit h1`",
        ),
        (EXIT_VOLATILE, {"boot_pending": True}, "--restart now`"),
        (EXIT_UNHEALTHY, {}, "`remedy converge inv.py --limit h1 --restart now`"),
        (
            EXIT_UNHEALTHY,
            {"unit_active": False},
            "`ssh root@h1 systemctl status tenstorrent-serving.service`",
        ),
        (EXIT_LOCKED, {}, "--wait 600`"),
        (EXIT_ERROR, {}, "`remedy status inv.py --limit h1`"),
    ],
)
def test_every_verdict_that_is_not_healthy_suggests_a_command(code, kwargs, expect):
    said = report.next_step(code, "h1", "inv.py", **kwargs)
    if expect is None:
        assert said is None
    else:
        assert expect in said, said


def test_the_suggested_command_can_be_pasted_whatever_the_inventory_path():
    said = report.next_step(EXIT_VOLATILE, "h1", "my inventories/prod.py")
    command = said.split("`")[1]
    assert shlex.split(command) == [
        "remedy", "converge", "my inventories/prod.py", "--limit", "h1",
    ]  # fmt: skip


def test_remedys_file_that_is_not_written_yet_is_not_said_to_force_anything():
    import dataclasses

    from tests.unit.test_options import recorded_definitions

    snap = dataclasses.replace(
        snapshot("emergency_override"), definitions=recorded_definitions("fresh")
    )
    assert snap.managed.content is None  # the seed state: no remedy.nix yet
    s = from_host_data("cfx-llm2", {})
    notes = report.host_status("cfx-llm2", s, snap).notes
    assert (
        "overrides: configuration.nix sets hugepagesPerCard = 2; remedy.nix will force (once "
        "a run writes it) 1 (tt-stack#49)"
    ) in notes, notes
    assert not [n for n in notes if "remedy.nix forces" in n]


@pytest.mark.parametrize(
    "window, said",
    [
        ("never", "until a reboot (restart_window is never; --restart now activates it)"),
        ("Mon..Fri 02:00-04:00", "until a reboot or the restart window Mon..Fri 02:00-04:00"),
        ("always", "until the next run restarts it (restart_window is always)"),
    ],
)
def test_the_old_generation_runs_until_what_the_restart_window_allows(window, said):
    from remedy.core.config.restarts import old_generation_until

    assert old_generation_until(window) == said
