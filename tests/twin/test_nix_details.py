"""Issue 20: Nix and NixOS details the twin used to hide.

A start script made as writeShellApplication makes it (no preferLocalBuild, yet no
compile), a unit whose ExecStart and Environment come from NixOS's overrides.conf
drop-in, and required_fix_rev against an input Nix fetches over the network
(git+http on loopback). Each failed on the engine before its fix.
"""

from __future__ import annotations

import json

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import (
    as_owner,
    not_owned_by_owner,
    owner_git,
    probe_inside,
    remedy_json,
    run_restore,
    wait_probe,
)

pytestmark = pytest.mark.twin

DROPIN = "/run/systemd/system/tenstorrent-serving.service.d/override.conf"


def out_of(proc) -> str:
    return proc.stdout + proc.stderr


def audit(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def exists(twin, path) -> bool:
    return twin.exec(["test", "-e", path], check=False).returncode == 0


def after_reboot(twin) -> dict:
    _code, doc = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    return doc["hosts"][0]["snapshot"]["unit"]["after_reboot"]


@pytest.mark.nix_cli
def test_a_strict_shell_start_script_is_not_a_compile_but_its_shellcheck_is(twin, tmp_path):
    """writeShellApplication sets preferLocalBuild = false: the script is still no
    compile. Its checkPhase runs shellcheck-minimal (nixpkgs 24.11), a package: where
    the host must build it, that is a compile on the host and the bump is refused
    naming it; once it is in the store (as a substitute puts it), the run goes on."""
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.strict_shell_commit())
    refused = run_restore(twin, audit_log=tmp_path / "r.jsonl")
    out = out_of(refused)
    said = " ".join(out.split())
    assert "compiled on the serving host (" in said, out[-4000:]
    assert "shellcheck-minimal-0.10.0.drv" in said, out[-4000:]
    assert "start-tenstorrent-serving.drv" not in said.split("compiled on the serving host")[1]

    # shellcheck-minimal in the store, as a substitute from a binary cache leaves it
    stand_in = f"{fixtures.TT_STACK_DIR}/{fixtures.SHELLCHECK_FILE}"
    twin.exec(["nix-build", "--no-out-link", stand_in], timeout=300)
    proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    out = out_of(proc)
    assert proc.returncode == 0, out[-4000:]
    assert "compiled on the serving host" not in out
    assert audit(tmp_path / "a.jsonl")[-1]["path"] == "durable", out[-3000:]
    assert probe_inside(twin).outcome == "parsed"
    view = after_reboot(twin)
    assert view["parser"]["value"] == "qwen3_xml"
    assert view["parser"]["source"].endswith("/bin/start-tenstorrent-serving")
    assert not_owned_by_owner(twin) == []


def test_execstart_and_environment_from_the_units_own_dropin(make_twin, tmp_path):
    """NixOS's overrides.conf (a package's unit, or overrideStrategy = "asDropin"): the
    proof applies the built system's drop-ins and the next-boot view the profile's."""
    twin = make_twin(with_emergency_override=True)
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.asdropin_commit())
    proc = run_restore(twin, audit_log=tmp_path / "a.jsonl")
    out = out_of(proc)
    assert proc.returncode == 0, out[-4000:]
    assert audit(tmp_path / "a.jsonl")[-1]["path"] == "durable", out[-3000:]
    assert not exists(twin, DROPIN)
    assert probe_inside(twin).outcome == "parsed"
    view = after_reboot(twin)
    assert view["parser"]["value"] == "qwen3_xml"
    assert view["exec_start_via"].endswith("tenstorrent-serving.service.d/overrides.conf")
    for key in ("QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD"):
        setting = view["environment"][key]
        assert setting["value"] == "1" and setting["source"].endswith("/overrides.conf"), view
    machine.reboot(twin.name, progress=lambda _m: None)
    assert wait_probe(twin).outcome == "parsed"
    code, doc = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    host = doc["hosts"][0]
    # the restore's scope is tool calling: the pool and the memory guard are converge's
    lagging = {d["key"] for d in host["settings"] if d["state"] != "in sync"}
    assert lagging <= {"hugepages", "memory_guard"}, host


def serve_tt_stack_over_http(twin) -> str:
    """Serve the tt-stack repo as a remote would (git's dumb HTTP on loopback, a port of
    this twin's own) and point /etc/nixos's input and lock at it; returns the URL."""
    port = twin.server_port + 1000
    repo = fixtures.TT_STACK_DIR
    hook = f"{repo}/.git/hooks/post-commit"
    as_owner(twin, "sh", "-c", f"printf '#!/bin/sh\\nexec git update-server-info\\n' > {hook}")
    as_owner(twin, "chmod", "0755", hook)
    owner_git(twin, "update-server-info", repo=repo)
    twin.exec(
        [
            "systemd-run", "--unit=twin-git-http", f"--uid={fixtures.OWNER}", "--",
            "python3", "-m", "http.server", "--bind", "127.0.0.1",
            "--directory", "/srv/git", str(port),
        ]
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/tt-stack/.git"
    ready = f"for i in $(seq 50); do curl -sf {url}/HEAD && exit 0; sleep 0.1; done; exit 1"
    twin.exec(["sh", "-c", ready])
    for rel in ("flake.nix", "flake.lock"):
        path = f"{fixtures.NIXOS_DIR}/{rel}"
        text = twin.exec(["cat", path]).stdout.replace(f"file://{repo}", url)
        twin.exec(["tee", path], input=text, user=fixtures.OWNER)
    owner_git(twin, "commit", "-q", "-am", "tt-stack from its remote", "--author", "ops <ops@x>")
    return url


@pytest.mark.nix_cli
def test_required_fix_rev_is_checked_through_what_nix_fetched(twin, tmp_path):
    url = serve_tt_stack_over_http(twin)
    revs = owner_git(twin, "log", "--format=%H", repo=fixtures.TT_STACK_DIR).stdout.split()
    missing = "e" * 40
    proc = run_restore(twin, "--data", f"required_fix_rev={missing}", audit_log=tmp_path / "a")
    out = out_of(proc)
    assert proc.returncode == 0, out[-3000:]
    assert f"does not contain required_fix_rev {missing[:12]}" in out, out[-3000:]
    assert "Nix's fetch of" in out  # read from Nix's own git cache, not the checkout
    assert exists(twin, DROPIN) and probe_inside(twin).outcome == "parsed"
    fix = revs[1]  # #34, the parser fix
    proc = run_restore(twin, "--data", f"required_fix_rev={fix}", audit_log=tmp_path / "a")
    out = out_of(proc)
    assert proc.returncode == 0, out[-3000:]
    assert audit(tmp_path / "a")[-1]["path"] == "durable", out[-3000:]
    lock = json.loads(twin.exec(["cat", f"{fixtures.NIXOS_DIR}/flake.lock"]).stdout)
    assert lock["nodes"]["tt-stack"]["locked"]["url"] == url.removeprefix("git+")
    assert probe_inside(twin).outcome == "parsed"
    assert not_owned_by_owner(twin) == []
