# CURRENT NEW [BOUND] [BUILDER]: what a switch from the system CURRENT to the
# built system NEW changes beyond the settings, both in the store already
# (nothing is built or fetched): system_boot's lines, then the packages whose
# version changes from `nix store diff-closures` (BOUND seconds at most,
# default 60), each line prefixed "diff ", or "unread WHY". With a BUILDER no
# nix runs on this host, so the packages are not read. The proof and the
# review before the switch both run it.
# @include system_boot.sh
bound=${3:-60}
if [ -n "${4:-}" ]; then
  echo "unread not read: built on the builder $4, and no nix runs here"
  exit 0
fi
out=$(timeout "$bound" nix --extra-experimental-features 'nix-command flakes' \
  store diff-closures "$1" "$2" 2>&1 </dev/null)
rc=$?
if [ "$rc" -eq 0 ]; then
  printf '%s\n' "$out" | sed '/^$/d; s/^/diff /'
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "unread nix store diff-closures gave no answer within ${bound}s"
else
  why=$(printf '%s\n' "$out" | grep -iE 'error|fatal' | tail -n 1)
  [ -n "$why" ] ||
    why=$(printf '%s\n' "$out" | sed '/^[[:space:]]*$/d' | tail -n 1)
  echo "unread nix store diff-closures failed: ${why:-exit $rc}"
fi
