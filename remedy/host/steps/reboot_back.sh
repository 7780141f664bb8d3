# After the reboot, over a new SSH session: the host booted again (its boot id
# is no longer boot_id_before), systemd finished booting (waited for up to
# wait_s), and the serving unit is there: active, or still starting (a unit
# that failed, or waits to be restarted after it failed, is not). A check: it
# changes nothing.
need journal run_id unit boot_id_before wait_s
now=$(cat /proc/sys/kernel/random/boot_id)
say boot_id "$now"
[ "$now" != "$boot_id_before" ] ||
  give_up "not rebooted: the boot id is still $now"
end=$(($(date +%s) + wait_s))
while :; do
  sys=$(systemctl is-system-running 2>/dev/null)
  case $sys in initializing | starting) ;; *) break ;; esac
  [ "$(date +%s)" -lt "$end" ] || break
  sleep 1
done
state=$(systemctl show -P ActiveState -- "$unit" 2>/dev/null)
sub=$(systemctl show -P SubState -- "$unit" 2>/dev/null)
say unit_state "$state ($sub)"
case $state/$sub in
*/auto-restart) ;;
active/* | activating/* | reloading/*)
  noop "booted again (boot id $now); $unit is $state ($sub)" ;;
esac
give_up "came back without the serving unit: $unit is ${state:-unknown} \
(${sub:-unknown}) after the boot (the system is ${sys:-unknown})"
