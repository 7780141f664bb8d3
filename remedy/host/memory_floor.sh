# The memory floor: MemAvailable against min_mem_available_gb, below which no
# vLLM start goes (a boot below ~4 GB can hard-freeze the host). One decision,
# for remedy's gate (lib.sh: refusal) and for the serving unit's guard
# (memory_guard.sh), and the words both say. Only sed, head and the shell's
# arithmetic: the guard runs with the serving unit's PATH (NixOS gives a
# service coreutils, findutils, grep, sed and systemd; no awk). meminfo:
# another file than /proc/meminfo, for a test.

# MemAvailable in kB (empty: unreadable).
mem_kb() {
  sed -n 's/^MemAvailable:[[:space:]]*\([0-9][0-9]*\) kB.*/\1/p' \
    "${meminfo:-/proc/meminfo}" 2>/dev/null | head -n 1
}
# KB in GB (1e9 bytes) with one decimal, cut (not rounded: a figure below the
# floor never reads as the floor), as remedy says it.
kb_gb() {
  _t=$(($1 * 1024 / 100000000))
  printf '%d.%d' $((_t / 10)) $((_t % 10))
}
# MIN_GB (a decimal, at most three places kept) as kB, rounded up: the floor.
floor_kb() {
  _fi=${1%%.*} _ff=
  case $1 in *.*) _ff=${1#*.} ;; esac
  _ff=$(printf '%.3s' "${_ff}000")
  # 1xxx - 1000: a fraction with leading zeros is no octal number
  echo $(((((${_fi:-0} * 1000 + 1$_ff - 1000) * 1000000) + 1023) / 1024))
}
# KB FLOOR_KB: MemAvailable KB is below the floor: no start.
below_floor() { [ "$1" -lt "$2" ]; }
# What to do about it, said by the gate and the guard alike.
# (remedy.core.readings.memory.LEAK_ADVICE: the same words)
FLOOR_REMEDY="reboot reclaims the tenstorrent pinned-page leak; a module \
reload does not"
