"""The remote side of the engine's facts: constant shell snippets, one per section.

Host data never enters the script text: it is exported in assignments before it
(``export 'REMEDY_UNIT=…' ; SCRIPT``), quoted by pyinfra. Every snippet merges
its stderr into stdout (pyinfra hands facts stdout only) and the script always
ends with the end marker, so a cut-short answer is detected.
"""

from __future__ import annotations

import shlex

from pyinfra.api import QuoteString, StringCommand

from remedy.core.config import options
from remedy.core.programs import commands, journal
from remedy.core.readings import probe
from remedy.core.readings.sections import END, ESCAPE_SH, ESCAPED, SAME

# Shell functions every remote snippet may use. The snapshot is read on every check of
# every host, so it starts few processes (issue 34): shell builtins where the output
# stays the same byte for byte, one process for several files, and what one section read
# kept for the next (the unit's `systemctl show`, real paths, which scripts are text).
# Loops split lines with IFS (`${x#*pattern}` is quadratic in dash).
PRELUDE = (
    r"""
_nl='
'
_swk= _sws= _nfail= _env= _jt= _rpx= _pf= _mainpid= _aets=
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
  set -- $_b
  unset IFS; set +f
  _o=$(readlink -f -- "$@" 2>/dev/null) || return 0
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
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
# $1 for a line of blank-separated fields, in _q: a backslash as \\, a blank as \040
# and a tab as \011 (remedy.core.readings.sections.read_name reads it back).
qname() {
  case $1 in
  *["\\ $_tab"]*) ;;
  *) _q=$1; return 0 ;;
  esac
  _q= _qr=$1
  while :; do
    _qh=${_qr%%["\\ $_tab"]*}
    [ "$_qh" != "$_qr" ] || { _q=$_q$_qr; return 0; }
    _qr=${_qr#"$_qh"}
    case $_qr in
    "\\"*) _q="$_q$_qh\\\\" ;;
    " "*) _q="$_q$_qh\\040" ;;
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
  [ $# = 0 ] || printf "$_x" "$@"
}
""".replace("@EXEC_PATH_SED@", commands.EXEC_PATH_SED)
    .replace("@EXEC_TARGET_SED@", commands.EXEC_TARGET_SED)
    .replace("@TAB@", "\t")
    .replace("@SAME@", SAME)
)


# For a script with UNIT and later sections that resolve paths (GENERATIONS, NIX_VERSION,
# the settings' sysctl.d files): their paths resolved with the unit's files, in UNIT's
# one readlink. Put it before UNIT. Only a cache: a path it misses is resolved as before.
PATHS_TOO = r"""
_rpx='/run/current-system /run/booted-system /nix/var/nix/profiles/system
/nix/var/nix/profiles/system-*-link /nix/var/nix/profiles/system/etc/sysctl.d/*.conf
/run/current-system/etc/sysctl.d/*.conf /etc/nix/nix.conf'
# the nix that `command -v` finds, without its subshell
set -f; IFS=:
for _d in $PATH; do
  case $_d in /*) ;; *) continue ;; esac
  [ -f "$_d/nix" ] && [ -x "$_d/nix" ] && { _rpx="$_rpx $_d/nix"; break; }
done
unset IFS; set +f
"""


def _tagged(program: str, tag: str) -> str:
    """sed's s///p PROGRAM printing TAG before what it printed."""
    head, sep, tail = program.rpartition("/\\1/p")
    assert sep and not tail, program
    return f"{head}/{tag}\\1/p"


