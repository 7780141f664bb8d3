"""Shared fixtures. Twin tests boot real twins and always power them off."""

from __future__ import annotations

import json

# pyinfra's CLI package runs gevent's monkey.patch_all() when imported (pyinfra-testing
# imports it). Patching halfway through a session breaks subprocess for later tests, so
# patch first, as pyinfra's own CLI does.
from gevent import monkey

monkey.patch_all()

import itertools
import os

import pytest

from remedy.core.readings import probe
from remedy.twin import fixtures, machine

_counter = itertools.count()
_MADE: set[str] = set()  # every twin name this session gave out


def _twin_name(prefix: str = "t") -> str:
    """A twin name of this session (PREFIX, its pid, a counter), remembered so that the
    session takes down, at its end, only twins it made."""
    name = f"{prefix}{os.getpid() % 100000}-{next(_counter)}"
    _MADE.add(name)
    return name


def twin_suite() -> str:
    """The Debian base twin tests run on: REMEDY_TWIN_SUITE, else trixie (Nix 2.26)."""
    return os.environ.get("REMEDY_TWIN_SUITE") or "trixie"


class TwinFactory:
    def __init__(self):
        self.names: list[str] = []
        self.suite = twin_suite()

    def __call__(self, *, with_emergency_override: bool = False) -> machine.Twin:
        name = _twin_name()
        self.names.append(name)
        return machine.up(
            name,
            suite=self.suite,
            with_emergency_override=with_emergency_override,
            progress=lambda _m: None,
        )

    def close(self):
        for name in self.names:
            try:
                machine.down(name, progress=lambda _m: None)
            except Exception as exc:  # keep powering the others off
                print(f"could not take twin {name} down: {exc}")


def pytest_addoption(parser):
    parser.addoption(
        "--shard",
        default=None,
        metavar="I/N",
        help="run the I-th of N shares of the selected tests, dealt by their durations in "
        "tests/durations.json (tests/sharding.py; scripts/test.sh runs the N at once: twin "
        "tests mostly wait, and gevent rules out pytest-xdist's workers)",
    )
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="merge the durations of the tests that passed in this session into "
        "tests/durations.json (what --shard deals by)",
    )


# -- root's real state: the suite works in its own, and proves it ------------------

# What of this machine belongs to remedy's real user, and no test may change: the audit
# log and whatever else remedy keeps in the user's state directory, the state, lock and
# unit files a run or `remedy schedule install` writes here. Left out, on purpose: the
# twins' own state directories (/var/lib/remedy/twins/*: every session, and people,
# make and remove twins there; a session's leftovers are checked by name below) and the
# caches under /var/cache/remedy (the twins' root file systems and the wheelhouse of
# tests/twin/test_schedule.py, which any run may fill and reuse).
_HOME_STATE = os.path.join(os.path.expanduser("~"), ".local", "state", "remedy")
_REAL_STATE = {  # a directory: (which paths under it count, which directories to enter)
    _HOME_STATE: (lambda _rel: True, lambda _rel: True),
    "/var/lib/remedy": (lambda rel: not rel.startswith("twins/"), lambda rel: rel != "twins"),
    "/run/lock": (lambda rel: rel.startswith("remedy"), lambda rel: rel.startswith("remedy")),
    "/etc/systemd/system": (lambda rel: os.path.basename(rel).startswith("remedy"),
                            lambda _rel: True),
}  # fmt: skip


def real_state() -> dict[str, tuple]:
    """Each path of root's real state (see _REAL_STATE): its kind, size, mode and the
    time it last changed (a directory by its name only: twins come and go in it)."""
    seen: dict[str, tuple] = {}
    for top, (kept, enter) in _REAL_STATE.items():
        for root, dirs, files in os.walk(top):
            rels = {name: os.path.relpath(os.path.join(root, name), top) for name in dirs}
            dirs[:] = [name for name in dirs if enter(rels[name])]
            for name in list(rels) + files:
                path = os.path.join(root, name)
                if not kept(os.path.relpath(path, top)):
                    continue
                try:
                    st = os.lstat(path)
                except OSError:  # gone while walked
                    continue
                if name in rels:
                    seen[path] = ("dir",)
                else:
                    seen[path] = ("file", st.st_size, st.st_mode, st.st_mtime_ns)
    return seen


