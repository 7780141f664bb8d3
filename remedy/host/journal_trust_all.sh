# journal_trust_all FILE...: journal_trust's stat and grep of all, in _jt.
# shellcheck shell=sh
_jnl='
'
_jtab='@TAB@'
# shellcheck disable=SC1007  # _jt= _jn= (empty)
journal_trust_all() {
  _jt= _jn=
  for _jf in "$@"; do
    case $_jf in '' | *"$_jnl"* | *"$_jtab"*) continue ;; esac
    [ -f "$_jf" ] && [ ! -L "$_jf" ] && _jn=$_jn$_jf$_jnl
  done
  case $_jn in *"$_jnl"*"$_jnl"*) ;; *) return 0 ;; esac
  set -f; IFS=$_jnl
  # shellcheck disable=SC2086
  set -- $_jn
  unset IFS; set +f
  _jm=$(stat -c '%u %a' -- "$@" 2>/dev/null) || return 0
  _jb=$(LC_ALL=C grep -l '[^[:print:][:space:]]' -- "$@" 2>/dev/null)
  [ $? -le 1 ] || return 0
  _jb=$_jnl$_jb$_jnl
  _jo=
  for _jf in "$@"; do
    case $_jm in *"$_jnl"*) _jl=${_jm%%"$_jnl"*} _jm=${_jm#*"$_jnl"} ;; *) _jl=$_jm _jm= ;; esac
    [ -n "$_jl" ] || return 0
    case $_jb in *"$_jnl$_jf$_jnl"*) _jx=y ;; *) _jx=n ;; esac
    _jo=$_jo$_jnl$_jf$_jtab$_jl$_jtab$_jx
  done
  [ -z "$_jm" ] || return 0
  _jt=$_jo$_jnl
}
