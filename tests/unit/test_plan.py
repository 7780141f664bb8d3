"""The restore plan, decided from recorded twin snapshots before anything acts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import facts.serving
from remedy.core.config import desired, volatile
from remedy.core.config.host_data import from_host_data
from remedy.core.readings import probe
from remedy.core.readings.runtime import RuntimeFile, RuntimeState
from remedy.core.readings.serving import DropIn, volatile_entries
from remedy.core.run import plan

FIXTURES = Path(__file__).parent.parent / "facts" / "serving.HostSnapshot"


def snapshot(case: str):
    lines = json.loads((FIXTURES / f"{case}.json").read_text())["output"]
    return facts.serving.HostSnapshot().process(lines)


def settings(**data):
    return from_host_data("cfx-llm2", data)


def with_runtime_dropin(snap, dropin: DropIn, exec_start: str | None = None):
    unit = dataclasses.replace(snap.unit, dropins=[*snap.unit.dropins, dropin])
    if exec_start:
        unit = dataclasses.replace(unit, now=dataclasses.replace(unit.now, exec_start=exec_start))
    return dataclasses.replace(snap, unit=unit)


def test_fresh_host_takes_the_durable_path_and_restarts():
    p = plan.plan_restore(snapshot("fresh"), settings())
    assert (p.path, p.rebuild, p.remove_override, p.restart_expected) == (
        "durable",
        True,
        False,
        True,
    )


def test_seed_state_is_made_durable_at_next_boot_with_no_restart_by_default():
    # live serves qwen3_xml on the override; only window settings (the merge guard, the
    # stale override) would need a restart, and restart_window defaults to never
    p = plan.plan_restore(snapshot("emergency_override"), settings(), desired.ALL)
    assert (p.path, p.rebuild, p.boot_only) == ("durable", True, True)
    assert not p.remove_override and not p.restart_expected
    assert p.restart.pending == ["QWEN36_MERGE_BATCH_GUARD", "runtime_override"]
    assert p.restart.when.startswith("at next boot")
    assert "durable at next boot" in " ".join(p.reasons)


def test_seed_state_with_restart_now_removes_the_override_before_the_switch():
    p = plan.plan_restore(snapshot("emergency_override"), settings(restart="now"))
    assert (p.path, p.rebuild, p.remove_override, p.boot_only) == ("durable", True, True, False)
    assert p.restart_expected and p.restart.allowed
    # a person asked for now: the restart is now, as for a setting that cannot wait (a
    # drain past its bound restarts and says what it cuts, never postpones; issue 43 E2)
    assert p.urgent
    assert not plan.plan_restore(
        snapshot("emergency_override"), settings(restart_window="always")
    ).urgent  # a window restart is postponed instead


def test_a_now_urgency_for_the_guard_restarts_the_seed_state_at_once():
    s = settings(restart_urgency={"QWEN36_MERGE_BATCH_GUARD": "now"})
    p = plan.plan_restore(snapshot("emergency_override"), s)
    assert p.restart_expected and not p.boot_only and p.urgent


def test_a_fresh_host_restarts_now_whatever_the_window():
    p = plan.plan_restore(snapshot("fresh"), settings(restart="never"))
    assert p.restart_expected and not p.boot_only and p.urgent
    assert "tool_call_parser" in p.restart.urgent


def test_a_working_hand_made_override_is_left_alone_on_the_fallback():
    # the seed's override exports SDPA streaming only: enough when that is all that is asked
    s = settings(durable=False, required_env={"QWEN36_SDPA_STREAMING": "1"})
    p = plan.plan_restore(snapshot("emergency_override"), s)
    assert p.path == "fallback" and not p.restart_expected
    assert "nothing to rewrite" in p.reasons[0]


def test_the_fallback_rewrites_an_override_that_lacks_the_merge_batch_guard():
    waits = plan.plan_restore(snapshot("emergency_override"), settings(durable=False))
    assert waits.path == "fallback" and not waits.restart_expected  # a window setting
    s = settings(durable=False, restart_window="always")
    p = plan.plan_restore(snapshot("emergency_override"), s)
    assert p.path == "fallback" and p.restart_expected and p.write_override
    (guard,) = [sp for sp in p.settings if sp.drift.key == "QWEN36_MERGE_BATCH_GUARD"]
    assert guard.drift.state == "drifted" and "/run override" in guard.action


def test_durable_host_is_a_noop():
    p = plan.plan_restore(snapshot("durable"), settings())
    assert p.path == "noop" and not p.restart_expected


def test_stale_override_after_the_durable_fix_is_removed_even_without_durable():
    snap = with_runtime_dropin(
        snapshot("durable"),
        DropIn(
            "/run/systemd/system/tenstorrent-serving.service.d/override.conf",
            "runtime",
            "[Service]\nExecStart=\nExecStart=/run/tt-serving-override/start\n",
        ),
        exec_start="/run/tt-serving-override/start",
    )
    p = plan.plan_restore(snap, settings(durable=False, restart="now"))
    assert (p.path, p.rebuild, p.remove_override, p.restart_expected) == (
        "durable",
        False,
        True,
        True,
    )
    kept = plan.plan_restore(snap, settings(durable=False))  # default: waits for a window
    assert (kept.remove_override, kept.restart_expected) == (False, False)


def test_an_unrelated_runtime_dropin_is_not_an_override():
    control = DropIn(
        "/run/systemd/system.control/tenstorrent-serving.service.d/50-MemoryMax.conf",
        "runtime",
        "[Service]\nMemoryMax=60G\n",
    )
    snap = with_runtime_dropin(snapshot("durable"), control)
    assert plan.override_dropins(snap, settings()) == []
    assert plan.plan_restore(snap, settings()).path == "noop"
    # not a managed setting's state: unmanaged volatile state, reported with what it sets
    snap = dataclasses.replace(
        snap, runtime=RuntimeState([RuntimeFile(control.path, None, control.content)], read=True)
    )
    assert [e.text() for e in volatile.unmanaged(snap, settings())] == [
        f"{control.path}: MemoryMax=60G; after reboot: gone"
    ]
    assert control.path not in {e.subject for e in volatile_entries(snap.unit, None, None)}


def test_a_busy_server_with_a_correct_configuration_is_not_restarted():
    busy = probe.classify(None, "", "curl: (28) Operation timed out after 20001 milliseconds")
    assert busy.outcome == "unreachable" and busy.timed_out
    snap = dataclasses.replace(snapshot("durable"), probe=busy)
    p = plan.plan_restore(snap, settings())
    assert p.path == "noop" and "timed out" in " ".join(p.reasons)
    refused = probe.classify(None, "", "curl: (7) Failed to connect to 127.0.0.1 port 8000")
    assert not refused.timed_out
    assert plan.plan_restore(dataclasses.replace(snap, probe=refused), settings()).restart_expected


def test_the_proof_requires_the_environment_and_the_managed_settings():
    s = settings()
    env = {"QWEN36_SDPA_STREAMING": "1", "QWEN36_MERGE_BATCH_GUARD": "1"}
    half = plan.Proof("/nix/store/x-system", "/nix/store/y-start", "qwen3_xml", {})
    assert half.missing(s) == [
        "QWEN36_SDPA_STREAMING 1 (it has unset)",
        "QWEN36_MERGE_BATCH_GUARD 1 (it has unset)",
    ]
    full = plan.Proof("/nix/store/x-system", "/nix/store/y-start", "qwen3_xml", env)
    assert full.missing(s) == []
    wrong = plan.Proof("/nix/store/x-system", "/nix/store/y-start", "hermes", env)
    assert wrong.missing(s) == ["tool-call parser qwen3_xml (it has hermes)"]
    every = ("tool_call_parser", "QWEN36_SDPA_STREAMING", "hugepages", "phase2a")
    built = plan.Proof(
        "/nix/store/x-system",
        "/nix/store/y-start",
        "qwen3_xml",
        env,
        ("--enable-prefix-caching", "--no-async-scheduling"),
        "hugepagesz=1G hugepages=4 iommu=pt",
    )
    assert built.missing(s, every) == [
        "hugepage pool 1G×2 (it has 1G×4)",
        "Phase 2a options off (it has on (--enable-prefix-caching))",
    ]


def test_a_dirty_checkout_blocks_the_durable_path_with_a_reason():
    snap = snapshot("fresh")
    dirty = dataclasses.replace(
        snap,
        checkout=dataclasses.replace(
            snap.checkout, changes=[" M hosts/cfx-llm2/configuration.nix"]
        ),
    )
    p = plan.plan_restore(dirty, settings())
    assert p.path == "fallback"
    assert any("uncommitted changes" in b for b in p.durable_blockers)


def test_a_profile_that_holds_everything_but_never_ran_is_activated_without_a_build():
    # a switch cut short after the profile moved (or `nixos-rebuild boot`)
    snap = snapshot("durable")
    gens = dataclasses.replace(snap.generations, current_system="/nix/store/old-nixos-system")
    unparsed = dataclasses.replace(snap.probe, outcome=probe.UNPARSED)
    p = plan.plan_restore(dataclasses.replace(snap, generations=gens, probe=unparsed), settings())
    assert p.path == "durable" and not p.rebuild and p.restart_expected
    assert p.finish_switch == snap.generations.profile
    assert "not running: activate it" in p.reasons[0]


def test_an_etc_dropin_that_sets_execstart_blocks_the_durable_path_up_front():
    """Seen in the snapshot, it blocks before any durable work, saying what to do; a
    store link under /etc (NixOS's own overrides.conf) is no shadow."""
    snap = snapshot("fresh")
    shadow = DropIn(
        "/etc/systemd/system/tenstorrent-serving.service.d/zz-local.conf",
        "admin",
        "[Service]\nExecStart=\nExecStart=/usr/local/bin/vllm serve x\n",
    )
    unit = dataclasses.replace(snap.unit, dropins=[*snap.unit.dropins, shadow])
    p = plan.plan_restore(dataclasses.replace(snap, unit=unit), settings())
    assert p.path == plan.FALLBACK, p.reasons
    (blocker,) = [b for b in p.durable_blockers if "zz-local.conf" in b]
    assert "sets ExecStart=" in blocker and "remove it" in blocker
    vendor = dataclasses.replace(shadow, origin="vendor")
    unit = dataclasses.replace(snap.unit, dropins=[*snap.unit.dropins, vendor])
    assert plan.plan_restore(dataclasses.replace(snap, unit=unit), settings()).path == plan.DURABLE