def state_changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """What changed between two snapshots of real_state(), one line each."""
    lines = [f"new: {p}" for p in sorted(after.keys() - before.keys())]
    lines += [f"gone: {p}" for p in sorted(before.keys() - after.keys())]
    lines += [
        f"changed: {p}"
        for p in sorted(before.keys() & after.keys())
        if before[p] != after[p] and not _others_records(p, before[p], after[p])
    ]
    return lines


_AUDIT = os.path.join(_HOME_STATE, "audit.jsonl")


def _others_records(path: str, before: tuple, after: tuple) -> bool:
    """Whether PATH is root's audit log and it only gained records of other processes'
    test twins (t<pid>-<n>, b<pid>-<n> of another pid): a test run of a checkout that
    still writes there, beside this one on a shared machine, not this session's doing."""
    if path != _AUDIT or after[1] <= before[1] or after[2] != before[2]:
        return False
    import re

    with open(path, "rb") as fh:
        fh.seek(before[1])
        new = fh.read(after[1] - before[1]).decode(errors="replace").splitlines()
    mine = os.getpid() % 100000
    for line in new:
        try:
            host = str(json.loads(line).get("host"))
        except (ValueError, AttributeError):
            return False
        m = re.fullmatch(r"[tb](\d+)-\d+", host)
        if not m or int(m.group(1)) == mine:
            return False
    return bool(new)


_ISOLATED = ("XDG_STATE_HOME", "REMEDY_LOCK_DIR", "REMEDY_AUDIT_LOG")


