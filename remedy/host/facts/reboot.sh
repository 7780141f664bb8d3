# What says whether a reboot is needed, and why (remedy.core.readings.reboot): prints,
# decides nothing.
# reboot.links: "booted|current NAME TARGET" for the kernel, initrd and kernel-modules
#   links of /run/booted-system and /run/current-system, read with readlink (not -f), as
#   nixpkgs' system.autoUpgrade compares them (nixos/modules/tasks/auto-upgrade.nix,
#   allowReboot); a link that is not there prints no line.
# reboot.params booted|current: the kernel-params file of each, as it is.
# reboot.mtimes: "MTIME PATH" of the links themselves (stat without -L): the system
#   profile (set by nix-env --set), /run/current-system (set at boot and by every
#   switch) and /run/booted-system (set at boot).
# reboot.guard: this boot's journal lines of the serving unit that the memory guard
#   wrote (remedy-memory-guard: VERDICT: ... [MemAvailable_kB=N threshold_kB=N]), as
#   journalctl's json, or what journalctl said instead.
echo "@@remedy:section reboot.links"
reboot_links() {
  _nl='
'
  set --
  for _rs in /run/booted-system /run/current-system; do
    for _rf in kernel initrd kernel-modules; do
      [ -L "$_rs/$_rf" ] && set -- "$@" "$_rs/$_rf"
    done
  done
  [ $# -gt 0 ] || return 0
  _rn=$# _ro=$(readlink -- "$@" 2>/dev/null)
  _rb=
  for _rp in "$@"; do _rb=$_rb$_rp$_nl; done
  set -f; IFS=$_nl
  # shellcheck disable=SC2086  # split at newlines on purpose
  set -- $_rb $_ro
  unset IFS; set +f
  if [ $# != $((_rn * 2)) ]; then  # a target with a newline: one readlink each
    set -f; IFS=$_nl
    # shellcheck disable=SC2086
    set -- $_rb
    unset IFS; set +f
    for _rp in "$@"; do
      _rw=${_rp#/run/}
      printf '%s %s %s\n' "${_rw%%-*}" "${_rp##*/}" "$(readlink -- "$_rp" 2>/dev/null)"
    done
    return 0
  fi
  _ri=$_rn _rt=
  while [ "$_ri" -gt 0 ]; do
    eval "_rt=\${$((_rn + 1))}"
    _rw=${1#/run/}
    printf '%s %s %s\n' "${_rw%%-*}" "${1##*/}" "$_rt"
    shift
    _ri=$((_ri - 1))
  done
}
reboot_links
for _rs in booted current; do
  _rf=/run/$_rs-system/kernel-params
  [ -r "$_rf" ] || continue
  echo "@@remedy:section reboot.params $_rs"
  while IFS= read -r _rl || [ -n "$_rl" ]; do printf '%s\n' "$_rl"; done <"$_rf"
done
echo "@@remedy:section reboot.mtimes"
stat -c '%Y %n' -- /nix/var/nix/profiles/system /run/current-system \
  /run/booted-system 2>/dev/null
echo "@@remedy:section reboot.guard"
_gf=MESSAGE,_SYSTEMD_INVOCATION_ID _g=
command -v journalctl >/dev/null 2>&1 || _g="journalctl: not installed"
[ -n "$_g" ] || _g=$(journalctl -q -b -u "$REMEDY_UNIT" -o json --output-fields=$_gf \
  --grep '^remedy-memory-guard: ' 2>&1)
case $_g in
*'pattern matching'*)  # a journalctl built without PCRE2: no --grep
  _g=$(journalctl -q -b -u "$REMEDY_UNIT" -o json --output-fields=$_gf 2>&1 \
    | grep -F 'remedy-memory-guard: ') ;;
esac
[ -z "$_g" ] || printf '%s\n' "$_g"
