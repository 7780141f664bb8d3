"""Issue 28, item 4: a signature is checked also for an input Nix fetched as a tarball.

Nix fetches ``github:`` and ``gitlab:`` inputs as tarballs, which leave no git
repository on the host (field notes section 10): neither a ``git+file`` checkout nor
Nix's git cache holds the locked rev. The bump then checks the rev as ``--dry`` does,
fetching the input's branch with git, so that the run and ``--dry`` agree. Here the
twin serves tt-stack over git's HTTP on loopback, and the owner's Nix git cache is an
empty directory, as after a tarball fetch.
"""

from __future__ import annotations

import pytest

from remedy.core.programs import bump, commands, signers
from remedy.twin import fixtures, machine
from tests.conftest import as_owner, owner_git
from tests.twin.test_nix_details import serve_tt_stack_over_http

pytestmark = pytest.mark.twin


def test_the_run_checks_a_rev_no_repository_holds_as_dry_does(twin):
    machine.commit_as_owner(
        twin, fixtures.TT_STACK_DIR, fixtures.later_commit(fixtures.MAINTAINER_KEY)
    )
    url = serve_tt_stack_over_http(twin).removeprefix("git+")
    head = owner_git(twin, "rev-parse", "HEAD", repo=fixtures.TT_STACK_DIR).stdout.strip()
    pub = twin.exec(["cat", fixtures.MAINTAINER_KEY + ".pub"]).stdout.split()
    allowed = f'{fixtures.MAINTAINER_PRINCIPAL} namespaces="git" {pub[0]} {pub[1]}'
    empty = "/tmp/h4-no-nix-git-cache"  # what a tarball fetch leaves: no git repository
    as_owner(twin, "mkdir", "-p", empty)
    env = ["env", f"XDG_CACHE_HOME={empty}"]

    run = as_owner(
        twin, *env, *bump.function_argv("signature", head, url, "", allowed, "HEAD"),
        check=False,
    )  # fmt: skip
    dry = as_owner(twin, *env, *commands.preview_bump(url, None, None, allowed), check=False)
    assert run.returncode == 0, run.stderr
    said = run.stdout.strip().splitlines()[-1]
    signature = signers.parse_signature(said, head)
    assert signature.trusted and signature.signer == fixtures.MAINTAINER_PRINCIPAL
    assert dry.stdout.splitlines() == [f"would-take {head}", said]
    left = twin.exec(["sh", "-c", "ls -d /tmp/remedy-* 2>/dev/null || true"]).stdout
    assert left == ""