def pytest_configure(config):
    # The operation cases' expectations are written by hand (tests/operations): no mode
    # rewrites them to pass, and a run that asks for one is refused.
    if os.environ.get("REMEDY_UPDATE_CASES"):
        raise pytest.UsageError(
            "REMEDY_UPDATE_CASES is set: the operation cases have no update mode; edit the "
            "case's expect by hand (tests/operations/test_operations.py says how)"
        )
    # The session's own state root (under REMEDY_TEST_STATE when scripts/test.sh gives
    # one): every run a test starts, and remedy in this process, write their audit log
    # and fleet locks there, unless the test names its own. Then the real state is
    # snapshotted, to be compared at the end (pytest_sessionfinish).
    import tempfile

    parent = os.environ.get("REMEDY_TEST_STATE") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    root = tempfile.mkdtemp(prefix="remedy-test-state.", dir=parent)
    config._remedy_state = (root, {k: os.environ.get(k) for k in _ISOLATED})
    os.environ["XDG_STATE_HOME"] = os.path.join(root, "state")
    os.environ["REMEDY_LOCK_DIR"] = os.path.join(root, "lock")
    os.makedirs(os.environ["REMEDY_LOCK_DIR"])
    os.environ.pop("REMEDY_AUDIT_LOG", None)  # the default: under XDG_STATE_HOME
    config._remedy_real_state = real_state()


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if root's real state changed during it, or a twin this session made
    is left (the session's fixture takes them down before this runs)."""
    import shutil

    config = session.config
    _store_durations(config)
    before = getattr(config, "_remedy_real_state", None)
    if before is None:
        return
    problems = state_changes(before, real_state())
    twins = machine.state_root()
    problems += [f"twin left: {twins / n}" for n in sorted(_MADE) if (twins / n).exists()]
    root, saved = config._remedy_state
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(root, ignore_errors=True)
    if problems:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        say = reporter.write_line if reporter else print
        say("")
        say("root's real state changed during the suite (a test must use its own paths):")
        for line in problems[:50]:
            say(f"  {line}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _shard(config) -> tuple[int, int] | None:
    value = config.getoption("--shard")
    if not value:
        return None
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard {value!r}: expected I/N, for example 1/3") from None
    if not 1 <= i <= n:
        raise pytest.UsageError(f"--shard {value!r}: I must be between 1 and N")
    return i, n


@pytest.hookimpl(trylast=True)  # after -m and -k: the shares are of what runs
def pytest_collection_modifyitems(config, items):
    """--shard I/N keeps the I-th of N shares of the selected tests, dealt by their
    measured durations (tests/sharding.py), in collection order."""
    shard = _shard(config)
    if shard is None:
        return
    from tests import sharding

    i, n = shard
    kinds = [(item.nodeid, item.get_closest_marker("twin") is not None) for item in items]
    mine = set(sharding.shares(sharding.priced(kinds, sharding.load()), n)[i - 1])
    keep = [item for item in items if item.nodeid in mine]
    drop = [item for item in items if item.nodeid not in mine]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


_TOOK: dict[str, list] = {}  # node id: [seconds so far, every phase passed]


def pytest_runtest_logreport(report):
    took = _TOOK.setdefault(report.nodeid, [0.0, True])
    took[0] += report.duration
    took[1] = took[1] and report.passed


def _store_durations(config) -> None:
    """--store-durations: this session's passed tests' durations into the file."""
    if not config.getoption("--store-durations", False):
        return
    from tests import sharding

    sharding.merge({nodeid: took for nodeid, (took, ok) in _TOOK.items() if ok})


def _pytest_alive(pid_mod: int) -> bool:
    """Whether a pytest process whose pid ends in PID_MOD (names keep pid % 100000) runs."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) % 100000 == pid_mod:
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if b"pytest" in fh.read():
                        return True
            except OSError:
                continue
    return False


def clear_dead_test_twins() -> list[str]:
    """Take down what test runs that were killed left: twins named t<pid>-<n> or
    b<pid>-<n> whose pytest process is gone (a twin of a live run, perhaps still being
    set up, is left alone). Not a fixture: scripts/test.sh calls it before its runs; a
    pytest session takes down only the twins it made itself. Returns the names."""
    import re

    names = {t.name for t in machine.all_twins() if not t.running}
    names |= {p.name for p in machine.leftovers()}  # processes of twins whose state went
    gone = []
    for name in sorted(names):
        m = re.fullmatch(r"[tb](\d+)-\d+", name)
        if m and not _pytest_alive(int(m.group(1))):
            try:
                machine.down(name, progress=lambda _m: None)
                gone.append(name)
            except machine.TwinError:
                pass
    return gone


@pytest.fixture(scope="session", autouse=True)
def _take_down_this_sessions_twins():
    """At the session's end, a twin this session made that is still there (its test's
    own teardown failed, or was never reached) goes; nothing of another session's."""
    yield
    if not _MADE:
        return
    there = {t.name for t in machine.all_twins()} | {p.name for p in machine.leftovers()}
    for name in sorted(_MADE & there):
        try:
            machine.down(name, progress=lambda _m: None)
        except machine.TwinError as exc:
            print(f"could not take twin {name} down: {exc}")


@pytest.fixture
def make_twin():
    if os.environ.get("REMEDY_SKIP_TWIN") == "1":
        pytest.skip("REMEDY_SKIP_TWIN=1")
    factory = TwinFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def twin(make_twin):
    return make_twin()


def served_model(twin: machine.Twin) -> str | None:
    """The model id the server lists first in /v1/models (None when it does not answer)."""
    import json

    proc = twin.exec(
        ["curl", "-sS", "--max-time", "10", twin.server_url + "/v1/models"], check=False
    )
    try:
        return json.loads(proc.stdout)["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def probe_once(twin: machine.Twin, model: str | None = None) -> probe.ProbeResult:
    """Send the field-notes tool call once from inside the twin, naming MODEL (default:
    the id /v1/models serves, as a probe must; the double 404s any other)."""
    model = model or served_model(twin) or fixtures.SERVED_MODEL
    proc = twin.exec(probe.curl_argv(twin.server_url, model), check=False)
    return probe.read_curl_output((proc.stdout + "\n" + proc.stderr).splitlines())


def is_prose(result: probe.ProbeResult) -> bool:
    """HTTP 200 without tool calls and without the raw call text (<tool_call>, <function=)
    in content: the model answered in prose. Says nothing about the parser."""
    return (
        result.status == 200
        and result.outcome != probe.PARSED
        and result.finish_reason == "stop"
        and not any(mark in (result.content or "") for mark in ("<tool_call>", "<function="))
    )


def probe_inside(twin: machine.Twin, tries: int = 3) -> probe.ProbeResult:
    """The probe as the engine must send it: model id from /v1/models, a prose answer
    asked again (at most TRIES requests in all; the double answers every 4th in prose,
    never two in a row). Returns the last answer."""
    model = served_model(twin)
    for _ in range(max(tries, 1)):
        result = probe_once(twin, model)
        if not is_prose(result):
            break
    return result


def wait_probe(twin: machine.Twin, timeout: float = 60) -> probe.ProbeResult:
    """Probe until the server answers (it loads for a few seconds after a restart)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        result = probe_inside(twin)
        if result.outcome != probe.UNREACHABLE or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


# -- the checkout's owner ------------------------------------------------------


def as_owner(twin: machine.Twin, *argv: str, check: bool = True):
    """Run ARGV in the twin as the owner of /etc/nixos and the tt-stack repo (ops)."""
    return twin.exec(list(argv), user=fixtures.OWNER, check=check)


def owner_git(twin: machine.Twin, *args: str, repo: str = fixtures.NIXOS_DIR, check=True):
    """git -C REPO ARGS as the repo's owner (root's git refuses a checkout it does not own)."""
    return as_owner(twin, "git", "-C", repo, *args, check=check)


def nix_version(twin: machine.Twin) -> tuple[int, int]:
    version = twin.exec(["nix", "--version"]).stdout.split()[-1]
    major, minor = (int(x) for x in version.split(".")[:2])
    return major, minor


def owner_bump(twin: machine.Twin, check: bool = True):
    """Bump the tt-stack input of /etc/nixos as its owner, with the right command for the
    twin's Nix and the flake features passed explicitly (nix.conf does not enable them)."""
    flags = ["--extra-experimental-features", "nix-command flakes"]
    if nix_version(twin) >= (2, 19):
        argv = ["nix", *flags, "flake", "update", "tt-stack", "--flake", fixtures.NIXOS_DIR]
    else:
        argv = ["nix", *flags, "flake", "lock", "--update-input", "tt-stack", fixtures.NIXOS_DIR]
    return as_owner(twin, *argv, check=check)


def sudo_rebuild(twin: machine.Twin, *args: str, check: bool = True):
    """``sudo nixos-rebuild ARGS`` from the owner's account: root, with SUDO_UID naming the
    owner, the only way root's nix/git accept the owner's checkout."""
    return twin.exec(
        [
            "env",
            f"SUDO_UID={fixtures.OWNER_UID}",
            f"SUDO_USER={fixtures.OWNER}",
            "nixos-rebuild",
            *args,
        ],
        check=check,
    )


def not_owned_by_owner(twin: machine.Twin) -> list[str]:
    """Files in /etc/nixos or the tt-stack repo that the owner does not own (must be none)."""
    out = twin.exec(
        ["find", fixtures.NIXOS_DIR, fixtures.TT_STACK_DIR, "!", "-user", fixtures.OWNER]
    ).stdout
    return out.split()


PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Tests of what a run does (the switch, crash safety, the bump) take its restart now,
# as a person's `--restart now` does; the restart policy's own tests pass restart=None.
RESTART_NOW = ["--data", "restart=now"]


def run_restore(
    twin: machine.Twin, *extra: str, audit_log=None, debug: bool = False, restart="now"
):
    """``pyinfra inventory/twin.py deploys/restore_toolcalling.py -y`` on one twin."""
    import subprocess

    argv = ["pyinfra", "-y", "--limit", twin.name, *_restart(restart), *extra]
    if debug:
        argv.append("--debug")
    argv += ["inventory/twin.py", "deploys/restore_toolcalling.py"]
    env = dict(os.environ)
    if audit_log is not None:
        env["REMEDY_AUDIT_LOG"] = str(audit_log)
    return subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT, env=env, timeout=900)


