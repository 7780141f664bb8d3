"""The remote commands of every remediation step, as argv lists.

One definition, two users: the pyinfra operations quote these with
``QuoteString`` (see ``remedy.operations.argv``), and ``remedy runbooks show
--manual`` prints them with ``shlex.join`` for a person with only SSH. Host data
only ever appears as separate argv elements, never inside a shell program.
"""

from __future__ import annotations

from remedy import host

# Rewrites a start script for the fallback: the one --tool-call-parser value is
# replaced and the environment exported after the shebang. Exits 3 (writing
# nothing useful) unless the flag occurs exactly once.
OVERRIDE_AWK = host.text("override.awk")


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
CHECK_ABSENT = "remedy: no such flake output"
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


def git(flake_dir: str, *args: str) -> list[str]:
    return ["git", "-C", flake_dir, *args]


SCRATCH_PREFIX = "/tmp/remedy-bump."


def scratch_dir() -> list[str]:
    """A private directory for the bump's scratch clone (prints its path)."""
    return ["mktemp", "-d", SCRATCH_PREFIX + "XXXXXXXX"]


# A nix that a stop request ends may still write into a clone for a moment (its scope is
# stopped with --no-block), and rm -rf then says "Directory not empty": remove, look
# again, up to five times a second apart; the last try says why it failed.
SCRATCH_REMOVED_SH = host.text("scratch_removed.sh")


def stale_scratch_removed(owner: str) -> list[str]:
    """Scratch clones that a killed or stopped run left behind. Every run that makes one
    holds the host lock (remedy.lock), so any clone found now belongs to no running run."""
    return ["sh", "-c", SCRATCH_REMOVED_SH, "sh", SCRATCH_PREFIX[5:] + "*", owner]


def stale_scratch_listed(owner: str) -> list[str]:
    """The scratch clones OWNER has under /tmp (one path a line)."""
    return ["find", "/tmp", "-maxdepth", "1", "-name", SCRATCH_PREFIX[5:] + "*", "-user", owner]


def scratch_clone(flake_dir: str, scratch: str) -> list[str]:
    return ["git", "clone", "-q", flake_dir, scratch]


def remove_tree(path: str) -> list[str]:
    return ["rm", "-rf", "--", path]


def fast_forward(flake_dir: str, source: str) -> list[str]:
    """Bring SOURCE's HEAD into the checkout, only as a fast-forward: one short step that
    moves HEAD and writes flake.lock, and refuses if someone committed meanwhile."""
    return [
        "sh", "-c", 'git -C "$1" fetch -q "$2" HEAD && git -C "$1" merge -q --ff-only FETCH_HEAD',
        "sh", flake_dir, source,
    ]  # fmt: skip


def lock_changed(flake_dir: str) -> list[str]:
    """Exits 1 when flake.lock differs from HEAD."""
    return git(flake_dir, "diff", "--quiet", "--", "flake.lock")


def lock_revert(flake_dir: str) -> list[str]:
    return git(flake_dir, "checkout", "--", "flake.lock")


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


def lock_commit_revert(
    flake_dir: str, commit: str, flake_host: str, base: str | None = None
) -> list[str]:
    """Revert COMMIT, or every commit in BASE..COMMIT (newest first) when BASE is given."""
    target = f"{base}..{commit}" if base else commit
    return [*_git_as_remedy(flake_dir, flake_host), "revert", "--no-edit", target]


def file_written(repo: str, rel: str, text: str) -> list[str]:
    """Write TEXT to REPO/REL atomically (written_atomically, mode 0644, the running user's
    file: it runs as the checkout's owner), making its directory first."""
    return [
        "sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && shift && exec "$@"', "sh",
        f"{repo}/{rel}", *written_atomically(f"{repo}/{rel}", "0644", text_argv(text)),
    ]  # fmt: skip


