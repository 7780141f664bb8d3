"""The deploy and the manual script are two renderers of one step list: a host-data key
that changes one must change the other, or the manual script must refuse it by name.

For every host-data key (``remedy.core.config.host_data.KEYS``) the table gives a value other
than the default and what the key does:

* ``BOTH``: the deploy's steps change (their values, for the recorded twin states, or
  the HostData field an operation reads while it runs) and so does the manual script;
* ``REFUSED``: the deploy's steps change; the manual script says by name that it does
  not carry the key out (``manual_flow.NOT_CARRIED``);
* ``NEITHER``: no step changes; the row says what the key changes instead.

A key without a row fails: a new key must say which it is.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

import facts.serving
from remedy import runbooks
from remedy.core.config import desired
from remedy.core.config.host_data import KEYS, HostData, builder_of, from_host_data
from remedy.core.render import manual, manual_flow
from remedy.core.run.plan import plan_restore, unhealthy
from remedy.core.run.steps import plan_steps

PROJECT = Path(__file__).resolve().parents[2]
FACTS = PROJECT / "tests/facts/serving.HostSnapshot"
OPERATIONS = PROJECT / "remedy/operations"
STATES = ("fresh", "emergency_override", "durable", "runtime_debug")
REV = "5" * 40
SIGNERS = 'ops@cfx-llm2 namespaces="git" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJxrecorded'

BOTH, REFUSED, NEITHER = "both", "refused", "neither"


@dataclasses.dataclass(frozen=True)
class Row:
    value: object
    does: str
    why: str = ""  # NEITHER: what it changes instead


ROWS: dict[str, Row] = {
    "unit": Row("llm-serving.service", BOTH),
    "flake_dir": Row("/srv/nixos", BOTH),
    "flake_host": Row("cfx-llm9", BOTH),
    "flake_input": Row("tt-stack-fork", BOTH),
    "required_fix_rev": Row(REV, BOTH),
    "bump_to": Row(REV, BOTH),
    "trusted_signers": Row("/etc/remedy/allowed_signers", BOTH),
    "unattended": Row(True, REFUSED),
    "tool_call_parser": Row("qwen3_coder", BOTH),
    "required_env": Row({"QWEN36_SDPA_STREAMING": "1"}, BOTH),
    "durable": Row(False, BOTH),
    "server_url": Row("http://127.0.0.1:8009", BOTH),
    "model": Row("qwen3.6-27b-tt", BOTH),
    "min_mem_available_gb": Row(7.5, BOTH),
    "hugepages_target": Row({"1G": 4}, BOTH),
    "cards": Row(1, BOTH),
    "probe_timeout_s": Row(33, BOTH),
    "ready_timeout_s": Row(77, BOTH),
    "lock_wait_s": Row(5.0, BOTH),
    "allow_local_build": Row(True, BOTH),
    "managed_file_conflict": Row("overwrite", BOTH),
    "managed_options": Row({"hugepagesPerCard": "hardware.tt.pagesPerCard"}, BOTH),
    "build_max_jobs": Row(3, BOTH),
    "build_cores": Row(5, BOTH),
    "nix_memory_max_gb": Row(2.5, BOTH),
    "nix_timeout_s": Row(600, BOTH),
    "restart_window": Row("always", REFUSED),
    "restart_urgency": Row({"QWEN36_MERGE_BATCH_GUARD": "now"}, REFUSED),
    "restart": Row("never", REFUSED),
    "drain_timeout_s": Row(9, BOTH),
    "ignore_volatile": Row(["VLLM_LOGGING_LEVEL"], NEITHER, "what remedy status reports"),
    "flake_checks": Row([], BOTH),
    "audit_log": Row(
        "/var/log/remedy/audit.jsonl",
        NEITHER,
        "where the machine that runs remedy appends its audit line",
    ),
    "remedy_environment": Row("staging", NEITHER, "a label of the audit line"),
    # the fleet's rollout: how remedy converge orders hosts, never one host's steps
    "max_restarting": Row(2, NEITHER, "how many hosts of a fleet run restart at once"),
    "canary": Row(["cfx-llm2"], NEITHER, "which hosts of a fleet run go first, alone"),
    "max_failures": Row(1, NEITHER, "how many failed hosts stop a fleet run"),
    "rotation_out": Row(
        ["/usr/local/bin/lb", "disable", "{host}"],
        NEITHER,
        "a command remedy converge runs on its own machine before a host's drain",
    ),
    "rotation_in": Row(
        ["/usr/local/bin/lb", "enable", "{host}"],
        NEITHER,
        "a command remedy converge runs on its own machine after a host's verify",
    ),
    # building on a builder (issue 29): the deploy only; a builder's own data
    "build_host": Row("b1", REFUSED),
    "builder_key": Row("/root/.ssh/id_builder", REFUSED),
    "copy_signed": Row(True, REFUSED),
    "remedy_role": Row("builder", NEITHER, "a builder's own data: it serves nothing"),
    "builder_user": Row("nixbuild", NEITHER, "a builder's own data: who serving hosts are there"),
    "builder_address": Row("10.0.0.9", NEITHER, "a builder's own data: where it is reached"),
}
# What a key changes only together with another: the data both sides start from.
BASES = {"builder_key": {"build_host": "b1"}, "copy_signed": {"build_host": "b1"}}
BUILDER_DATA = {"remedy_role": "builder", "ssh_hostname": "10.0.0.9", "ssh_port": 2201}


def _snapshot(state: str):
    lines = json.loads((FACTS / f"{state}.json").read_text())["output"]
    return facts.serving.HostSnapshot().process(lines)


def _a_persons_commit(snap):
    """SNAP with remedy's managed file committed by a person with other values (the seed's
    owner decision): what managed_file_conflict decides about."""
    theirs = "{ lib, ... }:\n{\n  hardware.tenstorrent.hugepagesPerCard = lib.mkForce 2;\n}\n"
    managed = dataclasses.replace(
        snap.managed,
        content=theirs,
        last_commit=("e" * 40, "ops@cfx-llm2", "ops (cfx-llm2)"),
    )
    return dataclasses.replace(snap, managed=managed)


SNAPSHOTS = {state: _snapshot(state) for state in STATES}
SNAPSHOTS["a person's remedy.nix"] = _a_persons_commit(SNAPSHOTS["fresh"])
# HostData properties an operation reads, derived from a host-data key
DERIVED = {"flake_checks": ("checks",)}


def _plain(value):
    """Step values as JSON, with a HostData record left out (see _read_by_operations)."""
    if isinstance(value, HostData):
        return "<settings>"
    if dataclasses.is_dataclass(value):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value


def deploy_steps(data: dict) -> str:
    """Every step's operation, stage and values, for each recorded state and scope."""
    out = []
    for state, snap in SNAPSHOTS.items():
        s = from_host_data("cfx-llm2", data)
        for scope in (desired.TOOL_CALLING, desired.ALL):
            plan = plan_restore(snap, s, scope)
            builder = None
            if s.build_host != "serving":
                builder = builder_of(s, s.build_host, BUILDER_DATA)
            planned = plan_steps(plan, snap, s, "case", unhealthy(plan, snap), builder)
            out.append(
                json.dumps(
                    [state, [(st.op, st.stage, _plain(st.args)) for st in planned.steps]],
                    sort_keys=True,
                    default=str,
                )
            )
    return "\n".join(out)


