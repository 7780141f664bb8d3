# Every link resolved by one readlink when each one resolves (else one readlink each).
echo "@@remedy:section nix.generations"
generations() {
  _nl='
'
  set --
  for n in current:/run/current-system booted:/run/booted-system \
           profile:/nix/var/nix/profiles/system; do
    [ -e "${n#*:}" ] && set -- "$@" "${n#*:}"
  done
  for l in /nix/var/nix/profiles/system-*-link; do [ -L "$l" ] && set -- "$@" "$l"; done
  _one='' _k=
  if [ $# -gt 0 ]; then
    # all of them known (UNIT's readlink, PATHS_TOO), or one readlink for all
    _k=1
    for _p in "$@"; do known_path "$_p" || { _k=; break; }; done
    if [ -n "$_k" ]; then
      _o=
      for _p in "$@"; do realpath_of "$_p"; _o=$_o$_real$_nl; done
    elif _o=$(readlink -f -- "$@" 2>/dev/null); then
      _k=1
    fi
  fi
  if [ -n "$_k" ]; then
    _n=$#
    set -f; IFS=$_nl
    # shellcheck disable=SC2086
    set -- $_o
    unset IFS; set +f
    [ $# = "$_n" ] && _one=1
  fi
  for n in current:/run/current-system booted:/run/booted-system \
           profile:/nix/var/nix/profiles/system; do
    l=${n#*:}
    if [ ! -e "$l" ]; then echo "${n%%:*}"
    elif [ -n "$_one" ]; then echo "${n%%:*} $1"; shift
    else echo "${n%%:*} $(readlink -f "$l")"
    fi
  done
  for l in /nix/var/nix/profiles/system-*-link; do
    [ -L "$l" ] || continue
    g=${l##*/system-}
    if [ -n "$_one" ]; then echo "gen ${g%-link} $1"; shift
    else echo "gen ${g%-link} $(readlink -f "$l")"
    fi
  done
}
generations
