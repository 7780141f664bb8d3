"""Issue 46 item 3 on twins: ``remedy reboot``, a planned and proven reboot.

Each twin reboots as a host does (``systemctl reboot`` inside it; its /run is wiped),
and its persistent journal says when each boot began and ended, and when its server
answered its first tool call after the boot: a host's time down.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from remedy.twin.machine import TwinError
from tests.conftest import PROJECT, probe_inside, status_settings, twin_inventory, wait_probe
from tests.twin.test_rollout import fleet_inventory, most_at_once

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
OVERRIDE = "/run/tt-serving-override/start"
JOURNAL = "/var/lib/remedy/reboot.journal"
PINNED = "/run/twin-kernel/pinned-kB"  # the twin's leak model (remedy/twin/files/twin-kernel)
LEAK_KB = 4404019  # what one start of the server pins there (its default)


def remedy(*argv: str, log=None) -> tuple[int, dict, str]:
    """``remedy ARGV --json``: (exit code, its document, what it said on stderr)."""
    env = {**os.environ, **({"REMEDY_AUDIT_LOG": str(log)} if log else {})}
    proc = subprocess.run(["remedy", *argv, "--json"], capture_output=True, text=True,
                          cwd=PROJECT, timeout=1500, env=env)  # fmt: skip
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stderr[-3000:]}") from None
    return proc.returncode, doc, proc.stderr


def boot_id(twin) -> str:
    return twin.exec(["cat", BOOT_ID]).stdout.strip()


def booted(twin) -> str | None:
    """The boot id, or None while the twin reboots."""
    try:
        return boot_id(twin)
    except TwinError:
        return None


def starts_this_boot(twin) -> int:
    """How many times the server finished loading in this boot (its own log line)."""
    out = twin.exec(["journalctl", "-q", "-b", "0", "-u", UNIT, "-o", "cat"], check=False).stdout
    return out.count("Application startup complete")


def records(log, host: str) -> list[dict]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [r for r in map(json.loads, lines) if r["host"] == host and r["runbook"] == "reboot"]


def down_window(twin) -> tuple[float, float]:
    """(its server's stop in the previous boot, the first tool call its server answered
    in this boot), from the twin's own journal: systemd's stop job of the serving unit
    (its last in the previous boot), and the server's access line."""
    stops = [
        int(entry["__REALTIME_TIMESTAMP"]) / 1e6
        for entry in journal_entries(twin, -1, UNIT)
        if entry.get("JOB_TYPE") == "stop" and entry.get("UNIT") == UNIT
    ]
    assert stops, f"{twin.name}: no stop of {UNIT} in its previous boot"
    for entry in journal_entries(twin, 0, UNIT):
        if "POST /v1/chat/completions" in str(entry.get("MESSAGE")):
            return stops[-1], int(entry["__REALTIME_TIMESTAMP"]) / 1e6
    raise AssertionError(f"{twin.name} answered no tool call after its boot")


def journal_entries(twin, boot: int, unit: str) -> list[dict]:
    out = twin.exec(["journalctl", "-q", "-b", str(boot), "-u", unit, "-o", "json"]).stdout
    return [json.loads(line) for line in out.splitlines()]


def boots(twin) -> list[str]:
    """The boot ids of the twin's journal, oldest first (without dashes)."""
    listed = json.loads(twin.exec(["journalctl", "--list-boots", "-o", "json"]).stdout)
    return [b["boot_id"].replace("-", "") for b in listed]


def converged_to_boot_pending(inventory: str, log) -> None:
    code, doc, said = remedy("converge", inventory, log=log)
    assert code == 6, (code, [h["verdict"] for h in doc["hosts"]], said[-2000:])


