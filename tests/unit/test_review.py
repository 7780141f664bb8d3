"""Issue 45 item 6: the review before the switch (remedy.core.readings.review).

The tip's read (remedy/host/tip_rev.sh) runs here under dash and bash --posix against
real git repositories: a branch named as Nix 2.26 locks it (refs/heads/master) and as
Nix 2.8 does (master), a remote that is gone, a branch it lacks, and a remote that
never answers (a TCP port that accepts and says nothing), bounded in time; it fetches
nothing. The changes are read from nix's own diff-closures output, recorded on the
twins (tests/facts/raw), and said within 80 columns."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from remedy.core.programs import commands
from remedy.core.readings import changes, review
from remedy.twin import fixtures

SHELLS = [["dash"], ["bash", "--posix"]]
RAW = Path(__file__).parents[1] / "facts" / "raw"


def _git(repo: Path, *args: str) -> str:
    env = {"HOME": str(repo.parent), "PATH": "/usr/bin:/bin"}
    for who in ("AUTHOR", "COMMITTER"):
        env.update({f"GIT_{who}_NAME": "A", f"GIT_{who}_EMAIL": "a@x"})
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()  # fmt: skip


def tip(shell: list[str], url: str, ref: str, bound: int = 20) -> tuple:
    argv = commands.tip_rev(url, ref, bound)
    assert argv[:2] == ["sh", "-c"]
    proc = subprocess.run([*shell, *argv[1:]], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return review.parse_tip(proc.stdout.splitlines())


@pytest.fixture
def remote(tmp_path) -> Path:
    repo = tmp_path / "tt-stack"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "master")
    (repo / "f").write_text("fix")
    _git(repo, "add", "f")
    _git(repo, "commit", "-q", "-m", "the fix")
    _git(repo, "checkout", "-q", "-b", "side")
    (repo / "f").write_text("side")
    _git(repo, "commit", "-q", "-am", "side")
    _git(repo, "checkout", "-q", "master")
    return repo


@pytest.mark.parametrize("shell", SHELLS, ids=["dash", "bash-posix"])
def test_the_tip_is_read_from_the_remote_as_either_nix_locks_the_ref(shell, remote):
    master = _git(remote, "rev-parse", "master")
    objects = sorted(p.name for p in (remote / ".git" / "objects").iterdir())
    for ref in ("refs/heads/master", "master"):
        assert tip(shell, remote.as_uri(), ref) == (master, None)
    assert tip(shell, remote.as_uri(), "side") == (_git(remote, "rev-parse", "side"), None)
    assert tip(shell, remote.as_uri(), "HEAD") == (master, None)
    assert sorted(p.name for p in (remote / ".git" / "objects").iterdir()) == objects


@pytest.mark.parametrize("shell", SHELLS, ids=["dash", "bash-posix"])
def test_a_tip_that_cannot_be_read_says_why(shell, remote, tmp_path):
    rev, why = tip(shell, (tmp_path / "gone").as_uri(), "master")
    assert rev is None and why.startswith(f"git ls-remote of {(tmp_path / 'gone').as_uri()}")
    assert "failed: fatal:" in why, why
    rev, why = tip(shell, remote.as_uri(), "refs/heads/nothere")
    assert rev is None and why == f"{remote.as_uri()} has no refs/heads/nothere"


def silent_remote():
    """A git:// URL whose server accepts and never says a word, and its closer."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    accepting = threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True)
    accepting.start()
    url = f"git://127.0.0.1:{server.getsockname()[1]}/tt-stack"

    def close() -> bool:
        for s in (*held, server):
            s.close()
        return bool(held)

    return url, close


def test_a_remote_that_never_answers_is_given_up_at_the_bound():
    url, close = silent_remote()
    try:
        rev, why = tip(["dash"], url, "master", bound=2)
    finally:
        connected = close()
    assert connected, "git never connected"  # it reached the remote, which said nothing
    assert (rev, why) == (None, f"git ls-remote of {url} gave no answer within 2s")


def test_the_dry_runs_fetch_of_a_signed_bump_is_bounded_too(tmp_path):
    url, close = silent_remote()
    argv = commands.preview_bump(url, "master", None, "k ssh-ed25519 A", bound_s=2)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)})  # fmt: skip
    finally:
        connected = close()
    assert connected and proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"error: cannot fetch master of {url}: no answer within 2s"
    assert list(tmp_path.iterdir()) == []  # its temporary repository went with it


