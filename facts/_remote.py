"""The remote side of the engine's facts: constant shell snippets, one per section.

Host data never enters the script text: it is passed as environment variables
(``env REMEDY_UNIT=… sh -c SCRIPT``), quoted by pyinfra. Every snippet merges
its stderr into stdout (pyinfra hands facts stdout only) and the script always
ends with the end marker, so a cut-short answer is detected.
"""

from __future__ import annotations

from pyinfra.api import QuoteString, StringCommand

from remedy.core.config import options
from remedy.core.programs import commands, journal
from remedy.core.readings import probe
from remedy.core.readings.sections import END, ESCAPE_SH, ESCAPED

# Shell functions every remote snippet may use.
PRELUDE = r"""
catfile() {
  [ -n "$1" ] || return 0
  printf '@@remedy:file %s %s\n' "$1" "$(readlink -f -- "$1" 2>/dev/null || printf '%s' "$1")"
  [ -r "$1" ] && sed -e '$a\' -- "$1" 2>&1
}
# The command paths that ExecStart= lines of unit files name (prefixes like - @ ! dropped,
# NixOS's trailing space trimmed).
exec_paths() {
  sed -n '@EXEC_PATH_SED@' "$@" 2>/dev/null
}
# The store scripts a script execs (NixOS `script =` units exec the real start script).
exec_targets() {
  sed -n '@EXEC_TARGET_SED@' "$@" 2>/dev/null
}
# A start script; a binary (an ExecStart of /bin/sh -c ...) is named, not printed.
catscript() {
  if [ ! -f "$1" ] || grep -Iq . "$1" 2>/dev/null; then catfile "$1"
  else printf '@@remedy:file %s %s\n# (a binary, not a start script)\n' "$1" "$1"
  fi
}
# A script and, one level down, the store scripts it execs.
catscripts() {
  while read -r s; do
    catscript "$s"
    [ -f "$s" ] && grep -Iq . "$s" 2>/dev/null \
      && exec_targets "$s" | while read -r t; do catscript "$t"; done
  done
}
""".replace("@EXEC_PATH_SED@", commands.EXEC_PATH_SED).replace(
    "@EXEC_TARGET_SED@", commands.EXEC_TARGET_SED
)

UNIT = r"""
u=$REMEDY_UNIT
echo "@@remedy:section unit.show"
systemctl show "$u" -p Id -p LoadState -p ActiveState -p SubState -p MainPID -p NRestarts \
  -p FragmentPath -p DropInPaths -p ExecStart -p Environment \
  -p ActiveEnterTimestampMonotonic 2>&1
printf 'RemedyUptime=%s\n' "$(cut -d' ' -f1 /proc/uptime)"
frag=$(systemctl show -P FragmentPath "$u" 2>/dev/null)
dropins=$(systemctl show -P DropInPaths "$u" 2>/dev/null)
next=/nix/var/nix/profiles/system/etc/systemd/system/$u
echo "@@remedy:section unit.files"
catfile "$frag"
for f in $dropins; do catfile "$f"; done
echo "@@remedy:section unit.next"
[ -e "$next" ] && catfile "$next"
# the next boot's own drop-ins (NixOS writes <unit>.d/overrides.conf for a unit that
# also comes from a package, or with overrideStrategy = "asDropin")
echo "@@remedy:section unit.next_dropins"
for f in "$next.d/"*.conf; do [ -f "$f" ] && catfile "$f"; done
echo "@@remedy:section unit.scripts"
for f in "$frag" $dropins "$next" "$next.d/"*.conf; do
  [ -f "$f" ] && exec_paths "$f"
done | sort -u | catscripts
"""

