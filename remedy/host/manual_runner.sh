# The manual script's runner: it runs each step's host program, in the deploy's
# order, as the deploy runs it; each program decides whether its stage is on
# (remedy/host/lib.sh). The runner takes the host lock, passes the programs the
# plan's path and a stop request, says what they answer, and records the run
# with the outcome the outcome program gives (result, path, exit code, line).
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
  stopped='' lock_commit='' toplevel='' ops='' told='' o_result='' o_why=''
  current='(before the first step)'
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
  n=$1 title=$3
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
}

# The run's outcome: the host's outcome program (remedy/host/steps/outcome.sh,
# the deploy's last step) classifies what the steps answered (result, path,
# exit code, the line); the runner says it and exits with its code.
outcome_of() {
  [ -z "$told" ] || return 0
  told=$(values_outcome check 2>&1) || :
  o_result=$(told_ result) o_path=$(told_ path) o_exit=$(told_ exit)
  o_why=$(told_ why)
  [ -n "$o_result" ] || o_result=failed o_path=none o_exit=1 \
    o_why="the outcome program gave no answer: $(printf '%s\n' "$told" |
      tail -n 1)"
}
told_() { printf '%s\n' "$told" | sed -n "s/^@@remedy say outcome_$1 //p"; }

# The run's outcome, said and recorded on the host (root's, 0600) for the next
# remedy command that reads the host to import into its audit log, once.
finish() {
  [ "$mode" = plan ] && exit 0
  outcome_of
  say_ ""
  say_ "outcome: $(told_ line)"
  # what is not ok, as the outcome program gave it up ("REFUSED: ...")
  gave=$(printf '%s\n' "$told" | sed -n 's/^@@remedy give-up //p')
  [ -z "$gave" ] || say_ "$gave"
  exit "$o_exit"
}
js() { printf '%s' "$1" | sed 's/[\\"]/\\&/g' | tr '\t\n' '  '; }
finish_record() {
  st=$1
  trap - EXIT INT TERM
  # ended before its outcome (a second signal, a shell that failed): the
  # outcome program says what the steps did, with the stop if there was one;
  # a shell that failed is the run failing
  if [ -z "$told" ]; then
    outcome_of
    [ -n "$stopped" ] || [ "$st" = 0 ] || o_result=failed \
      o_why="the script ended (exit $st) during $current"
  fi
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
      "$(js "$host_name")" "$o_result" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
      "$(js "manual script, $(id -un)@$(hostname)")"
    printf '"runbook": "%s", "issues": [%s], "path": "%s", ' \
      "$runbook" "$issues" "$o_path"
    printf '"operations": [%s], "details": {"run_id": "%s", ' "${o%, }" \
      "$(js "$run_id")"
    printf '"started": "%s", "exit": %s, "manual_script": true, ' \
      "$started" "$st"
    printf '"restarts": %s, "lock_commit": "%s", "toplevel": "%s", ' \
      "$(n=$(told_ restarts); echo "${n:-0}")" "$(js "$lock_commit")" \
      "$(js "$toplevel")"
    printf '"outcome": "%s", "failed": "%s", "interrupted": "%s"}}' \
      "$(js "$(told_ line)")" "$(js "$o_why")" "$(js "$stopped")"
  )
  # root's, mode 0600: the snapshot reads it as it reads remedy's own files
  mkdir -p "${record%/*}" && (umask 077 && printf '%s\n' "$line" >>"$record")
  rm -f -- "$holder" "$journal"
  exit "$st"
}
