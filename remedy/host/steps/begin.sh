# Where the run begins, recorded in the run journal before anything changes: the
# system profile and /run/current-system (a rollback returns to exactly them),
# the checkout's HEAD (what a rollback reverts to), the serving unit's main PID
# (a later step knows whether something restarted it). A run that finishes an
# earlier one keeps that run's records. With expect_* values (the host as the
# plan read it), it stops, naming what changed, when the host is no longer in
# that state: the plan was made for another.
need journal run_id unit flake_dir host
owner_of "$flake_dir"
system=/nix/var/nix/profiles/system
changed=
expect() {  # WHAT EXPECTED NOW
  [ -z "$2" ] || [ "$2" = "$3" ] || changed="${changed:+$changed; }$1 is $3, \
the plan read $2"
}
if [ -n "${expect_machine_id:-}" ]; then
  id=$(cat /etc/machine-id 2>/dev/null)
  [ "$id" = "$expect_machine_id" ] ||
    give_up "this is not the host the plan was made for: it was rendered for \
$host (machine-id $expect_machine_id), and this is $(hostname) (machine-id \
${id:-unknown}); nothing changed"
fi
head=$(as_owner git -C "$flake_dir" rev-parse HEAD 2>/dev/null </dev/null)
expect "the checkout's HEAD" "${expect_head:-}" "$head"
expect "the system profile" "${expect_profile:-}" "$(readlink -f "$system")"
expect "/run/current-system" "${expect_current:-}" "$(readlink -f \
/run/current-system)"
expect "the ExecStart systemd runs" "${expect_exec_start:-}" \
    "$(running_exec_start "$unit")"
[ -z "$changed" ] ||
  give_up "the host changed since the plan was made ($changed): nothing \
changed; make the plan again"
pid=$(main_pid "$unit")
if [ -n "$(jget recorded_profile)" ]; then
  would "finish the earlier run $run_id"
  jset "pid_at_start=${pid:-0}" || give_up "cannot write the run journal \
$journal"
  done_ "finishing the earlier run $run_id (started $(jget started))"
fi
would "record where the run begins"
jset "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "base_head=$head" \
  "recorded_profile=$(readlink -f "$system")" \
  "recorded_current=$(readlink -f /run/current-system)" \
      "pid_at_start=${pid:-0}" ||
  give_up "cannot write the run journal $journal"
done_ "recorded where the run begins"
