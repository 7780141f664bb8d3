"""Issue 33 on twins: what a person on call reads, at 80 columns, in the states that
matter: a blocked durable path, a stopped server, every command's --help, and the ssh
command `remedy twin up` prints, pasted as printed. None of this depends on Nix's CLI:
trixie only."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest

from remedy.twin import fixtures
from tests.conftest import PROJECT

pytestmark = pytest.mark.twin

COLUMNS_80 = {**os.environ, "COLUMNS": "80"}


def remedy(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["remedy", *argv], capture_output=True, text=True, cwd=PROJECT, timeout=900,
        env=COLUMNS_80,
    )  # fmt: skip


def words(text: str) -> str:
    return " ".join(text.split())


def fits(text: str) -> None:
    """No line wider than 80 columns, but a command alone on its line (it must paste)."""
    long = [ln for ln in text.splitlines() if len(ln) > 80]
    assert all(re.fullmatch(r" *`[^`]+`", ln) for ln in long), long


def test_a_dirty_checkout_is_named_with_what_to_do_in_status_and_converge(make_twin):
    twin = make_twin(with_emergency_override=True)
    config = f"{fixtures.NIXOS_DIR}/hosts/cfx-llm2/configuration.nix"
    twin.exec(["sh", "-c", f"echo '# a note' >> {config}"], user=fixtures.OWNER)
    blocker = (
        "durable path not possible: /etc/nixos has uncommitted changes ( M "
        "hosts/cfx-llm2/configuration.nix); commit or stash them first"
    )
    status = remedy("status", "inventory/twin.py", "--limit", twin.name)
    assert status.returncode == 3, status.stdout
    assert blocker in words(status.stdout), status.stdout
    assert "next: fix what blocks the durable path (above), then run" in words(status.stdout)

    check = remedy("converge", "inventory/twin.py", "--check", "--limit", twin.name)
    assert check.returncode == 3 and blocker in words(check.stdout), check.stdout
    fits(check.stdout)

    # the run says it too, with what it did instead, and changes no durable thing
    run = remedy("converge", "inventory/twin.py", "--limit", twin.name, "--restart", "now")
    said = words(run.stdout)
    assert run.returncode == 3 and blocker in said, run.stdout + run.stderr
    assert "outcome: path fallback;" in said and "VOLATILE" in said, said
    assert "next: fix what blocks the durable path (above)" in said
    fits(run.stdout)


def test_a_stopped_server_is_named_and_a_command_suggested(make_twin):
    twin = make_twin(with_emergency_override=True)
    twin.exec(["systemctl", "stop", "tenstorrent-serving.service"])
    status = remedy("status", "inventory/twin.py", "--limit", twin.name)
    said = words(status.stdout)
    assert status.returncode == 4, status.stdout
    assert f"{twin.name}: unhealthy: tenstorrent-serving.service is inactive/dead" in said
    assert "tenstorrent-serving.service is inactive/dead: the server does not run" in said
    # the ssh as the inventory reaches the twin (its port, key and known_hosts), folded
    # between words; pasted, it reads the unit's status (issue 45 item 5)
    pasted = said.replace(" \\ ", " ")
    ssh = " ".join(["ssh", "-p", str(twin.ssh_port)])
    assert f"read why with `{ssh} -i " in pasted, said
    assert (
        "root@127.0.0.1 systemctl status tenstorrent-serving.service`, then run "
        f"`remedy converge inventory/twin.py --limit {twin.name} --restart now`"
    ) in pasted, said
    command = pasted.split("read why with `", 1)[1].split("`", 1)[0]
    ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 3 and "inactive (dead)" in ran.stdout, ran.stdout + ran.stderr
    # the store paths come last: the problems and the next command stay on the screen
    text = status.stdout
    assert text.index("problems:") < text.index("next:") < text.index("where:"), text
    fits(status.stdout)


def test_every_help_fits_80_columns_and_no_summary_is_cut():
    groups = {"": ["audit", "converge", "runbooks", "schedule", "status", "twin"],
              "runbooks": ["apply", "check", "list", "show"],
              "schedule": ["install", "remove", "show", "status"],
              "twin": ["down", "inventory", "list", "reboot", "up"]}  # fmt: skip
    for group, commands in groups.items():
        top = remedy(*group.split(), "--help")
        assert top.returncode == 0, top.stderr
        listed = top.stdout.split("Commands:")[1]
        assert not re.search(r"\.\.\.$", listed, re.M), listed  # a summary cut short
        for name in commands:
            assert re.search(rf"^  {name} +\S", listed, re.M), (name, listed)
            shown = remedy(*group.split(), name, "--help")
            assert shown.returncode == 0, shown.stderr
            assert max(map(len, shown.stdout.splitlines())) <= 80, shown.stdout
    for command in ("status", "converge"):
        said = words(remedy(command, "--help").stdout)
        assert "6 boot pending" in said and "3 volatile or drifted" in said, said


def test_twin_up_prints_one_ssh_command_that_works_as_printed(twin):
    up = subprocess.run(
        ["remedy", "twin", "up", "--name", twin.name], capture_output=True, text=True,
        cwd=PROJECT, timeout=300, env={**os.environ, "COLUMNS": "60"},
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    (line,) = [ln for ln in up.stdout.splitlines() if ln.startswith("ssh ")]
    token = f"pasted-into-{twin.name}"
    twin.exec(["tee", "/run/remedy-paste-test"], input=token)
    pasted = subprocess.run(
        [*shlex.split(line), "cat", "/run/remedy-paste-test"], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert pasted.returncode == 0 and pasted.stdout == token, pasted.stderr
    listed = remedy("twin", "list")
    assert twin.server_url in listed.stdout  # an address is never split
    assert max(map(len, listed.stdout.splitlines())) <= 80, listed.stdout