def test_from_the_seed_a_converge_then_a_reboot_is_healthy_and_durable(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    inventory = str(twin_inventory(tmp_path / "inv.py", twin))
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)
    twin.exec(["systemctl", "restart", UNIT])  # a start by hand: the leak pins more
    wait_probe(twin)
    pinned = int(twin.exec(["cat", PINNED]).stdout)
    before = boot_id(twin)

    # --dry: the plan, nothing changes; without --now the window (never) refuses
    code, doc, _ = remedy("reboot", inventory, "--dry", "--now", log=log)
    assert code == 6 and any("would reboot into /nix/store/" in x for x in doc["plan"]), doc
    code, doc, _ = remedy("reboot", inventory, log=log)
    (host,) = doc["hosts"]
    assert code == 6 and host["outcome"] == "refused" and host["gate"] == "window", host
    assert host["why"] == "restart_window is never (--now reboots at once)"
    assert boot_id(twin) == before

    code, doc, said = remedy("reboot", inventory, "--now", log=log)
    (host,) = doc["hosts"]
    assert code == 0, (host, said[-3000:])
    assert host["outcome"] == "rebooted" and host["status"]["exit_code"] == 0, host
    assert host["boot_id_before"] == before != host["boot_id_after"] == boot_id(twin)
    # the wiped /run took the override with it: the durable configuration serves
    assert twin.exec(["test", "-e", OVERRIDE], check=False).returncode != 0
    assert probe_inside(twin).outcome == "parsed"
    code, settings = status_settings(twin)
    assert code == 0 and all(d["state"] == "in sync" for d in settings.values()), settings
    assert starts_this_boot(twin) == 1  # started once after the boot, by the boot
    assert "Socket exception" not in said  # the lost session is no error (paramiko's)
    # the memory reclaimed, in the report and the audit, from what the host read
    # (the twin's leak model: every start since boot pinned LEAK_KB, the boot freed
    # them all, and the one start after it pinned LEAK_KB again)
    before_kb, after_kb = host["mem_available_before_kb"], host["mem_available_after_kb"]
    assert after_kb - before_kb == pinned - LEAK_KB >= LEAK_KB, (before_kb, after_kb, pinned)
    assert host["mem_reclaimed_gb"] == round((pinned - LEAK_KB) * 1024 / 1e9, 2)
    record = records(log, twin.name)[-1]
    assert record["result"] == "ok", record
    assert record["details"]["mem_reclaimed_gb"] == host["mem_reclaimed_gb"]
    assert record["details"]["boot_id_after"] == host["boot_id_after"]
    assert (record["probe_before"], record["probe_after"]) == ("parsed", "parsed"), record
    assert record["details"]["restarts"] == 1  # the server stopped and started once
    # the reboot journal on the host is closed, root's, mode 0600
    assert twin.exec(["stat", "-c", "%u %a", JOURNAL]).stdout.split() == ["0", "600"]
    assert '"state": "verified"' in twin.exec(["cat", JOURNAL]).stdout


def test_a_reboot_is_refused_when_the_next_boot_lacks_the_fix(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)  # the seed: the fix lives in /run only
    inventory = str(twin_inventory(tmp_path / "inv.py", twin))
    log = tmp_path / "audit.jsonl"
    before = boot_id(twin)
    code, doc, _ = remedy("reboot", inventory, "--now", log=log)
    (host,) = doc["hosts"]
    assert code == 3, host  # volatile: a reboot would break it
    assert host["outcome"] == "refused" and host["gate"] == "next boot", host
    why = host["why"]
    assert why.startswith("the next boot (/nix/store/") and " lacks tool-call parser" in why
    assert "QWEN36_SDPA_STREAMING" in why
    assert why.endswith(f"converge it durably first: remedy converge {inventory} --limit "
                        f"{twin.name}, then reboot")  # fmt: skip
    assert boot_id(twin) == before
    assert twin.exec(["test", "-e", OVERRIDE], check=False).returncode == 0
    record = records(log, twin.name)[-1]
    assert record["result"] == "refused" and record["details"]["gate"] == "next boot"
    # what a person reads fits 80 columns: the report, and the plan of --dry
    for argv in (["--now"], ["--now", "--dry"]):
        text = subprocess.run(["remedy", "reboot", inventory, *argv], capture_output=True,
                              text=True, cwd=PROJECT, timeout=300).stdout  # fmt: skip
        assert "refused at the gate 'next boot'" in " ".join(text.split()), text
        assert max(map(len, text.splitlines())) <= 80, text


