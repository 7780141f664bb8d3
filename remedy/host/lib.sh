# remedy's host library: what every step program shares (remedy/host/README.md).
#
# A step program is this text followed by its step's
# (remedy/host/steps/NAME.sh). The deploy and the manual script run the same
# text, as   sh -c PROGRAM remedy-NAME MODE [KEY=VALUE]... [-- ITEM...] MODE
# check decides and changes nothing; MODE apply decides again, then acts. Its
# answer is the lines on stdout that start with "@@remedy " (any other line is
# output): "log COLOR TEXT", "say KEY VALUE", "note TEXT", then one verdict:
# "act WHAT" (check: it would act), "done WHAT", "noop WHY" or "give-up WHY". A
# value that is a list comes as "say+ KEY ITEM" lines, an item each.

# Functions after an exit, values set by eval, programs in single quotes, a
# library not every step uses all of:
# shellcheck disable=SC2317,SC2154,SC2016,SC2034,SC2015
_nl='
'
mode=${1:-}
case $mode in
check | apply) shift ;;
*)
  printf '@@remedy give-up %s: no mode (check or apply)\n' "${0##*/}"
  exit 0
  ;;
esac

# One answer line: newlines become blanks, so a line is never cut in two.
answer() {
  _t=$*
  case $_t in
  *"$_nl"*)
    set -f
    IFS=$_nl
    # shellcheck disable=SC2086  # split at newlines on purpose
    set -- $_t
    IFS=' '
    _t=$*
    unset IFS
    set +f
    ;;
  esac
  printf '@@remedy %s\n' "$_t"
  case $_t in
  "say "* | "say+ "* | "note "* | "changes file "* | "changes params-"*)
    _kept=$_kept$_t$_nl ;;
  esac
}
_kept=''
log() { _c=$1; shift; answer log "$_c" "$@"; }
say() { _k=$1; shift; answer say "$_k" "$@"; }
# KEY SEP TEXT: each part of TEXT between SEPs, an item of the list KEY.
say_items() {
  _ik=$1 _is=$2 _it=$3
  while [ -n "$_it" ]; do
    case $_it in
    *"$_is"*) answer say+ "$_ik" "${_it%%"$_is"*}"; _it=${_it#*"$_is"} ;;
    *) answer say+ "$_ik" "$_it"; _it='' ;;
    esac
  done
}
note() { answer note "$@"; }
noop() { ended noop "$*"; kept noop "$*"; answer noop "$@"; exit 0; }
done_() { ended "done" "$*"; kept "done" "$*"; answer "done" "$@"; exit 0; }
give_up() {
  ended give-up "$*"; kept give-up "$*"; answer give-up "$@"; exit 0
}
# VERDICT WHY: this step's answer (its verdict, "off" when its stage is off,
# and what it said), kept in this run's answers beside the run journal for the
# run's outcome (remedy/host/steps/outcome.sh): root's, mode 0600, written
# whole. A verdict is the step's last word in either mode (check mode's "act"
# is not one). The outcome's own answer is not kept.
kept() {
  [ -n "${journal:-}" ] && [ -n "${run_id:-}" ] || return 0
  [ "${0#remedy-}" != outcome ] || return 0
  _af=${journal%.json}.answers _v=$1
  [ -z "${_stage_off:-}" ] || _v=off
  _old=
  answers_trusted "$_af" && [ "$(head -n 1 "$_af")" = "run $run_id" ] &&
    _old=$_af
  mkdir -p -- "${_af%/*}" 2>/dev/null || return 0
  (
    umask 077
    {
      if [ -n "$_old" ]; then cat -- "$_old"
      else printf 'run %s\n' "$run_id"
      fi
      printf 'step %s %s %s %s %s\n' "${0#remedy-}" "${when:--}" \
        "${failure:--}" "$_v" "$(printf '%s' "$2" | tr '\n' ' ')"
      printf '%s' "$_kept"
    } >"$_af.remedy-tmp"
  ) && chmod 0600 "$_af.remedy-tmp" && mv -f -T "$_af.remedy-tmp" "$_af" ||
    rm -f -- "$_af.remedy-tmp"
}

