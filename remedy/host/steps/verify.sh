# Verify tool calling: wait (up to ready_timeout_s) for the server, then require
# the tool-call probe to be parsed and the serving process to have the wanted
# parser and variables (items want:KEY=VALUE; later:KEY is left out when the
# drain postponed the restart). A check: it changes nothing. stage durable: a
# failure gives up the durable path; fallback: the run fails. Three unparsed
# answers in a row end the wait; the model answering in prose three rounds
# running, with the configuration right, is "not verified", never a reason to
# roll back (stage reboot: after remedy reboot, a failure names itself).
# probe_head and probe_tail: the probe's request body before and
# after the model id. It says the server's starts in this run (server_starts).
need journal run_id unit stage server_url model probe_timeout_s \
    ready_timeout_s \
  parsed_before probe_head probe_tail
shift "$nargs"
# @include-text PROBE probe.sh
# @include probe_outcome.sh
# the server's starts so far in this run, from the host's journal (the outcome's
# restarts: a switch or a rollback starts it too)
starts=$(server_starts_since "$unit")
[ -z "$starts" ] || say server_starts "$starts"
postponed=$(jget restart_postponed)
if [ -n "$postponed" ]; then  # live waits for the postponed restart
  wanted=
  for i in "$@"; do
    case $i in want:*)
      k=${i#want:}
      k=${k%%=*}
      case " $* " in *" later:$k "*) continue ;; esac ;;
    esac
    wanted="$wanted$i$_nl"
  done
  set -f
  IFS=$_nl
  # shellcheck disable=SC2086  # the items, one a line
  set -- $wanted
  unset IFS
  set +f
fi
out=$(mktemp) || give_up "cannot make a temporary file"
trap 'rm -f -- "$out"' EXIT
probe() {  # one probe: its outcome in $outcome, its reason in $reason
  sh -c "$(PROBE)" sh "$server_url" "$model" "$probe_timeout_s" 3 \
    "$probe_head" "$probe_tail" >"$out" 2>&1
  probe_outcome "$out"
}
pid=$(main_pid "$unit")
if [ "$parsed_before" = yes ] && [ "$pid" = "$(jget pid_at_start)" ] &&
  [ -z "$(serving_lacks "$unit" "$@")" ]; then
  probe
  say probe_after "$outcome"
  noop "nothing was restarted and the probe was parsed before the run"
fi
start=$(date +%s)
deadline=$((start + ready_timeout_s))
unparsed=0 prose=0 noted=0 why='' unverified=''
while :; do
  probe
  elapsed=$(($(date +%s) - start))
  if [ "$outcome" = inconclusive ]; then prose=$((prose + 1)); else prose=0; fi
  if [ "$outcome" = parsed ] || [ "$prose" -ge 3 ]; then
    say probe_after "$outcome"
    lacking=$(serving_lacks "$unit" "$@")
    pid=$(main_pid "$unit")
    if [ -n "$lacking" ]; then
      why="the probe is parsed but systemd runs without $lacking (pid $pid)"
    elif [ "$outcome" = inconclusive ]; then
      unverified="the serving process (pid $pid) has the wanted parser and \
variables, but the model answered in prose 9 times: $reason"
    else
      log green "verified after ${elapsed}s: the serving process (pid $pid) \
has the wanted parser and variables; probe parsed"
    fi
    break
  fi
  if [ "$outcome" = unparsed ]; then
    unparsed=$((unparsed + 1))
    if [ "$unparsed" -ge 3 ]; then
      say probe_after "$outcome"
      why="the probe stays unparsed: $reason"
      break
    fi
  fi
  if [ "$(date +%s)" -gt "$deadline" ]; then
    say probe_after "$outcome"
    why="not ready after ${ready_timeout_s}s (ready_timeout_s): $outcome: \
$reason"
    break
  fi
  if [ $((elapsed - noted)) -ge 5 ]; then
    log blue "waiting for the server ($outcome, ${elapsed}s of \
${ready_timeout_s}s)"
    noted=$elapsed
  fi
  sleep 1
done
if [ -n "$unverified" ]; then
  log yellow "NOT VERIFIED: $unverified"
  say unverified "$unverified"
  noop "not verified: $unverified"
fi
[ -n "$why" ] || noop "verified: the tool-call probe is parsed"
say verification "$why"
# after remedy reboot: nothing to roll back here (the caller says what follows)
[ "$stage" != reboot ] || give_up "the verify after the boot failed: $why"
if [ "$stage" = durable ]; then
  log red "durable path failed verification: $why; rolling back"
  give_up "verification failed: $why"
fi
say failed "fallback verification failed: $why"
give_up "fallback verification failed: $why"
