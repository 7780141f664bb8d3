"""Issue 43 G1 on a twin: a drop-in whose name holds a newline (``a\\n.bashrc``) was
reported as two false entries (``…/a`` and ``.bashrc``); a drop-in whose name is not
UTF-8, once a daemon-reload loaded it, made status print only "the remote read failed:
No hosts remaining!" (exit 1): every ``systemctl show`` of the unit fails ("Invalid
argument": D-Bus cannot carry its DropInPaths). Each is now one entry named with an
escape, and the rest of the host is read (the unit over busctl)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import PROJECT
from tests.facts.record import ODD_DIR, ODD_NAMES

pytestmark = pytest.mark.twin


def remedy(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["remedy", *argv], capture_output=True, text=True, cwd=PROJECT,
                          timeout=300)  # fmt: skip


def test_odd_drop_in_names_are_named_with_escapes_and_the_host_is_read(twin):
    twin.exec(["sh", "-c", ODD_NAMES, "sh", ODD_DIR])
    shown = twin.exec(["systemctl", "show", "tenstorrent-serving.service"], check=False)
    assert shown.returncode != 0 and "Invalid argument" in shown.stderr  # the reload took it
    pid = twin.exec(
        ["cat", "/sys/fs/cgroup/systemd/system.slice/tenstorrent-serving.service/cgroup.procs"],
        check=False,
    ).stdout.split()

    proc = remedy("status", "inventory/twin.py", "--limit", twin.name, "--json")
    said = proc.stdout + proc.stderr
    assert proc.returncode != 1 and "remote read failed" not in said, said[-3000:]
    (host,) = json.loads(proc.stdout)["hosts"]
    subjects = [v["subject"] for v in host["unmanaged_volatile"]]
    assert subjects.count(f"{ODD_DIR}/a\\n.bashrc") == 1, subjects
    assert subjects.count(f"{ODD_DIR}/zz-\\xff.conf") == 1, subjects
    assert not [s for s in subjects if s in (f"{ODD_DIR}/a", ".bashrc")], subjects
    problems = " ".join(" ".join(host["problems"]).split())
    assert "zz-\\xff.conf: its name is not UTF-8" in problems, problems
    # the unit itself is read: its main process is one of the unit's cgroup
    assert str(host["snapshot"]["unit"]["main_pid"]) in pid, (host["snapshot"]["unit"], pid)
    assert host["snapshot"]["unit"]["active_state"] == "active"

    text = remedy("status", "inventory/twin.py", "--limit", twin.name)
    out = text.stdout
    assert text.returncode == proc.returncode and "remote read failed" not in out, out[-3000:]
    assert f"{ODD_DIR}/a\\n.bashrc" in " ".join(out.split()).replace(" ", ""), out[-3000:]
    assert "  • .bashrc" not in out