@pytest.mark.parametrize("tag", ["nix_2_26", "nix_2_8"])
def test_the_review_says_the_rev_the_approval_and_the_changes_within_80_columns(tag):
    diff = (RAW / f"{tag}.diff_closures_heavy.txt").read_text().splitlines()
    found = changes.read_answer([
        "file kernel - -",
        "params-old hugepagesz=1G hugepages=4",
        "params-new hugepagesz=1G hugepages=2",
        *(f"diff {line}" for line in diff),
    ])  # fmt: skip
    new = "/nix/store/" + "a" * 32 + "-nixos-system-cfx-llm2"
    r = review.Review(
        review.BumpReview("tt-stack", "c" * 40, review.UNCHECKED, "b" * 40,
                          f"the tip of refs/heads/master at file://{fixtures.TT_STACK_DIR} now"),
        review.SystemReview("/nix/store/" + "c" * 32 + "-nixos-system-cfx-llm2", new,
                            "the boot default", found),
    )  # fmt: skip
    text = "\n".join(r.folded("cfx-llm2: "))
    assert all(len(line) <= 80 for line in text.splitlines()), text
    flat = " ".join(text.split())
    assert f"takes {'b' * 12} (the tip of refs/heads/master" in flat
    assert "approval: unchecked" in flat
    assert f"package vllm-tt: {fixtures.VLLM_VERSION} → {fixtures.HEAVY_VLLM_VERSION}" in flat
    assert "kernel parameters: -hugepages=4 +hugepages=2" in flat
    doc = r.to_json()
    assert doc["bump"]["takes"] == "b" * 40 and doc["system_changes"]["new"] == new
    assert doc["system_changes"]["kernel_params_added"] == ["hugepages=2"]


def test_an_unknown_rev_and_a_build_that_changes_nothing_are_said():
    r = review.Review(
        review.BumpReview("tt-stack", None, review.SIGNED, unread="no answer within 20s"),
        review.SystemReview("/nix/store/c-s", "/nix/store/n-s", "the boot default",
                            changes.SystemChanges()),
    )  # fmt: skip
    lines = r.lines()
    assert lines[0].startswith("bump tt-stack: takes a rev not known now (no answer within 20s")
    assert "approval: signed" in lines[0]
    assert lines[1] == (
        "the boot default (/nix/store/n-s) changes no package version, kernel or kernel "
        "parameter of the running system"
    )


def _system(root: Path, name: str, params: str) -> Path:
    top = root / name
    top.mkdir()
    (top / "kernel-params").write_text(params + "\n")
    (root / f"{name}-kernel").write_text(name)
    (top / "kernel").symlink_to(root / f"{name}-kernel")
    return top


@pytest.mark.parametrize("shell", SHELLS, ids=["dash", "bash-posix"])
def test_with_a_builder_the_changes_read_the_boot_files_and_run_no_nix(shell, tmp_path):
    """remedy/host/system_changes.sh, which the proof and the review both run: with a
    builder no nix runs on the serving host, so the packages are said not read; the
    kernel and its parameters are read from the two systems' files. Without one, a nix
    that cannot run is said with what it printed (here: none on this PATH)."""
    old = _system(tmp_path, "old", "hugepagesz=1G hugepages=4")
    new = _system(tmp_path, "new", "hugepagesz=1G hugepages=2")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "readlink", "cat", "timeout", "sed", "grep", "tail"):
        (bin_dir / tool).symlink_to(subprocess.run(["sh", "-c", f"command -v {tool}"],
                                                   capture_output=True, text=True,
                                                   check=True).stdout.strip())  # fmt: skip
    env = {"PATH": str(bin_dir)}  # no nix on it

    def said(builder: str | None) -> changes.SystemChanges:
        argv = commands.system_changes(str(old), str(new), builder)
        proc = subprocess.run([shutil.which(shell[0]), *shell[1:], *argv[1:]],
                              capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return changes.read_answer(proc.stdout.splitlines())

    built_there = said("builder1")
    assert built_there.boot_files == ("kernel",)
    assert (built_there.params_removed, built_there.params_added) == (("hugepages=4",),
                                                                      ("hugepages=2",))  # fmt: skip
    assert built_there.unread == "not read: built on the builder builder1, and no nix runs here"
    no_nix = said(None)
    failed = "nix store diff-closures failed: "
    assert no_nix.unread.startswith(failed), no_nix.unread
    assert "nix" in no_nix.unread.removeprefix(failed), no_nix.unread
