"""Issue 2 bad input: `remedy twin up` says in one sentence what is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remedy.errors import TwinError
from remedy.twin import rootfs


def remedy(*argv, env=None):
    return subprocess.run(
        [sys.executable, "-m", "remedy.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_missing_systemd_nspawn_names_the_package(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = dict(
        os.environ,
        PATH=str(bin_dir),
        REMEDY_TWIN_CACHE=str(tmp_path / "cache"),
        REMEDY_TWIN_STATE=str(tmp_path / "state"),
    )
    proc = remedy("twin", "up", "--name", "nospawn", env=env)
    assert proc.returncode != 0
    assert "systemd-nspawn is not installed: run `apt-get install systemd-container`" in (
        proc.stderr.replace("\n", " ")
    )
    assert "Traceback" not in proc.stderr


def test_without_root_says_so(monkeypatch):
    # Nobody else can run this machine's interpreter (/root is 0700), so the euid is faked.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TwinError, match=r"^the twin needs root .*run as root"):
        rootfs.check_prerequisites()


def test_unreachable_mirror_is_one_clear_sentence():
    with pytest.raises(TwinError) as err:
        rootfs._check_mirror("http://127.0.0.1:9/debian")
    text = str(err.value)
    assert text.startswith("cannot reach the Debian mirror http://127.0.0.1:9/debian")
    assert "REMEDY_TWIN_CACHE" in text


def test_unknown_twin_name_via_the_cli(tmp_path):
    env = dict(os.environ, REMEDY_TWIN_STATE=str(tmp_path / "state"))
    proc = remedy("twin", "reboot", "--name", "ghost", env=env)
    assert proc.returncode == 1
    assert "no twin named 'ghost'" in proc.stderr and "remedy twin up --name ghost" in proc.stderr


def test_mirror_is_read_from_apt_sources():
    url = rootfs.mirror()
    assert url.startswith("http") and Path("/etc/apt").exists()
