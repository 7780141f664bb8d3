"""Record the start chain of issue 28, item 5 (a twin of its own; run as root):

    python -m tests.facts.record_chain

The server runs through nixpkgs' wrapper of a Python application and its unit reads an
environment file under /etc (``fixtures.env_file_commit``): ``serving.HostSnapshot/
wrapped_env_file``; then ``systemctl set-environment FOO=1`` and a restart of the server:
``serving.HostSnapshot/set_environment``.
"""

from __future__ import annotations

import sys

import facts.serving
from remedy.twin import fixtures, machine
from tests.facts.record import as_ops, build_toplevel, nix, record

UNIT = "tenstorrent-serving.service"


def snapshot(twin, case: str) -> None:
    record(
        twin,
        "serving",
        facts.serving.HostSnapshot,
        case,
        server_url=twin.server_url,
        managed_file="hosts/cfx-llm2/remedy.nix",
    )


def main() -> int:
    twin = machine.up("rec-chain", progress=print)
    try:
        twin.exec(["mkdir", "-p", fixtures.ENV_FILE.rsplit("/", 1)[0]])
        twin.exec(["tee", fixtures.ENV_FILE], input="HF_HOME=/var/lib/hf\nVLLM_API_KEY=tw1n\n")
        machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.env_file_commit())
        twin.exec(as_ops(*nix("flake", "update", "tt-stack", "--flake", fixtures.NIXOS_DIR)))
        toplevel = build_toplevel(twin)
        twin.exec(["nix-env", "-p", "/nix/var/nix/profiles/system", "--set", toplevel])
        twin.exec([f"{toplevel}/bin/switch-to-configuration", "switch"])
        machine.wait_serving(twin)
        snapshot(twin, "wrapped_env_file")
        twin.exec(["systemctl", "set-environment", "FOO=1"])
        twin.exec(["systemctl", "restart", UNIT])
        machine.wait_serving(twin)
        snapshot(twin, "set_environment")
    finally:
        machine.down("rec-chain", progress=print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
