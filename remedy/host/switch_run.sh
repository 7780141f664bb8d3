# Run the switch, then say its exit code on stdout (the command itself succeeds,
# so the code reaches remedy whatever it is: 0, 4 and 100 mean different
# things).
#
# $1 is the transient unit ("": none, the command runs here), $2 how many
# seconds a leftover of that unit is waited for and $3 how long the switch may
# run at most; the command follows. In a transient unit the switch's stdout and
# stderr are the journal, not this session: switch-to-configuration-ng panics
# (exit 101) on a write to a closed pipe (nixpkgs#462179), so a dropped SSH
# session must not be its stderr. `systemd-run --wait` waits for it, but it can
# return before the unit ends: when PID 1 re-executes during the switch
# (switch-to-configuration-ng does when PID 1's path or system.conf changes;
# systemd#27204, fixed in #34884 and #36774, after NixOS 24.11's systemd), or
# when it loses its bus. So the unit's end is its own: the unit is waited for
# until it is no longer active (up to $3 s, saying so), and its exit status is
# the one systemd recorded (the journal's EXIT_STATUS after a cursor taken
# before, else the unit's ExecMainCode/ExecMainStatus while it is still
# loaded), never systemd-run's (systemd 252's says 1 for any failure). A unit
# of that name that is loaded but not running is the last switch's, not yet
# collected by systemd ("was already loaded"): waited for, then started again;
# a running one is another switch (the caller reads the words and calls it
# locked).
u=$1 wait_s=$2 bound_s=$3; shift 3
st=0
if [ -z "$u" ]; then
  "$@" || st=$?
  echo "@@remedy:switch-exit $st"
  exit 0
fi
c=$(journalctl -q -n 0 --show-cursor 2>/dev/null | sed -n 's/^-- cursor: //p')
end=$(( $(date +%s) + wait_s ))
while :; do
  st=0
  err=$("$@" 2>&1) || st=$?
  case $err in *"already loaded"*|*"already exists"*) ;; *) break ;; esac
  # (list-units: a `systemctl show` of it would load it again on systemd 252)
  s=$(systemctl list-units --all --plain --no-legend --no-pager "$u.service" \
      2>/dev/null \
    | awk '{ print $3 }')
  case $s in active|activating|deactivating|reloading|refreshing) break ;; esac
  [ "$(date +%s)" -lt "$end" ] || break
  echo "waiting for systemd to collect the last switch's unit $u.service \
(${s:-gone})" >&2
  if [ "$s" = failed ]; then systemctl reset-failed "$u.service" 2>/dev/null; fi
  sleep 1
done
[ -z "$err" ] || printf '%s\n' "$err" >&2
case $err in *"already loaded"*|*"already exists"*) c= ;; esac
active_state() {
  # (list-units: a `systemctl show` of a collected unit would load it again)
  systemctl list-units --all --plain --no-legend --no-pager "$u.service" \
      2>/dev/null | awk '{ print $3 }'
}
if [ -n "$c" ]; then
  # the unit's end, not systemd-run's
  end=$(( $(date +%s) + bound_s )) said_wait='' running=''
  while :; do
    s=$(active_state)
    case $s in
    active|activating|deactivating|reloading|refreshing) ;;
    *) break ;;
    esac
    if [ "$(date +%s)" -ge "$end" ]; then
      running=yes
      echo "$u.service still runs after $bound_s s: its end is not known" >&2
      break
    fi
    if [ -z "$said_wait" ]; then
      echo "systemd-run returned (exit $st) while $u.service still runs \
(PID 1 re-executed, systemd#27204): waiting for the unit to end" >&2
      said_wait=yes
    fi
    sleep 1
  done
  # One pass over the journal since the cursor (journalctl 252 skips the first
  # match after a cursor, so fields are matched here): the unit's own lines
  # ("out …"), and how systemd says it ended ("end CODE"; "end": not yet; "end
  # none": it never ran).
  i=0
  while :; do
    said=$(journalctl -q --after-cursor="$c" -o verbose 2>/dev/null | awk -v \
        u="$u.service" '
      function flush() {
        if (su == u) out[++no] = msg
        if (un == u) {
          seen = 1
          if (es != "") { st = es; how = ec }
          if (msg ~ /: (Deactivated successfully|Succeeded)\.$/) {
            if (st == "") st = 0
            done = 1
          }
          if (msg ~ /: Failed with result /) done = 1
        }
        msg = su = un = es = ec = ""
      }
      /^[^ \t]/ { flush(); next }
      {
        f = $0; sub(/^[ \t]+/, "", f); k = substr(f, 1, index(f, "=") - 1)
        v = substr(f, index(f, "=") + 1)
        if (k == "MESSAGE") msg = v; else if (k == "_SYSTEMD_UNIT") su = v
        else if (k == "UNIT") un = v; else if (k == "EXIT_STATUS") es = v
        else if (k == "EXIT_CODE") ec = v
      }
      END {
        flush()
        for (j = 1; j <= no; j++) print "out " out[j]
        if (!seen) print "end none"
        else if (done && st != "") {
          print "end " ((how == "" || how == "exited") ? st : 128 + st)
        }
        else print "end"
      }')
    last=$(printf '%s\n' "$said" | tail -n 1)
    case $last in
      "end none") [ "$i" -lt 20 ] || break ;;
      end) if [ -n "$running" ] || [ "$i" -ge 100 ]; then break; fi ;;
      "end "*) st=${last#end }; break ;;
    esac
    i=$((i + 1))
    sleep 0.1
  done
  case $last in
  "end "[0-9]*) ;;
  "end none") [ -z "$running" ] || st= ;;  # never ran: systemd-run's code
  *)
    st=
    # systemd's record of the unit while it is still loaded (not collected)
    case $(active_state) in
    inactive|failed)
      how=$(systemctl show -P ExecMainCode -- "$u.service" 2>/dev/null)
      code=$(systemctl show -P ExecMainStatus -- "$u.service" 2>/dev/null)
      case $how:$code in
      1:[0-9]*) st=$code ;;  # CLD_EXITED
      [23]:[0-9]*) st=$((128 + code)) ;;  # CLD_KILLED, CLD_DUMPED
      esac
      ;;
    esac
    ;;
  esac
  printf '%s\n' "$said" | sed -n 's/^out //p'
fi
echo "@@remedy:switch-exit $st"
