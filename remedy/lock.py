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
import time
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


def _wait_for(channel, reply, name: str, path: str, wait_s: float, who: str, say) -> str:
    """The lock is busy: say on whom and for how long at most, then every few seconds
    how long so far, until the remote shell answers (locked, or held after WAIT_S)."""
    say(f"{name}: {path} is held by {who}; waiting up to {wait_s:g}s for it")
    started = last = time.monotonic()
    while not channel.recv_ready() and not channel.exit_status_ready():
        time.sleep(0.2)
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S:
            last = now
            say(f"{name}: still waiting for {path} ({now - started:.0f}s of {wait_s:g}s)")
    return reply.readline().strip()


PROGRESS_EVERY_S = 5


def acquire(host, unit: str, wait_s: float, holder: str, say=print) -> HostLock:
    """Take HOST's lock for UNIT, waiting up to WAIT_S seconds, over a session of its
    own on pyinfra's SSH connection. SAY gets the lines a waiting run prints."""
    client = getattr(getattr(host, "connector", None), "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None or not transport.is_active():
        raise LockError(f"{host.name}: no SSH session to take the host lock over")
    channel = transport.open_session()
    channel.exec_command(shlex.join(lock_argv(unit, wait_s, holder)))
    reply = channel.makefile("r")
    first = reply.readline().strip()
    if first.startswith("waiting "):
        first = _wait_for(channel, reply, host.name, lock_path(unit), wait_s, first[8:], say)
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