# Runtime state a reboot reverts beyond the managed settings (remedy.core.config.volatile):
# every file and link under /run/systemd/system(.control), the serving process's argv
# and environment (its vLLM child when the main process is not vLLM), and systemd's own
# environment. NULs become newlines and newlines spaces, one argument a line.
RUNTIME = r"""
echo "@@remedy:section volatile.links"
for d in /run/systemd/system /run/systemd/system.control; do
  [ -d "$d" ] && find "$d" -mindepth 1 -type l 2>/dev/null | sort | while read -r f; do
    printf 'link %s %s\n' "$f" "$(readlink -- "$f")"
  done
done
echo "@@remedy:section volatile.files"
for d in /run/systemd/system /run/systemd/system.control; do
  [ -d "$d" ] && find "$d" -mindepth 1 -type f 2>/dev/null | sort | while read -r f; do
    catfile "$f"
  done
done
echo "@@remedy:section volatile.process"
pid=$(systemctl show -P MainPID "$REMEDY_UNIT" 2>/dev/null)
if [ -n "$pid" ] && [ "$pid" != 0 ] && [ -r "/proc/$pid/cmdline" ]; then
  if ! tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qx serve; then
    for c in $(cat "/proc/$pid/task/$pid/children" 2>/dev/null); do
      tr '\0' '\n' 2>/dev/null <"/proc/$c/cmdline" | grep -qx serve && { pid=$c; break; }
    done
  fi
  echo "pid $pid"
  tr '\0\n' '\n ' 2>/dev/null <"/proc/$pid/cmdline" | sed 's/^/arg /'
  if env=$(tr '\0\n' '\n ' 2>/dev/null <"/proc/$pid/environ"); then
    printf '%s\n' "$env" | sed '/^$/d; s/^/env /'
  else
    echo "unreadable"
  fi
fi
systemctl show-environment 2>/dev/null | sed 's/^/manager /'
# What the next boot's start chain sets beyond the unit's Environment=: DefaultEnvironment=
# of the system.conf the next boot reads (the profile's, else /etc's) and of system.conf.d;
# the unit files' EnvironmentFile= and PassEnvironment= lines, with the names (never the
# values) each environment file sets; the scripts the start scripts exec (nixpkgs'
# makeWrapper scripts), two levels down from ExecStart.
echo "chain"
p=/nix/var/nix/profiles/system/etc/systemd
c=$p/system.conf
[ -f "$c" ] || c=/etc/systemd/system.conf
for f in "$c" "$p/system.conf.d/"*.conf /etc/systemd/system.conf.d/*.conf \
    /run/systemd/system.conf.d/*.conf /usr/lib/systemd/system.conf.d/*.conf; do
  [ -f "$f" ] && sed -n 's/^[[:space:]]*DefaultEnvironment=//p' "$f" 2>/dev/null \
    | while IFS= read -r v; do printf 'default-env %s %s\n' "$f" "$v"; done
done
nx=$p/system/$REMEDY_UNIT
frag=$(systemctl show -P FragmentPath "$REMEDY_UNIT" 2>/dev/null)
dropins=$(systemctl show -P DropInPaths "$REMEDY_UNIT" 2>/dev/null)
[ -e "$nx" ] && printf 'next-unit %s\n' "$nx"
unitenv() {
  [ -f "$2" ] || return 0
  r=$(readlink -f -- "$2" 2>/dev/null || printf '%s' "$2")
  sed -n -e 's/^[[:space:]]*\(EnvironmentFile=\)/\1/p' \
    -e 's/^[[:space:]]*\(PassEnvironment=\)/\1/p' "$2" 2>/dev/null \
    | while IFS= read -r l; do printf 'unit-env %s %s %s %s\n' "$1" "$2" "$r" "$l"; done
}
unitenv fragment "$frag"
for f in $dropins; do unitenv dropin "$f"; done
unitenv next "$nx"
for f in "$nx.d/"*.conf; do unitenv next-dropin "$f"; done
for f in "$frag" $dropins "$nx" "$nx.d/"*.conf; do
  [ -f "$f" ] && sed -n 's/^[[:space:]]*EnvironmentFile=-\{0,1\}[[:space:]]*//p' "$f" 2>/dev/null
done | sort -u | while IFS= read -r g; do
  n=0
  for e in $g; do
    [ -f "$e" ] && [ -r "$e" ] || continue
    n=1
    sed -n 's/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\)[[:space:]]*=.*/\1/p' "$e" 2>/dev/null \
      | while IFS= read -r k; do printf 'env-file %s %s\n' "$g" "$k"; done
  done
  [ "$n" = 1 ] || printf 'env-file %s\n' "$g"
done
for f in "$frag" $dropins "$nx" "$nx.d/"*.conf; do [ -f "$f" ] && exec_paths "$f"; done \
  | sort -u | while read -r s; do [ -f "$s" ] && grep -Iq . "$s" && exec_targets "$s"; done \
  | sort -u | while read -r s; do
    echo "$s"; [ -f "$s" ] && grep -Iq . "$s" && exec_targets "$s"; done \
  | sort -u | while read -r w; do
    [ -f "$w" ] && grep -Iq . "$w" 2>/dev/null || continue
    printf 'wrapper %s\n' "$w"
    sed -n '1,400s/^/wline /p' "$w" 2>/dev/null
  done
"""

MEMORY = r"""
echo "@@remedy:section memory.meminfo"
cat /proc/meminfo 2>&1
for d in /sys/kernel/mm/hugepages/hugepages-*; do
  [ -d "$d" ] || continue
  echo "@@remedy:section memory.hugepages ${d##*hugepages-}"
  echo "nr=$(cat "$d/nr_hugepages") free=$(cat "$d/free_hugepages")"
done
echo "@@remedy:section memory.cmdline"
cat /proc/cmdline
if [ -r /nix/var/nix/profiles/system/kernel-params ]; then
  echo "@@remedy:section memory.next_params /nix/var/nix/profiles/system/kernel-params"
  sed -e '$a\' /nix/var/nix/profiles/system/kernel-params
elif [ -r /run/current-system/kernel-params ]; then
  echo "@@remedy:section memory.next_params /run/current-system/kernel-params"
  sed -e '$a\' /run/current-system/kernel-params
fi
echo "@@remedy:section memory.tenstorrent"
cat /sys/module/tenstorrent/refcnt 2>/dev/null
"""

