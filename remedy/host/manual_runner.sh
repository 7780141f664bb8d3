# The manual script's runner: it runs each step's host program, in the deploy's
# order, as the deploy runs it; each program decides whether its stage is on
# (remedy/host/lib.sh). The runner takes the host lock, passes the programs the
# plan's path and a stop request, says what they answer, and records the run.
# The script sets, before main: runbook, issues, host_name, unit, lock_wait_s,
# path (the plan's), journal.
_nl='
'
say_() { printf '%s\n' "$*" >&2; }

# program NAME MODE KEY=VALUE...: step NAME's host program (the library, then
# the step's own text: what the deploy runs) in MODE; in plan mode, what it
# would run.
program() {
  _name=$1
  shift
  if [ "$mode" = plan ]; then
    shift
    printf '     remedy/host/steps/%s.sh apply\n' "$_name"
    for _a in "$@"; do
      case $_a in
      *"$_nl"*) printf '       %s=<%s lines>\n' "${_a%%=*}" "$(printf '%s\n' \
"$_a" | wc -l)" ;;
      *) printf '       %s\n' "$_a" | cut -c1-78 ;;
      esac
    done
    return 0
  fi
  sh -c "$(text_lib
    printf '\n# ---- the step: %s\n' "$_name"
    "text_$_name")" "remedy-$_name" "$@" </dev/null
}

# start MODE: plan prints the plan and changes nothing; run takes the host lock
# (one remedy run per host, as the deploy's) and records the run when it ends;
# fallback runs it with the /run fallback only (no bump, no build, no switch).
start() {
  mode=${1:-run}
  case $mode in
  run | plan) ;;
  fallback) mode=run path=fallback ;;
  *)
    say_ "usage: sh -s -- [plan|fallback]  (plan: print the plan; change" \
      "nothing; fallback: the /run fallback only)"
    exit 2
    ;;
  esac
  run_id="manual:$(hostname):$$:$(date +%s)" putting_back=no
  if [ "$mode" = run ]; then
    say_ "The plan (remedy's planner, from what it read of the host):"
    plan_text >&2
  fi
  if [ "$mode" = plan ]; then
    printf 'remedy: the manual script of runbook %s, rendered for host %s\n\n' \
      "$runbook" "$host_name"
    plan_text
    printf '\nThe commands, in order (each runs only if its stage is on):\n'
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    say_ "run it as root (ssh root@HOST sh -s < FILE)"
    exit 2
  fi
  lock=/run/lock/remedy-$unit.lock holder=/run/lock/remedy-$unit.holder
  exec 9>>"$lock"
  if ! flock -n 9; then
    say_ "waiting up to ${lock_wait_s}s for $lock, held by:" \
      "$(cat "$holder" 2>/dev/null || echo "(no holder recorded)")"
    flock -w "$lock_wait_s" 9 || {
      say_ "another remedy run holds $lock: $(cat "$holder" 2>/dev/null)"
      exit 5
    }
  fi
  printf 'pid %s on %s since %s: the manual script of runbook %s\n' "$$" \
    "$(hostname)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$runbook" >"$holder"
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  durable_failed='' stopped='' failed='' override_failed=''
  new_rev='' boot_pending='' restarts=0 starts=0 lock_commit=''
  toplevel='' ops='' current='(before the first step)'
  trap 'finish_record $?' EXIT
  trap 'on_signal INT' INT
  trap 'on_signal TERM' TERM
}

# A first Ctrl-C or SIGTERM lets the step in progress end and starts no further
# one (but the /run override goes back if it was removed and no switch
# followed); a second ends the script now.
on_signal() {
  if [ -n "$stopped" ]; then
    say_ "a second SIG$1: stopping now, during $current"
    exit $((128 + $([ "$1" = INT ] && echo 2 || echo 15)))
  fi
  stopped="interrupted by SIG$1 during $current" putting_back=yes
  say_ "SIG$1: stopping after $current (again to stop now)"
}

# step N NAME TITLE: run step N (values_N). Its program decides whether its
# stage is on (remedy/host/lib.sh, as in the deploy): the runner passes it the
# path and a stop request, and says what it answers.
step() {
  [ "$mode" = plan ] && { printf '%3s. %s\n' "$1" "$3"; "values_$1" "$mode"; \
      return 0; }
  n=$1 name=$2 title=$3
  current="step $n ($title)"
  out=$("values_$n" apply 2>&1) || true
  verdict='' why='' off=''
  case $out in
  *"@@remedy say stage_off "*)
    off=$(printf '%s\n' "$out" | sed -n 's/^@@remedy say stage_off //p' |
      head -n 1)
    printf '\n== %s. %s: not run (%s)\n' "$n" "$title" "$off" >&2
    return 0 ;;
  esac
  printf '\n== %s. %s\n' "$n" "$title" >&2
  while IFS= read -r line; do
    case $line in
    "@@remedy log "*) l=${line#@@remedy log }; say_ "   ${l#* }" ;;
    "@@remedy note "*) say_ "   note: ${line#@@remedy note }" ;;
    "@@remedy say lock_commit "*) lock_commit=${line#@@remedy say lock_commit \
        } ;;
    "@@remedy say toplevel "*) toplevel=${line#@@remedy say toplevel } ;;
    "@@remedy say new_rev "*) new_rev=${line#@@remedy say new_rev } ;;
    "@@remedy say boot_pending "*)
      boot_pending=${line#@@remedy say boot_pending } ;;
    "@@remedy say restarts "*) restarts=$((restarts + 1)) ;;
    "@@remedy say server_starts "*)
      starts=${line#@@remedy say server_starts } ;;
    "@@remedy say durable_failed "*)
      durable_failed=${line#@@remedy say durable_failed } path=fallback ;;
    "@@remedy say failed "*) failed=${line#@@remedy say failed } ;;
    "@@remedy done "* | "@@remedy noop "* | "@@remedy give-up "*)
      l=${line#@@remedy }
      verdict=${l%% *} why=${l#* } ;;
    "@@remedy "*) ;;
    *) [ -z "$line" ] || say_ "   $line" ;;
    esac
  done <<OUT
