# The answer of a command ("$@"): its exit status, stdout and stderr, each
# output in base64 so any bytes survive line-based reading. Exits 1 only when
# it cannot make its temporary files.
answer() {
  o=$(mktemp) && e=$(mktemp) || exit 1
  rc=0
  "$@" >"$o" 2>"$e" </dev/null || rc=$?
  printf 'rc %s\nout %s\nerr %s\n' "$rc" "$(base64 -w0 <"$o")" \
    "$(base64 -w0 <"$e")"
  rm -f "$o" "$e"
}
