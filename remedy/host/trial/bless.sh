# Bless a trial boot: the entry that booted becomes the boot default, only after
# a passing verify (value verify=passed, the caller's verdict). Where
# loader.conf already names it (NixOS's own default after nixos-rebuild boot),
# the pin LoaderEntryDefault is removed, so the host is as NixOS leaves it;
# otherwise the pin names it.
# @include boot_loader.sh
[ "${verify:-}" = passed ] ||
  give_up "no passing verify (verify=${verify:-none}): the trial's entry \
does not become the default"
boot_loader
[ "$loader" = systemd-boot ] || give_up "$(no_trial_why)"
booted=$(efivar LoaderEntrySelected)
[ -n "$booted" ] || give_up "LoaderEntrySelected is unset: which entry booted \
is unknown"
default=$(efivar LoaderEntryDefault)
conf=$(conf_default)
say booted_entry "$booted"
say previous "$default"
if [ "$conf" = "$booted" ]; then
  [ -n "$default" ] || noop "$booted is the default already (loader.conf's, \
no LoaderEntryDefault)"
  would "make $booted the default: remove LoaderEntryDefault ($default), \
loader.conf names $booted"
  out=$(bootctl set-default "" 2>&1) ||
    give_up "bootctl set-default '': $(why_of "$out" $?)"
  got=$(efivar LoaderEntryDefault)
  [ -z "$got" ] || give_up "bootctl succeeded, but LoaderEntryDefault reads \
'$got'"
else
  [ "$default" != "$booted" ] || noop "$booted is the default already \
(LoaderEntryDefault)"
  would "make $booted the default: LoaderEntryDefault (loader.conf names \
${conf:-none})"
  out=$(bootctl set-default "$booted" 2>&1) ||
    give_up "bootctl set-default $booted: $(why_of "$out" $?)"
  got=$(efivar LoaderEntryDefault)
  [ "$got" = "$booted" ] || give_up "bootctl succeeded, but LoaderEntryDefault \
reads '$got'"
fi
rm -f -- "$trial_record"
done_ "blessed: $booted is the boot default (before: ${default:-no pin})"
