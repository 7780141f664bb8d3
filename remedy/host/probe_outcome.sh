# probe_outcome FILE: what the probe's answer (FILE: what probe.sh printed)
# says, in $outcome (parsed, unparsed, inconclusive, http_error or unreachable)
# and $reason: remedy.core.readings.probe.classify in shell, the JSON read by
# json_paths.awk. A model answering in prose is inconclusive: it says nothing of
# the parser.
# @include-text JSON_PATHS json_paths.awk
probe_outcome() {
  _po_status=$(sed -n \
      's/^@@remedy-http-status=0*\([0-9][0-9]*\)[[:space:]]*$/\1/p' \
    "$1" | tail -n 1)
  _po_body=$(grep -v -e '^@@remedy-http-status=' -e '^@@remedy-model=' \
    -e '^@@remedy-probe-tries=' -e '^curl: (' "$1")
  if grep -q '^@@remedy-model=[[:space:]]*$' "$1" &&
    ! grep -q '^@@remedy-model=.*[^[:space:]]' "$1"; then
    outcome=http_error
    reason="/v1/models lists no model id: '$(printf '%s' "$_po_body" |
      tr '\n' ' ' | sed 's/^ *//; s/ *$//' | cut -c1-160)'"
    return 0
  fi
  if [ -z "$_po_status" ] || [ "$_po_status" = 0 ]; then
    outcome=unreachable
    reason=$(grep '^curl: (' "$1" | awk '{ printf "%s%s", s, $0; s = "; " }')
    reason=${reason:-no answer}
    return 0
  fi
  _po_json=$(printf '%s' "$_po_body" | awk "$(JSON_PATHS)" 2>/dev/null) ||
    _po_json=''
  _po() {  # PATH TYPE: the value at PATH if it has TYPE (set -- nothing: none)
    printf '%s\n' "$_po_json" | awk -F '\t' -v p="$1" -v t="$2" \
      '$1 == p && $2 == t { print substr($0, length(p t) + 3); f = 1; exit }
       END { exit !f }'
  }
  if [ "$_po_status" != 200 ]; then
    outcome=http_error reason="HTTP $_po_status"
    _po_m=$(_po message string) && [ -n "$_po_m" ] && reason="$reason: $_po_m"
    return 0
  fi
  if ! _po choices.0.message object >/dev/null; then
    outcome=http_error reason="HTTP 200 but not a chat completion"
    return 0
  fi
  _po_content=$(_po choices.0.message.content string) || _po_content=''
  _po_calls=$(_po choices.0.message.tool_calls array) || _po_calls=0
  if [ "${_po_calls:-0}" = 0 ]; then
    case $_po_content in
    *"<tool_call>"* | *"<function="*)
      outcome=unparsed
      reason="HTTP 200 with no tool_calls and the raw <tool_call> text in \
content: the tool-call parser did not parse the model's output" ;;
    *)
      outcome=inconclusive
      reason="HTTP 200 in prose: the model answered without calling the tool \
(says nothing about the parser)" ;;
    esac
    return 0
  fi
  _po_fn=choices.0.message.tool_calls.0.function
  _po_name=$(_po "$_po_fn.name" string) || _po_name=''
  _po_args=$(_po "$_po_fn.arguments" string) || _po_args=''
  if [ "$_po_name" != get_weather ] ||
    ! printf '%s' "$_po_args" | awk "$(JSON_PATHS)" 2>/dev/null |
    grep -q "^$(printf '\t')object$(printf '\t')"; then
    outcome=unparsed
    reason="tool call malformed: the function ${_po_name:-(none)} with \
arguments \
$(printf '%.80s' "$_po_args")"
    return 0
  fi
  outcome=parsed reason="get_weather called with object arguments"
}
