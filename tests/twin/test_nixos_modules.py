"""Issue 19 on twins: the configuration is evaluated as NixOS modules, and remedy's
managed file is one.

The twin's stand-in for lib.evalModules must enforce NixOS's rules (priorities,
conflicting definitions, options that do not exist), and a managed_options path that
does not exist blocks the durable path with NixOS's own message and the key to fix.
Both depend on how the host's Nix evaluates and prints errors: both Nix bases run it.
"""

from __future__ import annotations

import json

import pytest

from remedy.core.config import desired
from remedy.core.config.host_data import from_host_data
from remedy.twin import fixtures
from tests.conftest import as_owner, owner_git, probe_inside, run_deploy, status_settings

pytestmark = [pytest.mark.twin, pytest.mark.nix_cli]

SCRATCH = "/tmp/remedy-modules-check"
MANAGED = "hosts/cfx-llm2/remedy.nix"
NIX = ["nix", "--extra-experimental-features", "nix-command flakes"]
HOST = 'nixosConfigurations."cfx-llm2"'


def out_of(proc) -> str:
    return proc.stdout + proc.stderr


def evaluate(twin, managed: str | None, attr: str = "config.boot.kernelParams"):
    """The scratch clone's configuration, evaluated with MANAGED as remedy.nix."""
    if managed is None:
        as_owner(twin, "rm", "-f", f"{SCRATCH}/{MANAGED}")
        owner_git(twin, "rm", "-q", "--cached", "--ignore-unmatch", MANAGED, repo=SCRATCH)
    else:
        twin.exec(["tee", f"{SCRATCH}/{MANAGED}"], input=managed, user=fixtures.OWNER)
        owner_git(twin, "add", MANAGED, repo=SCRATCH)
    return as_owner(twin, *NIX, "eval", "--json", f"{SCRATCH}#{HOST}.{attr}", check=False)


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_the_stand_in_follows_nixos_and_a_wrong_option_path_blocks_the_durable_path(
    make_twin, tmp_path
):
    twin = make_twin(with_emergency_override=True)
    as_owner(twin, "git", "clone", "-q", fixtures.NIXOS_DIR, SCRATCH)
    text = desired.managed_nix(from_host_data("cfx-llm2", {}))

    # without remedy's file: the host's own hugepagesPerCard = 2 gives 1G×4
    plain = evaluate(twin, None)
    assert plain.returncode == 0, plain.stderr
    assert "hugepages=4" in json.loads(plain.stdout)
    # remedy's module forces 1 over the host's 2
    forced = evaluate(twin, text)
    assert forced.returncode == 0, forced.stderr
    assert "hugepages=2" in json.loads(forced.stdout)
    # mkDefault (1000) loses to the host's plain definition (100)
    default = evaluate(twin, text.replace("lib.mkForce 1;", "lib.mkDefault 1;"))
    assert "hugepages=4" in json.loads(default.stdout), default.stderr
    # a plain definition beside the host's 2, at the same priority: NixOS's conflict
    conflict = evaluate(twin, text.replace("lib.mkForce 1;", "1;"))
    said = one_line(conflict.stderr)
    assert conflict.returncode != 0
    assert (
        "The option `hardware.tenstorrent.hugepagesPerCard' has conflicting definition values:"
    ) in said, said
    assert "configuration.nix': 2" in said and "remedy.nix': 1" in said
    # the same value twice is no conflict
    same = evaluate(twin, text.replace("lib.mkForce 1;", "2;"))
    assert "hugepages=4" in json.loads(same.stdout), same.stderr
    # an option nobody declares
    unknown = evaluate(twin, text.replace(".deviceResident =", ".devicResident ="))
    said = one_line(unknown.stderr)
    assert unknown.returncode != 0
    assert "The option `services.tenstorrent-serving.devicResident' does not exist." in said, said
    # a value of the wrong type
    typed = evaluate(twin, text.replace("lib.mkForce 1;", 'lib.mkForce "1";'))
    assert "is not of type `signed integer'" in one_line(typed.stderr), typed.stderr
    # the option's definitions, as NixOS gives them
    defs = evaluate(
        twin, text, "options.hardware.tenstorrent.hugepagesPerCard.definitionsWithLocations"
    )
    found = json.loads(defs.stdout)
    assert [d["value"] for d in found] == [1] and found[0]["file"].endswith(MANAGED)

    # remedy with a managed_options path that does not exist, from the seed's state
    wrong = json.dumps({"deviceResident": "services.tenstorrent-serving.devicResident"})
    head = owner_git(twin, "rev-parse", "HEAD").stdout
    log = tmp_path / "audit.jsonl"
    proc = run_deploy(twin, "converge", "--data", f"managed_options={wrong}", audit_log=log)
    out = one_line(out_of(proc))
    assert proc.returncode == 0, out_of(proc)[-3000:]  # the fallback took over
    at = out.index("outcome: path durable+fallback; durable path abandoned:")
    outcome = out[at:]
    assert "The option `services.tenstorrent-serving.devicResident' does not exist." in outcome
    # what host data to fix: the workstation adds it to the proof's give-up (it knows
    # the host data), which the person reads before the host's outcome line, and the
    # audit's outcome carries it
    fix = "host data managed_options.deviceResident names an option"
    assert fix in out[:at], out[:at][-3000:]
    record = json.loads(log.read_text().splitlines()[-1])
    assert fix in record["details"]["outcome"], record
    assert probe_inside(twin).outcome == "parsed"  # the fallback serves the right parser
    assert owner_git(twin, "rev-parse", "HEAD").stdout == head  # the checkout is untouched
    code, settings = status_settings(twin)
    assert settings["tool_call_parser"]["live"] == "qwen3_xml"
    assert settings["hugepages"]["next_boot"] == "1G×4", settings["hugepages"]
