# $1 the scope's name (made unique with $$), $2 the memory bound in bytes (0:
# none), $3 the time bound, then the command: ARGV bounded in time always, in
# memory in a transient scope where the host has systemd-run; a stop at either
# bound is said. the scope's name is unique to this invocation ($$): a scope of
# the same run that has just ended may still be loaded (systemd unloads it
# later, slower on a busy host), and systemd-run refuses a name that is
# ("already loaded or has a fragment file"). A command that a signal ended
# before the time bound (137 is also timeout's own KILL) is said with the
# signal and how long it ran: the bound fired only once its time had passed.
u=$1-$$ max=$2 t=$3; shift 3
t0=$(date +%s)
# in time always (coreutils' timeout: TERM, then KILL 10 s later); in memory
# when the host has systemd-run and a bound is given (MAX not 0): a transient
# scope with MemoryMax
if [ "$max" != 0 ] && [ -d /run/systemd/system ] && command -v systemd-run \
    >/dev/null 2>&1
then
  systemd-run --scope --quiet --unit="$u" -p MemoryMax="$max" -p \
      MemorySwapMax=0 \
    -- timeout -k 10 "$t" "$@"
  rc=$?
else
  max=0
  timeout -k 10 "$t" "$@"
  rc=$?
fi
if [ "$rc" -ne 0 ]; then
  ran=$(($(date +%s) - t0))
  result=
  [ "$max" = 0 ] || result=$(systemctl show -P Result "$u.scope" 2>/dev/null)
  if [ "$result" = oom-kill ]; then
    echo "error: remedy: killed at its memory bound (MemoryMax=$max)" >&2
  elif [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$ran" -ge "${t%s}" ]; }
  then
    # 137 once the bound had passed: timeout's KILL after its TERM
    echo "error: remedy: stopped at its time bound (nix_timeout_s=$t)" >&2
  elif [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
    echo "error: remedy: ended by signal $(kill -l $((rc - 128)) 2>/dev/null ||
      echo $((rc - 128))) ${ran}s in, before its time bound \
(nix_timeout_s=$t): not a bound of remedy's" >&2
  fi
  [ "$max" = 0 ] || systemctl reset-failed "$u.scope" >/dev/null 2>&1
fi
exit "$rc"
