"""The audit log: one JSON line per apply, restore or convergence run.

The log is append-only JSON Lines. Each record is written with a single
``os.write`` on a descriptor opened ``O_APPEND``, so a run killed mid-way
leaves either the whole line or nothing; readers skip a torn last line (with a
warning) should one ever appear. Free-form ``details`` are scrubbed of
anything that looks like a secret before writing, and a record that would
still carry a private key is refused.

Every string of a record is masked as every output of remedy is (a secret's value gives
way to ``…``: ``remedy.core.config.secrets``), when written and when read.

Where: ``$REMEDY_AUDIT_LOG``, else ``$XDG_STATE_HOME/remedy/audit.jsonl``, else
``~/.local/state/remedy/audit.jsonl``. A CLI option or host data can name
another file.

The git provenance helpers (last commits, uncommitted files) live here too:
the log records which commit of the runbooks and deploys ran.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import re
import socket
import subprocess
import warnings
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: Environment variable naming the log file; wins over the default location.
LOG_ENV = "REMEDY_AUDIT_LOG"

SCRUBBED = "[scrubbed]"

# Keys whose values are secrets whatever they hold: pyinfra's ssh_key,
# ssh_password, ssh_key_password, sudo_password and the like.
_SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "secret", "token", "credential", "credentials", "apikey"}
)
_SECRET_PHRASES = ("ssh_key", "private_key", "api_key", "key_password")
# Values that are secrets wherever they appear.
_SECRET_VALUE_RE = re.compile(r"PRIVATE KEY")


def is_secret_key(key: str) -> bool:
    """``ssh_key``, ``key_password``, ``sudo_password``, ``token``, ... (not ``max_tokens``)."""
    normalized = re.sub(r"[^a-z0-9]+", "_", str(key).lower())
    words = set(normalized.split("_"))
    return bool(words & _SECRET_WORDS) or any(p in normalized for p in _SECRET_PHRASES)


class AuditLogWarning(UserWarning):
    """A line of the log that could not be read (it is skipped)."""


def utc_now() -> str:
    """UTC time, ISO 8601 with a ``Z``, to the second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def operator_id() -> str:
    """``user@hostname`` of whoever runs remedy."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


@dataclass(kw_only=True)
class AuditRecord:
    host: str
    result: str
    time: str = field(default_factory=utc_now)
    operator: str = field(default_factory=operator_id)
    runbook: str | None = None
    commits: dict[str, str | None] = field(
        default_factory=lambda: {"runbooks": None, "deploys": None}
    )
    issues: list[str] = field(default_factory=list)
    path: str = "noop"
    operations: list[dict[str, Any]] = field(default_factory=list)
    probe_before: str | None = None
    probe_after: str | None = None
    dirty_override: bool = False
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditRecord:
        """A record from one parsed line; unknown keys (a newer writer) are ignored."""
        known = {f.name for f in fields(cls)}
        missing = {"host", "result", "time"} - data.keys()
        if missing:
            raise ValueError(f"missing {', '.join(sorted(missing))}")
        return cls(**{key: value for key, value in data.items() if key in known})

    @property
    def timestamp(self) -> datetime:
        return parse_time(self.time)


def parse_time(text: str) -> datetime:
    """An ISO 8601 date or time; naive values are taken as UTC."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


