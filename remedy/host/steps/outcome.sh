# The run's outcome: its result, path, exit code and line, from its answers.
# What the steps answered in this run is kept beside the run journal (lib.sh
# kept); this is the one classification of a run, for the deploy's audit and
# the manual script alike. It says outcome_result (ok, failed, refused,
# interrupted, locked, unhealthy), outcome_path (durable, durable at next boot,
# durable+fallback, fallback, noop, none), outcome_exit (the README's table: 0
# durable, 6 durable at next boot, 3 the /run fallback holds, 1 failed or
# refused, 4 unhealthy, 5 locked, 130/143 stopped), outcome_line (the line a
# person reads), outcome_why (what is not ok), outcome_new_rev and
# outcome_restarts. Its verdict: give-up when the run failed, else noop. It
# changes nothing, in either mode.
need journal run_id plan_path reasons old_rev flake_input unhealthy stopped
answers=${journal%.json}.answers
if answers_trusted "$answers" && [ "$(head -n 1 "$answers")" = "run $run_id" ]
then
  kept_=$(cat -- "$answers")
else
  kept_="run $run_id"
fi
said=$(printf '%s\n' "$kept_" | REMEDY_PLAN_PATH=$plan_path \
    REMEDY_REASONS=$reasons REMEDY_OLD_REV=$old_rev REMEDY_INPUT=$flake_input \
    REMEDY_UNHEALTHY=$unhealthy REMEDY_STOPPED=$stopped awk '
  function first(k,   i) {  # the first step that said K (its last word of it)
    for (i = 1; i <= n; i++) if ((i, k) in v && v[i, k] != "") return v[i, k]
    return ""
  }
  function last(k,   i) {
    for (i = n; i >= 1; i--) if ((i, k) in v && v[i, k] != "") return v[i, k]
    return ""
  }
  function sum(k,   i, s) {
    s = 0
    for (i = 1; i <= n; i++) if ((i, k) in v) s += v[i, k] + 0
    return s
  }
  function did(name, w, verdicts,   i) {  # a step NAME (stage W) ended so
    for (i = 1; i <= n; i++)
      if (step[i] == name && (w == "" || when[i] == w) &&
          index(" " verdicts " ", " " verdict[i] " ")) return 1
    return 0
  }
  function part(t) { line = line "; " t }
  function differ(a, b,   x, y, i, n1, n2, in_a, in_b) {  # as sets of words
    n1 = split(a, x, " "); n2 = split(b, y, " ")
    for (i = 1; i <= n1; i++) in_a[x[i]] = 1
    for (i = 1; i <= n2; i++) in_b[y[i]] = 1
    for (i = 1; i <= n1; i++) if (!(x[i] in in_b)) return 1
    for (i = 1; i <= n2; i++) if (!(y[i] in in_a)) return 1
    return 0
  }
  $1 == "run" && NR == 1 { next }
  $1 == "step" {
    n++; step[n] = $2; when[n] = $3; fail[n] = $4; verdict[n] = $5
    w = $0; sub(/^step [^ ]* [^ ]* [^ ]* [^ ]* ?/, "", w); why[n] = w
    next
  }
  $1 == "say" || $1 == "say+" {
    k = $2; t = $0; sub(/^say\+? [^ ]* ?/, "", t)
    if ($1 == "say+") {
      v[n, k] = ((n, k) in v && v[n, k] != "") ? v[n, k] ", " t : t
    } else v[n, k] = t
    next
  }
  $1 == "note" { t = $0; sub(/^note ?/, "", t); notes[++nn] = t }
  # what the switch changes for the boot (system_boot.sh, as the proof said it)
  $1 == "changes" && (boot_step == 0 || boot_step == n) {
    boot_step = n
    if ($2 == "file" && $4 != $5) reboot = reboot (reboot == "" ? "" : ", ") $3
    if ($2 ~ /^params-/) {
      t = $0; sub(/^changes params-[a-z]* ?/, "", t); params[$2] = t
    }
  }
  END {
    plan = ENVIRON["REMEDY_PLAN_PATH"]; stopped = ENVIRON["REMEDY_STOPPED"]
    old = ENVIRON["REMEDY_OLD_REV"]; unhealthy = ENVIRON["REMEDY_UNHEALTHY"]
    # a durable step that gave up its stage: the fallback takes over; one
    # that stops the run (a memory gate) is the run failing (lib.sh ended)
    durable_failed = ""; failed = ""; fatal = ""; breaking = 0
    boot = first("boot_pending"); locked = first("switch_locked")
    for (i = 1; i <= n; i++) {
      if (verdict[i] != "give-up") continue
      if (when[i] == "durable" && fail[i] == "gives-up") {
        if (durable_failed == "") durable_failed = why[i]
        if ((step[i] == "switch" || step[i] == "verify") && boot == "" &&
            locked == "") breaking = 1
      }
      if (failed == "" && v[i, "failed"] != "") failed = v[i, "failed"]
      if (fatal == "" && fail[i] == "stops") fatal = why[i]
    }
    # the fallback override that did not take: tool calling is not restored
    for (i = 1; i <= n && failed == ""; i++)
      if (when[i] == "override" && verdict[i] == "give-up") failed = why[i]
    refused = first("refused")
    if (stopped != "") { result = "interrupted"; said_why = stopped }
    else if (locked != "" && failed == "") {
      result = "locked"; said_why = "another switch held the system: " locked
    }
    else if (refused != "") { result = "refused"; said_why = refused }
    else if (failed != "" || breaking || fatal != "") {
      result = "failed"
      said_why = failed != "" ? failed : (durable_failed != "" ? \
        durable_failed : fatal)
    }
    else if (unhealthy != "") { result = "unhealthy"; said_why = unhealthy }
    else { result = "ok"; said_why = "" }
    # the path the run took (one that was stopped: the one it reached)
    if (plan == "noop") path = "noop"
    else if (plan == "durable" && boot != "") path = "durable at next boot"
    else if (plan == "durable" && durable_failed != "")
      path = "durable+fallback"
    else path = plan
    held = did("override", "override", "done noop")
    if (stopped != "" && plan != "noop") {
      d = boot != "" || did("switch", "durable", "done")
      if (d && held) path = "durable+fallback"
      else if (d) path = boot != "" ? "durable at next boot" : "durable"
      else path = held ? "fallback" : "none"
    }
    # the rev the checkout locks after the run
    new = first("new_rev"); if (new == "") new = old
    if (durable_failed != "" && new != old) {
      if (!did("fast_forward", "", "done") || first("lock_reverted") != "") {
        notes[++nn] = "flake.lock left at " (old == "" ? "?" : \
          substr(old, 1, 12))
        new = old
      } else
        notes[++nn] = "flake.lock holds " substr(new, 1, 12) \
          " (the fast-forward stands)"
    }
    # the server starts the host journal counts (a switch or a rollback starts
    # it too), at least the restarts the steps made
    restarts = sum("restarts")
    for (i = 1; i <= n; i++)
      if ((i, "server_starts") in v && v[i, "server_starts"] + 0 > restarts)
        restarts = v[i, "server_starts"] + 0
    if (result == "interrupted")
      code = index(stopped, "SIGINT") ? 130 : (index(stopped, "SIGTERM") ? \
        143 : 1)
    else if (result == "locked") code = 5
    else if (result == "unhealthy") code = 4
    else if (result != "ok") code = 1
    else if (path == "durable at next boot") code = 6
    else if (path == "fallback" || path == "durable+fallback") code = 3
    else code = 0
    # the line
    if (plan == "noop") line = "nothing to do: " ENVIRON["REMEDY_REASONS"]
    else {
      line = "path " path
      if (new != "" && new != old)
        part(ENVIRON["REMEDY_INPUT"] " " (old == "" ? "?" : substr(old, 1, \
          12)) " -> " substr(new, 1, 12))
      reason = first("boot_pending_reason")
      keeps = "; the /run override keeps live right until then"
      if (boot != "" && reason == "restart policy")
        part("durable at next boot; running the old generation until a " \
          "reboot or a restart window: " boot " is the boot default" keeps)
      else if (boot != "" && reason == "switch inhibitors")
        part("durable at next boot; reboot to activate: " boot " is the " \
          "boot default (the switch inhibitors refuse a live switch)" keeps)
      else if (boot != "")
        part("durable at next boot; reboot to activate: " boot " is the " \
          "boot default (switch exit 100: the init interface changed)" keeps)
      else if (durable_failed != "")
        part("durable path abandoned: " durable_failed)
      if (differ(params["params-old"], params["params-new"]))
        reboot = reboot (reboot == "" ? "" : ", ") "the kernel parameters"
      if (reboot != "")
        part("the new generation needs a reboot for: " reboot)
      if ((t = first("switch_failed_units")) != "")
        part("switch exit 4: failed units " t)
      if ((t = first("rollback_failed")) != "") part("ROLLBACK FAILED: " t)
      else if ((t = first("rollback_not_run")) != "") part(t)
      if ((t = first("unverified")) != "") part("NOT VERIFIED: " t)
      if ((path == "fallback" || path == "durable+fallback") && locked == "" &&
          held) {
        probe = last("probe_after")
        if (probe == "parsed" || probe == "inconclusive")
          part("VOLATILE: tool calling rests on the /run override until the " \
            "durable fix is deployed; a reboot reverts it")
        else
          part("the /run override is in place, but the probe after it is " \
            (probe == "" ? "not run" : probe) ": tool calling is not restored")
      }
      if ((t = first("restart_postponed")) != "")
        part("restart postponed: " t)
      part("restarts " restarts)
      if ((t = sum("requests_cut")) > 0) part("requests cut " t)
      for (i = 1; i <= nn; i++) part(notes[i])
    }
    print "result " result; print "path " path; print "exit " code
    print "restarts " restarts; print "new_rev " new
    print "why " said_why; print "line " line
  }')
value_() { printf '%s\n' "$said" | sed -n "s/^$1 //p" | head -n 1; }
result=$(value_ result)
for k in result path exit restarts new_rev why line; do
  say "outcome_$k" "$(value_ "$k")"
done
case $result in
failed | refused | interrupted | unhealthy)
  give_up "$(printf '%s' "$result" | tr '[:lower:]' '[:upper:]'): \
$(value_ why)" ;;
esac
noop "$(value_ line)"
