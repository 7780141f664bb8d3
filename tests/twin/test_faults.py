"""Issue 21: faults and bad input a careful on-call person met on fresh twins.

A full /run during the fallback, a memory gate that refuses while the fallback
would leave a new override loaded, and a run that waits for another's host lock
without saying so. Each failed on the engine before its fix.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from remedy.core.programs import hostlock
from tests.conftest import (
    PROJECT,
    RESTART_NOW,
    converge_json,
    probe_inside,
    run_restore,
    unit_props,
)

pytestmark = pytest.mark.twin

SCRIPT = "/run/tt-serving-override/start"
DROPIN = "/run/systemd/system/tenstorrent-serving.service.d/override.conf"


def out_of(proc) -> str:
    return proc.stdout + proc.stderr


def audit(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def leftovers(twin) -> list[str]:
    """Temporary files remedy left anywhere under /run (must be none)."""
    return twin.exec(["find", "/run", "-xdev", "-name", "*.remedy-tmp"]).stdout.split()


def test_a_full_run_is_named_and_leaves_nothing_partial(twin, tmp_path):
    # fill the twin's /run (a tmpfs of its own) to the last block
    twin.exec(["sh", "-c", "head -c 100G /dev/zero > /run/fill 2>/dev/null; exit 0"])
    try:
        proc = run_restore(twin, "--data", "durable=false", audit_log=tmp_path / "a.jsonl")
        out = out_of(proc)
        assert proc.returncode != 0, out[-3000:]
        assert f"cannot write {SCRIPT}: the file system /run is full" in out, out[-3000:]
        assert "free space there and run again" in out
        assert "Traceback" not in out
        assert leftovers(twin) == []
        assert twin.exec(["test", "-e", SCRIPT], check=False).returncode != 0
        assert audit(tmp_path / "a.jsonl")[-1]["result"] == "failed"
    finally:
        twin.exec(["rm", "-f", "/run/fill"])
    again = run_restore(twin, "--data", "durable=false", audit_log=tmp_path / "a.jsonl")
    assert again.returncode == 0, out_of(again)[-3000:]
    assert probe_inside(twin).outcome == "parsed" and leftovers(twin) == []


def test_a_refusing_gate_leaves_no_new_override_loaded(twin, tmp_path):
    """The gate refuses the fallback's restart: nothing may be left that the next start,
    by systemd or a person, would take without the gate."""
    pid = unit_props(twin)["MainPID"]
    proc = run_restore(
        twin,
        "--data", "durable=false", "--data", "min_mem_available_gb=100000",
        audit_log=tmp_path / "a.jsonl",
    )  # fmt: skip
    out = out_of(proc)
    assert proc.returncode != 0, out[-3000:]
    assert "Pending: the /run override" in " ".join(out.split()), out[-3000:]
    for path in (SCRIPT, DROPIN):
        assert twin.exec(["test", "-e", path], check=False).returncode != 0, path
    dropins = twin.exec(
        ["systemctl", "show", "-P", "DropInPaths", "tenstorrent-serving.service"]
    ).stdout
    assert "override.conf" not in dropins
    assert unit_props(twin)["MainPID"] == pid
    record = audit(tmp_path / "a.jsonl")[-1]
    assert record["result"] == "refused"
    assert any("Pending" in n for n in record["details"]["notes"])
    # the override is not written, so tool calling does not rest on it (issue 32 item 5)
    assert "VOLATILE" not in out and "tool calling rests on" not in record["details"].get(
        "line", ""
    )


def test_a_run_waiting_for_the_host_lock_says_on_whom_and_for_how_long(twin, tmp_path):
    unit = "tenstorrent-serving.service"
    who = "pid 4242 on ops-laptop since 2026-12-01T03:00:00Z: nixos-rebuild switch"
    twin.exec(
        [
            "systemd-run", "--unit=hold-remedy-lock", "--", "sh", "-c",
            'exec 9>>"$1"; flock 9; printf "%s\\n" "$3" > "$2"; sleep 30', "sh",
            hostlock.lock_path(unit), hostlock.holder_path(unit), who,
        ]
    )  # fmt: skip
    twin.exec(["sh", "-c", f"for i in $(seq 50); do [ -s {hostlock.holder_path(unit)} ] && exit 0; "
               "sleep 0.1; done; exit 1"])  # fmt: skip
    try:
        proc = subprocess.run(
            ["pyinfra", "-y", *RESTART_NOW, "--limit", twin.name, "--data", "lock_wait_s=8",
             "inventory/twin.py", "deploys/restore_toolcalling.py"],
            capture_output=True, text=True, cwd=PROJECT, timeout=300,
            env={**__import__("os").environ, "REMEDY_AUDIT_LOG": str(tmp_path / "a.jsonl")},
        )  # fmt: skip
    finally:
        twin.exec(["systemctl", "stop", "hold-remedy-lock"], check=False)
    out = " ".join(out_of(proc).split())
    assert proc.returncode == 5, out[-3000:]
    assert f"is held by {who}; waiting up to 8s for it" in out, out[-3000:]
    assert "still waiting for /run/lock/remedy-" in out and "(5s of 8s)" in out
    assert audit(tmp_path / "a.jsonl")[-1]["result"] == "locked"


def test_a_persons_commit_to_the_managed_file_is_named_and_not_overwritten(make_twin, tmp_path):
    from remedy.twin import fixtures
    from tests.conftest import owner_git, run_deploy

    twin = make_twin(with_emergency_override=True)
    first = run_deploy(twin, "converge", audit_log=tmp_path / "a.jsonl")
    assert first.returncode == 0, out_of(first)[-3000:]
    managed = f"{fixtures.NIXOS_DIR}/hosts/cfx-llm2/remedy.nix"
    theirs = twin.exec(["cat", managed]).stdout.replace(
        "hugepagesPerCard = lib.mkForce 1;", "hugepagesPerCard = lib.mkForce 2;"
    )
    twin.exec(["tee", managed], input=theirs, user=fixtures.OWNER)
    person = ["-c", "user.name=Jane Ops", "-c", "user.email=jane@ops.example"]
    owner_git(twin, *person, "commit", "-q", "-am", "cfx-llm2: two hugepages per card")
    head = owner_git(twin, "rev-parse", "HEAD").stdout.strip()

    code, doc = converge_json("--check", "--limit", twin.name)
    host = doc["hosts"][0]
    assert code == 3, host["verdict"]
    assert "differs from host data" in host["verdict"]
    said = " ".join(host["problems"])
    assert f"commit {head[:12]} by Jane Ops <jane@ops.example>" in said
    assert "hugepagesPerCard = lib.mkForce 2;" in said
    actions = {s["setting"]: s["action"] for s in host["settings"]}
    assert actions["hugepages"].startswith("kept: remedy.nix is a person's")
    # the table a person reads names the commit and its author too (issue 28 item 7)
    text = subprocess.run(
        ["remedy", "converge", "inventory/twin.py", "--check", "--limit", twin.name],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
    )  # fmt: skip
    said = " ".join(text.stdout.split())
    assert text.returncode == 3 and f"commit {head[:12]} by Jane Ops <jane@ops.example>" in said

    code, doc = converge_json("--limit", twin.name)
    assert code == 3, doc["hosts"][0]["verdict"]
    assert owner_git(twin, "rev-parse", "HEAD").stdout.strip() == head  # not overwritten
    assert twin.exec(["cat", managed]).stdout == theirs

    over = run_deploy(
        twin,
        "converge",
        "--data",
        "managed_file_conflict=overwrite",
        audit_log=tmp_path / "a.jsonl",
    )
    assert over.returncode == 0, out_of(over)[-3000:]
    assert "overwrites: hosts/cfx-llm2/remedy.nix differs" in " ".join(out_of(over).split())
    assert "hugepagesPerCard = lib.mkForce 1;" in twin.exec(["cat", managed]).stdout
    assert (
        owner_git(
            twin, "log", "-1", "--format=%ae", "--", "hosts/cfx-llm2/remedy.nix"
        ).stdout.strip()
        == "remedy@cfx-llm2"
    )
    record = audit(tmp_path / "a.jsonl")[-1]
    assert "Jane Ops" in (record["details"]["managed_conflict"] or "")


# -- items 9 and 10: twins independent of the machine's defaults, and none left over ----


def test_ssh_logins_start_no_user_manager_and_the_inotify_limits_are_raised(twin):
    """All twins share this machine's kernel and root's inotify instances: each SSH login
    used to start root's user@0.service, and 16 twins ran the default 128 out."""
    from remedy.twin import machine

    for _ in range(2):
        subprocess.run([*twin.ssh_argv(), "true"], check=True, capture_output=True, timeout=60)
    units = twin.exec(["systemctl", "list-units", "--all", "--no-legend", "user@*"]).stdout
    assert units.strip() == "", units
    for key, wanted in machine.INOTIFY.items():
        assert int(open(f"/proc/sys/fs/inotify/{key}").read()) >= wanted


