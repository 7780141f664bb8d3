# The host lock's remote side: flock, holder file and step journal (lock_argv).
# shellcheck shell=sh
# shellcheck disable=SC1003,SC1007,SC2015  # sed '$a\', x= y=, A && B || C
exec 9>>"$1" || { echo "error cannot open $1"; exit 1; }
if ! flock -n 9; then
  # busy: say on whom we wait before waiting, so the run can tell its person
  printf 'waiting %s\n' "$(cat "$2" 2>/dev/null || echo "(no holder recorded)")"
  if ! flock -w "$3" 9; then
    echo "held"
    cat "$2" 2>/dev/null || echo "(no holder recorded)"
    exit 75
  fi
fi
printf '%s\n' "$4" > "$2.tmp" && mv -f "$2.tmp" "$2" || rm -f "$2.tmp"
j=$5
# builtins where a program would print the same (issue 34: every run of every host)
b=
{ read -r b </proc/sys/kernel/random/boot_id; } 2>/dev/null
echo "boot $b"
if [ -s "$j" ]; then echo "journal"; sed -e '$a\' "$j"; echo "end-journal"; fi
umask 077
[ -d "${j%/*}" ] || mkdir -p "${j%/*}" 2>/dev/null
{ printf '{"boot_id": "%s"}\n' "$b"
  printf '%s\n' "$6"; } > "$j.tmp" 2>/dev/null && mv -f "$j.tmp" "$j" || rm -f "$j.tmp"
echo "locked"
ended= builder_stop=
while IFS= read -r line; do
  case $line in
    "end "*) ended=yes; break ;;
    # the run was asked to stop (its first SIGINT/SIGTERM): the owner's nix it runs now
    # (a build, a check) is stopped as a whole, not waited for
    stop-nix) systemctl stop --no-block 'remedy-nix-*.scope' >/dev/null 2>&1
      # and its nix on a builder (one quoted command line, sent by the run)
      [ -n "$builder_stop" ] && { sh -c "$builder_stop" >/dev/null 2>&1 & } ;;
    "builder-stop "*) builder_stop=${line#builder-stop } ;;
    *) printf '%s\n' "$line" >> "$j" 2>/dev/null ;;
  esac
done
if [ -n "$ended" ]; then rm -f "$j" "${j%.jsonl}.json" "$2"; else rm -f "$2"; fi