# The unit's properties in one `systemctl show`; FragmentPath, DropInPaths and MainPID
# (what RUNTIME reads too) taken from its answer as `systemctl show -P NAME` prints them.
# The scripts' exec targets are kept for RUNTIME's search for wrappers (_l1), so RUNTIME
# must follow UNIT in a script (command() checks).
UNIT = (
    r"""
u=$REMEDY_UNIT
echo "@@remedy:section unit.show"
_props='-p Id -p LoadState -p ActiveState -p SubState -p MainPID -p NRestarts
  -p FragmentPath -p DropInPaths -p ExecStart -p Environment -p ActiveEnterTimestampMonotonic'
# with the switch's transient units (SWITCH): a glob shows only loaded units, after the
# unit named; every line NAME=VALUE and at most one of them, or both are read as before
set -f
# shellcheck disable=SC2086
_show=$(systemctl show "$u" '@SWITCH_UNIT@*.service' $_props 2>&1) && _swk=1
set +f
if [ -n "$_swk" ]; then
  _swb=
  case $_show in
  *"$_nl$_nl"*)
    _swb=${_show#*"$_nl$_nl"}
    _show=${_show%%"$_nl$_nl"*} ;;
  esac
  _swn=0
  set -f; IFS=$_nl
  for _l in $_show; do case $_l in [A-Z]*=*) ;; *) _swk= ;; esac; done
  for _l in $_swb; do
    case $_l in
    Id=*) _swn=$((_swn + 1)) ;;
    ActiveState=*) _sws=${_l#ActiveState=} ;;
    [A-Z]*=*) ;;
    *) _swk= ;;
    esac
  done
  unset IFS; set +f
  [ "$_swn" -le 1 ] || _swk=
fi
if [ -z "$_swk" ]; then
  set -f
  # shellcheck disable=SC2086
  _show=$(systemctl show "$u" $_props 2>&1)
  set +f
fi
[ -z "$_show" ] || printf '%s\n' "$_show"
_up=
read -r _up _x </proc/uptime
printf 'RemedyUptime=%s\n' "$_up"
frag= dropins= _mainpid=
set -f; IFS=$_nl
for _l in $_show; do
  case $_l in
  FragmentPath=*) frag=${_l#FragmentPath=} ;;
  DropInPaths=*) dropins=${_l#DropInPaths=} ;;
  MainPID=*) _mainpid=${_l#MainPID=} ;;
  ActiveEnterTimestampMonotonic=*) _aets=${_l#ActiveEnterTimestampMonotonic=} ;;
  esac
done
unset IFS; set +f
# DropInPaths= as systemctl prints a list (systemd's shell_maybe_quote): blank-separated,
# and a name with a blank, a quote, a glob or another character special to the shell in
# double quotes, with \ before " \ ` and $, and a tab as \t. Into dropins, one name a
# line. (A name with another control character keeps systemd's escape: it is named, not
# read.)
dropin_lines() {
  _dv=$dropins
  dropins=
  while :; do
    _dv=${_dv#"${_dv%%[! ]*}"}
    [ -n "$_dv" ] || return 0
    case $_dv in
    '"'*)
      _dv=${_dv#?}
      _dw=
      while :; do
        _dh=${_dv%%["\\\""]*}
        _dw=$_dw$_dh
        _dv=${_dv#"$_dh"}
        case $_dv in
        "\\"?*)
          _dv=${_dv#?}
          _dr=${_dv#?}
          _dc=${_dv%"$_dr"}
          case $_dc in
          t) _dc=$_tab ;;
          ['"\`$']) ;;
          *) _dc="\\$_dc" ;;
          esac
          _dw=$_dw$_dc
          _dv=$_dr ;;
        '"'*) _dv=${_dv#?}; break ;;
        *) _dv=; break ;;
        esac
      done ;;
    *)
      _dw=${_dv%%" "*}
      _dv=${_dv#"$_dw"} ;;
    esac
    dropins=$dropins$_dw$_nl
  done
}
dropin_lines
next=/nix/var/nix/profiles/system/etc/systemd/system/$u
# The unit's files that exist, one a line in _ufs: its fragment and drop-ins, the next
# boot's unit and drop-ins.
unit_files() {
  _ufs=
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- "$frag" $dropins
  unset IFS; set +f
  for _uf in "$@" "$next" "$next.d/"*.conf; do [ -f "$_uf" ] && _ufs=$_ufs$_uf$_nl; done
}
set -f; IFS=$_nl
# shellcheck disable=SC2086
set -- "$frag" $dropins
unset IFS; set +f
# with the paths later sections resolve, if the script named them (PATHS_TOO)
# shellcheck disable=SC2086
realpaths "$@" "$next" "$next.d/"*.conf $_rpx
echo "@@remedy:section unit.files"
for f in "$@"; do catfile "$f"; done
echo "@@remedy:section unit.next"
[ -e "$next" ] && catfile "$next"
# the next boot's own drop-ins (NixOS writes <unit>.d/overrides.conf for a unit that
# also comes from a package, or with overrideStrategy = "asDropin")
echo "@@remedy:section unit.next_dropins"
for f in "$next.d/"*.conf; do [ -f "$f" ] && catfile "$f"; done
echo "@@remedy:section unit.scripts"
# One sed (GNU: -s, F) for the unit's files and the manager's system.conf files: their
# ExecStart= paths here; for RUNTIME, their EnvironmentFile=, PassEnvironment= and
# DefaultEnvironment= lines, each file's after its name, kept in _ue, _uv and _ud. A
# name with a newline or a tab, or an answer that does not follow the names, and both
# are read as before (_ub). A file whose last line has no newline ends there.
_uk= _un= _ue= _uv= _ud= _ub=
ufile() {
  [ -f "$2" ] || return 0
  case $2 in *"$_nl"* | *"$_tab"*) _ub=1 ;; esac
  _uk=$_uk$1$_tab$2$_nl
  _un=$_un$2$_nl
}
ufile fragment "$frag"
set -f; IFS=$_nl
# shellcheck disable=SC2086
set -- $dropins
unset IFS; set +f
for f in "$@"; do ufile dropin "$f"; done
ufile next "$next"
for f in "$next.d/"*.conf; do ufile next-dropin "$f"; done
_dc=/nix/var/nix/profiles/system/etc/systemd
_c=$_dc/system.conf
[ -f "$_c" ] || _c=/etc/systemd/system.conf
for f in "$_c" "$_dc/system.conf.d/"*.conf /etc/systemd/system.conf.d/*.conf \
    /run/systemd/system.conf.d/*.conf /usr/lib/systemd/system.conf.d/*.conf; do
  ufile conf "$f"
done
_ps=
if [ -z "$_ub" ] && [ -n "$_un" ]; then
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $_un
  unset IFS; set +f
  # (every line it prints is a name or a tag: its last newline makes no difference)
  _o=$(sed -s -n -e 1F -e h -e '@X_SED@' -e g -e '@E_SED@' -e '@P_SED@' -e g \
    -e '@V_SED@' -e g -e '@D_SED@' -- "$@" 2>/dev/null)
  _k= _f= _fr= _r=$_uk
  set -f; IFS=$_nl
  for _l in $_o; do
    case $_l in
    /*)
      _k=
      while [ -n "$_r" ]; do
        _e=${_r%%"$_nl"*}
        _r=${_r#*"$_nl"}
        [ "${_e#*"$_tab"}" = "$_l" ] && { _k=${_e%%"$_tab"*}; _f=$_l; break; }
      done
      [ -n "$_k" ] || { _ub=1; break; }
      qname "$_f"
      _fq=$_q
      [ "$_k" = conf ] || { realpath_of "$_f"; qname "$_real"; _fr=$_q; }
      continue ;;
    esac
    [ -n "$_k" ] || { _ub=1; break; }
    if [ "$_k" = conf ]; then
      case $_l in
      d*) _ud="${_ud}default-env $_fq ${_l#d}$_nl" ;;
      [xev]*) ;;
      *) _ub=1; break ;;
      esac
    else
      case $_l in
      x*) _ps=$_ps${_l#x}$_nl ;;
      e*) _ue="${_ue}unit-env $_k $_fq $_fr ${_l#e}$_nl" ;;
      v*) _uv=$_uv${_l#v}$_nl ;;
      d*) ;;
      *) _ub=1; break ;;
      esac
    fi
  done
  unset IFS; set +f
fi
if [ -n "$_ub" ]; then
  unit_files
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $_ufs
  unset IFS; set +f
  _ps=.
  [ $# = 0 ] || _ps=$(exec_paths "$@"; echo .)
  _ps=${_ps%.}
fi
sorted -u "$_ps"
# each script, and the store scripts it execs (as `while read` reads them: a last line
# without its newline is not read)
# catscript, and for a text file what exec_targets prints in _t, in one sed: the targets
# go to fd 3 (sed's w), the file to the answer
catscript_t() {
  _t=
  if [ -f "$1" ] && istext "$1"; then
    realpath_of "$1"
    filemark "$1" "$_real"
    [ -r "$1" ] || return 0
    { _t=$(sed -e h -e '@EXEC_TARGET_W@' -e g -e '$a\' -- "$1" 3>&1 1>&4 2>&1); } 4>&1
    # each target on its own line, the last too (an exec line that ends the script)
    [ -z "$_t" ] || _t=$_t$_nl
  else
    catscript "$1"
  fi
}
# What exec_targets printed for $1, kept for RUNTIME's wrappers (wt_get: into _t)
_wn=0 _wtc=
wt_keep() {
  case $1 in *"$_nl"* | *"$_tab"*) return 0 ;; esac
  case $_wtc in *"$_nl$1$_tab"*) return 0 ;; esac
  _wn=$((_wn + 1))
  eval "_wt$_wn=\$2"
  _wtc=$_wtc$_nl$1$_tab$_wn$_nl
}
wt_get() {
  case $_wtc in *"$_nl$1$_tab"*) ;; *) return 1 ;; esac
  _i=${_wtc#*"$_nl$1$_tab"}
  _i=${_i%%"$_nl"*}
  eval "_t=\$_wt$_i"
}
unit_scripts() {
  _l1=
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $1
  unset IFS; set +f
  for s in "$@"; do
    catscript_t "$s"
    [ -f "$s" ] && istext "$s" || continue
    # an exec line that ends a script without a newline is a line (sh runs it)
    case $_t in '' | *"$_nl") ;; *) _t=$_t$_nl ;; esac
    _l1=$_l1$_t
    [ -n "$_t" ] || continue
    set -f; IFS=$_nl
    # shellcheck disable=SC2086
    set -- $_t
    unset IFS; set +f
    for t in "$@"; do
      catscript_t "$t"
      [ -f "$t" ] && istext "$t" && wt_keep "$t" "$_t"
    done
  done
}
unit_scripts "$_sorted"
_unit_read=1
""".replace("@SWITCH_UNIT@", commands.SWITCH_UNIT)
    .replace("@X_SED@", _tagged(commands.EXEC_PATH_SED, "x"))
    .replace("@E_SED@", r"s/^[[:space:]]*\(EnvironmentFile=\)/e\1/p")
    .replace("@P_SED@", r"s/^[[:space:]]*\(PassEnvironment=\)/e\1/p")
    .replace("@V_SED@", r"s/^[[:space:]]*EnvironmentFile=-\{0,1\}[[:space:]]*/v/p")
    .replace("@D_SED@", r"s/^[[:space:]]*DefaultEnvironment=/d/p")
    .replace("@EXEC_TARGET_W@", commands.EXEC_TARGET_SED[: -len("/p")] + "/w /dev/fd/3")
)

