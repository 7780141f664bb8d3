# The unit's properties in one `systemctl show`; FragmentPath, DropInPaths and MainPID
# (what RUNTIME reads too) taken from its answer as `systemctl show -P NAME` prints them.
# The scripts' exec targets are kept for RUNTIME's search for wrappers (_l1), so RUNTIME
# must follow UNIT in a script (command() checks).
# @include facts/unit_bus.sh
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
_bus=
if [ -z "$_swk" ]; then
  set -f
  # shellcheck disable=SC2086
  _show=$(systemctl show "$u" $_props 2>&1) || case $_show in
    *"Invalid argument"*) _show=$(unit_bus "$u") && _bus=1 ;;
  esac
  set +f
fi
[ -z "$_show" ] || printf '%s\n' "$_show"
_up=
read -r _up _x </proc/uptime
printf 'RemedyUptime=%s\n' "$_up"
frag='' dropins='' _mainpid=
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
[ -z "$_bus" ] || dropins=$(unit_bus_dropins "$u")
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
_uk='' _un='' _ue='' _uv='' _ud='' _ub=
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
  _k='' _f='' _fr='' _r=$_uk
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
    { [ -f "$s" ] && istext "$s"; } || continue
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
