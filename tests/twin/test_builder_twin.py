"""Issue 29 (build off the serving host): a builder twin, paired with a serving twin,
reproduces what the engine relies on: root of the serving host logs in to the
builder's unprivileged user with its own key and strict host key checking, and copies
a store path from the builder with ``nix copy --from ssh-ng://`` (both Nix bases)."""

from __future__ import annotations

import shlex
import uuid

import pytest

from remedy.errors import TwinError
from remedy.twin import machine
from tests.conftest import _twin_name

FLAKE_FLAGS = ["--extra-experimental-features", "nix-command flakes"]
USER = machine.BUILDER_USER


@pytest.fixture
def builder(make_twin):
    """A builder twin of the test run's suite, taken down with the factory's twins."""
    name = _twin_name()
    make_twin.names.append(name)
    return machine.up(name, suite=make_twin.suite, role="builder", progress=lambda _m: None)


def ssh_opts(builder: machine.Twin) -> list[str]:
    """What root of a paired serving twin passes to ssh to reach BUILDER: its own key,
    no prompt, the host key checked against root's known_hosts."""
    return ["-i", machine.BUILDER_KEY, "-p", str(builder.ssh_port),
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]  # fmt: skip


@pytest.mark.twin
@pytest.mark.nix_cli
def test_serving_root_copies_from_builder_over_ssh_ng(make_twin, builder):
    serving = make_twin()
    quiet = lambda _m: None  # noqa: E731

    # roles: the builder serves nothing and says what it is; the serving twin's data is
    # as before
    assert builder.role == "builder" and machine.load(builder.name).role == "builder"
    data = builder.inventory_data()
    assert data["remedy_role"] == "builder" and data["builder_user"] == USER
    assert "server_url" not in data and data["ssh_port"] == builder.ssh_port
    assert "remedy_role" not in serving.inventory_data()
    enabled = builder.exec(["systemctl", "is-enabled", machine.SERVING_UNIT], check=False)
    assert enabled.stdout.strip() == "masked", enabled
    assert machine.server_health(builder) is None
    answer = serving.exec(
        ["curl", "-sS", "--max-time", "5", f"http://127.0.0.1:{builder.server_port}/health"],
        check=False,
    )
    assert answer.returncode != 0, answer  # nothing listens on the builder's port

    # no pairing yet: root of the serving twin cannot log in
    before = serving.exec(["test", "-e", machine.BUILDER_KEY], check=False)
    assert before.returncode != 0

    machine.pair_builder(serving, builder, progress=quiet)
    auth = f"/home/{USER}/.ssh/authorized_keys"
    known = "/root/.ssh/known_hosts"
    first = (builder.exec(["cat", auth]).stdout, serving.exec(["cat", known]).stdout)
    machine.pair_builder(serving, builder, progress=quiet)  # a second pairing: no change
    assert (builder.exec(["cat", auth]).stdout, serving.exec(["cat", known]).stdout) == first
    assert len(first[0].splitlines()) == 1
    host = f"[127.0.0.1]:{builder.ssh_port} "
    assert sum(ln.startswith(host) for ln in first[1].splitlines()) == 1
    assert builder.exec(["stat", "-c", "%a %U", auth]).stdout.split() == ["600", USER]
    ssh_dir = f"/home/{USER}/.ssh"
    assert builder.exec(["stat", "-c", "%a %U", ssh_dir]).stdout.split() == ["700", USER]

    # root of the serving twin reaches the builder's user, host key checked
    opts = ssh_opts(builder)
    version = serving.exec(["ssh", *opts, f"{USER}@127.0.0.1", "nix", "--version"], check=False)
    assert version.returncode == 0 and "nix (Nix)" in version.stdout, version

    # a store path only the builder has, copied by root of the serving twin over ssh-ng
    token = f"built on {builder.name}: {uuid.uuid4()}\n"
    payload = f"/home/{USER}/payload"
    builder.exec(["tee", payload], input=token, user=USER)
    path = builder.exec(["nix-store", "--add", payload], user=USER).stdout.strip()
    assert path.startswith("/nix/store/"), path
    lacks = serving.exec(["nix-store", "--verify-path", path], check=False)
    assert lacks.returncode != 0, lacks
    copy = serving.exec(
        ["env", f"NIX_SSHOPTS={shlex.join(opts)}", "nix", *FLAKE_FLAGS, "copy",
         "--no-check-sigs", "--from", f"ssh-ng://{USER}@127.0.0.1", path],
        check=False, timeout=300,
    )  # fmt: skip
    assert copy.returncode == 0, copy.stderr
    has = serving.exec(["nix-store", "--verify-path", path], check=False)
    assert has.returncode == 0, has
    assert serving.exec(["cat", path]).stdout == token

    # the builder's role is its own: the same name cannot come up serving
    with pytest.raises(TwinError) as exc:
        machine.up(builder.name, suite=make_twin.suite, progress=quiet)
    words = str(exc.value)
    assert "builder" in words and "serving" in words and "twin down" in words, words
    # and pairing is one way: serving first, builder second
    with pytest.raises(TwinError, match="serving twin"):
        machine.pair_builder(builder, serving, progress=quiet)


def test_known_hosts_entry_replaces_a_stale_key_of_the_same_port():
    """Pure: a builder taken down and brought up on the same port has a new host key;
    pairing again replaces the old entry of exactly that host and type, once."""
    host = "[127.0.0.1]:2223"
    other = "[127.0.0.1]:2222 ssh-ed25519 AAAAother\n"
    old = f"{other}{host} ssh-ed25519 AAAAold\n"
    text, dropped = machine.with_known_host(old, host, "ssh-ed25519 AAAAnew")
    assert text == f"{other}{host} ssh-ed25519 AAAAnew\n"
    assert dropped == [f"{host} ssh-ed25519 AAAAold"]
    assert machine.with_known_host(text, host, "ssh-ed25519 AAAAnew") == (None, [])
    assert machine.with_known_host(None, host, "ssh-ed25519 K") == (f"{host} ssh-ed25519 K\n", [])
    # an RSA key of that host stays
    rsa = f"{host} ssh-rsa AAAArsa\n"
    assert machine.with_known_host(rsa, host, "ssh-ed25519 K")[0] == f"{rsa}{host} ssh-ed25519 K\n"
    assert machine.with_line("a\nb", "b") is None
    assert machine.with_line("a", "b") == "a\nb\n"
    assert machine.with_line(None, "b") == "b\n"
