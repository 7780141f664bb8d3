"""Issue 44 item 7: nix-daemon.service's builds bounded for a run (daemon_bound.sh),
run here with the machine's sh and a stand-in systemctl that records its argv and
keeps the unit's MemoryMax as systemd would (this machine's systemd is never
touched). The twin runs the same program against its real systemd
(tests/twin/test_daemon_bound.py)."""

from __future__ import annotations

import os
import subprocess

from remedy import host

STAND_IN = r"""#!/bin/sh
# systemctl stand-in: the argv in $STATE/calls; MemoryMax in $STATE/max
printf '%s\n' "$*" >> "$STATE/calls"
case $1 in
show)
  case $3 in
  LoadState) cat "$STATE/load" 2>/dev/null || echo loaded ;;
  MemoryMax) cat "$STATE/max" 2>/dev/null || echo infinity ;;
  esac ;;
set-property)
  [ "$2" = --runtime ] || exit 1
  echo "${4#MemoryMax=}" > "$STATE/max" ;;
esac
"""


def run(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(STAND_IN)
    (bin_dir / "systemctl").chmod(0o755)
    # systemd's directories, here: a host booted with systemd, and its runtime
    # drop-ins of set-property
    program = host.text("daemon_bound.sh")
    program = program.replace("/run/systemd/system.control", str(tmp_path / "control"))
    program = program.replace("/run/systemd/system ]", f"{tmp_path} ]")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(tmp_path)}
    return subprocess.run(["sh", "-c", program, "sh", *argv], capture_output=True,
                          text=True, env=env, timeout=30)  # fmt: skip


def calls(tmp_path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_set_records_the_old_value_first_and_restore_puts_it_back(tmp_path):
    record = tmp_path / "state" / "nix-daemon-bound"
    done = run(tmp_path, "set", str(record), "4000000000")
    assert done.returncode == 0, done.stderr
    assert "MemoryMax=4000000000 (was infinity)" in done.stdout
    assert calls(tmp_path) == [
        "show -P LoadState nix-daemon.service",
        "show -P MemoryMax nix-daemon.service",
        "set-property --runtime nix-daemon.service MemoryMax=4000000000",
    ]
    assert record.read_text() == "was=infinity\nhad=no\n"
    assert oct(record.stat().st_mode & 0o777) == "0o600"

    # a second set in the same run (the next gate): the first value comes back first
    (tmp_path / "calls").unlink()
    again = run(tmp_path, "set", str(record), "3000000000")
    assert again.returncode == 0, again.stderr
    assert calls(tmp_path)[0] == "set-property --runtime nix-daemon.service MemoryMax=infinity"
    assert calls(tmp_path)[-1] == "set-property --runtime nix-daemon.service MemoryMax=3000000000"
    assert record.read_text() == "was=infinity\nhad=no\n"

    (tmp_path / "calls").unlink()
    back = run(tmp_path, "restore", str(record))
    assert back.returncode == 0, back.stderr
    assert calls(tmp_path) == ["set-property --runtime nix-daemon.service MemoryMax=infinity"]
    assert not record.exists()
    assert "MemoryMax is back to infinity" in back.stdout


def test_a_bound_the_host_had_already_comes_back_as_it_was(tmp_path):
    (tmp_path / "max").write_text("8589934592\n")
    record = tmp_path / "nix-daemon-bound"
    assert run(tmp_path, "set", str(record), "1000").returncode == 0
    assert record.read_text() == "was=8589934592\nhad=no\n"
    assert run(tmp_path, "restore", str(record)).returncode == 0
    assert (tmp_path / "max").read_text().strip() == "8589934592"
    assert calls(tmp_path)[-1] == "set-property --runtime nix-daemon.service MemoryMax=8589934592"


def test_a_runtime_dropin_that_was_there_stays_one_that_was_not_goes(tmp_path):
    dropin = tmp_path / "control" / "nix-daemon.service.d" / "50-MemoryMax.conf"
    record = tmp_path / "nix-daemon-bound"
    assert run(tmp_path, "set", str(record), "1000").returncode == 0
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\nMemoryMax=1000\n")  # what systemd writes for --runtime
    assert run(tmp_path, "restore", str(record)).returncode == 0
    assert not dropin.exists()  # the host had none: remedy's goes

    dropin.write_text("[Service]\nMemoryMax=infinity\n")  # a person's runtime setting
    assert run(tmp_path, "set", str(record), "1000").returncode == 0
    assert record.read_text() == "was=infinity\nhad=yes\n"
    assert run(tmp_path, "restore", str(record)).returncode == 0
    assert dropin.exists()  # a person's runtime bound is theirs: set back, not removed


def test_restore_without_a_record_does_nothing(tmp_path):
    proc = run(tmp_path, "restore", str(tmp_path / "none"))
    assert proc.returncode == 0 and proc.stdout == ""
    assert not (tmp_path / "calls").exists()


def test_a_host_without_a_nix_daemon_unit_is_said_and_not_touched(tmp_path):
    (tmp_path / "load").write_text("not-found\n")
    record = tmp_path / "nix-daemon-bound"
    proc = run(tmp_path, "set", str(record), "1000")
    assert proc.returncode == 0 and "no nix-daemon.service here" in proc.stdout
    assert not record.exists()
    assert [c for c in calls(tmp_path) if c.startswith("set-property")] == []
