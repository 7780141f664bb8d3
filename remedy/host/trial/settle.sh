# Settle a fall back (fallback.sh, which left $fell_back_record; or a trial
# never blessed whose host a power cycle brought back on the pinned entry,
# arm's $trial_record left): the host
# came back on the previous generation, but the failed one is still the system
# profile and loader.conf's default, held off only by the pin
# LoaderEntryDefault; "boot pending" and the next boot's proof read the
# profile. As upstream's `nixos-rebuild boot --rollback`: the profile back to
# the booted generation (nix-env --switch-generation: the failed generation
# stays in the profile's history, listed, not current), then the booted
# system's `switch-to-configuration boot` (loader.conf names it), then the pin
# goes (bootctl set-default ""). Each act is decided on what the host shows
# now, so a rerun after a kill finishes what is left; without the record it
# does nothing on any loader (every `remedy reboot` asks it first). Values:
# lock_wait_s, switch_bound_s (the switch's lock wait and bound).
# @include boot_loader.sh
system=/nix/var/nix/profiles/system
gen_of() {  # TOPLEVEL: the newest generation of the system profile that is it
  for _l in "$system"-*-link; do
    [ -L "$_l" ] || continue
    [ "$(readlink -f -- "$_l")" = "$1" ] || continue
    _n=${_l#"$system"-}
    printf '%s\n' "${_n%-link}"
  done | sort -n | tail -n 1
}
entry_system() {  # ENTRY: the toplevel its "options init=" boots
  _i=$(sed -n 's/^options[[:space:]].*init=\([^[:space:]]*\)\/init.*/\1/p' \
    "$esp/loader/entries/$1" 2>/dev/null | head -n 1)
  [ -z "$_i" ] || readlink -f -- "$_i"
}
mine() {  # FILE: a regular file of this user, mode 0600 (remedy's record)
  [ -f "$1" ] && [ ! -L "$1" ] &&
    [ "$(stat -c '%u %a' -- "$1" 2>/dev/null)" = "$(id -u) 600" ]
}
r=$fell_back_record
if [ -e "$r" ]; then
  boot_loader
  [ "$loader" = systemd-boot ] || give_up "$(no_trial_why)"
  mine "$r" || give_up "$r is not remedy's (a regular file of $(id -un), \
mode 0600): not settled"
  rec() { sed -n "s/^$1 //p" -- "$r" | head -n 1; }
  failed_entry=$(rec failed_entry) failed_system=$(rec failed_system)
  previous=$(rec previous_entry)
elif [ -e "$trial_record" ]; then
  # arm's record, and no bless, disarm or fall back since: the trial never
  # came back to remedy. Settled only where the host then booted the pinned
  # entry with the one-shot spent (a power cycle after a hung trial boot).
  r=$trial_record
  boot_loader
  [ "$loader" = systemd-boot ] || give_up "$(no_trial_why)"
  mine "$r" || give_up "$r is not remedy's (a regular file of $(id -un), \
mode 0600): not settled"
  selected=$(efivar LoaderEntrySelected)
  pinned=$(efivar LoaderEntryDefault)
  [ -z "$(efivar LoaderEntryOneShot)" ] || noop "a trial is armed and not \
booted yet: nothing to settle"
  if [ -z "$pinned" ] || [ "$selected" != "$pinned" ]; then
    noop "no fall back to settle: ${selected:-no entry} booted, the default \
is ${pinned:-not pinned}"
  fi
  [ "$(head -n 1 -- "$r")" = none ] || give_up "a trial's default before \
(in $r) was a pin of $(head -n 1 -- "$r"): a person's; not settled"
  failed_entry=$(conf_default) previous=$pinned
  if [ -z "$failed_entry" ] || [ "$failed_entry" = "$previous" ]; then
    noop "no fall back to settle: loader.conf's default is the booted \
$previous"
  fi
  failed_system=$(entry_system "$failed_entry")
  log yellow "the trial of $failed_entry was never blessed: the host booted \
the pinned $previous with the one-shot spent (a power cycle, or a reboot \
before the verify)"
else
  noop "no fall back to settle (no record in $r)"
fi
if [ -z "$failed_system" ] || [ -z "$previous" ]; then
  give_up "$r names no failed generation or previous entry: not settled"
fi
say failed_entry "$failed_entry"
say failed_system "$failed_system"
say previous "$previous"
booted=$(readlink -f /run/booted-system 2>/dev/null) || booted=''
selected=$(efivar LoaderEntrySelected)
pinned=$(efivar LoaderEntryDefault)
oneshot=$(efivar LoaderEntryOneShot)
say booted_entry "$selected"
failed_gen=$(gen_of "$failed_system")
say failed_generation "$failed_gen"
[ -n "$booted" ] || give_up "/run/booted-system is unset: which generation \
booted is unknown; not settled"
if [ "$booted" = "$failed_system" ] || [ "$selected" = "$failed_entry" ]; then
  give_up "the host runs the failed generation $failed_system \
(${selected:-no entry}) again, not the previous $previous: not settled"
fi
[ "$selected" = "$previous" ] || give_up "${selected:-no entry} booted, not \
the previous generation's $previous that the fall back rebooted into: not \
settled"
[ -z "$oneshot" ] || give_up "a one-shot entry $oneshot is armed: a trial \
is under way; not settled"
gen=$(gen_of "$booted")
say booted_generation "$gen"
[ -n "$gen" ] || give_up "the booted generation $booted is not in the \
history of $system: no generation to roll back to"
profile=$(readlink -f "$system" 2>/dev/null) || profile=''
[ "$profile" = "$booted" ] || [ "$profile" = "$failed_system" ] ||
  give_up "$system is $profile since the fall back, neither the failed \
generation nor the booted one: someone changed it; left as it is"
todo=''
[ "$profile" = "$booted" ] ||
  todo="the system profile back to generation $gen (from the failed \
${failed_gen:+generation $failed_gen, }$failed_system)"
conf=$(conf_default)
[ -n "$conf" ] && [ "$(entry_system "$conf")" = "$booted" ] ||
  todo="${todo:+$todo; }loader.conf's default to the booted generation \
(${conf:-none} now)"
[ "$pinned" != "$previous" ] ||
  todo="${todo:+$todo; }remove LoaderEntryDefault $previous"
kept="the failed generation ${failed_gen:-$failed_system} stays in the \
profile's history, not current"
if [ -z "$todo" ]; then
  rm -f -- "$r" "$trial_record"
  noop "settled already: generation $gen ($previous) is the profile and the \
boot default; $kept"
fi
would "settle the fall back from ${failed_entry:-$failed_system}: $todo"
if [ "$profile" != "$booted" ]; then
  out=$(nix-env -p "$system" --switch-generation "$gen" 2>&1 </dev/null) ||
    give_up "nix-env --switch-generation $gen: $(why_of "$out" $?)"
  got=$(readlink -f "$system")
  [ "$got" = "$booted" ] || give_up "nix-env --switch-generation $gen \
succeeded, but $system is $got"
  log yellow "rolled the system profile back to generation $gen ($booted)"
fi
conf=$(conf_default)
if [ -z "$conf" ] || [ "$(entry_system "$conf")" != "$booted" ]; then
  switch_to "$booted" boot "${lock_wait_s:-30}" "${switch_bound_s:-3600}"
  case $switch_outcome in
  done) ;;
  locked) give_up "switch-to-configuration boot of $booted did not run: \
$(lock_holders); run again once it is done" ;;
  *) give_up "switch-to-configuration boot of $booted: $(why_of \
"$switch_said" "$switch_exit")" ;;
  esac
  conf=$(conf_default)
  [ "$(entry_system "$conf")" = "$booted" ] || give_up \
    "switch-to-configuration boot of $booted succeeded, but loader.conf's \
default is ${conf:-none}"
  log yellow "loader.conf's default is $conf ($booted)"
fi
if [ "$(efivar LoaderEntryDefault)" = "$previous" ]; then
  out=$(bootctl set-default "" 2>&1) ||
    give_up "bootctl set-default '': $(why_of "$out" $?)"
  got=$(efivar LoaderEntryDefault)
  [ -z "$got" ] || give_up "bootctl succeeded, but LoaderEntryDefault reads \
'$got'"
fi
rm -f -- "$r" "$trial_record"
done_ "settled: rolled back from the failed ${failed_entry:-$failed_system}; \
generation $gen ($conf) is the system profile and loader.conf's default, no \
LoaderEntryDefault; $kept"
