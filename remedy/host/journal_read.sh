# The snapshot's read of the run journal at $REMEDY_JOURNAL (journal.parse).
# shellcheck shell=sh
# shellcheck disable=SC2154,SC1003  # _why: journal_trust's answer; sed '$a\'
# @include journal_trust.sh

j=$REMEDY_JOURNAL
echo "@@remedy:section run.journal"
for d in @SCRATCH_PREFIX@*; do [ -d "$d" ] && printf 'scratch_clone %s\n' "$d"; done
# the manual script's records, read only as remedy's own files are (root's, 0600)
m=${j%/run-*}/manual-runs-${j##*/run-}
m=${m%.json}.jsonl
if [ -n "$j" ] && [ -s "$m" ] && journal_trust "$m" && [ -z "$_why" ]; then
  sed 's/^/manual_run /' "$m"
fi
why=
[ -z "$j" ] || { journal_trust "$j"; why=$_why; }
if [ -n "$why" ]; then
  printf 'untrusted %s: %s\n' "$j" "$why"
elif [ -n "$j" ] && [ -s "$j" ]; then
  printf 'mtime %s\n' "$(stat -c %Y "$j" 2>/dev/null)"
  printf 'btime %s\n' "$(sed -n 's/^btime //p' /proc/stat 2>/dev/null)"
  sc=$(sed -n 's/^ *"scratch": "\([^"]*\)".*/\1/p' "$j" | head -n 1)
  top=$(sed -n 's/^ *"toplevel": "\([^"]*\)".*/\1/p' "$j" | head -n 1)
  if [ -n "$sc" ]; then
    printf 'scratch_head %s\n' "$(git -c safe.directory='*' -C "$sc" rev-parse HEAD 2>/dev/null)"
  fi
  if [ -n "$top" ]; then
    if [ -e "$top" ]; then echo "toplevel_present yes"; else echo "toplevel_present no"; fi
  fi
  echo "json"
  sed -e '$a\' "$j"
fi
