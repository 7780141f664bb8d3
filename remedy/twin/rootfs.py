"""The twin's root filesystem: a cached Debian base, provisioned as cfx-llm2.

Two cached layers under the cache directory (``REMEDY_TWIN_CACHE``, default
``/var/cache/remedy/twin``), each built into a temporary directory and renamed
into place only when complete, so a killed build never leaves a half cache:

* ``debootstrap-<suite>-<hash>``: Debian minbase (``trixie``: Nix 2.26, the
  default; ``bookworm``: Nix 2.8) with systemd, sshd, Nix and its daemon, and
  git (about a minute; depends only on the suite and the package list).
* ``base-<suite>-<hash>``: that, plus the model-server double, the twin's
  ``nixos-rebuild``, the fixture ``tt-stack`` repo and the ``nixos-llm``
  checkout at ``/etc/nixos``, with generation 1 built (port 8000).

Per-twin copies are overlayfs mounts over ``base-<suite>-<hash>`` (see
``machine``). A missing or removed cache is rebuilt, never an error.

Production's traps, reproduced here: ``/etc/nixos`` and ``/srv/git/tt-stack``
belong to ``ops`` (uid 1000, group ops, in ``nix-users``) and root has no git
config (git and libgit2 refuse them to root); ``nix.conf`` does not enable flakes
(callers pass ``FLAKE_FLAGS``); ``nix-daemon.socket`` (Debian's
``nix-setup-systemd``) serves ``ops``; ``/boot`` is a plain directory that
``switch-to-configuration`` writes boot entries into.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from importlib import resources
from pathlib import Path

from remedy.errors import TwinError
from remedy.twin import fixtures

SUITES = ("trixie", "bookworm")
DEFAULT_SUITE = "trixie"
PACKAGES = [
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "iproute2",
    "nix-bin",
    "nix-setup-systemd",
    "libdbi-perl",
    "git",
    "curl",
    "procps",
    "util-linux",
]
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Bump when the provisioning below changes in a way the file hashes don't show.
PROVISION_VERSION = "7"

# As on a NixOS host that never enabled them: no experimental-features here, so a bare
# `nix flake ...` fails and every caller passes FLAKE_FLAGS itself (nixos-rebuild does).
# Read by the nix-daemon too: sandbox must be set here, a non-trusted user's
# NIX_CONFIG sandbox is ignored. No flake-registry setting: Nix 2.26 warns about it on
# every call while flakes are off, and the fixture flakes use direct git+file URLs.
NIX_CONF = """sandbox = false
substituters =
build-users-group =
"""
FLAKE_FLAGS = ["--extra-experimental-features", "nix-command flakes"]
# The owner's git identity (root has none, as in production).
OWNER_GITCONFIG = "[user]\n\tname = ops (cfx-llm2)\n\temail = ops@cfx-llm2\n"

SSHD_CONF = """# remedy twin: root by key only, on the twin's own port (written per twin)
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

GIT_ENV_BASE = {
    "GIT_AUTHOR_NAME": "tt-stack maintainers",
    "GIT_AUTHOR_EMAIL": "maintainers@tt-stack.invalid",
    "GIT_COMMITTER_NAME": "tt-stack maintainers",
    "GIT_COMMITTER_EMAIL": "maintainers@tt-stack.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def cache_dir() -> Path:
    return Path(os.environ.get("REMEDY_TWIN_CACHE", "/var/cache/remedy/twin"))


def _files() -> dict[str, bytes]:
    root = resources.files("remedy.twin") / "files"
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}


