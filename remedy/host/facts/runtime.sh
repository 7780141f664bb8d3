# Runtime state a reboot reverts beyond the managed settings (remedy.core.config.volatile):
# every file and link under /run/systemd/system(.control), the serving process's argv
# and environment (its vLLM child when the main process is not vLLM), and systemd's own
# environment. NULs become newlines and newlines spaces, one argument a line. It reads
# what UNIT read (the unit's properties, real paths, the scripts' exec targets).
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
  _vl1='' _vf1='' _vl2='' _vf2=
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
  _vf='' _vw=
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
# Every link, then every file, under the two directories, at any depth, each
# name whole (a name with a newline is one entry: qname escapes it).
volatile_each() {
  echo "@@remedy:section volatile.links"
  for d in /run/systemd/system /run/systemd/system.control; do
    [ -d "$d" ] && volatile_tree "$d" l
  done
  echo "@@remedy:section volatile.files"
  for d in /run/systemd/system /run/systemd/system.control; do
    [ -d "$d" ] && volatile_tree "$d" f
  done
}
volatile_tree() {  # DIR l|f: its links (l) or files (f), the shell's globs sorted
  for _e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    if [ -L "$_e" ]; then
      [ "$2" = l ] && linkline "$_e" "$(readlink -- "$_e")"
    elif [ -f "$_e" ]; then
      [ "$2" = f ] && catfile "$_e"
    elif [ -d "$_e" ]; then
      volatile_tree "$_e" "$2"
    fi
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
  *"$_tab"*) _c='' _old=1 ;;
  *) _old= ;;
  esac
  _main=$pid
  if [ -n "$_old" ]; then
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qx serve
  else
    case "$_nl$_c" in *"${_nl}serve$_nl"* | *"${_nl}serve") ;; *) false ;; esac
  fi || {
    # shellcheck disable=SC2013  # PIDs, blank-separated
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
  # its resource limits as the kernel holds them (what a LimitNOFILE= gave it at start)
  if lim=$(cat "/proc/$pid/limits" 2>/dev/null); then
    prefixed 'limit %s\n' "$lim"
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
    { [ -f "$e" ] && [ -r "$e" ]; } || continue
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
        { [ -f "$w" ] && grep -Iq . "$w" 2>/dev/null; } || continue
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
    { [ -f "$s" ] && istext "$s"; } || continue
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
    { [ -f "$w" ] && istext "$w"; } || continue
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
