"""Ways to run the trial boot's programs (``remedy.core.trial``) on a host: over a
connected pyinfra host, or over an ssh command line. Each returns a ``Run``."""

from __future__ import annotations

import shlex
import subprocess

from remedy.core.run.trial import Run, TrialBoot

TIMEOUT_S = 120  # a program reads a few files and runs bootctl twice


def over_ssh(ssh_argv: list[str], timeout_s: float = TIMEOUT_S) -> Run:
    """SSH_ARGV (``ssh … user@host``) followed by the program's argv, quoted."""

    def run(argv: list[str]) -> tuple[int, str, str]:
        try:
            done = subprocess.run(
                [*ssh_argv, shlex.join(argv)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired as exc:
            return 124, _text(exc.stdout), _text(exc.stderr) + "\ntimed out"
        return done.returncode, done.stdout, done.stderr

    return run


def over_pyinfra(host) -> Run:
    """A connected pyinfra HOST (``remedy.session.connected``). pyinfra keeps no exit
    code: 0 when the command succeeded, else 1 (the programs answer on stdout)."""
    from remedy.operations.argv import command

    def run(argv: list[str]) -> tuple[int, str, str]:
        ok, output = host.run_shell_command(command(argv), print_output=False)
        return (0 if ok else 1), output.stdout + "\n", output.stderr

    return run


def of_pyinfra_host(host) -> TrialBoot:
    """The trial boot of a connected pyinfra HOST, from its checked host data (refused,
    before any command, when its boot_loader is not systemd-boot)."""
    from remedy.core.config.host_data import from_host_data

    return TrialBoot.of_host(host.name, from_host_data(host.name, host.data), over_pyinfra(host))


def _text(raw) -> str:
    if raw is None:
        return ""
    return raw.decode(errors="replace") if isinstance(raw, bytes) else raw
