# Restart the serving unit unless something restarted it already in this run
# (the switch, or a restart onto the /run override), or it still runs an
# override that was parsed before the run, or the drain postponed the restart.
# Memory-gated: a refusal gives up. stage: durable or fallback; may_restart: the
# restart policy allows one now (a fallback after a failed durable path restarts
# only then, or onto an override it wrote); reason: why the policy allows it;
# override_ran_before: the /run override ran and was parsed when the run read
# the host.
need journal run_id unit stage min_gb may_restart reason override_ran_before \
    server_url
postponed=$(jget restart_postponed)
[ -z "$postponed" ] || noop "not restarting: $postponed"
pid_before=$(jget pid_at_start)
state=$(systemctl show -P ActiveState -- "$unit" 2>/dev/null)
pid=$(main_pid "$unit")
running=
[ "$state" = active ] && [ "${pid:-0}" -gt 0 ] && running=yes
if [ "$stage" = fallback ] && [ -n "$running" ]; then
  at_override=$(jget pid_at_override)
  if [ "${at_override:-0}" -gt 0 ] && [ "$pid" != "$at_override" ]; then
    noop "already restarted onto the /run override (pid $at_override -> $pid); \
not restarting again"
  fi
  rolled=$(jget pid_after_rollback)
  if [ -n "$rolled" ] && [ "$pid" = "$rolled" ]; then
    noop "already restarted by the rollback's switch (pid $rolled); not \
restarting again"
  fi
  if [ "$override_ran_before" = yes ] && [ "$pid" = "$pid_before" ]; then
    noop "pid $pid still runs the override it ran before this run (parsed \
then); not restarting"
  fi
  if [ "$may_restart" != yes ] && [ "${at_override:-0}" -le 0 ]; then
    noop "the restart policy allows no restart now; nothing new to run"
  fi
fi
if [ "$stage" = durable ] && [ -n "$running" ] && [ -n "$pid_before" ] &&
  [ "$pid" != "$pid_before" ]; then
  said="already restarted (pid $pid_before -> $pid) by nixos-rebuild switch; \
not restarting again"
  log blue "$said"
  say restarts 1
  say restart_reason "the switch activated the proven system; $reason"
  noop "$said"
fi
why=$(refusal "$min_gb" "restarting the server")
if [ -n "$why" ]; then
  say refused "$why"
  give_up "$why"
fi
would "restart $unit"
cut_by_restart
log blue "restarting $unit"
say restarts 1
say restart_reason "$stage: $reason"
systemctl restart -- "$unit" || give_up "systemctl restart $unit failed"
done_ "restarted $unit"
