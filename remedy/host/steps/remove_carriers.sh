# Remove the /run drop-ins of the unit (items) that carry only data settings
# (what `remedy adopt` made a setting of) the next boot now holds, and
# daemon-reload: after the verify, so a durable path that fails leaves them
# holding live right. The running server keeps what it started with: no restart.
# A drop-in that sets a property (CPUWeight=, LimitNOFILE=...) goes only while
# the running system is the next boot's: the daemon-reload applies what the
# running system's unit files set, to the live unit at once, so while an older
# system runs (the new one is the boot default only) it stays, said, and a
# reboot removes it. One of variables only goes: the process keeps its
# environment.
need unit
shift "$nargs"
running=$(readlink -f /run/current-system 2>/dev/null)
next=$(readlink -f /nix/var/nix/profiles/system 2>/dev/null)
goes() {  # FILE: it may go now
  [ -e "$1" ] || return 1
  [ -n "$running" ] && [ "$running" = "$next" ] && return 0
  ! grep -Evq '^[[:space:]]*([#;].*|\[Service\]|Environment=.*)?$' "$1"
}
gone='' kept=''
for f in "$@"; do
  if goes "$f"; then gone="$gone $f"
  elif [ -e "$f" ]; then kept="$kept $f"
  fi
done
if [ -n "$kept" ]; then
  said="kept$kept: the running system (${running:-none}) is not the next \
boot's (${next:-none}); removing it now would take what it sets off the live \
unit until the next boot (a reboot removes it)"
  log yellow "$said"
  [ -n "$gone" ] || noop "$said"
fi
[ -n "$gone" ] || noop "no /run drop-in carries what the next boot holds"
would "remove$gone"
log blue "the next boot holds what$gone carried"
for f in "$@"; do
  if goes "$f"; then rm -f -- "$f" || give_up "cannot remove $f"; fi
done
systemctl daemon-reload || give_up "systemctl daemon-reload failed"
done_ "removed$gone"
