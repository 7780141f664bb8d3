"""The run's step list as a POSIX shell script: the manual script of a flow runbook.

The same steps as the deploy (``remedy.core.run.steps.TEMPLATES``, in its order, the
ones the runbook names), with the same scratch clone, proof, fast-forward and run
journal (``remedy.core.programs.journal``): a script cut short (the laptop dies during the
build) leaves the checkout clean, and either the script or the deploy finishes
the job. Once it holds the host lock the script reads the host again and plans
from what it finds: another run may have done the work while it waited.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from remedy.core.config import desired
from remedy.core.programs import bump, commands, journal
from remedy.core.readings import probe
from remedy.core.run.steps import ALWAYS, DURABLE, TEMPLATES, lock_message

# The programs (sh and awk text) of the script being rendered: each is written once, as
# a here-document at the top, and named by its variable wherever it runs. Quoted inline,
# a program is unreadable at 3 a.m. ('"'"' at every quote) and appears once per use.
_PROGRAMS: ContextVar[dict[str, str] | None] = ContextVar("remedy_programs", default=None)
PROGRAM_MIN = 120  # shorter text, or text of one line, is quoted where it is used


def word(text: str) -> str:
    """TEXT as one shell word: a program (several lines) rendered once at the top of the
    script, named here by its variable; anything else quoted."""
    programs = _PROGRAMS.get()
    if programs is None or "\n" not in text.strip() or len(text) < PROGRAM_MIN:
        return shlex.quote(text)
    name = programs.setdefault(text, f"remedy_program_{len(programs) + 1}")
    return f'"${name}"'


@contextmanager
def programs() -> Iterator[dict[str, str]]:
    """Collect the programs of one rendering (``word``); ``with_programs`` writes them."""
    found: dict[str, str] = {}
    token = _PROGRAMS.set(found)
    try:
        yield found
    finally:
        _PROGRAMS.reset(token)


def with_programs(script: str, found: dict[str, str]) -> str:
    """SCRIPT with FOUND's programs defined right after its ``set -eu``: each a quoted
    here-document, so nothing in it is expanded or needs quoting."""
    lines = ["# The programs the steps below run, each once (quoted here-documents)."]
    for text, name in found.items():
        tag = "REMEDY_PROGRAM"
        while tag in text.splitlines():
            tag += "_"
        lines += [f"{name}=$(cat <<'{tag}'", text.strip("\n"), tag, ")"]
    if not found:
        return script
    head, sep, rest = script.partition("\nset -eu\n")
    if not sep:
        return "\n".join(lines) + "\n" + script
    return head + sep + "\n".join(lines) + "\n" + rest


def _words(argv: list[str]) -> list[tuple[str, bool]]:
    """Each element of ARGV, and whether it is a program (the text after ``-c``: the
    script of ``sh -c``; a Nix expression); data (a commit message, a file's text) is
    never hoisted."""
    return [
        (a, (i > 0 and argv[i - 1] in ("-c", "--expr")) or a == commands.LOCAL_BUILDS_NIX)
        for i, a in enumerate(argv)
    ]


def q(argv: list[str]) -> str:
    # `ssh HOST sh -s < FILE` feeds the script on stdin: no command may read from it.
    return " ".join(word(a) if p else shlex.quote(a) for a, p in _words(argv)) + " </dev/null"


def qv(argv: list[str], **variables: str) -> str:
    """q(ARGV) where the placeholders @NAME@, whole elements or inside one, become the
    shell variables given (double-quoted, next to the quoted rest of the element)."""
    words = []
    for element, program in _words(argv):
        parts = [element]
        for key, var in variables.items():
            split = []
            for part in parts:
                if isinstance(part, tuple):
                    split.append(part)
                    continue
                pieces = part.split(f"@{key}@")
                for i, piece in enumerate(pieces):
                    if i:
                        split.append((var,))
                    split.append(piece)
            parts = split
        quoted = "".join(
            f'"${p[0]}"'
            if isinstance(p, tuple)
            else (word(p) if program and len(parts) == 1 else shlex.quote(p))
            if p
            else ""
            for p in parts
        )
        words.append(quoted or "''")
    return " ".join(words) + " </dev/null"


JOURNAL_KEYS = (
    "base_head", "commits", "lock_commit", "new_rev", "pid_at_override", "proven_head",
    "run_id", "scratch", "started", "toplevel",
)  # fmt: skip
NUMBERS = ("commits", "pid_at_override")


def _manual_record(s, host: str, runbook: str, issues: list[str]) -> list[str]:
    """manual_record STATUS, run when the script exits (trap): this run's audit record, one
    JSON line appended to the host's manual-runs file (root's, 0600), which the next
    remedy command that reads the host imports into its audit log, once (by run_id)."""
    issue_list = ", ".join(json.dumps(i) for i in issues)
    fmt = (
        '{"host": "%s", "result": "%s", "time": "%s", "operator": "%s", "runbook": "%s", '
        f'"issues": [{issue_list}], '
        '"path": "%s", "details": {"run_id": "%s", "started": "%s", "exit": %s, '
        '"manual_script": true, "restarts": %s, "lock_commit": "%s", "toplevel": "%s"}}'
    )
    return [
        f"manual_runs={shlex.quote(journal.manual_runs_path(s.unit))}",
        "js() { printf '%s' \"$1\" | sed 's/[\\\\\"]/\\\\&/g'; }  # a JSON string's inside",
        "manual_record() {",
        '  [ -n "${run_id:-}" ] || return 0  # stopped before it planned: nothing ran',
        '  case "$1" in 0) result=ok ;; 5) result=locked ;; *) result=failed ;; esac',
        "  p=${path:-none}",
        '  [ "${durable_failed:-no}" = yes ] && [ "$p" = fallback ] && p=durable+fallback',
        f"  now_pid={_main_pid(s)}",
        "  restarts=0",
        '  [ -n "${pid_at_start:-}" ] && [ "$now_pid" != "$pid_at_start" ] && restarts=1',
        '  mkdir -p "${manual_runs%/*}" && (umask 077; printf '
        + shlex.quote(fmt + "\n")
        + f' "$(js {shlex.quote(host)})" "$result" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"'
        ' "$(js "manual script, $(id -un)@$(hostname)")"'
        f" {shlex.quote(runbook)}"
        ' "$p" "$(js "$run_id")" "$(js "${started:-}")" "$1" "$restarts"'
        ' "$(js "${lock_commit:-}")" "$(js "${toplevel:-}")" >> "$manual_runs")',
        "}",
    ]


def _journal(s) -> list[str]:
    """Shell functions that read and write the run journal, as the deploy does."""
    keys = []
    for i, key in enumerate(JOURNAL_KEYS):
        comma = "," if i < len(JOURNAL_KEYS) - 1 else ""
        if key in NUMBERS:
            keys.append(f'    printf \' "{key}": %s{comma}\\n\' "${{{key}:-0}}"')
        else:
            keys.append(f'    printf \' "{key}": "%s"{comma}\\n\' "${key}"')
    return [
        f"journal={shlex.quote(journal.path(s.unit))}",
        *journal.TRUST_SH.strip().splitlines(),
        "jget() {  # one value of the journal (one key per line, as remedy writes it)",
        '  [ -z "$(journal_distrust "$journal")" ] || return 0',
        """  sed -n "s/^ *\\"$1\\": \\"\\{0,1\\}\\([^\\",]*\\)\\"\\{0,1\\},\\{0,1\\}$/\\1/p" """
        """"$journal" 2>/dev/null | head -n 1""",
        "}",
        "journal_write() {  # every value so far: root's, mode 0600, renamed into place",
        "  j=$journal",
        *["  " + x for x in journal.SET_ASIDE_SH.strip().splitlines()],
        '  mkdir -p "${journal%/*}" && (umask 077; {',
        "    printf '{\\n'",
        *keys,
        "    printf '}\\n'",
        '  } > "$journal.remedy-tmp") && mv -f "$journal.remedy-tmp" "$journal"',
        "}",
    ]


def _system_holds(s, scope) -> list[str]:
    """system_holds TOPLEVEL: that system holds every setting in scope (desired's own
    shell judgement; the managed file's settings only when the file is imported)."""
    lines = [
        "system_holds() (  # a subshell: its variables stay inside; prints what it lacks",
        "  toplevel=$1",
        f"  unit_file=$toplevel/etc/systemd/system/{shlex.quote(s.unit)}",
        '  exec_script=$(exec_path "$unit_file")',
        '  [ -n "$exec_script" ] || { echo "a start script"; exit 1; }',
        '  script=$(flags_script "$exec_script")',
    ]
    for key in scope:
        m = desired.BY_KEY[key]
        if m.check_sh is None:
            continue
        guard = '[ "${managed:-no}" = no ] || ' if m.durable == desired.MANAGED_FILE else ""
        lines.append(
            f"  {{ {guard}{m.check_sh(s)}; }} || {{ echo {shlex.quote(m.label)}; exit 1; }}"
        )
    return [*lines, ")"]


def _live_holds(s) -> list[str]:
    """live_holds: the running server has the wanted parser and environment (its own
    command line and environment, read as root)."""
    checks = [
        f"tr '\\0' ' ' < /proc/$pid/cmdline | grep -q -- "
        f"{shlex.quote('--tool-call-parser ' + s.tool_call_parser)}"
    ]
    for key, value in sorted(s.required_env.items()):
        checks.append(
            f"tr '\\0' '\\n' < /proc/$pid/environ | grep -qx -- {shlex.quote(f'{key}={value}')}"
        )
    return [
        "live_holds() {",
        f"  pid=$(systemctl show -P MainPID {shlex.quote(s.unit)})",
        '  [ "${pid:-0}" -gt 0 ] || return 1',
        *[f"  {c} || return 1" for c in checks],
        "}",
    ]


# remedy.core.readings.memory.nix_memory_bound in awk, over /proc/meminfo: bytes the owner's nix
# may use (MemAvailable above the gate's floor, at most cap; cap 0: no cap).
NIX_BOUND_AWK = (
    "/^MemAvailable:/ { b = $2 * 1024 - floor; if (cap > 0 && cap < b) b = cap; "
    'if (b < 1) b = 1; printf "%.0f", b }'
)


def _owner_nix(s) -> list[str]:
    """owner_nix WHAT ARGV: ARGV as the checkout's owner, bounded as the deploy bounds its
    nix (commands.BOUNDED_SH): in time by nix_timeout_s, and in a transient scope with
    the MemoryMax of remedy.core.readings.memory.nix_memory_bound (what the host can spare above
    min_mem_available_gb now, at most nix_memory_max_gb) where the host has systemd."""
    floor = f"{s.min_mem_available_gb * 1e9:.0f}"
    cap = f"{s.nix_memory_max_gb * 1e9:.0f}" if s.nix_memory_max_gb else "0"
    return [
        f"bounded_program={word(commands.BOUNDED_SH)}",
        "owner_nix() {",
        "  what=$1; shift",
        f"  bound=$(awk -v floor={floor} -v cap={cap} {word(NIX_BOUND_AWK)} /proc/meminfo)",
        '  [ "$owner" = "$(id -un)" ] || '
        'set -- runuser -u "$owner" -- env -C / HOME="${home:-/}" "$@"',
        '  sh -c "$bounded_program" sh "remedy-nix-$what-$$" "${bound:-0}" '
        f'{int(s.nix_timeout_s)}s "$@"',
        "}",
    ]


def _plan(s, scope) -> list[str]:
    """After the lock: finish an earlier run that proved its build, or read the host
    again and plan from it."""
    d = shlex.quote(s.flake_dir)
    importers = (
        f"grep -rlF --include='*.nix' -e {shlex.quote(desired.MANAGED_IMPORT)} {d} "
        f"| grep -vxF {shlex.quote(f'{s.flake_dir}/{s.managed_file}')}"
    )
    managed_here = any(desired.BY_KEY[k].durable == desired.MANAGED_FILE for k in scope)
    return [
        f"managed=no; {importers} >/dev/null 2>&1 && managed=yes" if managed_here else "managed=no",
        'run_id="manual:$(hostname):$$:$(date +%s)" started=$(date -u +%Y-%m-%dT%H:%M:%SZ)',
        "base_head= scratch= commits=0 new_rev= toplevel= proven_head= lock_commit=",
        "pid_at_override= resumed=no durable_needed=yes override_removed=no override_ok=no",
        f"head_now=$(as_owner {q(commands.head(s.flake_dir))} 2>/dev/null || true)",
        'distrust=$(journal_distrust "$journal")',
        'if [ -n "$distrust" ]; then',
        '  echo "the run journal $journal cannot be trusted ($distrust): ignored; this run '
        'sets it aside" >&2',
        'elif [ -s "$journal" ] && [ -z "$(jget lock_commit)" ]; then',
        "  j_top=$(jget toplevel) j_proven=$(jget proven_head) j_scratch=$(jget scratch)",
        '  if [ -n "$j_top" ] && [ -e "$j_top" ] && [ -n "$j_scratch" ] \\',
        '     && [ "$(git -c safe.directory=\'*\' -C "$j_scratch" rev-parse HEAD 2>/dev/null)"'
        ' = "$j_proven" ] \\',
        '     && [ "$(jget base_head)" = "$head_now" ]; then',
        "    resumed=yes run_id=$(jget run_id) started=$(jget started) scratch=$j_scratch",
        "    toplevel=$j_top proven_head=$j_proven base_head=$head_now commits=$(jget commits)",
        "    new_rev=$(jget new_rev)",
        '    echo "finishing the earlier run $run_id (started $started): it proved $toplevel;'
        ' fast-forward the checkout to its commits and switch, without building again" >&2',
        "  fi",
        "fi",
        f'if [ "$resumed" = no ] && system_holds "$(readlink -f {commands.SYSTEM_PROFILE})" '
        ">/dev/null \\",
        f'   && [ "$(readlink -f /run/current-system)" = "$(readlink -f {commands.SYSTEM_PROFILE})"'
        " ]; then",
        "  durable_needed=no",
        "  echo 'the next boot holds every setting in scope: no bump, no build, no switch' >&2",
        # a profile that holds every setting but is not running: remedy's own pending
        # generation (a converge under the default restart policy) or a person's
        # `nixos-rebuild boot`. A person running this script is the restart policy: it is
        # activated now, with no bump and no build, as the deploy does at a window.
        f'elif [ "$resumed" = no ] && system_holds "$(readlink -f {commands.SYSTEM_PROFILE})" '
        ">/dev/null; then",
        "  durable_needed=no",
        f"  toplevel=$(readlink -f {commands.SYSTEM_PROFILE})",
        '  echo "the system profile $toplevel holds every setting in scope but is not running '
        '(a pending generation): activating it, one restart; no bump, no build" >&2',
        "fi",
        "recorded_current=$(readlink -f /run/current-system)",
        f"recorded_profile=$(readlink -f {commands.SYSTEM_PROFILE})",
        f"pid_before={_main_pid(s)}",
        "pid_at_start=$pid_before",
    ]


def _main_pid(s) -> str:
    return f"$(systemctl show -P MainPID {shlex.quote(s.unit)})"


def approval(s) -> str:
    """What the bump may take, said before it runs (host data bump_to, trusted_signers,
    required_fix_rev: remedy.core.programs.bump decides)."""
    if s.pinned_rev:
        what = f"exactly bump_to {s.pinned_rev} (it must be on the input's branch)"
    elif s.trusted_signers:
        what = f"the branch's head, if a key of trusted_signers {s.trusted_signers} signed it"
    else:
        what = "the branch's head (no bump_to, no trusted_signers: not verified)"
    fix = ""
    if s.required_fix_rev:
        fix = f"; it must contain required_fix_rev {s.required_fix_rev[:12]}"
    return f"the bump of {s.flake_input} takes {what}{fix}"


def _bump(s, scope, allowed_signers: str | None = None) -> list[str]:
    """The approved bump (remedy.core.programs.bump): the program the deploy runs, with the same
    values; its answer read in shell. ALLOWED_SIGNERS is trusted_signers' text, read
    where the script was rendered."""
    if s.trusted_signers and allowed_signers is None:
        raise ValueError("trusted_signers is set: render with its text (allowed_signers)")

    def run_bump(update_argv: list[str]) -> str:
        argv = bump.argv(
            "@S@", s.flake_input, update_argv, s.pinned_rev,
            allowed_signers if s.trusted_signers else None, s.trusted_signers,
            s.required_fix_rev,
        )  # fmt: skip
        argv[2] = "@P@"  # the program's text, once, in $bump_program
        return qv(argv, S="scratch", P="bump_program")

    new = commands.update_input(["nix", "flake", "update"], "@S@", s.flake_input)
    old = commands.update_input(["nix", "flake", "lock", "--update-input"], "@S@", s.flake_input)
    message = lock_message(s, "@O@", "manual script").replace("{new}", "@N@")
    commit = qv(commands.lock_commit("@S@", message, s.flake_host), S="scratch", O="o", N="n")
    stale = qv(commands.stale_scratch_removed("@O@"), O="owner")
    dirty = qv(commands.git("@D@", "status", "--porcelain", "--untracked-files=no"),
               D="flake_dir")  # fmt: skip
    return [
        '[ "$resumed" = no ] || { echo "proven by the earlier run: no bump" >&2; return 0; }',
        '[ "$durable_needed" = yes ] || return 0',
        # the deploy's blocker (remedy.core.run.plan.durable_blockers): remedy commits only
        # its own files, and never mixes its bump with a person's changes
        f"flake_dir={shlex.quote(s.flake_dir)}",
        f"dirty=$(as_owner {dirty} </dev/null 2>&1 | head -n 3 | tr '\n' ';')",
        'if [ -n "$dirty" ]; then',
        f'  abandon "{s.flake_dir} has uncommitted changes ($dirty); commit or stash them first, '
        'remedy only commits its own files"; return 0',
        "fi",
        'if [ "$recorded_current" != "$recorded_profile" ]; then',
        '  abandon "the system profile ($recorded_profile) differs from /run/current-system '
        '($recorded_current): reconcile them by hand first"; return 0',
        "fi",
        f"{q(commands.STALE_NIX_SCOPES)} 2>/dev/null || true  # a killed run's hung build",
        f"as_owner {stale} || true",
        f"scratch=$(as_owner {q(commands.scratch_dir())}) || "
        '{ abandon "cannot make a scratch directory as $owner"; return 0; }',
        "base_head=$head_now; journal_write",
        f"as_owner {qv(commands.scratch_clone(s.flake_dir, '@S@'), S='scratch')} || "
        '{ abandon "cannot clone the checkout into $scratch"; return 0; }',
        f"echo {shlex.quote(approval(s))} >&2",
        f"bump_program={word(bump.PROGRAM)}",
        # the host's update command, as remedy.core.readings.nix.parse_nix_version picks it
        "if nix_at_least 2 19 && ! nix --version 2>/dev/null | grep -q '(Lix'; then",
        f"  bumped=$(as_owner {run_bump(new)}) || true",
        "else",
        f"  bumped=$(as_owner {run_bump(old)}) || true",
        "fi",
        """printf '%s\n' "$bumped" | sed -n 's/^said //p' >&2""",
        """why=$(printf '%s\n' "$bumped" | sed -n 's/^refused //p')""",
        """new_rev=$(printf '%s\n' "$bumped" | sed -n 's/^new-rev //p')""",
        """o=$(printf '%s\n' "$bumped" | sed -n 's/^old-rev //p' | cut -c1-12)""",
        'n=$(printf "%s" "$new_rev" | cut -c1-12)',
        '[ -n "$why" ] || [ -n "$new_rev" ] || why="the bump did not answer: $bumped"',
        'if [ -n "$why" ]; then abandon "$why"; return 0; fi',
        """if printf '%s\n' "$bumped" | grep -qx unchanged; then""",
        f'  echo "{s.flake_input} is already at $n" >&2',
        "else",
        f'  echo "the bump takes {s.flake_input} $o -> $n (in the scratch clone; the checkout '
        'moves only once the build proves it)" >&2',
        f"  as_owner {commit}",
        "  commits=$((commits + 1))",
        "fi",
        "journal_write",
    ]


def _managed(s, scope) -> list[str]:
    text = desired.managed_nix(s, scope)
    if text is None:
        return [f"echo 'no setting in scope lives in {s.managed_file}' >&2"]
    message = (
        f"{s.managed_file}: remedy's managed settings\n\nWritten by remedy's manual script "
        "from its host data."
    )
    rel = s.managed_file
    changed = commands.git("@S@", "status", "--porcelain", "--", rel)
    author = commands.git("@S@", "log", "-1", "--format=%ae", "--", rel)
    keep = []
    if s.managed_file_conflict == "keep":  # as remedy.core.run.plan.managed_conflict judges it
        keep = [
            f'if [ -f "$scratch"/{shlex.quote(rel)} ] && [ "$(cat "$scratch"/{shlex.quote(rel)};'
            f' echo .)" != "$(printf %s {shlex.quote(text)}; echo .)" ]; then',
            f"  who=$(as_owner {qv(author, S='scratch')})",
            f'  if [ -n "$who" ] && [ "$who" != {shlex.quote(f"remedy@{s.flake_host}")} ]; then',
            f'    echo "kept: {rel} differs from host data and was last committed by $who; '
            "remedy does not overwrite a person's commit (managed_file_conflict=keep): "
            'change host data to match, or set managed_file_conflict=overwrite" >&2',
            "    return 0",
            "  fi",
            "fi",
        ]
    return [
        '[ "$resumed" = no ] && [ -n "$scratch" ] || return 0',
        '[ "$managed" = yes ] || { echo '
        + shlex.quote(
            f"not managed: no .nix file imports {desired.MANAGED_IMPORT}; add `imports = [ "
            f"{desired.MANAGED_IMPORT} ];` to hosts/{s.flake_host}/configuration.nix"
        )
        + " >&2; return 0; }",
        *keep,
        f"as_owner {qv(commands.file_written('@S@', rel, text), S='scratch')}",
        f'if [ -n "$(as_owner {qv(changed, S="scratch")})" ]; then',
        "  as_owner " + qv(commands.file_commit("@S@", rel, message, s.flake_host), S="scratch"),
        "  commits=$((commits + 1))",
        "fi",
        "journal_write",
    ]


def _prove(s, scope) -> list[str]:
    dry = qv(commands.dry_run_toplevel("@S@", s.flake_host), S="scratch")
    build = qv(
        commands.build_toplevel("@S@", s.flake_host, s.build_max_jobs, s.build_cores),
        S="scratch",
    )
    allow = "yes" if s.allow_local_build else "no"
    local_new = q(commands.local_builds(True, [])).removesuffix(" </dev/null")
    local_old = q(commands.local_builds(False, [])).removesuffix(" </dev/null")
    gate = q(commands.memory_gate(s.min_mem_available_gb))
    return [
        '[ "$resumed" = no ] && [ -n "$scratch" ] || return 0',
        # the dry run is a whole NixOS evaluation: gated like the build
        f'{gate} || fail "MemAvailable below {s.min_mem_available_gb:g} GB: not evaluating '
        'on the host; see runbook 004"',
        f"if ! dry=$(owner_nix eval {dry} 2>&1); then",
        '  abandon "the new configuration does not evaluate: '
        '$(printf "%s" "$dry" | tail -n 1)"; return 0',
        "fi",
        # heavy_in DRY: the derivations of a dry run that would compile on the host
        "heavy_in() {",
        """  drvs=$(printf '%s\\n' "$1" | awk '/will be built/ {b = 1; next} """
        """/^[[:space:]]+\\/nix\\/store\\// {if (b) print $1; next} {b = 0}')""",
        "  heavy=",
        '  [ -n "$drvs" ] || return 0',
        # what would compile is decided by the program the deploy runs (LOCAL_BUILDS_NIX)
        f"  if nix_at_least 2 15; then found=$(as_owner {local_new} $drvs </dev/null) || return 1",
        f"  else found=$(as_owner {local_old} $drvs </dev/null) || return 1; fi",
        '  for d in $found; do heavy="$heavy ${d##*/}"; done',
        "}",
        'heavy_in "$dry" || { abandon "cannot read the derivations to build"; return 0; }',
        f'if [ -n "$heavy" ] && [ {allow} = no ]; then',
        '  abandon "the bump needs compiling on the serving host:$heavy (set '
        'allow_local_build=true, or push binaries to a cache)"; return 0',
        "fi",
        f'{gate} || fail "MemAvailable below {s.min_mem_available_gb:g} GB: not building on '
        'the host; see runbook 004"',
        f"if ! out=$(owner_nix build {build}); then",
        '  abandon "the new configuration does not build"; return 0',
        "fi",
        """built=$(printf '%s\\n' "$out" | sed -n 's/.*"out":"\\([^"]*\\)".*/\\1/p')""",
        'if ! lacks=$(system_holds "$built"); then',
        '  abandon "the built system lacks $lacks (the fix is not in)"; return 0',
        "fi",
        *_flake_checks(s, gate, allow),
        f"toplevel=$built proven_head=$(as_owner {qv(commands.head('@S@'), S='scratch')})",
        "journal_write",
        'echo "proven: $toplevel holds the desired state" >&2',
    ]


def _flake_checks(s, gate: str, allow: str) -> list[str]:
    """Host data's flake_checks for the bumped lock, as the deploy builds them: an absent
    output is said, a check that compiles is refused unless allowed, a failure abandons
    the durable path with the log's last line."""
    from remedy.core.programs.commands import CHECK_ABSENT, flake_check

    checks, _default = s.checks
    lines = []
    for check in checks:
        what = shlex.quote(f"flake check {check}")
        dry = qv(flake_check("@S@", check, dry=True), S="scratch")
        build = qv(flake_check("@S@", check, False, s.build_max_jobs, s.build_cores), S="scratch")
        lines += [
            f"if ! dry=$(owner_nix eval {dry} 2>&1); then",
            f"  if printf '%s' \"$dry\" | grep -qF {shlex.quote(CHECK_ABSENT)}; then",
            f'    echo {what}": no such output, not built" >&2',
            "  else",
            f'    abandon {what}" does not evaluate: $(printf "%s" "$dry" | tail -n 1)"; return 0',
            "  fi",
            "else",
            '  heavy_in "$dry" || { abandon "cannot read the derivations to build"; return 0; }',
            f'  if [ -n "$heavy" ] && [ {allow} = no ]; then',
            f'    abandon {what}" needs compiling on the serving host:$heavy"; return 0',
            "  fi",
            f'  {gate} || fail "MemAvailable below {s.min_mem_available_gb:g} GB: not building '
            'on the host; see runbook 004"',
            f"  if ! said=$(owner_nix check {build} 2>&1); then",
            f'    abandon {what}" failed: $(printf "%s\\n" "$said" '
            """| sed -n 's/^[[:space:]]*> //p' | tail -n 1)"; return 0""",
            "  fi",
            f'  echo {what}": passed" >&2',
            "fi",
        ]
    return lines


def _commit(s, scope) -> list[str]:
    return [
        '[ -n "$toplevel" ] || return 0',
        '[ "${commits:-0}" -gt 0 ] || { echo "no new commit in the scratch clone" >&2; return 0; }',
        f"as_owner {qv(commands.fast_forward(s.flake_dir, '@S@'), S='scratch')} || "
        '{ abandon "cannot fast-forward the checkout to the proven commits (did someone '
        'commit meanwhile? run again)"; return 0; }',
        f"lock_commit=$(as_owner {q(commands.head(s.flake_dir))})",
        "journal_write",
    ]


def _hugepages(s, scope) -> list[str]:
    from remedy.core.readings.memory import SIZES_BY_LABEL

    if not s.hugepages_target:
        return ["echo 'no hugepages_target for this host: nothing to release' >&2"]
    return [
        q(commands.release_hugepages(SIZES_BY_LABEL[label], n))
        for label, n in sorted(s.hugepages_target.items())
    ]


def _gate(s, scope) -> list[str]:
    return [
        f"{q(commands.memory_gate(s.min_mem_available_gb))} || fail "
        f'"MemAvailable below {s.min_mem_available_gb:g} GB: not restarting; see '
        'runbook 004"'
    ]


def _gate_nix(s, scope) -> list[str]:
    return [
        f"{q(commands.memory_gate(s.min_mem_available_gb))} || fail "
        f'"MemAvailable below {s.min_mem_available_gb:g} GB: not evaluating or building on '
        'the host (nothing changed); see runbook 004"'
    ]


def _drain(s, scope) -> list[str]:
    """Wait for an idle server (vLLM's /metrics) before a restart. A person runs this
    script: past drain_timeout_s it says how many requests the restart will cut, and goes
    on."""
    drain = q(commands.drain(s.server_url, s.drain_timeout_s))
    return [
        f'echo "waiting up to {s.drain_timeout_s}s for an idle server '
        f'({s.server_url}/metrics)" >&2',
        f"drained=$({drain} | tail -n 1)",
        'case "$drained" in',
        '  idle) echo "the server is idle" >&2 ;;',
        '  no-metrics*) echo "no /metrics (HTTP 404): treated as idle" >&2 ;;',
        '  unreachable*) echo "the server does not answer: nothing to drain" >&2 ;;',
        '  unknown*) echo "load unknown (${drained#unknown }): the restart goes ahead; '
        'whatever is in flight is cut" >&2 ;;',
        "  busy*) set -- $drained",
        '    echo "still $2 running, $3 waiting: the restart cuts them" >&2 ;;',
        "esac",
    ]


def _remove_override(s, scope) -> list[str]:
    argv = commands.runtime_overrides_removed(s.unit, s.override_dropin, s.override_script)
    return [
        f"removed=$({q(argv)})",
        '[ -n "$removed" ] || { echo "no runtime override to remove" >&2; return 0; }',
        'printf "%s\\n" "$removed" >&2; override_removed=yes',
        q(commands.daemon_reload()),
    ]


def _switch_run(target: str, action: str, wait_s: float) -> str:
    """``out=$(…)``: TARGET's switch-to-configuration ACTION as nixos-rebuild-ng runs it
    (in its transient unit on a host booted with systemd, its output read back from the
    journal; the last switch's unit waited for up to WAIT_S); ``$switch_exit`` its code."""
    unit, plain = (
        qv(commands.switch("@T@", action, transient, wait_s), T=target)
        for transient in (True, False)
    )
    return (
        f"if [ -d /run/systemd/system ]; then out=$({unit}); else out=$({plain}); fi; "
        f"printf '%s\\n' \"$out\" | grep -v '^{commands.SWITCH_EXIT} ' >&2; "
        f"switch_exit=$(printf '%s\\n' \"$out\" | sed -n 's/^{commands.SWITCH_EXIT} //p')"
    )


def _switch(s, scope) -> list[str]:
    unit = shlex.quote(s.unit)
    return [
        '[ -n "$toplevel" ] || { echo "nothing proven: no switch" >&2; return 0; }',
        f"pid_before={_main_pid(s)}",
        # a switch another holds (a person's nixos-rebuild): nothing durable changes
        f"holders=$({q(commands.switch_holders())} | sed -n 's/^holder //p')",
        'if [ -n "$holders" ]; then',
        '  echo "another switch holds the system: $holders; nothing durable changed: let it '
        'finish, then run again" >&2',
        "  durable_failed=yes path=fallback rc=5 switch_exit=locked; return 0",
        "fi",
        f"{qv(commands.profile_set('@T@'), T='toplevel')} || "
        '{ abandon "setting the system profile failed"; return 0; }',
        "switched=yes",
        _switch_run("toplevel", "switch", s.lock_wait_s),
        'case "$switch_exit" in',
        "  0) ;;",
        f'  4) if [ "$(systemctl is-active {unit})" = active ]; then',
        '       echo "switch exit 4: some units failed (systemctl --failed names them); '
        f'{s.unit} is active" >&2',
        "     else",
        f'       echo "switch exit 4 and {s.unit} is not active: the /run override goes '
        'back, then the rollback" >&2',
        "       durable_failed=yes path=fallback rc=1",
        "     fi ;;",
        '  100) echo "switch exit 100: durable at next boot; reboot to activate (the init '
        'interface changed); the /run override keeps live right until then" >&2',
        "       durable_failed=yes path=fallback rc=3 boot_pending=yes ;;",
        # NixOS 26.05's switch inhibitors refuse a live switch; `boot` skips that check
        """  1) if printf '%s\\n' "$out" """
        """| grep -q "^Pre-switch check .switchInhibitors. failed"; then""",
        "       echo 'the switch inhibitors refuse a live switch: making it the boot default' >&2",
        f"       {_switch_run('toplevel', 'boot', s.lock_wait_s)}",
        "     fi",
        '     if [ "$switch_exit" = 0 ]; then',
        '       echo "durable at next boot; reboot to activate (the switch inhibitors refuse '
        'a live switch); the /run override keeps live right until then" >&2',
        "       durable_failed=yes path=fallback rc=3 boot_pending=yes",
        "     else",
        '       echo "the switch FAILED (exit ${switch_exit:-none}, see above): the /run '
        'override goes back, then the rollback" >&2',
        "       durable_failed=yes path=fallback rc=1",
        "     fi ;;",
        '  *) echo "the switch FAILED (exit ${switch_exit:-none}, see above): the /run '
        'override goes back, then the rollback" >&2',
        "     durable_failed=yes path=fallback rc=1 ;;",
        "esac",
    ]


def _restart(s, scope) -> list[str]:
    # The switch restarts the unit when its file changed: restart only if nothing did,
    # and only if what runs lacks something or its override went.
    return [
        'if [ "$path" = fallback ]; then',
        '  if [ -n "${pid_at_override:-}" ] && [ "' + _main_pid(s) + '" != "$pid_at_override" ];'
        " then",
        "    echo 'already restarted onto the /run override' >&2; return 0",
        "  fi",
        '  if [ "$override_ok" = kept ] && live_holds; then',
        "    echo 'the override it ran before still runs: not restarting' >&2; return 0",
        "  fi",
        f'elif [ "{_main_pid(s)}" != "${{pid_before:-none}}" ]; then',
        "  echo 'already restarted by the switch' >&2; return 0",
        'elif [ "$override_removed" = no ] && live_holds; then',
        "  echo 'the server already runs the wanted configuration: not restarting' >&2",
        "  return 0",
        "fi",
        q(commands.restart(s.unit)),
    ]


def _verify(s, scope=()) -> list[str]:
    probe_sh = q(probe.probe_argv(s.server_url, s.model, s.probe_timeout_s, probe.DEFAULT_TRIES))
    return [
        f"deadline=$(( $(date +%s) + {s.ready_timeout_s} )); verdict=none",
        'while [ "$(date +%s)" -lt "$deadline" ]; do',
        f"  body=$({probe_sh} 2>&1 || true)",
        """  if printf '%s' "$body" | grep -q '"tool_calls": *\\[ *{' && """
        """printf '%s' "$body" | grep -q '"name": *"get_weather"'; then """
        """verdict=parsed; break; fi""",
        """  if printf '%s' "$body" | grep -q -e '<tool_call>' -e '<function='; then """
        """verdict=unparsed; break; fi""",
        """  if printf '%s' "$body" | grep -q '@@remedy-http-status=200'; then verdict=prose; fi""",
        "  sleep 2",
        "done",
        'case "$verdict" in',
        "  parsed) echo 'verified: the tool-call probe is parsed' >&2 ;;",
        "  prose) echo 'NOT VERIFIED: the model kept answering in prose; the configuration "
        "decides (not a reason to roll back)' >&2 ;;",
        '  *) if [ "$path" = durable ]; then',
        '       echo "verification FAILED ($verdict): the /run override goes back, then '
        'the rollback" >&2',
        "       durable_failed=yes path=fallback rc=1",
        "     else",
        f'       fail "tool calls are $verdict on {s.server_url} after {s.ready_timeout_s}s"',
        "     fi ;;",
        "esac",
    ]


def _rollback(s, scope) -> list[str]:
    revert = qv(
        commands.lock_commit_revert(s.flake_dir, "@L@", s.flake_host, "@B@"),
        L="lock_commit",
        B="base_head",
    )
    gate = q(commands.memory_gate(s.min_mem_available_gb))
    return [
        '[ "$switched" = yes ] || { echo "nothing was switched: no rollback" >&2; return 0; }',
        'if [ "${boot_pending:-}" = yes ]; then',
        '  echo "the new generation is the boot default (switch exit 100, or the switch '
        'inhibitors): kept" >&2; return 0',
        "fi",
        f'if [ "$(readlink -f {commands.SYSTEM_PROFILE})" != "$recorded_profile" ]; then',
        f"  {qv(commands.profile_set('@P@'), P='recorded_profile')} "
        "|| echo 'ROLLBACK FAILED: could not set the profile back' >&2",
        "fi",
        # as --rollback: always the restored generation's switch-to-configuration, so the
        # boot entry is the recorded generation again; `boot` when nothing else moved or
        # the memory gate refuses the restart an activation causes
        "act=boot",
        'if [ "$(readlink -f /run/current-system)" != "$recorded_current" ]; then',
        f"  if {gate}; then act=switch; else",
        "    echo 'not activating the recorded generation (MemAvailable): its boot entry "
        "is set' >&2",
        "  fi",
        "fi",
        'if [ "$act" = switch ] && [ "$recorded_profile" != "$recorded_current" ]; then',
        f"  {_switch_run('recorded_profile', 'boot', s.lock_wait_s)}",
        '  [ "$switch_exit" = 0 ] || echo "ROLLBACK FAILED: the boot entry" >&2',
        f"  {_switch_run('recorded_current', 'test', s.lock_wait_s)}",
        'elif [ "$act" = switch ]; then',
        f"  {_switch_run('recorded_profile', 'switch', s.lock_wait_s)}",
        "else",
        f"  {_switch_run('recorded_profile', 'boot', s.lock_wait_s)}",
        "fi",
        'case "${switch_exit:-}" in 0|4) ;; *) echo "ROLLBACK FAILED: switch-to-configuration '
        '$act of the recorded generation exited ${switch_exit:-none}" >&2 ;; esac',
        'if [ -n "$lock_commit" ]; then',
        f"  as_owner {revert} || echo 'could not revert the lock commit' >&2",
        "fi",
    ]


def _override_written(s, carried: desired.Carried | None = None) -> list[str]:
    carried = carried or desired.Carried()
    env = {**carried.env, **s.required_env}
    unit = f"/etc/systemd/system/{s.unit}"
    dirs = [p.rsplit("/", 1)[0] for p in (s.override_script, s.override_dropin)]
    return [
        # loaded, the override is what the next start runs, by systemd or a person, with
        # no gate: write it only when the gate lets the restart that takes it happen
        f"{q(commands.memory_gate(s.min_mem_available_gb))} || "
        f'fail "MemAvailable below {s.min_mem_available_gb:g} GB: the /run override is not '
        'written (pending), so no later start takes it without the gate; see runbook 004"',
        f'store_script=$(flags_script "$(exec_path {shlex.quote(unit)})")',
        f'[ -n "$store_script" ] || fail "no ExecStart in {unit}"',
        q(commands.writable(*dirs)) + ' || fail "the /run override cannot be written (see above)"',
        q(commands.make_dir(s.override_script.rsplit("/", 1)[0])),
        qv(
            commands.written_atomically(
                s.override_script,
                "0755",
                commands.override_script_argv("@S@", s.tool_call_parser, s.required_env),
                "root:root",
            ),
            S="store_script",
        ),
        q(commands.make_dir(s.override_dropin.rsplit("/", 1)[0])),
        q(
            commands.written_atomically(
                s.override_dropin,
                "0644",
                commands.text_argv(
                    commands.dropin_text(s.override_script, env, carried.properties)
                ),
                "root:root",
            )
        ),
        q(commands.daemon_reload()),
        f"pid_at_override={_main_pid(s)}",
        f'[ "$(systemctl show -P ExecStart {shlex.quote(s.unit)} '
        f'| sed -n "s/^{{ path=\\([^ ;]*\\).*/\\1/p")" '
        f'= {shlex.quote(s.override_script)} ] || fail "another drop-in shadows '
        f'{s.override_dropin}: see systemctl show -p DropInPaths {s.unit}"',
    ]


def _sysctls_set(carried: desired.Carried) -> list[str]:
    """Each data setting's sysctl the fallback carries, set with sysctl -w where its live
    value differs (its words one space apart, as /proc/sys's tabs are read)."""
    out = []
    for key, value in sorted(carried.sysctls.items()):
        now = f"$(sysctl -n {shlex.quote(key)} 2>/dev/null | awk '{{$1 = $1; print}}')"
        out.append(
            f'[ "{now}" = {shlex.quote(value)} ] || {q(commands.sysctl_written(key, value))} '
            f"|| echo {shlex.quote(f'could not set {key}={value} (see above)')} >&2"
        )
    return out


def _write_override(s, scope) -> list[str]:
    """The deploy's step: the data settings' sysctls (where they differ), then the /run
    override with the data settings' variables and properties in its drop-in (every one
    in scope: the script reads no snapshot; kept when it already carries them)."""
    carried = desired.fallback_carried(s, scope)
    lines = _override_written(s, carried)
    # what it carries, judged by effect as live_holds judges the rest: each variable in
    # the server's environment, each property in a file of the unit systemd reads
    pid, unit = _main_pid(s), shlex.quote(s.unit)
    lines_in = "".join(
        f" && tr '\\0' '\\n' < /proc/{pid}/environ | grep -qx -- {shlex.quote(f'{k}={v}')}"
        for k, v in sorted(carried.env.items())
    ) + "".join(
        f" && systemctl cat {unit} 2>/dev/null | grep -Fqx -- {shlex.quote(f'{k}={v}')}"
        for k, v in sorted(carried.properties.items())
    )
    return [
        *_sysctls_set(carried),
        f'if [ "$(systemctl show -P ExecStart {shlex.quote(s.unit)} '
        f"| sed -n 's/^{{ path=\\([^ ;]*\\).*/\\1/p')\" = {shlex.quote(s.override_script)} ] "
        f"&& live_holds{lines_in}; then",
        "  echo 'the /run override is already in place and runs the wanted configuration' >&2",
        "  override_ok=kept; return 0",
        "fi",
        *lines,
        "override_ok=yes",
    ]


def _scratch_removed(s, scope) -> list[str]:
    return [
        '[ -n "$scratch" ] || return 0',
        'as_owner rm -rf -- "$scratch" </dev/null; scratch=',
    ]


def _outcome(s, scope) -> list[str]:
    """The run's outcome in one line, as the deploy's (remedy.core.run.outcome): the path, the
    bump's revs, what holds tool calling, the restarts."""
    return [
        'p=$path; [ "$durable_failed" = yes ] && [ "$path" = fallback ] && p=durable+fallback',
        '[ "${boot_pending:-no}" = yes ] && p="durable at next boot"',
        f'restarts=0; [ "{_main_pid(s)}" = "${{pid_at_start:-}}" ] || restarts=1',
        'line="outcome: path $p"',
        '[ "${commits:-0}" -gt 0 ] && [ -n "${new_rev:-}" ] && '
        f'line="$line; {s.flake_input} ${{o:-?}} -> $(printf %s "$new_rev" | cut -c1-12)"',
        """if [ "$path" = fallback ] && [ "$override_ok" != no ]; then line="$line; VOLATILE: """
        """tool calling rests on the /run override until the durable fix is deployed; a """
        """reboot reverts it"; fi""",
        'echo "$line; restarts $restarts" >&2',
        '[ "$rc" -eq 0 ] || echo "the durable path FAILED (see above); the fallback holds" >&2',
        'rm -f "$journal"  # the run ended: nothing left to finish',
    ]


RENDERERS = {
    "nix.flake_input_updated": _bump,
    "nix.managed_file_written": _managed,
    "nix.fix_proven": _prove,
    "nix.flake_lock_committed": _commit,
    "memory.hugepages_reduced": _hugepages,
    "memory.headroom_gated": _gate,
    "serving.drained": _drain,
    "serving.runtime_override_removed": _remove_override,
    "serving.runtime_carriers_removed": lambda s, scope: [
        "echo 'the /run drop-ins that carry data settings (remedy adopt) stay: this script "
        "does not read what they carry; a reboot removes them, or run the deploy' >&2"
    ],
    "nix.system_switched": _switch,
    "serving.restarted": _restart,
    "serving.toolcalling_verified": _verify,
    "serving.runtime_override_written": _write_override,
    "nix.system_rolled_back": _rollback,
    "nix.scratch_removed": _scratch_removed,
    "serving.outcome_reported": _outcome,
}


def _guard(op: str, stage: str) -> str | None:
    if stage == DURABLE:
        return '[ "$path" = durable ]'
    if op == "nix.system_rolled_back":
        return '[ "$durable_failed" = yes ]'
    if op == "serving.runtime_override_written":
        return '[ "$path" = fallback ]'
    return '[ "$path" = fallback ] && [ "$override_ok" != no ]'


# Host data that changes what the deploy does but that this script, run by a person,
# does not carry out: said by name at its start when set (tests/unit/test_renderers_agree).
NOT_CARRIED = {
    "unattended": "a person runs this script; unattended runs are the schedule's "
    "(remedy converge --unattended)",
    "restart_window": "the person who runs this script is the restart policy: it switches "
    "and restarts as soon as the fix needs it; run the deploy to wait for a window",
    "restart_urgency": "the person who runs this script is the restart policy: it restarts "
    "whatever each setting's urgency; run the deploy to defer a restart",
    "restart": "the person who runs this script is the restart policy: it restarts as soon "
    "as the fix needs it",
    "build_host": "this script evaluates and builds on this host, memory-gated "
    "(min_mem_available_gb) and bounded as the deploy does without a builder; run the "
    "deploy to build on the builder",
    "builder_key": "this script builds on this host (see build_host)",
    "copy_signed": "this script builds on this host: nothing is copied",
}


def not_carried(s) -> list[str]:
    """One line per host-data key in NOT_CARRIED that differs from its default."""
    from dataclasses import fields

    defaults = {f.name: f for f in fields(s)}
    out = []
    for key, why in NOT_CARRIED.items():
        f = defaults[key]
        default = f.default_factory() if callable(f.default_factory) else f.default
        value = getattr(s, key)
        if value != default:
            out.append(
                "echo "
                + shlex.quote(f"host data {key}={value!r}: not carried out by this script: {why}")
                + " >&2"
            )
    return out


def render_flow(
    s,
    scope,
    named: set[str],
    head: list[str],
    allowed_signers: str | None = None,
    who: tuple[str, str, list[str]] = ("cfx-llm2", "001", []),
) -> list[str]:
    """The body of a flow runbook's script: HEAD (prelude, lock, owner), then the step
    list's steps the runbook names (NAMED), each a function behind its stage's guard."""
    host, runbook, issues = who
    out = [
        *head,
        *not_carried(s),
        *_manual_record(s, host, runbook, issues),
        # the record on any exit (a failed check exits at once): then the lock goes
        'trap \'st=$?; manual_record "$st"; rm -f "$holder"\' EXIT',
        *_journal(s),
        *_system_holds(s, scope),
        *_live_holds(s),
        *_owner_nix(s),
        "abandon() {",
        '  printf "durable path abandoned: %s\\n" "$*" >&2',
        "  durable_failed=yes path=fallback",
        "}",
        *_plan(s, scope),
    ]
    n = 0
    for t in TEMPLATES:
        if t.op not in named and t.stage != ALWAYS:
            continue
        n += 1
        if t.key == "bump":
            lines = _bump(s, scope, allowed_signers)
        elif t.key == "gate_nix":
            lines = _gate_nix(s, scope)
        else:
            lines = RENDERERS[t.op](s, scope)
        out.append(f"step_{n}() {{")
        out += ["  " + line for line in [f"say {shlex.quote(f'{n}. {t.title}')}", *lines]]
        out.append("}")
        guard = _guard(t.op, t.stage) if t.stage != ALWAYS else None
        out.append(f"if {guard}; then step_{n}; fi" if guard else f"step_{n}")
    out.append("echo 'done' >&2")
    out.append('exit "$rc"')
    return out
