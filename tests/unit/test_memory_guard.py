"""The memory guard's program (remedy/host/memory_guard.sh), run under dash and bash
--posix with its own meminfo, token and state paths (never the machine's): its
decision, its one journal line, the forced start, and that it decides as the gate
does (one decision: memory_floor.sh)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from remedy import host
from remedy.core.config import desired, guard
from remedy.core.config.host_data import from_host_data
from remedy.core.programs import commands

SHELLS = [["dash"], ["bash", "--posix"]]
LINE = re.compile(
    r"^remedy-memory-guard: (allowed|refused|forced): (.*) "
    r"\[MemAvailable_kB=(\d+) threshold_kB=(\d+)\]$"
)


def meminfo(path: Path, kb: int) -> Path:
    # the shape of the kernel's file (fs/proc/meminfo.c): name, padding, kB
    path.write_text(f"MemTotal:       134217728 kB\nMemFree:        {kb} kB\n"
                    f"MemAvailable:   {kb:>9} kB\nBuffers:           1024 kB\n")  # fmt: skip
    return path


def run(shell, tmp_path: Path, *argv: str, kb: int | None = None, path_dirs=()):
    env = {
        "PATH": ":".join([*map(str, path_dirs), "/usr/bin", "/bin"]),
        "REMEDY_GUARD_RUN": str(tmp_path / "run"),
        "REMEDY_GUARD_STATE": str(tmp_path / "state"),
    }
    if kb is not None:
        env["meminfo"] = str(meminfo(tmp_path / "meminfo", kb))
    return subprocess.run(
        [*shell, "-c", host.text("memory_guard.sh"), "/nix/store/x-remedy-memory-guard", *argv],
        capture_output=True, text=True, env=env, timeout=30,
    )  # fmt: skip


@pytest.mark.parametrize("shell", SHELLS, ids=["dash", "bash-posix"])
def test_below_the_floor_the_start_is_refused_with_one_line(shell, tmp_path):
    ran = run(shell, tmp_path, "check", "4", "tenstorrent-serving.service", kb=3905250)
    assert ran.returncode == 1  # ExecCondition=: 1..254 skips the start, no failure
    (line,) = ran.stdout.splitlines()
    m = LINE.match(line)
    assert m and m.group(1) == "refused", line
    assert (m.group(3), m.group(4)) == ("3905250", "3906250")
    words = m.group(2)
    assert "MemAvailable 3.9 GB is below min_mem_available_gb 4 GB" in words
    assert "reboot reclaims the tenstorrent pinned-page leak; a module reload does not" in words
    assert "systemctl start remedy-memory-guard-force@NAME.service" in words
    # kept for status and the metrics: when, the figure, the floor
    at, kb, floor = (tmp_path / "state/memory-guard.last-refusal").read_text().split()
    assert (kb, floor) == ("3905250", "3906250") and int(at) > 0


@pytest.mark.parametrize("shell", SHELLS, ids=["dash", "bash-posix"])
def test_at_the_floor_the_start_goes_on(shell, tmp_path):
    ran = run(shell, tmp_path, "check", "4", "tenstorrent-serving.service", kb=3906250)
    assert ran.returncode == 0
    m = LINE.match(ran.stdout.strip())
    assert m and m.group(1) == "allowed", ran.stdout
    assert not (tmp_path / "state/memory-guard.last-refusal").exists()


@pytest.mark.parametrize("shell", SHELLS, ids=["dash", "bash-posix"])
def test_a_forced_start_goes_once_and_names_who(shell, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/systemctl.log\n')
    (fake / "systemctl").chmod(0o755)
    ran = run(shell, tmp_path, "force", "alice", "tenstorrent-serving.service", path_dirs=[fake])
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "systemctl.log").read_text() == "restart -- tenstorrent-serving.service\n"
    ran = run(shell, tmp_path, "check", "4", "tenstorrent-serving.service", kb=1000)
    m = LINE.match(ran.stdout.strip())
    assert ran.returncode == 0 and m and m.group(1) == "forced", ran.stdout
    assert "forced by alice" in m.group(2)
    # the token is spent: the next start is refused again
    ran = run(shell, tmp_path, "check", "4", "tenstorrent-serving.service", kb=1000)
    assert ran.returncode == 1 and LINE.match(ran.stdout.strip()).group(1) == "refused"


def test_a_stale_token_forces_nothing(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run/memory-guard.force").write_text("1000 mallory\n")  # 1970
    ran = run(SHELLS[0], tmp_path, "check", "4", "u.service", kb=1000)
    assert ran.returncode == 1 and "refused" in ran.stdout
    assert not (tmp_path / "run/memory-guard.force").exists()


def test_who_is_a_name_not_shell(tmp_path):
    ran = run(SHELLS[0], tmp_path, "force", "a;b", "u.service")
    assert ran.returncode == 2 and not (tmp_path / "run/memory-guard.force").exists()


@pytest.mark.parametrize(
    "gb, kb",
    [("4", 3906250), ("3.5", 3417969), ("0.001", 977), ("10.25", 10009766), ("1000", 976562500)],
)
def test_the_floor_in_kb_is_min_gb_rounded_up(gb, kb, tmp_path):
    ran = run(SHELLS[0], tmp_path, "check", gb, "u.service", kb=kb)
    assert LINE.match(ran.stdout.strip()).group(4) == str(kb)
    assert ran.returncode == 0
    assert run(SHELLS[0], tmp_path, "check", gb, "u.service", kb=kb - 1).returncode == 1


@pytest.mark.parametrize("kb", [3906249, 3906250])
def test_the_gate_and_the_guard_decide_alike(kb, tmp_path):
    """lib.sh's refusal (remedy's gate) and the guard, on one figure: one decision."""
    mi = meminfo(tmp_path / "meminfo", kb)
    gate = subprocess.run(
        ["dash", "-c", host.text("lib.sh") + '\nrefusal 4 "restarting the server"', "x", "check"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "meminfo": str(mi)},
    )  # fmt: skip
    guarded = run(SHELLS[0], tmp_path, "check", "4", "u.service", kb=kb)
    assert bool(gate.stdout.strip()) == (guarded.returncode == 1), (gate.stdout, guarded.stdout)


def test_the_managed_file_runs_the_guard_first_and_carries_its_text():
    s = from_host_data("cfx-llm2", {})
    text = desired.managed_nix(s)
    assert (
        "  systemd.services.tenstorrent-serving.serviceConfig.ExecCondition = lib.mkBefore "
        '[ "+/bin/sh ${guard} check 4 tenstorrent-serving.service" ];'
    ) in text.splitlines()
    # the program, in a Nix indented string: '' and ${ escaped
    body = text.split("''\n", 1)[1].split("\n'';", 1)[0]
    assert body.replace("''${", "${").replace("'''", "''") == host.text("memory_guard.sh").rstrip(
        "\n"
    )
    # the proof of a built system checks its line (system_lacks.sh: guard)
    assert (
        "prove:guard\tmemory guard\t-remedy-memory-guard check 4 tenstorrent-serving.service"
        in (desired.proof_items(s, ("memory_guard",)))
    )


def test_the_fallback_dropin_runs_its_own_copy_in_place_of_the_units():
    text = commands.dropin_text("/run/tt-serving-override/start", {}, None, "check 4 u.service")
    lines = text.splitlines()
    i = lines.index("ExecCondition=")
    assert lines[i + 1] == (
        "ExecCondition=+/bin/sh /run/tt-serving-override/remedy-memory-guard check 4 u.service"
    )
    assert lines.index("ExecStart=") > i


@pytest.mark.parametrize(
    "conditions, said",
    [
        (None, "unknown"),
        ((), "off"),
        (("/bin/sh /nix/store/abc-remedy-memory-guard check 3.5 u.service",), "on (3.5 GB)"),
        (("/usr/bin/test -e /dev/tenstorrent",), "off"),
        (("/bin/sh /run/tt-serving-override/remedy-memory-guard check 4 u.service",), "on (4 GB)"),
        (("/bin/sh /nix/store/abc-remedy-memory-guard force %i u.service",), "off"),
    ],
)
def test_the_guard_is_read_from_the_units_conditions(conditions, said):
    s = from_host_data("cfx-llm2", {})
    assert guard.state(conditions, s) == said


def test_status_says_the_guard_and_its_last_refusal():
    import dataclasses

    from remedy.core.readings.memory import GuardRefusal
    from remedy.core.render import report
    from tests.unit.test_report_words import guarded_status, status

    r = guarded_status("durable_read_once")
    assert r.guard == {"state": "durable", "last_refusal": None}
    row = next(x for x in r.rows if x.label == "memory guard" and x.now in guard.WORDS)
    assert (row.now, row.after_reboot, row.bad) == ("durable", "no refusal kept", False)
    assert status("durable_read_once").guard["state"] == "missing"

    s = from_host_data("cfx-llm2", {})
    snap = dataclasses.replace(r.snapshot, guard_refusal=GuardRefusal(1796454819, 3905250, 3906250))
    got = report.host_status("cfx-llm2", s, snap)
    assert got.guard["last_refusal"] == {
        "at": "2026-12-05T07:13:39+00:00", "at_epoch": 1796454819,
        "mem_available_kb": 3905250, "threshold_kb": 3906250,
    }  # fmt: skip
    row = next(x for x in got.rows if x.label == "memory guard" and x.now in guard.WORDS)
    assert row.after_reboot == "last refused 2026-12-05 07:13:39 UTC at 3.9 GB (< 4.0)"
    assert got.to_json()["memory_guard"] == got.guard


@pytest.mark.parametrize("kb, verdict", [(3905250, "refused"), (3906250, "allowed")])
def test_the_guards_own_line_is_what_the_reboot_reading_parses(kb, verdict, tmp_path):
    """The journal contract, end to end: the program's line, as journalctl's json gives
    it, through remedy.core.readings.reboot (issue 46 item 2's parser)."""
    import json

    from remedy.core.readings import reboot

    ran = run(SHELLS[0], tmp_path, "check", "4", "tenstorrent-serving.service", kb=kb)
    entry = {"MESSAGE": ran.stdout.rstrip("\n"), "__REALTIME_TIMESTAMP": "1796454819000000"}
    (start,), said = reboot.parse_guard([json.dumps(entry)])
    assert said == [] and (start.verdict, start.mem_available_kb, start.threshold_kb) == (
        verdict, kb, 3906250,
    )  # fmt: skip
