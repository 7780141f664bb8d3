# What a switch from $1 (the running system) to $2 changes for the boot: the
# targets of each system's kernel, initrd and kernel modules, and both kernel
# command lines.
target() { if [ -e "$1" ]; then readlink -f "$1"; else echo -; fi; }
for f in kernel initrd kernel-modules; do
  printf 'file %s %s %s\n' "$f" "$(target "$1/$f")" "$(target "$2/$f")"
done
printf 'params-old %s\n' "$(cat "$1/kernel-params" 2>/dev/null)"
printf 'params-new %s\n' "$(cat "$2/kernel-params" 2>/dev/null)"
