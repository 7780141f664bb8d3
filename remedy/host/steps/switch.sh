# Switch to the proven toplevel (toplevel, or the one the run journal holds), as
# `nixos-rebuild switch` ends: wait up to lock_wait_s for a switch that another
# holds (a person's nixos-rebuild), set the system profile (set_profile=yes),
# then run its switch-to-configuration in nixos-rebuild-ng's transient unit.
# What was proven is what runs. action boot (the restart policy allows no
# restart now, or the drain postponed it): the proven system becomes the boot
# default and nothing is activated. Its exit code decides
# (remedy.core.readings.switch): 0 is done; 4 is done if the serving unit is
# active, else the fallback takes over; 100 made it the boot default and
# activated nothing; the switch inhibitors (NixOS 26.05) turn a switch into a
# boot; a switch another holds changes nothing durable; anything else is rolled
# back.
need journal run_id toplevel set_profile action unit lock_wait_s server_url \
  switch_bound_s
toplevel=${toplevel:-$(jget toplevel)}
[ -n "$toplevel" ] || give_up "no proven toplevel to switch to"
profile=/nix/var/nix/profiles/system
postponed=$(jget restart_postponed)
[ "$action" = switch ] && [ -n "$postponed" ] && action=boot
would "switch-to-configuration $action of $toplevel"
holders=$(switch_holders "$lock_wait_s")
if [ -n "$holders" ]; then
  say_items switch_locked "; " "$holders"
  jset switch_exit=locked
  give_up "$(locked_why "$holders" "$lock_wait_s")"
fi
log blue "switching to $toplevel"
jset "switching=$toplevel" || give_up "cannot write the run journal $journal"
before=
if [ "$set_profile" = yes ]; then
  before=$(readlink -f "$profile")
  out=$(nix-env -p "$profile" --set "$toplevel" 2>&1 </dev/null) ||
    give_up "setting the system profile to $toplevel failed: $(why_of "$out")"
fi
[ -z "$postponed" ] || log yellow "$postponed: making $toplevel the boot \
default only"
[ "$action" != switch ] || cut_by_restart
pid0=$(main_pid "$unit")
switch_to "$toplevel" "$action" "$lock_wait_s" "$switch_bound_s"
code=$switch_exit
pid1=$(main_pid "$unit")
w=$(printf '%s\n' "$switch_said" | grep '^systemd-run returned' | head -n 1)
[ -z "$w" ] || log yellow "$w"
# switch-to-configuration-ng goes on after a failing activation script (exit 2
# comes at the end): the serving unit may have restarted already. Counted below
# when the switch gives up (the restart step counts a switch that succeeded,
# exit 4 with the serving unit active included).
restarted=''
if [ "$switch_outcome" != "done" ] && [ "${pid1:-0}" -gt 0 ] &&
  [ "$pid1" != "${pid0:-0}" ]; then
  restarted="$unit restarted during the switch (pid ${pid0:-none} -> $pid1)"
  jset "pid_after_switch=$pid1"
fi
[ "$switch_outcome" != locked ] || code=locked
jset "switching=$toplevel" "switch_exit=$code"
say switch_exit "${switch_exit:-none}"
[ "$switch_outcome" != units-failed ] || say_items switch_failed_units ", " \
    "$(failed_units)"
case $switch_outcome in
inhibited)
  if [ "$action" = switch ]; then
    refused="switch-to-configuration switch exited 1: Pre-switch check \
'switchInhibitors' failed (the new generation changes a package NixOS will not \
switch live)"
    log yellow "$refused; making $toplevel the boot default"
    switch_to "$toplevel" boot "$lock_wait_s" "$switch_bound_s"
    if [ "$switch_exit" != 0 ]; then
      why="$refused; switch-to-configuration boot ${switch_exit:+exited \
$switch_exit}${switch_exit:-did not report}: $(why_of "$switch_said")"
      log red "$why; the /run override goes back, then the rollback"
      give_up "$why"
    fi
    jset "boot_pending=$toplevel"
    say boot_pending "$toplevel"
    say boot_pending_reason "switch inhibitors"
    why="$refused; switch-to-configuration boot made it the boot default and \
nothing was activated (a reboot activates it); the /run override keeps live \
right until then"
    log yellow "$why; the /run override goes back; the new generation stays \
the boot default"
    give_up "$why"
  fi
  ;;
locked)
  holders=$(lock_holders)
  [ -z "$before" ] || nix-env -p "$profile" --set "$before" >/dev/null 2>&1 \
      </dev/null
  say_items switch_locked "; " "${holders:-another switch}"
  give_up "$(locked_why "${holders:-another switch}" 0)"
  ;;
done)
  if [ "$action" = boot ]; then
    log green "durable at next boot: $toplevel is the boot default; running \
the old generation until a reboot or a restart window"
    say boot_pending "$toplevel"
    say boot_pending_reason "restart policy"
  fi
  done_ "switch-to-configuration $action of $toplevel"
  ;;
units-failed)
  failed=$(failed_units)
  if [ "$(systemctl is-active -- "$unit" 2>/dev/null)" = active ] &&
    ! printf '%s\n' "$failed" | tr ',' '\n' | sed 's/^ *//' | grep -qxF -- \
        "$unit"; then
    log yellow "switch exit 4: $failed failed"
    done_ "switch-to-configuration $action of $toplevel (exit 4: $failed \
failed)"
  fi
  why="switch-to-configuration exited 4: $unit is not active (failed: \
${failed:-not named}); the fallback takes over"
  ;;
boot-pending)
  say boot_pending "$toplevel"
  why="switch-to-configuration exited 100: the init interface changed, so the \
new generation is the boot default and nothing was activated (a reboot \
activates it); the /run override keeps live right until then"
  ;;
*)
  if [ -z "$switch_exit" ]; then
    why="switch-to-configuration switch did not report: $(why_of \
"$switch_said")"
  else
    why="switch-to-configuration switch exited $switch_exit: $(why_of \
"$switch_said" "$switch_exit")"
  fi
  [ -z "$restarted" ] || why="$why; the activation went on: $restarted"
  ;;
esac
then_="the /run override goes back, then the rollback"
[ "$switch_outcome" != boot-pending ] ||
  then_="the /run override goes back; the new generation stays the boot default"
if [ -n "$restarted" ]; then  # a switch that gives up: counted here
  say restarts 1
  say restart_reason "the switch activated $toplevel before it failed"
fi
log red "$why; $then_"
give_up "$why"
