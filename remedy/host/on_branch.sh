# REV URL [REF]: whether REV is on REF (default HEAD) of URL, fetched into a
# temporary repository: "on-branch: yes" or "on-branch: no".
rev=$1 url=$2 ref=${3:-HEAD}
t=$(mktemp -d "${TMPDIR:-/tmp}/remedy-branch.XXXXXXXX") || exit 2
trap 'rm -rf -- "$t"' EXIT
git init -q --bare "$t" || exit 2
if ! git --git-dir="$t" fetch -q --no-tags -- "$url" \
    "+$ref:refs/remedy/branch"; then
  echo "error: cannot fetch $ref of $url" >&2; exit 2
fi
if git --git-dir="$t" merge-base --is-ancestor "$rev" refs/remedy/branch \
    2>/dev/null; then
  echo "on-branch: yes"
else
  echo "on-branch: no"
fi
