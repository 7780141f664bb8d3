"""remedy reboot's pure part (remedy.core.run.reboot): its gates' words, the drain's
slices, the exit codes as converge's table, and reboot_timeout_s checked before
connecting."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from remedy.core.config.host_data import from_host_data
from remedy.core.run import reboot as core
from remedy.errors import ConfigError
from tests.conftest import PROJECT

TUESDAY_3AM = datetime(2026, 12, 1, 3, 0, tzinfo=timezone(timedelta(hours=1)))


def test_the_window_gate_follows_restart_window_and_now_overrides_it():
    never = from_host_data("h", {})
    assert core.window_refusal(never, False, TUESDAY_3AM) == (
        "restart_window is never (--now reboots at once)"
    )
    assert core.window_refusal(never, True, TUESDAY_3AM) is None
    nightly = from_host_data("h", {"restart_window": "02:00-04:00"})
    assert core.window_refusal(nightly, False, TUESDAY_3AM) is None
    closed = core.window_refusal(nightly, False, TUESDAY_3AM + timedelta(hours=2))
    assert closed.startswith("restart_window 02:00-04:00 is closed; it opens Wed 2026-12-02 02:00")
    unread = core.window_refusal(nightly, False, None)
    assert unread == "restart_window 02:00-04:00: the host's clock was not read"
    assert (
        core.window_refusal(from_host_data("h", {"restart_window": "always"}), False, None) is None
    )


def test_the_drain_waits_in_slices_and_its_last_one_ends_drain_timeout_s():
    s = from_host_data("h", {"drain_timeout_s": 25})
    first = core.drain(s, "r", 0)
    assert (first.wait_s, first.first, first.last, first.urgent) == (10, True, False, False)
    middle = core.drain(s, "r", 12)
    assert (middle.wait_s, middle.first, middle.last) == (10, False, False)
    last = core.drain(s, "r", 16)
    assert (last.wait_s, last.first, last.last) == (9, False, True)
    assert core.drain(s, "r", 30).wait_s == 0


@pytest.mark.parametrize(
    ("outcome", "fault", "status", "code"),
    [
        (core.REBOOTED, None, 0, 0),
        (core.REFUSED, None, 3, 3),  # the next boot lacks the fix: volatile
        (core.REFUSED, None, 6, 6),  # the window: still boot pending
        (core.FAILED, core.NOT_BACK, None, 1),
        (core.FAILED, core.NO_UNIT, 6, 4),
        (core.FAILED, core.UNVERIFIED, 4, 4),
        (core.FAILED, core.LOW_MEMORY, 0, 1),
        (core.FAILED, core.OUT_OF_SYNC, 3, 1),
        (core.FAILED, core.LOW_MEMORY, 4, 1),  # an error outranks broken, as in converge
        (core.UNREACHED, None, None, 1),
    ],
)
def test_exit_codes_are_converges_a_failed_reboot_is_never_0_or_6(outcome, fault, status, code):
    rec = core.HostReboot("h", outcome=outcome, fault=fault, status_code=status)
    assert rec.exit_code == code


def test_the_memory_reclaimed_and_the_downtime_come_from_what_was_read():
    rec = core.HostReboot("h", outcome=core.REBOOTED, mem_before_kb=3_000_000,
                          mem_after_kb=7_100_000, reboot_at=100.0, verified_at=142.5)  # fmt: skip
    assert rec.reclaimed_gb == round(4_100_000 * 1024 / 1e9, 2)
    assert rec.downtime_s == 42.5
    doc = rec.to_json()
    assert doc["mem_reclaimed_gb"] == rec.reclaimed_gb and doc["downtime_s"] == 42.5
    assert "MemAvailable 3.1 GB before, 7.3 GB after (+4.2 GB)" in rec.verdict()
    assert core.HostReboot("h").reclaimed_gb is None


@pytest.mark.parametrize("value", [0, 29, 86401, "ten", True, 90.5, -1])
def test_a_bad_reboot_timeout_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match="data key 'reboot_timeout_s'"):
        from_host_data("h", {"reboot_timeout_s": value})


def test_a_bad_reboot_timeout_stops_remedy_reboot_before_connecting_naming_the_file(tmp_path):
    """The inventory names a host no one can reach: the error comes before any
    connection (an attempt would say it could not connect)."""
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('h1', {'ssh_hostname': '192.0.2.1', 'reboot_timeout_s': 5})]\n")
    ran = subprocess.run(["remedy", "reboot", str(inv), "--now"], capture_output=True,
                         text=True, cwd=PROJECT, timeout=60)  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    said = " ".join(ran.stderr.split())
    assert f"{inv}: host h1: data key 'reboot_timeout_s' must be between 30 and 86400" in said
    assert "connect" not in said


def test_a_bad_window_stops_remedy_reboot_before_connecting(tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('h1', {'ssh_hostname': '192.0.2.1', 'restart_window': '25:00'})]\n")
    ran = subprocess.run(["remedy", "reboot", str(inv), "--dry"], capture_output=True,
                         text=True, cwd=PROJECT, timeout=60)  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert "restart_window" in ran.stderr and "connect" not in ran.stderr


def test_a_second_run_over_the_same_hosts_exits_5_naming_the_fleet_lock(tmp_path):
    """The converge's fleet lock (remedy.lock), held here as a run would hold it: remedy
    reboot over the same host waits --wait, then exits 5, before connecting."""
    import json

    from remedy import lock

    data = {"ssh_hostname": "192.0.2.1"}
    inv = tmp_path / "inv.py"
    inv.write_text(f"hosts = [('h1', {data!r})]\n")
    held = lock.acquire_fleet({"h1": data}, 0, "another remedy reboot (pid 1)", lambda _m: None)
    try:
        ran = subprocess.run(["remedy", "reboot", str(inv), "--now", "--wait", "0", "--json"],
                             capture_output=True, text=True, cwd=PROJECT, timeout=60)  # fmt: skip
    finally:
        held.release()
    assert ran.returncode == 5, ran.stderr
    (host,) = json.loads(ran.stdout)["hosts"]
    assert host["verdict"].startswith("another run holds the fleet lock: "), host
    assert "another remedy reboot (pid 1)" in host["verdict"]


def test_a_trial_on_a_grub_host_stops_remedy_reboot_before_connecting_naming_it(tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('h1', {'ssh_hostname': '192.0.2.1', 'boot_loader': 'grub'})]\n")
    ran = subprocess.run(["remedy", "reboot", str(inv), "--now", "--trial", "--dry"],
                         capture_output=True, text=True, cwd=PROJECT, timeout=60)  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    said = " ".join(ran.stderr.split())
    assert "h1: a trial boot needs systemd-boot" in said and "boot_loader is grub" in said, said
    assert "connect over SSH" not in said


def test_a_fall_back_says_whether_the_default_ever_named_the_failed_entry():
    rec = core.HostReboot("h", trial_entry="g3.conf", trial_previous="g2.conf",
                          trial_outcome="fell back", trial_defaults=["g2.conf"] * 3)  # fmt: skip
    assert rec.to_json()["trial"]["default_never_the_trial"] is True
    why = core.fell_back_why("h", "tool calls not parsed", "g3.conf", "g2.conf", "g2.conf",
                             rec.trial_defaults)  # fmt: skip
    assert "h is back on the previous generation g2.conf" in why
    assert "the boot default was never g3.conf" in why
    rec.trial_defaults[1] = "g3.conf"
    assert rec.to_json()["trial"]["default_never_the_trial"] is False
    why = core.fell_back_why("h", "x", "g3.conf", "g2.conf", "g3.conf", rec.trial_defaults)
    assert "booted g3.conf, not the previous generation g2.conf" in why
    assert "the boot default named g3.conf at a step" in why
    assert core.HostReboot("h").to_json()["trial"] is None


def test_converge_reports_a_rebooted_host_as_read_after_its_boot_or_unread():
    """converge --reboot-if-needed: a host it rebooted is what the reboot read after the
    boot; one rebooted and never read again is unreadable, never the state from before;
    one whose reboot did not start keeps the run's read."""
    from remedy.cli.converge import _reads_after_reboots
    from remedy.fleet import HostRead

    before = {n: HostRead(n, snapshot=f"{n} before", ssh=f"ssh {n}") for n in "abc"}
    back = core.HostReboot("a", outcome=core.REBOOTED, reboot_at=1.0,
                           read_after=HostRead("a", snapshot="a after"))  # fmt: skip
    lost = core.HostReboot("b", outcome=core.FAILED, reboot_at=1.0, why="not back in 600s")
    refused = core.HostReboot("c", outcome=core.REFUSED, gate="window")
    a, b, c = _reads_after_reboots(list(before.values()), {"a": back, "b": lost, "c": refused})
    assert (a.snapshot, a.error, a.ssh) == ("a after", None, "ssh a")
    assert (b.snapshot, b.ssh) == (None, "ssh b")
    assert b.error == "not read after its reboot: not back in 600s"
    assert c is before["c"]


def test_a_fall_back_is_followed_by_its_settle_or_why_it_did_not_settle():
    rec = core.HostReboot("h", trial_entry="g3.conf", trial_outcome="fell back",
                          trial_settled="settled: rolled back from the failed g3.conf",
                          trial_failed="/nix/store/x-sys", trial_failed_generation="3")  # fmt: skip
    trial = rec.to_json()["trial"]
    assert (trial["failed_generation"], trial["failed_system"]) == ("3", "/nix/store/x-sys")
    assert trial["settled"] == "settled: rolled back from the failed g3.conf"
    assert core.settled_why("fell back", "settled: x", False) == "fell back; settled: x"
    assert core.settled_why("fell back", "y", True) == "fell back; not settled: y"
