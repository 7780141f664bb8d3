"""Unmanaged volatile state, judged from recorded twin snapshots (tests.facts.record).

``runtime_debug`` is a converged twin on which a person added a drop-in for the server
(and restarted it), one for ssh.service, enabled a unit at runtime and put a kernel
parameter on the live command line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import facts.serving
from remedy.core import report, volatile
from remedy.core.runtime import ServingProcess
from remedy.core.settings import from_host_data

FIXTURES = Path(__file__).parent.parent / "facts" / "serving.HostSnapshot"
DEBUG = "/run/systemd/system/tenstorrent-serving.service.d/zz-debug.conf"
SSH = "/run/systemd/system/ssh.service.d/zz-debug.conf"
WANTS = "/run/systemd/system/multi-user.target.wants/twin-hugepages.path"


def snapshot(case: str):
    lines = json.loads((FIXTURES / f"{case}.json").read_text())["output"]
    return facts.serving.HostSnapshot().process(lines)


def settings(**data):
    return from_host_data("cfx-llm2", data)


def with_process(snap, argv=None, env=None):
    proc = snap.runtime.process
    new = ServingProcess(
        proc.pid,
        list(argv if argv is not None else proc.argv),
        dict(env if env is not None else proc.environ),
    )
    return dataclasses.replace(snap, runtime=dataclasses.replace(snap.runtime, process=new))


@pytest.mark.parametrize("case", ["fresh", "durable", "emergency_override"])
def test_the_incident_states_have_no_unmanaged_volatile_state(case):
    snap = snapshot(case)
    assert snap.runtime.read and snap.runtime.process is not None
    assert volatile.unmanaged(snap, settings()) == []


def test_a_persons_runtime_state_is_listed_with_what_a_reboot_does():
    snap = snapshot("runtime_debug")
    found = volatile.unmanaged(snap, settings())
    by_subject = {e.subject: e for e in found}
    assert set(by_subject) == {DEBUG, SSH, WANTS, "mitigations"}
    assert all(e.after_reboot == "gone" for e in found)
    # the server's extra variable is said with the drop-in that gives it
    assert by_subject[DEBUG].details == ("the server runs with VLLM_LOGGING_LEVEL=DEBUG",)
    assert by_subject[DEBUG].now == "Environment=VLLM_LOGGING_LEVEL=DEBUG"
    assert by_subject[SSH].now == "Environment=SSHD_OPTS=-d"
    assert by_subject[WANTS].now == "twin-hugepages.path enabled at runtime (wants of " \
        "multi-user.target)"  # fmt: skip
    assert by_subject["mitigations"].kind == volatile.KERNEL_PARAM
    assert volatile.counts(found) == {"runtime-unit": 3, "process": 0, "kernel-param": 1}
    status = report.host_status("cfx-llm2", settings(), snap)
    assert status.exit_code == 3 and status.unmanaged == found
    # a kernel parameter of the next boot is a reboot the host waits for
    assert status.reboot_for == ["mitigations"]
    assert any(n.startswith("reboot pending: ") for n in status.notes)


def test_ignore_volatile_silences_what_a_person_accepted_and_counts_it():
    snap = snapshot("runtime_debug")
    s = settings(
        ignore_volatile=[DEBUG, "/run/systemd/system/ssh.service.d/*", WANTS, "mitigations"]
    )
    status = report.host_status("cfx-llm2", s, snap)
    assert status.unmanaged == [] and status.ignored == 4
    # what is left is the recording's own state (hugepages not yet released), as before
    before = report.host_status("cfx-llm2", s, snapshot("durable"))
    assert (status.exit_code, status.verdict) == (before.exit_code, before.verdict)
    assert "4 unmanaged volatile entries ignored (host data ignore_volatile)" in status.notes
    two = report.host_status("cfx-llm2", settings(ignore_volatile=[DEBUG, SSH]), snap)
    assert {e.subject for e in two.unmanaged} == {WANTS, "mitigations"}
    assert two.ignored == 2 and two.exit_code == 3


def test_the_server_process_against_the_next_boot():
    snap = snapshot("durable")
    argv = [*snap.runtime.process.argv, "--max-num-seqs", "16", "--enforce-eager"]
    env = {**snap.runtime.process.environ, "HF_TOKEN": "hf_secret", "TT_METAL_CACHE": "/tmp/c"}
    del env["VLLM_TT_PACKAGE"]
    found = volatile.unmanaged(with_process(snap, argv, env), settings())
    lines = [e.text() for e in found]
    assert lines == [
        "--enforce-eager: the server runs --enforce-eager; after reboot: --enforce-eager gone",
        "--max-num-seqs: the server runs --max-num-seqs 16; after reboot: --max-num-seqs gone",
        "HF_TOKEN: the server runs with HF_TOKEN=…; after reboot: HF_TOKEN gone",
        "TT_METAL_CACHE: the server runs with TT_METAL_CACHE=/tmp/c; after reboot: "
        "TT_METAL_CACHE → /var/cache/tt-metal",
        f"VLLM_TT_PACKAGE: the server runs without VLLM_TT_PACKAGE; after reboot: "
        f"VLLM_TT_PACKAGE={snap.unit.after_reboot.env('VLLM_TT_PACKAGE')}",
    ]
    assert all(e.kind == volatile.PROCESS for e in found)
    assert "hf_secret" not in json.dumps([e.to_json() for e in found])


def test_what_the_running_generation_itself_runs_is_a_pending_generation_not_volatile():
    # the boot default brings a variable the running generation's start script lacks
    snap = snapshot("durable")
    nxt = snap.unit.after_reboot
    env = {**nxt.environment, "QWEN36_OVERLAY_MOUNTS": dataclasses.replace(
        nxt.environment["TT_METAL_CACHE"], value="attention/tp.py generator.py")}  # fmt: skip
    unit = dataclasses.replace(snap.unit, after_reboot=dataclasses.replace(nxt, environment=env))
    assert volatile.unmanaged(dataclasses.replace(snap, unit=unit), settings()) == []


def test_a_changed_flag_value_says_both_values():
    snap = snapshot("durable")
    argv = [w if w != "32768" else "16384" for w in snap.runtime.process.argv]
    (entry,) = volatile.unmanaged(with_process(snap, argv), settings())
    assert entry.text() == (
        "--max-model-len: the server runs --max-model-len 16384; "
        "after reboot: --max-model-len 16384 → 32768"
    )


def test_managed_flags_and_variables_are_the_settings_not_unmanaged_state():
    snap = snapshot("durable")
    argv = [w if w != "qwen3_xml" else "hermes" for w in snap.runtime.process.argv]
    env = {**snap.runtime.process.environ, "QWEN36_SDPA_STREAMING": "0"}
    argv += ["--enable-prefix-caching", "--no-async-scheduling"]
    assert volatile.unmanaged(with_process(snap, argv, env), settings()) == []


def test_an_unreadable_environment_compares_the_command_line_only():
    snap = snapshot("durable")
    proc = dataclasses.replace(snap.runtime.process, environ=None)
    snap = dataclasses.replace(snap, runtime=dataclasses.replace(snap.runtime, process=proc))
    assert volatile.unmanaged(snap, settings()) == []


def test_the_status_json_names_the_servers_variables_without_their_values():
    status = report.host_status("cfx-llm2", settings(), snapshot("runtime_debug"))
    doc = status.to_json()
    assert doc["unmanaged_volatile"][0]["kind"] == "runtime-unit"
    environ = doc["snapshot"]["runtime"]["process"]["environ"]
    assert "VLLM_LOGGING_LEVEL" in environ and "DEBUG" not in json.dumps(environ)


@pytest.mark.parametrize(
    "value, key",
    [
        ("a b", "ignore_volatile[0]"),
        (["/run/ok", "$(reboot)"], "ignore_volatile[1]"),
        ({"x": 1}, "ignore_volatile"),
    ],
)
def test_a_bad_ignore_volatile_is_refused_naming_the_host_and_the_item(value, key):
    from remedy.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        settings(ignore_volatile=value)
    assert f"host cfx-llm2: data key {key!r}" in str(err.value)
