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

import fcntl
import hashlib
import os
import shlex
import tempfile
import time
from dataclasses import dataclass

from remedy.core.programs.hostlock import (  # noqa: F401
    EXIT_HELD,
    DeadRun,
    holder_text,
    journal_header,
    lock_argv,
    lock_path,
    read_journal,
    step_line,
)


class LockHeld(Exception):
    """Another run holds the host's lock; the message names the holder."""


class LockError(Exception):
    """The lock could not be taken for another reason (no flock, no SSH session)."""


@dataclass
class HostLock:
    channel: object  # paramiko Channel whose remote shell holds the lock
    dead: DeadRun | None = None  # a run that died holding it, from its journal

    def step(self, operation: str, result: str) -> None:
        """Add a step to the run's journal on the host (no round trip: the session is
        open). A lost session is not an error here: the journal then says how far the
        run got, and the next run records it."""
        self._send(step_line(operation, result) + "\n")

    def stop_builds(self) -> bool:
        """The run was asked to stop: the host stops the owner's nix that the run runs
        now (its transient scope), through this session, at once (no round trip)."""
        return self._send("stop-nix\n")

    def builds_also_on(self, argv: list[str]) -> bool:
        """A stop request stops ARGV's builds too: the command (run on the host, one line)
        that stops this host's nix on its builder."""
        return self._send(f"builder-stop {shlex.join(argv)}\n")

    def _send(self, text: str) -> bool:
        try:
            self.channel.sendall(text.replace("\r", " ").encode())
            return True
        except Exception:
            return False

    def release(self, result: str = "ok") -> None:
        """The run ended: its journal goes, then the lock."""
        self._send(f"end {result}\n")
        try:
            self.channel.shutdown_write()  # the remote shell sees the end of its input
            # bounded: at exit the connection may already be going away
            self.channel.status_event.wait(10)
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


def acquire(host, unit: str, wait_s: float, holder: str, say=print, header: str = "{}") -> HostLock:
    """Take HOST's lock for UNIT, waiting up to WAIT_S seconds, over a session of its
    own on pyinfra's SSH connection, and start this run's journal there (HEADER). SAY
    gets the lines a waiting run prints. A dead run's journal comes back as ``dead``."""
    client = getattr(getattr(host, "connector", None), "client", None)
    transport = client.get_transport() if client is not None else None
    if transport is None or not transport.is_active():
        raise LockError(f"{host.name}: no SSH session to take the host lock over")
    channel = transport.open_session()
    channel.exec_command(shlex.join(lock_argv(unit, wait_s, holder, header)))
    reply = channel.makefile("r")
    first = reply.readline().strip()
    if first.startswith("waiting "):
        first = _wait_for(channel, reply, host.name, lock_path(unit), wait_s, first[8:], say)
    boot, journal = "", None
    if first.startswith("boot "):
        boot = first[5:].strip()
        first = reply.readline().strip()
    if first == "journal":
        journal = []
        while (line := reply.readline()) and line.strip() != "end-journal":
            journal.append(line.strip())
        first = reply.readline().strip()
    if first == "locked":
        return HostLock(channel, read_journal(journal, boot) if journal else None)
    rest = reply.read()
    rest = (rest.decode(errors="replace") if isinstance(rest, bytes) else rest).strip()
    channel.close()
    if first == "held":
        raise LockHeld(
            f"{host.name}: another remedy run holds {lock_path(unit)} "
            f"(waited {wait_s:g}s): {rest or '(holder unknown)'}"
        )
    raise LockError(f"{host.name}: could not take {lock_path(unit)}: {first} {rest}".strip())


# The fleet's lock: one `remedy converge` at a time over the same hosts, on this machine,
# so two runs do not each spend the restart budget (remedy.core.run.rollout), which is
# fleet-wide: a person's `--limit HOST --restart now` while the timer's run restarts
# another host would make two restarts at once. One file per host of the inventory,
# named by where SSH reaches it (host_keys), never by the inventory file: a copy or a
# hard link of the inventory names the same hosts, so it takes the same locks.


@dataclass
class FleetLock:
    """``flock`` on one file per host of the run, held by this process: they go when the
    run ends or the process dies."""

    paths: list[str]
    fds: list[int]

    def release(self) -> None:
        for path, fd in zip(self.paths, self.fds, strict=True):
            try:
                os.unlink(_holder_of(path))
            except OSError:
                pass
            os.close(fd)  # closing the descriptor drops the flock
        self.fds.clear()