# FILE: this run's answers, as remedy writes them (a regular file of this
# user's, mode 0600; any bytes: they hold what the host said).
answers_trusted() {
  [ -f "$1" ] && [ ! -L "$1" ] &&
    [ "$(stat -c '%u %a' -- "$1" 2>/dev/null)" = "$(id -u) 600" ]
}

# Check mode stops here and answers that the step would act; apply goes on.
would() {
  [ "$mode" = apply ] && return 0
  answer act "$@"
  exit 0
}

# The step's values, KEY=VALUE each, until "--"; what follows stays in "$@" (the
# caller shifts by $nargs).
nargs=0
for _a in "$@"; do
  [ "$_a" = -- ] && { nargs=$((nargs + 1)); break; }
  _k=${_a%%=*}
  case $_k in
  '' | *[!a-z0-9_]* | [0-9]*) give_up "bad value for ${0##*/}: $_a" ;;
  esac
  eval "$_k=\${_a#*=}"
  nargs=$((nargs + 1))
done
need() {  # NAME...: each value must be given (it may be empty)
  for _n in "$@"; do
    eval "_s=\${$_n+set}"
    [ -n "$_s" ] || give_up "${0##*/} needs the value $_n"
  done
}

# The last line that says what went wrong (remedy.operations.argv.Ran.why).
why_of() {
  _w=$(printf '%s\n' "$1" | grep -iE \
      '(^|[^a-z])(error|failed|fatal)([^a-z]|$)' | tail -n 1)
  [ -n "$_w" ] || _w=$(printf '%s\n' "$1" | grep -v '^[[:space:]]*$' | tail -n \
      1)
  [ -n "$_w" ] || _w="no output${2:+; exit $2}"
  printf '%.300s' "$_w" | sed 's/^[[:space:]]*//'
}

# git and nix run as the checkout's owner (root's git refuses a person's
# repository, and root would leave root-owned files in it), from / with the
# owner's HOME.
owner_of() {  # DIR: sets owner and home
  owner=$(stat -c %U -- "$1" 2>/dev/null) || owner=root
  home=$(getent passwd "$owner" | cut -d: -f6)
}
as_owner() {
  if [ -z "${owner:-}" ] || [ "$owner" = root ] || [ "$owner" = "$(id -un)" ]; \
      then
    "$@"
  else
    runuser -u "$owner" -- env -C / HOME="${home:-/}" "$@"
  fi
}

main_pid() { systemctl show -P MainPID -- "$1" 2>/dev/null; }

# @include memory_floor.sh
# MemAvailable in GB with one decimal, as remedy says it.
mem_gb() { kb_gb "$(mem_kb)"; }
# MIN_GB DOING: why MemAvailable is too low for DOING (nothing: it is not).
refusal() {
  _kb=$(mem_kb) _floor=$(floor_kb "$1")
  below_floor "${_kb:-0}" "$_floor" || return 0
  echo "${host:-this host}: MemAvailable $(kb_gb "${_kb:-0}") GB is below \
min_mem_available_gb $1 GB; not $2 (a vLLM boot below ~4 GB can hard-freeze \
the host). $FLOOR_REMEDY."
}

