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


def _apt_sources(monkeypatch, tmp_path, deb822: str | None, one_line: str | None) -> None:
    """rootfs reads /etc/apt/sources.list.d/debian.sources and /etc/apt/sources.list from
    TMP_PATH instead (an absent one when None)."""
    real = Path
    files = {"/etc/apt/sources.list.d/debian.sources": deb822, "/etc/apt/sources.list": one_line}
    for name, text in files.items():
        if text is not None:
            (tmp_path / real(name).name).write_text(text)

    def fake_path(p, *rest):
        if str(p) in files:
            return tmp_path / real(str(p)).name
        return real(p, *rest)

    monkeypatch.setattr(rootfs, "Path", fake_path)


def test_mirror_is_read_from_deb822_sources_before_the_one_line_file(tmp_path, monkeypatch):
    _apt_sources(
        monkeypatch, tmp_path,
        deb822="Types: deb\nURIs: http://deb822.example/debian/\nSuites: trixie\n",
        one_line="deb http://oneline.example/debian trixie main\n",
    )  # fmt: skip
    assert rootfs.mirror() == "http://deb822.example/debian"


def test_mirror_without_apt_sources_is_the_default(tmp_path, monkeypatch):
    _apt_sources(monkeypatch, tmp_path, deb822=None, one_line="# nothing here\n")
    assert rootfs.mirror() == rootfs.DEFAULT_MIRROR


def test_suite_defaults_to_trixie_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv("REMEDY_TWIN_SUITE", raising=False)
    assert rootfs.default_suite() == "trixie"
    monkeypatch.setenv("REMEDY_TWIN_SUITE", "bookworm")
    assert rootfs.default_suite() == "bookworm"
    monkeypatch.setenv("REMEDY_TWIN_SUITE", "sid")
    with pytest.raises(TwinError, match=r"^unknown twin suite 'sid': use one of trixie, bookworm"):
        rootfs.default_suite()


def test_each_suite_has_its_own_cache_keys():
    assert rootfs.debootstrap_key("trixie") != rootfs.debootstrap_key("bookworm")
    assert rootfs.base_key("trixie") != rootfs.base_key("bookworm")
    assert "experimental-features" not in rootfs.NIX_CONF  # flakes off, as in production


def test_mirror_reads_one_line_sources_of_either_suite(tmp_path, monkeypatch):
    sources = tmp_path / "sources.list"
    sources.write_text("deb [arch=amd64] http://mirror.example/debian/ trixie main\n")
    real = Path

    def fake_path(p, *rest):
        if str(p) == "/etc/apt/sources.list":
            return sources
        if str(p) == "/etc/apt/sources.list.d/debian.sources":
            return tmp_path / "absent"
        return real(p, *rest)

    monkeypatch.setattr(rootfs, "Path", fake_path)
    assert rootfs.mirror() == "http://mirror.example/debian"


def test_twin_up_rejects_an_unknown_suite(tmp_path):
    env = dict(os.environ, REMEDY_TWIN_STATE=str(tmp_path / "state"))
    proc = remedy("twin", "up", "--suite", "sid", "--name", "nosuite", env=env)
    assert proc.returncode == 2 and "'sid' is not one of 'trixie', 'bookworm'" in proc.stderr


def test_state_without_a_suite_is_a_bookworm_twin(tmp_path, monkeypatch):
    from remedy.twin import machine

    monkeypatch.setenv("REMEDY_TWIN_STATE", str(tmp_path))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "state.json").write_text(
        '{"name": "old", "slot": 3, "ssh_port": 2225, "server_port": 8003, "base": "/x"}'
    )
    twin = machine.load("old")
    assert twin.suite == "bookworm"
    assert [t.name for t in machine.all_twins()] == ["old"]


def test_two_builders_of_one_rootfs_take_turns_and_the_second_finds_it_built(tmp_path):
    """Two first `remedy twin up`s (or test workers on a cold cache) at once: before the
    build lock, the second deleted the first's temporary directory as stale."""
    import multiprocessing
    import time

    final = tmp_path / "base-x"
    ctx = multiprocessing.get_context("fork")
    calls = ctx.Queue()

    def builder():
        def build(tmp):
            calls.put(os.getpid())
            tmp.mkdir()
            time.sleep(0.5)  # the other builder arrives meanwhile
            (tmp / "payload").write_text("made by one builder\n")

        rootfs._build_atomically(final, build)

    procs = [ctx.Process(target=builder) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0]
    assert calls.qsize() == 1  # built once; the other waited and found it complete
    assert (final / "payload").read_text() == "made by one builder\n"
    assert (final / ".complete").exists()
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