def host_keys(name: str, data: dict) -> list[str]:
    """Where SSH reaches host NAME (its inventory DATA) from this machine: "ADDRESS PORT"
    for every address its SSH host name resolves to, after the SSH config pyinfra reads
    (HostName, Port); the name itself where this machine cannot resolve it (a ProxyJump
    target). Two names of one address (localhost, 127.0.0.1) share a key."""
    import socket

    hostname = data.get("ssh_hostname") or name
    port = int(data.get("ssh_port") or 22)
    try:
        from pyinfra.connectors.sshuserclient.client import get_ssh_config

        config = get_ssh_config(data.get("ssh_config_file"))
        seen = config.lookup(hostname) if config else {}
    except Exception:  # an unreadable SSH config: pyinfra's connect says so
        seen = {}
    hostname = seen.get("hostname", hostname)
    port = int(seen.get("port", port))
    try:
        found = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return [f"{hostname.lower()} {port}"]
    return sorted({f"{info[4][0]} {port}" for info in found})


def fleet_lock_files(hosts: dict[str, dict]) -> dict[str, list[str]]:
    """The fleet lock's files of HOSTS ({name: data}), each with the hosts it stands for:
    one per host_keys key, in REMEDY_LOCK_DIR, else /run/lock if this user may write
    there, else the user's runtime or temporary directory; sorted, so two runs take them
    in one order."""
    where = os.environ.get("REMEDY_LOCK_DIR")
    if not where:
        candidates = ("/run/lock", os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir())
        where = next(d for d in candidates if d and os.access(d, os.W_OK))
    files: dict[str, list[str]] = {}
    for name, data in hosts.items():
        for key in host_keys(name, data):
            digest = hashlib.sha256(key.encode()).hexdigest()[:12]
            named = files.setdefault(f"{where}/remedy-fleet-{digest}.lock", [])
            if name not in named:
                named.append(name)
    return dict(sorted(files.items()))


def _holder_of(path: str) -> str:
    return path.removesuffix(".lock") + ".holder"


def _take(paths: list[str]) -> tuple[list[int], str | None]:
    """Every lock of PATHS at once, or none: (their descriptors, the first busy one)."""
    fds: list[int] = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            for taken in fds:
                os.close(taken)
            raise LockError(f"cannot open the fleet lock {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            for taken in fds:
                os.close(taken)
            return [], path
        fds.append(fd)
    return fds, None


def acquire_fleet(hosts: dict[str, dict], wait_s: float, holder: str, say=print) -> FleetLock:
    """Take the fleet lock of HOSTS ({name: data}: every serving host of the inventory):
    all of their files at once or none, waiting up to WAIT_S seconds (SAY gets what a waiting
    run prints); LockHeld names the holder, LockError any other problem."""
    files = fleet_lock_files(hosts)
    paths = list(files)
    started = last = time.monotonic()
    said = False
    while True:
        fds, busy = _take(paths)
        if busy is None:
            break
        who, now = _read_holder(busy), time.monotonic()
        of = f"the fleet lock of {', '.join(files[busy])} ({busy})"
        if now - started >= wait_s:
            raise LockHeld(
                f"another remedy converge or reboot over the same hosts holds {of} "
                f"(waited {wait_s:g}s): {who}"
            )
        if not said:
            say(f"{of} is held by {who}; waiting up to {wait_s:g}s for it")
            said, last = True, now
        elif now - last >= PROGRESS_EVERY_S:
            say(f"still waiting for {busy} ({now - started:.0f}s of {wait_s:g}s)")
            last = now
        time.sleep(0.2)
    for path in paths:
        _write_holder(path, holder)
    return FleetLock(paths, fds)


def _read_holder(path: str) -> str:
    try:
        with open(_holder_of(path), encoding="utf-8", errors="replace") as f:
            return f.read().strip() or "(holder unknown)"
    except OSError:
        return "(holder unknown)"


def _write_holder(path: str, holder: str) -> None:
    tmp = _holder_of(path) + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(holder + "\n")
        os.replace(tmp, _holder_of(path))
    except OSError:  # the lock holds all the same; only its holder goes unnamed
        pass
