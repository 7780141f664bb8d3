# For --dry: the rev a bump would take and its signature
# (commands.preview_bump).
url=$1 ref=${2:-HEAD} rev=$3 signers=$4
t=$(mktemp -d "${TMPDIR:-/tmp}/remedy-preview.XXXXXXXX") || exit 2
trap 'rm -rf -- "$t"' EXIT
git init -q --bare "$t" || exit 2
git --git-dir="$t" fetch -q --no-tags -- "$url" "+$ref:refs/remedy/branch" || {
  echo "error: cannot fetch $ref of $url" >&2; exit 2; }
[ -n "$rev" ] || rev=$(git --git-dir="$t" rev-parse refs/remedy/branch)
printf '%s\n' "$signers" > "$t/allowed"
git --git-dir="$t" cat-file -e "$rev^{commit}" 2>/dev/null || {
  echo "error: $rev is not on $ref of $url" >&2; exit 2; }
out=$(git --git-dir="$t" -c gpg.format=ssh -c \
    gpg.ssh.allowedSignersFile="$t/allowed" \
  log -1 --format='%G?|%GK|%GS|%an <%ae>' "$rev" 2>/dev/null)
printf 'would-take %s\nsignature %s\n' "$rev" "$out"
