# Fails, naming a read-only file system, unless every directory given can be
# made and written: checked before a step writes the first of several files.
for d; do
  e=$d
  while [ ! -d "$e" ]; do e=${e%/*}; [ -n "$e" ] || e=/; done
  [ -w "$e" ] && continue
  m=$(findmnt -no TARGET,OPTIONS --target "$e" 2>/dev/null)
  case ",${m#* }," in
    *,ro,*) echo "error: cannot write $d: the file system at ${m%% *} is \
mounted read-only;" \
      "nothing was written; remount it read-write (a reboot does), then run \
again" >&2 ;;
    *) echo "error: cannot write $d: $e is not writable; nothing was written" \
        >&2 ;;
  esac
  exit 1
done