def remedy_json(*argv: str):
    """Run ``remedy ARGV --json``; (exit code, parsed document)."""
    import json
    import subprocess

    proc = subprocess.run(
        ["remedy", *argv, "--json"], capture_output=True, text=True, cwd=PROJECT, timeout=300
    )
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"remedy {' '.join(argv)}: not JSON: {proc.stdout!r} {proc.stderr!r}"
        ) from None
    return proc.returncode, doc


def unit_props(twin: machine.Twin) -> dict:
    out = twin.exec(
        ["systemctl", "show", "tenstorrent-serving.service", "-p", "MainPID", "-p", "NRestarts"]
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def server_starts(twin: machine.Twin) -> int:
    """How many times the model server finished loading (its own log line, per process)."""
    out = twin.exec(
        ["journalctl", "-q", "-u", "tenstorrent-serving.service", "-o", "cat"], check=False
    ).stdout
    return out.count("Application startup complete")


def twin_inventory(path, twin: machine.Twin, **data):
    """Write a pyinfra inventory file at PATH holding TWIN only, with DATA over its data."""
    path.write_text(
        "from remedy.twin.machine import inventory_hosts\n"
        f"hosts = [(n, {{**d, **{data!r}}}) for n, d in inventory_hosts() if n == {twin.name!r}]\n"
    )
    return path


def _restart(restart: str | None) -> list[str]:
    return ["--data", f"restart={restart}"] if restart else []


def _deploy_argv(twin: machine.Twin, deploy: str, extra, audit_log, restart):
    argv = ["pyinfra", "-y", "--limit", twin.name, *_restart(restart), *extra, "inventory/twin.py"]
    argv.append(f"deploys/{deploy}.py")
    env = dict(os.environ)
    if audit_log is not None:
        env["REMEDY_AUDIT_LOG"] = str(audit_log)
    return argv, env


def run_deploy(twin: machine.Twin, deploy: str, *extra: str, audit_log=None, restart="now"):
    """``pyinfra -y --limit NAME inventory/twin.py DEPLOY`` (``deploys/DEPLOY.py``), with
    ``--data restart=RESTART`` (None: the host's own restart policy)."""
    import subprocess

    argv, env = _deploy_argv(twin, deploy, extra, audit_log, restart)
    return subprocess.run(argv, capture_output=True, text=True, cwd=PROJECT, env=env, timeout=900)


def start_deploy(twin: machine.Twin, deploy: str, out, *extra: str, audit_log=None,
                 restart="now"):  # fmt: skip
    """run_deploy started, not waited for: its output (stdout and stderr) in the file
    OUT as it comes (see deploy_until)."""
    import subprocess

    argv, env = _deploy_argv(twin, deploy, extra, audit_log, restart)
    env["PYTHONUNBUFFERED"] = "1"
    with open(out, "w") as fh:
        return subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, text=True,
                                cwd=PROJECT, env=env, stdin=subprocess.DEVNULL)  # fmt: skip


