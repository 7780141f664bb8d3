"""Issue 32 items 1 and 2: host content that is not what it seems.

A run journal that is a link to a secret, has a loose mode or bytes remedy never writes
is never read (its content never leaves the host) and never finished; a file name that
is not UTF-8 no longer wedges every read of the host. Each failed before its fix.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from remedy.core.programs import journal
from remedy.twin import fixtures
from tests.conftest import PROJECT, owner_git, run_restore

pytestmark = pytest.mark.twin

JOURNAL = journal.path("tenstorrent-serving.service")
SECRET = "/root/remedy-test-secret"
MARK = "SECRET-MARKER-7f3a"
ODD_DROPIN = b"/run/systemd/system/tenstorrent-serving.service.d/zz-\xff.conf"


def remedy(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["remedy", *argv], capture_output=True, text=True, cwd=PROJECT, timeout=300
    )


def said(proc) -> str:
    return proc.stdout + proc.stderr


def test_a_journal_that_links_to_a_secret_is_not_read_and_is_set_aside(twin, tmp_path):
    twin.exec(["sh", "-c", f"umask 077; echo {MARK} > {SECRET}; mkdir -p /var/lib/remedy"])
    twin.exec(["ln", "-sfn", SECRET, JOURNAL])
    for argv in (
        ["status", "inventory/twin.py", "--limit", twin.name],
        ["status", "inventory/twin.py", "--limit", twin.name, "--json"],
        ["converge", "inventory/twin.py", "--check", "--limit", twin.name, "--json"],
    ):
        proc = remedy(*argv)
        assert MARK not in said(proc), argv  # the secret never leaves the host
        assert "Traceback" not in said(proc)
        assert "cannot be trusted (a symbolic link)" in " ".join(said(proc).split()), argv
    proc = run_restore(twin, audit_log=tmp_path / "a")
    assert proc.returncode == 0, said(proc)[-3000:]
    assert MARK not in said(proc)
    assert twin.exec(["test", "-L", JOURNAL], check=False).returncode != 0  # set aside
    aside = twin.exec(["sh", "-c", f"ls -d {JOURNAL}.untrusted-*"]).stdout.split()
    assert len(aside) == 1 and twin.exec(["readlink", aside[0]]).stdout.strip() == SECRET
    assert twin.exec(["cat", SECRET]).stdout.strip() == MARK  # never written through


def test_a_journal_anyone_may_write_is_never_finished(twin, tmp_path):
    """A journal that looks like a proven run a next run would finish (its scratch clone
    at the checkout's HEAD, a toplevel in the store), but with mode 0666."""
    head = owner_git(twin, "rev-parse", "HEAD").stdout.strip()
    scratch = "/tmp/remedy-bump.planted"
    twin.exec(["runuser", "-u", fixtures.OWNER, "--", "git", "clone", "-q", fixtures.NIXOS_DIR,
               scratch])  # fmt: skip
    toplevel = twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip()
    planted = {
        "base_head": head, "proven_head": head, "run_id": "planted:1:1", "scratch": scratch,
        "started": "2026-12-01T03:00:00Z", "toplevel": toplevel,
    }  # fmt: skip
    twin.exec(["mkdir", "-p", "/var/lib/remedy"])
    twin.exec(["sh", "-c", f"cat > {JOURNAL} && chmod 0666 {JOURNAL}"],
              input=journal.text(planted))  # fmt: skip
    dry = run_restore(twin, "--dry")
    assert "finishing the earlier run" not in said(dry), said(dry)[-3000:]
    assert "cannot be trusted (owner uid 0, mode 666" in " ".join(said(dry).split())
    status = remedy("status", "inventory/twin.py", "--limit", twin.name)
    assert "mode 666: not root's with mode 600" in " ".join(said(status).split())


def test_a_journal_with_a_byte_that_is_not_utf8_is_named_not_a_traceback(twin):
    twin.exec(["mkdir", "-p", "/var/lib/remedy"])
    twin.exec(["sh", "-c", f"printf '{{\\n \"run_id\": \"x\\377\"\\n}}\\n' > {JOURNAL}; "
               f"chmod 0600 {JOURNAL}"])  # fmt: skip
    for argv in (
        ["status", "inventory/twin.py", "--limit", twin.name],
        ["converge", "inventory/twin.py", "--check", "--limit", twin.name],
    ):
        proc = remedy(*argv)
        assert "Traceback" not in said(proc) and "No hosts remaining" not in said(proc)
        assert "bytes that remedy never writes" in " ".join(said(proc).split()), argv
        assert proc.returncode in (3, 4), said(proc)[-2000:]  # read: drifted, not an error


def test_a_dropin_whose_name_is_not_utf8_is_shown_escaped_and_the_host_stays_readable(
    twin, tmp_path
):
    twin.exec(["sh", "-c", 'mkdir -p "${1%/*}" && printf "[Service]\\nEnvironment=X=1\\n" > "$1"',
               "sh", ODD_DROPIN.decode("utf-8", "surrogateescape")])  # fmt: skip
    status = remedy("status", "inventory/twin.py", "--limit", twin.name, "--json")
    assert "Traceback" not in said(status), said(status)[-2000:]
    doc = json.loads(status.stdout)
    subjects = [v["subject"] for v in doc["hosts"][0]["unmanaged_volatile"]]
    assert any("zz-\\xff.conf" in s for s in subjects), subjects
    problems = " ".join(" ".join(doc["hosts"][0]["problems"]).split())
    assert "zz-\\xff.conf: its name is not UTF-8" in problems, problems
    check = remedy("converge", "inventory/twin.py", "--check", "--limit", twin.name)
    assert "Traceback" not in said(check) and "zz-\\xff.conf" in said(check)
    # systemd cannot show a unit with such a drop-in once it loads it (D-Bus is UTF-8):
    # every step would lose sight of the unit, so the run refuses before it changes anything
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    proc = run_restore(twin, audit_log=tmp_path / "a")
    out = " ".join(said(proc).split())
    assert "Traceback" not in out and proc.returncode != 0
    assert "zz-\\xff.conf: its name is not UTF-8" in out and "rename or remove it" in out, out[
        -2000:
    ]
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head
    assert json.loads((tmp_path / "a").read_text().splitlines()[-1])["result"] == "failed"
