"""Twin lifecycle: bring a twin up, reboot it for real, power it off.

A twin is an overlayfs copy of the cached base (``rootfs``) booted with
``systemd-nspawn -b`` under a small supervisor that boots it again when it
reboots (nspawn exits 133), so a reboot started from inside (``systemctl
reboot`` over SSH) behaves as on the real host. Twins share this machine's
network namespace; each has its own sshd port and server port.

State lives in ``REMEDY_TWIN_STATE`` (default ``/var/lib/remedy/twins``), one
directory per twin: ``state.json``, its SSH key pair and known_hosts, the
overlay directories and the console log.

A twin has a role. A serving twin is the host itself. A builder twin
(``role="builder"``) boots the same base with the model server masked and an
unprivileged user ``BUILDER_USER``; ``pair_builder`` lets root of a serving twin
reach that user over SSH with its own key, as a serving host reaches its builder.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from remedy.errors import TwinError
from remedy.twin import fixtures, rootfs

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
SSH_PORT_BASE = 2222
SERVER_PORT_BASE = fixtures.DEFAULT_SERVER_PORT
MAX_SLOTS = 32
IN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BOOT_TIMEOUT = 90.0
ROLES = ("serving", "builder")
# A builder twin: the unprivileged user root of a serving twin logs in as, and the key
# that root uses (in the serving twin), as the engine's host data names them.
BUILDER_USER = "remedy-build"
BUILDER_KEY = "/root/.ssh/remedy-builder"
SERVING_UNIT = "tenstorrent-serving.service"


def _alive(pid: int) -> bool:
    """True if PID runs. A supervisor started by this process is our child: once it exits
    it stays a zombie (kill(pid, 0) still succeeds) until reaped, so reap it here."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass  # not our child
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def state_root() -> Path:
    return Path(os.environ.get("REMEDY_TWIN_STATE", "/var/lib/remedy/twins"))