def _read_by_operations(key: str) -> list[str]:
    """Operation modules that read KEY (or what is derived from it) from the HostData
    record a step carries."""
    names = "|".join((key, *DERIVED.get(key, ())))
    pattern = re.compile(rf"\b(s|host_data)\.({names})\b")
    return [p.name for p in sorted(OPERATIONS.glob("*.py")) if pattern.search(p.read_text())]


def manual_scripts(data: dict) -> str:
    """The manual scripts of the flow runbooks (001 tool calling, 006 every setting)."""
    allowed = SIGNERS if data.get("trusted_signers") else None
    scripts = []
    for rb in ("001", "006"):
        runbook = runbooks.load_valid_runbook(PROJECT, rb)
        scripts.append(manual.render(runbook, {"flake_host": "cfx-llm2", **data}, allowed))
    return "\n".join(scripts)


def test_every_host_data_key_has_a_row():
    assert set(ROWS) == set(KEYS), (
        f"keys without a row: {sorted(set(KEYS) - set(ROWS))}; rows without a key: "
        f"{sorted(set(ROWS) - set(KEYS))}"
    )
    assert {k for k, r in ROWS.items() if r.does == REFUSED} == set(manual_flow.NOT_CARRIED)
    assert all(r.why for r in ROWS.values() if r.does == NEITHER)


@pytest.mark.parametrize("key", sorted(ROWS))
def test_the_two_renderers_change_together(key):
    row = ROWS[key]
    base = BASES.get(key, {})
    data = {**base, key: row.value}
    from_host_data("cfx-llm2", data)  # a valid value
    deploy_changed = deploy_steps(base) != deploy_steps(data) or bool(_read_by_operations(key))
    default_script, script = manual_scripts(base), manual_scripts(data)
    manual_changed = default_script != script
    refused = f"host data {key}=" in script and "not carried out by this script" in script
    if row.does == BOTH:
        assert deploy_changed, f"{key}: the deploy's steps do not change"
        assert manual_changed and not refused, f"{key}: the manual script does not change"
    elif row.does == REFUSED:
        assert deploy_changed, f"{key}: the deploy's steps do not change: not a refusal"
        assert refused, f"{key}: the manual script neither carries it out nor says so"
    else:
        assert not deploy_changed, f"{key} changes the deploy's steps: give it a row"
        assert not manual_changed, f"{key} changes the manual script: give it a row"


def test_a_refused_key_is_not_said_at_its_default():
    assert "not carried out by this script" not in manual_scripts({})


@pytest.mark.parametrize("min_gb,cap_gb", [(4.0, None), (4.0, 2.5), (23.9, None), (30.0, 1.0)])
def test_the_manual_scripts_nix_bound_is_the_deploys(tmp_path, min_gb, cap_gb):
    """The manual script bounds the owner's nix as the deploy does: its awk, run here on
    recorded /proc/meminfo, gives remedy.core.readings.memory.nix_memory_bound's bytes."""
    import subprocess

    import facts.memory
    from remedy.core.readings import memory

    path = PROJECT / "tests/facts/memory.MemoryHeadroom/fresh.json"
    lines = json.loads(path.read_text())["output"]
    headroom = facts.memory.MemoryHeadroom().process(lines)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("\n".join(x for x in lines if not x.startswith("@@")) + "\n")
    cap = f"{cap_gb * 1e9:.0f}" if cap_gb else "0"
    proc = subprocess.run(
        ["awk", "-v", f"floor={min_gb * 1e9:.0f}", "-v", f"cap={cap}",
         manual_flow.NIX_BOUND_AWK, str(meminfo)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert int(proc.stdout) == memory.nix_memory_bound(headroom, min_gb, cap_gb)
