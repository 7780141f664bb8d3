# What the server has in flight, read once from vLLM's /metrics at $1: one line,
# "idle", "busy RUNNING WAITING", "open N PORT WHY", "unreachable CODE" or
# "unknown WHY". vLLM's V1 gauges vllm:num_requests_running and _waiting are
# summed over every model_name and engine series. They are the engine's counts
# ("Number of requests in model execution batches", vllm/v1/metrics/loggers.py
# at 005a810b, lines 188-203, PrometheusStatLogger):
# a request being tokenised, or a response still streaming out after the
# engine's last step, is not among them. So gauges at 0 are idle only when no
# connection to the server's port is busy either: "open N PORT WHY" counts the
# busy ones (ss on this host), a connection being busy while bytes wait in
# either queue or it sent or received any in the last 5 s; a quiet
# one is a keep-alive connection between requests (vLLM's server closes those
# after VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s), idle, and read again a second later
# so a response sent just after the engine's read counts. A server without the
# gauges (--disable-log-stats: /metrics answers with no vllm gauge) has what
# all its connections have, quiet or not: "open N PORT WHY" counts every TCP
# connection open to the server's port (vLLM answers one request a connection
# at a time, so N is at least what is in flight; an idle keep-alive connection
# counts until the server closes it). A 404 for /metrics is not vLLM (vLLM
# mounts /metrics always, with or without the gauges): something else answers
# on the port, "load unknown". A value that is no number, or no ss to count
# with, is "load unknown", never idle.
server_load() {
  _page=$(curl -sS --max-time 5 -w '\n@@remedy:http %{http_code}\n' \
      "$1/metrics" 2>/dev/null)
  _code=$(printf '%s\n' "$_page" | sed -n 's/^@@remedy:http //p')
  case $_code in
  200) ;;
  404)
    echo "unknown $1/metrics answers 404: not vLLM's server (vLLM always \
serves /metrics)"
    return 0 ;;
  000 | "") echo "unreachable ${_code:-000}"; return 0 ;;
  *) echo "unknown /metrics answered HTTP $_code"; return 0 ;;
  esac
  # A sample is NAME[{LABELS}] VALUE [TIMESTAMP] (Prometheus' text format): the
  # value is the first field after the label set, whose quoted values may hold
  # spaces, } and \"
  _load=$(printf '%s\n' "$_page" | awk '
    /^vllm:num_requests_(running|waiting)[{ \t]/ {
      g++
      name = $0; sub(/[{ \t].*/, "", name)
      rest = substr($0, length(name) + 1)
      if (substr(rest, 1, 1) == "{") {
        i = 2; q = 0
        while (i <= length(rest)) {
          c = substr(rest, i, 1)
          if (q) { if (c == "\\") i++; else if (c == "\"") q = 0 }
          else if (c == "\"") q = 1
          else if (c == "}") break
          i++
        }
        rest = substr(rest, i + 1)
      }
      sub(/^[ \t]+/, "", rest); split(rest, f, /[ \t]+/); v = f[1]
      if (v !~ /^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$/) { bad++; next }
      if (name == "vllm:num_requests_running") r += v; else w += v
    }
    END {
      if (!g) print "no-gauge"
      else if (bad) print "unknown /metrics has a gauge that is not a number"
      else if (r == 0 && w == 0) print "idle"
      else printf "busy %d %d\n", r, w
    }')
  case $_load in
  no-gauge) server_connections "$1" "/metrics has no vllm:num_requests_running \
or _waiting gauge" ;;
  idle)
    _busy=$(server_connections "$1" "vLLM's gauges (the engine's) read 0 while \
responses are open" busy)
    case $_busy in "open 0 "*) echo idle ;; *) echo "$_busy" ;; esac ;;
  *) echo "$_load" ;;
  esac
}

# The port of the server's URL $1 (80 or 443 when it names none).
server_port() {
  _hp=${1#*://}
  _hp=${_hp%%/*}
  _hp=${_hp##*@}
  case $_hp in
  \[*\]:*) echo "${_hp##*]:}" ;;
  \[*) ;;
  *:*) echo "${_hp##*:}" ;;
  esac | grep . || case $1 in https:*) echo 443 ;; *) echo 80 ;; esac
}

# "open N PORT WHY": the TCP connections open to the port of the server's URL
# $1 on this host (ss; the server side of each, so a client's own socket does
# not count), WHY ($2) why they count; "unknown" without ss. With $3 "busy"
# only the busy ones count (bytes queued, or sent or received in the last
# 5 s), and quiet ones are looked at again a second later.
server_connections() {
  _port=$(server_port "$1")
  case $_port in '' | *[!0-9]*)
    echo "unknown $2, and the port of $1 is no number"
    return 0 ;;
  esac
  _tries=${3:+2}
  while :; do
    if ! _conns=$(ss -Htni state established "( sport = :$_port )" 2>&1); then
      echo "unknown $2, and ss cannot count the connections to port $_port"
      return 0
    fi
    # ss -i: a connection's line (Recv-Q Send-Q local peer), then its TCP info
    # (lastsnd:MS lastrcv:MS, left out when 0: just now)
    _n=$(printf '%s\n' "$_conns" | awk -v busy="${3:-}" -v quiet=5000 '
      function since(what,   v) {
        if (!match(info, what ":[0-9]+")) return 0
        v = substr(info, RSTART + length(what) + 1, RLENGTH - length(what) - 1)
        return v + 0
      }
      function one() {
        all++
        if (busy == "" || rq > 0 || sq > 0 || since("lastsnd") < quiet ||
            since("lastrcv") < quiet) n++
      }
      /^[0-9]/ { if (have) one(); have = 1; rq = $1; sq = $2; info = ""; next }
      NF { info = info " " $0 }
      END { if (have) one(); print n + 0, all + 0 }')
    # a quiet connection: once more a second later (busy only)
    case $_tries:$_n in 2:"0 "[1-9]*) _tries=1; sleep 1; continue ;; esac
    break
  done
  echo "open ${_n%% *} $_port $2"
}
