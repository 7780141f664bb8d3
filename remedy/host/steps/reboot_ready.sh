# Before a reboot (remedy reboot): the boot default, the system profile the
# next boot runs, must hold every managed setting: items
# prove:KIND<TAB>LABEL<TAB>VALUE, read as the proof of a built system reads
# them (system_lacks). It says the boot id, MemAvailable (kB) and the boot
# default, and what an earlier reboot run left in the reboot journal without
# closing it (a run stopped, or a host that did not come back, while it waited).
# A check: it changes nothing.
need journal run_id unit
shift "$nargs"
# @include system_lacks.sh
say boot_id "$(cat /proc/sys/kernel/random/boot_id)"
say mem_available_kb "$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)"
journal_trust "$journal"
if [ -z "$_why" ] && [ -f "$journal" ] && [ "$(jraw state)" = rebooting ]; then
  say earlier "the reboot of run $(jraw run_id) at $(jraw at) (boot id \
$(jraw boot_id_before)) was never verified after: it stopped while the host \
came back"
fi
profile=/nix/var/nix/profiles/system
default=$(readlink -f -- "$profile")
[ -n "$default" ] && [ -d "$default" ] ||
  give_up "no boot default: $profile leads to no system"
say boot_default "$default"
items=
for i in "$@"; do
  case $i in prove:*) items="$items${i#prove:}$_nl" ;; esac
done
lacks=$(system_lacks "$default" "$unit" "$items")
[ -z "$lacks" ] || give_up "the next boot ($default) lacks $lacks"
noop "the next boot ($default) holds every managed setting"
