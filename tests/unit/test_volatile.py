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
from remedy.core.config import volatile
from remedy.core.config.host_data import from_host_data
from remedy.core.readings.runtime import ServingProcess
from remedy.core.render import report

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
    counted = {"runtime-unit": 3, "process": 0, "kernel-param": 1, "sysctl": 0}
    assert volatile.counts(found) == counted
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


# -- issue 28, item 5: the next boot's whole start chain is durable configuration -------

PROFILE_UNIT = "/nix/var/nix/profiles/system/etc/systemd/system/tenstorrent-serving.service"
RUN_DROPIN = "/run/systemd/system/tenstorrent-serving.service.d/zz-env.conf"
WRAPPER = "/nix/store/9x0hs1n7y8kq5w6a0v2m4c3b1z7d8e5f-vllm-tt-0.9.2/bin/vllm"
# bin/vllm of a Python application, as nixpkgs' makeShellWrapper writes it for wrap.sh's
# `--prefix PATH : $program_PATH --set PYTHONNOUSERSITE true` and a makeWrapperArgs
# `--prefix LD_LIBRARY_PATH : …/lib` (pkgs/build-support/setup-hooks/make-wrapper.sh)
WRAPPER_TEXT = """#! /nix/store/4fvc5vc4bpb9ymq8kcbyi5sv1wfnp3hx-bash-5.2p37/bin/bash -e
PATH=${PATH:+':'$PATH':'}
PATH=${PATH/':''/nix/store/9x0hs1n7y8kq5w6a0v2m4c3b1z7d8e5f-vllm-tt-0.9.2/bin'':'/':'}
PATH='/nix/store/9x0hs1n7y8kq5w6a0v2m4c3b1z7d8e5f-vllm-tt-0.9.2/bin'$PATH
PATH=${PATH#':'}
PATH=${PATH%':'}
export PATH
export PYTHONNOUSERSITE='true'
LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+':'$LD_LIBRARY_PATH':'}
LD_LIBRARY_PATH=${LD_LIBRARY_PATH/':''/run/opengl-driver/lib'':'/':'}
LD_LIBRARY_PATH='/run/opengl-driver/lib'$LD_LIBRARY_PATH
LD_LIBRARY_PATH=${LD_LIBRARY_PATH#':'}
LD_LIBRARY_PATH=${LD_LIBRARY_PATH%':'}
export LD_LIBRARY_PATH
exec -a "$0" "/nix/store/9x0hs1n7y8kq5w6a0v2m4c3b1z7d8e5f-vllm-tt-0.9.2/bin/.vllm-wrapped"  "$@" 
"""
STORE_BIN = "/nix/store/9x0hs1n7y8kq5w6a0v2m4c3b1z7d8e5f-vllm-tt-0.9.2/bin"


def with_chain(snap, chain=None, manager=None, env=None, execs=None):
    """SNAP read with the start chain (CHAIN, default: nothing beyond the unit), the
    manager's environment MANAGER, the server's environment ENV, and start scripts that
    exec EXECS (the wrapper)."""
    from remedy.core.readings.runtime import StartChain

    runtime = dataclasses.replace(
        snap.runtime,
        chain=chain if chain is not None else StartChain(next_unit=PROFILE_UNIT),
        manager_env=dict(manager if manager is not None else snap.runtime.manager_env),
    )
    snap = dataclasses.replace(snap, runtime=runtime)
    if env is not None:
        snap = with_process(snap, env={**snap.runtime.process.environ, **env})
    if execs is not None:
        views = {}
        for name in ("now", "after_reboot"):
            view = getattr(snap.unit, name)
            script = dataclasses.replace(view.script, execs=execs)
            views[name] = dataclasses.replace(view, script=script)
        snap = dataclasses.replace(snap, unit=dataclasses.replace(snap.unit, **views))
    return snap


def test_a_variable_only_set_environment_gives_is_volatile_not_the_managers_own():
    snap = snapshot("durable")
    manager = {**snap.runtime.manager_env, "FOO": "1"}
    found = volatile.unmanaged(with_chain(snap, manager=manager, env={"FOO": "1"}), settings())
    assert [e.text() for e in found] == [
        "FOO: the server runs with FOO=1 (from systemctl set-environment); after reboot: FOO gone"
    ]
    # systemd's own PATH and locale are not (they are in the manager's environment too)
    assert volatile.unmanaged(with_chain(snap), settings()) == []


def test_default_environment_of_the_next_boots_system_conf_is_durable_run_is_not():
    from remedy.core.readings.runtime import StartChain

    snap = snapshot("durable")
    manager = {**snap.runtime.manager_env, "FOO": "1", "BAR": "2 3"}
    conf = "/nix/var/nix/profiles/system/etc/systemd/system.conf"
    run_conf = "/run/systemd/system.conf.d/50-bar.conf"
    chain = StartChain(
        default_env=[(conf, "FOO=1 LOCALE_ARCHIVE=/x"), (run_conf, '"BAR=2 3"')],
        next_unit=PROFILE_UNIT,
    )
    snap = with_chain(snap, chain, manager, env={"FOO": "1", "BAR": "2 3"})
    # LOCALE_ARCHIVE: system.conf gives it, the manager has not been re-executed since:
    # pending, not volatile
    (entry,) = volatile.unmanaged(snap, settings())
    assert entry.text() == f"BAR: the server runs with BAR=2 3 (from {run_conf}); after reboot: " \
        "BAR gone"  # fmt: skip


