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

from remedy.core import commands
from remedy.core import settings as settings_mod
from remedy.core.memory import SIZES_BY_LABEL
from remedy.core.nix import NixInfo

DURABLE_ONLY = {
    "nix.flake_input_updated",
    "nix.fix_proven",
    "nix.flake_lock_committed",
    "nix.system_switched",
    "nix.system_rolled_back",
    "serving.runtime_override_removed",
}
FALLBACK_ONLY = {"serving.runtime_override_written"}

PRELUDE = r"""set -eu
path=${1:-durable}
case "$path" in durable|fallback) ;; *) echo "usage: sh -s -- [durable|fallback]" >&2; exit 2;; esac
say() { printf '\n== %s\n' "$*" >&2; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
nix_at_least_2_19() {
  v=$(nix --version | sed -n 's/.* \([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p')
  set -- $v
  [ "${1:-0}" -gt 2 ] || { [ "${1:-0}" -eq 2 ] && [ "${2:-0}" -ge 19 ]; }
}"""


def q(argv: list[str]) -> str:
    # `ssh HOST sh -s < FILE` feeds the script on stdin: no command may read from it.
    return shlex.join(argv) + " </dev/null"


def _bump(s) -> list[str]:
    new = commands.update_input(["nix", "flake", "update"], s.flake_dir, s.flake_input)
    old = commands.update_input(
        NixInfo("2.18", ["nix", "flake", "lock", "--update-input"]).update_input_argv,
        s.flake_dir,
        s.flake_input,
    )
    return [
        f"old_rev=$(git -C {shlex.quote(s.flake_dir)} rev-parse HEAD)",
        f"if nix_at_least_2_19; then {q(new)}; else {q(old)}; fi",
    ]


def _prove(s) -> list[str]:
    unit_file = f'"$toplevel"/etc/systemd/system/{shlex.quote(s.unit)}'
    revert = q(commands.lock_revert(s.flake_dir))
    again = "flake.lock reverted; run this script again with: sh -s -- fallback"
    lines = [
        f"out=$({q(commands.build_toplevel(s.flake_dir, s.flake_host))}) || "
        f'{{ {revert}; fail "the new configuration does not build; {again}"; }}',
        """toplevel=$(printf '%s\\n' "$out" | sed -n 's/.*"out":"\\([^"]*\\)".*/\\1/p')""",
        f"""script=$(sed -n 's/^ExecStart=//p' {unit_file} | tail -n 1)""",
        f"if ! grep -q -- {shlex.quote('--tool-call-parser ' + s.tool_call_parser)} "
        '"$script"; then',
        f"  {revert}",
        f'  fail "the bumped {s.flake_input} still builds $(grep -o -- '
        f'\'--tool-call-parser [A-Za-z0-9_]*\' "$script"): the fix is not in; {again}"',
        "fi",
    ]
    for key, value in sorted(s.required_env.items()):  # exported by the script or the unit
        lines += [
            f'if ! grep -qs -- {shlex.quote(f"{key}={value}")} "$script" {unit_file}; then',
            f"  {revert}",
            f'  fail "the bumped {s.flake_input} does not set {key}={value}; {again}"',
            "fi",
        ]
    lines.append(f'echo "proven: $toplevel runs --tool-call-parser {s.tool_call_parser}" >&2')
    return lines


def _commit(s) -> list[str]:
    message = (
        f"flake.lock: bump {s.flake_input} (tt-stack#49)\n\nDeploys the tool-call "
        f"parser fix (tt-stack#34, tt-stack#44) by hand (remedy runbook 001)."
    )
    return [
        f"if ! git -C {shlex.quote(s.flake_dir)} diff --quiet -- flake.lock; then",
        f"  {q(commands.lock_commit(s.flake_dir, message, s.flake_host))}",
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
        q(commands.remove_files(s.override_dropin, s.override_script)),
        q(commands.daemon_reload()),
    ]


def _main_pid(s) -> str:
    return f"$(systemctl show -P MainPID {shlex.quote(s.unit)})"


def _switch(s) -> list[str]:
    return [f"pid_before={_main_pid(s)}", q(commands.switch(s.flake_dir, s.flake_host))]


def _restart(s) -> list[str]:
    # The switch restarts the unit when its file changed: restart only if it did not.
    return [
        f'if [ "{_main_pid(s)}" = "${{pid_before:-none}}" ] || [ "$path" = fallback ]; '
        f"then {q(commands.restart(s.unit))}; "
        "else echo 'already restarted by nixos-rebuild switch' >&2; fi"
    ]


