"""Issue 28, item 8: a check does not evaluate NixOS on the serving host at every run.

The answer of the evaluation (what remedy's file overrides) is kept on the host; a
check that finds it under the same key (the checkout's HEAD and flake.lock, remedy's
file, managed_options) starts no nix process and makes one round trip. A new commit to
the checkout is evaluated again.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from remedy.core.config import options
from tests.conftest import PROJECT, owner_git, run_deploy

pytestmark = [pytest.mark.twin, pytest.mark.nix_cli]

# `remedy converge` in this process's Python, counting pyinfra's remote commands (one
# per round trip: each fact is one `sh -c` over the SSH connection).
COUNTED = """
import atexit, sys
from pyinfra.connectors.ssh import SSHConnector
calls = []
run = SSHConnector.run_shell_command
def counted(self, *args, **kwargs):
    calls.append(1)
    return run(self, *args, **kwargs)
SSHConnector.run_shell_command = counted
atexit.register(lambda: sys.stderr.write(f"round trips: {len(calls)}\\n"))
from remedy.cli.main import main
main(sys.argv[1:])
"""

# A spy in front of the twin's nix (root's and the owner's PATH find /usr/local/bin
# first): it notes every nix process a command starts, then runs the real one.
SPY = '#!/bin/sh\necho "$*" | head -c 60 >> /tmp/nix-calls; echo >> /tmp/nix-calls\n'
SPY += 'exec /usr/bin/nix "$@"\n'


def check(twin) -> tuple[int, dict, int]:
    """``remedy converge --check --json`` of TWIN: (exit code, its host, round trips)."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNTED, "converge", "inventory/twin.py", "--check", "--json",
         "--limit", twin.name],
        capture_output=True, text=True, cwd=PROJECT, timeout=600,
    )  # fmt: skip
    counted = [ln for ln in proc.stderr.splitlines() if ln.startswith("round trips: ")]
    assert counted, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    return proc.returncode, doc["hosts"][0], int(counted[-1].split()[-1])


def nix_calls(twin) -> list[str]:
    """The nix processes started since the last call (what the spy noted)."""
    out = twin.exec(["sh", "-c", "cat /tmp/nix-calls; : > /tmp/nix-calls"]).stdout
    return [line for line in out.splitlines() if line]


def test_a_second_check_starts_no_nix_and_a_new_commit_is_evaluated_again(twin):
    proc = run_deploy(twin, "converge")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    twin.exec(["sh", "-c", "cat > /usr/local/bin/nix && chmod 0755 /usr/local/bin/nix"],
              input=SPY)  # fmt: skip
    twin.exec(["sh", "-c", ": > /tmp/nix-calls && chmod 0666 /tmp/nix-calls"])

    code, first, _trips = check(twin)
    assert code == 0, first
    overrides = [n for n in first["notes"] if n.startswith("overrides: ")]
    assert overrides, first["notes"]
    nix_calls(twin)  # the first check may ask this nix for its version, and evaluate

    code, second, trips = check(twin)
    assert code == 0, second
    assert nix_calls(twin) == [], "the second check started nix on the serving host"
    assert trips == 1, f"{trips} round trips on a second check"
    assert [n for n in second["notes"] if n.startswith("overrides: ")] == overrides
    recorded = [n for n in second["notes"] if options.RECORD in n]
    assert recorded and "not evaluated again" in recorded[0], second["notes"]
    mode = twin.exec(["stat", "-c", "%u %a %F", options.RECORD]).stdout.split(maxsplit=2)
    assert mode == ["0", "600", "regular file\n"]

    owner_git(twin, "commit", "-q", "--allow-empty", "-m", "a person's commit",
              "--author", "ops <ops@cfx-llm2>")  # fmt: skip
    code, third, trips = check(twin)
    assert any(" eval " in f" {c} " for c in nix_calls(twin)), "the new HEAD was not evaluated"
    assert trips == 2
    assert [n for n in third["notes"] if n.startswith("overrides: ")] == overrides
    assert not [n for n in third["notes"] if options.RECORD in n]