def converge_json(*argv: str):
    """``remedy converge inventory/twin.py --json ARGV``: (exit code, its document)."""
    import subprocess

    proc = subprocess.run(
        ["remedy", "converge", "inventory/twin.py", "--json", *argv],
        capture_output=True, text=True, cwd=PROJECT, timeout=900,
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def status_settings(twin: machine.Twin) -> tuple[int, dict[str, dict]]:
    """``remedy status --json`` of one twin: (exit code, managed settings by key)."""
    code, doc = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    (host,) = doc["hosts"]
    return code, {d["key"]: d for d in host["settings"]}


def out_of_sync(settings: dict[str, dict]) -> set[str]:
    return {key for key, d in settings.items() if d["state"] != "in sync"}


def hugepages_1g(twin: machine.Twin) -> int:
    pool = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
    return int(twin.exec(["cat", pool]).stdout.strip())


class HeldRequest:
    """One chat completion the vLLM double holds open for HOLD_S seconds (its own field
    remedy_double_hold_s), or until ``release()`` (its field remedy_double_release),
    sent from inside the twin with curl; ``status`` is its HTTP code once it ended
    ("000": the connection was cut)."""

    def __init__(self, twin: machine.Twin, hold_s: float, gauge: bool = True):
        """GAUGE: wait until the server's gauge counts it; False for a server without
        the gauges (--disable-log-stats): wait until curl runs in the twin."""
        import json
        import subprocess
        import threading
        import uuid

        self.twin, self.status = twin, None
        self.release_path = f"/run/remedy-double-release-{uuid.uuid4().hex}"
        body = json.dumps({
            "model": served_model(twin),
            "messages": [{"role": "user", "content": "Say hello."}],
            "remedy_double_hold_s": hold_s,
            "remedy_double_release": self.release_path,
        })  # fmt: skip
        url = f"{twin.server_url}/v1/chat/completions"
        argv = [*twin.ssh_argv(), "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                "-H", "'Content-Type: application/json'", "-d", f"'{body}'", url]  # fmt: skip

        def send() -> None:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=hold_s + 120)
            self.status = done.stdout.strip() or "000"

        self.thread = threading.Thread(target=send)
        self.thread.start()
        if gauge:
            self.wait_running()
        else:
            self.wait_sent()

    def running(self) -> int:
        out = self.twin.exec(["curl", "-s", f"{self.twin.server_url}/metrics"], check=False)
        for line in out.stdout.splitlines():
            if line.startswith("vllm:num_requests_running{"):
                return int(float(line.rsplit(" ", 1)[1]))
        return 0

    def wait_running(self, timeout: float = 120) -> None:  # a cap, not a speed
        import time

        deadline = time.monotonic() + timeout
        while self.running() < 1:
            assert time.monotonic() < deadline, "the held request never reached the server"
            time.sleep(0.2)

    def wait_sent(self, timeout: float = 120) -> None:  # a cap, not a speed
        import time

        deadline = time.monotonic() + timeout
        while self.twin.exec(["pgrep", "-f", "remedy_double_hold_s"], check=False).returncode:
            assert time.monotonic() < deadline, "the held request was never sent"
            time.sleep(0.2)
        time.sleep(1)  # curl connects and sends at once; the double then holds it

    def release(self) -> None:
        """End the hold now: the double answers it at once."""
        self.twin.exec(["touch", self.release_path])

    def result(self, timeout: float = 300) -> str:
        self.thread.join(timeout)
        return self.status


def deploy_until(proc, out, text: str, cap_s: float = 900) -> bool:
    """Wait until the run PROC (its output in the file OUT) says TEXT (True), or ends
    (False); a cap, not a speed."""
    import time

    deadline = time.monotonic() + cap_s
    while text not in out.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            return text in out.read_text(errors="replace")
        time.sleep(0.5)
    return True


def fleet_failure(doc: dict, twins=()) -> str:
    """For a failed fleet run's message: each host's verdict, the whole entry of every
    host that did not end healthy and durable (with its log's tail when it failed), the
    end of its twin's journal, and what the run logged on stderr."""
    import json

    odd = [h for h in doc["hosts"] if h.get("verdict") != "healthy and durable"]
    names = {h["host"] for h in odd}
    journals = [
        f"-- journal of {t.name}:\n"
        + t.exec(["journalctl", "-q", "-n", "80", "--no-pager"], check=False).stdout
        for t in twins
        if t.name in names
    ]
    return "\n".join(
        [
            json.dumps({h["host"]: h.get("verdict") for h in doc["hosts"]}),
            *(json.dumps(h, default=str) for h in odd),
            *journals,
            doc.get("stderr_tail", ""),
        ]
    )
