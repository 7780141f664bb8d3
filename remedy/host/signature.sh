# The bump's check of REV's signature (remedy.core.programs.bump's
# ``signature``), run as the checkout's owner: ``signature
# STATE|KEY|SIGNER|AUTHOR`` from ``git log --format=%G?…`` against the allowed
# signers (SIGNERS, written to a temporary file that goes with the command). It
# reads REV in a repository that holds it: the input's own (REPO, for a git+file
# input), else what Nix fetched with git (its git cache, ~/.cache/nix/gitv3).
# Nix fetches github: and gitlab: inputs as tarballs, which leave no repository
# behind; then REF of URL is fetched into a temporary repository, as --dry does
# (remedy.core.programs.commands.PREVIEW_BUMP_SH), so that the run and --dry
# judge the same commit.
rev=$1 url=$2 repo=$3 signers=$4 ref=${5:-HEAD}
t=$(mktemp -d "${TMPDIR:-/tmp}/remedy-signers.XXXXXXXX") || exit 2
trap 'rm -rf -- "$t"' EXIT
if [ -z "$repo" ]; then
  for d in "${XDG_CACHE_HOME:-$HOME/.cache}"/nix/gitv3/*/; do
    [ -d "$d" ] && git --git-dir="$d" cat-file -e "$rev^{commit}" 2>/dev/null \
        && { repo=$d; break; }
  done
fi
if [ -z "$repo" ]; then
  repo=$t/fetched
  git init -q --bare "$repo" || exit 2
  git --git-dir="$repo" fetch -q --no-tags -- "$url" \
      "+$ref:refs/remedy/branch" || {
    echo "error: no repository here holds $rev, and git cannot fetch $ref of \
$url" >&2
    exit 2; }
  git --git-dir="$repo" cat-file -e "$rev^{commit}" 2>/dev/null || {
    echo "error: $rev is not on $ref of $url" >&2; exit 2; }
fi
[ -d "$repo/.git" ] && repo=$repo/.git  # a work tree's repository
printf '%s\n' "$signers" > "$t/allowed" || exit 2
out=$(git --git-dir="$repo" -c gpg.format=ssh -c \
    gpg.ssh.allowedSignersFile="$t/allowed" \
  log -1 --format='%G?|%GK|%GS|%an <%ae>' "$rev" 2>/dev/null) || {
  echo "error: git cannot read $rev in $repo" >&2; exit 2; }
printf 'signature %s\n' "$out"