def test_a_fleet_reboots_one_host_at_a_time_the_canary_first_then_a_failed_trial_stops_it(
    make_twin, tmp_path
):
    """Four twins, max_restarting 1: each host down (its server's stop to its first
    tool call answered after the boot, from its own journal) alone, the canary first.
    Then ``--trial`` where the canary's next boot is a generation whose server fails:
    the canary falls back to the generation it ran, the rollout stops there, no other
    host reboots, and the report and the audit say so."""
    from remedy.twin import fixtures
    from tests.twin.test_trial_boot import entry_of, new_generation, realpath
    from tests.twin.test_trial_boot import trial_boot as trial_of

    twins = [make_twin(with_emergency_override=True) for _ in range(4)]
    canary, others = twins[0], twins[1:]
    # the canary's failing server is found by the verify's probe, which waits for it up
    # to ready_timeout_s (a unit between Restart= attempts is still starting)
    inventory = fleet_inventory(tmp_path / "fleet.py", twins, max_restarting=1,
                                ready_timeout_s=60)  # fmt: skip
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)
    code, doc, said = remedy("reboot", inventory, "--now", log=log)
    assert code == 0, ([h["verdict"] for h in doc["hosts"]], said[-3000:])
    windows = {t.name: down_window(t) for t in twins}
    assert most_at_once(windows.values()) == 1, windows  # never two down at once
    assert [r["host"] for r in doc["rollout"]["hosts"] if r["canary"]] == [canary.name]
    assert all(windows[canary.name][1] < w[0] for n, w in windows.items() if n != canary.name)
    for host in doc["hosts"]:
        assert host["outcome"] == "rebooted" and host["status"]["exit_code"] == 0, host

    # the trial: the canary's next boot fails its server; the others' is the one they run
    previous = realpath(canary, "/run/booted-system")
    bad = new_generation(canary, fixtures.FAILING_SERVER_ENV, "no Tenstorrent device")
    old_entry, bad_entry = entry_of(canary, previous), entry_of(canary, bad)
    before = {t.name: boots(t) for t in twins}
    code, doc, said = remedy("reboot", inventory, "--now", "--trial", log=log)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert code == 4, ({n: h["verdict"] for n, h in hosts.items()}, said[-3000:])
    first = hosts[canary.name]
    assert first["outcome"] == "failed" and first["exit_code"] == 4, first
    trial = first["trial"]
    assert (trial["entry"], trial["previous"], trial["outcome"]) == (
        bad_entry, old_entry, "fell back"), trial  # fmt: skip
    assert trial["defaults"] == [old_entry] * 3 and trial["default_never_the_trial"], trial
    assert f"back on the previous generation {old_entry}" in first["why"], first["why"]
    assert doc["rollout"]["stopped"].startswith(
        f"the rollout stopped after the canary {canary.name} failed (the trial boot of "
        f"{bad_entry} failed"
    ), doc["rollout"]
    # the canary booted twice (the trial, the fall back) and serves its previous
    # generation; no other host booted
    ids = boots(canary)
    assert ids[:-2] == before[canary.name] and len(ids) == len(before[canary.name]) + 2, ids
    assert first["boot_id_before"].replace("-", "") == before[canary.name][-1], first
    assert first["boot_id_after"].replace("-", "") == ids[-1], first
    assert realpath(canary, "/run/booted-system") == previous
    after = trial_of(canary).read()  # settled: loader.conf names it, no pin
    assert (after.booted_entry, after.default_entry) == (old_entry, ""), after
    assert after.conf_default == after.next_entry == old_entry, after
    assert realpath(canary, "/nix/var/nix/profiles/system") == previous
    assert f"rolled back from the failed {bad_entry}" in first["why"], first["why"]
    assert probe_inside(canary).outcome == "parsed"
    for t in others:
        assert boots(t) == before[t.name], t.name
        assert hosts[t.name]["outcome"] == "not started", hosts[t.name]
        assert hosts[t.name]["trial"] is None, hosts[t.name]
    record = records(log, canary.name)[-1]
    assert record["result"] == "failed" and record["details"]["trial"] == trial, record
    assert f"the boot default was never {bad_entry}" in record["details"]["why"]
    assert all(records(log, t.name)[-1]["result"] == "not started" for t in others)


def fail_at_boot(twin, unit: str) -> None:
    """UNIT fails to start from the next boot on (a drop-in in /etc, which outlives it)."""
    twin.exec(["mkdir", "-p", f"/etc/systemd/system/{unit}.d"])
    twin.exec(["tee", f"/etc/systemd/system/{unit}.d/zz-test-fail.conf"],
              input="[Service]\nExecStartPre=/bin/false\n")  # fmt: skip


def test_a_canary_back_without_its_server_stops_the_rollout(make_twin, tmp_path):
    twins = [make_twin(with_emergency_override=True) for _ in range(4)]
    canary, others = twins[0], twins[1:]
    inventory = fleet_inventory(tmp_path / "fleet.py", twins, max_restarting=1)
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)
    fail_at_boot(canary, UNIT)
    before = {t.name: boot_id(t) for t in others}
    code, doc, said = remedy("reboot", inventory, "--now", log=log)
    assert code == 4, ([h["verdict"] for h in doc["hosts"]], said[-3000:])
    hosts = {h["host"]: h for h in doc["hosts"]}
    why = hosts[canary.name]["why"]
    assert hosts[canary.name]["outcome"] == "failed", hosts[canary.name]
    assert hosts[canary.name]["fault"] == "no serving unit"
    assert why.startswith(f"came back without the serving unit: {UNIT} is "), why
    assert doc["rollout"]["stopped"].startswith(
        f"the rollout stopped after the canary {canary.name} failed (came back without"
    ), doc["rollout"]
    for t in others:  # no further host rebooted
        assert boot_id(t) == before[t.name]
        assert hosts[t.name]["outcome"] == "not started", hosts[t.name]
    assert records(log, canary.name)[-1]["result"] == "failed"
    assert all(records(log, t.name)[-1]["result"] == "not started" for t in others)