def file_commit(repo: str, rel: str, message: str, flake_host: str) -> list[str]:
    """git add REL and commit only it."""
    return [
        "sh", "-c", 'git -C "$1" add -- "$2" && shift 2 && "$@"', "sh", repo, rel,
        *_git_as_remedy(repo, flake_host), "commit", "-q", "-m", message, "--", rel,
    ]  # fmt: skip


def head(flake_dir: str) -> list[str]:
    return git(flake_dir, "rev-parse", "HEAD")


FETCHED_ANCESTRY_SH = host.text("ancestry.sh")


SIGNATURE_SH = r"""
rev=$1 url=$2 repo=$3 signers=$4
# a repository that holds REV: the input's own (git+file), else what Nix fetched
if [ -z "$repo" ]; then
  for d in "${XDG_CACHE_HOME:-$HOME/.cache}"/nix/gitv3/*/; do
    [ -d "$d" ] && git --git-dir="$d" cat-file -e "$rev^{commit}" 2>/dev/null && { repo=$d; break; }
  done
fi
if [ -z "$repo" ]; then echo "error: no repository here holds $rev of $url" >&2; exit 2; fi
[ -d "$repo/.git" ] && repo=$repo/.git  # a work tree's repository
t=$(mktemp "${TMPDIR:-/tmp}/remedy-signers.XXXXXXXX") || exit 2
trap 'rm -f -- "$t"' EXIT
printf '%s\n' "$signers" > "$t" || exit 2
out=$(git --git-dir="$repo" -c gpg.format=ssh -c gpg.ssh.allowedSignersFile="$t" \
  log -1 --format='%G?|%GK|%GS|%an <%ae>' "$rev" 2>/dev/null) || {
  echo "error: git cannot read $rev in $repo" >&2; exit 2; }
printf 'signature %s\n' "$out"
"""


ON_BRANCH_SH = host.text("on_branch.sh")


PREVIEW_BUMP_SH = host.text("preview_bump.sh")


def preview_bump(git_url: str, ref: str | None, rev: str | None, allowed_signers: str) -> list[str]:
    """For --dry: the rev a bump would take (REV, or the head of REF at GIT_URL) and its
    signature against ALLOWED_SIGNERS, fetched into a temporary repository that goes with
    the command; nothing on the host changes. Prints ``would-take REV`` then
    ``signature STATE|KEY|SIGNER|AUTHOR``."""
    return ["sh", "-c", PREVIEW_BUMP_SH, "sh", git_url, ref or "HEAD", rev or "", allowed_signers]


BOUNDED_SH = host.text("nix_bounded.sh")
TIME_BOUND_HIT = "stopped at its time bound"
MEMORY_BOUND_HIT = "killed at its memory bound"


def nix_bounded(argv: list[str], max_bytes: int | None, name: str, timeout_s: int) -> list[str]:
    """ARGV (the owner's nix) bounded in time, TIMEOUT_S (host data nix_timeout_s), and in
    memory when MAX_BYTES is given and the host has systemd-run: a transient scope with
    ``MemoryMax`` (as root; ARGV may then drop to the owner), since Nix's evaluation of a
    NixOS system takes GBs and the model server shares the host. A stop at either bound
    says so on stderr."""
    return ["sh", "-c", BOUNDED_SH, "sh", name, str(max_bytes or 0), f"{int(timeout_s)}s", *argv]


# Scopes of the owner's nix that a run killed outright left running (a hung build): the
# host lock says no other run uses them.
STALE_NIX_SCOPES = ["systemctl", "stop", "--no-block", "remedy-nix-*.scope"]


def profile_set(path: str) -> list[str]:
    """Point the system profile at PATH (a new generation), as nixos-rebuild does."""
    return ["nix-env", "-p", SYSTEM_PROFILE, "--set", path]


def activate(toplevel: str) -> list[str]:
    """Install the boot entry and activate TOPLEVEL (restarts units whose files changed)."""
    return [f"{toplevel}/bin/switch-to-configuration", "switch"]


