# The trial boot's reading: which boot loader, which entry booted, the boot
# default, the one-shot entry, and whether a trial is armed or under way. It
# changes nothing; its answer is "say" lines and a noop.
# @include boot_loader.sh
boot_loader
say loader "$loader"
say loader_info "$loader_info"
[ -z "$loader_why" ] || say loader_why "$loader_why"
running=$(readlink -f /run/current-system 2>/dev/null) || running=''
booted=$(readlink -f /run/booted-system 2>/dev/null) || booted=''
say running_system "$running"
say booted_system "$booted"
say running_entry "$(entry_of "$running")"
conf=$(conf_default)
say conf_default "$conf"
if [ "$loader" != systemd-boot ]; then
  say trial_state unsupported
  noop "$(no_trial_why)"
fi
selected=$(efivar LoaderEntrySelected)
default=$(efivar LoaderEntryDefault)
oneshot=$(efivar LoaderEntryOneShot)
say booted_entry "$selected"
say default_entry "$default"
say oneshot_entry "$oneshot"
# the next boot, in systemd-boot's order: the one-shot entry,
# LoaderEntryDefault, loader.conf's default (an id that names no entry is
# passed over)
next=''
for e in "$oneshot" "$default" "$conf"; do
  [ -n "$e" ] && has_entry "$e" && { next=$e; break; }
done
say next_entry "$next"
if [ -n "$oneshot" ] && [ -n "$default" ] && [ "$oneshot" != "$default" ]; then
  say trial_state armed
  noop "a trial is armed: the next boot tries $oneshot once, the default is \
$default"
elif [ -n "$default" ] && [ -n "$selected" ] &&
  [ "$selected" != "$default" ]; then
  say trial_state on-trial
  noop "on trial: $selected booted, the default is $default (bless it or fall \
back)"
fi
say trial_state none
noop "no trial: ${selected:-no entry} booted, the next boot is ${next:-unknown}"