# The run journal (remedy.core.programs.journal): the values one step of a run
# makes and a later step needs, root's, mode 0600, one key a line. Only this
# run's is read.
# @include journal_trust.sh
jget() {  # KEY: its value in this run's journal (empty: none)
  journal_trust "$journal"
  [ -z "$_why" ] && [ -f "$journal" ] || return 0
  _r=$(jraw run_id)
  [ "$_r" = "$run_id" ] || return 0
  jraw "$1"
}
jraw() {
  sed -n -e "s/^ *\"$1\": \"\\(.*\\)\",\\{0,1\\}\$/\\1/p" \
    -e "s/^ *\"$1\": \\(-\\{0,1\\}[0-9][0-9]*\\),\\{0,1\\}\$/\\1/p" "$journal" |
    head -n 1 | awk '{ o = ""; for (i = 1; i <= length($0); i++) {
      c = substr($0, i, 1)
      if (c == "\\") {
        i++; c = substr($0, i, 1)
        if (c == "t") c = "\t"; else if (c == "n") c = "\n"
      }
      o = o c }
      print o }'
}
# KEY=VALUE...: set each in this run's journal (an empty VALUE removes KEY),
# written atomically; a journal of another run starts again, one remedy did not
# write is set aside first. The keys of numbers are written as numbers.
jset() {
  journal_trust "$journal"
  if [ -n "$_why" ] && mv -f -T -- "$journal" "$journal.untrusted-$(date \
+%s)"; then
    log yellow "set the run journal $journal aside ($_why): not remedy's"
  fi
  _old=
  [ -f "$journal" ] && [ "$(jraw run_id)" = "$run_id" ] && _old=$journal
  mkdir -p -- "${journal%/*}" || return 1
  _u=
  for _a in "run_id=$run_id" "$@"; do _u=$_u$_a$_nl; done
  (
    umask 077
    REMEDY_SET=$_u awk '
      function esc(s,   o, i, c) {
        o = ""
        for (i = 1; i <= length(s); i++) {
          c = substr(s, i, 1)
          if (c == "\\") o = o "\\\\"; else if (c == "\"") o = o "\\\""
          else if (c == "\t") o = o "\\t"; else o = o c
        }
        return o
      }
      BEGIN {
        nums = " commits pid_at_override switch_exit pid_at_start "
        n = split(ENVIRON["REMEDY_SET"], u, "\n")
      }
      /^ *"[a-z_]+": / {
        k = $0; sub(/^ *"/, "", k); sub(/".*/, "", k)
        v = $0; sub(/^ *"[a-z_]+": /, "", v); sub(/,$/, "", v)
        if (!(k in val)) order[++no] = k
        val[k] = v
      }
      END {
        for (i = 1; i <= n; i++) {
          if (u[i] == "") continue
          e = index(u[i], "=")
          k = substr(u[i], 1, e - 1); v = substr(u[i], e + 1)
          if (!(k in val)) order[++no] = k
          if (v == "") { val[k] = ""; continue }
          number = index(nums, " " k " ") && v ~ /^-?[0-9]+$/
          val[k] = number ? v : "\"" esc(v) "\""
        }
        printf "{"
        sep = "\n"
        for (i = 1; i <= no; i++) {
          if (val[order[i]] == "") continue
          printf "%s \"%s\": %s", sep, order[i], val[order[i]]; sep = ",\n"
        }
        printf "\n}\n"
      }' ${_old:+"$_old"} </dev/null >"$journal.remedy-tmp"
  ) || { rm -f -- "$journal.remedy-tmp"; return 1; }
  chmod 0600 "$journal.remedy-tmp" && mv -f -T "$journal.remedy-tmp" \
      "$journal" || {
    rm -f -- "$journal.remedy-tmp"
    return 1
  }
}

# ARGV as one shell string, each word single-quoted (what SSH hands to a shell).
quoted() {
  for _q in "$@"; do
    printf "'%s' " "$(printf '%s' "$_q" | sed "s/'/'\\\\''/g")"
  done
}
# A builder (host data build_host): reached as its user over SSH, with root's
# key here, its host key already known (no trust on first use), no prompt.
builder_label() { echo "$builder_name \
($builder_user@$builder_address:$builder_port)"; }
builder_ssh() {
  echo "-i $builder_key -p $builder_port -o BatchMode=yes -o \
StrictHostKeyChecking=yes" \
    "-o IdentitiesOnly=yes -o ConnectTimeout=15 -o ServerAliveInterval=15"
}
on_builder() {  # ARGV...: run on the builder, as its user
  # shellcheck disable=SC2046  # the options are words without blanks or globs
  ssh $(builder_ssh) -- "$builder_user@$builder_address" "$(quoted "$@")"
}
# The builder's scratch clones of this serving host.
builder_clones() { echo "remedy-bump.$builder_tag.*"; }
# @include-text SCRATCH_REMOVED scratch_removed.sh
# @include-text ATOMIC_WRITE atomic_write.sh
# @include server_load.sh
# What a restart now cuts: the load read once more just before it (a request
# that arrived after the drain's idle read), said and counted (requests_cut):
# vLLM's gauges, and with them at 0 the busy connections to the server's port
# (a response still streaming out), or without them the connections open to it
# (one request each at most: server_load.sh).
cut_by_restart() {
  [ -n "${server_url:-}" ] || return 0
  # shellcheck disable=SC2046  # its words
  set -- $(server_load "$server_url")
  case $1 in
  busy)
    log yellow "$(($2 + $3)) request(s) in flight at the restart ($2 running, \
$3 waiting): the restart cuts them"
    say requests_cut "$(($2 + $3))" ;;
  open)
    [ "$2" -gt 0 ] || return 0
    _n=$2 _port=$3
    shift 3
    log yellow "$_n connection(s) open to port $_port at the restart ($*): the \
restart cuts the request(s) they carry"
    say requests_cut "$_n" ;;
  esac
}