def test_a_host_that_does_not_come_back_in_time_is_named(make_twin, tmp_path):
    """A trial boot (--trial) of the converge's generation that no SSH session reaches
    within reboot_timeout_s: named, and the report and the audit say that a power
    cycle returns it to the previous generation, which one does. The next `remedy
    reboot` settles the trial that was never blessed before its gates."""
    from remedy.twin import machine
    from tests.twin.test_trial_boot import boot_state, entry_of, realpath

    twin = make_twin(with_emergency_override=True)
    inventory = str(twin_inventory(tmp_path / "inv.py", twin, reboot_timeout_s=30))
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)
    previous = realpath(twin, "/run/booted-system")
    new = realpath(twin, "/nix/var/nix/profiles/system")
    old_entry, new_entry = entry_of(twin, previous), entry_of(twin, new)
    fail_at_boot(twin, "ssh.service")  # it boots, and no SSH session reaches it
    code, doc, _ = remedy("reboot", inventory, "--now", "--trial", log=log)
    (host,) = doc["hosts"]
    assert code == 1 and host["outcome"] == "failed" and host["fault"] == "not back", host
    assert host["why"].startswith("did not come back within reboot_timeout_s=30s: no new SSH "
                                  "session with a new boot id")  # fmt: skip
    power_cycle = (
        f"{twin.name} did not come back from its trial boot of {new_entry}: a power cycle "
        f"boots {old_entry}, the boot default (the generation that ran before)"
    )
    assert power_cycle in host["why"], host["why"]
    assert (host["trial"]["outcome"], host["trial"]["previous"]) == ("not back", old_entry)
    record = records(log, twin.name)[-1]
    assert record["result"] == "failed" and power_cycle in record["details"]["why"], record
    # the trial booted (its one-shot spent); the default is still the previous entry
    assert boot_state(twin) | {"booted": None} == {
        "booted": None, "selected": new_entry, "default": old_entry, "oneshot": None
    }  # fmt: skip
    assert realpath(twin, "/run/booted-system") == new
    twin.exec(["rm", "/etc/systemd/system/ssh.service.d/zz-test-fail.conf"])
    machine.reboot(twin.name, serving=False)  # the power cycle the report names
    assert realpath(twin, "/run/booted-system") == previous
    # the trial was never blessed: the next remedy reboot settles it before its gates
    # (--dry says it would), so no later run tries the generation that hung again
    _, doc, said = remedy("reboot", inventory, "--now", "--trial", "--dry", log=log)
    earlier = doc["hosts"][0]["earlier"] or ""
    assert f"an earlier trial's fall back: would settle the fall back from {new_entry}" in (
        earlier), (earlier, said[-3000:])  # fmt: skip
    assert realpath(twin, "/nix/var/nix/profiles/system") == new
    _, doc, said = remedy("reboot", inventory, "--now", "--trial", log=log)
    (host,) = doc["hosts"]
    assert f"settled: rolled back from the failed {new_entry}" in (host["earlier"] or ""), (
        host, said[-3000:])  # fmt: skip
    assert realpath(twin, "/nix/var/nix/profiles/system") == previous
    assert boot_state(twin)["default"] is None  # the pin is gone, loader.conf names it
    # its gates then read the settled next boot: the generation before the converge
    assert (host["outcome"], host["gate"]) == ("refused", "next boot"), host
    assert realpath(twin, "/run/booted-system") == previous  # not rebooted again


def test_sigterm_while_the_host_comes_back_leaves_a_record_the_next_run_reports(
    make_twin, tmp_path
):
    twin = make_twin(with_emergency_override=True)
    inventory = str(twin_inventory(tmp_path / "inv.py", twin))
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)
    fail_at_boot(twin, "ssh.service")  # the wait lasts until the test lets it end
    before = boot_id(twin)
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    proc = subprocess.Popen(["remedy", "reboot", inventory, "--now", "--json"], cwd=PROJECT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while booted(twin) in (before, None):  # the reboot happened: the run waits for it
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(1)
        # a second reboot run over the same host (a copy of the inventory) waits for the
        # fleet lock, then exits 5 and reboots nothing
        copy = tmp_path / "copy.py"
        copy.write_text(Path(inventory).read_text())
        rebooted = boot_id(twin)
        code, doc, said = remedy("reboot", str(copy), "--now", "--wait", "1", log=log)
        assert code == 5, (code, doc, said[-3000:])
        (locked,) = doc["hosts"]
        assert "another remedy converge or reboot over the same hosts holds" in (
            locked["verdict"]), locked  # fmt: skip
        assert locked["next"].endswith(
            f"`remedy reboot {copy} --limit {twin.name} --now --wait 600`"), locked  # fmt: skip
        assert boot_id(twin) == rebooted and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143
    (host,) = json.loads(out)["hosts"]
    assert host["outcome"] == "interrupted", host
    assert "interrupted by SIGTERM while" in host["why"] and before in host["why"]
    assert records(log, twin.name)[-1]["result"] == "interrupted"
    twin.exec(["rm", "/etc/systemd/system/ssh.service.d/zz-test-fail.conf"])
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "reset-failed", "ssh.service"])
    started = twin.exec(["systemctl", "start", "ssh.service"], check=False)
    assert started.returncode == 0, twin.exec(["journalctl", "-b", "-u", "ssh.service",
                                                "-n", "30"], check=False).stdout  # fmt: skip
    code, doc, said = remedy("reboot", inventory, "--dry", "--now", log=log)
    (host,) = doc["hosts"]
    assert host["earlier"] is not None, host
    assert f"(boot id {before}) was never verified after" in host["earlier"]


