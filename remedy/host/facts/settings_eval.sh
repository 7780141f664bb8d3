# The evaluation of the data settings (sh -c SCRIPT sh NIX-ARGV...): the
# answer and its exit status, between markers.
echo "@@remedy:section settings.eval"
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
echo "@@remedy:exit $rc"
echo '@END@'
