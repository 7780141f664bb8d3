# Arm a trial boot: the next boot starts the new generation once (systemd-boot's
# one-shot entry, as `bootctl set-oneshot` sets it) and the boot default stays
# on the running generation's entry (LoaderEntryDefault, which systemd-boot
# prefers to loader.conf's default, where nixos-rebuild boot put the new one).
# A boot that never comes back is power-cycled into that default. Value: trial
# (the entry to try; default: loader.conf's default, NixOS's next boot).
# @include boot_loader.sh
boot_loader
[ "$loader" = systemd-boot ] || give_up "$(no_trial_why)"
# on a trial now (the entry that booted is not the pinned default), arming
# again would pin the untried one: bless it or fall back first
selected=$(efivar LoaderEntrySelected)
pinned=$(efivar LoaderEntryDefault)
if [ -n "$pinned" ] && [ -n "$selected" ] && [ "$selected" != "$pinned" ]; then
  give_up "on trial: $selected booted, the default is $pinned; bless it or \
fall back first"
fi
running=$(readlink -f /run/current-system 2>/dev/null) || running=''
previous=$(entry_of "$running")
[ -n "$previous" ] || give_up "the running generation ${running:-unknown} has \
no boot entry in $esp/loader/entries: no default to fall back to"
trial=${trial:-$(conf_default)}
[ -n "$trial" ] || give_up "no entry to try: $esp/loader/loader.conf names no \
default"
has_entry "$trial" || give_up "the entry to try, $trial, is not in \
$esp/loader/entries"
for e in "$previous" "$trial"; do
  case $e in
  *+*) give_up "the entry $e has a boot counter (systemd's Automatic Boot \
Assessment): its id is not its file name, and remedy's trial boot does not \
support it" ;;
  esac
done
say previous "$previous"
say trial_entry "$trial"
[ "$trial" != "$previous" ] || noop "the next boot is the running generation \
($previous): nothing to try"
if [ "$(efivar LoaderEntryOneShot)" = "$trial" ] &&
  [ "$(efivar LoaderEntryDefault)" = "$previous" ]; then
  noop "armed already: the next boot tries $trial once, the default is \
$previous"
fi
would "arm a trial boot: $trial once, the default stays $previous"
# what the default was, for disarm (a reboot called off)
mkdir -p -- "${trial_record%/*}" ||
  give_up "cannot make ${trial_record%/*} for the default before the trial"
out=$(sh -c "$(ATOMIC_WRITE)" sh "$trial_record" 0600 - \
  printf '%s\n' "${pinned:-none}" 2>&1) ||
  give_up "cannot keep the default before the trial: $(why_of "$out" $?)"
# the default first: if the one-shot cannot be set, the next boot is the
# running generation's, never an untried one for good
out=$(bootctl set-default "$previous" 2>&1) ||
  give_up "bootctl set-default $previous: $(why_of "$out" $?)"
out=$(bootctl set-oneshot "$trial" 2>&1) ||
  give_up "bootctl set-oneshot $trial: $(why_of "$out" $?)"
got_default=$(efivar LoaderEntryDefault)
got_oneshot=$(efivar LoaderEntryOneShot)
if [ "$got_default" != "$previous" ] || [ "$got_oneshot" != "$trial" ]; then
  give_up "bootctl succeeded, but LoaderEntryDefault reads \
'$got_default' and LoaderEntryOneShot '$got_oneshot'"
fi
done_ "armed: the next boot tries $trial once; the default stays $previous"
