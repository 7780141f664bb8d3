"""Remote commands as argv lists, for what runs outside the step programs
(remedy/host): the facts' nix calls, the dry run's preview of a bump, who holds
the switch, and the commands the bench, the fixture recorder (tests/facts/record.py)
and the twin tests run. Host data only ever appears as separate argv elements,
never inside a shell program.
"""

from __future__ import annotations

from remedy import host

# sed programs shared by the facts' remote snippets and the manual script.
# The command path an ExecStart= line names (prefixes - @ : + ! dropped; NixOS writes a
# trailing space after it).
EXEC_PATH_SED = r"s/^[[:space:]]*ExecStart=[-@:+!]*\([^[:space:]]\{1,\}\).*/\1/p"
# The store script a start script execs (a NixOS `script =` unit execs the real one).
EXEC_TARGET_SED = (
    r"s/^[[:space:]]*exec[[:space:]]\{1,\}\(\/nix\/store\/[^[:space:];&|]\{1,\}\).*/\1/p"
)

NIX_FEATURES = ["--extra-experimental-features", "nix-command flakes"]
SYSTEM_PROFILE = "/nix/var/nix/profiles/system"


def nix(*args: str) -> list[str]:
    """``nix`` with the flake features passed on the command line, as nixos-rebuild does:
    a host can deploy flakes without enabling them in nix.conf."""
    return ["nix", *NIX_FEATURES, *args]


def as_owner(owner: str | None, home: str | None, argv: list[str]) -> list[str]:
    """ARGV as the checkout's owner (``runuser``), with the owner's HOME so git and
    libgit2 read the owner's config and accept the owner's repo; as is for root.

    Running git and nix as the owner is what keeps a person's checkout theirs: no
    root-owned object, index or flake.lock is left behind."""
    if not owner or owner == "root":
        return argv
    # From /: the SSH session's working directory (/root) is closed to the owner, and
    # Nix 2.8's `flake lock` fails there.
    return ["runuser", "-u", owner, "--", "env", "-C", "/", f"HOME={home or '/'}", *argv]


def update_input(update_argv: list[str], flake_dir: str, flake_input: str) -> list[str]:
    """Bump one input with the command the host's Nix supports (see NixInfo)."""
    base = nix(*update_argv[1:]) if update_argv[:1] == ["nix"] else update_argv
    if update_argv[-1] == "--update-input":  # nix flake lock [FLAKE] --update-input NAME
        return [*base[:-1], flake_dir, "--update-input", flake_input]
    return [*base, flake_input, "--flake", flake_dir]  # nix flake update NAME --flake


def toplevel_attr(flake_dir: str, flake_host: str) -> str:
    return f'{flake_dir}#nixosConfigurations."{flake_host}".config.system.build.toplevel'


def build_limits(max_jobs: int, cores: int) -> list[str]:
    """Bound a build on the serving host: it shares memory with the model server."""
    return ["--max-jobs", str(max_jobs), "--cores", str(cores)]


def build_toplevel(flake_dir: str, flake_host: str, max_jobs: int = 1, cores: int = 2) -> list[str]:
    return nix(
        "build",
        "--no-link",
        "--json",
        *build_limits(max_jobs, cores),
        toplevel_attr(flake_dir, flake_host),
    )


def dry_run_toplevel(flake_dir: str, flake_host: str) -> list[str]:
    """What building the toplevel would build locally and fetch (Nix prints it on stderr)."""
    return nix("build", "--dry-run", "--no-link", toplevel_attr(flake_dir, flake_host))


# A flake output of host data flake_checks, for the bumped lock: NAME#ATTR is the output
# ATTR of the host flake's input NAME (as its flake.lock locks it), or of the host flake
# itself for self#ATTR. Constant text: the names come from the environment (--impure).
CHECK_EXPR = host.text("flake_check.nix")


def flake_check(flake_dir: str, check: str, dry: bool, max_jobs: int = 1, cores: int = 2):
    """Build (or with DRY, only plan) the flake output CHECK (``NAME#attr.path``) of the
    host flake at FLAKE_DIR, with its lock as it is there."""
    name, _, attr = check.partition("#")
    how = ["--dry-run"] if dry else ["--json", *build_limits(max_jobs, cores)]
    return [
        "env",
        f"REMEDY_FLAKE_DIR={flake_dir}",
        f"REMEDY_CHECK_INPUT={name}",
        f"REMEDY_CHECK_ATTR={attr}",
        *nix("build", "--no-link", *how, "--impure", "--expr", CHECK_EXPR),
    ]


def show_derivations(new_cli: bool, drvs: list[str]) -> list[str]:
    """The derivations as JSON (``nix derivation show`` from 2.15, ``show-derivation``
    before), to read their ``preferLocalBuild``."""
    return nix(*(["derivation", "show"] if new_cli else ["show-derivation"]), *drvs)


