"""Issue 28 item 4: the run checks a signature also for an input Nix fetched as a
tarball (github:, gitlab:), where no repository on the host holds the rev, and judges
the same commit as --dry."""

from __future__ import annotations

import subprocess
from pathlib import Path

from remedy.core.programs import bump, commands, signers


def _git(repo: Path, *args: str, key: Path | None = None) -> str:
    env = {"HOME": str(repo.parent), "PATH": "/usr/bin:/bin"}
    for who in ("AUTHOR", "COMMITTER"):
        env.update({f"GIT_{who}_NAME": "A", f"GIT_{who}_EMAIL": "a@x"})
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []
    return subprocess.run(
        ["git", "-C", str(repo), *sign, *args], check=True, capture_output=True, text=True,
        env=env,
    ).stdout.strip()  # fmt: skip


def test_a_rev_no_repository_holds_is_checked_as_dry_checks_it(tmp_path):
    """A github: input leaves no git repository behind (no git+file checkout, nothing in
    ~/.cache/nix/gitv3): the run fetches the input's branch as --dry does, and both say
    the same signature of the same rev."""
    key = tmp_path / "trusted"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    remote = tmp_path / "tt-stack"
    remote.mkdir()
    _git(remote, "init", "-q", "-b", "master")
    (remote / "f").write_text("fix")
    _git(remote, "add", "f")
    _git(remote, "commit", "-q", "-S", "-m", "the fix", key=key)
    rev = _git(remote, "rev-parse", "HEAD")
    pub = (tmp_path / "trusted.pub").read_text().split()
    allowed = f'maint@x namespaces="git" {pub[0]} {pub[1]}'
    home = tmp_path / "home"  # the owner's, with no Nix git cache: a tarball fetch
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp_path)}

    run = subprocess.run(
        bump.function_argv("signature", rev, remote.as_uri(), "", allowed, "master"),
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    dry = subprocess.run(
        commands.preview_bump(remote.as_uri(), "master", None, allowed),
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    said = run.stdout.strip().splitlines()[-1]
    signature = signers.parse_signature(said, rev)
    assert signature is not None and signature.trusted and signature.signer == "maint@x"
    assert dry.stdout.splitlines() == [f"would-take {rev}", said]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("remedy-")] == []


def test_a_rev_that_is_not_on_the_fetched_branch_is_said_not_guessed(tmp_path):
    remote = tmp_path / "tt-stack"
    remote.mkdir()
    _git(remote, "init", "-q", "-b", "master")
    (remote / "f").write_text("x")
    _git(remote, "add", "f")
    _git(remote, "commit", "-q", "-m", "x")
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run(
        bump.function_argv("signature", "e" * 40, remote.as_uri(), "", "k ssh-ed25519 A",
                           "master"),
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
    )  # fmt: skip
    assert proc.returncode == 2 and "signature" not in proc.stdout
    assert f"{'e' * 40} is not on master of {remote.as_uri()}" in proc.stderr
