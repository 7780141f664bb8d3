# What the server has in flight, read once from vLLM's /metrics at $1: one line,
# "idle", "busy RUNNING WAITING", "no-metrics 404", "unreachable CODE" or
# "unknown WHY". vLLM's V1 gauges vllm:num_requests_running and _waiting are
# summed over every model_name and engine series; no gauge at all
# (--disable-log-stats) or a value that is no number is "load unknown", never
# idle.
server_load() {
  _page=$(curl -sS --max-time 5 -w '\n@@remedy:http %{http_code}\n' \
      "$1/metrics" 2>/dev/null)
  _code=$(printf '%s\n' "$_page" | sed -n 's/^@@remedy:http //p')
  case $_code in
  200) ;;
  404) echo "no-metrics 404"; return 0 ;;
  000 | "") echo "unreachable ${_code:-000}"; return 0 ;;
  *) echo "unknown /metrics answered HTTP $_code"; return 0 ;;
  esac
  # A sample is NAME[{LABELS}] VALUE [TIMESTAMP] (Prometheus' text format): the
  # value is the first field after the label set, whose quoted values may hold
  # spaces, } and \"
  printf '%s\n' "$_page" | awk '
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
      if (!g) print "unknown /metrics has no vllm:num_requests_running or " \
        "_waiting gauge"
      else if (bad) print "unknown /metrics has a gauge that is not a number"
      else if (r == 0 && w == 0) print "idle"
      else printf "busy %d %d\n", r, w
    }'
}
