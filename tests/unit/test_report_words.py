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
from remedy.errors import (
    EXIT_BOOT_PENDING,
    EXIT_ERROR,
    EXIT_LOCKED,
    EXIT_OK,
    EXIT_UNHEALTHY,
    EXIT_VOLATILE,
)

FIXTURES = Path(__file__).parent.parent / "facts" / "serving.HostSnapshot"
BLOCKED = "durable path not possible: "


def snapshot(case: str):
    lines = json.loads((FIXTURES / f"{case}.json").read_text())["output"]
    return facts.serving.HostSnapshot().process(lines)


def status(case: str, **data):
    return report.host_status("cfx-llm2", from_host_data("cfx-llm2", data), snapshot(case))


GUARD_LINE = (
    "/bin/sh /nix/store/0000000000000000000000000000000-remedy-memory-guard check 4 "
    "tenstorrent-serving.service"
)


def guarded_status(case: str, **data):
    """CASE as recorded (before issue 46), with the memory guard's ExecCondition= in its
    live and next-boot unit, as remedy's file gives it since."""
    import dataclasses

    snap = snapshot(case)
    unit = snap.unit
    unit = dataclasses.replace(
        unit,
        now=dataclasses.replace(unit.now, exec_condition=(GUARD_LINE,)),
        after_reboot=dataclasses.replace(unit.after_reboot, exec_condition=(GUARD_LINE,)),
    )
    snap = dataclasses.replace(snap, unit=unit)
    return report.host_status("cfx-llm2", from_host_data("cfx-llm2", data), snap)


def test_a_durable_host_without_the_memory_guard_is_told_to_converge():
    r = status("durable_read_once")
    d = next(x for x in r.drifts if x.key == "memory_guard")
    assert (d.live, d.next_boot, d.state) == ("off", "off", "drifted"), d
    assert guarded_status("durable_read_once").exit_code == EXIT_OK
    assert r.exit_code == EXIT_VOLATILE
    said = report.next_of(r, "inv.py", SSH, "tenstorrent-serving.service")
    assert "remedy converge" in said, said


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


SSH = "ssh -p 2222 -i '/k/my key' -o UserKnownHostsFile=/k/known root@127.0.0.1"
ANY = {"ssh": SSH}
UNMANAGED = {"unmanaged": ("/run/systemd/system/u.service.d/x y.conf",), "managed_drift": False}

# every outcome class a report can end in, and what its next: must say (issue 45 item 5)
CLASSES = [
    ("healthy and durable", EXIT_OK, {}, "nothing to do: healthy and durable"),
    (
        "healthy, a kernel parameter waits for a reboot",
        EXIT_OK,
        {"reboot_for": ("mitigations",)},
        "a reboot applies mitigations",
    ),
    (
        "the host could not be read",
        EXIT_ERROR,
        {"error": "could not connect over SSH"},
        f"`{SSH} true`",
    ),
    ("the run failed", EXIT_ERROR, {}, "`remedy audit --host h1 --last`"),
    (
        "volatile: a managed setting",
        EXIT_VOLATILE,
        {},
        "make it durable: `remedy converge inv.py --limit h1`",
    ),
    (
        "volatile: only unmanaged state",
        EXIT_VOLATILE,
        UNMANAGED,
        "`remedy adopt inv.py '/run/systemd/system/u.service.d/x y.conf' --host h1 --issue REPO#N`",
    ),
    (
        "volatile: only a kernel parameter",
        EXIT_VOLATILE,
        {"managed_drift": False, "reboot_for": ("mitigations",)},
        "reboot h1 when convenient: the next boot applies mitigations",
    ),
    (
        "volatile: blocked",
        EXIT_VOLATILE,
        {"blocked": True},
        "fix what blocks the durable path (above), then run `remedy converge inv.py --limit h1`",
    ),
    (
        "broken: tool calls unparsed",
        EXIT_UNHEALTHY,
        {},
        "`remedy converge inv.py --limit h1 --restart now`",
    ),
    (
        "broken: the unit is not active",
        EXIT_UNHEALTHY,
        {"unit_active": False},
        f"`{SSH} systemctl status tenstorrent-serving.service`",
    ),
    ("locked", EXIT_LOCKED, {}, "--wait 600`"),
    (
        "boot pending",
        EXIT_BOOT_PENDING,
        {},
        "reboot h1 when convenient, drained and verified: `remedy reboot inv.py --limit h1 "
        "--now`; or activate the pending generation now",
    ),
]


@pytest.mark.parametrize("name, code, kwargs, expect", CLASSES, ids=[c[0] for c in CLASSES])
def test_every_outcome_class_ends_with_its_next_step(name, code, kwargs, expect):
    said = report.next_step(code, "h1", "inv.py", **{**ANY, **kwargs})
    assert said and expect in said, said
    for command in said.split("`")[1::2]:  # every command in it can be pasted
        assert shlex.split(command), said


def test_every_exit_code_a_report_gives_has_a_class_in_the_table():
    from remedy import errors

    codes = {
        v for n in dir(errors) if n.startswith("EXIT_") and isinstance(v := getattr(errors, n), int)
    }
    # exit 2 (bad input) is said before connecting, by the error itself: no report
    assert codes - {errors.EXIT_USAGE} <= {c[1] for c in CLASSES}


def test_only_unmanaged_state_never_suggests_the_converge_that_has_nothing_to_do():
    said = report.next_step(EXIT_VOLATILE, "h1", "inv.py", **{**ANY, **UNMANAGED})
    assert "remedy converge" not in said, said
    removal = said.split("`")[3]
    argv = shlex.split(removal)
    assert argv[:8] == shlex.split(SSH)
    # what the host's shell gets (ssh joins its words with blanks)
    assert shlex.split(" ".join(argv[8:]), posix=True) == [
        "rm", "--", "/run/systemd/system/u.service.d/x y.conf", "&&", "systemctl",
        "daemon-reload",
    ]  # fmt: skip


def test_the_ssh_line_reaches_the_host_as_the_inventory_does():
    data = {"ssh_hostname": "10.0.0.5", "ssh_port": 2201, "ssh_user": "ops",
            "ssh_key": "/keys/a b", "ssh_known_hosts_file": "/keys/known"}  # fmt: skip
    argv = shlex.split(report.ssh_command("oc2", data))
    assert argv == ["ssh", "-p", "2201", "-i", "/keys/a b", "-o",
                    "UserKnownHostsFile=/keys/known", "ops@10.0.0.5"]  # fmt: skip
    assert shlex.split(report.ssh_command("oc2", {})) == ["ssh", "root@oc2"]


@pytest.mark.parametrize(
    "case, code",
    [("durable_read_once", EXIT_OK), ("emergency_override", EXIT_VOLATILE),
     ("fresh", EXIT_UNHEALTHY), ("runtime_debug", EXIT_VOLATILE)],
)  # fmt: skip
def test_a_recorded_host_gets_a_next_step_for_its_verdict(case, code):
    r = guarded_status(case)
    assert r.exit_code == code
    said = report.next_of(r, "inv.py", SSH, "tenstorrent-serving.service")
    assert said, r.verdict
    if code == EXIT_OK:
        assert said.startswith("nothing to do"), said
    else:
        assert "`" in said, said  # a command to run


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