# The host's local time with its UTC offset: restart windows are in the serving host's time.
CLOCK = r"""
echo "@@remedy:section clock"
date '+%Y-%m-%dT%H:%M:%S%z'
"""

# `nix --version` once per Nix (and nix.conf, whose unknown settings it warns about):
# what it printed is kept next to the run journal (options.NIX_VERSION_RECORD, read
# only as the journal is read) under the binary's and nix.conf's real paths, sizes and
# times, so that a check that finds nothing to do starts no nix process (issue 28).
NIX_VERSION = (
    journal.TRUST_SH
    + r"""
echo "@@remedy:section nix.version"
if n=$(command -v nix 2>/dev/null); then
  v=@RECORD@
  c=/etc/nix/nix.conf
  k="$(readlink -f -- "$n") $(stat -L -c '%s %Y' -- "$n" 2>/dev/null)"
  k="$k $(readlink -f -- "$c" 2>/dev/null) $(stat -L -c '%s %Y' -- "$c" 2>/dev/null)"
  if [ -s "$v" ] && [ -z "$(journal_distrust "$v")" ] && [ "$(sed -n 1p "$v")" = "key $k" ]
  then
    sed -e 1d -e '$a\' "$v"
  else
    out=$(nix --version 2>&1) && ok=1 || ok=
    printf '%s\n' "$out"
    if [ -n "$ok" ] && mkdir -p -m 0700 -- "${v%/*}" 2>/dev/null \
      && tmp=$(mktemp "${v%/*}/.nix-version.XXXXXXXX" 2>/dev/null); then
      { printf 'key %s\n%s\n' "$k" "$out" >"$tmp" && chmod 0600 -- "$tmp" \
        && mv -f -T -- "$tmp" "$v"; } || rm -f -- "$tmp"
    fi
  fi
fi
"""
).replace("@RECORD@", options.NIX_VERSION_RECORD)

FLAKE = r"""
d=$REMEDY_FLAKE_DIR
echo "@@remedy:section nix.flake_args"
printf 'dir=%s\ninput=%s\n' "$d" "$REMEDY_FLAKE_INPUT"
echo "@@remedy:section nix.tools"
for t in git runuser systemd-run; do command -v "$t" >/dev/null 2>&1 && echo "tool $t"; done
[ -S /nix/var/nix/daemon-socket/socket ] && echo "daemon-socket"
[ -d /run/systemd/system ] && echo "systemd-booted"
if [ -r "$d/flake.lock" ]; then
  echo "@@remedy:section nix.flake_lock ok"
  sed -e '$a\' "$d/flake.lock"
elif [ -e "$d/flake.lock" ]; then
  echo "@@remedy:section nix.flake_lock unreadable"
else
  echo "@@remedy:section nix.flake_lock missing"
fi
echo "@@remedy:section nix.checkout"
# git runs as the checkout's owner: root's git refuses a repo another user owns, and a
# root git would leave root-owned files (index, objects) in a person's repo.
owner=$(stat -c %U -- "$d" 2>/dev/null) || owner=
home=$(getent passwd "$owner" 2>/dev/null | cut -d: -f6)
echo "owner ${owner:-?} ${home:-/}"
g() {
  if [ -z "$owner" ] || [ "$owner" = "$(id -un)" ] || ! command -v runuser >/dev/null 2>&1
  then git -C "$d" "$@"
  else runuser -u "$owner" -- env -C / HOME="${home:-/}" git -C "$d" "$@"
  fi
}
if ! command -v git >/dev/null 2>&1; then
  echo "no-git"
elif top=$(g rev-parse --show-toplevel 2>&1); then
  echo "top $top"
  echo "head $(g rev-parse HEAD 2>/dev/null)"
  g status --porcelain --untracked-files=no 2>&1 | sed 's/^/status /'
else
  printf '%s\n' "$top" | sed 's/^/error /'
fi
m=$REMEDY_MANAGED_FILE
echo "@@remedy:section nix.managed $m"
if [ -n "$m" ]; then
  # which host configuration imports remedy's file (./remedy.nix next to it)
  grep -rlF --include='*.nix' -e "./${m##*/}" "$d" 2>/dev/null | grep -vxF "$d/$m" \
    | sed 's/^/imported-by /'
  if [ -f "$d/$m" ]; then
    g ls-files --error-unmatch -- "$m" >/dev/null 2>&1 || echo "untracked"
    # who committed it last: remedy, or a person whose value remedy must not overwrite
    g log -1 --format='last-commit %H %ae %an' -- "$m" 2>/dev/null
    catfile "$d/$m"
  fi
fi
"""