# How many times systemd started UNIT ($1) since the run began (after the run
# journal's started_cursor): the unit's "Started" entries in the host's journal
# (systemd's message id of a unit started), whoever started it: a switch, a
# rollback, a restart. Nothing when the journal cannot tell.
server_starts_since() {
  _after=$(jget started_cursor)
  [ -n "$_after" ] || return 0
  # no -u match: journalctl 252 skips the first match after a cursor
  _j=$(journalctl -q --after-cursor="$_after" -o json \
      --output-fields=MESSAGE_ID,UNIT 2>/dev/null </dev/null) || return 0
  # (journalctl 252 writes "KEY" : "VALUE", 257 "KEY":"VALUE")
  printf '%s\n' "$_j" | grep -F 39f53479d3a045ac8e11786248231fbf |
    sed 's/" *: *"/":"/g' | grep -cF "\"UNIT\":\"$1\"" || :
}

# What the serving process lacks of what is wanted (items "want:KEY=VALUE": KEY
# tool_call_parser is its --tool-call-parser, any other a variable of its
# environment): "LABEL VALUE (it has NOW)" each, "; " between. Read from the
# process itself (/proc, as root): live is what the process has.
serving_lacks() {  # UNIT ITEM...
  _pid=$(main_pid "$1")
  shift
  if [ "${_pid:-0}" -le 0 ] || [ ! -r "/proc/$_pid/cmdline" ]; then
    echo "a running server"
    return 0
  fi
  _cmd=" $(tr '\0' ' ' <"/proc/$_pid/cmdline") "
  _env=$(tr '\0' '\n' <"/proc/$_pid/environ")
  _out=
  for _i in "$@"; do
    case $_i in want:*) ;; *) continue ;; esac
    _kv=${_i#want:}
    _k=${_kv%%=*} _v=${_kv#*=}
    if [ "$_k" = tool_call_parser ]; then
      case $_cmd in *" --tool-call-parser $_v "* | *" --tool-call-parser=$_v \
"*) continue ;; esac
      _has=$(printf '%s\n' "$_cmd" |
        sed -n 's/.* --tool-call-parser[ =]\([^ ]*\) .*/\1/p')
      _out="$_out; tool-call parser $_v (it has ${_has:-none})"
    else
      printf '%s\n' "$_env" | grep -qxF -- "$_k=$_v" && continue
      _has=$(printf '%s\n' "$_env" | sed -n "s/^$_k=//p" | head -n 1)
      _out="$_out; $_k $_v (it has ${_has:-unset})"
    fi
  done
  printf '%s' "${_out#; }"
}

