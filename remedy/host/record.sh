# A step's command ("$@" after the record's path, $1) run so that its answer
# is kept on the host for the step to read (remedy/core/programs/record.py):
# root's, mode 0600, written whole, in /run/remedy, or in /var/tmp/remedy when
# /run cannot take it (full): the answer of a step that failed for want of
# space in /run must still reach remedy. Exits 1 when neither can.
r=$1
shift
umask 077
# @include record_answer.sh
a=$(answer "$@") || exit 1
for d in "${r%/*}" /var/tmp/remedy; do
  f=$d/${r##*/}
  mkdir -p "$d" 2>/dev/null && printf '%s\n' "$a" >"$f.tmp" 2>/dev/null &&
    mv -f "$f.tmp" "$f" && exit 0
  rm -f "$f.tmp"
done
exit 1
