# URL REF BOUND: the rev REF (default HEAD) has at the git remote URL now, read
# without fetching anything (git ls-remote), in at most BOUND seconds:
# "tip REV", or "unread WHY". Nothing on the host changes.
url=$1 ref=${2:-HEAD} bound=${3:-20}
export GIT_TERMINAL_PROMPT=0  # a remote that asks for a password: an error
out=$(timeout "$bound" git ls-remote -- "$url" "$ref" 2>&1 </dev/null)
rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "unread git ls-remote of $url gave no answer within ${bound}s"
  exit 0
fi
if [ "$rc" -ne 0 ]; then
  why=$(printf '%s\n' "$out" | grep -iE 'fatal|error' | tail -n 1)
  [ -n "$why" ] || why=$(printf '%s\n' "$out" | tail -n 1)
  echo "unread git ls-remote of $url failed: ${why:-exit $rc}"
  exit 0
fi
# the ref itself, else the branch of that name (a lock may say master or
# refs/heads/master)
rev=$(printf '%s\n' "$out" | awk -v r="$ref" '
  $2 == r { print $1; found = 1; exit }
  $2 == "refs/heads/" r && !b { b = $1 }
  END { if (!found && b) print b }')
case $rev in
  *[!0-9a-f]*|'') echo "unread $url has no $ref" ;;
  *) echo "tip $rev" ;;
esac
