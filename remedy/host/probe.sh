# The tool-call probe (field-notes section 6): $1 server URL, $2 model id
# (empty: the first id /v1/models lists), $3 timeout per request, $4 tries,
# $5/$6 the request body before and after the model id. An answer in prose is
# asked again, at most $4 times; anything else (a tool call, parsed or raw, an
# error, no answer) ends it. It prints the model line, the tries line, then
# curl's output (body, status line) of the last answer. The facts' read and the
# verify step run it alike.
# @include first_model_id.sh
base=${1%/} model=$2 timeout=$3 tries=$4 out='' i=0
if [ -z "$model" ]; then
  if models=$(curl -sS --connect-timeout 3 --max-time "$timeout" \
      "$base/v1/models" 2>&1); then
    first_model_id "$models"
    printf '@@remedy-model=%s\n' "$model"
    [ -n "$model" ] || out=$(printf '%s' "$models" | head -c 300)
  else
    out=$(printf '%s\n@@remedy-http-status=000' "$models")
  fi
else
  printf '@@remedy-model=%s\n' "$model"
fi
while [ -n "$model" ]; do
  i=$((i + 1))
  out=$(curl -sS --connect-timeout 3 -H 'Content-Type: application/json' \
    -w '\n@@remedy-http-status=%{http_code}\n' -o - --max-time "$timeout" \
    --data-binary "$5$model$6" "$base/v1/chat/completions" 2>&1)
  case "$out" in *'<tool_call>'* | *'<function='* | *'"function"'*) break ;; \
      esac
  case "$out" in *'@@remedy-http-status=200'*) ;; *) break ;; esac
  [ "$i" -lt "$tries" ] || break
done
printf '@@remedy-probe-tries=%s\n%s\n' "$i" "$out"