# The command path of the last ExecStart= line of the files given (prefixes
# -@:+! dropped; NixOS writes a trailing space after it).
exec_path() {
  sed -n 's/^[[:space:]]*ExecStart=[-@:+!]*\([^[:space:]]\{1,\}\).*/\1/p' "$@" \
      2>/dev/null |
    tail -n 1
}
# The script that holds the vLLM flags: $1, or the store script it execs (a
# NixOS `script =` unit execs the real one).
flags_script() {
  if grep -q -- --tool-call-parser "$1" 2>/dev/null; then
    echo "$1"
    return 0
  fi
  _re='s/^[[:space:]]*exec[[:space:]]\{1,\}'
  _re=$_re'\(\/nix\/store\/[^[:space:];&|]\{1,\}\).*/\1/p'
  _t=$(sed -n "$_re" "$1" 2>/dev/null | head -n 1)
  echo "${_t:-$1}"
}
# What systemd starts UNIT with from its durable files (its fragment and the
# drop-ins NixOS made, links into the store such as overrides.conf, in the
# order systemd applies them): the start script's path. A drop-in of /run, or
# a file a person wrote in /etc, is not the configuration's.
durable_exec_start() {
  _frag=$(systemctl show -P FragmentPath -- "$1" 2>/dev/null)
  set -f
  _files=$_frag
  for _d in $(systemctl show -P DropInPaths -- "$1" 2>/dev/null); do
    case $(readlink -f -- "$_d") in /nix/store/*) _files="$_files $_d" ;; esac
  done
  # shellcheck disable=SC2086  # paths systemd lists, blank-separated
  exec_path $_files
  set +f
}
# The file of UNIT's that sets the ExecStart systemd runs: the last of its
# fragment and drop-ins, in the order systemd applies them, with an ExecStart=
# of a command.
exec_start_via() {
  _via=''
  set -f
  for _f in $(systemctl show -P FragmentPath -- "$1" 2>/dev/null) \
    $(systemctl show -P DropInPaths -- "$1" 2>/dev/null); do
    grep -q '^[[:space:]]*ExecStart=[^[:space:]]' "$_f" 2>/dev/null && _via=$_f
  done
  set +f
  printf '%s' "$_via"
}
# The path of the ExecStart systemd runs UNIT with now (its effective one).
running_exec_start() {
  systemctl show -P ExecStart -- "$1" 2>/dev/null | sed -n \
      's/^{ path=\([^ ;]*\).*/\1/p' |
    head -n 1
}

# The switch, as nixos-rebuild-ng ends it (remedy.core.readings.switch says what
# each of its exit codes means).
# @include-text SWITCH_RUN switch_run.sh
# @include-text SWITCH_HOLDERS switch_holders.sh
SWITCH_UNIT=nixos-rebuild-switch-to-configuration
LOCK_SAID="Could not acquire lock|$SWITCH_UNIT\\.service (was already \
loaded|already exists)|Unit ${SWITCH_UNIT}[^ ]* (was already loaded|already \
exists)"
# WAIT_S: who holds the switch after waiting up to WAIT_S for them ("; "
# between; empty: it is free).
switch_holders() {
  _end=$(($(date +%s) + ${1%.*}))
  while :; do
    _h=$(sh -c "$(SWITCH_HOLDERS)" 2>/dev/null | sed -n 's/^holder //p')
    [ -n "$_h" ] && [ "$(date +%s)" -lt "$_end" ] || break
    sleep 1
  done
  printf '%s\n' "$_h" | awk 'NF { printf "%s%s", s, $0; s = "; " }'
}
# A host booted with systemd runs the switch in nixos-rebuild-ng's transient
# unit.
transient() { [ -d /run/systemd/system ] && command -v systemd-run >/dev/null \
    2>&1; }