def _hash(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big") + part)
    return h.hexdigest()[:12]


def default_suite() -> str:
    """The suite a twin gets unless told: ``REMEDY_TWIN_SUITE``, else trixie."""
    return check_suite(os.environ.get("REMEDY_TWIN_SUITE") or DEFAULT_SUITE)


def check_suite(suite: str) -> str:
    if suite not in SUITES:
        raise TwinError(
            f"unknown twin suite {suite!r}: use one of {', '.join(SUITES)} "
            "(REMEDY_TWIN_SUITE or `remedy twin up --suite`)."
        )
    return suite


def debootstrap_key(suite: str) -> str:
    return _hash(check_suite(suite).encode(), " ".join(PACKAGES).encode())


def base_key(suite: str) -> str:
    files = _files()
    fixture_src = (resources.files("remedy.twin") / "fixtures.py").read_bytes()
    parts = [
        debootstrap_key(suite).encode(),
        PROVISION_VERSION.encode(),
        fixture_src,
        NIX_CONF.encode(),
        SSHD_CONF.encode(),
    ]
    parts += [name.encode() + b"\0" + files[name] for name in sorted(files)]
    return _hash(*parts)


def check_prerequisites() -> None:
    """Fail with one clear sentence if this machine cannot run twins."""
    if os.geteuid() != 0:
        raise TwinError(
            "the twin needs root (systemd-nspawn, overlay mounts): run as root, e.g. with sudo."
        )
    for tool, package in (
        ("systemd-nspawn", "systemd-container"),
        ("nsenter", "util-linux"),
        ("ssh-keygen", "openssh-client"),
    ):
        if shutil.which(tool) is None:
            raise TwinError(f"{tool} is not installed: run `apt-get install {package}`.")


def mirror() -> str:
    """The Debian mirror apt already uses here (deb822 or one-line sources)."""
    candidates = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for path in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+)", text, re.MULTILINE) or re.search(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(?:" + "|".join(SUITES) + r")\s", text, re.MULTILINE
        )
        if m:
            return m.group(1).rstrip("/")
    return DEFAULT_MIRROR


def _check_mirror(url: str, suite: str = DEFAULT_SUITE) -> None:
    release = f"{url}/dists/{suite}/Release"
    try:
        with urllib.request.urlopen(urllib.request.Request(release, method="HEAD"), timeout=15):
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise TwinError(
            f"cannot reach the Debian mirror {url} ({exc}); the first twin build needs it "
            f"for debootstrap: restore network access to it, or set REMEDY_TWIN_CACHE to a "
            f"directory holding a built cache."
        ) from exc