$out
OUT
  [ -n "$verdict" ] || verdict=give-up why="the step's program gave no answer"
  case $verdict in
  done) say_ "   done: $why"; result=changed ;;
  noop) say_ "   nothing to do: $why"; result=noop ;;
  *) say_ "   GAVE UP: $why"; result=error ;;
  esac
  ops="$ops$n	$title	$result	$why$_nl"
  [ "$name:$result" != override:error ] || override_failed=yes
}

# The run's path, by the deploy's rule (remedy/core/run/outcome.py): durable at
# next boot when its switch left the boot default pending, durable+fallback when
# the durable path gave up, else the plan's.
run_path() {
  p=$path
  if [ -n "$boot_pending" ]; then p="durable at next boot"
  elif [ -n "$durable_failed" ]; then p=durable+fallback
  fi
}

# The run's outcome, said and recorded on the host (root's, 0600) for the next
# remedy command that reads the host to import into its audit log, once.
finish() {
  [ "$mode" = plan ] && exit 0
  run_path
  line="outcome: path $p"
  [ "$path" != fallback ] || [ -n "$failed$override_failed" ] ||
    line="$line; VOLATILE: tool calling rests on the /run override until the \
durable fix is deployed; a reboot reverts it"
  [ -z "$lock_commit" ] || line="$line; the checkout takes $new_rev"
  [ -z "$boot_pending" ] || line="$line; durable at next boot: $boot_pending \
is the boot default (a reboot activates it)"
  # the server's starts the host's journal counts (a switch or a rollback starts
  # it too), at least the restarts the steps made: as the deploy's outcome
  [ "$starts" -le "$restarts" ] || restarts=$starts
  line="$line; restarts $restarts"
  say_ ""
  say_ "$line"
  if [ -n "$failed" ]; then
    say_ "FAILED: $failed"
    exit 1
  fi
  [ "$path" = fallback ] && [ -z "$boot_pending" ] && exit 3
  [ -n "$boot_pending" ] && exit 6
  exit 0
}
js() { printf '%s' "$1" | sed 's/[\\"]/\\&/g' | tr '\t\n' '  '; }
finish_record() {
  st=$1
  trap - EXIT INT TERM
  case $st in 0 | 3 | 6) result=ok ;; 5) result=locked ;;
  130 | 143) result=interrupted ;; *) result=failed ;; esac
  [ -z "$stopped" ] || result=interrupted
  run_path
  record=${journal%/run-*}/manual-runs-${journal##*/run-}
  record=${record%.json}.jsonl
  o=$(printf '%s' "$ops" | while IFS='	' read -r n t r w; do
    [ -n "$n" ] || continue
    printf '{"name": "%s", "changed": %s, "succeeded": %s, "why": "%s"}, ' \
      "$(js "$t")" "$([ "$r" = changed ] && echo true || echo false)" \
      "$([ "$r" = error ] && echo false || echo true)" "$(js "$w")"
  done)
  line=$(
    printf '{"host": "%s", "result": "%s", "time": "%s", "operator": "%s", ' \
      "$(js "$host_name")" "$result" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
      "$(js "manual script, $(id -un)@$(hostname)")"
    printf '"runbook": "%s", "issues": [%s], "path": "%s", ' \
      "$runbook" "$issues" "$p"
    printf '"operations": [%s], "details": {"run_id": "%s", ' "${o%, }" \
      "$(js "$run_id")"
    printf '"started": "%s", "exit": %s, "manual_script": true, ' \
      "$started" "$st"
    printf '"restarts": %s, "lock_commit": "%s", "toplevel": "%s", ' \
      "$restarts" "$(js "$lock_commit")" "$(js "$toplevel")"
    printf '"failed": "%s", "interrupted": "%s"}}' \
      "$(js "${failed:-$durable_failed}")" "$(js "$stopped")"
  )
  # root's, mode 0600: the snapshot reads it as it reads remedy's own files
  mkdir -p "${record%/*}" && (umask 077 && printf '%s\n' "$line" >>"$record")
  rm -f -- "$holder" "$journal"
  exit "$st"
}