# TOPLEVEL ACTION WAIT_S BOUND_S: its switch-to-configuration ACTION, in the
# transient unit (a leftover of it waited for up to WAIT_S, its end for up to
# BOUND_S: the step's switch_bound_s, remedy's commands.SWITCH_BOUND_S); the
# exit code in switch_exit (empty: it did not report), what it said in
# switch_said, and switch_outcome: done, units-failed, boot-pending, inhibited,
# locked or failed.
switch_to() {
  [ -n "${4:-}" ] || give_up "no switch bound (switch_bound_s)"
  if transient; then
    set -- "$SWITCH_UNIT" "${3%.*}" "$4" env \
        NIXOS_INSTALL_BOOTLOADER=0 systemd-run -E LOCALE_ARCHIVE -E \
        NIXOS_INSTALL_BOOTLOADER --collect --wait \
      --no-ask-password --quiet --service-type=exec "--unit=$SWITCH_UNIT" \
      "$1/bin/switch-to-configuration" "$2"
  else
    set -- "" "${3%.*}" "$4" env NIXOS_INSTALL_BOOTLOADER=0 \
        "$1/bin/switch-to-configuration" "$2"
  fi
  switch_said=$(sh -c "$(SWITCH_RUN)" sh "$@" 2>&1 </dev/null)
  switch_exit=$(printf '%s\n' "$switch_said" | sed -n \
      's/^@@remedy:switch-exit //p' |
    tail -n 1)
  switch_said=$(printf '%s\n' "$switch_said" | grep -v '^@@remedy:switch-exit ')
  # a lock another holds: switch-to-configuration-ng dies with the errno as its
  # exit code (main.rs die(): 11, EWOULDBLOCK), so its words decide, before any
  # number (an errno may be 4)
  _lock=''
  [ "${switch_exit:-0}" = 0 ] || ! printf '%s\n' "$switch_said" | grep -Eq \
      "$LOCK_SAID" || _lock=yes
  case $_lock$switch_exit in
  yes*) switch_outcome=locked ;;
  0) switch_outcome="done" ;;
  4) switch_outcome=units-failed ;;
  100) switch_outcome=boot-pending ;;
  *)
    if [ "$switch_exit" = 1 ] &&
      printf '%s\n' "$switch_said" | grep -q "Pre-switch check \
'switchInhibitors' failed"; then
      switch_outcome=inhibited
    else
      switch_outcome=failed
    fi
    ;;
  esac
}
# The units a switch that exited 4 names as failed ("a, b").
failed_units() {
  printf '%s\n' "$switch_said" | sed -n 's/.*the following units failed: //p' \
      | tr ',' '\n' |
    sed 's/^[[:space:]]*//; s/[[:space:]]*$//' | awk 'NF && !seen[$0]++ {
      printf "%s%s", s, $0; s = ", " }'
}
# Who held the switch, as the switch said it ("; " between).
lock_holders() {
  printf '%s\n' "$switch_said" | grep -E "$LOCK_SAID" | sed \
      's/^[[:space:]]*//; s/[[:space:]]*$//' |
    awk '!seen[$0]++ { printf "%s%s", s, $0; s = "; " }'
}
locked_why() {  # HOLDERS WAITED_S
  _w=
  [ "${2:-0}" = 0 ] || _w=" after waiting $2 s (lock_wait_s)"
  echo "another switch holds the system$_w: $1; nothing durable changed: let \
it finish, then run again"
}

# What `nix --version` ($1) says of the command that bumps one input: "new"
# (`nix flake update NAME --flake DIR`: CppNix 2.19 and later) or "old" (`nix
# flake lock DIR --update-input NAME`: earlier, and Lix, which forked from
# 2.18); empty: no version.
update_form() {
  printf '%s\n' "$1" | awk '/^nix \(/ {
    lix = ($0 ~ /\(Lix/); n = split($0, w, " "); split(w[n], v, ".")
    if (v[1] !~ /^[0-9]+$/) next
    new = !lix && (v[1] > 2 || (v[1] == 2 && v[2] + 0 >= 19))
    print (new ? "new" : "old"); exit }'
}
nix_() { nix --extra-experimental-features 'nix-command flakes' "$@"; }

# The owner's nix, bounded: in time by nix_timeout_s, and in a transient scope
# with MemoryMax BOUND (what the host can spare above min_mem_available_gb now,
# at most nix_memory_max_gb: nix_bound) where the host has systemd-run. WHAT
# names the scope.
# @include-text NIX_BOUNDED nix_bounded.sh
# In bytes (meminfo: another file than /proc/meminfo, for a test).
nix_bound() {
  awk -v floor="$min_gb" -v cap="${nix_memory_max_gb:-0}" '/^MemAvailable:/ {
    b = $2 * 1024 - floor * 1e9; if (cap > 0 && cap * 1e9 < b) b = cap * 1e9
    if (b < 1) b = 1; printf "%.0f", b }' "${meminfo:-/proc/meminfo}"
}
scope_id() { printf '%s' "$run_id" | tr -cs 'A-Za-z0-9' '-' | sed \
    's/^-*//; s/-*$//'; }
