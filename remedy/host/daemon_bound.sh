# nix-daemon's builds bounded for one run (issue 44 item 7). The owner's nix
# runs in a transient scope with MemoryMax (nix_bounded.sh), but with a
# nix-daemon (NixOS always has one) the builds run in nix-daemon.service's
# cgroup, outside that scope: the scope bounds the evaluation only. So for the
# run nix-daemon.service gets a runtime MemoryMax too, and afterwards its own
# value back.
# $1 set|restore, $2 the record (root's, 0600: the daemon's MemoryMax before and
# whether a runtime drop-in of it was there), $3 (set) the bound in bytes.
# set: an earlier record (an interrupted run's) is restored first; then the
# record is written (atomically) before the property is set. restore: the
# recorded value back, the runtime drop-in that set made removed, then the
# record; without a record, nothing. Prints what it did (nothing: nothing).
unit=nix-daemon.service
dropin=/run/systemd/system.control/$unit.d/50-MemoryMax.conf
act=$1 rec=$2
restore() {
  [ -f "$rec" ] || return 0
  was=$(sed -n 's/^was=//p' "$rec") had=$(sed -n 's/^had=//p' "$rec")
  systemctl set-property --runtime "$unit" "MemoryMax=${was:-infinity}" ||
    return 1
  [ "$had" = yes ] || rm -f -- "$dropin"
  rm -f -- "$rec"
  echo "$unit's MemoryMax is back to ${was:-infinity}"
}
case $act in
restore) restore ;;
set)
  max=$3
  restore >/dev/null || exit 1
  if [ ! -d /run/systemd/system ] ||
    [ "$(systemctl show -P LoadState "$unit" 2>/dev/null)" != loaded ]; then
    echo "no $unit here: the owner's nix builds in its own scope"
    exit 0
  fi
  was=$(systemctl show -P MemoryMax "$unit") || exit 1
  had=no
  [ ! -e "$dropin" ] || had=yes
  mkdir -p -- "${rec%/*}" && (umask 077 && printf 'was=%s\nhad=%s\n' "$was" \
    "$had" >"$rec.remedy-tmp") && mv -f -- "$rec.remedy-tmp" "$rec" || exit 1
  systemctl set-property --runtime "$unit" "MemoryMax=$max" || exit 1
  echo "$unit's builds bounded for this run: MemoryMax=$max (was $was)"
  ;;
*) echo "daemon_bound.sh: set or restore, not '$act'" >&2; exit 2 ;;
esac