# Runtime state a reboot reverts beyond the managed settings (remedy.core.config.volatile):
# every file and link under /run/systemd/system(.control), the serving process's argv
# and environment (its vLLM child when the main process is not vLLM), and systemd's own
# environment. NULs become newlines and newlines spaces, one argument a line. It reads
# what UNIT read (the unit's properties, real paths, the scripts' exec targets).
RUNTIME = r"""
# Both directories in one find; when a name there has a newline (or is not where it
# should be), each is listed as before.
volatile_run() {
  set --
  for d in /run/systemd/system /run/systemd/system.control; do
    [ -d "$d" ] && set -- "$@" "$d"
  done
  _vf=
  if [ $# -gt 0 ]; then
    volatile_walk "$@"
    [ -z "$_vw" ] || _vf=$(find "$@" -mindepth 1 \( -type l -o -type f -o -name "*$_nl*" \) \
      2>/dev/null)
  fi
  _vl1= _vf1= _vl2= _vf2=
  if [ -n "$_vf" ]; then
    set -f; IFS=$_nl
    # shellcheck disable=SC2086
    set -- $_vf
    unset IFS; set +f
    for f in "$@"; do
      case $f in
      /run/systemd/system/*) _k=1 ;;
      /run/systemd/system.control/*) _k=2 ;;
      *) volatile_each; return ;;
      esac
      if [ -L "$f" ]; then eval "_vl$_k=\$_vl$_k\$f\$_nl"
      elif [ -f "$f" ]; then eval "_vf$_k=\$_vf$_k\$f\$_nl"
      else volatile_each; return
      fi
    done
  fi
  echo "@@remedy:section volatile.links"
  for _k in 1 2; do
    eval "sorted '' \"\$_vl$_k\""
    volatile_lines "$_sorted"
    set -f; IFS=$_nl
    # shellcheck disable=SC2086
    set -- $_lines
    unset IFS; set +f
    [ $# = 0 ] && continue
    if [ $# -gt 1 ] && _o=$(readlink -- "$@" 2>/dev/null); then
      set -f; IFS=$_nl
      # shellcheck disable=SC2086
      set -- $_lines $_o
      unset IFS; set +f
      if [ $(($# % 2)) = 0 ]; then
        _n=$(($# / 2))
        _i=$_n
        while [ "$_i" -gt 0 ]; do
          eval "_lt=\${$((_n + 1))}"
          linkline "$1" "$_lt"
          shift
          _i=$((_i - 1))
        done
        continue
      fi
      set -f; IFS=$_nl
      # shellcheck disable=SC2086
      set -- $_lines
      unset IFS; set +f
    fi
    for f in "$@"; do linkline "$f" "$(readlink -- "$f")"; done
  done
  echo "@@remedy:section volatile.files"
  for _k in 1 2; do
    eval "sorted '' \"\$_vf$_k\""
    volatile_lines "$_sorted"
    set -f; IFS=$_nl
    # shellcheck disable=SC2086
    set -- $_lines
    unset IFS; set +f
    for f in "$@"; do catfile "$f"; done
  done
}
# A link and its target (qname).
linkline() {
  qname "$1"
  _ql=$_q
  qname "$2"
  printf 'link %s %s\n' "$_ql" "$_q"
}
# What `find "$@" -mindepth 1 \( -type l -o -type f \)` lists, in _vf, one a line, with
# the shell's globs over two levels (a unit's .d, .wants and .requires directories); a
# directory deeper down, or a name with a newline, and find lists them as before (_vw).
volatile_walk() {
  _vf= _vw=
  for _d in "$@"; do
    for _e in "$_d"/* "$_d"/.[!.]* "$_d"/..?*; do
      [ -e "$_e" ] || [ -L "$_e" ] || continue
      case $_e in *"$_nl"*) _vw=1; return 0 ;; esac
      if [ -L "$_e" ] || [ -f "$_e" ]; then _vf=$_vf$_e$_nl; continue; fi
      [ -d "$_e" ] || continue
      for _g in "$_e"/* "$_e"/.[!.]* "$_e"/..?*; do
        [ -e "$_g" ] || [ -L "$_g" ] || continue
        case $_g in *"$_nl"*) _vw=1; return 0 ;; esac
        if [ -L "$_g" ] || [ -f "$_g" ]; then _vf=$_vf$_g$_nl
        elif [ -d "$_g" ]; then _vw=1; return 0
        fi
      done
    done
  done
}
# The paths of sorted find output as `while read -r f` reads them (blanks around cut).
volatile_lines() {
  _lines=
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $1
  unset IFS; set +f
  for _l in "$@"; do
    while :; do case $_l in *' ' | *"$_tab") _l=${_l%?} ;; *) break ;; esac; done
    _lines=$_lines$_l$_nl
  done
}
volatile_each() {
  echo "@@remedy:section volatile.links"
  for d in /run/systemd/system /run/systemd/system.control; do
    [ -d "$d" ] && find "$d" -mindepth 1 -type l 2>/dev/null | sort | while read -r f; do
      linkline "$f" "$(readlink -- "$f")"
    done
  done
  echo "@@remedy:section volatile.files"
  for d in /run/systemd/system /run/systemd/system.control; do
    [ -d "$d" ] && find "$d" -mindepth 1 -type f 2>/dev/null | sort | while read -r f; do
      catfile "$f"
    done
  done
}
volatile_run
echo "@@remedy:section volatile.process"
pid=$_mainpid
if [ -n "$pid" ] && [ "$pid" != 0 ] && [ -r "/proc/$pid/cmdline" ]; then
  # one argument a line, newlines in them as tabs: an argument with a tab or a newline
  # is read as before
  _c=$(tr '\0\n' '\n\t' 2>/dev/null <"/proc/$pid/cmdline"; echo .)
  _c=${_c%.}
  case $_c in
  *"$_tab"*) _c= _old=1 ;;
  *) _old= ;;
  esac
  _main=$pid
  if [ -n "$_old" ]; then
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qx serve
  else
    case "$_nl$_c" in *"${_nl}serve$_nl"* | *"${_nl}serve") ;; *) false ;; esac
  fi || {
    for c in $(cat "/proc/$pid/task/$pid/children" 2>/dev/null); do
      tr '\0' '\n' 2>/dev/null <"/proc/$c/cmdline" | grep -qx serve && { pid=$c; break; }
    done
  }
  echo "pid $pid"
  # sed 's/^/arg /' reads the arguments again if one is empty or the last has no NUL
  case $_old$_c in
  '' | "$_nl"* | *"$_nl$_nl"* | *[!"$_nl"]) _old=1 ;;
  esac
  if [ -n "$_old" ] || [ "$pid" != "$_main" ]; then
    tr '\0\n' '\n ' 2>/dev/null <"/proc/$pid/cmdline" | sed 's/^/arg /'
  else
    prefixed 'arg %s\n' "$_c"
  fi
  if env=$(tr '\0\n' '\n ' 2>/dev/null <"/proc/$pid/environ"); then
    prefixed 'env %s\n' "$env"
  else
    echo "unreadable"
  fi
fi
# The manager's environment as show-environment prints it, from one `systemctl show` of
# the manager with its count of failed units (SWITCH lists them only if there are any).
# A value with a character that systemd quotes or older systemd cannot print (a blank,
# a quote, $, a glob, a byte beyond ASCII...) is read as before.
_o=$(systemctl show -p Environment -p NFailedUnits 2>/dev/null)
_me=
set -f; IFS=$_nl
for _l in $_o; do
  case $_l in
  NFailedUnits=*) _nfail=${_l#NFailedUnits=} ;;
  Environment=*) _env=${_l#Environment=} _me=1 ;;
  esac
done
unset IFS
case $_env in *[!A-Za-z0-9_=/.,:@%+\ -]* | *"  "* | " "* | *" ") _me= ;; esac
if [ -n "$_me" ]; then
  # shellcheck disable=SC2086
  set -- $_env
  [ $# = 0 ] || printf 'manager %s\n' "$@"
else
  _o=$(systemctl show-environment 2>/dev/null)
  prefixed 'manager %s\n' "$_o"
fi
set +f
# What the next boot's start chain sets beyond the unit's Environment=: DefaultEnvironment=
# of the system.conf the next boot reads (the profile's, else /etc's) and of system.conf.d;
# the unit files' EnvironmentFile= and PassEnvironment= lines, with the names (never the
# values) each environment file sets; the scripts the start scripts exec (nixpkgs'
# makeWrapper scripts), two levels down from ExecStart.
echo "chain"
p=/nix/var/nix/profiles/system/etc/systemd
c=$p/system.conf
[ -f "$c" ] || c=/etc/systemd/system.conf
if [ -z "$_ub" ]; then
  printf '%s' "$_ud"
else
  for f in "$c" "$p/system.conf.d/"*.conf /etc/systemd/system.conf.d/*.conf \
      /run/systemd/system.conf.d/*.conf /usr/lib/systemd/system.conf.d/*.conf; do
    [ -f "$f" ] || continue
    qname "$f"
    sed -n 's/^[[:space:]]*DefaultEnvironment=//p' "$f" 2>/dev/null \
      | while IFS= read -r v || [ -n "$v" ]; do printf 'default-env %s %s\n' "$_q" "$v"; done
  done
fi
nx=$p/system/$REMEDY_UNIT
[ -e "$nx" ] && printf 'next-unit %s\n' "$nx"
unitenv() {
  [ -f "$2" ] || return 0
  realpath_of "$2"
  qname "$2"
  _fq=$_q
  qname "$_real"
  sed -n -e 's/^[[:space:]]*\(EnvironmentFile=\)/\1/p' \
    -e 's/^[[:space:]]*\(PassEnvironment=\)/\1/p' "$2" 2>/dev/null \
    | while IFS= read -r l || [ -n "$l" ]; do
      printf 'unit-env %s %s %s %s\n' "$1" "$_fq" "$_q" "$l"
    done
}
if [ -z "$_ub" ]; then
  printf '%s' "$_ue"
  _o=$_uv.
else
  unitenv fragment "$frag"
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $dropins
  unset IFS; set +f
  for f in "$@"; do unitenv dropin "$f"; done
  unitenv next "$nx"
  for f in "$nx.d/"*.conf; do unitenv next-dropin "$f"; done
  unit_files
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $_ufs
  unset IFS; set +f
  _o=.
  [ $# = 0 ] || _o=$(sed -n 's/^[[:space:]]*EnvironmentFile=-\{0,1\}[[:space:]]*//p' "$@" \
    2>/dev/null; echo .)
fi
[ "$_o" = . ] || printf '%s' "${_o%.}" | sort -u | while IFS= read -r g; do
  n=0
  for e in $g; do
    [ -f "$e" ] && [ -r "$e" ] || continue
    n=1
    sed -n 's/^[[:space:]]*\([A-Za-z_][A-Za-z0-9_]*\)[[:space:]]*=.*/\1/p' "$e" 2>/dev/null \
      | while IFS= read -r k || [ -n "$k" ]; do printf 'env-file %s %s\n' "$g" "$k"; done
  done
  [ "$n" = 1 ] || printf 'env-file %s\n' "$g"
done
# The wrappers: the scripts UNIT's scripts exec (_l1) and the ones those exec, each
# that is text. A name with a backslash (dash's echo reads it) is searched as before.
wrappers() {
  case $_l1 in
  *\\*)
    unit_files
    set -f; IFS=$_nl
    # shellcheck disable=SC2086
    set -- $_ufs
    unset IFS; set +f
    for f in "$@"; do exec_paths "$f"; done \
      | sort -u | while read -r s; do [ -f "$s" ] && grep -Iq . "$s" && exec_targets "$s"; done \
      | sort -u | while read -r s; do
        echo "$s"; [ -f "$s" ] && grep -Iq . "$s" && exec_targets "$s"; done \
      | sort -u | while read -r w; do
        [ -f "$w" ] && grep -Iq . "$w" 2>/dev/null || continue
        printf 'wrapper %s\n' "$w"
        sed -n '1,400s/^/wline /p' "$w" 2>/dev/null
      done
    return ;;
  esac
  sorted -u "$_l1"
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $_sorted
  unset IFS; set +f
  _w=
  while [ $# -gt 0 ]; do
    s=$1
    shift
    _w=$_w$s$_nl
    [ -f "$s" ] && istext "$s" || continue
    if ! wt_get "$s"; then
      _t=$(exec_targets "$s"; echo .)
      _t=${_t%.}
    fi
    # each target on its own line (an exec line that ends a script without a newline)
    case $_t in '' | *"$_nl") ;; *) _t=$_t$_nl ;; esac
    _w=$_w$_t
  done
  sorted -u "$_w"
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $_sorted
  unset IFS; set +f
  for w in "$@"; do
    [ -f "$w" ] && istext "$w" || continue
    printf 'wrapper %s\n' "$w"
    # a script UNIT printed (catscript_t) is not read again: its first 400 lines are
    # taken from unit.scripts (remedy.core.readings.snapshot.read_runtime)
    case $_wtc in
    *"$_nl$w$_tab"*) echo wsame ;;
    *) sed -n '1,400s/^/wline /p' "$w" 2>/dev/null ;;
    esac
  done
}
wrappers
""".replace("@EXEC_TARGET_SED@", commands.EXEC_TARGET_SED)