owner_nix() {  # WHAT BOUND ARGV...
  _what=$1 _bound=$2
  shift 2
  if [ -n "${owner:-}" ] && [ "$owner" != root ] && [ "$owner" != "$(id -un)" \
      ]; then
    set -- runuser -u "$owner" -- env -C / HOME="${home:-/}" "$@"
  fi
  sh -c "$(NIX_BOUNDED)" sh "remedy-nix-$_what-$(scope_id)" "$_bound" \
      "${nix_timeout_s}s" "$@"
}
# On the builder: bounded in time by its own nix_timeout_s (its memory is its
# own).
builder_nix() {  # WHAT ARGV...
  _what=$1
  shift
  on_builder sh -c "$(NIX_BOUNDED)" sh "remedy-nix-$_what-$(scope_id)" 0 \
      "${builder_timeout_s}s" "$@"
}
# Why a bounded nix that failed (its output $1) stopped at a bound, or what
# else ended it: a signal before its time bound (empty: it failed by itself).
bound_hit() {  # OUTPUT WHAT BOUND TIMEOUT_S
  case $1 in
  *"error: remedy: ended by signal "*)
    _sig=$(printf '%s\n' "$1" | sed -n \
      's/.*error: remedy: ended by signal \([^ ]*\) \([0-9]*\)s in.*/\1 \2/p' |
      tail -n 1)
    echo "the $2 was ended by signal ${_sig% *} ${_sig#* }s in, before its \
time bound (nix_timeout_s=$4): not by remedy, and no verdict on what it \
ran (the kernel's OOM killer or a person: see the journal where it ran); run \
again" ;;
  *"stopped at its time bound"*)
    echo "the $2 ran past its time bound (nix_timeout_s=$4) and was stopped: a \
build or check that hangs must not hold the host; find what hangs, or raise \
nix_timeout_s" ;;
  *"killed at its memory bound"*)
    [ "${3:-0}" = 0 ] && return 0
    _gb=$(awk -v b="$3" 'BEGIN { printf "%.1f", b / 1e9 }')
    echo "the $2 hit its memory bound ($_gb GB, MemoryMax of the owner's \
nix):" \
      "the host cannot spare more above min_mem_available_gb; free memory (a" \
      "reboot reclaims the tenstorrent pinned-page leak) or raise" \
      "nix_memory_max_gb" ;;
  esac
}
# Why a command on the builder failed, when its connection did (ssh's own exit
# 255: refused, reset, closed): the builder became unreachable, no verdict on
# what ran there (empty: the command itself answered).
builder_lost() {  # RC WHAT OUTPUT
  [ "$1" = 255 ] || return 0
  echo "the builder $(builder_label) became unreachable during the $2 (ssh \
exit 255: $(why_of "$3")): no verdict on it; the durable path waits until the \
builder answers again"
}
nix_at_least() {  # MAJOR MINOR: this host's Nix is at least that version
  _v=$(nix --version 2>/dev/null | sed -n \
      's/^nix (.*) \([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p' |
    head -n 1)
  # shellcheck disable=SC2086  # the two numbers
  set -- "$1" "$2" $_v
  [ "${3:-0}" -gt "$1" ] || { [ "${3:-0}" -eq "$1" ] && [ "${4:-0}" -ge "$2" \
      ]; }
}

# ---- When a step runs: its stage, decided here for the deploy and the manual
# script alike. Each step of a run is given when (always, durable, override,
# rollback or fallback), failure (gives-up: a failure gives up its stage, and
# a durable one falls back; stops: the run stops), path (the plan's: durable or
# fallback) and stopped (a stop request: SIGINT or SIGTERM, as its driver got
# it). What the steps before it did is in the run journal: durable_failed,
# failed, override_failed (why each gave up), switching or switch_exit (a
# switch was attempted), removed (the stale /run override went), running (the
# step whose apply has not answered yet).

