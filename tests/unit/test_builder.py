"""Issue 29's pure parts: the builder's host data checked before connecting, the argv a
serving host runs on the builder quoted once, and the bundle programs
(remedy/host/builder_receive.sh and builder_fetch.sh) run here with real git (the twin
test runs them over SSH)."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest
from pyinfra.api.exceptions import InventoryError

from remedy import host
from remedy.core.config import host_data
from remedy.core.programs import builder as builder_core

B = builder_core.Builder("b1", "remedy-build", "10.0.0.9", 2201, "/root/.ssh/remedy-builder")


def check(hosts: list) -> None:
    host_data.checked_hosts(hosts, argv=[])


def test_a_serving_host_with_a_builder_of_the_inventory_is_accepted():
    check([("s1", {"build_host": "b1"}), ("b1", {"remedy_role": "builder"})])


@pytest.mark.parametrize(
    "hosts,said",
    [
        ([("s1", {"build_host": "b9"})], "names 'b9', which is not a host of this inventory"),
        (
            [("s1", {"build_host": "s2"}), ("s2", {})],
            "names 's2', which is a serving host; give it remedy_role",
        ),
        ([("s1", {"build_host": "s1"})], "names the host itself"),
        ([("s1", {"build_host": "local"})], "is local, which remedy cannot do yet"),
        ([("s1", {"build_host": "b 1"})], "must be serving, or the name of a builder"),
        ([("b1", {"remedy_role": "builds"})], "'remedy_role'"),
        ([("b1", {"remedy_role": "builder", "builder_user": "Root;"})], "'builder_user'"),
        ([("s1", {"builder_key": "key"})], "'builder_key' must be an absolute path"),
        ([("s1", {"copy_signed": True})], "builder_unsigned_copy = true"),
    ],
)
def test_bad_builder_data_is_refused_before_connecting_naming_the_host_and_key(hosts, said):
    with pytest.raises(InventoryError) as exc:
        check(hosts)
    assert said in str(exc.value)
    assert f"host {hosts[0][0]}" in str(exc.value)


def test_the_builder_is_made_from_its_own_data_and_the_serving_hosts_trust():
    signed = host_data.from_host_data("s1", {"build_host": "b1"})
    assert host_data.builder_of(signed, "b1", {"remedy_role": "builder"}).signed
    s = host_data.from_host_data("s1", {"build_host": "b1", "builder_unsigned_copy": True})
    b = host_data.builder_of(
        s, "b1", {"remedy_role": "builder", "ssh_hostname": "10.1.2.3", "ssh_port": 2222,
                  "build_max_jobs": 4, "nix_timeout_s": 99}
    )  # fmt: skip
    assert (b.user, b.address, b.port, b.key, b.signed) == (
        "remedy-build", "10.1.2.3", 2222, "/root/.ssh/remedy-builder", False
    )  # fmt: skip
    assert (b.max_jobs, b.timeout_s) == (4, 99)
    moved = host_data.builder_of(s, "b1", {"builder_address": "b1.lan"})
    assert (moved.address, moved.port) == ("b1.lan", 22)


def test_a_command_on_the_builder_is_its_argv_quoted_once():
    odd = ["git", "-C", "/tmp/x y", "commit", "-m", "a 'b' $(c) \"d\"\nline"]
    argv = builder_core.on_builder(B, odd)
    assert argv[:1] == ["ssh"] and argv[-2] == "remedy-build@10.0.0.9"
    assert "BatchMode=yes" in argv and "StrictHostKeyChecking=yes" in argv
    assert shlex.split(argv[-1]) == odd  # the builder's shell sees exactly ODD


def _git(*args, cwd):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def _sh(argv, stdin=None):
    return subprocess.run(argv, input=stdin, capture_output=True)


RECEIVE = host.text("builder_receive.sh")
FETCH = host.text("builder_fetch.sh")


def _bundle(repo) -> bytes:
    return _sh(["git", "-C", str(repo), "bundle", "create", "-", "HEAD"]).stdout


def test_a_clone_goes_to_the_builder_and_its_commits_come_back_by_a_fast_forward(tmp_path):
    """The programs both ends run, here with real git and no SSH: the bundle of the
    scratch clone's HEAD is cloned (RECEIVE), a commit made there comes back into
    the scratch clone (FETCH) as a fast-forward, and one that does not fast-forward
    is refused."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _git("init", "-q", cwd=scratch)
    _git("commit", "-q", "--allow-empty", "-m", "base", cwd=scratch)
    base = _git("rev-parse", "HEAD", cwd=scratch)
    bundle = _bundle(scratch)
    tag = f"unit-{os.getpid()}"
    received = _sh(["sh", "-c", RECEIVE, "sh", tag], bundle)
    there = received.stdout.decode().strip()
    try:
        assert received.returncode == 0, received.stderr
        assert there.startswith(f"/tmp/remedy-bump.{tag}.") and there.endswith("/flake")
        assert _git("rev-parse", "HEAD", cwd=there) == base
        _git("commit", "-q", "--allow-empty", "-m", "lock", cwd=there)
        proven = _git("rev-parse", "HEAD", cwd=there)
        back = _bundle(there)
        fetched = _sh(["sh", "-c", FETCH, "sh", str(scratch)], back)
        assert fetched.returncode == 0, fetched.stderr
        assert _git("rev-parse", "HEAD", cwd=scratch) == proven
        # the scratch clone moved on meanwhile: no merge, no change
        _git("commit", "-q", "--allow-empty", "-m", "someone", cwd=scratch)
        moved = _git("rev-parse", "HEAD", cwd=scratch)
        _git("commit", "-q", "--allow-empty", "-m", "again", cwd=there)
        back = _bundle(there)
        refused = _sh(["sh", "-c", FETCH, "sh", str(scratch)], back)
        assert refused.returncode != 0
        assert _git("rev-parse", "HEAD", cwd=scratch) == moved
    finally:
        subprocess.run(["rm", "-rf", there.rsplit("/", 1)[0]], check=False)


