# What the data settings read (remedy.core.config.data_settings), in the snapshot's round trip:
# the next boot's sysctl.d files (the system profile's etc, which NixOS's systemd-sysctl
# applies at boot) and the running generation's; the live value of every key they set
# and of the data settings' own (REMEDY_SYSCTLS); the serving unit's properties the data
# settings name (REMEDY_UNIT_PROPERTIES). Both lists are checked names (no space, glob).
echo "@@remedy:section settings.sysctl_next"
sd=/nix/var/nix/profiles/system/etc/sysctl.d
keys='s/^[[:space:]]*-\{0,1\}\([A-Za-z0-9_][A-Za-z0-9_./-]*\)[[:space:]]*=.*/\1/p'
realpaths "$sd"/*.conf /run/current-system/etc/sysctl.d/*.conf
# catfile, and the keys the file sets in the same sed (its w to a third descriptor),
# added to _sk; a file catfile would not print whole (a blank in its name, printed
# before, unreadable) and the keys of all are read as before (_skb)
_sk='' _skb=
catkeys() {
  realpath_of "$1"
  case $1$_real in *[" $_tab$_nl"]*) _skb=1 ;; esac
  case $_pf in *"$_nl$_real$_nl"*) _skb=1 ;; esac
  [ -r "$1" ] || _skb=1
  if [ -n "$_skb" ]; then catfile "$1"; return; fi
  filemark "$1" "$_real"
  { _kk=$(sed -e h -e "${keys%p}w /dev/fd/3" -e g -e '$a\' -- "$1" 3>&1 1>&4 2>&1); } 4>&1
  [ -z "$_kk" ] || _sk=$_sk$_kk$_nl
  _pf=$_pf$_nl$_real$_nl
}
for f in "$sd"/*.conf; do [ -f "$f" ] && catkeys "$f"; done
echo "@@remedy:section settings.sysctl_running"
for f in /run/current-system/etc/sysctl.d/*.conf; do [ -f "$f" ] && catfile "$f"; done
echo "@@remedy:section settings.sysctl_now"
# the keys (`tr / .`, `sort -u`) and the paths under /proc/sys (`tr . /`) in the shell
_o=$_sk
if [ -n "$_skb" ]; then
  # one sed for the files (each file's last line its own, newline or not)
  set --
  for f in "$sd"/*.conf; do [ -f "$f" ] && set -- "$@" "$f"; done
  _o=
  [ $# = 0 ] || _o=$(sed -n "$keys" -- "$@" 2>/dev/null)
  [ -z "$_o" ] || _o=$_o$_nl
fi
for k in $REMEDY_SYSCTLS; do _o=$_o$k$_nl; done
while :; do case $_o in */*) _o=${_o%%/*}.${_o#*/} ;; *) break ;; esac; done
sorted -u "$_o"
set -f; IFS=$_nl
for k in $_sorted; do
  f=$k
  while :; do case $f in *.*) f=${f%%.*}/${f#*.} ;; *) break ;; esac; done
  f=/proc/sys/$f
  [ -f "$f" ] && [ -r "$f" ] && printf 'sysctl %s %s\n' "$k" "$(tr '\t\n' '  ' <"$f")"
done
unset IFS; set +f
echo "@@remedy:section settings.properties"
props=
for n in $REMEDY_UNIT_PROPERTIES; do props="$props -p $n"; done
# shellcheck disable=SC2086  # -p NAME words
[ -n "$props" ] && systemctl show "$REMEDY_UNIT" $props 2>/dev/null
