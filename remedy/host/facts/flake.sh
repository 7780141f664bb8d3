# The flake checkout (REMEDY_FLAKE_DIR): its lock, the tools, the owner, and
# the checkout's files as its owner reads them (GIT_READS).
# @include-text git_reads_text facts/git_reads.sh
_git_reads=$(git_reads_text)
_status='status --porcelain --untracked-files=no'
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
home='' _gid=
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