# The kernel's small text files (procfs, sysfs: no NUL byte, read at any offset, unlike
# /proc/sys) are read with the shell's `read`, as cat prints them.
MEMORY = r"""
catb() {
  _l=
  while IFS= read -r _l; do printf '%s\n' "$_l"; done <"$1"
  printf '%s' "$_l"
}
echo "@@remedy:section memory.meminfo"
if [ -r /proc/meminfo ]; then catb /proc/meminfo; else cat /proc/meminfo 2>&1; fi
for d in /sys/kernel/mm/hugepages/hugepages-*; do
  [ -d "$d" ] || continue
  echo "@@remedy:section memory.hugepages ${d##*hugepages-}"
  _nr= _fr=
  [ -r "$d/nr_hugepages" ] && IFS= read -r _nr <"$d/nr_hugepages"
  [ -r "$d/free_hugepages" ] && IFS= read -r _fr <"$d/free_hugepages"
  echo "nr=$_nr free=$_fr"
done
echo "@@remedy:section memory.cmdline"
[ -r /proc/cmdline ] && catb /proc/cmdline
# the system profile's kernel-params: a file in the store that NixOS writes from a Nix
# string (no NUL byte), so the shell's `read` prints it as sed does
_kp=/nix/var/nix/profiles/system/kernel-params
if [ -r $_kp ]; then
  echo "@@remedy:section memory.next_params $_kp"
  _kr=
  known_path /nix/var/nix/profiles/system && realpath_of /nix/var/nix/profiles/system \
    && _kr=$_real/kernel-params
  case $_kr in
  /nix/store/*/kernel-params)
    if [ -f "$_kr" ] && [ ! -L "$_kr" ]; then
      while IFS= read -r _l || [ -n "$_l" ]; do printf '%s\n' "$_l"; done <"$_kr"
    else
      sed -e '$a\' $_kp
    fi ;;
  *) sed -e '$a\' $_kp ;;
  esac
elif [ -r /run/current-system/kernel-params ]; then
  echo "@@remedy:section memory.next_params /run/current-system/kernel-params"
  sed -e '$a\' /run/current-system/kernel-params
fi
echo "@@remedy:section memory.tenstorrent"
[ -r /sys/module/tenstorrent/refcnt ] && catb /sys/module/tenstorrent/refcnt
"""