_RELATIVE_RE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
SINCE_FORMS = "a relative age (30m, 2h, 3d, 1w) or an ISO date/time (2026-09-20, 2026-09-20T08:00Z)"


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``2h``/``3d``/``30m``/``45s``/``1w`` ago, or an ISO date or time (UTC if naive).

    Raises ValueError naming the accepted forms.
    """
    match = _RELATIVE_RE.match(text)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: amount})
    try:
        return parse_time(text)
    except ValueError:
        raise ValueError(f"{text!r} is not {SINCE_FORMS}") from None


#: Host data key naming the log file for that host's runs.
HOST_DATA_KEY = "audit_log"


def log_path_for(host_data: dict[str, Any] | None = None) -> Path:
    """Where a run against a host logs: ``$REMEDY_AUDIT_LOG`` (what ``--audit-log`` sets),
    else host data ``audit_log``, else the user's state dir."""
    explicit = os.environ.get(LOG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    if host_data and host_data.get(HOST_DATA_KEY):
        return Path(str(host_data[HOST_DATA_KEY])).expanduser()
    return default_log_path()


def default_log_path() -> Path:
    """``$REMEDY_AUDIT_LOG``, else ``$XDG_STATE_HOME/remedy/audit.jsonl``,
    else ``~/.local/state/remedy/audit.jsonl``."""
    explicit = os.environ.get(LOG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME")
    base = Path(state) if state else Path.home() / ".local" / "state"
    return base / "remedy" / "audit.jsonl"


def scrub(value: Any) -> Any:
    """A copy of ``value`` with secret-named keys and private-key-looking strings masked."""
    if isinstance(value, dict):
        return {key: SCRUBBED if is_secret_key(key) else scrub(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item) for item in value]
    if isinstance(value, str) and _SECRET_VALUE_RE.search(value):
        return SCRUBBED
    return value


def serialize(record: AuditRecord) -> bytes:
    """The record as one JSON line (details scrubbed, every secret masked as in every output
    of remedy: remedy.core.config.secrets). Refuses a line that still holds a key."""
    from remedy.core.config.secrets import masked_doc

    data = record.to_dict()
    data["details"] = scrub(data.get("details") or {})

    def dumped(value) -> str:
        return json.dumps(value, ensure_ascii=True, sort_keys=False, separators=(",", ":"),
                          default=str)  # fmt: skip

    if _SECRET_VALUE_RE.search(dumped(data)):
        raise ValueError(
            "refusing to write an audit record that contains a secret (a private key or token) "
            "outside details; remove it from the record"
        )
    return (dumped(masked_doc(data)) + "\n").encode("ascii")


def append(path: Path | str, record: AuditRecord) -> None:
    """Append one record as one line, in one ``os.write`` on an ``O_APPEND`` descriptor.

    Creates the file (mode 0600) and its directories. If the file's last line
    is torn (no newline), the new line starts on a fresh line so it stays
    readable. Concurrent appenders serialise on an advisory ``flock``.
    """
    path = Path(path).expanduser()
    payload = serialize(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        # Appenders take turns so the torn-tail check below sees a settled file;
        # the lock dies with the process, and readers never need it.
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and _last_byte(path, size) != b"\n":
            payload = b"\n" + payload
        written = os.write(fd, payload)
        if written != len(payload):
            raise OSError(f"short write to the audit log {path}: {written} of {len(payload)} bytes")
    finally:
        os.close(fd)


def _last_byte(path: Path, size: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(size - 1)
        return handle.read(1)


@dataclass(frozen=True)
class Mark:
    """Where the log ended at a moment: its file and size then."""

    device: int
    inode: int
    size: int


def mark(path: Path | str) -> Mark | None:
    """Where the log at PATH ends now (None: no log yet). ``read(path, after=...)`` then
    reads only what was appended since: a run's report reads its own records without
    parsing a log that grows with every run."""
    try:
        st = Path(path).expanduser().stat()
    except OSError:
        return None
    return Mark(st.st_dev, st.st_ino, st.st_size)


def _tail(path: Path, after: Mark | None) -> tuple[bytes, str]:
    """The log's bytes after AFTER (all of them when the file is another one now, or
    shorter: rotated or truncated), and how a warning names a line's place."""
    with open(path, "rb") as handle:
        st = os.fstat(handle.fileno())
        if (
            after is None
            or (st.st_dev, st.st_ino) != (after.device, after.inode)
            or st.st_size < after.size
            or after.size == 0
        ):
            return handle.read(), ""
        handle.seek(after.size - 1)
        raw = handle.read()
    # from the start of the first whole line after the mark
    return raw[raw.index(b"\n") + 1 :] if b"\n" in raw else b"", f" after byte {after.size}"


def read(
    path: Path | str,
    host: str | None = None,
    since: datetime | None = None,
    after: Mark | None = None,
) -> list[AuditRecord]:
    """The records of the log, oldest first, optionally for one host, since a time, and
    appended after a ``mark`` (AFTER).

    A missing file has no records. Unreadable lines (a torn last line, a
    corrupted one) are skipped with an ``AuditLogWarning``.
    """
    from remedy.core.config.secrets import masked_doc

    path = Path(path).expanduser()
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    try:
        raw, place = _tail(path, after)
    except FileNotFoundError:
        return []
    lines = raw.split(b"\n")
    torn_tail = lines[-1] != b""
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:  # a line written before remedy masked secrets, or by another hand: masked
            record = AuditRecord.from_dict(masked_doc(json.loads(line)))
        except (ValueError, TypeError) as exc:
            where = "the last line, torn" if torn_tail and number == len(lines) else "a line"
            warnings.warn(
                AuditLogWarning(
                    f"{path}:{number}{place}: skipped {where} that is not a record: {exc}"
                ),
                stacklevel=2,
            )
            continue
        if host is not None and record.host != host:
            continue
        if since is not None:
            try:
                if record.timestamp < since:
                    continue
            except ValueError:
                warnings.warn(
                    AuditLogWarning(
                        f"{path}:{number}{place}: skipped a record with time {record.time!r}"
                    ),
                    stacklevel=2,
                )
                continue
        records.append(record)
    return records


# --------------------------------------------------------------------------- git provenance


def _repo(project_dir: Path | str):
    """The git repository holding the project, or None (not a checkout, or no git)."""
    try:
        import git  # gitpython fails at import time when there is no git binary
    except ImportError:
        return None
    try:
        return git.Repo(Path(project_dir), search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def _pathspec(repo, project_dir: Path | str, relative: str) -> str:
    root = Path(repo.working_tree_dir).resolve()
    return (Path(project_dir).resolve() / relative).relative_to(root).as_posix()


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    short: str
    date: str
    """Committer date, ISO 8601 (UTC)."""
    author: str


def last_commit(project_dir: Path | str, relative: str) -> CommitInfo | None:
    """The last commit touching ``relative`` (a file or directory of the project)."""
    repo = _repo(project_dir)
    if repo is None:
        return None
    try:
        import git

        spec = _pathspec(repo, project_dir, relative)
        commit = next(repo.iter_commits(paths=spec, max_count=1), None)
    except (ValueError, git.GitCommandError):  # no commits yet, or outside the tree
        return None
    if commit is None:
        return None
    return CommitInfo(
        sha=commit.hexsha,
        short=commit.hexsha[:7],
        date=commit.committed_datetime.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        author=commit.author.name or commit.author.email or "",
    )


def commits_of(project_dir: Path | str) -> dict[str, str | None]:
    """``{"runbooks": sha, "deploys": sha}``: the last commits touching each directory.

    Plain ``git log`` rather than gitpython: every deploy run pays for this, and
    importing gitpython costs more than the two lookups.
    """
    result: dict[str, str | None] = {}
    for key in ("runbooks", "deploys"):
        proc = subprocess.run(
            ["git", "-C", str(project_dir), "log", "-1", "--format=%H", "--", key],
            capture_output=True,
            text=True,
            check=False,
        )
        result[key] = (proc.stdout.strip() or None) if proc.returncode == 0 else None
    return result


def is_tracked(project_dir: Path | str) -> bool:
    """Whether the project is inside a git checkout."""
    return _repo(project_dir) is not None


def uncommitted(project_dir: Path | str, relatives: list[str]) -> dict[str, str] | None:
    """Uncommitted files under ``relatives`` (project-relative), as ``{file: state}``.

    ``state`` is "modified", "added", "deleted", "renamed" or "untracked";
    files are project-relative. None when the project is not a git checkout.
    """
    repo = _repo(project_dir)
    if repo is None:
        return None
    root = Path(repo.working_tree_dir).resolve()
    project = Path(project_dir).resolve()
    specs = [_pathspec(repo, project, rel) for rel in relatives] or ["."]
    output = repo.git.status("--porcelain=v1", "-z", "--untracked-files=all", "--", *specs)
    states: dict[str, str] = {}
    entries = output.split("\0")
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if len(entry) < 4:
            continue
        code, name = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            index += 1  # the original name follows
        if code == "??":
            state = "untracked"
        elif "D" in code:
            state = "deleted"
        elif "A" in code:
            state = "added"
        elif "R" in code:
            state = "renamed"
        else:
            state = "modified"
        try:
            shown = (root / name).relative_to(project).as_posix()
        except ValueError:
            shown = name
        states[shown] = state
    return states


def import_manual_runs(path: Path | str, host: str, records) -> list[str]:
    """Append the manual script's RECORDS (read from HOST, remedy.core.programs.journal) that the
    log at PATH does not hold yet, by run_id: a manual run is audited once, by the first
    remedy command that reads the host after it. Returns the run_ids imported."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AuditLogWarning)
        known = {(r.details or {}).get("run_id") for r in read(path, host)}
    imported = []
    for data in records:
        run_id = (data.get("details") or {}).get("run_id")
        if not run_id or run_id in known:
            continue
        try:
            record = AuditRecord.from_dict({**data, "host": host})
        except (TypeError, ValueError):
            continue  # not a record (a torn or foreign line): left out
        append(path, record)
        known.add(run_id)
        imported.append(run_id)
    return imported


def restarts_said(details: dict) -> str | None:
    """How often a run restarted the server, why, and what the restarts cut, from its
    record's DETAILS (None: no restart)."""
    if not details.get("restarts"):
        return None
    why = "; ".join(str(r) for r in details.get("restart_reasons") or []) or "no reason recorded"
    cut = int(details.get("requests_cut") or 0)
    return f"{details['restarts']}x: {why}" + (f"; {cut} request(s) cut" if cut else "")
