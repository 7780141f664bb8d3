# Where the run begins, recorded in the run journal before anything changes: the
# system profile and /run/current-system (a rollback returns to exactly them),
# the checkout's HEAD (what a rollback reverts to), the serving unit's main PID
# (a later step knows whether something restarted it). A run that finishes an
# earlier one keeps that run's records. With expect_* values (the host as the
# plan read it), it stops, naming what changed, when the host is no longer in
# that state: the plan was made for another; unless an earlier run of the same
# plan (plan_id) changed it: then this run finishes that one.
need journal run_id unit flake_dir host
# @include-text DAEMON_BOUND daemon_bound.sh
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
journal_trust "$journal"
if [ -n "$changed" ]; then
  # An earlier run of this very plan (the manual script, stopped or killed after
  # it changed the host) is finished by this one: its journal holds the plan's
  # id and the state the plan read, and this run goes on with it.
  if [ -n "${plan_id:-}" ] && [ -z "$_why" ] && [ -f "$journal" ] &&
    [ "$(jraw plan_id)" = "$plan_id" ] &&
    [ "$(jraw base_head)" = "${expect_head:-}" ] &&
    [ "$(jraw recorded_profile)" = "${expect_profile:-}" ]; then
    earlier=$(jraw run_id)
    sed "s/^ *\"run_id\": \".*\"\(,\{0,1\}\)\$/ \"run_id\": \"$run_id\"\1/" \
      "$journal" >"$journal.remedy-tmp" && chmod 0600 "$journal.remedy-tmp" &&
      mv -f -T "$journal.remedy-tmp" "$journal" ||
      give_up "cannot write the run journal $journal"
    # what the earlier run's steps said of their stages is not this run's: its
    # step that was killed runs again
    jset "pid_at_start=$(main_pid "$unit")" running= failed= durable_failed= \
      override_failed= || give_up "cannot write the run journal $journal"
    log yellow "the host changed since the plan was made ($changed), by an" \
      "earlier run of this plan ($earlier): this run finishes it"
    noop "finishing the earlier run $earlier of this plan"
  fi
  give_up "the host changed since the plan was made ($changed): nothing" \
    "changed; make the plan again"
fi
# an interrupted run's bound on nix-daemon.service's builds (prove.sh) goes:
# remedy's own leftover, undone in either mode, as the journal is written
out=$(sh -c "$(DAEMON_BOUND)" sh restore "${journal%/*}/nix-daemon-bound" \
  2>&1) || log yellow "cannot restore nix-daemon.service's MemoryMax: \
$(why_of "$out")"
[ -z "$out" ] || log blue "$out"
# The run journal is remedy's own memory of this run (removed when the run
# ends): recording it changes nothing of the host, so it is recorded in either
# mode and the answer is noop.
pid=$(main_pid "$unit")
if [ -n "$(jget recorded_profile)" ]; then
  jset "pid_at_start=${pid:-0}" running= failed= durable_failed= \
    override_failed= || give_up "cannot write the run journal $journal"
  noop "finishing the earlier run $run_id (started $(jget started))"
fi
# where the host's journal stands: the server's starts after it are this run's
# (a time in seconds would count a start made earlier in the same second)
cursor=$(journalctl -q -n 0 --show-cursor 2>/dev/null </dev/null |
  sed -n 's/^-- cursor: //p')
jset "started=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "started_s=$(date +%s)" \
  "started_cursor=$cursor" \
  "base_head=$head" \
  "recorded_profile=$(readlink -f "$system")" \
  "recorded_current=$(readlink -f /run/current-system)" \
  "pid_at_start=${pid:-0}" "plan_id=${plan_id:-}" ||
  give_up "cannot write the run journal $journal"
noop "recorded where the run begins (the run journal)"
