"""Issue 28 item 6: `nix --version` may print a warning before its version.

A setting in nix.conf that this Nix does not know (`lazy-trees = true`, Determinate
Nix's) makes the twin's real Nix print `warning: unknown setting 'lazy-trees'` first.
remedy read that as "Nix is not installed" and took the /run fallback, and the audit
said nothing of why.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import PROJECT, probe_inside, twin_inventory

pytestmark = pytest.mark.twin

NIX_CONF = "/etc/nix/nix.conf"


def converge(inventory, *argv: str) -> tuple[int, str]:
    """``remedy converge INVENTORY --restart now ARGV``: (exit code, its output)."""
    proc = subprocess.run(
        ["remedy", "converge", str(inventory), "--restart", "now", *argv],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def last_audit(path) -> dict:
    return json.loads(path.read_text().splitlines()[-1])


@pytest.mark.nix_cli
def test_a_warning_before_nixs_version_keeps_the_durable_path(twin, tmp_path):
    log = tmp_path / "audit.jsonl"
    inventory = twin_inventory(tmp_path / "inv.py", twin, audit_log=str(log))
    conf = twin.exec(["cat", NIX_CONF]).stdout

    # A nix.conf that Nix refuses: remedy says what `nix --version` printed, and the
    # audit keeps it as the reason the durable path was not taken.
    twin.exec(["tee", NIX_CONF], input=conf + "lazy-trees\n")
    code, out = converge(inventory, "--limit", twin.name)
    assert code == 3, out[-3000:]
    record = last_audit(log)
    assert record["path"] == "fallback", record
    (why,) = [b for b in record["details"]["durable_blockers"] if "Nix" in b]
    assert why.startswith("Nix's version could not be read"), why
    # what Nix printed: "illegal" (2.8) or "syntax error in" (2.26) "configuration line …"
    assert "configuration line 'lazy-trees' in '/etc/nix/nix.conf'" in why, why
    said = " ".join(out.split())  # the table wraps at 80 columns
    assert "Nix's version could not be read" in said and "configuration line" in said, out
    assert "Nix is not installed" not in said
    assert probe_inside(twin).outcome == "parsed"

    # The same setting as Determinate Nix writes it: only a warning before the version.
    twin.exec(["tee", NIX_CONF], input=conf + "lazy-trees = true\n")
    version = twin.exec(["nix", "--version"])
    assert "warning: unknown setting 'lazy-trees'" in version.stderr, version
    code, out = converge(inventory, "--limit", twin.name)
    assert code == 0, out[-3000:]
    record = last_audit(log)
    assert record["path"] == "durable", record
    assert record["details"]["durable_blockers"] == []
    assert "durable path not possible" not in out
    assert probe_inside(twin).outcome == "parsed"
