"""Issue 18, pure parts: bump_to, trusted_signers, unattended runs."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

import facts.serving
from remedy.core.config import desired
from remedy.core.config.host_data import from_host_data
from remedy.core.programs import bump, signers
from remedy.core.run import plan
from remedy.errors import ConfigError

SNAPSHOTS = Path(__file__).parent.parent / "facts" / "serving.HostSnapshot"


def snapshot(case: str):
    return facts.serving.HostSnapshot().process(
        json.loads((SNAPSHOTS / f"{case}.json").read_text())["output"]
    )


@pytest.mark.parametrize(
    "data, pinned",
    [
        ({}, None),
        ({"bump_to": "ab" * 20}, "ab" * 20),
        ({"bump_to": "required_fix_rev", "required_fix_rev": "cd" * 20}, "cd" * 20),
    ],
)
def test_bump_to_names_the_rev_a_bump_locks(data, pinned):
    assert from_host_data("cfx-llm2", data).pinned_rev == pinned


@pytest.mark.parametrize(
    "data, words",
    [
        ({"bump_to": "main"}, "must be latest, required_fix_rev or a full 40-character"),
        ({"bump_to": "required_fix_rev"}, "required_fix_rev is not set"),
        ({"trusted_signers": "keys.txt"}, "must be an absolute path"),
        ({"unattended": "maybe"}, "must be true or false"),
    ],
)
def test_bad_values_are_refused_naming_the_key(data, words):
    with pytest.raises(ConfigError, match=words):
        from_host_data("cfx-llm2", data)


def test_an_unattended_run_blocks_a_bump_it_could_not_verify():
    snap = snapshot("emergency_override")  # the next boot lacks the fix: a bump is needed
    for data, blocked in (
        ({"unattended": True}, plan.UNATTENDED),
        ({"unattended": True, "bump_to": "ab" * 20}, None),
        ({"unattended": True, "trusted_signers": "/etc/remedy/allowed_signers"}, None),
        ({}, None),  # a person's run may take latest
    ):
        s = from_host_data("cfx-llm2", data)
        p = plan.plan_restore(snap, s, desired.TOOL_CALLING)
        assert p.bump_blocked == blocked, data
        if blocked:
            assert p.path == plan.FALLBACK and not p.update_input
            assert any("bump skipped: unattended" in r for r in p.durable_blockers)


def test_nothing_is_blocked_when_no_bump_is_needed():
    s = from_host_data("cfx-llm2", {"unattended": True})
    snap = snapshot("durable")
    snap = dataclasses.replace(snap, checkout=dataclasses.replace(snap.checkout, changes=[]))
    assert plan.plan_restore(snap, s, desired.TOOL_CALLING).bump_blocked is None


def test_the_allowed_signers_file_is_checked_line_by_line():
    good = 'ops@x namespaces="git" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA\n# a comment\n'
    assert signers.check_allowed_signers(good, "/etc/a") == 1
    with pytest.raises(ConfigError, match="/etc/a, line 1: not 'PRINCIPALS"):
        signers.check_allowed_signers("ops@x AAAAC3Nza\n", "/etc/a")
    with pytest.raises(ConfigError, match="no key in it"):
        signers.check_allowed_signers("# nothing\n", "/etc/a")


def _git(repo: Path, *args: str, key: Path | None = None) -> str:
    env = {"HOME": str(repo.parent), "PATH": "/usr/bin:/bin"}
    for who in ("AUTHOR", "COMMITTER"):
        env.update({f"GIT_{who}_NAME": "A", f"GIT_{who}_EMAIL": "a@x"})
    sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []
    return subprocess.run(
        ["git", "-C", str(repo), *sign, *args], check=True, capture_output=True, text=True,
        env=env,
    ).stdout.strip()  # fmt: skip


def test_the_signature_check_reads_good_unsigned_and_unknown_keys(tmp_path):
    """The host-side check, run with this machine's git and ssh-keygen."""
    keys = {}
    for name in ("trusted", "stranger"):
        keys[name] = tmp_path / name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys[name])],
                       check=True)  # fmt: skip
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "master")
    revs = {}
    for name, key in (("trusted", keys["trusted"]), ("unsigned", None),
                      ("stranger", keys["stranger"])):  # fmt: skip
        (repo / "f").write_text(name)
        _git(repo, "add", "f")
        _git(repo, "commit", "-q", *(["-S"] if key else []), "-m", name, key=key)
        revs[name] = _git(repo, "rev-parse", "HEAD")
    pub = (tmp_path / "trusted.pub").read_text().split()
    allowed = f'maint@x namespaces="git" {pub[0]} {pub[1]}'
    states = {}
    for name, rev in revs.items():
        argv = bump.function_argv("signature", rev, repo.as_uri(), str(repo), allowed)
        proc = subprocess.run(argv, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})  # fmt: skip
        states[name] = signers.parse_signature(proc.stdout.strip(), rev)
    assert states["trusted"].trusted and states["trusted"].signer == "maint@x"
    assert states["unsigned"].state == "N" and "unsigned" in states["unsigned"].describe()
    assert states["stranger"].state == "U" and states["stranger"].key.startswith("SHA256:")
    assert states["stranger"].key in states["stranger"].describe()
    assert not list(Path("/tmp").glob("remedy-signers.*")), "the temporary file goes"


@pytest.mark.parametrize(
    "url,ref,expected",
    [
        ("git+file:///srv/t", "refs/heads/master", "git+file:///srv/t?ref=refs/heads/master&rev="),
        ("git+file:///srv/t", "", "git+file:///srv/t?rev="),
        ("github:o/r", "master", "github:o/r?rev="),  # the ref is git's, not a forge's
        ("https://h/t?ref=x", "", "https://h/t?ref=x&rev="),
    ],
)
def test_a_pinned_bump_overrides_the_input_with_its_url_and_rev(url, ref, expected):
    proc = subprocess.run(bump.function_argv("pin_url", url, ref, "ab" * 20),
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert proc.stdout == expected + "ab" * 20 + "\n"
