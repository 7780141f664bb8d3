"""Issue 45 items 4 and 5 on a twin: a converge's progress in a file is one whole line
per event, each starting with the host's name; every report ends with ``next:``, and
its commands work as pasted: for state a converge cannot fix (an unmanaged /run drop-in)
it is ``remedy adopt`` or the removal over the ssh the inventory uses (its own port,
key and known_hosts file), never the converge that just said there is nothing to do.
The audit log and the settings directory are the test's own."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import PROJECT, twin_inventory

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
DROPIN = f"/run/systemd/system/{UNIT}.d/50-local note.conf"


def remedy(tmp_path, *argv: str, stderr_file=None) -> subprocess.CompletedProcess:
    env = {"REMEDY_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
           "REMEDY_SETTINGS_DIR": str(tmp_path / "settings")}  # fmt: skip
    import os

    return subprocess.run(
        ["remedy", *argv], stdout=subprocess.PIPE, stderr=stderr_file or subprocess.PIPE,
        text=True, cwd=PROJECT, timeout=900, env={**os.environ, **env},
    )  # fmt: skip


def test_progress_in_a_file_is_one_whole_line_per_event_and_each_names_its_host(
    make_twin, tmp_path
):
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inventory.py", twin)
    log = tmp_path / "stderr.log"
    with log.open("w") as err:  # not a terminal: a timer's journal reads this
        done = remedy(tmp_path, "converge", str(inventory), "--restart", "now",
                      stderr_file=err)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + log.read_text()[-3000:]
    lines = [x for x in log.read_text().splitlines() if x.strip()]
    assert len(lines) >= 5, lines  # a converge says its steps as they go
    strays = [x for x in lines if not x.startswith(f"{twin.name}: ")]
    assert strays == [], strays
    # none is a piece of a wrapped line: a step said with how long it took is whole
    assert not [x for x in lines if x.strip().startswith("(")], lines
    assert any(len(x) > 80 for x in lines), lines  # a long event stays one line
    # and the report ends with next:, for a healthy host too
    assert "next: nothing to do: healthy and durable" in done.stdout, done.stdout[-2000:]


def test_unmanaged_state_alone_says_adopt_or_remove_and_the_removal_pastes(make_twin, tmp_path):
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "my inventory.py", twin)
    done = remedy(tmp_path, "converge", str(inventory), "--restart", "now")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    twin.exec(["sh", "-c", 'mkdir -p "${1%/*}" && printf "[Service]\\nCPUWeight=90\\n" > "$1"',
               "sh", DROPIN])  # fmt: skip
    twin.exec(["systemctl", "daemon-reload"])

    proc = remedy(tmp_path, "status", str(inventory), "--json")
    assert proc.returncode == 3, proc.stdout[-3000:]
    (host,) = json.loads(proc.stdout)["hosts"]
    assert [e["subject"] for e in host["unmanaged_volatile"]] == [DROPIN]
    said = host["next"]
    assert "remedy converge" not in said, said  # it has nothing to do for this
    adopt, removal = said.split("`")[1], said.split("`")[3]
    assert adopt.startswith("remedy adopt ") and f"--host {twin.name}" in adopt, said

    # a converge leaves it, and says the same next step (not itself again)
    again = remedy(tmp_path, "converge", str(inventory), "--json")
    (host,) = json.loads(again.stdout)["hosts"]
    assert again.returncode == 3 and host["next"] == said, host

    # the removal, pasted into a shell, reaches the twin as the inventory does
    pasted = subprocess.run(["bash", "-c", removal], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert pasted.returncode == 0, pasted.stderr
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode == 1
    proc = remedy(tmp_path, "status", str(inventory), "--json")
    (host,) = json.loads(proc.stdout)["hosts"]
    assert proc.returncode == 0 and host["next"].startswith("nothing to do"), host


def test_a_host_that_cannot_be_read_gets_an_ssh_that_tries_it_as_the_inventory_does(
    make_twin, tmp_path
):
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inventory.py", twin)
    running = twin.exec(["systemctl", "is-active", "ssh.socket", "ssh.service"], check=False)
    names = ["ssh.socket", "ssh.service"]
    states = running.stdout.split()
    units = [u for u, state in zip(names, states, strict=True) if state == "active"]
    twin.exec(["systemctl", "stop", *units])
    proc = remedy(tmp_path, "status", str(inventory), "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and twin.name in doc["errors"], doc
    said = doc["next"][twin.name]
    check = said.split("`")[1]
    assert check.endswith(" true") and "-p " in check and "-i " in check, said
    # the same line fails now, and works once the host answers again
    assert subprocess.run(["bash", "-c", check], capture_output=True,
                          timeout=120).returncode == 255  # fmt: skip
    twin.exec(["systemctl", "start", *units])
    again = subprocess.run(["bash", "-c", check], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
