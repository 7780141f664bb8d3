# The kernel's small text files (procfs, sysfs: no NUL byte, read at any offset, unlike
# /proc/sys) are read with the shell's `read`, as cat prints them.
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
  _nr='' _fr=
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
# the memory guard's last refusal (remedy/host/memory_guard.sh), when it kept one
if [ -r /var/lib/remedy/memory-guard.last-refusal ]; then
  echo "@@remedy:section memory.guard_refusal"
  sed -e '$a\' /var/lib/remedy/memory-guard.last-refusal
fi
echo "@@remedy:section memory.tenstorrent"
[ -r /sys/module/tenstorrent/refcnt ] && catb /sys/module/tenstorrent/refcnt
