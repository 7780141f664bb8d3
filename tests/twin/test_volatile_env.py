"""Issue 28, item 5 on a twin: what the next boot's start chain sets is not volatile state.

The server runs through nixpkgs' wrapper of a Python application (PATH prefixed,
PYTHONNOUSERSITE, a makeWrapperArgs variable) and its unit reads an environment file
under /etc: all of it is durable configuration, and `status` exits 0. A variable that
only `systemctl set-environment` gives (the manager's environment, which a reboot
resets to what system.conf's DefaultEnvironment= says) is volatile: exit 3, naming it;
so is one from an environment file that only a runtime drop-in names.
"""

from __future__ import annotations

import subprocess

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, remedy_json, twin_inventory

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
RUN_DROPIN = f"/run/systemd/system/{UNIT}.d/zz-debug-env.conf"


def server_environ(twin) -> dict[str, str]:
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    raw = twin.exec(["sh", "-c", f"tr '\\0' '\\n' < /proc/{pid}/environ"]).stdout
    return dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)


def status(inventory) -> tuple[int, dict]:
    code, doc = remedy_json("status", str(inventory))
    (host,) = doc["hosts"]
    return code, host


def test_a_wrapped_server_and_its_environment_file_are_durable_set_environment_is_not(
    make_twin, tmp_path
):
    twin = make_twin()
    # a person's environment file beside the unit, then the wrapped package and a unit
    # that reads the file (the package compiles on the host: allowed for this host)
    twin.exec(["mkdir", "-p", fixtures.ENV_FILE.rsplit("/", 1)[0]])
    twin.exec(["tee", fixtures.ENV_FILE], input="HF_HOME=/var/lib/hf\nVLLM_API_KEY=tw1n\n")
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.env_file_commit())
    inventory = twin_inventory(tmp_path / "inventory.py", twin, allow_local_build=True)
    proc = subprocess.run(
        ["remedy", "converge", str(inventory), "--restart", "now"],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]

    # the server runs through the wrapper, with what the file and the wrapper set
    env = server_environ(twin)
    assert env["PYTHONNOUSERSITE"] == "true", env
    assert env["PATH"].startswith("/nix/store/") and env["PATH"].endswith(
        ":/usr/local/bin:/usr/bin:/bin"
    ), env["PATH"]
    assert env["LD_LIBRARY_PATH"].startswith("/nix/store/"), env
    assert env["HF_HOME"] == "/var/lib/hf"
    code, host = status(inventory)
    assert code == 0, (host["verdict"], host["unmanaged_volatile"], host["problems"])
    assert host["unmanaged_volatile"] == []

    # what a reboot reverts: the manager's environment, set at runtime
    twin.exec(["systemctl", "set-environment", "FOO=1"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    assert server_environ(twin)["FOO"] == "1"
    code, host = status(inventory)
    entries = host["unmanaged_volatile"]
    assert code == 3 and [e["subject"] for e in entries] == ["FOO"], entries
    (foo,) = entries
    assert foo["kind"] == "process" and foo["after_reboot"] == "FOO gone", foo
    assert "systemctl set-environment" in foo["now"], foo

    # an environment file that only a runtime drop-in names is that drop-in's: gone too
    debug_env = "/etc/tenstorrent-serving/debug.env"
    twin.exec(["tee", debug_env], input="VLLM_LOGGING_LEVEL=DEBUG\n")
    twin.exec(["mkdir", "-p", RUN_DROPIN.rsplit("/", 1)[0]])
    twin.exec(["tee", RUN_DROPIN], input=f"[Service]\nEnvironmentFile={debug_env}\n")
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    code, host = status(inventory)
    entries = {e["subject"]: e for e in host["unmanaged_volatile"]}
    assert code == 3 and set(entries) == {"FOO", RUN_DROPIN}, entries
    assert entries[RUN_DROPIN]["details"] == ["the server runs with VLLM_LOGGING_LEVEL=DEBUG"]


def test_a_runtime_dropin_whose_last_line_has_no_newline_is_read_line_by_line(make_twin, tmp_path):
    """Odd host content: a drop-in written with printf and no last newline, then another.
    Each environment file they name is read as its own (not one path glued to the next)."""
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inventory.py", twin)
    dropins = {}
    for name, var in (("zz-a", "HF_HOME=/var/lib/hf-debug"), ("zz-b", "HF_HUB_OFFLINE=1")):
        env_file = f"/etc/tenstorrent-serving/{name}.env"
        twin.exec(["mkdir", "-p", "/etc/tenstorrent-serving", RUN_DROPIN.rsplit("/", 1)[0]])
        twin.exec(["tee", env_file], input=f"{var}\n")
        dropin = f"/run/systemd/system/{UNIT}.d/{name}.conf"
        ending = "" if name == "zz-a" else "\n"
        twin.exec(["tee", dropin], input=f"[Service]\nEnvironmentFile={env_file}{ending}")
        dropins[dropin] = var
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    assert server_environ(twin)["HF_HUB_OFFLINE"] == "1"
    _code, host = status(inventory)  # a fresh twin: tool calls unparsed too (exit 4)
    entries = {e["subject"]: e for e in host["unmanaged_volatile"]}
    assert set(entries) == set(dropins), entries
    for dropin, var in dropins.items():
        assert entries[dropin]["details"] == [f"the server runs with {var}"], entries[dropin]


def test_an_exec_line_without_its_newline_still_leads_to_the_wrapper(make_twin, tmp_path):
    """Odd host content: a runtime drop-in starts the server through a script written with
    printf, whose last line (the exec of the next boot's start script) has no newline.
    sh runs that line, so the wrapper it leads to is read, and the variables the wrapper
    sets are not taken for volatile state (they were: that target was glued to the next
    script's, and no wrapper was found)."""
    twin = make_twin()
    twin.exec(["mkdir", "-p", fixtures.ENV_FILE.rsplit("/", 1)[0]])
    twin.exec(["tee", fixtures.ENV_FILE], input="HF_HOME=/var/lib/hf\n")
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.env_file_commit())
    inventory = twin_inventory(tmp_path / "inventory.py", twin, allow_local_build=True)
    proc = subprocess.run(
        ["remedy", "converge", str(inventory), "--restart", "now"],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    # the store script the unit's start script execs: the one with the flags
    start = twin.exec(["systemctl", "show", "-P", "ExecStart", UNIT]).stdout
    start = start.split("path=", 1)[1].split(" ;", 1)[0].strip()
    target = twin.exec(["sed", "-n", r"s/^exec \(\/nix\/store\/[^ ]*\).*/\1/p", start]).stdout
    target = target.strip()
    assert target.startswith("/nix/store/"), target
    script = "/etc/tenstorrent-serving/debug-start"
    twin.exec(["tee", script], input=f'#!/bin/sh\nexec {target} "$@"')
    twin.exec(["chmod", "0755", script])
    twin.exec(["mkdir", "-p", RUN_DROPIN.rsplit("/", 1)[0]])
    twin.exec(["tee", RUN_DROPIN], input=f"[Service]\nExecStart=\nExecStart={script}\n")
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    assert server_environ(twin)["PYTHONNOUSERSITE"] == "true"
    _code, host = status(inventory)  # the drop-in itself: a /run override of the unit
    assert host["unmanaged_volatile"] == [], host["unmanaged_volatile"]


def test_a_runtime_dropin_whose_name_holds_a_blank_is_read(make_twin, tmp_path):
    """Odd host content: a person names a runtime drop-in with a blank in it. systemctl
    quotes that name in DropInPaths= ("/run/…/zz-debug env.conf"); the drop-in is read
    all the same, so the environment file it names is its own, gone at the next boot.
    (It was split at the blank: neither part named a file, and the drop-in was never read.)"""
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inventory.py", twin)
    debug_env = "/etc/tenstorrent-serving/debug.env"
    dropin = f"/run/systemd/system/{UNIT}.d/zz-debug env.conf"
    twin.exec(["mkdir", "-p", "/etc/tenstorrent-serving", RUN_DROPIN.rsplit("/", 1)[0]])
    twin.exec(["tee", debug_env], input="VLLM_LOGGING_LEVEL=DEBUG\n")
    twin.exec(["tee", dropin], input=f"[Service]\nEnvironmentFile={debug_env}\n")
    twin.exec(["systemctl", "daemon-reload"])
    shown = twin.exec(["systemctl", "show", "-p", "DropInPaths", UNIT]).stdout
    assert f'"{dropin}"' in shown, shown  # quoted by systemctl, as the snapshot reads it
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    assert server_environ(twin)["VLLM_LOGGING_LEVEL"] == "DEBUG"
    _code, host = status(inventory)  # a fresh twin: tool calls unparsed too (exit 4)
    entries = {e["subject"]: e for e in host["unmanaged_volatile"]}
    assert set(entries) == {dropin}, entries
    assert entries[dropin]["details"] == ["the server runs with VLLM_LOGGING_LEVEL=DEBUG"]
