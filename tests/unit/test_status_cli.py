"""`remedy status` bad input: what an on-call engineer sees when a host cannot be read."""

from __future__ import annotations

import json
import socket
import subprocess
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_json(inventory) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "remedy.cli.main", "status", str(inventory), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unreachable_host_is_named_with_the_ssh_reason(tmp_path):
    inventory = tmp_path / "inv.py"
    inventory.write_text(
        f'hosts = [("deadhost", {{"ssh_hostname": "127.0.0.1", '
        f'"ssh_port": {free_port()}, "ssh_user": "root"}})]\n'
    )
    proc = status_json(inventory)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == 1 and doc["hosts"] == []
    assert "Unable to connect to port" in doc["errors"]["deadhost"]
    assert "Traceback" not in proc.stderr


def test_a_missing_inventory_file_is_named(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "remedy.cli.main", "status", str(tmp_path / "nope.py")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "nope.py does not exist" in proc.stderr


def test_a_missing_ssh_key_fails_only_its_host_and_is_named(tmp_path):
    inventory = tmp_path / "inv.py"
    port = free_port()
    inventory.write_text(
        f'hosts = [("nokey", {{"ssh_hostname": "127.0.0.1", "ssh_port": {port}, '
        f'"ssh_key": "{tmp_path}/gone_ed25519"}}), '
        f'("deadhost", {{"ssh_hostname": "127.0.0.1", "ssh_port": {port}}})]\n'
    )
    proc = status_json(inventory)
    doc = json.loads(proc.stdout)
    assert "No such private key file" in doc["errors"]["nokey"]
    assert "gone_ed25519" in doc["errors"]["nokey"]
    assert "Unable to connect to port" in doc["errors"]["deadhost"]
    assert "Traceback" not in proc.stderr
