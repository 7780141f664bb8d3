# The evaluation of what remedy's managed file overrides (sh -c SCRIPT sh
# RECORD KEY NIX-ARGV...): its answer, recorded when it evaluates.
echo "@@remedy:section nix.options"
rec=$1 key=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"  # also Nix 2.8's `nix eval --json`, which ends without a newline
echo "@@remedy:exit $rc"
# the answer, kept on the host (remedy.core.config.options.RECORD) under KEY: root's, mode
# 0600, a temporary file in the same directory and a rename
if [ "$rc" = 0 ] && [ -n "$key" ] && [ -n "$rec" ]; then
  d=${rec%/*}
  # shellcheck disable=SC2174  # the last directory is remedy's own
  mkdir -p -m 0700 -- "$d" 2>/dev/null
  if tmp=$(mktemp "$d/.options.XXXXXXXX" 2>/dev/null); then
    if { printf 'key %s\ntime %s\n' "$key" "$(date +%s)"; printf '%s\n' "$out"; } >"$tmp" \
      && chmod 0600 -- "$tmp" && mv -f -T -- "$tmp" "$rec"; then
      echo "@@remedy:recorded $rec"
    else
      rm -f -- "$tmp"
    fi
  fi
fi
echo '@END@'
