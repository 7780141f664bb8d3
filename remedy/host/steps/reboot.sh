# The reboot of remedy reboot. It records first, in the reboot journal, that
# the host is rebooting (its boot id, MemAvailable in kB and the time before),
# so that a run stopped while the host comes back leaves what the next run reads
# (reboot_ready says it). Then a transient timer of systemd reboots the host
# delay_s seconds on: this answer is back over SSH before the session is lost.
# Check mode says what it would do.
need journal run_id host delay_s
boot_id=$(cat /proc/sys/kernel/random/boot_id)
say boot_id "$boot_id"
would "reboot $host (boot id $boot_id) in ${delay_s}s"
command -v systemd-run >/dev/null 2>&1 ||
  give_up "no systemd-run on $host: remedy reboots a host booted with systemd"
jset state=rebooting "boot_id_before=$boot_id" \
  "mem_before_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)" \
  "at=$(date -u +%Y-%m-%dT%H:%M:%SZ)" why= ||
  give_up "cannot write the reboot journal $journal"
timer=remedy-reboot-$(scope_id)
out=$(systemd-run --quiet --collect "--unit=$timer" "--on-active=$delay_s" \
  --timer-property=AccuracySec=100ms systemctl reboot 2>&1 </dev/null) || {
  jset state=failed "why=systemd-run could not schedule the reboot" || :
  give_up "systemd-run could not schedule the reboot: $(why_of "$out")"
}
done_ "the reboot of $host is due in ${delay_s}s (boot id $boot_id)"