# The host's local time with its UTC offset: restart windows are in the serving host's time.
CLOCK = r"""
echo "@@remedy:section clock"
date '+%Y-%m-%dT%H:%M:%S%z'
echo "@@remedy:section host.id"
{ read -r _mid </etc/machine-id; } 2>/dev/null && printf '%s\n' "$_mid"
"""

# `nix --version` once per Nix (and nix.conf, whose unknown settings it warns about):
# what it printed is kept next to the run journal (options.NIX_VERSION_RECORD, read
# only as the journal is read) under the binary's and nix.conf's real paths, sizes and
# times, so that a check that finds nothing to do starts no nix process (issue 28).
NIX_VERSION = (
    (
        journal.TRUST_SH
        + journal.TRUST_ALL_SH
        + r"""
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
  _rn= _rcf= _sn= _sc=
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
    if [ -n "$ok" ] && mkdir -p -m 0700 -- "${v%/*}" 2>/dev/null \
      && tmp=$(mktemp "${v%/*}/.nix-version.XXXXXXXX" 2>/dev/null); then
      { printf 'key %s\n%s\n' "$k" "$out" >"$tmp" && chmod 0600 -- "$tmp" \
        && mv -f -T -- "$tmp" "$v"; } || rm -f -- "$tmp"
    fi
  fi
fi
"""
    )
    .replace("@RECORD@", options.NIX_VERSION_RECORD)
    .replace("@OPTIONS_RECORD@", options.RECORD)
    .replace("@MODEL_RECORD@", probe.MODEL_RECORD)
)

