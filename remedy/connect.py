"""How a host that cannot be reached fails under pyinfra's own CLI: one line, audited.

pyinfra turns an SSH failure into a failed host (``ConnectError``: "Could not
connect"), but a key problem (``ssh_key`` names a missing or unreadable file)
is a bare ``PyinfraError`` raised inside the connecting greenlet: gevent prints
a traceback and pyinfra stops. And a host that pyinfra could not reach never
runs a line of remedy, so nothing audited it.

``guard()`` is installed when an inventory file checks its hosts
(``remedy.inventory.checked_hosts``), before pyinfra connects. It turns key
errors into ``ConnectError`` naming the host and the key, and writes the audit
line of every host that could not be reached (a dry run records nothing).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_installed: list[bool] = []
DEPLOY_RUNBOOK = {"restore_toolcalling.py": "001", "converge.py": "006"}


def _runbook() -> tuple[str, list[str]]:
    from remedy.operations.run import _runbook_of

    # pyinfra INVENTORY DEPLOY...: the deploy is the last file named
    deploy = next((a.rsplit("/", 1)[-1] for a in reversed(sys.argv) if a.endswith(".py")), "")
    project = Path(os.environ.get("REMEDY_PROJECT", os.getcwd()))
    return _runbook_of(project, DEPLOY_RUNBOOK.get(deploy, "001"))


AUDITED = "audited as failed: could not connect"


def _under_pyinfra_cli() -> bool:
    """A deploy run by pyinfra's CLI (``pyinfra …``, ``python -m pyinfra …``), not a
    remedy command that loads an inventory to read hosts."""
    first = Path(sys.argv[0] if sys.argv else "")
    return first.name == "pyinfra" or (
        first.name == "__main__.py" and first.parent.name == "pyinfra"
    )


def audit_unreached(name: str, data: dict, why: str) -> None:
    """The audit line of a run that could not reach its host."""
    if "--dry" in sys.argv or not _under_pyinfra_cli():
        return
    from remedy import audit

    project = Path(os.environ.get("REMEDY_PROJECT", os.getcwd()))
    runbook, issues = _runbook()
    record = audit.AuditRecord(
        host=name,
        result="failed",
        runbook=runbook,
        commits=audit.commits_of(project),
        issues=issues,
        path="none",
        details={"failed": f"could not connect over SSH: {why}"},
    )
    try:
        audit.append(audit.log_path_for(data), record)
    except Exception as exc:  # never hide the failure behind the log
        print(f"remedy: could not write the audit line for {name}: {exc!r}", file=sys.stderr)
    else:
        print(f"remedy: {name}: {AUDITED}", file=sys.stderr)


def key_problem(name: str, key: str | None, exc: Exception) -> str:
    text = str(exc)
    if "No such private key file" in text:
        what = "does not exist here"
    elif "password" in text.lower():
        what = "is encrypted and no ssh_key_password was given (or it is wrong)"
    else:
        what = f"cannot be used ({text})"
    return (
        f"{name}: ssh_key {key or '?'} {what}; set the host's ssh_key in the inventory "
        "to a key that reaches it"
    )


def guard() -> None:
    """Install the two hooks on pyinfra's SSH connector (once per process)."""
    if _installed:
        return
    _installed.append(True)
    from pyinfra.api.exceptions import ConnectError, PyinfraError
    from pyinfra.connectors.ssh import SSHConnector

    make_kwargs, connect = SSHConnector.make_paramiko_kwargs, SSHConnector.connect

    def make_paramiko_kwargs(self):
        try:
            return make_kwargs(self)
        except ConnectError:
            raise
        except PyinfraError as exc:  # a key problem: one line, this host only
            raise ConnectError(key_problem(self.host.name, self.data.get("ssh_key"), exc)) from None

    def connecting(self):
        try:
            return connect(self)
        except ConnectError as exc:
            audit_unreached(self.host.name, dict(self.host.data.dict()), str(exc))
            raise

    SSHConnector.make_paramiko_kwargs = make_paramiko_kwargs
    SSHConnector.connect = connecting
    _quiet_greenlet_faults()


def _quiet_greenlet_faults() -> None:
    """pyinfra runs each host's operations in a greenlet; a host lost mid-run (a reboot:
    EOFError, "SSH session not active", a fact that can no longer load and then "No hosts
    remaining!") ends that greenlet with an exception, which gevent prints as a
    traceback before pyinfra says what happened. Such faults are one line instead; the
    run still fails and is audited with its reason. Anything else (a bug) keeps its
    traceback."""
    from gevent.hub import Hub
    from paramiko.ssh_exception import SSHException
    from pyinfra.api.exceptions import PyinfraError

    print_exception = Hub.print_exception

    def one_line(self, context, kind, value, tb):
        if kind is not None and issubclass(kind, (PyinfraError, EOFError, SSHException)):
            host = next(
                (a for a in getattr(context, "args", ()) if hasattr(a, "print_prefix")), None
            )
            where = f"{host.name}: " if host is not None else ""
            print(f"remedy: {where}the run stopped: {value}", file=sys.stderr)
            return None
        return print_exception(self, context, kind, value, tb)

    Hub.print_exception = one_line


def close(host) -> None:
    """Close HOST's SSH connection (pyinfra's disconnect leaves paramiko's open): a
    command that waits on a frozen host ends with it. The transport only: a command
    started after it then fails as pyinfra expects (SSHException, "SSH session not
    active"), where a closed client's is an AttributeError that ends pyinfra's run."""
    client = getattr(host.connector, "client", None)
    try:
        transport = client.get_transport() if client is not None else None
        if transport is not None:
            transport.close()
    except Exception:  # going anyway
        pass
