# The memory gate: refuse to go on when MemAvailable is below min_gb, right
# before what it guards (doing): a vLLM boot below ~4 GB can hard-freeze the
# host. A check: it changes nothing, in either mode.
need min_gb doing
why=$(refusal "$min_gb" "$doing")
if [ -n "$why" ]; then
  log red "$why"
  say refused "$why"
  give_up "$why"
fi
said="memory gate: MemAvailable $(mem_gb) GB >= $min_gb GB"
log green "$said"
say gate "$said"
noop "$said"