FLAKE = r"""
d=$REMEDY_FLAKE_DIR
echo "@@remedy:section nix.flake_args"
printf 'dir=%s\ninput=%s\n' "$d" "$REMEDY_FLAKE_INPUT"
echo "@@remedy:section nix.tools"
for t in git runuser systemd-run; do command -v "$t" >/dev/null 2>&1 && echo "tool $t"; done
[ -S /nix/var/nix/daemon-socket/socket ] && echo "daemon-socket"
[ -d /run/systemd/system ] && echo "systemd-booted"
if [ -r "$d/flake.lock" ]; then
  echo "@@remedy:section nix.flake_lock ok"
  sed -e '$a\' "$d/flake.lock"
elif [ -e "$d/flake.lock" ]; then
  echo "@@remedy:section nix.flake_lock unreadable"
else
  echo "@@remedy:section nix.flake_lock missing"
fi
echo "@@remedy:section nix.checkout"
# git runs as the checkout's owner: root's git refuses a repo another user owns, and a
# root git would leave root-owned files (index, objects) in a person's repo.
_nl='
'
# the owner and who this shell runs as (id -un) in one stat: /proc/self/ is stat's own
# process, owned by its user (UNKNOWN: that user has no name, and id -un says nothing)
_me=
if _o=$(stat -c %U -- "$d" /proc/self/ 2>/dev/null); then
  owner=${_o%%"$_nl"*}
  _me=${_o#*"$_nl"}
else
  owner=$(stat -c %U -- "$d" 2>/dev/null) || owner=
fi
[ "$_me" != UNKNOWN ] || _me=$(id -un 2>/dev/null)
# the home (getent passwd OWNER | cut -d: -f6)
_o=$(getent passwd "$owner" 2>/dev/null)
home= _gid=
set -f; IFS=$_nl
for _l in $_o; do
  case $_l in
  *:*:*:*:*:*)
    _gid=${_l#*:*:*:}
    _gid=${_gid%%:*}
    _l=${_l#*:*:*:*:*:}
    home=$home${_l%%:*}$_nl ;;
  *:*) home=$home$_nl ;;
  *) home=$home$_l$_nl ;;
  esac
done
unset IFS; set +f
while :; do case $home in *"$_nl") home=${home%"$_nl"} ;; *) break ;; esac; done
echo "owner ${owner:-?} ${home:-/}"
g() {
  if [ -z "$owner" ] || [ "$owner" = "$(id -un)" ] || ! command -v runuser >/dev/null 2>&1
  then git -C "$d" "$@"
  else runuser -u "$owner" -- env -C / HOME="${home:-/}" git -C "$d" "$@"
  fi
}
m=$REMEDY_MANAGED_FILE
_mf=
[ -n "$m" ] && [ -f "$d/$m" ] && _mf=1
# Every git read of the checkout in one shell as the owner (setpriv, else runuser); what
# it printed is split into the checkout's lines and the managed file's. Anything else in
# its answer (setpriv's or runuser's own words) and each read is made again as before,
# one runuser each.
_gm=
if ! command -v git >/dev/null 2>&1; then
  echo "no-git"
  _gm=each
else
  if [ -z "$owner" ] || [ "$owner" = "$_me" ] || ! command -v runuser >/dev/null 2>&1; then
    _o=$(sh -c "$_git_reads" sh "$d" "$m" "$_mf" "$_status" 2>&1)
  elif case $_gid in '' | *[!0-9]*) false ;; esac && command -v setpriv >/dev/null 2>&1; then
    # the owner's uid, gid and groups without runuser's PAM session (a third of the
    # cost of this read): git reads need who, not a login (HOME and / as env -C gives)
    _o=$(HOME="${home:-/}" setpriv --reuid="$owner" --regid="$_gid" --init-groups -- \
      sh -c "cd / || exit 1$_nl$_git_reads" sh "$d" "$m" "$_mf" "$_status" 2>&1)
  else
    _o=$(runuser -u "$owner" -- env -C / HOME="${home:-/}" \
      sh -c "$_git_reads" sh "$d" "$m" "$_mf" "$_status" 2>&1)
  fi
  _r=${_o#"@@remedy:git$_nl"}
  _r2=${_r%"$_nl@@remedy:git-end"}
  { [ "$_r" = "$_o" ] || [ "$_r2" = "$_r" ]; } && _r2=
  case $_r2 in
  *"@@remedy:git-checkout$_nl"*)
    _gm=${_r2%%"@@remedy:git-checkout$_nl"*}
    printf '%s\n' "${_r2#*"@@remedy:git-checkout$_nl"}" ;;
  *)
    _gm=each
    if top=$(g rev-parse --show-toplevel 2>&1); then
      echo "top $top"
      echo "head $(g rev-parse HEAD 2>/dev/null)"
      # shellcheck disable=SC2086
      g $_status 2>&1 | sed 's/^/status /'
    else
      printf '%s\n' "$top" | sed 's/^/error /'
    fi ;;
  esac
fi
echo "@@remedy:section nix.managed $m"
if [ -n "$m" ]; then
  # which host configuration imports remedy's file (./remedy.nix next to it); names of
  # other bytes than these go through grep and sed as before
  _o=$(grep -rlF --include='*.nix' -e "./${m##*/}" "$d" 2>/dev/null)
  case $_o in
  *[!abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._+@=,"$_nl"-]*)
    grep -rlF --include='*.nix' -e "./${m##*/}" "$d" 2>/dev/null | grep -vxF "$d/$m" \
      | sed 's/^/imported-by /' ;;
  *)
    set -f; IFS=$_nl
    for _l in $_o; do [ "$_l" = "$d/$m" ] || printf 'imported-by %s\n' "$_l"; done
    unset IFS; set +f ;;
  esac
  if [ -f "$d/$m" ]; then
    if [ "$_gm" = each ]; then
      g ls-files --error-unmatch -- "$m" >/dev/null 2>&1 || echo "untracked"
      # who committed it last: remedy, or a person whose value remedy must not overwrite
      g log -1 --format='last-commit %H %ae %an' -- "$m" 2>/dev/null
    else
      printf '%s' "$_gm"
    fi
    catfile "$d/$m"
  fi
fi
"""
# What the checkout's owner runs for FLAKE (sh -c SCRIPT sh DIR MANAGED_FILE IS_FILE
# STATUS_ARGS):
# the managed file's lines, then the checkout's, between markers. The toplevel and HEAD
# come from one rev-parse when it answers just those two lines.
GIT_READS = r"""
d=$1 m=$2
nl='
'
echo "@@remedy:git"
if [ -n "$3" ]; then
  git -C "$d" ls-files --error-unmatch -- "$m" >/dev/null 2>&1 || echo "untracked"
  git -C "$d" log -1 --format='last-commit %H %ae %an' -- "$m" 2>/dev/null
fi
echo "@@remedy:git-checkout"
ok=1
if top=$(git -C "$d" rev-parse --show-toplevel HEAD 2>&1) && case $top in
  *"$nl"*"$nl"*) false ;; *"$nl"*) ;; *) false ;; esac
then
  echo "top ${top%%"$nl"*}"
  echo "head ${top#*"$nl"}"
elif top=$(git -C "$d" rev-parse --show-toplevel 2>&1); then
  echo "top $top"
  echo "head $(git -C "$d" rev-parse HEAD 2>/dev/null)"
else
  printf '%s\n' "$top" | sed 's/^/error /'
  ok=
fi
if [ -n "$ok" ]; then
  # shellcheck disable=SC2086
  _s=$(git -C "$d" $4 2>&1; echo .)
  _s=${_s%.}
  # sed 's/^/status /' for what the shell cannot tell (an empty line, no last newline)
  case $_s in
  '') ;;
  "$nl"* | *"$nl$nl"* | *[!"$nl"]) printf '%s' "$_s" | sed 's/^/status /' ;;
  *)
    set -f; IFS=$nl
    # shellcheck disable=SC2086
    set -- $_s
    unset IFS; set +f
    printf 'status %s\n' "$@" ;;
  esac
fi
echo "@@remedy:git-end"
"""
FLAKE = (
    "\n_status='status --porcelain --untracked-files=no'\n_git_reads="
    + shlex.quote(GIT_READS)
    + FLAKE
)

