# What the checkout's owner runs for FLAKE (sh -c SCRIPT sh DIR MANAGED_FILE IS_FILE
# STATUS_ARGS):
# the managed file's lines, then the checkout's, between markers. The toplevel and HEAD
# come from one rev-parse when it answers just those two lines.
d=$1 m=$2
nl='
'
echo "@@remedy:git"
if [ -n "$3" ]; then
  git -C "$d" ls-files --error-unmatch -- "$m" >/dev/null 2>&1 || echo "untracked"
  git -C "$d" log -1 --format='last-commit %H %ae %an' -- "$m" 2>/dev/null
fi
echo "@@remedy:git-checkout"
ok=1
if top=$(git -C "$d" rev-parse --show-toplevel HEAD 2>&1) && case $top in
  *"$nl"*"$nl"*) false ;; *"$nl"*) ;; *) false ;; esac
then
  echo "top ${top%%"$nl"*}"
  echo "head ${top#*"$nl"}"
elif top=$(git -C "$d" rev-parse --show-toplevel 2>&1); then
  echo "top $top"
  echo "head $(git -C "$d" rev-parse HEAD 2>/dev/null)"
else
  printf '%s\n' "$top" | sed 's/^/error /'
  ok=
fi
if [ -n "$ok" ]; then
  # shellcheck disable=SC2086
  _s=$(git -C "$d" $4 2>&1; echo .)
  _s=${_s%.}
  # sed 's/^/status /' for what the shell cannot tell (an empty line, no last newline)
  case $_s in
  '') ;;
  "$nl"* | *"$nl$nl"* | *[!"$nl"]) printf '%s' "$_s" | sed 's/^/status /' ;;
  *)
    set -f; IFS=$nl
    # shellcheck disable=SC2086
    set -- $_s
    unset IFS; set +f
    printf 'status %s\n' "$@" ;;
  esac
fi
echo "@@remedy:git-end"