# What of a `nix derivation show` would compile on the serving host: one program that the
# deploy and the manual script both run, so both decide alike (remedy.core.readings.nix's
# Derivation is the same rule in Python, kept as the tests' oracle).
LOCAL_BUILDS_NIX = host.text("local_builds.nix")
# $1: LOCAL_BUILDS_NIX; the rest: the command that shows the derivations (show_derivations).
LOCAL_BUILDS_SH = host.text("local_builds.sh")


def local_builds(new_cli: bool, drvs: list[str]) -> list[str]:
    """The derivations among DRVS (a dry run's "will be built") that would compile on the
    host, one store path per line: neither a config derivation (``preferLocalBuild``)
    nor a text file of nixpkgs' ``writeTextFile`` family. Decided on the host by Nix
    itself (LOCAL_BUILDS_NIX), in every shape its ``derivation show`` has printed."""
    return ["sh", "-c", LOCAL_BUILDS_SH, "sh", LOCAL_BUILDS_NIX, *show_derivations(new_cli, drvs)]


SCRATCH_PREFIX = "/tmp/remedy-bump."


def _git_as_remedy(flake_dir: str, flake_host: str) -> list[str]:
    """git in the checkout, committing as remedy (the host's git may have no identity)."""
    return [
        "git",
        "-C",
        flake_dir,
        "-c",
        "user.name=remedy",
        "-c",
        f"user.email=remedy@{flake_host}",
    ]


def lock_commit(flake_dir: str, message: str, flake_host: str) -> list[str]:
    return [
        *_git_as_remedy(flake_dir, flake_host),
        "commit",
        "-q",
        "-m",
        message,
        "--",
        "flake.lock",
    ]


PREVIEW_BUMP_SH = host.text("preview_bump.sh")


def preview_bump(
    git_url: str, ref: str | None, rev: str | None, allowed_signers: str, bound_s: int = 0
) -> list[str]:
    """For --dry: the rev a bump would take (REV, or the head of REF at GIT_URL) and its
    signature against ALLOWED_SIGNERS, fetched into a temporary repository that goes with
    the command (in BOUND_S seconds at most; 0: the program's own bound); nothing on the
    host changes. Prints ``would-take REV`` then ``signature STATE|KEY|SIGNER|AUTHOR``."""
    return ["sh", "-c", PREVIEW_BUMP_SH, "sh", git_url, ref or "HEAD", rev or "",
            allowed_signers, str(bound_s or "")]  # fmt: skip


TIP_REV_SH = host.text("tip_rev.sh")
TIP_BOUND_S = 20  # how long the read of a remote's tip may take


def tip_rev(git_url: str, ref: str | None, bound_s: int = TIP_BOUND_S) -> list[str]:
    """For a review before the switch: the rev REF (default HEAD) has at GIT_URL now,
    read with ``git ls-remote`` (nothing fetched, nothing written), bounded to BOUND_S
    seconds. Prints ``tip REV`` or ``unread WHY``."""
    return ["sh", "-c", TIP_REV_SH, "sh", git_url, ref or "HEAD", str(bound_s)]


SYSTEM_CHANGES_SH = host.text("system_changes.sh")


def system_changes(current: str, new: str, builder: str | None = None) -> list[str]:
    """What a switch from CURRENT to NEW (both in the store) changes beyond the settings,
    as the proof says it: system_boot.sh's lines, then ``diff LINE`` per line of ``nix
    store diff-closures`` (bounded in time) or ``unread WHY``; with a BUILDER no nix
    runs here, and the packages are not read. Reads only."""
    return ["sh", "-c", SYSTEM_CHANGES_SH, "sh", current, new, "", builder or ""]


BOUNDED_SH = host.text("nix_bounded.sh")


def nix_bounded(argv: list[str], max_bytes: int | None, name: str, timeout_s: int) -> list[str]:
    """ARGV (the owner's nix) bounded in time, TIMEOUT_S (host data nix_timeout_s), and in
    memory when MAX_BYTES is given and the host has systemd-run: a transient scope with
    ``MemoryMax`` (as root; ARGV may then drop to the owner), since Nix's evaluation of a
    NixOS system takes GBs and the model server shares the host. A stop at either bound
    says so on stderr."""
    return ["sh", "-c", BOUNDED_SH, "sh", name, str(max_bytes or 0), f"{int(timeout_s)}s", *argv]


def profile_set(path: str) -> list[str]:
    """Point the system profile at PATH (a new generation), as nixos-rebuild does."""
    return ["nix-env", "-p", SYSTEM_PROFILE, "--set", path]


def activate(toplevel: str) -> list[str]:
    """Install the boot entry and activate TOPLEVEL (restarts units whose files changed)."""
    return [f"{toplevel}/bin/switch-to-configuration", "switch"]


def diff_closures(current: str, new: str) -> list[str]:
    """The packages whose versions differ between two systems (Nix 2.4 and later)."""
    return nix("store", "diff-closures", current, new)


SWITCH_UNIT = "nixos-rebuild-switch-to-configuration"  # nixos-rebuild-ng's transient unit

