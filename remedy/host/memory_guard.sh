#!/bin/sh
# remedy-memory-guard: the serving unit's ExecCondition= (docs/memory-guard.md).
# Before vLLM starts, for any reason (boot, Restart=, a person, remedy), it
# refuses the start when MemAvailable is below min_mem_available_gb.
#
#   GUARD check MIN_GB [UNIT]  exit 0: the start goes on; exit 1: refused.
#     systemd skips the start on an ExecCondition= exit 1..254, without a
#     failure and without Restart= (src/core/service.c): one refusal, no loop.
#   GUARD force WHO UNIT       start UNIT once past the guard, recorded: a
#     token naming WHO (valid FORCE_S seconds), then systemctl restart UNIT.
#
# Every decision is one line on stdout (the unit's journal):
#   remedy-memory-guard: DECISION: WORDS [MemAvailable_kB=N threshold_kB=N]
# with DECISION allowed, refused or forced. The last refusal is kept in
# $state/memory-guard.last-refusal ("EPOCH MEMAVAILABLE_KB THRESHOLD_KB").
# Paths for a test: meminfo, REMEDY_GUARD_RUN (the token's directory),
# REMEDY_GUARD_STATE.
# shellcheck disable=SC2034  # FLOOR_REMEDY is the library's
set -u
# @include memory_floor.sh
run_dir=${REMEDY_GUARD_RUN:-/run/remedy}
state=${REMEDY_GUARD_STATE:-/var/lib/remedy}
token=$run_dir/memory-guard.force
FORCE_S=300
me=$0

line() {  # DECISION WORDS KB FLOOR_KB
  printf 'remedy-memory-guard: %s: %s [MemAvailable_kB=%s threshold_kB=%s]\n' \
    "$1" "$2" "$3" "$4"
}
# The token's holder, if one was left for this start within FORCE_S (it is
# consumed either way: one start each).
forced_by() {
  [ -f "$token" ] && [ ! -L "$token" ] || return 0
  _tok=$token.taken-$$
  mv -f -- "$token" "$_tok" 2>/dev/null || return 0
  read -r _at _who <"$_tok" || :
  rm -f -- "$_tok"
  case $_at in '' | *[!0-9]*) return 0 ;; esac
  [ $(($(date +%s) - _at)) -le "$FORCE_S" ] && printf '%s' "${_who:-someone}"
}
kept() {  # KB FLOOR_KB: the last refusal, for remedy status and the metrics
  mkdir -p -- "$state" 2>/dev/null || return 0
  _k=$state/memory-guard.last-refusal
  if printf '%s %s %s\n' "$(date +%s)" "$1" "$2" >"$_k.tmp" 2>/dev/null; then
    mv -f -- "$_k.tmp" "$_k" 2>/dev/null || :
  fi
}

case ${1:-} in
check)
  min_gb=${2:-} unit=${3:-tenstorrent-serving.service}
  case $min_gb in
  '' | *[!0-9.]* | *.*.* | .*)
    echo "remedy-memory-guard: bad threshold '$min_gb' (min_mem_available_gb): \
allowing the start"
    exit 0 ;;
  esac
  floor=$(floor_kb "$min_gb")
  kb=$(mem_kb)
  if [ -z "$kb" ]; then
    echo "remedy-memory-guard: cannot read MemAvailable from \
${meminfo:-/proc/meminfo}: allowing the start"
    exit 0
  fi
  gb=$(kb_gb "$kb")
  who=$(forced_by)
  if ! below_floor "$kb" "$floor"; then
    line allowed "MemAvailable $gb GB is at or above min_mem_available_gb \
$min_gb GB; $unit starts" "$kb" "$floor"
    exit 0
  fi
  if [ -n "$who" ]; then
    line forced "MemAvailable $gb GB is below min_mem_available_gb $min_gb GB; \
$unit starts anyway, forced by $who (a vLLM boot below ~4 GB can hard-freeze \
the host; $FLOOR_REMEDY)" "$kb" "$floor"
    exit 0
  fi
  kept "$kb" "$floor"
  line refused "MemAvailable $gb GB is below min_mem_available_gb $min_gb GB; \
$unit does not start (a vLLM boot below ~4 GB can hard-freeze the host); \
$FLOOR_REMEDY. To start anyway, once: systemctl start \
remedy-memory-guard-force@NAME.service (or: sh $me force NAME $unit)" \
    "$kb" "$floor"
  exit 1
  ;;
force)
  who=${2:-} unit=${3:-}
  case $who in '' | *[!A-Za-z0-9_.@-]*)
    echo "remedy-memory-guard: force needs who (letters, digits, _.@-): \
$who" >&2
    exit 2 ;;
  esac
  if [ -z "$unit" ]; then
    echo "remedy-memory-guard: force needs the unit" >&2
    exit 2
  fi
  mkdir -p -- "$run_dir" || exit 1
  (umask 077 && printf '%s %s\n' "$(date +%s)" "$who" >"$token.tmp") &&
    mv -f -- "$token.tmp" "$token" || exit 1
  echo "remedy-memory-guard: $who forces the next start of $unit past the \
memory guard"
  exec systemctl restart -- "$unit"
  ;;
*)
  echo "usage: remedy-memory-guard check MIN_GB [UNIT] | force WHO UNIT" >&2
  exit 2
  ;;
esac
