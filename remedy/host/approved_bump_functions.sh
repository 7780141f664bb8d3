# The approved bump's functions (approved_bump.sh runs them; a test runs one
# alone).
# @include-text LOCKED_EXPR locked.nix
refuse() { printf 'refused %s\n' "$*"; exit 3; }
# the line of $1 that says what went wrong (remedy.operations.argv.Ran.why)
why_of() {
  w=$(printf '%s\n' "$1" | grep -iE '(^|[^a-z])(error|failed|fatal)([^a-z]|$)' \
      | tail -n 1)
  [ -n "$w" ] || w=$(printf '%s\n' "$1" | grep -v '^[[:space:]]*$' | tail -n 1)
  printf '%.300s' "${w:-no output}" | sed 's/^[[:space:]]*//'
}
locked() {  # REV, URL and REF of the input, one a line, as flake.lock says
  REMEDY_LOCK="$scratch/flake.lock" REMEDY_INPUT=$name \
    nix --extra-experimental-features 'nix-command flakes' eval --impure --raw \
        --expr "$(LOCKED_EXPR)"
}
# remedy.core.readings.nix.git_remote: the URL git fetches the input from
git_remote() {
  base=${1%%\?*} query=
  case $1 in *\?*) query=${1#*\?} ;; esac
  case $base in
    git+?*) printf '%s\n' "${base#git+}" ;;
    github:?*/?* | gitlab:?*/?* | sourcehut:?*/?*)
      kind=${base%%:*} rest=${base#*:}
      o=${rest%%/*} r=${rest#*/}; r=${r%%/*}
      case $kind in github) f=https://github.com ;; gitlab) \
          f=https://gitlab.com ;;
        *) f=https://git.sr.ht ;; esac
      printf '%s/%s/%s\n' "$f" "$o" "$r" ;;
    http://* | https://* | ssh://*)
      case "&$query&" in *"&rev="[!\&]*) printf '%s\n' "$base" ;; *) return 1 \
          ;; esac ;;
    *) return 1 ;;
  esac
}
# URL REF REV: the input's url with its branch (git) and exactly REV
pin_url() {
  p=$1
  case $1 in git+*) [ -n "$2" ] && p="$p?ref=$2" ;; esac
  case $p in *\?*) printf '%s&rev=%s\n' "$p" "$3" ;; *) printf '%s?rev=%s\n' \
      "$p" "$3" ;; esac
}
on_branch() (
# @include on_branch.sh
)
signature() (
# @include signature.sh
)
ancestry() (
# @include ancestry.sh
)
# STATE KEY SIGNER AUTHOR REV: remedy.core.programs.signers.Signature.describe
describe() {
  case $1 in
    G) what='signed by a trusted key' ;;
    U) what='signed by a key that is not in trusted_signers' ;;
    B) what='a bad signature' ;;
    X) what='signed, but the signature has expired' ;;
    Y) what='signed by a key that has expired' ;;
    R) what='signed by a revoked key' ;;
    E) what='signed, but the signature cannot be checked' ;;
    N) what=unsigned ;;
    *) what="signature state $1" ;;
  esac
  k=; [ -n "$2" ] && [ "$1" != G ] && k=" ($2)"
  w=; [ "$1" = G ] && [ -n "$3" ] && w=" as $3"
  printf '%.12s by %s: %s%s%s' "$5" "${4:-?}" "$what" "$k" "$w"
}