def _run(argv: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise TwinError(f"{what} failed (exit {proc.returncode}): " + " ".join(argv), causes=tail)
    return proc


def _build_atomically(final: Path, build) -> Path:
    """FINAL, built by BUILD into a temporary directory and renamed into place once
    complete. Builders of the same FINAL (test workers on a cold cache, two first
    `remedy twin up`s) take turns on a lock beside it: the one that waited finds it
    complete. A temporary directory is stale only when no builder holds the lock."""
    if (final / ".complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.with_name(final.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or we die)
        if (final / ".complete").exists():  # built while this one waited
            return final
        tmp = final.with_name(final.name + f".tmp-{os.getpid()}")
        for stale in final.parent.glob(final.name + ".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a dead builder's (we hold the lock)
        if final.exists():  # an incomplete leftover
            shutil.rmtree(final)
        try:
            build(tmp)
            (tmp / ".complete").write_text("ok\n")
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def ensure_debootstrap(suite: str, progress=print) -> Path:
    final = cache_dir() / f"debootstrap-{suite}-{debootstrap_key(suite)}"

    def build(tmp: Path) -> None:
        if shutil.which("debootstrap") is None:
            raise TwinError("debootstrap is not installed: run `apt-get install debootstrap`.")
        url = mirror()
        _check_mirror(url, suite)
        progress(f"debootstrap {suite} from {url} (about a minute)")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=" + ",".join(PACKAGES),
                suite,
                str(tmp),
                url,
            ],
            "debootstrap",
        )

    return _build_atomically(final, build)


def nspawn_run(root: Path, argv: list[str], what: str, env: dict[str, str] | None = None):
    """Run one command in ROOT as a container without booting it."""
    cmd = ["systemd-nspawn", "-q", "-D", str(root), "--register=no", "--keep-unit", "--pipe"]
    for key, value in (env or {}).items():
        cmd.append(f"--setenv={key}={value}")
    return _run(cmd + argv, what, stdin=subprocess.DEVNULL)


def _write(path: Path, content: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    path.chmod(mode)


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = dict(os.environ, **GIT_ENV_BASE)
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return _run(["git", "-C", str(repo), *args], "git " + args[0], env=env).stdout.strip()


def write_commit(repo: Path, commit: fixtures.Commit, root: Path | None = None) -> str:
    """COMMIT in REPO, SSH-signed when it says so (its key under ROOT, the rootfs)."""
    for rel, text in commit.files.items():
        _write(repo / rel, text)
    _git(repo, "add", "-A")
    sign = []
    if commit.signed_by:
        key = (root or Path("/")) / commit.signed_by.lstrip("/")
        sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"]
    _git(repo, *sign, "commit", "-q", *(["-S"] if sign else []), "-m", commit.message,
         date=commit.date)  # fmt: skip
    return _git(repo, "rev-parse", "HEAD")


def _signing_keys(root: Path) -> None:
    """The maintainers' and a stranger's SSH signing keys (fixtures.SIGNING_KEYS_DIR)."""
    keys = root / fixtures.SIGNING_KEYS_DIR.lstrip("/")
    keys.mkdir(parents=True, exist_ok=True)
    for path, comment in ((fixtures.MAINTAINER_KEY, "tt-stack maintainers"),
                          (fixtures.STRANGER_KEY, "a stranger")):  # fmt: skip
        key = root / path.lstrip("/")
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
             "ssh-keygen")  # fmt: skip


def _owned_by_owner(root: Path, *paths: str) -> None:
    """chown -R the person's repos to them: no root-owned file may stay inside."""
    owner = f"{fixtures.OWNER_UID}:{fixtures.OWNER_UID}"
    for path in paths:
        _run(["chown", "-R", "--no-dereference", owner, str(root / path.lstrip("/"))], "chown")


def provision(root: Path, progress=print) -> None:
    files = _files()
    _write(root / "usr/local/bin/vllm", files["vllm_double.py"], 0o755)
    _write(root / "usr/local/sbin/nixos-rebuild", files["nixos-rebuild"], 0o755)
    _write(
        root / "usr/local/lib/nixos-twin/switch-to-configuration",
        files["switch-to-configuration"],
        0o755,
    )
    _write(
        root / "etc/systemd/system-generators/nixos-twin-boot",
        files["nixos-twin-boot-generator"],
        0o755,
    )
    _write(root / "usr/local/lib/nixos-twin/twin-kernel", files["twin-kernel"], 0o755)
    # systemd's bootctl for the verbs remedy uses (NixOS has it in the system's path)
    _write(root / "usr/local/bin/bootctl", files["bootctl"], 0o755)
    for unit in ("twin-kernel.service", "twin-hugepages.path", "twin-hugepages.service"):
        _write(root / "etc/systemd/system" / unit, files[unit])
    for wants, unit in (("sysinit", "twin-kernel.service"), ("multi-user", "twin-hugepages.path")):
        (root / f"etc/systemd/system/{wants}.target.wants").mkdir(parents=True, exist_ok=True)
        (root / f"etc/systemd/system/{wants}.target.wants/{unit}").symlink_to(f"../{unit}")
    _write(root / "etc/nix/nix.conf", NIX_CONF)
    _write(root / "etc/ssh/sshd_config.d/10-remedy-twin.conf", SSHD_CONF)
    (root / "root/.gitconfig").unlink(missing_ok=True)  # no identity, nothing marked safe
    (root / "boot").mkdir(exist_ok=True)  # a plain writable directory; entries go under it
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # every twin gets its own host keys
    for unit in ("console-getty.service", "getty@.service", "systemd-networkd-wait-online.service"):
        (root / "etc/systemd/system" / unit).unlink(missing_ok=True)
        (root / "etc/systemd/system" / unit).symlink_to("/dev/null")
    # /etc/static follows the running generation (the boot generator and the switch set
    # /run/current-system; a generator may not write /etc on systemd 257).
    (root / "etc/static").symlink_to("/run/current-system/etc")
    units = root / "etc/systemd/system"
    (units / "tenstorrent-serving.service").symlink_to(
        "/etc/static/systemd/system/tenstorrent-serving.service"
    )
    (units / "multi-user.target.wants").mkdir(exist_ok=True)
    (units / "multi-user.target.wants/tenstorrent-serving.service").symlink_to(
        "../tenstorrent-serving.service"
    )
    (root / "etc/hostname").write_text(fixtures.FLAKE_HOST + "\n")
    # No user manager per SSH login (pam_systemd starts root's user@0.service): remedy
    # does not need one, and every twin shares this machine's inotify instances (see
    # docs/twin.md). A reboot or poweroff also waits for none.
    for pam in (root / "etc/pam.d").glob("common-session*"):
        text = pam.read_text()
        pam.write_text(re.sub(r"(?m)^(session\s+\S+\s+pam_systemd\.so.*)$", r"# \1", text))
    (units / "user@.service").symlink_to("/dev/null")

    progress(f"admin account {fixtures.OWNER} (uid {fixtures.OWNER_UID}, in nix-users)")
    nspawn_run(
        root,
        [
            "useradd",
            "--create-home",
            "--uid",
            str(fixtures.OWNER_UID),
            "--user-group",
            "--groups",
            "nix-users",
            "--shell",
            "/bin/bash",
            fixtures.OWNER,
        ],
        "useradd",
    )
    home = root / "home" / fixtures.OWNER
    _write(home / ".gitconfig", OWNER_GITCONFIG)
    os.chown(home / ".gitconfig", fixtures.OWNER_UID, fixtures.OWNER_UID)

    progress("fixture flakes: tt-stack (pre-fix, #34, #44) and nixos-llm at /etc/nixos")
    tt = root / fixtures.TT_STACK_DIR.lstrip("/")
    tt.mkdir(parents=True)
    _signing_keys(root)
    _git(tt, "init", "-q", "-b", "master")
    history = fixtures.tt_stack_history()
    write_commit(tt, history[0], root)
    nixos = root / fixtures.NIXOS_DIR.lstrip("/")
    shutil.rmtree(nixos, ignore_errors=True)
    nixos.mkdir(parents=True)
    _git(nixos, "init", "-q", "-b", "main")
    write_commit(
        nixos,
        fixtures.Commit(
            "hosts: cfx-llm2 serving Qwen3.6-27B on tt-stack",
            fixtures.nixos_llm_files(),
            "2026-08-31T09:00:00+02:00",
        ),
    )
    # Still root-owned here: root may open them. Handed to the owner below.
    nspawn_run(root, ["nix", *FLAKE_FLAGS, "flake", "lock", fixtures.NIXOS_DIR], "nix flake lock")
    _git(nixos, "add", "flake.lock")
    _git(nixos, "commit", "-q", "-m", "flake.lock: lock tt-stack", date="2026-08-31T09:05:00+02:00")
    for commit in history[1:]:
        write_commit(tt, commit, root)
    progress("building system generation 1 (tt-stack pre-fix: hermes; vllm-tt compiled)")
    nspawn_run(
        root,
        ["nixos-rebuild", "boot", "--flake", f"{fixtures.NIXOS_DIR}#{fixtures.FLAKE_HOST}"],
        "nixos-rebuild boot",
    )
    _owned_by_owner(root, fixtures.NIXOS_DIR, fixtures.TT_STACK_DIR, fixtures.SIGNING_KEYS_DIR)


def ensure_base(suite: str | None = None, progress=print) -> Path:
    """Return the provisioned base rootfs of SUITE (default: ``default_suite()``),
    building (and caching) what is missing."""
    check_prerequisites()
    suite = check_suite(suite or default_suite())
    final = cache_dir() / f"base-{suite}-{base_key(suite)}"
    if (final / ".complete").exists():
        return final
    deb = ensure_debootstrap(suite, progress)

    def build(tmp: Path) -> None:
        progress(f"copying the Debian base into {tmp.name}")
        _run(["cp", "-a", "--reflink=auto", str(deb), str(tmp)], "cp")
        (tmp / ".complete").unlink(missing_ok=True)
        provision(tmp, progress)

    return _build_atomically(final, build)
