"""A builder (issue 29) as the serving host reaches it, and the argv a run sends there
outside the step programs (a stop request). The building itself is the step programs'
(remedy/host/steps/bump.sh and prove.sh, with builder_receive.sh and builder_fetch.sh).

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
    signed: bool = True
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


def builds_stopped(b: Builder) -> list[str]:
    """Stop this serving host's nix on the builder (a stop request): every process of
    the builder's user whose command line names this host's scratch clones."""
    return on_builder(b, ["pkill", "-u", b.user, "-f", f"/tmp/{scratch_pattern(b.tag)[:-1]}"])
