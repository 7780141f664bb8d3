# $1: local_builds.nix; the rest: the command that shows the derivations. Prints
# the store paths of those that would compile on the host, one a line.
expr=$1; shift
f=$(mktemp) || exit 1
trap 'rm -f "$f"' EXIT
"$@" >"$f" || exit 1
REMEDY_SHOW=$f nix --extra-experimental-features 'nix-command flakes' \
  eval --impure --raw --expr "$expr"
