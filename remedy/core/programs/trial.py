"""The trial boot's host programs (``remedy/host/trial/*.sh`` with ``boot_loader.sh``):
their texts and argv. ``remedy.core.run.trial`` says what they are for."""

from __future__ import annotations

from remedy import host

PROGRAMS = ("read", "arm", "disarm", "bless", "fallback", "settle")


def program(name: str) -> str:
    """The text of trial program NAME: the host library, then the program."""
    if name not in PROGRAMS:
        raise ValueError(f"no trial program {name!r} (one of {', '.join(PROGRAMS)})")
    return (
        host.text("lib.sh")
        + "\n# ---- the trial program: "
        + name
        + "\n"
        + host.text(f"trial/{name}.sh")
    )


def argv(name: str, mode: str = "apply", **values: str) -> list[str]:
    """``sh -c PROGRAM remedy-trial-NAME MODE KEY=VALUE...``: every part its own word."""
    if mode not in ("check", "apply"):
        raise ValueError(f"mode {mode!r}: check or apply")
    words = [f"{k}={v}" for k, v in values.items()]
    return ["sh", "-c", program(name), f"remedy-trial-{name}", mode, *words]
