"""Issue 43 D on a twin: two setting files for one variable stop every run before it
connects.

``environment VLLM_A=1`` and ``unit-property Environment=VLLM_A=2`` passed `remedy
settings check`; a converge then wrote both into the server's unit and restarted it,
and every ``--restart now`` run after did the same, since one of the two always lost.
The files go to a directory of the test's own (REMEDY_SETTINGS_DIR), the audit log to
its tmp_path.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import PROJECT, server_starts, twin_inventory, unit_props

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
VLLM_A = "issue: tt-stack#70\nkind: environment\nname: VLLM_A\nvalue: '1'\nurgency: now\n"
ENVIRONMENT = (
    "issue: tt-stack#71\nkind: unit-property\nname: Environment\nvalue: VLLM_A=2\nurgency: now\n"
)


def remedy(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["remedy", *argv], capture_output=True, text=True, cwd=PROJECT, timeout=900
    )


def test_two_settings_for_one_variable_are_refused_and_the_server_is_left_alone(
    make_twin, tmp_path, monkeypatch
):
    settings = tmp_path / "settings"
    settings.mkdir()
    (settings / "vllm-a.yaml").write_text(VLLM_A)
    (settings / "environment.yaml").write_text(ENVIRONMENT)
    monkeypatch.setenv("REMEDY_SETTINGS_DIR", str(settings))
    twin = make_twin()
    audit_log = tmp_path / "audit.jsonl"
    # durable=False: the /run fallback would carry both at once, and restart for them
    inventory = twin_inventory(
        tmp_path / "inventory.py", twin, durable=False, audit_log=str(audit_log)
    )
    before = (unit_props(twin)["MainPID"], server_starts(twin))

    run = remedy("converge", str(inventory), "--restart", "now")
    said = " ".join(run.stderr.split())
    assert run.returncode == 2, (run.stdout + run.stderr)[-3000:]
    assert f"{settings}/vllm-a.yaml" in said and f"{settings}/environment.yaml" in said, said
    assert "sets the variable VLLM_A" in said, said
    # nothing ran: the same server process, neither value in its unit, no audit record
    assert (unit_props(twin)["MainPID"], server_starts(twin)) == before
    environment = twin.exec(["systemctl", "show", "-P", "Environment", UNIT]).stdout
    assert "VLLM_A" not in environment, environment
    assert not audit_log.exists()

    checked = remedy("settings", "check")
    assert checked.returncode == 1 and "settings OK" not in checked.stdout, checked.stdout
    assert "sets the variable VLLM_A, as" in " ".join(checked.stdout.split())
