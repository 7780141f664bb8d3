"""The approved bump's host-side program (remedy/host/approved_bump.sh): its shell
judgements agree with the Python ones they replace, run by a real POSIX shell here."""

from __future__ import annotations

import subprocess

import pytest

from remedy import host
from remedy.core.programs import bump, signers
from remedy.core.readings import nix as nix_core

URLS = [
    "git+file:///srv/git/tt-stack",
    "git+file:///srv/git/tt-stack?ref=master",
    "git+https://forge.example/bitpartner/tt-stack?ref=master&rev=" + "a" * 40,
    "git+ssh://git@forge.example/bitpartner/tt-stack",
    "git+http://127.0.0.1:9418/tt-stack",
    "github:bitpartner/tt-stack",
    "github:bitpartner/tt-stack/master",
    "gitlab:bitpartner/tt-stack",
    "sourcehut:~bit/tt-stack",
    "https://forge.example/tt-stack?rev=" + "b" * 40,
    "https://forge.example/tt-stack?ref=master",
    "https://forge.example/tt-stack.tar.gz",
    "path:/srv/tt-stack",
    "tarball+https://forge.example/tt-stack.tar.gz",
    "git+",
    "github:",
    "",
]


def shell(call: str, *args: str) -> subprocess.CompletedProcess:
    """FUNCTIONS, then CALL, in dash (the shell closest to POSIX sh on Debian)."""
    sh = "dash" if subprocess.run(["which", "dash"], capture_output=True).returncode == 0 else "sh"
    return subprocess.run(
        [sh, "-c", bump.FUNCTIONS + "\n" + call, "sh", *args],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


@pytest.mark.parametrize("url", URLS)
def test_git_remote_in_shell_is_the_python_one(url):
    proc = shell('git_remote "$1"', url)
    expected = nix_core.git_remote(url)
    if expected is None:
        assert proc.returncode != 0 and proc.stdout == "", (url, proc.stdout)
    else:
        assert (proc.returncode, proc.stdout) == (0, expected + "\n"), url


@pytest.mark.parametrize(
    "state,key,signer",
    [
        ("G", "SHA256:abc", "maintainers@tt-stack"),
        ("U", "SHA256:stranger", ""),
        ("N", "", ""),
        ("B", "SHA256:bad", ""),
        ("Z", "", ""),  # a state git may add later
    ],
)
def test_describe_in_shell_is_the_python_one(state, key, signer):
    rev, author = "0123456789abcdef" * 2 + "01234567", "ops (cfx-llm2) <ops@cfx-llm2>"
    proc = shell('describe "$@"', state, key, signer, author, rev)
    python = signers.Signature(rev, state, key or None, signer or None, author).describe()
    assert proc.stdout == python


def test_every_signature_state_has_its_wording_in_the_program():
    for state, text in signers.STATES.items():
        assert shell('describe "$1" "" "" a "$2"; echo', state, "f" * 40).stdout.endswith(
            text + "\n"
        )


@pytest.mark.parametrize(
    "said,expected",
    [
        ("error: unable to download 'x'", "error: unable to download 'x'"),
        ("warning: a\nfetching\nfatal: bad object\nmore", "fatal: bad object"),
        ("one\ntwo\n\n", "two"),
        ("", "no output"),
    ],
)
def test_why_of_picks_the_line_that_says_what_went_wrong(said, expected):
    assert shell('why_of "$1"', said).stdout == expected


def test_the_program_has_no_placeholder_left_and_is_valid_shell():
    import re

    program = host.text("approved_bump.sh")
    assert re.findall(r"@[A-Z_]+@", program) == []
    assert subprocess.run(["sh", "-n", "-c", program]).returncode == 0