ROTATE = """
import sys, time
which, host, log = sys.argv[1:4]
with open(log, "a") as f:
    f.write(f"{time.time():.3f} {which} {host}\\n")
"""


def test_a_stop_during_the_drain_leaves_the_host_serving_and_back_in_rotation(make_twin, tmp_path):
    """SIGTERM before the reboot (its drain waits for a held request): not rebooted,
    rotation_in after rotation_out; then a reboot with the hooks around it."""
    import sys

    from tests.conftest import HeldRequest

    twin = make_twin(with_emergency_override=True)
    script, rotations = tmp_path / "rotate.py", tmp_path / "rotation.log"
    script.write_text(ROTATE)
    hook = [sys.executable, str(script)]
    data = {
        "rotation_out": [*hook, "out", "{host}", str(rotations)],
        "rotation_in": [*hook, "in", "{host}", str(rotations)],
    }
    inventory = str(twin_inventory(tmp_path / "inv.py", twin, **data))
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)
    before = boot_id(twin)
    held = HeldRequest(twin, 45)  # ends before the second run's drain ends
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    proc = subprocess.Popen(["remedy", "reboot", inventory, "--now", "--json"], cwd=PROJECT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not rotations.exists():  # out of rotation: the drain comes next, and waits
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.5)
        time.sleep(2)
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143
    (host,) = json.loads(out)["hosts"]
    assert host["outcome"] == "interrupted" and "during the drain" in host["why"], host
    assert host["rotated_in"] is True
    (turn,) = json.loads(out)["rollout"]["hosts"]
    assert turn["outcome"] == "not started", turn  # never rebooted: no failure
    assert [x.split()[1:] for x in rotations.read_text().splitlines()] == [
        ["out", twin.name], ["in", twin.name]
    ]  # fmt: skip
    assert boot_id(twin) == before and probe_inside(twin).outcome == "parsed"
    assert records(log, twin.name)[-1]["result"] == "interrupted"
    held.result()

    rotations.unlink()
    code, doc, said = remedy("reboot", inventory, "--now", log=log)
    (host,) = doc["hosts"]
    assert code == 0, (host, said[-3000:])
    calls = [x.split() for x in rotations.read_text().splitlines()]
    assert [c[1:] for c in calls] == [["out", twin.name], ["in", twin.name]], calls
    assert float(calls[0][0]) < host["reboot_at"] < host["verified_at"] < float(calls[1][0])


def test_a_host_back_below_the_memory_threshold_is_named(make_twin, tmp_path):
    twin = make_twin(with_emergency_override=True)
    log = tmp_path / "audit.jsonl"
    inventory = str(twin_inventory(tmp_path / "inv.py", twin))
    converged_to_boot_pending(inventory, log)
    # the next boot has 6 GB available: the guard lets the server start (above 4 GB),
    # and its start pins the leak (4.5 GB), which leaves 1.6 GB
    twin.exec(["mkdir", "-p", "/etc/nixos-twin"])
    twin.exec(["tee", "/etc/nixos-twin/mem-available-kB"], input="6000000\n")
    code, doc, _said = remedy("reboot", inventory, "--now", log=log)
    (host,) = doc["hosts"]
    assert code == 1 and host["fault"] == "below the memory threshold", host
    assert host["why"].startswith("came back below the memory threshold: MemAvailable "), host
    assert (
        "MemAvailable 1.6 GB with the server loaded, below min_mem_available_gb 4 GB"
        in (host["why"])
    )
    assert host["mem_available_after_kb"] == 6000000 - LEAK_KB
    assert host["boot_id_after"] not in (None, host["boot_id_before"])
    record = records(log, twin.name)[-1]
    assert record["result"] == "failed" and record["details"]["why"] == host["why"]
    assert '"state": "failed"' in twin.exec(["cat", JOURNAL]).stdout