# What a switch from $1 (the running system) to $2 changes for the boot: the targets of
# each system's kernel, initrd and kernel modules, and both kernel command lines.
SYSTEM_BOOT_SH = host.text("system_boot.sh")


def system_boot(current: str, new: str) -> list[str]:
    return ["sh", "-c", SYSTEM_BOOT_SH, "sh", current, new]


def diff_closures(current: str, new: str) -> list[str]:
    """The packages whose versions differ between two systems (Nix 2.4 and later)."""
    return nix("store", "diff-closures", current, new)


SWITCH_UNIT = "nixos-rebuild-switch-to-configuration"  # nixos-rebuild-ng's transient unit
SWITCH_LOCK = "/run/nixos/switch-to-configuration.lock"
SWITCH_EXIT = "@@remedy:switch-exit"

# Run the switch, then say its exit code on stdout (the command itself succeeds, so the
# code reaches remedy whatever it is: 0, 4 and 100 mean different things).
#
# $1 is the transient unit ("": none, the command runs here) and $2 how many seconds a
# leftover of that unit is waited for; the command follows. In a transient unit the
# switch's stdout and stderr are the journal, not this session: switch-to-configuration-ng
# panics (exit 101) on a write to a closed pipe (nixpkgs#462179), so a dropped SSH
# session must not be its stderr. `systemd-run --wait` waits for it; its output and its
# exit status are then read from the journal after a cursor taken before (systemd 252's
# `systemd-run --wait` says 1 for any failure). A unit of that name that is loaded but
# not running is the last switch's, not yet collected by systemd ("was already loaded"):
# waited for, then started again; a running one is another switch (the caller reads the
# words and calls it locked).
SWITCH_SH = host.text("switch_run.sh")


def switch(
    toplevel: str, action: str = "switch", transient: bool = True, wait_s: float = 0
) -> list[str]:
    """TOPLEVEL's switch-to-configuration ACTION as nixos-rebuild-ng runs it: in the
    transient unit nixos-rebuild-switch-to-configuration (on a host booted with systemd),
    so the activation finishes when the SSH session drops, with
    NIXOS_INSTALL_BOOTLOADER=0 passed in; its output goes to the journal and
    ``systemd-run --wait`` waits for it (the fix of nixpkgs#462179: no ``--pipe``). A
    leftover of the unit is waited for up to WAIT_S. Its exit code is printed after
    ``@@remedy:switch-exit`` (``switch_exit``), its output before."""
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
        "sh", "-c", SWITCH_SH, "sh", unit, str(int(wait_s)),
        "env", "NIXOS_INSTALL_BOOTLOADER=0", *argv,
    ]  # fmt: skip


