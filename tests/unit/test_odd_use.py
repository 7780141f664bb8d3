"""Issue 43, items G2-G4: odd use of the command line, refused or survived before anything
connects.

* G2: a reader that closes the pipe (`remedy … | head -1`) does not turn a command into an
  error: it ends quietly with its own exit code.
* G3: a host name the inventory does not hold (--canary, --limit, --host) is refused with
  exit 2, naming the host and the inventory, before connecting.
* G4: a dangling symlink in runbooks/ is named, not skipped; a --textfile that cannot be
  written (its directory is /proc, say) is refused before connecting.

The inventories here name hosts in TEST-NET-1 (192.0.2.0/24, RFC 5737), which nothing
answers: a command that connected would say "could not connect".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from remedy import metrics
from remedy.errors import EXIT_USAGE, ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path, monkeypatch) -> dict[str, str]:
    """The environment of a remedy command run by these tests: its own audit log, lock
    directory and settings, never the user's."""
    (tmp_path / "lock").mkdir()
    values = {
        "REMEDY_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
        "REMEDY_LOCK_DIR": str(tmp_path / "lock"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return {**os.environ, **values}


@pytest.fixture
def inventory(tmp_path) -> Path:
    path = tmp_path / "fleet.py"
    path.write_text(
        "hosts = [\n"
        '    ("g01", {"ssh_hostname": "192.0.2.1", "ssh_connect_timeout": 1}),\n'
        '    ("g02", {"ssh_hostname": "192.0.2.2", "ssh_connect_timeout": 1}),\n'
        "]\n"
    )
    return path


def remedy(env: dict, *argv: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "remedy.cli.main", *argv],
        stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env, timeout=120,
    )  # fmt: skip


def closed_pipe() -> int:
    """The write end of a pipe whose read end is closed already: every write fails with
    EPIPE, as `remedy … | head -1` gives once head has its line."""
    read, write = os.pipe()
    os.close(read)
    return write


# -- G2: a closed pipe ----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("runbooks", "show", "001"),
        ("runbooks", "list", "--json"),
        ("runbooks", "show", "001", "--manual"),
        ("audit",),
    ],
    ids=lambda a: " ".join(a),
)
def test_a_closed_pipe_ends_the_command_quietly_with_its_own_exit_code(env, argv, tmp_path):
    if argv == ("audit",):  # a log with a record to print
        from remedy import audit

        audit.append(env["REMEDY_AUDIT_LOG"], audit.AuditRecord(host="h1", result="ok"))
    expected = remedy(env, *argv)
    assert expected.stdout, expected.stderr  # it has something to say
    fd = closed_pipe()
    try:
        done = remedy(env, *argv, stdout=fd)
    finally:
        os.close(fd)
    assert (done.returncode, done.stderr) == (expected.returncode, expected.stderr)


def test_a_closed_pipe_keeps_a_status_exit_code(env, tmp_path, inventory):
    """A command whose exit code is its answer (here 2, bad input) keeps it."""
    fd = closed_pipe()
    try:
        done = remedy(env, "status", str(inventory), "--limit", "nosuch", stdout=fd)
    finally:
        os.close(fd)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


# -- G3: a host the inventory does not hold -------------------------------------------


@pytest.mark.parametrize(
    "argv, named",
    [
        (("converge", "{inv}", "--canary", "nosuch", "--check"), "--canary nosuch"),
        (("converge", "{inv}", "--canary", "g01,nosuch", "--check", "--json"), "--canary nosuch"),
        (("converge", "{inv}", "--canary", "nosuch"), "nosuch"),
        (("converge", "{inv}", "--limit", "nosuch", "--check"), "--limit nosuch"),
        (("status", "{inv}", "--limit", "nosuch"), "--limit nosuch"),
        (("adopt", "{inv}", "--host", "nosuch", "X=1", "--issue", "t#1"), "--host nosuch"),
        (("runbooks", "apply", "006", "{inv}", "--limit", "nosuch", "--dry"), "--limit nosuch"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else None,
)
def test_an_unknown_host_is_refused_before_connecting(env, inventory, argv, named):
    done = remedy(env, *(a.format(inv=inventory) for a in argv))
    said = done.stdout + done.stderr
    assert done.returncode == EXIT_USAGE, said
    assert named in said and str(inventory) in said and "g01, g02" in said, said
    assert "connect" not in said, said


def test_a_canary_that_is_a_count_is_no_host_name(env, inventory):
    """--canary 2 is how many, not a host: --check reads the hosts as before."""
    done = remedy(env, "converge", str(inventory), "--canary", "2", "--check", "--json")
    assert done.returncode == 1 and "could not connect" in done.stdout, done.stdout


# -- G4: a dangling runbook link, a textfile that cannot be written ------------------


def test_a_textfile_under_proc_is_refused_before_the_host_read(env, inventory):
    with pytest.raises(ConfigError, match=r"--textfile /proc/x\.prom: .*/proc") as refused:
        metrics.check_writable("/proc/x.prom")
    assert "--textfile" in str(refused.value)
    done = remedy(env, "converge", str(inventory), "--check", "--textfile", "/proc/x.prom")
    said = done.stdout + done.stderr
    assert done.returncode == EXIT_USAGE and "/proc/x.prom" in said, said
    assert "connect" not in said, said


@pytest.mark.parametrize(
    "path, why",
    [
        ("{tmp}/no/such/dir/r.prom", "does not exist"),
        ("{tmp}", "is a directory"),
        ("/dev/null", "not a regular file"),
    ],
)
def test_a_textfile_that_cannot_be_replaced_says_what_to_do(tmp_path, path, why):
    with pytest.raises(ConfigError, match=why) as refused:
        metrics.check_writable(path.format(tmp=tmp_path))
    assert "name a file" in str(refused.value) or "create" in str(refused.value)


def test_a_writable_textfile_passes_and_leaves_nothing_behind(tmp_path):
    assert metrics.check_writable(str(tmp_path / "r.prom")) == tmp_path / "r.prom"
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REPO / "runbooks", root / "runbooks")
    shutil.copytree(REPO / "deploys", root / "deploys", ignore=shutil.ignore_patterns("__*"))
    (root / "runbooks" / "007-gone.yaml").symlink_to(tmp_path / "elsewhere" / "007-gone.yaml")
    return root


def test_a_dangling_runbook_link_is_named_not_skipped(env, project):
    from remedy import runbooks as core

    report = core.check_project(project)
    dangling = [p for p in report.problems if p.file == "runbooks/007-gone.yaml"]
    assert len(dangling) == 1, [str(p) for p in report.problems]
    assert "a symlink to" in dangling[0].message and "does not exist" in dangling[0].message
    listed = remedy(env, "runbooks", "list", "--project", str(project))
    assert "007-gone.yaml" in listed.stdout + listed.stderr, listed.stdout
    checked = remedy(env, "runbooks", "check", "--project", str(project))
    assert checked.returncode != 0 and "runbooks/007-gone.yaml" in checked.stdout


def test_apply_refuses_a_project_with_a_dangling_runbook_link(env, project, inventory):
    done = remedy(env, "runbooks", "apply", "006", str(inventory), "--project", str(project))
    said = done.stdout + done.stderr
    assert done.returncode == EXIT_USAGE, said
    assert "runbooks/007-gone.yaml" in said and "does not exist" in said, said
    assert "connect" not in said and "running" not in said, said
