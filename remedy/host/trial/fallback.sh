# Fall back from a trial boot that came back unhealthy but reachable: the boot
# default is still the previous generation's entry (arm pinned it), so clear any
# one-shot entry, record what failed (for settle), and reboot into the default.
# Value: reboot (yes, the default; no: leave the reboot to the caller).
# @include boot_loader.sh
boot_loader
[ "$loader" = systemd-boot ] || give_up "$(no_trial_why)"
booted=$(efivar LoaderEntrySelected)
default=$(efivar LoaderEntryDefault)
oneshot=$(efivar LoaderEntryOneShot)
say booted_entry "$booted"
say previous "$default"
[ -n "$default" ] || give_up "no LoaderEntryDefault: no previous entry is \
pinned (the next boot is loader.conf's $(conf_default)), so there is \
nothing to fall back to"
[ "$default" != "$booted" ] || noop "$booted booted and is the default: this \
boot is no trial, nothing to fall back from"
has_entry "$default" || give_up "the boot default $default is not in \
$esp/loader/entries"
would "fall back: reboot into $default (the default) from the trial \
${booted:-unknown}"
if [ -n "$oneshot" ]; then
  out=$(bootctl set-oneshot "" 2>&1) ||
    give_up "bootctl set-oneshot '': $(why_of "$out" $?)"
  log yellow "removed the one-shot entry $oneshot"
fi
got=$(efivar LoaderEntryOneShot)
[ -z "$got" ] || give_up "bootctl succeeded, but LoaderEntryOneShot reads \
'$got'"
# what settle rolls back once the host is on the default (the failed one is
# still the system profile and loader.conf's default)
failed_system=$(readlink -f /run/booted-system 2>/dev/null) || failed_system=''
mkdir -p -- "${fell_back_record%/*}" ||
  give_up "cannot make ${fell_back_record%/*} for the fall back's record"
out=$(sh -c "$(ATOMIC_WRITE)" sh "$fell_back_record" 0600 - printf \
  'failed_entry %s\nfailed_system %s\nprevious_entry %s\n' "$booted" \
  "$failed_system" "$default" 2>&1) ||
  give_up "cannot keep the fall back's record: $(why_of "$out" $?)"
rm -f -- "$trial_record"
if [ "${reboot:-yes}" = no ]; then
  done_ "the next boot is $default; reboot to fall back from ${booted:-unknown}"
fi
out=$(systemctl reboot 2>&1) || give_up "systemctl reboot: $(why_of "$out" $?)"
done_ "rebooting into $default (the default) from the trial ${booted:-unknown}"
