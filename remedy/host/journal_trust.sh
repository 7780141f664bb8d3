# remedy's run journal and records: FILE trusted only if remedy wrote it
# (root's, mode 0600, printable ASCII); the reason it is not, in _why. FILE: why
# it is not remedy's journal, in _why (empty: it is, or is absent). No subshell
# (issue 34: the snapshot asks it of every record), so its names are its own.
journal_trust() {
  _why=
  [ -e "$1" ] || [ -L "$1" ] || return 0
  if [ -L "$1" ]; then _why="a symbolic link"; return 0; fi
  if [ ! -f "$1" ]; then _why="not a regular file"; return 0; fi
  # what journal_trust_all asked of it, if it did (the manual script runs with
  # set -u)
  _jb=
  if [ -n "${_jt-}" ]; then
    case $_jt in
    *"$_jnl$1$_jtab"*)
      _jb=${_jt#*"$_jnl$1$_jtab"}
      _jb=${_jb%%"$_jnl"*}
      _jm=${_jb%"$_jtab"*}
      _jb=${_jb#*"$_jtab"} ;;
    esac
  fi
  [ -n "$_jb" ] || _jm=$(stat -c '%u %a' -- "$1" 2>/dev/null)
  if [ "$_jm" != "0 600" ]; then
    _why="owner uid ${_jm%% *}, mode ${_jm#* }: not root's with mode 600"; \
        return 0
  fi
  case $_jb in
  '') LC_ALL=C grep -q '[^[:print:][:space:]]' -- "$1" 2>/dev/null || return 0 \
      ;;
  n) return 0 ;;
  esac
  _why="bytes that remedy never writes"
}
journal_distrust() {  # the same, printed
  journal_trust "$1"
  [ -z "$_why" ] || printf '%s\n' "$_why"
}