def test_a_bundle_that_does_not_arrive_leaves_no_scratch_on_the_builder():
    tag = f"unit-empty-{os.getpid()}"
    received = _sh(["sh", "-c", RECEIVE, "sh", tag], b"")
    assert received.returncode != 0 and received.stdout == b""
    left = subprocess.run(["sh", "-c", f"ls -d /tmp/remedy-bump.{tag}.* 2>/dev/null"],
                          capture_output=True, text=True)  # fmt: skip
    assert left.stdout == ""


def test_two_serving_hosts_of_one_flake_host_keep_apart_on_a_shared_builder():
    s = host_data.from_host_data("s1", {"build_host": "b1", "flake_host": "cfx-llm2"})
    data = {"remedy_role": "builder"}
    one, two = (host_data.builder_of(s, "b1", data, name) for name in ("gpu-1", "gpu-1 "))
    assert one.tag != two.tag and one.tag.startswith("gpu-1-")
    odd = builder_core.tag_of("h*[x]/../y")
    assert set(odd) <= set("abcdefghijklmnopqrstuvwxyz0123456789_.-h")  # no glob, no slash
    assert builder_core.scratch_pattern(one.tag) != builder_core.scratch_pattern(two.tag)


def test_two_inventories_that_give_two_machines_one_name_keep_apart_on_a_shared_builder():
    s = host_data.from_host_data("cfx-llm2", {"build_host": "b1"})
    data = {"remedy_role": "builder"}
    staging, production = (
        host_data.builder_of(s, "b1", data, "cfx-llm2", where)
        for where in ("10.0.0.7:22", "10.0.0.8:22")
    )
    assert staging.tag != production.tag
    assert staging.tag.startswith("cfx-llm2-") and production.tag.startswith("cfx-llm2-")
    again = host_data.builder_of(s, "b1", data, "cfx-llm2", "10.0.0.7:22")
    assert again.tag == staging.tag  # the same machine: the same clones, one host lock


@pytest.mark.parametrize(
    "data,said",
    [
        ({"ssh_hostname": "b1?remote-program=x"}, "data key 'ssh_hostname' must be a host"),
        ({"ssh_port": "http"}, "data key 'ssh_port' must be a number"),
        ({"ssh_port": 70000}, "data key 'ssh_port' must be a TCP port"),
    ],
)
def test_a_builder_address_or_port_that_is_not_one_is_refused_naming_it(data, said):
    s = host_data.from_host_data("s1", {"build_host": "b1"})
    with pytest.raises(host_data.ConfigError) as exc:
        host_data.builder_of(s, "b1", {"remedy_role": "builder", **data}, "s1")
    assert said in str(exc.value) and "host b1" in str(exc.value)


def test_converge_of_only_builders_is_refused_before_connecting(tmp_path):
    from click.testing import CliRunner

    from remedy.cli.converge import converge

    inventory = tmp_path / "inv.py"
    inventory.write_text(
        'hosts = [("s1", {"build_host": "b1"}), ("b1", {"remedy_role": "builder"})]\n'
    )
    result = CliRunner().invoke(converge, [str(inventory), "--limit", "b1"])
    # remedy's main turns a ConfigError into exit 2 with its message
    assert isinstance(result.exception, host_data.ConfigError), result.output
    assert "no serving host to converge (--limit b1: builders" in str(result.exception)
