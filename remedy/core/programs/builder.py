"""What a serving host runs to build on a builder (issue 29), as argv.

The serving host's root reaches the builder over SSH, as an unprivileged user there,
and nothing goes the other way: the builder holds no key to the serving host. The
scratch clone goes to the builder as a git bundle on the SSH pipe, its commits come
back the same way into the scratch clone on the serving host, and the proven
toplevel's closure is pulled with ``nix copy --from ssh-ng://`` (its receiving side
is the only nix the serving host runs until the switch).

Every command on the builder is an argv quoted once into the one string that SSH
hands to the builder user's shell (``shlex.join``): no host data is glued into shell
text.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass

from remedy import host
from remedy.core.programs import commands


@dataclass(frozen=True)
class Builder:
    """A builder as the serving host reaches it: the inventory name, the user and
    address there, the SSH port, root's key on the serving host, whether the copy
    checks signatures, and the builder's own bounds for a build."""

    name: str
    user: str
    address: str
    port: int
    key: str
    signed: bool = False
    max_jobs: int = 1
    cores: int = 2
    timeout_s: int = 1800
    # the serving host's own name on the builder (its scratch clones there): one
    # builder serves several hosts, which may share a flake_host
    tag: str = "host"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.user}@{self.address}:{self.port})"

    @property
    def store(self) -> str:
        return f"ssh-ng://{self.user}@{self.address}"

    def to_json(self) -> dict:
        return {"name": self.name, "user": self.user, "address": self.address,
                "port": self.port, "signed": self.signed}  # fmt: skip


# No prompt (a run has no one to answer it), the builder's host key already known to
# root of the serving host (no trust on first use), only the named key.
SSH_OPTIONS = (
    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes",
    "-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=15",
)  # fmt: skip


def ssh_options(b: Builder) -> list[str]:
    return ["-i", b.key, "-p", str(b.port), *SSH_OPTIONS]


def on_builder(b: Builder, argv: list[str]) -> list[str]:
    """ARGV run on the builder, as its user (run as root on the serving host)."""
    return ["ssh", *ssh_options(b), "--", f"{b.user}@{b.address}", shlex.join(argv)]


def reachable(b: Builder) -> list[str]:
    """The builder answers over SSH and has Nix (prints its version)."""
    return on_builder(b, ["nix", "--version"])


def tag_of(host_name: str, where: str = "") -> str:
    """A serving host's inventory name as a plain word for its scratch clones' names on
    the builder, distinct per host (each holds its own host lock): the hash also covers
    WHERE its SSH reaches it, so two inventories that give two machines one name keep
    apart on a builder they share."""
    plain = re.sub(r"[^A-Za-z0-9_.-]", "_", host_name)[:40]
    digest = hashlib.sha256(host_name.encode() + (b"\0" + where.encode() if where else b""))
    return f"{plain}-{digest.hexdigest()[:8]}"


def scratch_pattern(tag: str) -> str:
    """The builder's scratch clones of the serving host TAG (``tag_of``)."""
    return f"{commands.SCRATCH_PREFIX[5:]}{tag}.*"


def stale_scratch_removed(b: Builder, tag: str) -> list[str]:
    """The scratch clones that a killed run of the serving host TAG left on the builder:
    that host's lock says no run of it uses them."""
    return on_builder(
        b, ["sh", "-c", commands.SCRATCH_REMOVED_SH, "sh", scratch_pattern(tag), b.user]
    )


def builds_stopped(b: Builder) -> list[str]:
    """Stop this serving host's nix on the builder (a stop request): every process of
    the builder's user whose command line names this host's scratch clones."""
    return on_builder(b, ["pkill", "-u", b.user, "-f", f"/tmp/{scratch_pattern(b.tag)[:-1]}"])


# On the builder: a scratch directory, the bundle from stdin, a clone of it; prints
# the clone's path. A failure leaves nothing behind.
RECEIVE_SH = host.text("builder_receive.sh")

# As the checkout's owner on the serving host: the bundle from stdin into the scratch
# clone $1, only as a fast-forward.
FETCH_SH = host.text("builder_fetch.sh")

# Two commands of one pipe, each an argv quoted once ($1 | $2): the bundle never lands
# in a file that root owns on the serving host.
PIPE_SH = 'sh -c "$1" | sh -c "$2"'


def piped(left: list[str], right: list[str]) -> list[str]:
    return ["sh", "-c", PIPE_SH, "sh", shlex.join(left), shlex.join(right)]


def clone_sent(
    b: Builder, tag: str, owner: str | None, home: str | None, scratch: str
) -> list[str]:
    """The serving host's scratch clone at its HEAD, bundled as its owner and cloned
    on the builder (prints the builder's clone)."""
    bundle = commands.as_owner(owner, home, commands.git(scratch, "bundle", "create", "-", "HEAD"))
    return piped(bundle, on_builder(b, ["sh", "-c", RECEIVE_SH, "sh", tag]))


def commits_fetched(
    b: Builder, remote_scratch: str, owner: str | None, home: str | None, scratch: str
) -> list[str]:
    """The builder clone's commits into the serving host's scratch clone, as its
    owner, by a fast-forward."""
    bundle = on_builder(b, commands.git(remote_scratch, "bundle", "create", "-", "HEAD"))
    fetch = commands.as_owner(owner, home, ["sh", "-c", FETCH_SH, "sh", scratch])
    return piped(bundle, fetch)


def closure_copied(b: Builder, toplevel: str) -> list[str]:
    """Pull TOPLEVEL's closure from the builder into this host's store (as root): the
    signatures are checked when the builder signs (copy_signed), else not."""
    sigs = [] if b.signed else ["--no-check-sigs"]
    return [
        "env", "NIX_SSHOPTS=" + " ".join(ssh_options(b)),
        *commands.nix("copy", *sigs, "--from", b.store, toplevel),
    ]  # fmt: skip


def path_valid(toplevel: str) -> list[str]:
    """TOPLEVEL is valid in this host's store, with its closure (exits 0)."""
    return ["nix-store", "--verify-path", toplevel]


def bounded(b: Builder, argv: list[str], name: str) -> list[str]:
    """ARGV (a nix build) on the builder, bounded in time by the builder's own
    nix_timeout_s (its memory is its own: no scope there)."""
    return on_builder(b, commands.nix_bounded(argv, None, name, b.timeout_s))
