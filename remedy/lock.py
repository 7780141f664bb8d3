"""One run per target host: a ``flock`` under ``/run/lock``, held by a remote session.

    lock = host_lock.acquire(host, unit, wait_s=30, holder=holder_text())
    ...                      # the whole run
    lock.release()           # or the process dies: the session closes, flock goes

The lock lives on the host, so every kind of run takes the same one: a deploy
(restore, converge, `remedy runbooks apply`) through this module, the manual
script with ``flock`` on the same path. The remote side holds the lock while
its stdin is open: when remedy exits, is killed, or loses the connection, sshd
closes the session, ``cat`` sees the end of its input, and the lock goes with
the shell. A reboot wipes ``/run/lock``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from remedy.core.hostlock import EXIT_HELD, holder_text, lock_argv, lock_path  # noqa: F401


class LockHeld(Exception):
    """Another run holds the host's lock; the message names the holder."""


class LockError(Exception):
    """The lock could not be taken for another reason (no flock, no SSH session)."""


@dataclass
class HostLock:
    channel: object  # paramiko Channel whose remote shell holds the lock

    def release(self) -> None:
        try:
            self.channel.shutdown_write()  # the remote cat sees the end of its input
            self.channel.recv_exit_status()
            self.channel.close()
        except Exception:  # the session is gone: so is the lock
            pass


def acquire(host, unit: str, wait_s: float, holder: str) -> HostLock:
    """Take HOST's lock for UNIT, waiting up to WAIT_S seconds, over a session of its
    own on pyinfra's SSH connection."""
    client = getattr(getattr(host, "connector", None), "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None or not transport.is_active():
        raise LockError(f"{host.name}: no SSH session to take the host lock over")
    channel = transport.open_session()
    channel.exec_command(shlex.join(lock_argv(unit, wait_s, holder)))
    reply = channel.makefile("r")
    first = reply.readline().strip()
    if first == "locked":
        return HostLock(channel)
    rest = reply.read().strip()
    channel.close()
    if first == "held":
        raise LockHeld(
            f"{host.name}: another remedy run holds {lock_path(unit)} "
            f"(waited {wait_s:g}s): {rest or '(holder unknown)'}"
        )
    raise LockError(f"{host.name}: could not take {lock_path(unit)}: {first} {rest}".strip())