def host_series(prom, host: str) -> dict:
    """{(metric, its label other than host): value} of HOST in the textfile PROM, read
    with prometheus_client's parser."""
    return {
        (s.name, next((v for k, v in sorted(s.labels.items()) if k != "host"), None)): s.value
        for family in text_string_to_metric_families(prom.read_text())
        for s in family.samples
        if s.labels.get("host") == host
    }


def test_converge_reboots_a_host_that_needs_it_only_inside_its_window(make_twin, tmp_path):
    """Only inside its restart window; and the textfile of the run that rebooted says
    the host after the boot (not boot pending, healthy), not the read before it."""
    twin = make_twin(with_emergency_override=True)
    log = tmp_path / "audit.jsonl"
    prom = tmp_path / "remedy.prom"
    before = boot_id(twin)
    closed = str(twin_inventory(tmp_path / "never.py", twin))  # restart_window never
    code, doc, said = remedy("converge", closed, "--reboot-if-needed", "--textfile", str(prom),
                             log=log)  # fmt: skip
    (host,) = doc["hosts"]
    assert code == 6, (host["verdict"], said[-3000:])
    assert host["reboot"]["outcome"] == "refused" and host["reboot"]["gate"] == "window"
    assert "boot_pending" in host["reboot"]["needed"], host["reboot"]
    assert boot_id(twin) == before
    series = host_series(prom, twin.name)  # not rebooted: the run's read, boot pending
    assert series[("remedy_reboot_needed", "boot_pending")] == 1, series
    assert series[("remedy_boot_pending", None)] == 1
    assert series[("remedy_host_state", "boot_pending")] == 1

    opened = str(twin_inventory(tmp_path / "always.py", twin, restart_window="always"))
    code, doc, said = remedy("converge", opened, "--reboot-if-needed", "--textfile", str(prom),
                             log=log)  # fmt: skip
    (host,) = doc["hosts"]
    assert code == 0, (host, said[-3000:])
    assert host["reboot"]["outcome"] == "rebooted", host["reboot"]
    assert boot_id(twin) != before and probe_inside(twin).outcome == "parsed"
    # the textfile and the report say the host after the boot: what the run read before
    # it needed a reboot for (the switch this window allowed left the booted kernel's
    # parameters behind) is no reason now
    series = host_series(prom, twin.name)
    assert host["reboot"]["needed"], host["reboot"]
    for reason in ("boot_pending", "kernel", "initrd", "kernel_params", "memory_headroom"):
        assert series[("remedy_reboot_needed", reason)] == 0, (reason, series)
    assert series[("remedy_boot_pending", None)] == 0
    assert series[("remedy_host_state", "healthy")] == 1
    assert series[("remedy_host_state", "boot_pending")] == 0
    assert series[("remedy_host_exit_code", None)] == 0
    assert series[("remedy_toolcall_probe_ok", None)] == 1
    assert not [s for s in host["settings"] if s["state"] != "in sync"], host["settings"]
    code, doc, _ = remedy("status", opened, log=log)
    assert code == 0 and doc["hosts"][0]["reboot_needed"]["needed"] == [], doc["hosts"][0]


def test_after_the_guard_refused_a_restart_remedy_reboot_lets_the_server_start(make_twin, tmp_path):
    """The leak at the threshold (the twin's leak model): a restart by hand is refused
    by the memory guard, the server is down; remedy reboot brings it back, the boot's
    start goes through, and the memory reclaimed is the one start's leak the boot
    freed."""
    threshold_kb = 3906250  # min_mem_available_gb 4 in kB, as the guard takes it
    twin = make_twin(with_emergency_override=True)
    inventory = str(twin_inventory(tmp_path / "inv.py", twin))
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)  # the guard durable in the next boot
    twin.exec(["mkdir", "-p", "/etc/nixos-twin"])
    available = threshold_kb + 2 * LEAK_KB - 1000  # the boot's start, one more, no third
    twin.exec(["tee", "/etc/nixos-twin/mem-available-kB"], input=f"{available}\n")
    code, doc, said = remedy("reboot", inventory, "--now", log=log)  # into the guard's boot
    assert code == 0, (doc["hosts"][0], said[-3000:])
    twin.exec(["systemctl", "restart", UNIT])  # allowed: it leaves 1000 kB too little
    wait_probe(twin)
    twin.exec(["systemctl", "restart", UNIT], check=False)  # refused by the guard
    guard = twin.exec(["journalctl", "-q", "-b", "-u", UNIT, "-o", "cat"]).stdout
    assert "remedy-memory-guard: refused: " in guard, guard[-2000:]
    assert probe_inside(twin).outcome != "parsed"  # the server is down
    code, doc, said = remedy("reboot", inventory, "--now", log=log)
    (host,) = doc["hosts"]
    assert code == 0 and host["outcome"] == "rebooted", (host, said[-3000:])
    assert probe_inside(twin).outcome == "parsed"
    assert host["mem_available_before_kb"] == threshold_kb - 1000
    assert host["mem_available_after_kb"] == available - LEAK_KB
    assert host["mem_reclaimed_gb"] == round(LEAK_KB * 1024 / 1e9, 2)
    after = twin.exec(["journalctl", "-q", "-b", "-u", UNIT, "-o", "cat"]).stdout
    assert after.count("remedy-memory-guard: allowed: ") == 1, after[-2000:]