@dataclass
class Twin:
    name: str
    slot: int
    ssh_port: int
    server_port: int
    base: str
    # The Debian suite of its base (trixie: Nix 2.26; bookworm: Nix 2.8). State written
    # before suites existed has none: those twins were bookworm.
    suite: str = "bookworm"
    # "serving" (the host), or "builder" (serves nothing; see pair_builder). State
    # written before roles existed has none: those twins serve.
    role: str = "serving"
    # A builder's tools and trust (issue 44). git: a stock NixOS has none
    # (nixos/modules/config/system-path.nix's defaultPackages and requiredPackages
    # list no git), so a builder twin has none unless made with it. signs: its
    # nix-daemon signs what it builds (secret-key-files), and pair_builder makes the
    # serving twin trust the key (trusted-public-keys).
    git: bool = False
    signs: bool = True

    # -- paths ---------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return state_root() / self.name

    @property
    def merged(self) -> Path:
        return self.dir / "merged"

    @property
    def key(self) -> Path:
        return self.dir / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "ssh" / "known_hosts"

    @property
    def server_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    # -- processes -----------------------------------------------------------
    def _pid(self, name: str) -> int | None:
        try:
            pid = int((self.dir / name).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    @property
    def supervisor_pid(self) -> int | None:
        return self._pid("supervisor.pid")

    @property
    def nspawn_pid(self) -> int | None:
        return self._pid("nspawn.pid")

    def init_pid(self) -> int | None:
        """PID (in this machine's namespace) of the twin's systemd, if booted."""
        nspawn = self.nspawn_pid
        if nspawn is None:
            return None
        try:
            children = Path(f"/proc/{nspawn}/task/{nspawn}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    @property
    def running(self) -> bool:
        return self.supervisor_pid is not None

    def save(self) -> None:
        data = json.dumps(asdict(self), indent=2) + "\n"
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(data)
        os.replace(tmp, self.dir / "state.json")

    # -- running commands inside ----------------------------------------------
    def exec(
        self,
        argv: list[str],
        *,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
        user: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ARGV inside the twin (behind SSH), for set-up and for tests; as root, or
        as USER (``runuser``, with that user's HOME), e.g. ``fixtures.OWNER``."""
        pid = self.init_pid()
        if pid is None:
            raise TwinError(f"twin {self.name} is not booted")
        env = ["env", "-i", f"PATH={IN_PATH}", "LANG=C.UTF-8"]
        if user is None or user == "root":
            inner = [*env, "HOME=/root", *argv]
        else:
            home = "/home/" + user
            inner = [*env, f"HOME={home}", "runuser", "-u", user, "--", *argv]
        cmd = ["nsenter", "-t", str(pid), "-a", "--", *inner]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise TwinError(
                f"in twin {self.name}: {shlex.join(argv)} exited {proc.returncode}",
                causes=(proc.stderr or proc.stdout).strip().splitlines()[-10:],
            )
        return proc

    def inventory_data(self) -> dict:
        """Host data for pyinfra and for a plain OpenSSH client; a builder's names its
        role and user, and no server (it serves nothing)."""
        data = {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": self.ssh_port,
            "ssh_user": "root",
            "ssh_key": str(self.key),
            "ssh_known_hosts_file": str(self.known_hosts),
            "ssh_strict_host_key_checking": "yes",
            "ssh_look_for_keys": False,
            "ssh_allow_agent": False,
            "remedy_environment": "twin",
            "flake_host": fixtures.FLAKE_HOST,
            "server_url": self.server_url,
        }
        if self.role == "builder":
            del data["server_url"]
            data["remedy_role"] = "builder"
            data["builder_user"] = BUILDER_USER
        return data

    def ssh_argv(self) -> list[str]:
        """An OpenSSH client command line reaching this twin as root."""
        return [
            "ssh",
            "-i",
            str(self.key),
            "-p",
            str(self.ssh_port),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "root@127.0.0.1",
        ]


# -- lookup -----------------------------------------------------------------


def validate_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise TwinError(
            f"invalid twin name {name!r}: use lower-case letters, digits and '-', "
            "starting with a letter (at most 31 characters)."
        )
    return name


def load(name: str) -> Twin:
    validate_name(name)
    path = state_root() / name / "state.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        known = ", ".join(t.name for t in all_twins()) or "none"
        raise TwinError(
            f"no twin named {name!r} (twins: {known}); start one with "
            f"`remedy twin up --name {name}`."
        ) from None
    return _from_state(data)


def _from_state(data: dict) -> Twin:
    known = {f.name for f in fields(Twin)}
    return Twin(**{k: v for k, v in data.items() if k in known})


def all_twins() -> list[Twin]:
    root = state_root()
    if not root.is_dir():
        return []
    twins = []
    for path in sorted(root.glob("*/state.json")):
        try:
            twins.append(_from_state(json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return twins


def running_twins() -> list[Twin]:
    return [t for t in all_twins() if t.running]


# -- up ---------------------------------------------------------------------


@contextmanager
def _state_lock():
    state_root().mkdir(parents=True, exist_ok=True)
    with open(state_root() / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _allocate(
    name: str, base: Path, suite: str, role: str, git: bool = False, signs: bool = True
) -> Twin:
    used = {t.slot for t in all_twins()}
    for slot in range(MAX_SLOTS):
        if slot in used:
            continue
        twin = Twin(
            name, slot, SSH_PORT_BASE + slot, SERVER_PORT_BASE + slot, str(base), suite, role,
            git, signs,
        )  # fmt: skip
        if _port_free(twin.ssh_port) and _port_free(twin.server_port):
            twin.dir.mkdir(parents=True, exist_ok=True)
            twin.save()
            return twin
    raise TwinError(
        f"no free twin slot (ports {SSH_PORT_BASE}+ and {SERVER_PORT_BASE}+ are "
        "taken); take a twin down with `remedy twin down --name N`."
    )


def _mounted(path: Path) -> bool:
    return os.path.ismount(path)


def _mount_overlay(twin: Twin) -> None:
    upper, work = twin.dir / "upper", twin.dir / "work"
    for d in (upper, work, twin.merged):
        d.mkdir(exist_ok=True)
    if _mounted(twin.merged):
        return
    opts = f"lowerdir={twin.base},upperdir={upper},workdir={work}"
    rootfs._run(
        ["mount", "-t", "overlay", "overlay", "-o", opts, str(twin.merged)],
        "mounting the twin's overlay",
    )


def _keygen(path: Path, comment: str, what: str) -> None:
    rootfs._run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        f"ssh-keygen ({what})",
    )


def _without_dynamic_motd(root: Path) -> None:
    """Debian's sshd PAM stack runs /etc/update-motd.d at every login (run-parts, uname):
    NixOS's shows a static motd only. Three processes a session that production never
    starts, and remedy opens sessions on every run (issue 34's measures)."""
    pam = root / "etc/pam.d/sshd"
    text = pam.read_text()
    new = re.sub(r"(?m)^(session\s+optional\s+pam_motd\.so\s+motd=/run/motd\.dynamic)$",
                 r"# \1  (remedy twin: NixOS has no dynamic motd)", text)  # fmt: skip
    if new != text:
        pam.write_text(new)


def _personalise(twin: Twin, progress) -> None:
    """First boot only: this twin's host keys, client key, ports, machine id."""
    root = twin.merged
    # its own machine id, as every installed host has (systemd-machine-id-setup): the
    # cached rootfs holds one, which every twin would share, and the manual script's
    # host guard tells hosts apart by it
    (root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
    (twin.dir / "ssh").mkdir(mode=0o700, exist_ok=True)
    host_key = root / "etc/ssh/ssh_host_ed25519_key"
    _keygen(host_key, f"root@{twin.name}", "host key")
    _keygen(twin.key, f"remedy-twin-{twin.name}", "client key")
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    auth = ssh_dir / "authorized_keys"
    auth.write_text(Path(str(twin.key) + ".pub").read_text())
    auth.chmod(0o600)
    pub = host_key.with_suffix(".pub").read_text().split()
    twin.known_hosts.write_text(f"[127.0.0.1]:{twin.ssh_port} {pub[0]} {pub[1]}\n")
    (root / "etc/ssh/sshd_config.d/20-remedy-twin-port.conf").write_text(
        f"Port {twin.ssh_port}\nListenAddress 127.0.0.1\n"
    )
    _without_dynamic_motd(root)
    # a builder serves nothing: its port stays the base's, never listened on
    if twin.role == "serving" and twin.server_port != fixtures.DEFAULT_SERVER_PORT:
        progress(f"serving on port {twin.server_port}: committing it in /etc/nixos, rebuilding")
        config = root / "etc/nixos/hosts/cfx-llm2/configuration.nix"
        config.write_text(
            config.read_text().replace(
                f"port = {fixtures.DEFAULT_SERVER_PORT};", f"port = {twin.server_port};"
            )
        )
        # The checkout's owner commits (their identity; git refuses root here), then
        # rebuilds as `sudo nixos-rebuild` would: root, with SUDO_UID naming the owner
        # so git and libgit2 accept the checkout.
        rootfs.nspawn_run(
            root,
            [
                "runuser",
                "-u",
                fixtures.OWNER,
                "--",
                "git",
                "-C",
                fixtures.NIXOS_DIR,
                "commit",
                "-q",
                "-am",
                f"twin {twin.name}: serve on port {twin.server_port}",
            ],
            "git commit",
            env={"HOME": f"/home/{fixtures.OWNER}"},
        )
        rootfs.nspawn_run(
            root,
            ["nixos-rebuild", "boot", "--flake", f"{fixtures.NIXOS_DIR}#{fixtures.FLAKE_HOST}"],
            "nixos-rebuild boot",
            env={"SUDO_UID": str(fixtures.OWNER_UID), "SUDO_USER": fixtures.OWNER},
        )
        rootfs._owned_by_owner(root, fixtures.NIXOS_DIR, fixtures.TT_STACK_DIR)
    (twin.dir / "personalised").write_text("ok\n")


# Every twin runs as root on this machine's kernel, so all share root's inotify limits:
# a booted twin holds about 8 instances, and 128 (the kernel's default) runs out at 16
# twins ("Failed to create control group inotify object: Too many open files").
INOTIFY = {"max_user_instances": 1024, "max_user_watches": 524288}
_inotify_raised: list[str] = []


def raise_inotify_limits(progress=print) -> None:
    """Raise this machine's fs.inotify limits to what many twins need (never lower them);
    says so once per process."""
    for key, wanted in INOTIFY.items():
        path = Path("/proc/sys/fs/inotify") / key
        try:
            now = int(path.read_text())
            if now < wanted:
                path.write_text(f"{wanted}\n")
                if key not in _inotify_raised:
                    _inotify_raised.append(key)
                    progress(
                        f"raised fs.inotify.{key} {now} -> {wanted}: twins share this "
                        "machine's kernel (docs/twin.md)"
                    )
        except (OSError, ValueError) as exc:
            progress(f"could not raise fs.inotify.{key}: {exc}")


# A twin's systemd manages the cgroup subtree nspawn boots it in. Without a systemd on
# this machine, nspawn (--keep-unit) boots in its own cgroup, the same for every twin
# started from one process: all twins then shared one /payload/system.slice, and units
# of the same name in two twins (a scope named after a PID, ssh.service) were one cgroup.
# One twin's systemd removed the cgroup of another's scope as it started ("Couldn't move
# process ... to requested cgroup ...: No such file or directory"; systemd-run exits 1
# without a word). So each twin's supervisor moves into a cgroup of its own first.
CGROUP_PARENT = "remedy-twins"


def _cgroup_dirs(name: str) -> list[Path]:
    """The cgroup of twin NAME's supervisor in each hierarchy a systemd manages (the
    cgroup2 one and cgroup v1's name=systemd), under this process's own cgroup there."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    paths = {}
    for line in own:
        _id, controllers, path = line.split(":", 2)
        if controllers in ("", "name=systemd"):
            paths[controllers] = path
    out = []
    for line in mountinfo:
        pre, _, post = line.partition(" - ")
        fields, fstype = pre.split(), post.split()
        if len(fields) < 5 or len(fstype) < 3:
            continue
        key = {"cgroup2": ""}.get(fstype[0])
        if fstype[0] == "cgroup" and "name=systemd" in fstype[2].split(","):
            key = "name=systemd"
        if key is None or key not in paths:
            continue
        root, mount = fields[3], fields[4].replace("\\040", " ")
        inside = os.path.relpath(paths.pop(key), root)  # "." when it is the mount's root
        if inside != ".." and not inside.startswith("../"):
            out.append(Path(mount, inside, CGROUP_PARENT, name))
    return out


def _own_cgroups(name: str, progress) -> list[Path]:
    """Make twin NAME's cgroups (see CGROUP_PARENT); those that could be made."""
    made = []
    for d in _cgroup_dirs(name):
        try:
            d.mkdir(parents=True, exist_ok=True)
            made.append(d)
        except OSError as exc:
            progress(f"twin {name} shares its cgroup with other twins: cannot make {d}: {exc}")
    return made


def _remove_cgroups(name: str) -> None:
    """Remove twin NAME's cgroups, deepest first (each is empty once its processes are
    gone; one that is not stays)."""
    for top in _cgroup_dirs(name):
        if not top.is_dir():
            continue
        for path, _dirs, _files in os.walk(top, topdown=False):
            try:
                os.rmdir(path)
            except OSError:
                pass


def _start_supervisor(twin: Twin, progress=print) -> None:
    nspawn = [
        "systemd-nspawn",
        "-D",
        str(twin.merged),
        "-M",
        twin.name,
        f"--hostname={fixtures.FLAKE_HOST}",
        "--register=no",
        "--keep-unit",
        "-b",
        "--console=read-only",
    ]
    pidfile = shlex.quote(str(twin.dir / "nspawn.pid"))
    script = (
        "#!/bin/sh\n"
        f"# remedy twin supervisor for {twin.name}: boots the container again after a reboot\n"
        "export SYSTEMD_NSPAWN_API_VFS_WRITABLE=1\n"
        + "".join(
            f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))} || "
            f"echo 'remedy: this twin shares its cgroup with other twins' >&2\n"
            for d in _own_cgroups(twin.name, progress)
        )
        + "while :; do\n"
        f"  {shlex.join(nspawn)} &\n"
        f"  echo $! > {pidfile}\n"
        "  wait $!\n"
        "  rc=$?\n"
        '  [ "$rc" -eq 133 ] || break\n'
        "done\n"
        f"rm -f {pidfile}\n"
        'exit "$rc"\n'
    )
    path = twin.dir / "supervise.sh"
    path.write_text(script)
    path.chmod(0o755)
    (twin.dir / "nspawn.pid").unlink(missing_ok=True)
    log = open(twin.dir / "console.log", "ab")
    proc = subprocess.Popen(
        ["/bin/sh", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd="/",
    )
    (twin.dir / "supervisor.pid").write_text(f"{proc.pid}\n")


def _wait(what: str, twin: Twin, check, timeout: float = BOOT_TIMEOUT, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if not twin.running:
            raise TwinError(
                f"twin {twin.name} stopped while waiting for {what}; see {twin.dir / 'console.log'}"
            )
        if time.monotonic() > deadline:
            raise TwinError(
                f"twin {twin.name}: timed out after {timeout:.0f}s waiting for "
                f"{what}; see {twin.dir / 'console.log'}"
            )
        time.sleep(interval)


def _system_up(twin: Twin) -> bool:
    if twin.init_pid() is None:
        return False
    try:
        state = twin.exec(["systemctl", "is-system-running"], check=False, timeout=10).stdout
    except (TwinError, subprocess.TimeoutExpired):
        return False
    return state.strip() in ("running", "degraded")


def _ssh_up(twin: Twin) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", twin.ssh_port), timeout=1) as s:
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def server_health(twin: Twin) -> int | None:
    try:
        with urllib.request.urlopen(twin.server_url + "/health", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def wait_serving(twin: Twin, timeout: float = BOOT_TIMEOUT) -> None:
    _wait("systemd to finish booting", twin, lambda: _system_up(twin), timeout)
    _wait("sshd", twin, lambda: _ssh_up(twin), timeout)
    _wait("the model server's /health", twin, lambda: server_health(twin) == 200, timeout)


def wait_booted(twin: Twin, timeout: float = BOOT_TIMEOUT) -> None:
    """Until the twin is ready for its role: a serving twin serves (``wait_serving``); a
    builder, which serves nothing, answers on SSH."""
    if twin.role != "builder":
        wait_serving(twin, timeout)
        return
    _wait("systemd to finish booting", twin, lambda: _system_up(twin), timeout)
    _wait("sshd", twin, lambda: _ssh_up(twin), timeout)


def up(
    name: str = fixtures.FLAKE_HOST,
    *,
    suite: str | None = None,
    with_emergency_override: bool = False,
    role: str = "serving",
    builder_git: bool = False,
    builder_signs: bool = True,
    progress=print,
) -> Twin:
    """Boot twin NAME on a SUITE base (default ``rootfs.default_suite()``: the
    ``REMEDY_TWIN_SUITE`` environment variable, else trixie), as ROLE: "serving" (wait
    until the model server answers) or "builder" (wait for SSH; then the model server
    masked and ``BUILDER_USER`` made, see ``make_builder``). A builder has no git unless
    BUILDER_GIT, as a stock NixOS, and signs what it builds unless not BUILDER_SIGNS."""
    validate_name(name)
    if role not in ROLES:
        raise TwinError(f"twin role {role!r}: expected one of {', '.join(ROLES)}.")
    if role == "builder" and with_emergency_override:
        raise TwinError(
            f"twin {name}: a builder serves nothing, so it takes no emergency override."
        )
    suite = rootfs.check_suite(suite or rootfs.default_suite())
    base = rootfs.ensure_base(suite, progress)
    with _state_lock():
        try:
            twin = load(name)
        except TwinError:
            twin = _allocate(name, base, suite, role, builder_git, builder_signs)
        if twin.suite != suite:
            raise TwinError(
                f"twin {name} runs {twin.suite}, not {suite}; take it down first "
                f"(`remedy twin down --name {name}`)."
            )
        if twin.role != role:
            raise TwinError(
                f"twin {name} is {'up' if twin.running else 'made'} as a {twin.role} twin, "
                f"not a {role} one; take it down first (`remedy twin down --name {name}`)."
            )
        if twin.running:
            progress(f"twin {name} is already up")
            if role == "builder":  # finish a set-up that an earlier `up` left half done
                make_builder(twin, progress)
            return twin
        if twin.base != str(base):
            raise TwinError(
                f"twin {name} was made from an older base; take it down first "
                f"(`remedy twin down --name {name}`)."
            )
        _mount_overlay(twin)
        if not (twin.dir / "personalised").exists():
            _personalise(twin, progress)
        serves = f"server {twin.server_url}" if role == "serving" else "a builder"
        progress(f"booting twin {name} ({suite}; ssh 127.0.0.1:{twin.ssh_port}, {serves})")
        raise_inotify_limits(progress)
        _start_supervisor(twin, progress)
    wait_booted(twin)
    if role == "builder":
        make_builder(twin, progress)
    if with_emergency_override:
        apply_emergency_override(twin)
    return twin


SAFE_TT_STACK = f"\tdirectory = {fixtures.TT_STACK_DIR}"
# Where a builder twin without git keeps the base's git (out of every PATH).
GIT_ABSENT = "/usr/lib/remedy-twin-git-absent"
# A builder twin's signing key pair (nix-store --generate-binary-cache-key), as a real
# builder's nix.conf names it in secret-key-files (Nix 2.26.3, 42fc03dd:
# src/libstore/globals.hh lines 773-781; the daemon signs each built output with it,
# LocalStore::signPathInfo, src/libstore/local-store.cc lines 1603-1614).
SIGNING_KEY = "/etc/nix/remedy-builder.sk"
SIGNING_PUB = "/etc/nix/remedy-builder.pk"
NIX_CONF = "/etc/nix/nix.conf"


def make_builder(twin: Twin, progress=print) -> None:
    """Make booted twin TWIN a builder, idempotently: the model server masked and stopped
    (a builder serves nothing), and the unprivileged user BUILDER_USER (in nix-users: it
    talks to the nix-daemon) with an empty ~/.ssh for the serving hosts' keys."""
    enabled = twin.exec(["systemctl", "is-enabled", SERVING_UNIT], check=False).stdout.strip()
    if enabled == "masked":
        progress(f"twin {twin.name}: {SERVING_UNIT} is masked already")
    else:
        progress(f"twin {twin.name}: masking {SERVING_UNIT} (was {enabled or 'unknown'})")
        # The unit is a link into /etc/static, as NixOS links its units, and `systemctl
        # mask` refuses to replace it ("already exists and is a symlink"): remove it and
        # its wants link first. A real builder has no such unit at all.
        units = "/etc/systemd/system"
        twin.exec(
            ["rm", "-f", f"{units}/{SERVING_UNIT}",
             f"{units}/multi-user.target.wants/{SERVING_UNIT}"],
        )  # fmt: skip
        twin.exec(["systemctl", "mask", "--now", SERVING_UNIT])
    user = BUILDER_USER
    if twin.exec(["id", "-u", user], check=False).returncode == 0:
        progress(f"twin {twin.name}: user {user} exists already")
    else:
        progress(f"twin {twin.name}: adding user {user} (in nix-users)")
        twin.exec(
            ["useradd", "--create-home", "--user-group", "--groups", "nix-users",
             "--shell", "/bin/sh", user],
        )  # fmt: skip
    _ensure_dir(twin, f"/home/{user}/.ssh", "700", user)
    # The flake's tt-stack input is git+file:///srv/git/tt-stack, a repository of the
    # admin account: git and libgit2 refuse another user's repository unless it is a
    # safe.directory (production's input is a URL the builder fetches; nothing to trust).
    gitconfig = f"/home/{user}/.gitconfig"
    if (text := with_line(_read(twin, gitconfig), SAFE_TT_STACK)) is not None:
        progress(f"twin {twin.name}: {user} trusts {fixtures.TT_STACK_DIR} (safe.directory)")
        if not text.startswith("[safe]"):
            text = "[safe]\n" + text.replace("[safe]\n", "")
        twin.exec(["install", "-m", "644", "-o", user, "-g", user, "/dev/stdin", gitconfig],
                  input=text)  # fmt: skip
    _builder_git(twin, progress)
    if twin.signs:
        _builder_signs(twin, progress)


def _builder_git(twin: Twin, progress=print) -> None:
    """A builder twin without git (twin.git false), as a stock NixOS builder: the base's
    /usr/bin/git moved out of every PATH; with git, put back."""
    has = twin.exec(["test", "-e", "/usr/bin/git"], check=False).returncode == 0
    if has and not twin.git:
        progress(f"twin {twin.name}: no git (as a stock NixOS builder)")
        twin.exec(["mv", "/usr/bin/git", GIT_ABSENT])
    elif not has and twin.git:
        progress(f"twin {twin.name}: git put back")
        twin.exec(["mv", GIT_ABSENT, "/usr/bin/git"])


def set_nix_conf_line(twin: Twin, line: str, progress=print) -> bool:
    """LINE once in TWIN's nix.conf (written whole, mode 0644), its nix-daemon restarted
    to read it; False when it was there already."""
    text = with_line(_read(twin, NIX_CONF), line)
    if text is None:
        return False
    progress(f"twin {twin.name}: {line} in {NIX_CONF}")
    twin.exec(["sh", "-c", 'cat > "$1.new" && chmod 0644 "$1.new" && mv "$1.new" "$1"',
               "sh", NIX_CONF], input=text)  # fmt: skip
    twin.exec(["systemctl", "restart", "nix-daemon.service"], check=False)
    return True


def _builder_signs(twin: Twin, progress=print) -> None:
    """The builder's nix-daemon signs what it builds: a key pair named after the twin,
    the secret half in secret-key-files (0600, root's: the daemon reads it)."""
    if twin.exec(["test", "-e", SIGNING_PUB], check=False).returncode != 0:
        progress(f"twin {twin.name}: a signing key {SIGNING_KEY} ({twin.name}-1)")
        twin.exec(["sh", "-c", 'umask 077 && nix-store --generate-binary-cache-key "$1" '
                   '"$2" "$3" && chmod 0644 "$3"', "sh", f"{twin.name}-1", SIGNING_KEY,
                   SIGNING_PUB])  # fmt: skip
    set_nix_conf_line(twin, f"secret-key-files = {SIGNING_KEY}", progress)


def builder_public_key(builder: Twin) -> str | None:
    """The public key a signing builder twin signs with (NAME:BASE64), None if it does
    not sign."""
    if not builder.signs:
        return None
    return builder.exec(["cat", SIGNING_PUB]).stdout.strip()


def _ensure_dir(twin: Twin, path: str, mode: str, owner: str) -> None:
    """PATH a directory of OWNER (and OWNER's group) with MODE (octal, as stat prints it)
    inside TWIN; changed only if it is not."""
    now = twin.exec(["stat", "-c", "%a %U %G", path], check=False).stdout.split()
    if now != [mode, owner, owner]:
        twin.exec(["install", "-d", "-m", mode, "-o", owner, "-g", owner, path])


def _read(twin: Twin, path: str) -> str | None:
    """The text of PATH inside TWIN, None if it is not there."""
    if twin.exec(["test", "-e", path], check=False).returncode != 0:
        return None
    return twin.exec(["cat", path]).stdout


def with_line(text: str | None, line: str) -> str | None:
    """TEXT (a file's, None: no file) with LINE as one of its lines, added at the end;
    None when it is there already (nothing to write)."""
    lines = (text or "").splitlines()
    if line in lines:
        return None
    return "".join(f"{ln}\n" for ln in [*lines, line])


def with_known_host(text: str | None, host: str, key: str) -> tuple[str | None, list[str]]:
    """known_hosts TEXT with the entry ``HOST KEY`` (KEY: "<type> <base64>"), and the
    entries it replaces: other keys of the same type for exactly HOST (a builder twin
    taken down and brought up again on the same port has a new host key). The new text
    is None when the entry is there already and nothing is replaced."""
    keytype = key.split()[0]
    kept, dropped = [], []
    for ln in (text or "").splitlines():
        parts = ln.split()
        if len(parts) >= 3 and parts[0] == host and parts[1] == keytype:
            if " ".join(parts[1:3]) == key:
                kept.append(ln)
            else:
                dropped.append(ln)
            continue
        kept.append(ln)
    entry = f"{host} {key}"
    if any(ln.split()[:3] == entry.split() for ln in kept):
        return (None if not dropped else "".join(f"{ln}\n" for ln in kept)), dropped
    return "".join(f"{ln}\n" for ln in [*kept, entry]), dropped


def pair_builder(serving: Twin, builder: Twin, progress=print, trust: bool = True) -> None:
    """Let root of twin SERVING log in to builder twin BUILDER as BUILDER_USER, as a
    serving host reaches its builder; idempotent. In SERVING, root's key BUILDER_KEY
    (ed25519, no passphrase; made if absent); its public half once in the builder user's
    authorized_keys; the builder's host key once in root's known_hosts, as
    ``[127.0.0.1]:PORT`` (twins share this machine's network namespace). A builder that
    signs: its public key in SERVING's nix.conf (extra-trusted-public-keys), unless not
    TRUST."""
    if serving.role != "serving" or builder.role != "builder":
        raise TwinError(
            f"pairing twin {serving.name} ({serving.role}) with twin {builder.name} "
            f"({builder.role}): the first must be a serving twin, the second a builder "
            f"(`remedy twin up --name {builder.name} --role builder`)."
        )
    for t in (serving, builder):
        if t.init_pid() is None:
            raise TwinError(
                f"twin {t.name} is not up; start it with `remedy twin up --name {t.name}"
                f"{' --role builder' if t.role == 'builder' else ''}`."
            )
    pair = f"twins {serving.name} -> {builder.name}"
    if serving.exec(["test", "-e", BUILDER_KEY], check=False).returncode != 0:
        progress(f"{pair}: root's key {BUILDER_KEY} in {serving.name}")
        serving.exec(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "",
             "-C", f"root@{serving.name} for builder twins", "-f", BUILDER_KEY],
        )  # fmt: skip
    pub_path = BUILDER_KEY + ".pub"
    if serving.exec(["test", "-e", pub_path], check=False).returncode != 0:
        pub = serving.exec(["ssh-keygen", "-y", "-f", BUILDER_KEY]).stdout
        serving.exec(["install", "-m", "0644", "/dev/stdin", pub_path], input=pub)
    pub = serving.exec(["cat", pub_path]).stdout.strip()

    user = BUILDER_USER
    ssh_dir = f"/home/{user}/.ssh"
    _ensure_dir(builder, ssh_dir, "700", user)
    auth = f"{ssh_dir}/authorized_keys"
    new = with_line(_read(builder, auth), pub)
    if new is None:
        progress(f"{pair}: the key is in {builder.name}'s {auth} already")
    else:
        progress(f"{pair}: adding root's key to {builder.name}'s {auth}")
        builder.exec(["install", "-m", "0600", "-o", user, "-g", user, "/dev/stdin", auth],
                     input=new)  # fmt: skip
    mode = builder.exec(["stat", "-c", "%a %U", auth]).stdout.split()
    if mode != ["600", user]:
        builder.exec(["chown", f"{user}:{user}", auth])
        builder.exec(["chmod", "0600", auth])

    public = builder_public_key(builder)
    if public and trust:
        set_nix_conf_line(serving, f"extra-trusted-public-keys = {public}", progress)

    host_key = builder.exec(["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.split()
    host = f"[127.0.0.1]:{builder.ssh_port}"
    known = "/root/.ssh/known_hosts"
    new, dropped = with_known_host(_read(serving, known), host, " ".join(host_key[:2]))
    if new is None:
        progress(f"{pair}: {builder.name}'s host key is in {serving.name}'s {known} already")
        return
    if dropped:
        progress(f"{pair}: replacing {len(dropped)} older host key(s) of {host} in {known}")
    progress(f"{pair}: adding {builder.name}'s host key to {serving.name}'s {known}")
    serving.exec(["install", "-D", "-m", "0644", "/dev/stdin", known], input=new)


def apply_emergency_override(twin: Twin) -> None:
    """Put the twin into the seed's state: the hand-made /run override, serving."""
    script, dropin = fixtures.emergency_override(flags_script(twin))
    twin.exec(
        ["install", "-D", "-m", "0755", "/dev/stdin", "/run/tt-serving-override/start"],
        input=script,
    )
    twin.exec(
        [
            "install",
            "-D",
            "-m",
            "0644",
            "/dev/stdin",
            "/run/systemd/system/tenstorrent-serving.service.d/override.conf",
        ],
        input=dropin,
    )
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", "tenstorrent-serving.service"])
    _wait("the model server after the override", twin, lambda: server_health(twin) == 200)


def commit_as_owner(twin: Twin, repo: str, commit: fixtures.Commit) -> str:
    """Write COMMIT's files into the git repo REPO inside the twin and commit them, all
    as the repos' owner (no root-owned file left behind); returns the new commit id."""
    owner = fixtures.OWNER
    for rel, text in commit.files.items():
        path = f"{repo.rstrip('/')}/{rel}"
        twin.exec(["mkdir", "-p", path.rsplit("/", 1)[0]], user=owner)
        twin.exec(["tee", path], input=text, user=owner)
    twin.exec(["git", "-C", repo, "add", "-A"], user=owner)
    sign = (
        ["-c", "gpg.format=ssh", "-c", f"user.signingkey={commit.signed_by}"]
        if commit.signed_by
        else []
    )
    twin.exec(
        [
            "env",
            f"GIT_AUTHOR_DATE={commit.date}",
            f"GIT_COMMITTER_DATE={commit.date}",
            "git",
            "-C",
            repo,
            *sign,
            "commit",
            "-q",
            *(["-S"] if sign else []),
            "-m",
            commit.message,
        ],
        user=owner,
    )
    return twin.exec(["git", "-C", repo, "rev-parse", "HEAD"], user=owner).stdout.strip()


def flags_script(twin: Twin, system: str = "/run/current-system") -> str:
    """The text of the store script holding the vLLM flags in SYSTEM: the script the
    unit's ExecStart (the unit script) execs."""
    unit = twin.exec(["cat", f"{system}/etc/systemd/system/tenstorrent-serving.service"]).stdout
    text = twin.exec(["cat", fixtures.exec_start_path(unit)]).stdout
    target = fixtures.exec_target(text)
    return twin.exec(["cat", target]).stdout if target else text


# -- reboot / down ------------------------------------------------------------


def reboot(name: str, progress=print, serving: bool = True) -> Twin:
    """Reboot twin NAME from inside (``systemctl reboot``) and wait until it is back: its
    model server answers, or (not SERVING: a boot whose server is expected to fail)
    systemd finished booting and sshd answers."""
    twin = load(name)
    if not twin.running or twin.init_pid() is None:
        raise TwinError(
            f"twin {name} is not running; start it with `remedy twin up --name {name}`."
        )
    old = twin.nspawn_pid
    progress(f"rebooting twin {name}")
    twin.exec(["systemctl", "reboot"], check=False)
    _wait_for_reboot(twin, old)
    wait_back(twin, serving)
    return twin


def wait_back(twin: Twin, serving: bool = True) -> None:
    """After a reboot: as ``wait_booted``, or without the model server (not SERVING)."""
    if serving:
        wait_booted(twin)
        return
    _wait("systemd to finish booting", twin, lambda: _system_up(twin))
    _wait("sshd", twin, lambda: _ssh_up(twin))


def wait_rebooted(twin: Twin, old_nspawn: int | None, serving: bool = True) -> None:
    """Until a reboot begun from inside by something else (a program that ran
    ``systemctl reboot``) has booted the twin again; OLD_NSPAWN: its nspawn before."""
    _wait_for_reboot(twin, old_nspawn)
    wait_back(twin, serving)


REBOOT_START_S = 30  # for systemd to begin stopping after `systemctl reboot`
REBOOT_MAX_S = 600  # for the whole shutdown, however busy the machine


def _wait_for_reboot(twin: Twin, old_nspawn: int | None) -> None:
    """Until the container booted again (a new nspawn), following what its systemd does:
    a shutdown that is under way ("stopping") is waited for, however long a unit takes
    to stop on a busy machine; one that never began is an error after REBOOT_START_S."""
    started = time.monotonic()
    while True:
        if twin.nspawn_pid not in (None, old_nspawn):
            return
        if not twin.running:
            raise TwinError(f"twin {twin.name} stopped during its reboot; see console.log")
        elapsed = time.monotonic() - started
        if elapsed > REBOOT_MAX_S:
            raise TwinError(f"twin {twin.name}: its shutdown took over {REBOOT_MAX_S}s")
        if elapsed > REBOOT_START_S and _system_state(twin) in ("running", "degraded"):
            raise TwinError(
                f"twin {twin.name}: systemd did not begin the reboot within "
                f"{REBOOT_START_S}s (still {_system_state(twin)}); see console.log"
            )
        time.sleep(0.2)


def _system_state(twin: Twin) -> str:
    """The container's `systemctl is-system-running`, read through nsenter (no SSH: sshd
    is stopped early in a shutdown); "" when it cannot be read (gone, or going)."""
    pid = twin.init_pid()
    if pid is None:
        return ""
    try:
        proc = subprocess.run(
            ["nsenter", "-t", str(pid), "-a", "systemctl", "is-system-running"],
            capture_output=True, text=True, timeout=5,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip()


@dataclass(frozen=True)
class Leftover:
    """A process of a twin that no running supervisor accounts for."""

    name: str  # the twin it belongs to
    pid: int
    kind: str  # "nspawn", or "init": the systemd (PID 1) of a twin's PID namespace


def _twin_processes() -> list[Leftover]:
    """Every nspawn of a twin and every init of a twin's PID namespace on this machine,
    found from /proc: nspawn by its -D under the state root, an init by the overlay its
    mount namespace has at / (a twin's upperdir), whatever is left of the twin's state."""
    root = str(state_root())
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"systemd-nspawn") and b"-M" in argv and b"-D" in argv:
                where = argv[argv.index(b"-D") + 1].decode(errors="replace")
                if where.startswith(root + "/"):
                    out.append(Leftover(argv[argv.index(b"-M") + 1].decode(), pid, "nspawn"))
                continue
            status = Path(f"/proc/{pid}/status").read_text()
            nspid = next(ln for ln in status.splitlines() if ln.startswith("NSpid:")).split()[1:]
            if len(nspid) < 2 or nspid[-1] != "1":
                continue
            # a PID namespace's init: whose? Its root ("/" seen from its own mounts) is
            # a twin's overlay, upperdir=<state root>/<name>/upper
            mounts = Path(f"/proc/{pid}/mountinfo").read_text()
        except (OSError, StopIteration, ValueError):
            continue
        m = re.search(r"^\S+ \S+ \S+ \S+ / .* - overlay \S+ \S*upperdir=([^,\s]+)", mounts, re.M)
        if m and m.group(1).startswith(root + "/"):
            out.append(Leftover(m.group(1)[len(root) + 1 :].split("/", 1)[0], pid, "init"))
    return out


def leftovers() -> list[Leftover]:
    """Twin processes whose twin is gone or not running (a failed `up`, a supervisor
    killed, a state directory removed): each holds inotify instances and ports."""
    running = {t.name for t in running_twins()}
    return [p for p in _twin_processes() if p.name not in running]


def _kill_twin_processes(name: str) -> None:
    """SIGKILL what is left of twin NAME: its init first (the kernel then kills every
    process of that PID namespace), then nspawn; wait until they are gone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        procs = sorted(
            (p for p in _twin_processes() if p.name == name), key=lambda p: p.kind != "init"
        )
        if not procs:
            return
        for p in procs:
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def _unmount_all(under: Path) -> None:
    """Every mount at or below UNDER, deepest first; lazily if busy."""
    for _ in range(20):
        mounts = sorted(
            (m for m in _mounts() if m == str(under) or m.startswith(str(under) + "/")),
            key=len,
            reverse=True,
        )
        if not mounts:
            return
        for m in mounts:
            if subprocess.run(["umount", m], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", m], capture_output=True)
        time.sleep(0.1)


def _mounts() -> list[str]:
    with open("/proc/self/mounts") as fh:
        return [ln.split()[1].replace("\\040", " ") for ln in fh if len(ln.split()) > 1]


def down(name: str, progress=print) -> None:
    """Power twin NAME off and remove it: no nspawn, no process of its namespaces, no
    mount and no state left, also when its state directory is partly gone."""
    validate_name(name)
    try:
        twin: Twin | None = load(name)
    except TwinError:
        twin = None
        if (
            not any(p.name == name for p in _twin_processes())
            and not (state_root() / name).exists()
        ):
            raise
    if twin is not None and twin.running:
        progress(f"powering off twin {name}")
        if twin.init_pid() is not None:
            try:
                twin.exec(["systemctl", "poweroff"], check=False, timeout=10)
            except (TwinError, subprocess.TimeoutExpired):
                pass
        deadline = time.monotonic() + 30
        while twin.running and time.monotonic() < deadline:
            time.sleep(0.2)
        init = twin.init_pid()
        if init is not None:  # before its nspawn: killing nspawn alone orphans the init
            try:
                os.kill(init, signal.SIGKILL)
            except ProcessLookupError:
                pass
        sup = twin.supervisor_pid
        if sup is not None:
            try:
                os.killpg(sup, signal.SIGKILL)
            except ProcessLookupError:
                pass
    elif twin is None:
        progress(f"removing what is left of twin {name}")
    _kill_twin_processes(name)
    _remove_cgroups(name)
    _unmount_all(state_root() / name)
    shutil.rmtree(state_root() / name, ignore_errors=True)


def inventory_hosts() -> list[tuple[str, dict]]:
    """(name, data) for every twin that is up: what ``inventory/twin.py`` targets."""
    return [(t.name, t.inventory_data()) for t in running_twins()]
