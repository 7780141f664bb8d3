# Remove the stale /run override before the switch, so the durable configuration
# takes over with one restart: the managed drop-in, every /run drop-in of the
# unit that sets ExecStart (never another runtime drop-in: a `set-property
# --runtime` limit stays), and the /run start scripts they ran (the managed one,
# script, and the one systemd runs now if it is under /run), and the /run copy
# of the memory guard a removed drop-in ran; then daemon-reload.
# Not when the drain postponed the restart: the override keeps live right until
# then.
need journal run_id unit dropin script
postponed=$(jget restart_postponed)
[ -z "$postponed" ] || noop "kept: $postponed"
d=/run/systemd/system/$unit.d
gone=
for f in "$d"/*.conf; do
  [ -f "$f" ] || continue
  if [ "$f" = "$dropin" ] || grep -q '^[[:space:]]*ExecStart=' "$f"; then
    gone="$gone$f$_nl"
    g='s|^ExecCondition=+\{0,1\}/bin/sh \(/run/[^ ]*/remedy-memory-guard\) '
    g=$g'.*|\1|p'
    g=$(sed -n "$g" "$f")
    [ -z "$g" ] || [ ! -e "$g" ] || gone="$gone$g$_nl"
  fi
done
running=$(systemctl show -P ExecStart -- "$unit" 2>/dev/null |
  sed -n 's/^{ path=\([^ ;]*\).*/\1/p' | head -n 1)
for f in "$script" "$running"; do
  case $f in /run/*) [ -e "$f" ] && gone="$gone$f$_nl" ;; esac
done
[ -n "$gone" ] || noop "no runtime override to remove"
said="remove $(printf '%s' "$gone" | sort -u | tr '\n' ' ')"
would "${said% }"
printf '%s' "$gone" | sort -u | while IFS= read -r f; do
  rm -f -- "$f" && log blue "removed $f"
done
jset removed=yes || give_up "cannot write the run journal $journal"
systemctl daemon-reload || give_up "systemctl daemon-reload failed"
done_ "${said% }"
