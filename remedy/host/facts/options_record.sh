# The answer of the last evaluation of what remedy's file overrides
# (remedy.core.config.options.RECORD, next to the run journal), read only as the run journal
# is read: a regular file, root's, mode 0600, printable ASCII. Otherwise it is named
# untrusted and not read; the next evaluation replaces it (a rename, never a write
# through it).
# @include journal_trust.sh
r=@RECORD@
echo "@@remedy:section nix.options_record"
journal_trust "$r"
why=$_why
if [ -n "$why" ]; then
  printf 'untrusted %s: %s\n' "$r" "$why"
elif [ -s "$r" ]; then
  # a trusted record: printable ASCII, no NUL, so `read` prints it as sed would
  while IFS= read -r _l || [ -n "$_l" ]; do printf '%s\n' "$_l"; done <"$r"
fi