# Run the switch, then say its exit code on stdout (the command itself succeeds, so the
# code reaches remedy whatever it is: 0, 4 and 100 mean different things).
#
# $1 is the transient unit ("": none, the command runs here), $2 how many seconds a
# leftover of that unit is waited for and $3 how long the switch may run; the command
# follows. In a transient unit the switch's stdout and stderr are the journal, not this
# session: switch-to-configuration-ng panics (exit 101) on a write to a closed pipe
# (nixpkgs#462179), so a dropped SSH session must not be its stderr. `systemd-run
# --wait` can return before the unit ends (PID 1 re-executed during the switch,
# systemd#27204): the unit is waited for until it is no longer active, and its exit
# status is systemd's record of it (the journal after a cursor taken before, else
# ExecMainCode/ExecMainStatus), never systemd-run's. A unit of that name that is loaded
# but not running is the last switch's, not yet collected by systemd ("was already
# loaded"): waited for, then started again; a running one is another switch (the caller
# reads the words and calls it locked).
SWITCH_SH = host.text("switch_run.sh")


# How long a switch may run before remedy stops waiting for its end (a bound, not a
# cut-off: the wait ends when the unit does). The one source: the switch and rollback
# steps are given it (switch_bound_s), lib.sh's switch_to passes it on.
SWITCH_BOUND_S = 3600


def switch(
    toplevel: str, action: str = "switch", transient: bool = True, wait_s: float = 0
) -> list[str]:
    """TOPLEVEL's switch-to-configuration ACTION as nixos-rebuild-ng runs it: in the
    transient unit nixos-rebuild-switch-to-configuration (on a host booted with systemd),
    so the activation finishes when the SSH session drops, with
    NIXOS_INSTALL_BOOTLOADER=0 passed in; its output goes to the journal (the fix of
    nixpkgs#462179: no ``--pipe``) and its end is the unit's, not ``systemd-run``'s. A
    leftover of the unit is waited for up to WAIT_S. Its exit code is printed after
    ``@@remedy:switch-exit`` (lib.sh's switch_to reads it), its output before."""
    argv = [f"{toplevel}/bin/switch-to-configuration", action]
    unit = ""
    if transient:
        unit = SWITCH_UNIT
        argv = [
            "systemd-run", "-E", "LOCALE_ARCHIVE", "-E", "NIXOS_INSTALL_BOOTLOADER",
            "--collect", "--wait", "--no-ask-password", "--quiet", "--service-type=exec",
            f"--unit={SWITCH_UNIT}", *argv,
        ]  # fmt: skip
    return [
        "sh", "-c", SWITCH_SH, "sh", unit, str(int(wait_s)), str(SWITCH_BOUND_S),
        "env", "NIXOS_INSTALL_BOOTLOADER=0", *argv,
    ]  # fmt: skip


# Who holds the switch: the transient unit of a nixos-rebuild (also under the name
# `nixos-rebuild-switch-to-configuration-<8 hex>` of some 26.05-pre nixos-rebuild-ng
# builds, nixpkgs#463029, reverted by #499837), or a process with an flock on
# switch-to-configuration's lock (read from /proc/locks, so nothing is created or
# taken). Prints "holder <what>" lines; none: free.
SWITCH_HOLDER_SH = host.text("switch_holders.sh")


def switch_holders() -> list[str]:
    return ["sh", "-c", SWITCH_HOLDER_SH]


def parse_holders(stdout: str) -> list[str]:
    return [ln[len("holder ") :].strip() for ln in stdout.splitlines() if ln.startswith("holder ")]


def guard_path(script_path: str) -> str:
    """The /run copy of the memory guard the fallback writes, beside its start script."""
    return script_path.rsplit("/", 1)[0] + "/remedy-memory-guard"


def dropin_text(
    script_path: str,
    env: dict[str, str],
    properties: dict[str, str] | None = None,
    guard: str | None = None,
) -> str:
    """The fallback's /run drop-in: ExecStart at SCRIPT_PATH, each variable of ENV (the
    built-in ones and the data settings' it carries) and each [Service] property of
    PROPERTIES (the data settings' it carries). GUARD (the memory guard's arguments,
    ``check MIN_GB UNIT``): its ExecCondition=, the /run copy (guard_path), in place of
    the unit's own (a durable guard would decide twice: one line per decision)."""
    lines = [
        "# remedy: runtime override (tt-stack#49); /run is wiped at reboot",
        "[Service]",
    ]
    if guard is not None:
        lines += ["ExecCondition=", f"ExecCondition=+/bin/sh {guard_path(script_path)} {guard}"]
    lines += [
        "ExecStart=",
        f"ExecStart={script_path}",
    ]
    # a value with a space is one assignment in double quotes (the values have none)
    lines += [
        f'Environment="{k}={v}"' if any(c.isspace() for c in v) else f"Environment={k}={v}"
        for k, v in sorted(env.items())
    ]
    lines += [f"{k}={v}" for k, v in sorted((properties or {}).items())]
    return "\n".join(lines) + "\n"