JOURNAL = journal.SNIPPET

GENERATIONS = r"""
echo "@@remedy:section nix.generations"
for n in current:/run/current-system booted:/run/booted-system \
         profile:/nix/var/nix/profiles/system; do
  l=${n#*:}
  if [ -e "$l" ]; then echo "${n%%:*} $(readlink -f "$l")"; else echo "${n%%:*}"; fi
done
for l in /nix/var/nix/profiles/system-*-link; do
  [ -L "$l" ] || continue
  g=${l##*/system-}
  echo "gen ${g%-link} $(readlink -f "$l")"
done
"""

# The last switch-to-configuration of nixos-rebuild-ng's transient unit in this boot,
# as systemd recorded it (a run whose SSH session dropped learns its result here), and
# the units that are failed now. The unit is also `…-<8 hex>` in some 26.05-pre
# nixos-rebuild-ng builds (nixpkgs#463029, reverted by #499837). Its state comes from
# list-units: a `systemctl show` would load the unit again (systemd 252 then keeps it).
SWITCH = r"""
echo "@@remedy:section nix.switch"
u='@SWITCH_UNIT@*.service'
printf 'state %s\n' "$(systemctl list-units --all --plain --no-legend --no-pager "$u" \
  2>/dev/null | awk '$3 ~ /^(active|activating|deactivating|reloading)$/ { a = $3 }
    s == "" { s = $3 } END { print (a != "" ? a : s) }')"
journalctl -q -b -u "$u" -n 40 -o json --output-fields=MESSAGE,EXIT_STATUS,INVOCATION_ID \
  2>/dev/null | sed 's/^/journal /'
systemctl list-units --failed --plain --no-legend --no-pager 2>/dev/null \
  | awk '{ print "failed " $1 }'
""".replace("@SWITCH_UNIT@", commands.SWITCH_UNIT)

PROBE = f"""
echo "@@remedy:section probe"
remedy_probe() {{
{probe.PROBE_SH}
}}
if command -v curl >/dev/null 2>&1; then
  remedy_probe "$REMEDY_PROBE_URL" "$REMEDY_PROBE_MODEL" "$REMEDY_PROBE_TIMEOUT" \\
    "$REMEDY_PROBE_TRIES" "$REMEDY_PROBE_HEAD" "$REMEDY_PROBE_TAIL" 2>&1
else
  echo "curl: (2) curl is not installed on this host"
fi
"""


def command(snippets: list[str], env: dict[str, str]) -> StringCommand:
    """``env K=V … sh -c SCRIPT``: one remote round trip for all SNIPPETS. Every line of
    the answer goes through sed's ``l`` (``remedy.core.readings.sections.unescape`` reads it back),
    so no byte the host holds reaches the SSH client as text it cannot decode."""
    body = "\n".join([PRELUDE, *snippets, f"echo '{END}'"])
    script = f"echo '{ESCAPED}'\n(\n{body}\n) 2>/dev/null | {ESCAPE_SH}\nexit 0"
    parts: list = ["env"]
    for key, value in sorted(env.items()):
        parts.append(QuoteString(f"{key}={value}"))
    parts += ["sh", "-c", QuoteString(script)]
    return StringCommand(*parts)


BUILT = r"""
t=$REMEDY_TOPLEVEL
u=$REMEDY_UNIT
echo "@@remedy:section built.unit"
catfile "$t/etc/systemd/system/$u"
echo "@@remedy:section built.dropins"
for f in "$t/etc/systemd/system/$u.d/"*.conf; do [ -f "$f" ] && catfile "$f"; done
echo "@@remedy:section built.kernel"
[ -r "$t/kernel-params" ] && sed -e '$a\' "$t/kernel-params"
echo "@@remedy:section built.scripts"
f=$t/etc/systemd/system/$u
for g in "$f" "$f.d/"*.conf; do [ -f "$g" ] && exec_paths "$g"; done | sort -u | catscripts
"""


# The answer of the last evaluation of what remedy's file overrides
# (remedy.core.config.options.RECORD, next to the run journal), read only as the run journal
# is read: a regular file, root's, mode 0600, printable ASCII. Otherwise it is named
# untrusted and not read; the next evaluation replaces it (a rename, never a write
# through it).
OPTIONS_RECORD = (
    journal.TRUST_SH
    + r"""
r=@RECORD@
echo "@@remedy:section nix.options_record"
why=$(journal_distrust "$r")
if [ -n "$why" ]; then
  printf 'untrusted %s: %s\n' "$r" "$why"
elif [ -s "$r" ]; then
  sed -e '$a\' "$r"
fi
"""
).replace("@RECORD@", options.RECORD)
