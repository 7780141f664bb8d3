"""The owner's nix runs in a transient scope (MemoryMax). A run makes several of them
(the dry run of the system, then of each flake check, the build): a scope of the same
run that has just ended may still be loaded when the next starts, more so on a busy
host, and systemd-run refuses a name that is ("already loaded or has a fragment file").
Seen in CI: the flake check "does not evaluate" and the durable path was given up.
None of this depends on Nix's CLI: trixie only."""

from __future__ import annotations

import re
import time

import pytest

from remedy.core.programs import commands

pytestmark = pytest.mark.twin


def test_a_scope_name_that_is_still_loaded_does_not_stop_the_next_nix(twin):
    """The next nix, in the same bounded scope remedy runs its evaluations in."""
    # a scope of the same name that has not gone yet
    twin.exec(["sh", "-c", "setsid systemd-run --scope --unit=remedy-nix-eval-r1 -- sleep 60"
               " </dev/null >/dev/null 2>&1 &"])  # fmt: skip
    for _ in range(50):
        held = twin.exec(["systemctl", "is-active", "remedy-nix-eval-r1.scope"], check=False)
        if held.stdout.strip() == "active":
            break
        time.sleep(0.2)
    assert held.stdout.strip() == "active", held.stdout + held.stderr
    # the process that becomes nix says its cgroup and its unit's memory bound (the
    # twin's cgroup v1 memory controller is not the container's: systemd's record)
    where = ("cg=$(sed -n 's/^0:://p' /proc/$$/cgroup); echo \"$cg\";"
             ' systemctl show -P MemoryMax -- "${cg##*/}"')  # fmt: skip
    nix = ["sh", "-c", f'{where}; exec "$@"', "sh", "nix", "--version"]
    ran = twin.exec(commands.nix_bounded(nix, 10**9, "remedy-nix-eval-r1", 30), check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    cgroup, bound, version = ran.stdout.splitlines()
    assert version.startswith("nix (Nix) "), ran.stdout
    # its own scope, not the one still loaded, nor the session it was started from
    assert re.fullmatch(r"/system\.slice/remedy-nix-eval-r1-\d+\.scope", cgroup), cgroup
    assert bound == str(10**9), bound  # the scope's MemoryMax
    twin.exec(["systemctl", "stop", "remedy-nix-eval-r1.scope"], check=False)
