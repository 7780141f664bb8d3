# Write the /run fallback: the override start script (the durable start script
# with the wanted parser and variables, 0755) and the drop-in that points
# ExecStart at it (dropin_text, 0644), with the memory guard (0755) where the
# drop-in's ExecCondition= runs it, each atomically, then daemon-reload, and
# check the override is what systemd runs. The data settings' sysctls that
# differ live (items sysctl:K=V) are set first, whatever the override. Not
# written while the memory gate would refuse the restart that takes it
# (pending): loaded, it is what the next start runs, by systemd or a person,
# with no gate. putting_back=yes: a stop request came between the removal of the
# old override and the switch: it goes back as it was, with no gate. write=no:
# only the sysctls. lacking: the carried settings live lacks (an override in
# place without them is written again). Items want:K=V: what the server must
# have.
need journal run_id unit parser exports override_script override_dropin \
    dropin_text \
  min_gb write putting_back lacking
shift "$nargs"
# @include-text OVERRIDE_AWK override.awk
# @include-text WRITABLE writable.sh
# @include-text MEMORY_GUARD memory_guard.sh
# The memory guard's /run copy: the program the drop-in's ExecCondition= runs
# (none: the drop-in carries no guard).
guard_file=$(printf '%s\n' "$dropin_text" | sed -n \
    's|^ExecCondition=+\{0,1\}/bin/sh \(/run/[^ ]*\) .*|\1|p' | head -n 1)
if [ "$putting_back" = yes ]; then
  log yellow "stopped: putting the /run override back"
