# Remove the /run drop-ins of the unit (items) that carry only data settings
# (what `remedy adopt` made a setting of) the next boot now holds, and
# daemon-reload: after the verify, so a durable path that fails leaves them
# holding live right. The running server keeps what it started with: no restart.
need unit
shift "$nargs"
gone=
for f in "$@"; do [ -e "$f" ] && gone="$gone $f"; done
[ -n "$gone" ] || noop "no /run drop-in carries what the next boot holds"
would "remove$gone"
log blue "the next boot holds what$gone carried"
rm -f -- "$@" || give_up "cannot remove$gone"
systemctl daemon-reload || give_up "systemctl daemon-reload failed"
done_ "removed$gone"