def _verify(s) -> list[str]:
    curl = q(commands.probe_curl(s.server_url, s.model, s.probe_timeout_s))
    return [
        f"deadline=$(( $(date +%s) + {s.ready_timeout_s} )); ok=no",
        'while [ "$(date +%s)" -lt "$deadline" ]; do',
        f"  body=$({curl} 2>/dev/null || true)",
        """  if printf '%s' "$body" | grep -q '"tool_calls": *\\[ *{' && """
        """printf '%s' "$body" | grep -q '"name": *"get_weather"'; then ok=yes; break; fi""",
        """  if printf '%s' "$body" | grep -q '"tool_calls": *\\[\\]'; then """
        """fail "tool calls come back unparsed (HTTP 200, tool_calls: [])"; fi""",
        "  sleep 2",
        "done",
        f'[ "$ok" = yes ] || fail "no parsed tool call from {s.server_url} '
        f'within {s.ready_timeout_s}s"',
        "echo 'verified: the tool-call probe is parsed' >&2",
    ]


def _rollback(s) -> list[str]:
    return [
        "# only if verification failed after the switch:",
        f"# {q(commands.rollback())}   then run this script with: sh -s -- fallback",
    ]


def _write_override(s) -> list[str]:
    store = "store_script"
    tmp_script = s.override_script + ".remedy-tmp"
    tmp_dropin = s.override_dropin + ".remedy-tmp"
    return [
        f"{store}=$(sed -n 's/^ExecStart=//p' /etc/systemd/system/{shlex.quote(s.unit)} "
        "| tail -n 1)",
        f'[ -n "${store}" ] || fail "no ExecStart in /etc/systemd/system/{s.unit}"',
        q(commands.make_dir(s.override_script.rsplit("/", 1)[0])),
        q(
            commands.derive_override("@STORE@", tmp_script, s.tool_call_parser, s.required_env)
        ).replace("@STORE@", f'"${store}"'),
        q(commands.install_atomically(tmp_script, s.override_script, "0755")),
        q(commands.make_dir(s.override_dropin.rsplit("/", 1)[0])),
        q(commands.write_text(commands.dropin_text(s.override_script, s.required_env), tmp_dropin)),
        q(commands.install_atomically(tmp_dropin, s.override_dropin, "0644")),
        q(commands.daemon_reload()),
        f'[ "$(systemctl show -P ExecStart {shlex.quote(s.unit)} '
        f'| sed -n "s/^{{ path=\\([^ ;]*\\).*/\\1/p")" '
        f'= {shlex.quote(s.override_script)} ] || fail "another drop-in shadows '
        f'{s.override_dropin}: see systemctl show -p DropInPaths {s.unit}"',
    ]


def _outcome(s) -> list[str]:
    return [
        """if [ "$path" = fallback ]; then echo 'VOLATILE: tool calling rests on the /run """
        """override until the durable fix is deployed; a reboot reverts it' >&2; fi"""
    ]


RENDERERS: dict[str, Callable] = {
    "nix.flake_input_updated": _bump,
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
    out = [
        "#!/bin/sh",
        f"# Runbook {rb['id']}: {rb['title']}",
        f"# Issues: {', '.join(rb['issues'])}. Host: {host}.",
        "# Generated by `remedy runbooks show --manual` from remedy/core/commands.py, the",
        "# same command definitions the deploy's operations use.",
        "# Run:  ssh root@HOST sh -s < FILE               (durable path)",
        "#       ssh root@HOST sh -s -- fallback < FILE   (the /run fallback)",
        PRELUDE,
    ]
    section = "durable"
    has_paths = any(st.get("operation") in DURABLE_ONLY | FALLBACK_ONLY for st in rb["steps"])
    for n, step in enumerate(rb["steps"], 1):
        op = step.get("operation")
        if op in FALLBACK_ONLY:
            section = "fallback"
        if op:
            lines = (
                RENDERERS[op](s)
                if op in RENDERERS
                else [f"echo 'step {step['id']}: run the deploy operation {op}' >&2"]
            )
        else:
            lines = list(step["manual"]["commands"])
        if has_paths and op not in (None, "serving.outcome_reported"):
            guard = "durable" if op in DURABLE_ONLY else section
        else:
            guard = None
        title = f"{n}. {step['id']}"
        body = [f"say {shlex.quote(title)}", *lines]
        if guard:
            out.append(f'if [ "$path" = {guard} ]; then')
            out += ["  " + line for line in body]
            out.append("fi")
        else:
            out += body
    out.append("echo 'done' >&2")
    return "\n".join(out) + "\n"
