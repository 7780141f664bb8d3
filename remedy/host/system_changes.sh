# CURRENT NEW BOUND: what a switch from the system CURRENT to the built system
# NEW changes beyond the settings, both already in the store (nothing is built
# or fetched): system_boot's lines, then the packages whose version changes
# from `nix store diff-closures`, each line prefixed "diff ", or "unread WHY";
# the diff is bounded to BOUND seconds.
# @include system_boot.sh
bound=${3:-60}
out=$(timeout "$bound" nix --extra-experimental-features 'nix-command flakes' \
  store diff-closures "$1" "$2" 2>&1 </dev/null)
rc=$?
if [ "$rc" -eq 0 ]; then
  printf '%s\n' "$out" | sed '/^$/d; s/^/diff /'
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "unread nix store diff-closures gave no answer within ${bound}s"
else
  why=$(printf '%s\n' "$out" | grep -i 'error' | tail -n 1)
  echo "unread nix store diff-closures failed: ${why:-exit $rc}"
fi
