# Remove the scratch clones /tmp/$1 of user $2: a nix that a stop request ends
# may still write into one for a moment, so look again, up to five times a
# second apart; the last try says why it failed.
for _ in 1 2 3 4 5; do
  find /tmp -maxdepth 1 -name "$1" -user "$2" -exec rm -rf -- {} + 2>/dev/null
  [ -z "$(find /tmp -maxdepth 1 -name "$1" -user "$2")" ] && exit 0
  sleep 1
done
find /tmp -maxdepth 1 -name "$1" -user "$2" -exec rm -rf -- {} +