def test_a_leaked_twin_is_listed_and_down_removes_every_trace(make_twin):
    """A twin whose supervisor and nspawn died (and whose state directory went) left its
    systemd running as an orphan of this machine's init."""
    import os
    import signal

    from remedy.twin import machine

    twin = make_twin()
    init = twin.init_pid()
    assert init is not None
    os.killpg(twin.supervisor_pid, signal.SIGKILL)  # the supervisor and its nspawn
    (twin.dir / "state.json").unlink()  # and the state directory partly gone
    proc = subprocess.run(
        ["remedy", "twin", "list", "--json"], capture_output=True, text=True, cwd=PROJECT
    )
    left = [p for p in json.loads(proc.stdout)["leftovers"] if p["name"] == twin.name]
    assert left and {p["kind"] for p in left} <= {"init", "nspawn"}, left
    down = subprocess.run(
        ["remedy", "twin", "down", "--name", twin.name], capture_output=True, text=True,
        cwd=PROJECT, timeout=120,
    )  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert [p for p in machine.leftovers() if p.name == twin.name] == []
    assert not machine._alive(init)  # gone (or a zombie waiting for this machine's init)
    mounts = open("/proc/self/mounts").read()
    assert str(twin.dir) not in mounts and not twin.dir.exists()


def test_a_read_only_run_systemd_system_is_named_and_nothing_is_left_half_written(twin, tmp_path):
    """Issue 32 item 7: install's 'cannot change owner and permissions' hid the cause, and
    the override script stayed in /run without the drop-in that would use it."""
    twin.exec(["sh", "-c", "mount --bind /run/systemd/system /run/systemd/system && "
               "mount -o remount,bind,ro /run/systemd/system"])  # fmt: skip
    try:
        proc = run_restore(twin, "--data", "durable=false", audit_log=tmp_path / "a.jsonl")
        out = " ".join(out_of(proc).split())
        assert proc.returncode != 0, out[-3000:]
        assert (
            "cannot write /run/systemd/system/tenstorrent-serving.service.d: the file system "
            "at /run/systemd/system is mounted read-only; nothing was written"
        ) in out, out[-3000:]
        assert "cannot change owner" not in out and "Traceback" not in out
        assert twin.exec(["test", "-e", SCRIPT], check=False).returncode != 0  # nothing half
        assert "VOLATILE" not in out
    finally:
        twin.exec(["umount", "/run/systemd/system"], check=False)
    again = run_restore(twin, "--data", "durable=false", audit_log=tmp_path / "a.jsonl")
    assert again.returncode == 0, out_of(again)[-3000:]
    assert probe_inside(twin).outcome == "parsed"
