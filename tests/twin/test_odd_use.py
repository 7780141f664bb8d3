"""Issue 43, items G2-G4, on a twin: odd use of the command line.

* G2: ``remedy status … | head -1``: the reader closes the pipe; the status ends quietly
  with its own exit code (the one it gives when its whole output is read).
* G3: ``remedy converge --canary nosuch --check``: exit 2, naming the host and the
  inventory, and no SSH session reaches the twin.
* G4: ``--textfile /proc/x.prom``, and a dangling symlink in runbooks/ (``runbooks
  apply``): exit 2, naming the path, and no SSH session reaches the twin.

"No SSH session" is read from the twin's own journal: sshd logs each login it accepts
("Accepted publickey"); ``twin.exec`` enters the twin without SSH.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import PROJECT, twin_inventory

pytestmark = pytest.mark.twin


def remedy(*argv: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["remedy", *argv], stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=PROJECT,
        timeout=600,
    )  # fmt: skip


def logins(twin) -> int:
    """How many SSH logins the twin's sshd accepted so far."""
    twin.exec(["journalctl", "--sync"], check=False)
    out = twin.exec(["journalctl", "-q", "-o", "cat", "--no-pager"], check=False).stdout
    return out.count("Accepted publickey")


@pytest.fixture
def env(tmp_path, monkeypatch):
    (tmp_path / "lock").mkdir()
    monkeypatch.setenv("REMEDY_AUDIT_LOG", str(tmp_path / "audit.jsonl"))
    monkeypatch.setenv("REMEDY_LOCK_DIR", str(tmp_path / "lock"))


def test_a_closed_pipe_keeps_the_status_exit_code(twin, tmp_path, env):
    inventory = str(twin_inventory(tmp_path / "inventory.py", twin))
    whole = remedy("status", inventory)
    assert whole.returncode in (0, 3, 4, 6) and whole.stdout, whole.stderr
    read, write = os.pipe()
    os.close(read)  # `| head -1` once head has its line: every write fails with EPIPE
    try:
        cut = remedy("status", inventory, stdout=write)
    finally:
        os.close(write)
    assert cut.returncode == whole.returncode, cut.stderr
    assert "Traceback" not in cut.stderr and "Broken" not in cut.stderr, cut.stderr


def test_an_unknown_canary_is_refused_before_connecting(twin, tmp_path, env):
    inventory = str(twin_inventory(tmp_path / "inventory.py", twin))
    before = logins(twin)
    done = remedy("converge", inventory, "--canary", "nosuch", "--check")
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, said
    assert "--canary nosuch" in said and inventory in said and twin.name in said, said
    assert logins(twin) == before
    # the count moves when something does connect
    assert remedy("status", inventory, "--json").returncode != 2
    assert logins(twin) > before


def test_an_unwritable_textfile_and_a_dangling_runbook_are_refused_before_connecting(
    twin, tmp_path, env
):
    inventory = str(twin_inventory(tmp_path / "inventory.py", twin))
    before = logins(twin)
    done = remedy("converge", inventory, "--check", "--textfile", "/proc/x.prom")
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and "--textfile /proc/x.prom" in said, said
    assert logins(twin) == before

    project = tmp_path / "project"
    shutil.copytree(PROJECT + "/runbooks", project / "runbooks")
    shutil.copytree(PROJECT + "/deploys", project / "deploys",
                    ignore=shutil.ignore_patterns("__*"))  # fmt: skip
    (project / "runbooks" / "099-gone.yaml").symlink_to(tmp_path / "moved" / "099-gone.yaml")
    done = remedy("runbooks", "apply", "006", inventory, "--project", str(project))
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, said
    assert "runbooks/099-gone.yaml" in said and "does not exist" in said, said
    assert logins(twin) == before
    listed = remedy("runbooks", "check", "--project", str(project))
    assert listed.returncode != 0 and "runbooks/099-gone.yaml" in listed.stdout
