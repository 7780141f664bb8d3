# For a script with UNIT and later sections that resolve paths (GENERATIONS, NIX_VERSION,
# the settings' sysctl.d files): their paths resolved with the unit's files, in UNIT's
# one readlink. Put it before UNIT. Only a cache: a path it misses is resolved as before.
_rpx='/run/current-system /run/booted-system /nix/var/nix/profiles/system
/nix/var/nix/profiles/system-*-link /nix/var/nix/profiles/system/etc/sysctl.d/*.conf
/run/current-system/etc/sysctl.d/*.conf /etc/nix/nix.conf'
# the nix that `command -v` finds, without its subshell
set -f; IFS=:
for _d in $PATH; do
  case $_d in /*) ;; *) continue ;; esac
  [ -f "$_d/nix" ] && [ -x "$_d/nix" ] && { _rpx="$_rpx $_d/nix"; break; }
done
unset IFS; set +f