JOURNAL = journal.SNIPPET

# Every link resolved by one readlink when each one resolves (else one readlink each).
GENERATIONS = r"""
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
  _one= _k=
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
"""

# The last switch-to-configuration of nixos-rebuild-ng's transient unit in this boot,
# as systemd recorded it (a run whose SSH session dropped learns its result here), and
# the units that are failed now. The unit is also `…-<8 hex>` in some 26.05-pre
# nixos-rebuild-ng builds (nixpkgs#463029, reverted by #499837). Its state comes from
# list-units: a `systemctl show` would load the unit again (systemd 252 then keeps it).
#
# The state: the last of the unit's lines whose third field (ACTIVE) is active,
# activating, deactivating or reloading, else the first line's; the failed units' first
# fields. The programs' lines are read in the shell (fields split as awk splits them).
SWITCH = r"""
echo "@@remedy:section nix.switch"
u='@SWITCH_UNIT@*.service'
switch_read() {
  _nl='
'
  _a= _s=
  if [ -n "$_swk" ]; then
    _s=$_sws
  else
    _o=$(systemctl list-units --all --plain --no-legend --no-pager "$u" 2>/dev/null)
    set -f; IFS=$_nl
    for _l in $_o; do
      unset IFS
      # shellcheck disable=SC2086
      set -- $_l
      case $3 in active | activating | deactivating | reloading) _a=$3 ;; esac
      [ -n "$_s" ] || _s=$3
      IFS=$_nl
    done
    unset IFS; set +f
  fi
  printf 'state %s\n' "${_a:-$_s}"
  _o=$(journalctl -q -b -u "$u" -n 40 -o json \
    --output-fields=MESSAGE,EXIT_STATUS,INVOCATION_ID 2>/dev/null)
  set -f; IFS=$_nl
  # shellcheck disable=SC2086
  set -- $_o
  unset IFS; set +f
  [ $# = 0 ] || printf 'journal %s\n' "$@"
  _o=
  [ "$_nfail" = 0 ] \
    || _o=$(systemctl list-units --failed --plain --no-legend --no-pager 2>/dev/null)
  set -f; IFS=$_nl
  for _l in $_o; do
    unset IFS
    # shellcheck disable=SC2086
    set -- $_l
    printf 'failed %s\n' "$1"
    IFS=$_nl
  done
  unset IFS; set +f
}
switch_read
""".replace("@SWITCH_UNIT@", commands.SWITCH_UNIT)

