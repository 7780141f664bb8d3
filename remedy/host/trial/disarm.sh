# Disarm a trial that has not booted (a reboot called off after arm): the
# one-shot entry goes, and LoaderEntryDefault is again what it was before arm
# pinned it (arm kept it in $trial_record), so the next boot is what it was.
# Nothing to do when no one-shot is armed; on a trial boot, bless or fall back.
# @include boot_loader.sh
boot_loader
[ "$loader" = systemd-boot ] || give_up "$(no_trial_why)"
selected=$(efivar LoaderEntrySelected)
pinned=$(efivar LoaderEntryDefault)
oneshot=$(efivar LoaderEntryOneShot)
say previous "$pinned"
say trial_entry "$oneshot"
if [ -n "$pinned" ] && [ -n "$selected" ] && [ "$selected" != "$pinned" ]; then
  give_up "on trial: $selected booted, the default is $pinned; bless it or \
fall back instead"
fi
[ -n "$oneshot" ] || noop "no trial is armed${pinned:+ (LoaderEntryDefault \
$pinned is left as it is)}"
before=''
[ -f "$trial_record" ] && before=$(head -n 1 -- "$trial_record")
case $before in
'') restore='' why="arm left no record of the default before it: the pin \
${pinned:-(none)} stays" ;;
none) restore=remove why="LoaderEntryDefault is removed, as before arm" ;;
*) restore=$before why="LoaderEntryDefault is $before again, as before arm" ;;
esac
would "disarm: remove the one-shot entry $oneshot; $why"
out=$(bootctl set-oneshot "" 2>&1) ||
  give_up "bootctl set-oneshot '': $(why_of "$out" $?)"
case $restore in
'') ;;
remove)
  out=$(bootctl set-default "" 2>&1) ||
    give_up "bootctl set-default '': $(why_of "$out" $?)"
  ;;
*)
  out=$(bootctl set-default "$restore" 2>&1) ||
    give_up "bootctl set-default $restore: $(why_of "$out" $?)"
  ;;
esac
got=$(efivar LoaderEntryOneShot)
[ -z "$got" ] || give_up "bootctl succeeded, but LoaderEntryOneShot reads \
'$got'"
rm -f -- "$trial_record"
done_ "disarmed: $oneshot no longer boots once; $why"
