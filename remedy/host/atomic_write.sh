# Write $1 with what the command after $2 (its mode) and $3 (its owner,
# user:group, or - to leave it) prints: to $1.remedy-tmp, which goes on any
# failure or signal, then a rename. Nothing partial is left; a full file system
# is named.
dest=$1 mode=$2 owner=$3; shift 3
tmp=$dest.remedy-tmp
trap 'rm -f -- "$tmp"' EXIT
trap 'exit 130' HUP INT TERM
if ! err=$("$@" 2>&1 >"$tmp") || [ ! -s "$tmp" ]; then
  # printf says "I/O error" where awk says "No space left": ask the file system
  # itself
  free=$(df -Pk -- "${dest%/*}" 2>/dev/null | awk \
      'NR == 2 { print $4 " " $2 " " $6 }')
  # shellcheck disable=SC2086  # df's three numbers and its mount point
  set -- $free
  case $err in *"No space left"*|*"Disk quota"*) full=yes ;; *) full= ;; esac
  if [ -n "$full" ] || { [ -n "$free" ] && [ "$1" -lt 64 ]; }; then
    echo "error: cannot write $dest: the file system $3 is full ($1 kB free of \
$2 kB); free space there and run again" >&2
  else
    echo "error: cannot write $dest: ${err:-the command that makes it failed \
or printed nothing}" >&2
  fi
  exit 1
fi
chmod "$mode" "$tmp" || exit 1
if [ "$owner" != - ]; then chown "$owner" "$tmp" || exit 1; fi
mv -f -T "$tmp" "$dest" || { echo "error: cannot rename $tmp to $dest" >&2; \
    exit 1; }