def switch_exit(stdout: str) -> int | None:
    """The exit code ``switch`` printed (None: it did not get that far)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(SWITCH_EXIT + " "):
            return int(line.split()[1])
    return None


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


# Wait for an idle server: poll vLLM's /metrics once a second until the gauges
# vllm:num_requests_running and vllm:num_requests_waiting (summed over model_name) are
# both 0, or TIMEOUT seconds passed. The last line says how it ended (restarts.parse_drain).
DRAIN_SH = r"""
url=$1 timeout=$2
end=$(( $(date +%s) + timeout ))
while :; do
  page=$(curl -sS --max-time 5 -w '\n@@remedy:http %{http_code}\n' "$url/metrics" 2>/dev/null)
  code=$(printf '%s\n' "$page" | sed -n 's/^@@remedy:http //p')
  case "$code" in
    200) ;;
    404) echo "no-metrics 404"; exit 0 ;;
    000|"") echo "unreachable ${code:-000}"; exit 0 ;;
    *) echo "unknown /metrics answered HTTP $code"; exit 0 ;;
  esac
  # vLLM's V1 gauges, summed over every model_name and engine series; no gauge at all
  # (--disable-log-stats) or a value that is no number is "load unknown", never idle.
  # A sample is NAME[{LABELS}] VALUE [TIMESTAMP] (Prometheus' text format): the value is
  # the first field after the label set, whose quoted values may hold spaces, } and \"
  set -- $(printf '%s\n' "$page" | awk '
    /^vllm:num_requests_(running|waiting)[{ \t]/ {
      g++
      name = $0; sub(/[{ \t].*/, "", name)
      rest = substr($0, length(name) + 1)
      if (substr(rest, 1, 1) == "{") {
        i = 2; q = 0
        while (i <= length(rest)) {
          c = substr(rest, i, 1)
          if (q) { if (c == "\\") i++; else if (c == "\"") q = 0 }
          else if (c == "\"") q = 1
          else if (c == "}") break
          i++
        }
        rest = substr(rest, i + 1)
      }
      sub(/^[ \t]+/, "", rest); split(rest, f, /[ \t]+/); v = f[1]
      if (v !~ /^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$/) { bad++; next }
      if (name == "vllm:num_requests_running") r += v; else w += v
    }
    END { printf "%d %d %d %d\n", r, w, g, bad }')
  if [ "$3" = 0 ]; then
    echo "unknown /metrics has no vllm:num_requests_running or _waiting gauge"; exit 0
  fi
  if [ "$4" != 0 ]; then echo "unknown /metrics has a gauge that is not a number"; exit 0; fi
  if [ "$1" = 0 ] && [ "$2" = 0 ]; then echo idle; exit 0; fi
  if [ "$(date +%s)" -ge "$end" ]; then echo "busy $1 $2"; exit 0; fi
  printf 'waiting: %s running, %s waiting\n' "$1" "$2"
  sleep 1
done
"""


def drain(server_url: str, timeout_s: int) -> list[str]:
    return ["sh", "-c", DRAIN_SH, "sh", server_url, str(int(timeout_s))]


def daemon_reload() -> list[str]:
    return ["systemctl", "daemon-reload"]


def restart(unit: str) -> list[str]:
    return ["systemctl", "restart", unit]


def remove_files(*paths: str) -> list[str]:
    return ["rm", "-f", "--", *paths]


WRITABLE_SH = host.text("writable.sh")


def writable(*dirs: str) -> list[str]:
    """Fails, naming a read-only file system, unless every one of DIRS can be made and
    written: checked before a step writes the first of several files."""
    return ["sh", "-c", WRITABLE_SH, "sh", *dirs]


def make_dir(path: str) -> list[str]:
    return ["install", "-d", "-m", "0755", "-o", "root", "-g", "root", path]


# $1 the file, $2 its mode, $3 its owner (user:group, or - to leave it), then the command
# that prints its content. The content goes to FILE.remedy-tmp, which is removed on any
# failure or signal in the same command: nothing partial is left. A full file system is
# named, with what it has left.
ATOMIC_WRITE_SH = host.text("atomic_write.sh")


def written_atomically(
    dest: str, mode: str, content_argv: list[str], owner: str = "-"
) -> list[str]:
    """Write DEST with what CONTENT_ARGV prints: a temporary name in the same directory,
    MODE and OWNER, then a rename; on any failure the temporary file goes, in the same
    command (a full /run is named). Empty content is a failure too."""
    return ["sh", "-c", ATOMIC_WRITE_SH, "sh", dest, mode, owner, *content_argv]


def override_script_argv(store_script: str, parser: str, env: dict[str, str]) -> list[str]:
    """Print the fallback start script: STORE_SCRIPT with PARSER and ENV (OVERRIDE_AWK)."""
    exports = "\n".join(f"{k}={v}" for k, v in sorted(env.items()))
    return ["awk", "-v", f"parser={parser}", "-v", f"exports={exports}", OVERRIDE_AWK, store_script]


def text_argv(text: str) -> list[str]:
    """Print TEXT as it is."""
    return ["printf", "%s", text]


def dropin_text(
    script_path: str, env: dict[str, str], properties: dict[str, str] | None = None
) -> str:
    """The fallback's /run drop-in: ExecStart at SCRIPT_PATH, each variable of ENV (the
    built-in ones and the data settings' it carries) and each [Service] property of
    PROPERTIES (the data settings' it carries)."""
    lines = [
        "# remedy: runtime override (tt-stack#49); /run is wiped at reboot",
        "[Service]",
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


def sysctl_written(key: str, value: str) -> list[str]:
    """Set the kernel parameter KEY to VALUE until the next boot (a data setting's runtime
    form)."""
    return ["sysctl", "-w", f"{key}={value}"]


RELEASE_HUGEPAGES_SH = r"""
d=/sys/kernel/mm/hugepages/hugepages-$1kB
[ -d "$d" ] || { echo "no $1 kB hugepage pool"; exit 0; }
nr=$(cat "$d/nr_hugepages"); free=$(cat "$d/free_hugepages"); new=$((nr - free))
[ "$new" -lt "$2" ] && new=$2
if [ "$new" -ge "$nr" ]; then echo "hugepages $1 kB: $nr (free $free), nothing above $2 to release"; exit 0; fi
echo "$new" > "$d/nr_hugepages" || { echo "could not write $d/nr_hugepages" >&2; exit 1; }
echo "hugepages $1 kB: $nr -> $(cat "$d/nr_hugepages")"
"""


def release_hugepages(size_kb: int, target: int) -> list[str]:
    """Lower the pool to max(TARGET, in use): only free pages can be released."""
    return ["sh", "-c", RELEASE_HUGEPAGES_SH, "sh", str(size_kb), str(target)]


def memory_gate(min_gb: float) -> list[str]:
    """Exit 1 (with MemAvailable and the threshold) if MemAvailable < MIN_GB."""
    return [
        "awk",
        "-v",
        f"min={min_gb:g}",
        "/^MemAvailable:/ { gb = $2 * 1024 / 1e9; "
        'printf "MemAvailable %.1f GB, threshold %s GB\\n", gb, min; '
        'if (gb < min) { print "refusing: below the threshold; reboot reclaims the '
        'tenstorrent pinned-page leak; a module reload does not" > "/dev/stderr"; '
        "exit 1 } }",
        "/proc/meminfo",
    ]


RUNTIME_OVERRIDES_REMOVED_SH = r"""
d=$1; shift
for f in "$d"/*.conf; do
  [ -f "$f" ] || continue
  if [ "$f" = "$1" ] || grep -q '^[[:space:]]*ExecStart=' "$f"; then
    rm -f -- "$f" && echo "removed $f"
  fi
done
shift
for f in "$@"; do
  [ -e "$f" ] && rm -f -- "$f" && echo "removed $f"
done
exit 0
"""


def runtime_overrides_removed(unit: str, dropin: str, *scripts: str) -> list[str]:
    """Remove the unit's tool-calling overrides under /run: DROPIN (the managed one) and
    every /run drop-in that sets ExecStart, plus the SCRIPTS they ran. Other runtime
    drop-ins (a `set-property --runtime` limit) stay. Decided on the host, so the
    operation and the manual script remove the same files."""
    return [
        "sh", "-c", RUNTIME_OVERRIDES_REMOVED_SH, "sh", f"/run/systemd/system/{unit}.d",
        dropin, *scripts,
    ]  # fmt: skip


def managed_revert(repo: str, rel: str) -> list[str]:
    """Undo an uncommitted write of REL: back to HEAD's version, or gone if it is new."""
    return [
        "sh", "-c",
        'git -C "$1" reset -q -- "$2" 2>/dev/null; '
        'git -C "$1" checkout -q -- "$2" 2>/dev/null || rm -f -- "$1/$2"',
        "sh", repo, rel,
    ]  # fmt: skip