def test_a_trial_whose_server_fails_comes_back_on_the_previous_generation(make_twin, tmp_path):
    """Issue 46 item 4 through ``remedy reboot --trial``: a new generation whose server
    fails after boot is tried once; the verify fails, the host is rebooted into the
    generation that ran before, and the boot default never named the failed one (read
    by the trial's ``read`` program at each step, in the audit; and here, after). Then
    settled: the profile and loader.conf's default are the previous generation again,
    no pin, the failed generation kept in the history; status has no boot pending, and
    a plain reboot boots the previous generation."""
    from remedy.twin import fixtures, machine
    from tests.twin.test_trial_boot import boot_state, entry_of, new_generation, realpath
    from tests.twin.test_trial_boot import trial_boot as trial_of

    twin = make_twin(with_emergency_override=True)
    # the failing server is found by the verify's probe, which waits for it up to
    # ready_timeout_s (a unit between Restart= attempts is still starting)
    inventory = str(twin_inventory(tmp_path / "inv.py", twin, ready_timeout_s=60))
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)
    previous = realpath(twin, "/run/booted-system")
    bad = new_generation(twin, fixtures.FAILING_SERVER_ENV, "no Tenstorrent device")
    old_entry, bad_entry = entry_of(twin, previous), entry_of(twin, bad)
    before = trial_of(twin).read()
    assert (before.trial, before.running_entry, before.next_entry) == (
        "none", old_entry, bad_entry), before  # fmt: skip

    code, doc, _ = remedy("reboot", inventory, "--dry", "--now", "--trial", log=log)
    assert any(f"trial boot: {bad_entry} once" in line for line in doc["plan"]), doc["plan"]
    assert boot_state(twin)["oneshot"] is None  # --dry arms nothing

    code, doc, said = remedy("reboot", inventory, "--now", "--trial", log=log)
    (host,) = doc["hosts"]
    assert code != 0 and host["outcome"] == "failed", (code, host, said[-3000:])
    trial = host["trial"]
    assert (trial["entry"], trial["previous"], trial["outcome"]) == (
        bad_entry, old_entry, "fell back"), trial  # fmt: skip
    # the default at arm, on the trial's boot, on the fall back's boot: never the bad one
    assert trial["defaults"] == [old_entry] * 3 and trial["default_never_the_trial"], trial
    assert f"back on the previous generation {old_entry}" in host["why"], host["why"]
    assert f"the boot default was never {bad_entry}" in host["why"], host["why"]
    # two reboots: the trial's, then the one back into the default
    boots = json.loads(twin.exec(["journalctl", "--list-boots", "-o", "json"]).stdout)
    assert boots[-1]["index"] == 0 and boots[-3]["boot_id"].replace("-", "") == host[
        "boot_id_before"].replace("-", ""), boots[-3:]  # fmt: skip
    # settled: the profile and loader.conf are back on the previous generation, no pin
    # (as `nixos-rebuild boot --rollback`); the failed one stays in the history
    after = trial_of(twin).read()
    assert (after.booted_entry, after.default_entry, after.trial) == (
        old_entry, "", "none"), after  # fmt: skip
    assert after.conf_default == after.next_entry == old_entry, after
    assert realpath(twin, "/run/booted-system") == previous
    assert realpath(twin, "/nix/var/nix/profiles/system") == previous
    assert boot_state(twin)["default"] is None
    bad_gen = bad_entry.removeprefix("nixos-generation-").removesuffix(".conf")
    listed = twin.exec(["nix-env", "-p", "/nix/var/nix/profiles/system",
                        "--list-generations"]).stdout.splitlines()  # fmt: skip
    assert [g.split()[0] for g in listed if "(current)" in g] != [bad_gen], listed
    assert bad_gen in [g.split()[0] for g in listed], listed  # kept, not current
    assert (trial["failed_generation"], trial["failed_system"]) == (bad_gen, bad), trial
    assert f"rolled back from the failed {bad_entry}" in host["why"], host["why"]
    assert f"the failed generation {bad_gen} stays in the profile's history" in host["why"]
    record = records(log, twin.name)[-1]
    assert record["result"] == "failed", record
    assert record["details"]["trial"] == trial, record["details"]
    assert f"the boot default was never {bad_entry}" in record["details"]["why"]
    assert f"rolled back from the failed {bad_entry}" in record["details"]["why"]
    code, doc, _ = remedy("status", inventory, log=log)
    needed = doc["hosts"][0]["reboot_needed"]
    assert code != 6 and "boot_pending" not in needed["needed"], (code, needed)
    # a plain reboot (no trial, no pin) boots the previous generation
    machine.reboot(twin.name, serving=False)
    assert realpath(twin, "/run/booted-system") == previous
    assert boot_state(twin)["selected"] == old_entry


