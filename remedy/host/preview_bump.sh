# For --dry: the rev a bump would take and its signature
# (commands.preview_bump); the fetch takes BOUND seconds at most.
url=$1 ref=${2:-HEAD} rev=$3 signers=$4 bound=${5:-120}
t=$(mktemp -d "${TMPDIR:-/tmp}/remedy-preview.XXXXXXXX") || exit 2
trap 'rm -rf -- "$t"' EXIT
git init -q --bare "$t" || exit 2
GIT_TERMINAL_PROMPT=0 timeout "$bound" git --git-dir="$t" fetch -q \
    --no-tags -- "$url" "+$ref:refs/remedy/branch" </dev/null
rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "error: cannot fetch $ref of $url: no answer within ${bound}s" >&2
  exit 2
elif [ "$rc" -ne 0 ]; then
  echo "error: cannot fetch $ref of $url" >&2; exit 2
fi
[ -n "$rev" ] || rev=$(git --git-dir="$t" rev-parse refs/remedy/branch)
printf '%s\n' "$signers" > "$t/allowed"
git --git-dir="$t" cat-file -e "$rev^{commit}" 2>/dev/null || {
  echo "error: $rev is not on $ref of $url" >&2; exit 2; }
out=$(git --git-dir="$t" -c gpg.format=ssh -c \
    gpg.ssh.allowedSignersFile="$t/allowed" \
  log -1 --format='%G?|%GK|%GS|%an <%ae>' "$rev" 2>/dev/null)
printf 'would-take %s\nsignature %s\n' "$rev" "$out"
