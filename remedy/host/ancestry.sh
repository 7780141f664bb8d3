# FIX REV URL: whether REV's history holds FIX, from Nix's git cache or the
# remote: "ancestry: yes (...)" or "ancestry: no (...)".
fix=$1 rev=$2 url=$3
# What Nix fetched: its git cache (Nix 2.4 and later, every version since: bare
# repos under ~/.cache/nix/gitv3/, one per URL) holds the locked rev with its
# history.
for d in "${XDG_CACHE_HOME:-$HOME/.cache}"/nix/gitv3/*/; do
  [ -d "$d" ] || continue
  git --git-dir="$d" cat-file -e "$rev^{commit}" 2>/dev/null || continue
  [ "$(git --git-dir="$d" rev-parse --is-shallow-repository 2>/dev/null)" = \
      true ] && continue
  if git --git-dir="$d" merge-base --is-ancestor "$fix" "$rev" 2>/dev/null; then
    echo "ancestry: yes (Nix's fetch of $url in $d)"
  else
    echo "ancestry: no (Nix's fetch of $url in $d)"
  fi
  exit 0
done
# Not in the cache (a tarball fetch such as github:, or a cleaned cache): ask
# the remote.
t=$(mktemp -d "${TMPDIR:-/tmp}/remedy-ancestry.XXXXXXXX") || exit 2
trap 'rm -rf -- "$t"' EXIT
git init -q --bare "$t" || exit 2
if ! git --git-dir="$t" fetch -q --no-tags -- "$url" \
    '+refs/heads/*:refs/heads/*'; then
  echo "error: cannot fetch $url to check its history" >&2; exit 2
fi
if ! git --git-dir="$t" cat-file -e "$rev^{commit}" 2>/dev/null; then
  echo "error: no branch of $url holds $rev" >&2; exit 2
fi
if git --git-dir="$t" merge-base --is-ancestor "$fix" "$rev" 2>/dev/null; then
  echo "ancestry: yes (fetched $url)"
else
  echo "ancestry: no (fetched $url)"
fi
