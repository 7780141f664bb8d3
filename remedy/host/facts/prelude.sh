# Shell functions every remote snippet may use. The snapshot is read on every check of
# every host, so it starts few processes (issue 34): shell builtins where the output
# stays the same byte for byte, one process for several files, and what one section read
# kept for the next (the unit's `systemctl show`, real paths, which scripts are text).
# Loops split lines with IFS (`${x#*pattern}` is quadratic in dash).
_nl='
'
_swk='' _sws='' _nfail='' _env='' _jt='' _rpx='' _pf='' _mainpid='' _aets=
_tab='@TAB@'
# The real path of $1 in _real: what `readlink -f -- "$1"` prints, or $1 where it fails.
# No process for a path with no link among its parts (readlink gives it back) or that
# realpaths resolved.
realpath_of() {
  _real=$1
  case $1 in
  *"$_nl"* | *"$_tab"*) ;;
  *)
    case $_rc in
    *"$_nl$1$_tab"*)
      set -f; IFS=$_nl
      for _e in $_rc; do
        case $_e in "$1$_tab"*) _real=${_e#"$1$_tab"}; break ;; esac
      done
      unset IFS; set +f
      return 0 ;;
    esac
    unlinked "$1" && return 0 ;;
  esac
  _real=$(readlink -f -- "$1" 2>/dev/null) && return 0
  _real=$1
  while :; do case $_real in *"$_nl") _real=${_real%"$_nl"} ;; *) return 0 ;; esac; done
}
# True when `readlink -f` prints $1 itself: an absolute path without . or .. parts, //
# or a trailing /, none of whose parts is a symbolic link.
unlinked() {
  case $1 in /*) ;; *) return 1 ;; esac
  case $1 in */ | *//* | */./* | */../* | */. | */..) return 1 ;; esac
  _p=$1
  while [ -n "$_p" ]; do
    [ -L "$_p" ] && return 1
    _p=${_p%/*}
  done
  return 0
}
# True when realpath_of knows $1 without a process: realpaths resolved it, or it has
# no link among its parts.
known_path() {
  case $1 in '' | *"$_nl"* | *"$_tab"*) return 1 ;; esac
  case $_rc in *"$_nl$1$_tab"*) return 0 ;; esac
  unlinked "$1"
}
# The existing ones among the paths given, resolved with one readlink for realpath_of.
realpaths() {
  _b=
  for _f in "$@"; do
    case $_f in '' | *"$_nl"* | *"$_tab"*) continue ;; esac
    case $_rc in *"$_nl$_f$_tab"*) continue ;; esac
    [ -e "$_f" ] && ! unlinked "$_f" && _b=$_b$_f$_nl
  done
  case $_b in *"$_nl"*"$_nl"*) ;; *) return 0 ;; esac
  set -f; IFS=$_nl
  # shellcheck disable=SC2086  # split at newlines on purpose
  set -- $_b
  unset IFS; set +f
  _o=$(readlink -f -- "$@" 2>/dev/null) || return 0
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  # shellcheck disable=SC2086  # split at newlines on purpose
  set -- $_b $_o
  unset IFS; set +f
  [ $(($# % 2)) = 0 ] || return 0
  _n=$(($# / 2))
  _i=$_n
  while [ "$_i" -gt 0 ]; do
    eval "_rc=\$_rc\$_nl\$1\$_tab\${$((_n + 1))}"
    shift
    _i=$((_i - 1))
  done
}
# grep -Iq . "$1" (a readable text file, not empty), asked once a file.
istext() {
  case $1 in *"$_nl"* | *"$_tab"*) grep -Iq . "$1" 2>/dev/null; return ;; esac
  case $_tc in
  *"$_nl$1${_tab}y$_nl"*) return 0 ;;
  *"$_nl$1${_tab}n$_nl"*) return 1 ;;
  esac
  if grep -Iq . "$1" 2>/dev/null; then _tc=$_tc$_nl$1${_tab}y$_nl; return 0; fi
  _tc=$_tc$_nl$1${_tab}n$_nl
  return 1
}
# $1 for a line of blank-separated fields, in _q: a backslash as \\, a blank as \040,
# a tab as \011 and a newline as \012 (remedy.core.readings.sections.read_name reads
# it back).
qname() {
  case $1 in
  *["\\ $_tab$_nl"]*) ;;
  *) _q=$1; return 0 ;;
  esac
  _q='' _qr=$1
  while :; do
    _qh=${_qr%%["\\ $_tab$_nl"]*}
    [ "$_qh" != "$_qr" ] || { _q=$_q$_qr; return 0; }
    _qr=${_qr#"$_qh"}
    case $_qr in
    "\\"*) _q="$_q$_qh\\\\" ;;
    " "*) _q="$_q$_qh\\040" ;;
    "$_nl"*) _q="$_q$_qh\\012" ;;
    *) _q="$_q$_qh\\011" ;;
    esac
    _qr=${_qr#?}
  done
}
# The marker before a file's content: its name and real path (qname).
filemark() {
  qname "$1"
  _qf=$_q
  qname "$2"
  printf '@@remedy:file %s %s\n' "$_qf" "$_q"
}
# A file printed before under the same real path (the next boot's unit and sysctl.d files
# are the running system's, in the store) is not read again: SAME says so and the reader
# copies it (remedy.core.readings.sections). Not for a name with a blank.
catfile() {
  [ -n "$1" ] || return 0
  realpath_of "$1"
  filemark "$1" "$_real"
  case $1$_real in
  *[" $_tab$_nl"]*)
    [ -r "$1" ] && sed -e '$a\' -- "$1" 2>&1
    return ;;
  esac
  case $_pf in *"$_nl$_real$_nl"*) echo '@SAME@'; return 0 ;; esac
  [ -r "$1" ] || return 1
  sed -e '$a\' -- "$1" 2>&1
  _pf=$_pf$_nl$_real$_nl
}
# The command paths that ExecStart= lines of unit files name (prefixes like - @ ! dropped,
# NixOS's trailing space trimmed).
exec_paths() {
  sed -n '@EXEC_PATH_SED@' "$@" 2>/dev/null
}
# The store scripts a script execs (NixOS `script =` units exec the real start script).
exec_targets() {
  sed -n '@EXEC_TARGET_SED@' "$@" 2>/dev/null
}
# A start script; a binary (an ExecStart of /bin/sh -c ...) is named, not printed.
catscript() {
  if [ ! -f "$1" ] || istext "$1"; then catfile "$1"
  else filemark "$1" "$1"; echo '# (a binary, not a start script)'
  fi
}
# A script and, one level down, the store scripts it execs.
catscripts() {
  while read -r s; do
    catscript "$s"
    [ -f "$s" ] && istext "$s" \
      && exec_targets "$s" | while read -r t; do catscript "$t"; done
  done
}
# In _sorted, what `sort $1` ($1: -u or nothing) prints for the lines of $2, a stream
# whose last line may lack its newline; sort runs only for two different lines or more.
# Lines that are all empty are only ever given with -u.
sorted() {
  _sorted=
  [ -n "$2" ] || return 0
  _a=${2%"$_nl"}
  case $_a in
  *"$_nl"*) ;;
  *) _sorted=$_a$_nl; return 0 ;;
  esac
  case $1$_a in
  # all the same line (none empty: splitting leaves those out)? sort -u gives it once
  -u"$_nl"* | -u*"$_nl$_nl"* | -u*"$_nl") ;;
  -u*)
    _f=${_a%%"$_nl"*}
    set -f; IFS=$_nl
    # shellcheck disable=SC2086
    set -- $_a
    unset IFS; set +f
    _same=1
    for _l in "$@"; do [ "$_l" = "$_f" ] || { _same=; break; }; done
    if [ -n "$_same" ]; then _sorted=$_f$_nl; return 0; fi
    set -- -u ;;
  esac
  # shellcheck disable=SC2086  # sort's option, or none
  _sorted=$(sort $1 <<EOF
$_a
EOF
)
  _sorted=$_sorted$_nl
}
# printf FORMAT for each line of $2 that is not empty (a program's output read with $(...)).
prefixed() {
  _x=$1
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $2
  unset IFS; set +f
  # shellcheck disable=SC2059  # the caller's format
  [ $# = 0 ] || printf "$_x" "$@"
}
