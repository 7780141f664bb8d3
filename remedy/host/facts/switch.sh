# The last switch-to-configuration of nixos-rebuild-ng's transient unit in this boot,
# as systemd recorded it (a run whose SSH session dropped learns its result here), and
# the units that are failed now. The unit is also `…-<8 hex>` in some 26.05-pre
# nixos-rebuild-ng builds (nixpkgs#463029, reverted by #499837). Its state comes from
# list-units: a `systemctl show` would load the unit again (systemd 252 then keeps it).
#
# The state: the last of the unit's lines whose third field (ACTIVE) is active,
# activating, deactivating or reloading, else the first line's; the failed units' first
# fields. The programs' lines are read in the shell (fields split as awk splits them).
#
# A person's switch says what went wrong on their terminal, not in the journal
# (released nixos-rebuild-ng runs it with `systemd-run --pipe`): so no words of it are
# read here, only systemd's record (the exit status) and the system's state. NixOS
# 26.05's switch inhibitors compare the new system's switch-inhibitors with the booted
# system's (switchable-system.nix): "inhibitors booted|profile SHA256" ("none": no such
# file) say whether a switch of the boot default would be refused.
echo "@@remedy:section nix.switch"
u='@SWITCH_UNIT@*.service'
switch_read() {
  _nl='
'
  _a='' _s=
  if [ -n "$_swk" ]; then
    _s=$_sws
  else
    _o=$(systemctl list-units --all --plain --no-legend --no-pager "$u" 2>/dev/null)
    set -f; IFS=$_nl
    for _l in $_o; do
      unset IFS
      # shellcheck disable=SC2086
      set -- $_l
      case $3 in active | activating | deactivating | reloading) _a=$3 ;; esac
      [ -n "$_s" ] || _s=$3
      IFS=$_nl
    done
    unset IFS; set +f
  fi
  printf 'state %s\n' "${_a:-$_s}"
  _o=$(journalctl -q -b -u "$u" -n 40 -o json \
    --output-fields=MESSAGE,EXIT_STATUS,INVOCATION_ID 2>/dev/null)
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $_o
  unset IFS; set +f
  [ $# = 0 ] || printf 'journal %s\n' "$@"
  _o=
  [ "$_nfail" = 0 ] \
    || _o=$(systemctl list-units --failed --plain --no-legend --no-pager 2>/dev/null)
  set -f; IFS=$_nl
  for _l in $_o; do
    unset IFS
    # shellcheck disable=SC2086
    set -- $_l
    printf 'failed %s\n' "$1"
    IFS=$_nl
  done
  unset IFS; set +f
  for _w in booted:/run/booted-system profile:/nix/var/nix/profiles/system; do
    _f=$(readlink -f "${_w#*:}" 2>/dev/null)/switch-inhibitors
    _h=none
    [ ! -f "$_f" ] || _h=$(sha256sum < "$_f" 2>/dev/null | awk '{ print $1 }')
    printf 'inhibitors %s %s\n' "${_w%%:*}" "${_h:-none}"
  done
}
switch_read