PROBE = (
    (
        journal.TRUST_SH
        + f"""
echo "@@remedy:section probe"
remedy_probe() {{
{probe.PROBE_SH}
}}
"""
        + r"""
# The model id from MODEL_RECORD when it names this server process (UNIT's main PID and
# start, this boot, this URL): one curl, not two. A 404 (the id is no longer served)
# and the probe asks /v1/models as before; a new id is recorded, atomically.
probe_record() {
  _r=@MODEL_RECORD@
  mkdir -p -m 0700 -- "${_r%/*}" 2>/dev/null \
    && _tmp=$(mktemp "${_r%/*}/.probe-model.XXXXXXXX" 2>/dev/null) || return 0
  { printf 'key %s\nmodel %s\n' "$_pk" "$model" >"$_tmp" && chmod 0600 -- "$_tmp" \
    && mv -f -T -- "$_tmp" "$_r"; } || rm -f -- "$_tmp"
}
if command -v curl >/dev/null 2>&1; then
  _pk= _pm= _b=
  if [ -z "$REMEDY_PROBE_MODEL" ] && [ -n "$_mainpid" ] && [ "$_mainpid" != 0 ]; then
    { read -r _b </proc/sys/kernel/random/boot_id; } 2>/dev/null
    _pk="$_b $_mainpid $_aets $REMEDY_PROBE_URL"
    case $_pk in *"$_nl"*) _pk= ;; esac
  fi
  if [ -n "$_pk" ]; then
    journal_trust @MODEL_RECORD@
    if [ -z "$_why" ] && [ -s @MODEL_RECORD@ ]; then
      { IFS= read -r _l && IFS= read -r _m; } <@MODEL_RECORD@
      [ "$_l" != "key $_pk" ] || _pm=${_m#model }
    fi
  fi
  if [ -n "$_pm" ]; then
    _po=$(remedy_probe "$REMEDY_PROBE_URL" "$_pm" "$REMEDY_PROBE_TIMEOUT" \
      "$REMEDY_PROBE_TRIES" "$REMEDY_PROBE_HEAD" "$REMEDY_PROBE_TAIL" 2>&1; echo .)
    case $_po in
    *"$_nl@STATUS@404$_nl"*) _pm= ;;
    *) printf '%s' "${_po%.}" ;;
    esac
  fi
  if [ -z "$_pm" ]; then
    remedy_probe "$REMEDY_PROBE_URL" "$REMEDY_PROBE_MODEL" "$REMEDY_PROBE_TIMEOUT" \
      "$REMEDY_PROBE_TRIES" "$REMEDY_PROBE_HEAD" "$REMEDY_PROBE_TAIL" 2>&1
    [ -z "$_pk" ] || [ -z "$model" ] || probe_record
  fi
else
  echo "curl: (2) curl is not installed on this host"
fi
"""
    )
    .replace("@MODEL_RECORD@", probe.MODEL_RECORD)
    .replace("@STATUS@", probe.STATUS_MARK)
)


# The shell that runs every fact's command: the facts set it as their shell_executable,
# so pyinfra wraps the command in `sh -c` whatever shell a host's data names.
SHELL = "sh"


def command(snippets: list[str], env: dict[str, str]) -> StringCommand:
    """``export K=V …`` and one script for all SNIPPETS: one remote round trip, run by the
    ``sh -c`` that pyinfra wraps it in (SHELL; the bash a login shell runs execs it).
    The host data is in the quoted assignments, never in the script. Every line of the
    answer goes through sed's ``l`` (``remedy.core.readings.sections.unescape`` reads it
    back), so no byte the host holds reaches the SSH client as text it cannot decode."""
    if RUNTIME in snippets and UNIT not in snippets[: snippets.index(RUNTIME)]:
        raise ValueError("facts._remote.RUNTIME reads what UNIT read: put UNIT before it")
    body = "\n".join([PRELUDE, *snippets, f"echo '{END}'"])
    script = f"echo '{ESCAPED}'\n(\n{body}\n) 2>/dev/null | {ESCAPE_SH}\nexit 0"
    parts: list = []
    if env:
        parts = ["export", *(QuoteString(f"{k}={v}") for k, v in sorted(env.items())), ";"]
    return StringCommand(*parts, script)


BUILT = r"""
t=$REMEDY_TOPLEVEL
u=$REMEDY_UNIT
echo "@@remedy:section built.unit"
catfile "$t/etc/systemd/system/$u"
echo "@@remedy:section built.dropins"
for f in "$t/etc/systemd/system/$u.d/"*.conf; do [ -f "$f" ] && catfile "$f"; done
echo "@@remedy:section built.kernel"
[ -r "$t/kernel-params" ] && sed -e '$a\' "$t/kernel-params"
echo "@@remedy:section built.scripts"
f=$t/etc/systemd/system/$u
for g in "$f" "$f.d/"*.conf; do [ -f "$g" ] && exec_paths "$g"; done | sort -u | catscripts
"""


# The answer of the last evaluation of what remedy's file overrides
# (remedy.core.config.options.RECORD, next to the run journal), read only as the run journal
# is read: a regular file, root's, mode 0600, printable ASCII. Otherwise it is named
# untrusted and not read; the next evaluation replaces it (a rename, never a write
# through it).
OPTIONS_RECORD = (
    journal.TRUST_SH
    + r"""
r=@RECORD@
echo "@@remedy:section nix.options_record"
journal_trust "$r"
why=$_why
if [ -n "$why" ]; then
  printf 'untrusted %s: %s\n' "$r" "$why"
elif [ -s "$r" ]; then
  # a trusted record: printable ASCII, no NUL, so `read` prints it as sed would
  while IFS= read -r _l || [ -n "$_l" ]; do printf '%s\n' "$_l"; done <"$r"
fi
"""
).replace("@RECORD@", options.RECORD)
