# What the server has in flight, read once from vLLM's /metrics at $1: one line,
# "idle", "busy RUNNING WAITING", "open N PORT WHY", "unreachable CODE" or
# "unknown WHY". vLLM's V1 gauges vllm:num_requests_running and _waiting are
# summed over every model_name and engine series. A server without them
# (--disable-log-stats: /metrics answers with no vllm gauge; or no /metrics at
# all, 404) has what its connections have: "open N PORT WHY" counts the TCP
# connections open to the server's port on this host (ss), N of them, WHY the
# missing gauges. vLLM answers one request a connection at a time, so N is at
# least what is in flight (an idle keep-alive connection counts until the
# server closes it). A value that is no number, or no ss to count with, is
# "load unknown", never idle.
server_load() {
  _page=$(curl -sS --max-time 5 -w '\n@@remedy:http %{http_code}\n' \
      "$1/metrics" 2>/dev/null)
  _code=$(printf '%s\n' "$_page" | sed -n 's/^@@remedy:http //p')
  case $_code in
  200) ;;
  404)
    server_connections "$1" "$1/metrics answers 404"
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
  if [ "$_load" = no-gauge ]; then
    server_connections "$1" "/metrics has no vllm:num_requests_running or \
_waiting gauge"
  else
    echo "$_load"
  fi
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
# not count), WHY ($2) the request gauges are missing; "unknown" without ss.
server_connections() {
  _port=$(server_port "$1")
  case $_port in '' | *[!0-9]*)
    echo "unknown $2, and the port of $1 is no number"
    return 0 ;;
  esac
  if ! _conns=$(ss -Htn state established "( sport = :$_port )" 2>&1); then
    echo "unknown $2, and ss cannot count the connections to port $_port"
    return 0
  fi
  _n=$(printf '%s\n' "$_conns" | awk 'NF { n++ } END { print n + 0 }')
  echo "open $_n $_port $2"
}
