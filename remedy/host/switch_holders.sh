# Who holds the switch: the transient unit of a nixos-rebuild (also under the
# name `nixos-rebuild-switch-to-configuration-<8 hex>` of some 26.05-pre
# nixos-rebuild-ng builds, nixpkgs#463029, reverted by #499837), or a process
# with an flock on switch-to-configuration's lock (read from /proc/locks, so
# nothing is created or taken). Prints "holder <what>" lines; none: free.
h='-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'
systemctl list-units --plain --no-legend --no-pager \
  --state=active,activating,deactivating,reloading \
  'nixos-rebuild-switch-to-configuration*.service' 2>/dev/null |
  awk -v h="$h" '
    $1 ~ ("^nixos-rebuild-switch-to-configuration(" h ")?[.]service$") {
      print $1 }' |
  while read -r u; do
    printf 'holder %s (pid %s)\n' "$u" "$(systemctl show -P MainPID "$u")"
  done
if i=$(stat -Lc %i /run/nixos/switch-to-configuration.lock 2>/dev/null); then
  awk -v i="$i" \
      '$2 == "FLOCK" { n = split($6, a, ":"); if (a[n] == i) print $5 }' \
    /proc/locks 2>/dev/null | sort -u | while read -r pid; do
    printf 'holder pid %s: %s\n' "$pid" "$(tr '\0' ' ' < "/proc/$pid/cmdline" \
2>/dev/null)"
  done
fi
exit 0