SLOW_ONESHOT = """#!/bin/sh
# the twin's bootctl, then a pause after the one-shot is set (the test's moment)
if [ "$1" = set-oneshot ] && [ -n "$2" ]; then
  /usr/local/bin/bootctl.real "$@" || exit
  touch /run/test-armed
  sleep 10
  exit 0
fi
exec /usr/local/bin/bootctl.real "$@"
"""


def test_a_passing_trial_is_blessed_and_the_new_entry_becomes_the_default(make_twin, tmp_path):
    """``remedy reboot --trial`` into the converge's generation, whose server is well.
    First SIGTERM once the trial is armed, before the reboot: disarmed (no one-shot,
    the default as before), not rebooted, serving and back in rotation. Then tried
    once, verified, and blessed: the next boot is the new entry."""
    import sys

    from tests.twin.test_trial_boot import boot_state, entry_of, realpath
    from tests.twin.test_trial_boot import trial_boot as trial_of

    twin = make_twin(with_emergency_override=True)
    script, rotations = tmp_path / "rotate.py", tmp_path / "rotation.log"
    script.write_text(ROTATE)
    hook = [sys.executable, str(script)]
    data = {
        "rotation_out": [*hook, "out", "{host}", str(rotations)],
        "rotation_in": [*hook, "in", "{host}", str(rotations)],
    }
    inventory = str(twin_inventory(tmp_path / "inv.py", twin, **data))
    log = tmp_path / "audit.jsonl"
    converged_to_boot_pending(inventory, log)
    old_entry = entry_of(twin, realpath(twin, "/run/booted-system"))
    new = realpath(twin, "/nix/var/nix/profiles/system")
    new_entry = entry_of(twin, new)
    assert new_entry != old_entry

    before, state = boot_id(twin), boot_state(twin)
    bootctl = "/usr/local/bin/bootctl"
    twin.exec(["mv", bootctl, f"{bootctl}.real"])
    twin.exec(["sh", "-c", f"cat > {bootctl} && chmod 755 {bootctl}"], input=SLOW_ONESHOT)
    env = {**os.environ, "REMEDY_AUDIT_LOG": str(log)}
    proc = subprocess.Popen(["remedy", "reboot", inventory, "--now", "--trial", "--json"],
                            cwd=PROJECT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while twin.exec(["test", "-e", "/run/test-armed"], check=False).returncode != 0:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # armed: the one-shot is set, no reboot yet
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    twin.exec(["mv", f"{bootctl}.real", bootctl])
    assert proc.returncode == 143, err[-3000:]
    (host,) = json.loads(out)["hosts"]
    assert host["outcome"] == "interrupted" and "before the reboot" in host["why"], host
    assert host["trial"]["outcome"] == "disarmed" and host["rotated_in"] is True, host
    assert boot_state(twin) == state and state["oneshot"] is None, boot_state(twin)
    assert boot_id(twin) == before and probe_inside(twin).outcome == "parsed"
    assert [x.split()[1:] for x in rotations.read_text().splitlines()] == [
        ["out", twin.name], ["in", twin.name]
    ]  # fmt: skip
    assert records(log, twin.name)[-1]["result"] == "interrupted"

    code, doc, said = remedy("reboot", inventory, "--now", "--trial", log=log)
    (host,) = doc["hosts"]
    assert code == 0 and host["outcome"] == "rebooted", (code, host, said[-3000:])
    trial = host["trial"]
    assert (trial["entry"], trial["previous"], trial["outcome"]) == (
        new_entry, old_entry, "blessed"), trial  # fmt: skip
    # the default stayed on the old entry through the trial's boot, until the bless
    assert trial["defaults"] == [old_entry] * 2, trial
    after = trial_of(twin).read()
    assert (after.booted_entry, after.next_entry, after.trial) == (
        new_entry, new_entry, "none"), after  # fmt: skip
    assert after.default_entry in ("", new_entry), after
    assert realpath(twin, "/run/booted-system") == new
    assert records(log, twin.name)[-1]["details"]["trial"] == trial