# Why this step does not run now, in off (empty: it runs).
stage_off() {
  off=''
  _run=$(jget running)
  if [ -n "$_run" ]; then
    # an earlier step's apply ended without an answer (killed, or its
    # connection cut): it failed as its stage fails
    set -f
    # shellcheck disable=SC2086  # WHEN FAILURE NAME
    set -- $_run
    set +f
    _why="the step $3 ended without an answer (killed, or its connection cut)"
    if [ "$2" = stops ]; then
      jset running= "failed=$_why" || :
    elif [ "$1" = durable ]; then
      jset running= "durable_failed=$_why" || :
    elif [ "$1" = override ]; then
      jset running= "override_failed=$_why" || :
    else
      jset running= || :
    fi
  fi
  _f=$(jget failed) _df=$(jget durable_failed)
  _switched=$(jget switching)$(jget switch_exit)
  case $when in
  always) ;;
  durable)
    if [ -n "$stopped" ]; then off="$stopped: no further step starts"
    elif [ -n "$_f" ]; then off="the run stopped: $_f"
    elif [ -n "$_df" ]; then off="the durable path gave up: $_df"
    elif [ "$path" = fallback ]; then off="the plan takes the /run fallback"
    fi ;;
  override)
    if [ -n "$stopped" ]; then
      # stopped between removing the old override and switching: it goes back
      [ -n "$(jget removed)" ] && [ -z "$_switched" ] ||
        off="$stopped: no further step starts"
    elif [ -n "$_f" ]; then off="the run stopped: $_f"
    elif [ "$path" != fallback ] && [ -z "$_df" ]; then
      off="the durable path holds: no fallback"
    fi ;;
  rollback)
    if [ -n "$stopped" ]; then off="$stopped: no further step starts"
    elif [ -n "$_f" ]; then off="the run stopped: $_f"
    elif [ -z "$_df" ]; then off="the durable path holds: nothing to roll back"
    elif [ -z "$_switched" ]; then off="no switch was attempted: nothing to \
roll back"
    fi ;;
  fallback)
    if [ -n "$stopped" ]; then off="$stopped: no further step starts"
    elif [ -n "$_f" ]; then off="the run stopped: $_f"
    elif [ "$path" != fallback ] && [ -z "$_df" ]; then
      off="the durable path holds: no fallback"
    elif [ -n "$(jget override_failed)" ]; then
      off="the /run override did not take: $(jget override_failed)"
    fi ;;
  *) give_up "bad value for ${0##*/}: when=$when" ;;
  esac
}

# VERDICT WHY: what this step's end means for the steps after it, in the run
# journal (a give-up in either mode; the end of an apply).
ended() {
  [ -n "${when:-}" ] && [ -z "${_stage_off:-}" ] || return 0
  if [ "$1" = give-up ]; then
    if [ "$failure" = stops ]; then
      jset running= "failed=$2" || :
      answer say failed "$2"
    elif [ "$when" = durable ]; then
      jset running= "durable_failed=$2" || :
      answer log yellow "the durable path is abandoned; the /run fallback \
takes \
over"
      answer say durable_failed "$2"
    elif [ "$when" = override ]; then
      jset running= "override_failed=$2" || :
    elif [ "$mode" = apply ]; then
      jset running= || :
    fi
  elif [ "$mode" = apply ]; then
    jset running= || :
  fi
}

if [ -n "${when:-}" ]; then
  need journal run_id failure path stopped
  stage_off
  if [ -n "$off" ]; then
    _stage_off=yes
    answer say stage_off "$off"
    noop "$off"
  fi
  # (not a step that always runs: the first, begin, reads an earlier run's
  # journal before this run's starts)
  if [ "$mode" = apply ] && [ "$when" != always ]; then
    jset "running=$when $failure ${0#remedy-}" ||
      give_up "cannot write the run journal $journal"
  fi
fi
