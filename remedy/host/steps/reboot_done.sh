# The end of remedy reboot on a host that came back: MemAvailable now (kB, said)
# against min_gb, read after the verify, with the server loaded (a host back
# below it is named: the next start of vLLM there may freeze it, and the reboot
# has reclaimed the tenstorrent leak already), then the reboot journal closed:
# state verified, or failed with why (failed: what the caller's checks found,
# or the memory's). Check mode says what it would record.
need journal run_id host min_gb failed
kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
say mem_available_kb "$kb"
gb=$(awk -v kb="$kb" -v min="$min_gb" 'BEGIN { gb = kb * 1024 / 1e9
  if (gb < min + 0) printf "%.1f", gb }')
low=
[ -z "$gb" ] || low="came back below the memory threshold: MemAvailable \
$gb GB with the server loaded, below min_mem_available_gb $min_gb GB (a vLLM \
start below it may freeze the host; the reboot reclaimed the tenstorrent leak \
already: see what else holds the memory)"
why=$failed
[ -z "$low" ] || why="${why:+$why; }$low"
if [ -n "$why" ]; then
  would "record the reboot as failed: $why"
  jset state=failed "why=$why" || give_up "cannot write the reboot journal \
$journal"
  give_up "$why"
fi
would "record the reboot as verified"
jset state=verified why= || give_up "cannot write the reboot journal $journal"
done_ "$host rebooted and verified"