def test_environment_files_and_pass_environment_the_next_boot_names_are_durable():
    from remedy.core.readings.runtime import StartChain, UnitEnvLine

    snap = snapshot("durable")
    chain = StartChain(
        unit_env=[
            UnitEnvLine(
                "next", PROFILE_UNIT, "/nix/store/u", "EnvironmentFile", "-/run/secrets/tt"
            ),
            UnitEnvLine("next", PROFILE_UNIT, "/nix/store/u", "EnvironmentFile", "/etc/tt.env"),
            UnitEnvLine("next", PROFILE_UNIT, "/nix/store/u", "PassEnvironment", "CUDA_X HOSTID"),
            UnitEnvLine("dropin", RUN_DROPIN, RUN_DROPIN, "EnvironmentFile", "/etc/debug.env"),
        ],
        env_files={
            "/run/secrets/tt": ["HF_TOKEN"],
            "/etc/tt.env": ["HF_HOME"],
            "/etc/debug.env": ["VLLM_LOGGING_LEVEL"],
        },
        next_unit=PROFILE_UNIT,
    )
    env = {"HF_TOKEN": "hf_x", "HF_HOME": "/var/lib/hf", "HOSTID": "7", "VLLM_LOGGING_LEVEL": "D"}
    (entry,) = volatile.unmanaged(with_chain(snap, chain, env=env), settings())
    # the file a runtime drop-in names is that drop-in's: a reboot forgets both
    assert entry.text() == (
        f"VLLM_LOGGING_LEVEL: the server runs with VLLM_LOGGING_LEVEL=D (from {RUN_DROPIN}); "
        "after reboot: VLLM_LOGGING_LEVEL gone"
    )
    assert "hf_x" not in json.dumps([e.to_json() for e in volatile.unmanaged(
        with_chain(snap, StartChain(next_unit=PROFILE_UNIT), env=env), settings())])  # fmt: skip


def test_what_nixpkgs_wrapper_sets_is_durable_and_computed_as_bash_would():
    from remedy.core.readings.runtime import StartChain

    snap = snapshot("durable")
    chain = StartChain(wrappers={WRAPPER: WRAPPER_TEXT}, next_unit=PROFILE_UNIT)
    env = {
        "PATH": f"{STORE_BIN}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONNOUSERSITE": "true",
        "LD_LIBRARY_PATH": "/run/opengl-driver/lib",
    }
    assert volatile.unmanaged(with_chain(snap, chain, env=env, execs=WRAPPER), settings()) == []
    # a PATH the wrapper did not give: the next boot gives the wrapper's
    env["PATH"] = "/opt/debug/bin:" + env["PATH"]
    (entry,) = volatile.unmanaged(with_chain(snap, chain, env=env, execs=WRAPPER), settings())
    assert entry.subject == "PATH"
    assert entry.after_reboot == f"PATH → {STORE_BIN}:/usr/local/bin:/usr/bin:/bin"


def test_the_wrapper_evaluation_matches_bash_on_make_wrapper_forms():
    from remedy.core.readings import wrapper

    text = "\n".join([
        "#! /bin/bash -e",
        "XDG_DATA_DIRS=${XDG_DATA_DIRS:+':'$XDG_DATA_DIRS':'}",
        "if [[ $XDG_DATA_DIRS != *':''/s'':'* ]]; then",
        "    XDG_DATA_DIRS=$XDG_DATA_DIRS'/s'",
        "fi",
        "XDG_DATA_DIRS=${XDG_DATA_DIRS#':'}",
        "XDG_DATA_DIRS=${XDG_DATA_DIRS%':'}",
        "export XDG_DATA_DIRS",
        "export GIO=${GIO-'/g'}",
        "export OLD='/o'${OLD:+':'$OLD}",
        "export SUF+=${SUF:+':'}'/u'",
        "unset PYTHONPATH",
        'export TOKEN="$(cat /run/secrets/t)"',
        'exec -a "$0" "/nix/store/x/bin/.a-wrapped"  "$@" ',
    ])  # fmt: skip
    inherited = {"XDG_DATA_DIRS": "/a:/s", "OLD": "/p", "PYTHONPATH": "/q"}
    assert wrapper.evaluate(text, inherited) == {
        "XDG_DATA_DIRS": "/a:/s",  # already there: a suffix adds nothing
        "GIO": "/g",
        "OLD": "/o:/p",
        "SUF": "/u",
        "PYTHONPATH": wrapper.REMOVED,
        "TOKEN": wrapper.UNKNOWN,  # a command substitution: not guessed
    }
    assert wrapper.exec_target(text) == "/nix/store/x/bin/.a-wrapped"


def test_recorded_a_wrapped_server_with_an_environment_file_has_nothing_volatile():
    """A twin whose server runs through nixpkgs' wrapper and whose unit reads
    /etc/tenstorrent-serving/env (tests.facts.record_chain)."""
    snap = snapshot("wrapped_env_file")
    chain = snap.runtime.chain
    wrapper_path = snap.unit.after_reboot.script.execs
    assert wrapper_path.endswith("/bin/vllm") and wrapper_path in chain.wrappers
    assert chain.env_files == {"/etc/tenstorrent-serving/env": ["HF_HOME", "VLLM_API_KEY"]}
    env = snap.runtime.process.environ
    assert env["PYTHONNOUSERSITE"] == "true" and "HF_HOME" in env
    assert volatile.unmanaged(snap, settings()) == []


def test_recorded_set_environment_is_named_with_what_a_reboot_does():
    snap = snapshot("set_environment")
    found = volatile.unmanaged(snap, settings())
    assert [e.text() for e in found] == [
        "FOO: the server runs with FOO=1 (from systemctl set-environment); after reboot: FOO gone"
    ]
    status = report.host_status("cfx-llm2", settings(), snap)
    assert status.exit_code == 3 and status.unmanaged == found
    assert report.host_status("cfx-llm2", settings(ignore_volatile=["FOO"]), snap).ignored == 1
