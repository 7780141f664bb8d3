# Wait for an idle server before a restart: read vLLM's /metrics once a second
# until nothing is in flight, for up to wait_s seconds of this call (the deploy
# calls again, so a stop request is seen between two; last=yes: the end of
# timeout_s). vLLM's gauges are the engine's counts: with them at 0 it waits
# until no connection to the server's port is busy either (a response still
# streaming out; a keep-alive connection quiet for 5 s is idle). A server
# without the request gauges (--disable-log-stats) is waited for until no
# connection is open to its port (ss counts them: server_load.sh). A 404 for
# /metrics is not vLLM: load unknown. Past the bound an urgent restart (a
# setting that cannot wait, or --restart now) goes ahead and says how many
# requests it cuts; a window restart is postponed (the run journal says so: no
# override goes, the switch only sets the boot default, nothing restarts). It
# changes nothing but the run journal (a postponement).
need journal run_id server_url timeout_s wait_s last first urgent
postponed=$(jget restart_postponed)
[ -z "$postponed" ] || noop "restart postponed already: $postponed"
record() {
  log yellow "$1"
  say restart_postponed "$1"
  jset "restart_postponed=$1" || give_up "cannot write the run journal $journal"
  done_ "$1"
}
# decided: the postponement a check of this run found (the deploy records it so,
# without waiting again)
[ -z "${decided:-}" ] || { would "$decided"; record "$decided"; }
end=$(($(date +%s) + wait_s))
said_at=$(date +%s)
waited=0
while :; do
  found=$(server_load "$server_url")
  case $found in busy* | "open "[1-9]*) ;; *) break ;; esac
  [ "$(date +%s)" -lt "$end" ] || break
  if [ "$waited" = 0 ] && [ "$first" = yes ]; then
    log blue "waiting up to ${timeout_s}s for an idle server \
($server_url/metrics)"
  fi
  waited=1
  if [ $(($(date +%s) - said_at)) -ge 10 ]; then
    # shellcheck disable=SC2086  # its words
    set -- $found
    case $1 in
    open) log blue "$2 connection(s) open to port $3; $((end - $(date +%s)))s \
left" ;;
    *) log blue "$2 running, $3 waiting; $((end - $(date +%s)))s left" ;;
    esac
    said_at=$(date +%s)
  fi
  sleep 1
done
# shellcheck disable=SC2086  # its words
set -- $found
case $1 in
idle)
  [ "$waited" = 0 ] || noop "the server is idle: its requests completed"
  noop "the server is idle: no request in flight" ;;
unreachable) noop "the server does not answer (${2:-no answer}): nothing to \
drain" ;;
open)
  [ "$2" = 0 ] || [ "$last" = yes ] || { answer wait "$2 connection(s) open to \
port $3"; exit 0; }
  n=$2 port=$3
  shift 3
  if [ "$n" = 0 ]; then
    [ "$waited" = 0 ] || noop "the server is idle: its connections closed ($*)"
    noop "the server is idle: no connection open to port $port ($*)"
  fi
  if [ "$urgent" = yes ]; then
    said="still $n connection(s) open to port $port after ${timeout_s}s ($*): \
restarting anyway (the restart is now), cutting $n request(s)"
    log yellow "$said"
    noop "$said"
  fi
  why="$n connection(s) still open to port $port after \
drain_timeout_s=$timeout_s ($*): the window restart is postponed to the next \
run"
  would "$why"
  record "$why" ;;
esac
[ "$1" = busy ] && [ "$last" != yes ] && { answer wait "$2 running, $3 \
waiting"; exit 0; }
if [ "$urgent" = yes ] && [ "$1" = unknown ]; then
  shift
  said="load unknown ($*): restarting anyway (the restart is now); whatever is \
in flight is cut"
  log yellow "$said"
  note "$said"
  noop "$said"
elif [ "$urgent" = yes ]; then
  said="still $2 running, $3 waiting after ${timeout_s}s: restarting anyway \
(the restart is now), cutting $(($2 + $3)) request(s)"
  log yellow "$said"
  noop "$said"
elif [ "$1" = unknown ]; then
  shift
  why="load unknown ($*): the window restart is postponed to the next run"
else
  why="$(($2 + $3)) request(s) still in flight after \
drain_timeout_s=$timeout_s: the window restart is postponed to the next run"
fi
would "$why"
record "$why"