else
  for i in "$@"; do
    case $i in sysctl:*) ;; *) continue ;; esac
    kv=${i#sysctl:}
    k=${kv%%=*} v=${kv#*=}
    [ "$(sysctl -n "$k" 2>/dev/null | awk '{ $1 = $1; print }')" != "$v" ] ||
      continue
    would "set $k=$v (sysctl -w), then the /run override"
    if ! out=$(sysctl -w "$k=$v" 2>&1); then
      said="could not set $k=$v ($(why_of "$out")): the fallback does not \
carry it"
      log yellow "$said"
      note "$said"
    fi
  done
fi
if [ "$write" != yes ]; then
  [ "$mode" = apply ] && done_ "set the sysctls"
  noop "no /run override needed, and no sysctl to set"
fi
store=$(flags_script "$(durable_exec_start "$unit")")
[ -n "$store" ] && [ -f "$store" ] || {
  say failed "$unit has no start script in its unit files to derive an \
override from"
  give_up "$unit has no start script in its unit files to derive an override \
from"
}
guard_held() {  # the drop-in in place is this one, and the guard it runs too
  [ -z "$guard_file" ] && return 0
  [ "$(cat -- "$override_dropin" 2>/dev/null; echo .)" = "$dropin_text." ] &&
    [ "$(cat -- "$guard_file" 2>/dev/null; echo .)" = "$(MEMORY_GUARD)
." ]
}
if [ "$(running_exec_start "$unit")" = "$override_script" ] && [ -z "$lacking" \
    ] &&
  [ -z "$(serving_lacks "$unit" "$@")" ] && [ "$putting_back" != yes ] &&
  guard_held; then
  noop "the /run override is already in place with $parser"
fi
if [ "$putting_back" != yes ]; then
  why=$(refusal "$min_gb" "restarting the server")
  if [ -n "$why" ]; then
    pending="$why Pending: the /run override ($override_dropin) is not \
written, so no later start takes it without the gate; run again once \
MemAvailable is back above the threshold."
    say refused "$pending"
    note "$pending"
    give_up "$pending"
  fi
fi
would "write $override_script and $override_dropin (ExecStart with \
--tool-call-parser $parser), daemon-reload"
fail() { say failed "$1"; give_up "$1"; }
# The pair is written whole or not at all: each into a file beside its place
# (.remedy-new), synced, then both renamed in; the pair they replace is kept
# aside (.remedy-old) until systemd has loaded the new one. Any failure, or a
# signal, puts back what was there and removes what this run made (the files
# and the directories it created).
script_dir=${override_script%/*} dropin_dir=${override_dropin%/*}
made_dirs=
for d in "$script_dir" "$dropin_dir"; do
  [ -d "$d" ] || made_dirs="$d$_nl$made_dirs"
done
placed=
undo() {
  for f in "$override_script" "$override_dropin" $guard_file; do
    rm -f -- "$f.remedy-new" "$f.remedy-new.remedy-tmp"
    [ -n "$placed" ] || continue
    if [ -e "$f.remedy-old" ] || [ -L "$f.remedy-old" ]; then
      mv -f -T -- "$f.remedy-old" "$f"
    else
      rm -f -- "$f"
    fi
  done
  printf '%s' "$made_dirs" | while IFS= read -r d; do
    rmdir -- "$d" 2>/dev/null || :
  done
}
trap 'undo' EXIT
trap 'exit 130' HUP INT TERM
out=$(sh -c "$(WRITABLE)" sh "$script_dir" "$dropin_dir" 2>&1) ||
  fail "$(why_of "$out")"
install -d -m 0755 -o root -g root "$script_dir" "$dropin_dir" ||
  fail "cannot make $script_dir or $dropin_dir"
out=$(sh -c "$(ATOMIC_WRITE)" sh "$override_script.remedy-new" 0755 \
    root:root awk -v "parser=$parser" -v "exports=$exports" "$(OVERRIDE_AWK)" \
    "$store" 2>&1) ||
  fail "$(why_of "$out" | sed 's/\.remedy-new: /: /'); nothing was written"
out=$(sh -c "$(ATOMIC_WRITE)" sh "$override_dropin.remedy-new" 0644 root:root \
  printf %s "$dropin_text" 2>&1) ||
  fail "$(why_of "$out" | sed 's/\.remedy-new: /: /'); nothing was written"
if [ -n "$guard_file" ]; then
  out=$(sh -c "$(ATOMIC_WRITE)" sh "$guard_file.remedy-new" 0755 root:root \
    printf '%s\n' "$(MEMORY_GUARD)" 2>&1) ||
    fail "$(why_of "$out" | sed 's/\.remedy-new: /: /'); nothing was written"
fi
sync -- "$override_script.remedy-new" "$override_dropin.remedy-new" \
    ${guard_file:+"$guard_file.remedy-new"} 2>/dev/null || :
placed=yes
for f in "$override_script" "$override_dropin" $guard_file; do
  rm -f -- "$f.remedy-old"
  if [ -e "$f" ] || [ -L "$f" ]; then
    mv -f -T -- "$f" "$f.remedy-old" || fail "cannot set $f aside"
  fi
done
mv -f -T -- "$override_script.remedy-new" "$override_script" ||
  fail "cannot rename the new $override_script into place; nothing was changed"
mv -f -T -- "$override_dropin.remedy-new" "$override_dropin" ||
  fail "cannot rename the new $override_dropin into place; nothing was \
changed"
if [ -n "$guard_file" ]; then
  mv -f -T -- "$guard_file.remedy-new" "$guard_file" ||
    fail "cannot rename the new $guard_file into place; nothing was changed"
fi
if ! out=$(systemctl daemon-reload 2>&1); then
  fail "systemctl daemon-reload failed ($(why_of "$out")): the /run override \
is not loaded; the files are as they were"
fi
rm -f -- "$override_script.remedy-old" "$override_dropin.remedy-old" \
    ${guard_file:+"$guard_file.remedy-old"}
made_dirs='' placed=''
trap - EXIT HUP INT TERM
say override_written true
jset "pid_at_override=$(main_pid "$unit")" || fail "cannot write the run \
journal $journal"
now=$(running_exec_start "$unit")
if [ "$now" != "$override_script" ]; then
  fail "the /run override is written but systemd runs ExecStart=$now set by \
$(exec_start_via "$unit"): that file shadows $override_dropin (drop-ins apply \
in lexical order of file name; /etc beats /run for the same name)"
fi
done_ "wrote the /run override ($parser)"
