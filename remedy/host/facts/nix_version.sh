# `nix --version` once per Nix (and nix.conf, whose unknown settings it warns about):
# what it printed is kept next to the run journal (options.NIX_VERSION_RECORD, read
# only as the journal is read) under the binary's and nix.conf's real paths, sizes and
# times, so that a check that finds nothing to do starts no nix process (issue 28).
echo "@@remedy:section nix.version"
# the records this script reads (this one, OPTIONS_RECORD's, JOURNAL's two), asked at once
_j=$REMEDY_JOURNAL _m=
[ -z "$_j" ] || { _m=${_j%/run-*}/manual-runs-${_j##*/run-}; _m=${_m%.json}.jsonl; }
journal_trust_all @RECORD@ @OPTIONS_RECORD@ @MODEL_RECORD@ "$_j" "$_m"
if n=$(command -v nix 2>/dev/null); then
  v=@RECORD@
  c=/etc/nix/nix.conf
  # the binary's and nix.conf's real paths in one readlink, their sizes and times in one
  # stat (the binary's never fails: `command -v` found it)
  _nl='
'
  _rn='' _rcf='' _sn='' _sc=
  if [ -e "$c" ] && known_path "$n" && known_path "$c"; then
    realpath_of "$n"
    _o=$_real
    realpath_of "$c"
    _o=$_o$_nl$_real
  else
    _o=$(readlink -f -- "$n" "$c" 2>/dev/null)
  fi
  case $_o in
  *"$_nl"*"$_nl"*) _rn=$(readlink -f -- "$n"); _rcf=$(readlink -f -- "$c" 2>/dev/null) ;;
  *"$_nl"*) _rn=${_o%%"$_nl"*}; _rcf=${_o#*"$_nl"} ;;
  *) _rn=$_o ;;
  esac
  _o=$(stat -L -c '%s %Y' -- "$n" "$c" 2>/dev/null)
  case $_o in
  *"$_nl"*) _sn=${_o%%"$_nl"*}; _sc=${_o#*"$_nl"} ;;
  *) _sn=$_o ;;
  esac
  k="$_rn $_sn $_rcf $_sc"
  _first=
  [ -s "$v" ] && journal_trust "$v" && [ -z "$_why" ] && IFS= read -r _first <"$v"
  if [ -n "$_first" ] && [ "$_first" = "key $k" ]; then
    # a trusted record: printable ASCII, no NUL, so `read` prints it as sed would
    { IFS= read -r _l; while IFS= read -r _l || [ -n "$_l" ]; do printf '%s\n' "$_l"; done
    } <"$v"
  else
    out=$(nix --version 2>&1) && ok=1 || ok=
    printf '%s\n' "$out"
    # shellcheck disable=SC2174  # the last directory is remedy's own
    if [ -n "$ok" ] && mkdir -p -m 0700 -- "${v%/*}" 2>/dev/null \
      && tmp=$(mktemp "${v%/*}/.nix-version.XXXXXXXX" 2>/dev/null); then
      { printf 'key %s\n%s\n' "$k" "$out" >"$tmp" && chmod 0600 -- "$tmp" \
        && mv -f -T -- "$tmp" "$v"; } || rm -f -- "$tmp"
    fi
  fi
fi
