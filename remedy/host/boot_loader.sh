# The boot loader as systemd's Boot Loader Interface shows it
# (https://systemd.io/BOOT_LOADER_INTERFACE/): EFI variables of the vendor
# 4a67b082-0a4c-41cf-b6c7-440b29bb8c4f in efivarfs, and the entries and
# loader.conf that nixpkgs' systemd-boot-builder writes under the ESP. Values:
# esp (default /boot, NixOS's boot.loader.efi.efiSysMountPoint), efivars
# (default /sys/firmware/efi/efivars).
esp=${esp:-/boot}
efivars=${efivars:-/sys/firmware/efi/efivars}
loader_guid=4a67b082-0a4c-41cf-b6c7-440b29bb8c4f

# NAME: the variable's value (after 4 bytes of attributes, UTF-16LE up to its
# NUL; a character outside printable ASCII shows as ?); empty: unset.
efivar() {
  [ -f "$efivars/$1-$loader_guid" ] || return 0
  od -An -v -tu1 -j4 -- "$efivars/$1-$loader_guid" | awk '
    { for (i = 1; i <= NF; i++) b[n++] = $i }
    END { for (i = 0; i + 1 < n; i += 2) { c = b[i] + 256 * b[i + 1]
            if (c == 0) break
            if (c < 32 || c > 126) c = 63
            printf "%c", c } }'
}

# Sets loader (systemd-boot, GRUB, or what LoaderInfo names; unknown),
# loader_info (LoaderInfo) and loader_why (why it is not systemd-boot).
boot_loader() {
  loader_info=$(efivar LoaderInfo)
  loader_why=''
  _grub=''
  [ -f "$esp/grub/grub.cfg" ] || [ -f /boot/grub/grub.cfg ] && _grub=GRUB
  if [ ! -d "$efivars" ]; then
    loader=${_grub:-unknown}
    loader_why="not booted with UEFI (no $efivars)"
  elif [ -z "$loader_info" ]; then
    loader=${_grub:-unknown}
    loader_why="its boot loader sets no LoaderInfo: it does not implement \
systemd's Boot Loader Interface"
  else
    case $loader_info in
    systemd-boot\ *) loader=systemd-boot ;;
    *)
      loader=${loader_info%% *}
      loader_why="LoaderInfo says $loader_info, not systemd-boot"
      ;;
    esac
  fi
}
# Why a trial boot is refused on this loader (empty: it is systemd-boot).
no_trial_why() {
  [ "$loader" = systemd-boot ] && return 0
  printf 'a trial boot needs systemd-boot (its one-shot entry); '
  printf 'this host boots '
  if [ "$loader" = unknown ]; then printf 'with an unknown loader'
  else printf 'with %s' "$loader"; fi
  printf ' (%s): not supported' "$loader_why"
}

# loader.conf's default entry (its last "default" line, as systemd-boot
# reads it).
conf_default() {
  sed -n 's/^default[[:space:]]\{1,\}\([^[:space:]]\{1,\}\).*/\1/p' \
    "$esp/loader/loader.conf" 2>/dev/null | tail -n 1
}
# TOPLEVEL: the id of the entry whose "options init=TOPLEVEL/init" boots it (the
# newest generation's, if several do); empty: none.
entry_of() {
  for _f in "$esp"/loader/entries/*.conf; do
    [ -f "$_f" ] || continue
    _i=$(sed -n 's/^options[[:space:]].*init=\([^[:space:]]*\)\/init.*/\1/p' \
      "$_f" | head -n 1)
    [ -n "$_i" ] && [ "$(readlink -f -- "$_i")" = "$1" ] &&
      printf '%s\n' "${_f##*/}"
  done | sort -V | tail -n 1
}
has_entry() { [ -f "$esp/loader/entries/$1" ]; }

# What LoaderEntryDefault was before arm pinned it ("none": unset), for disarm
# (root's, 0600); bless and fall back end the trial and remove it.
trial_record=/var/lib/remedy/trial-default-before
# A fall back's record (root's, 0600): the failed entry and generation and the
# previous entry, for settle, which removes it once the profile is rolled back.
fell_back_record=/var/lib/remedy/trial-fell-back
