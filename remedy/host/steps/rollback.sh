# After a failed switch or verification, return to exactly the generation
# recorded when the run began (the run journal's recorded_profile and
# recorded_current), as `nixos-rebuild --rollback` does: the profile back, then
# always the restored generation's switch-to-configuration, so the boot entry is
# right again (boot when only it moved, or when the memory gate refuses the
# restart an activation causes; switch when /run/current-system moved); and
# revert the commits the run brought into the checkout (base_head..lock_commit).
# Not after a switch that exited 100 or that the switch inhibitors turned into a
# boot (the new generation is meant to boot), nor one another switch held. A
# rollback that fails gives up: the run goes on to the fallback.
#
# A switch that exited 2 went on after its failing activation script
# (switch-to-configuration-ng main.rs): the serving unit may have restarted
# onto the new generation already (the switch step counted it:
# pid_after_switch). The rollback says so, counts only a restart its own switch
# makes, and records the pid it leaves (pid_after_rollback), so the fallback's
# restart does not restart a second time without need.
need journal run_id unit flake_dir flake_host min_gb lock_wait_s switch_bound_s
owner_of "$flake_dir"
system=/nix/var/nix/profiles/system
profile=$(jget recorded_profile) current=$(jget recorded_current) base=$(jget \
    base_head)
lock_commit=$(jget lock_commit) exit_=$(jget switch_exit)
moved_profile='' moved_system=''
[ -n "$profile" ] && [ "$(readlink -f "$system")" != "$profile" ] &&
  moved_profile=yes
[ -n "$current" ] && [ "$(readlink -f /run/current-system)" != "$current" ] &&
  moved_system=yes
[ "$exit_" != 100 ] ||
  noop "the switch exited 100: the new generation is the boot default, kept (a \
reboot activates it)"
[ -z "$(jget boot_pending)" ] ||
  noop "the switch inhibitors refused a live switch: the new generation is the \
boot default, kept (a reboot activates it)"
if [ -z "$moved_profile$moved_system$lock_commit" ] && { [ -z "$exit_" ] || [ \
    "$exit_" = locked ]; }; then
  noop "/run/current-system and the profile never moved: nothing to roll back"
fi
would "roll back to $profile"
failed=
fail() { failed="${failed:+$failed; }$*"; }
if [ "$exit_" != locked ]; then
  if [ -n "$moved_profile" ]; then
    if out=$(nix-env -p "$system" --set "$profile" 2>&1 </dev/null); then
      note "system profile set back to $profile"
    else
      fail "setting the profile back failed: $(why_of "$out")"
    fi
  fi
  p=${profile:-$current} c=${current:-$profile}
  if [ -n "$p" ]; then
    actions="$p boot"
    if [ -n "$moved_system" ]; then
      why=$(refusal "$min_gb" "restarting the server")
      if [ -n "$why" ]; then
        fail "not activating the old generation (its boot entry is set): $why"
      elif [ "$p" = "$c" ]; then
        actions="$p switch"
      # a person's `nixos-rebuild boot` before the run: boot that, run this
      else
        actions="$actions$_nl$c test"
      fi
    fi
    holders=$(switch_holders "$lock_wait_s")
    if [ -n "$holders" ]; then
      first=${actions%%"$_nl"*}
      fail "switch-to-configuration ${first#* } of ${first% *} did not run: \
another switch holds the system after waiting $lock_wait_s s (lock_wait_s): \
$holders; run again once it is done"
    else
      after_switch=$(jget pid_after_switch)
      [ -z "$after_switch" ] || note "the failed switch had already restarted \
$unit (pid $after_switch) onto the new generation; the old one restarts it \
once more"
      pid0=$(main_pid "$unit")
      while IFS= read -r a; do
        t=${a% *} act=${a#* }
        switch_to "$t" "$act" "$lock_wait_s" "$switch_bound_s"
        case $switch_exit in
        0) note "$t: switch-to-configuration $act" ;;
        4) note "$t: switch-to-configuration $act exited 4 (a unit failed)" ;;
        *)
          if [ "$switch_outcome" = locked ]; then
            fail "switch-to-configuration $act of $t did not run: \
$(lock_holders)"
          else
            fail "switch-to-configuration $act of $t failed: $(why_of \
"$switch_said" "$switch_exit")"
          fi
          ;;
        esac
      done <<ACTIONS
$actions
ACTIONS
      pid1=$(main_pid "$unit")
      if [ "${pid1:-0}" -gt 0 ] && [ "$pid1" != "${pid0:-0}" ]; then
        jset "pid_after_rollback=$pid1"
        say restarts 1
        say restart_reason "the rollback activated $c"
      fi
    fi
  fi
fi
# or the next run would bump, switch and fail again
if [ -n "$lock_commit" ]; then
  target=$lock_commit
  [ -z "$base" ] || target=$base..$lock_commit
  if out=$(as_owner git -C "$flake_dir" -c user.name=remedy -c \
      "user.email=remedy@$flake_host" \
    revert --no-edit "$target" 2>&1 </dev/null); then
    note "reverted the lock commit $(printf '%.12s' "$lock_commit") in \
$flake_dir"
    say lock_reverted "$lock_commit"
  else
    note "could not revert the lock commit $(printf '%.12s' "$lock_commit"): \
$(why_of "$out")"
  fi
fi
if [ -n "$failed" ]; then
  say rollback_failed "$failed"
  give_up "rollback FAILED: $failed; going on to the fallback"
fi
say rolled_back true
done_ "rolled back to $profile"
