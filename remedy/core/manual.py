"""Emergency manual recovery: a runbook as a POSIX shell script for a person with SSH.

    remedy runbooks show 001 --manual --inventory inventory/production.py --host cfx-llm2 > r.sh
    ssh root@cfx-llm2 sh -s < r.sh              # the durable path
    ssh root@cfx-llm2 sh -s -- fallback < r.sh  # the /run fallback

Every remote command comes from ``remedy.core.commands``, the argv builders the
deploy's operations use, joined with POSIX quoting; the host's data fills in the
values (defaults from ``remedy.core.settings`` without an inventory). The script
stops at the first failed check (``set -eu``), memory-gates every restart and
ends with the tool-call probe.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from remedy.core import commands, desired, probe
from remedy.core import hostlock as host_lock
from remedy.core import settings as settings_mod
from remedy.core.memory import SIZES_BY_LABEL
from remedy.core.nix import NixInfo

DURABLE_ONLY = {
    "nix.flake_input_updated",
    "nix.managed_file_written",
    "nix.fix_proven",
    "nix.flake_lock_committed",
    "nix.system_switched",
    "serving.runtime_override_removed",
}
FALLBACK_ONLY = {"serving.runtime_override_written"}
AFTER_DURABLE_FAILURE = {"nix.system_rolled_back"}

PRELUDE = r"""set -eu
path=${1:-durable}
case "$path" in durable|fallback) ;; *) echo "usage: sh -s -- [durable|fallback]" >&2; exit 2;; esac
durable_failed=no switched=no rc=0 lock_commit=
say() { printf '\n== %s\n' "$*" >&2; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
nix_at_least() {  # nix_at_least MAJOR MINOR
  v=$(nix --version | sed -n 's/.* \([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p')
  set -- "$1" "$2" $v
  [ "${3:-0}" -gt "$1" ] || { [ "${3:-0}" -eq "$1" ] && [ "${4:-0}" -ge "$2" ]; }
}
# git and nix run as the checkout's owner: root's git refuses a person's repo, and root
# would leave root-owned files in it.
as_owner() {
  if [ "$owner" = "$(id -un)" ]; then "$@"
  else runuser -u "$owner" -- env -C / HOME="${home:-/}" "$@"
  fi
}
# The script that holds --tool-call-parser: $1, or the store script it execs.
flags_script() {
  if grep -q -- --tool-call-parser "$1"; then echo "$1"; return 0; fi
  t=$(sed -n '@EXEC_TARGET_SED@' "$1" | head -n 1)
  echo "${t:-$1}"
}
exec_path() { sed -n '@EXEC_PATH_SED@' "$1" | tail -n 1; }""".replace(
    "@EXEC_TARGET_SED@", commands.EXEC_TARGET_SED
).replace("@EXEC_PATH_SED@", commands.EXEC_PATH_SED)


def q(argv: list[str]) -> str:
    # `ssh HOST sh -s < FILE` feeds the script on stdin: no command may read from it.
    return shlex.join(argv) + " </dev/null"


def qv(argv: list[str], **variables: str) -> str:
    """q(ARGV) where the placeholders @NAME@ become the shell variables given."""
    text = q(argv)
    for key, var in variables.items():
        text = text.replace(shlex.quote(f"@{key}@"), f'"${var}"')
    return text


def _lock(s, runbook_id: str) -> list[str]:
    """The host lock every remedy run takes (remedy.lock): one run per host at a time."""
    lock, holder = host_lock.lock_path(s.unit), host_lock.holder_path(s.unit)
    who = f"the manual script of runbook {runbook_id}"
    return [
        f"lock={shlex.quote(lock)} holder={shlex.quote(holder)}",
        'exec 9>>"$lock"',
        "if ! flock -n 9; then",
        f'  echo "waiting up to {s.lock_wait_s:g}s for $lock, held by: '
        '$(cat "$holder" 2>/dev/null || echo "(no holder recorded)")" >&2',
        f'  flock -w {s.lock_wait_s:g} 9 || fail "another remedy run holds $lock: '
        '$(cat "$holder" 2>/dev/null)"',
        "fi",
        f'printf \'pid %s on %s since %s: {who}\\n\' "$$" "$(hostname)" '
        '"$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$holder"',
        "trap 'rm -f \"$holder\"' EXIT",
    ]


def _owner(s) -> list[str]:
    d = shlex.quote(s.flake_dir)
    return [
        f"owner=$(stat -c %U -- {d} 2>/dev/null) || owner=$(id -un)",
        """home=$(getent passwd "$owner" | cut -d: -f6)""",
    ]


def _managed_scope(scope) -> bool:
    return any(desired.BY_KEY[k].durable == desired.MANAGED_FILE for k in scope)


def _abandon(s, scope) -> list[str]:
    """The durable path gives up: remedy's uncommitted files back, the fallback takes over."""
    lines = [
        "abandon() {",
        '  printf "durable path abandoned: %s\\n" "$*" >&2',
        f"  as_owner {q(commands.lock_revert(s.flake_dir))} || true",
    ]
    if _managed_scope(scope):
        revert = q(commands.managed_revert(s.flake_dir, s.managed_file))
        lines.append(f"  as_owner {revert} || true")
    return [*lines, "  durable_failed=yes path=fallback", "}"]


def _bump(s) -> list[str]:
    new = commands.update_input(["nix", "flake", "update"], s.flake_dir, s.flake_input)
    old = commands.update_input(
        NixInfo("2.18", ["nix", "flake", "lock", "--update-input"]).update_input_argv,
        s.flake_dir,
        s.flake_input,
    )
    return [
        "recorded_current=$(readlink -f /run/current-system)",
        f"recorded_profile=$(readlink -f {commands.SYSTEM_PROFILE})",
        'if [ "$recorded_current" != "$recorded_profile" ]; then',
        '  abandon "the system profile ($recorded_profile) differs from /run/current-system '
        '($recorded_current): reconcile them by hand first"; return 0',
        "fi",
        f"if nix_at_least 2 19; then bump() {{ as_owner {q(new)}; }}; "
        f"else bump() {{ as_owner {q(old)}; }}; fi",
        "if ! out=$(bump 2>&1); then",
        f'  abandon "bumping {s.flake_input} failed: $(printf "%s" "$out" | tail -n 1)"; return 0',
        "fi",
    ]


def _managed(s, scope) -> list[str]:
    text = desired.managed_nix(s, scope)
    if text is None:
        return [f"echo 'no setting in scope lives in {s.managed_file}' >&2"]
    d = shlex.quote(s.flake_dir)
    target = shlex.quote(f"{s.flake_dir}/{s.managed_file}")
    importers = (
        f"grep -rlF --include='*.nix' -e {shlex.quote(desired.MANAGED_IMPORT)} {d} "
        f"| grep -vxF {target}"
    )
    return [
        f"if {importers} >/dev/null; then",
        "  managed=yes",
        f"  as_owner {q(commands.file_written(s.flake_dir, s.managed_file, text))}",
        f"  as_owner {q(commands.git(s.flake_dir, 'add', '--', s.managed_file))}",
        "else",
        "  managed=no",
        f"  echo {shlex.quote('not managed: ' + _import_note(s))} >&2",
        "fi",
    ]


def _import_note(s) -> str:
    return (
        f"no .nix file imports {desired.MANAGED_IMPORT}; add `imports = [ "
        f"{desired.MANAGED_IMPORT} ];` to hosts/{s.flake_host}/configuration.nix"
    )


def _prove(s, scope) -> list[str]:
    unit_file = f'"$toplevel"/etc/systemd/system/{shlex.quote(s.unit)}'
    dry = commands.dry_run_toplevel(s.flake_dir, s.flake_host)
    allow = "yes" if s.allow_local_build else "no"
    show_new = qv(commands.show_derivations(True, ["@D@"]), D="d")
    show_old = qv(commands.show_derivations(False, ["@D@"]), D="d")
    lines = [
        # the dry run is a whole NixOS evaluation: gated like the build
        f"{q(commands.memory_gate(s.min_mem_available_gb))} || "
        f'{{ abandon "memory"; fail "MemAvailable below '
        f'{s.min_mem_available_gb:g} GB: not evaluating on the host; see runbook 004"; }}',
        f"if ! dry=$(as_owner {q(dry)} 2>&1); then",
        '  abandon "the new configuration does not evaluate: '
        '$(printf "%s" "$dry" | tail -n 1)"; return 0',
        "fi",
        # the derivations `nix build --dry-run` lists under "will be built"
        """drvs=$(printf '%s\\n' "$dry" | awk '/will be built/ {b = 1; next} """
        """/^[[:space:]]+\\/nix\\/store\\// {if (b) print $1; next} {b = 0}')""",
        "heavy=",
        "for d in $drvs; do",
        f"  if nix_at_least 2 15; then j=$(as_owner {show_new}); else j=$(as_owner {show_old}); fi",
        # a config derivation (preferLocalBuild) or a text file (writeTextFile's family,
        # writeShellApplication included: text passed as a file, moved into place) is
        # no compile; anything else is
        """  printf '%s' "$j" | grep -q '"preferLocalBuild": *"1"' && continue""",
        """  printf '%s' "$j" | grep -q '"passAsFile": *"[^"]*text' \\""",
        """    && printf '%s' "$j" | grep -q '"destination":' \\""",
        """    && printf '%s' "$j" | grep -qF '$textPath' && continue""",
        '  heavy="$heavy ${d##*/}"',
        "done",
        f'if [ -n "$heavy" ] && [ {allow} = no ]; then',
        '  abandon "the bump needs compiling on the serving host:$heavy (set '
        'allow_local_build=true, or push binaries to a cache)"; return 0',
        "fi",
        f"{q(commands.memory_gate(s.min_mem_available_gb))} || "
        f'{{ abandon "memory"; fail "MemAvailable below '
        f'{s.min_mem_available_gb:g} GB: not building on the host; see runbook 004"; }}',
        "if ! out=$(as_owner "
        f"{q(commands.build_toplevel(s.flake_dir, s.flake_host, s.build_max_jobs, s.build_cores))}"
        "); then",
        '  abandon "the new configuration does not build"; return 0',
        "fi",
        """toplevel=$(printf '%s\\n' "$out" | sed -n 's/.*"out":"\\([^"]*\\)".*/\\1/p')""",
        f"unit_file={unit_file}",
        'exec_script=$(exec_path "$unit_file")',
        'script=$(flags_script "$exec_script")',
    ]
    # The built system must hold every setting in scope: desired.SETTINGS judges.
    for key in scope:
        m = desired.BY_KEY[key]
        if m.check_sh is None:
            continue
        guard = '[ "${managed:-no}" = no ] || ' if m.durable == desired.MANAGED_FILE else ""
        want = f"{m.label} {m.desired(s)}"
        lines += [
            f"if ! {{ {guard}{m.check_sh(s)}; }}; then",
            f"  abandon {shlex.quote(f'the built system lacks {want} ({m.issue})')}; return 0",
            "fi",
        ]
    lines.append('echo "proven: $toplevel holds the desired state" >&2')
    return lines


def _commit(s, scope) -> list[str]:
    paths = ["flake.lock"] + ([s.managed_file] if _managed_scope(scope) else [])
    message = (
        f"remedy: bump {s.flake_input} and the managed settings (tt-stack#49)\n\n"
        f"Deploys the tool-call parser fix (tt-stack#34, tt-stack#44) by hand (remedy "
        f"runbook {'006' if _managed_scope(scope) else '001'})."
    )
    commit = [
        *commands.git(s.flake_dir, "-c", "user.name=remedy"),
        "-c",
        f"user.email=remedy@{s.flake_host}",
        "commit",
        "-q",
        "-m",
        message,
        "--",
        *paths,
    ]
    return [
        f"if ! as_owner {q(commands.git(s.flake_dir, 'diff', '--quiet', 'HEAD', '--', *paths))}"
        "; then",
        f"  as_owner {q(commit)}",
        f"  lock_commit=$(as_owner {q(commands.head(s.flake_dir))})",
        "fi",
    ]


def _hugepages(s) -> list[str]:
    if not s.hugepages_target:
        return ["echo 'no hugepages_target for this host: nothing to release' >&2"]
    return [
        q(commands.release_hugepages(SIZES_BY_LABEL[label], n))
        for label, n in sorted(s.hugepages_target.items())
    ]


def _gate(s) -> list[str]:
    return [
        f"{q(commands.memory_gate(s.min_mem_available_gb))} || fail "
        f'"MemAvailable below {s.min_mem_available_gb:g} GB: not restarting; see '
        'runbook 004"'
    ]


def _remove_override(s) -> list[str]:
    return [
        q(commands.runtime_overrides_removed(s.unit, s.override_dropin, s.override_script)),
        q(commands.daemon_reload()),
    ]


def _main_pid(s) -> str:
    return f"$(systemctl show -P MainPID {shlex.quote(s.unit)})"


def _switch(s) -> list[str]:
    return [
        f"pid_before={_main_pid(s)}",
        f"{qv(commands.profile_set('@T@'), T='toplevel')} || "
        '{ abandon "setting the system profile failed"; return 0; }',
        "switched=yes",
        f"if ! {qv(commands.activate('@T@'), T='toplevel')}; then",
        '  echo "the switch FAILED (see above): the /run override goes back, then the '
        'rollback" >&2',
        "  durable_failed=yes path=fallback rc=1",
        "fi",
    ]


def _restart(s) -> list[str]:
    # The switch restarts the unit when its file changed: restart only if it did not. In
    # the fallback, a rollback that restarted the server onto the override is enough.
    return [
        'if [ "$path" = fallback ] && [ "${pid_at_override:-}" != "" ] '
        f'&& [ "{_main_pid(s)}" != "$pid_at_override" ]; then',
        "  echo 'already restarted onto the /run override' >&2",
        f'elif [ "{_main_pid(s)}" = "${{pid_before:-none}}" ] || [ "$path" = fallback ]; then',
        f"  {q(commands.restart(s.unit))}",
        "else",
        "  echo 'already restarted by the switch' >&2",
        "fi",
    ]


def _verify(s) -> list[str]:
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


def _rollback(s) -> list[str]:
    revert = qv(commands.lock_commit_revert(s.flake_dir, "@L@", s.flake_host), L="lock_commit")
    return [
        '[ "$switched" = yes ] || { echo "nothing was switched: no rollback" >&2; return 0; }',
        f'if [ "$(readlink -f {commands.SYSTEM_PROFILE})" != "$recorded_profile" ]; then',
        f"  {qv(commands.profile_set('@P@'), P='recorded_profile')} "
        "|| echo 'ROLLBACK FAILED: could not set the profile back' >&2",
        "fi",
        'if [ "$(readlink -f /run/current-system)" != "$recorded_current" ]; then',
        f"  {q(commands.memory_gate(s.min_mem_available_gb))} && "
        f"{qv(commands.activate('@C@'), C='recorded_current')} "
        "|| echo 'ROLLBACK FAILED: could not activate the recorded generation' >&2",
        "fi",
        'if [ -n "$lock_commit" ]; then',
        f"  as_owner {revert} || echo 'could not revert the lock commit' >&2",
        "fi",
    ]


def _write_override(s) -> list[str]:
    unit = f"/etc/systemd/system/{s.unit}"
    return [
        # loaded, the override is what the next start runs, by systemd or a person, with
        # no gate: write it only when the gate lets the restart that takes it happen
        f"{q(commands.memory_gate(s.min_mem_available_gb))} || "
        f'fail "MemAvailable below {s.min_mem_available_gb:g} GB: the /run override is not '
        'written (pending), so no later start takes it without the gate; see runbook 004"',
        f'store_script=$(flags_script "$(exec_path {shlex.quote(unit)})")',
        f'[ -n "$store_script" ] || fail "no ExecStart in {unit}"',
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
                commands.text_argv(commands.dropin_text(s.override_script, s.required_env)),
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


def _outcome(s) -> list[str]:
    return [
        """if [ "$path" = fallback ]; then echo 'VOLATILE: tool calling rests on the /run """
        """override until the durable fix is deployed; a reboot reverts it' >&2; fi""",
        '[ "$rc" -eq 0 ] || echo "the durable path FAILED (see above); the fallback holds" >&2',
    ]


RENDERERS: dict[str, Callable] = {
    "nix.flake_input_updated": _bump,
    "nix.managed_file_written": _managed,
    "nix.fix_proven": _prove,
    "nix.flake_lock_committed": _commit,
    "memory.hugepages_reduced": _hugepages,
    "memory.headroom_gated": _gate,
    "serving.runtime_override_removed": _remove_override,
    "nix.system_switched": _switch,
    "serving.restarted": _restart,
    "serving.toolcalling_verified": _verify,
    "nix.system_rolled_back": _rollback,
    "serving.runtime_override_written": _write_override,
    "serving.outcome_reported": _outcome,
}


def render(runbook, host_data: dict) -> str:
    """The runbook's steps as one POSIX shell script, values from HOST_DATA."""
    data = dict(host_data)
    host = data.pop("_host_name", None) or data.get("flake_host") or "cfx-llm2"
    s = settings_mod.from_host_data(host, data)
    rb = runbook.data
    scope = desired.ALL if rb.get("deploy") == "deploys/converge.py" else desired.TOOL_CALLING
    head = [
        "#!/bin/sh",
        f"# Runbook {rb['id']}: {rb['title']}",
        f"# Issues: {', '.join(rb['issues'])}. Host: {host}.",
        "# Generated by `remedy runbooks show --manual` from remedy/core/commands.py, the",
        "# same command definitions the deploy's operations use.",
        "# Run:  ssh root@HOST sh -s < FILE               (durable path)",
        "#       ssh root@HOST sh -s -- fallback < FILE   (the /run fallback)",
        PRELUDE,
        *_lock(s, rb["id"]),
        *_owner(s),
    ]
    named = runbook.step_operations()
    if "nix.flake_input_updated" in named:
        # a flow runbook: the deploy's own step list, scratch clone and journal
        from remedy.core.manual_flow import render_flow

        return "\n".join(render_flow(s, scope, named, head)) + "\n"
    out = [*head, *_abandon(s, scope)]
    section = "durable"
    has_paths = any(st.get("operation") in DURABLE_ONLY | FALLBACK_ONLY for st in rb["steps"])
    for n, step in enumerate(rb["steps"], 1):
        op = step.get("operation")
        if op in FALLBACK_ONLY:
            section = "fallback"
        if op:
            render_step = RENDERERS.get(op)
            takes_scope = render_step in (_managed, _prove, _commit)
            lines = (
                (render_step(s, scope) if takes_scope else render_step(s))
                if op in RENDERERS
                else [f"echo 'step {step['id']}: run the deploy operation {op}' >&2"]
            )
        else:
            lines = list(step["manual"]["commands"])
        if op in AFTER_DURABLE_FAILURE:
            guard = '[ "$durable_failed" = yes ]'
        elif has_paths and op not in (None, "serving.outcome_reported"):
            guard = f'[ "$path" = {"durable" if op in DURABLE_ONLY else section} ]'
        else:
            guard = None
        # Each step is a function, so a durable step that gives up can `return` and
        # let the fallback steps run.
        title = f"{n}. {step['id']}"
        out.append(f"step_{n}() {{")
        out += ["  " + line for line in [f"say {shlex.quote(title)}", *lines]]
        out.append("}")
        out.append(f"if {guard}; then step_{n}; fi" if guard else f"step_{n}")
    out.append("echo 'done' >&2")
    out.append('exit "$rc"')
    return "\n".join(out) + "\n"
