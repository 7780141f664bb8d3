# When `systemctl show UNIT` fails with "Invalid argument": systemd loaded a
# drop-in whose name is not UTF-8, and D-Bus, which is UTF-8, cannot carry the
# unit's DropInPaths, so every `systemctl show` of it fails (issue 43 G1). The
# other properties are read one by one with busctl, printed as `systemctl show`
# prints them, and the drop-ins are listed from the directories systemd reads
# them from (unit_bus_dropins); the name that is not UTF-8 is named by the
# report (remedy.core.config.volatile.unshowable).
unit_bus() {  # UNIT
  _bo=$(busctl call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
    org.freedesktop.systemd1.Manager GetUnit s "$1" 2>&1) || {
    printf '%s\n' "$_bo"
    return 1
  }
  _bo=${_bo#o \"}
  _bo=${_bo%\"}
  {
    busctl get-property org.freedesktop.systemd1 "$_bo" \
      org.freedesktop.systemd1.Unit Id LoadState ActiveState SubState \
      FragmentPath ActiveEnterTimestampMonotonic &&
      busctl get-property org.freedesktop.systemd1 "$_bo" \
        org.freedesktop.systemd1.Service MainPID NRestarts ExecStart Environment
  } 2>&1 | awk '
    # busctl: a type, then its value; a string in double quotes with C escapes
    function words(line,   n, i, c, w, q) {
      n = 0; w = ""; q = 0
      for (i = 1; i <= length(line); i++) {
        c = substr(line, i, 1)
        if (q) {
          if (c == "\\") { i++; c = substr(line, i, 1); if (c == "n") c = "\n"
            else if (c == "t") c = "\t"; w = w c; continue }
          if (c == "\"") { q = 0; continue }
          w = w c
        } else if (c == "\"") { q = 1; quoted = 1 }
        else if (c == " ") { if (w != "" || quoted) W[++n] = w; w = ""; quoted = 0 }
        else w = w c
      }
      if (w != "" || quoted) W[++n] = w
      quoted = 0
      return n
    }
    function shq(s) {
      if (s ~ /^[A-Za-z0-9_=\/.:,+@%-]*$/) return s
      gsub(/\047/, "\047\\\047\047", s)
      return "\047" s "\047"
    }
    BEGIN {
      split("Id LoadState ActiveState SubState FragmentPath " \
        "ActiveEnterTimestampMonotonic MainPID NRestarts ExecStart Environment", K, " ")
      split("(null) exited killed dumped trapped stopped continued", CODE, " ")
    }
    {
      k = K[++nr]; n = words($0)
      if (k == "") next
      if (k == "ExecStart") {
        out = ""
        j = 3
        for (e = 1; e <= W[2] + 0; e++) {
          path = W[j++]; argc = W[j++]; argv = ""
          for (a = 1; a <= argc; a++) argv = argv (a > 1 ? " " : "") W[j++]
          ign = W[j++]; j += 4; pid = W[j++]; code = W[j++]; st = W[j++]
          out = out (e > 1 ? " " : "") "{ path=" path " ; argv[]=" argv \
            " ; ignore_errors=" (ign == "true" ? "yes" : "no") \
            " ; pid=" pid " ; code=" (CODE[code + 1] != "" ? CODE[code + 1] : code) \
            " ; status=" st " }"
        }
        print "ExecStart=" out
      } else if (k == "Environment") {
        out = ""
        for (e = 3; e <= n; e++) out = out (e > 3 ? " " : "") shq(W[e])
        print "Environment=" out
      } else print k "=" W[2]
    }'
}
# The unit's drop-ins, one a line, in the order systemd applies them (by file
# name; of one name, the first directory's): what DropInPaths would say.
unit_bus_dropins() {  # UNIT
  _bd=''
  for _d in /etc/systemd/system.control /run/systemd/system.control \
    /run/systemd/transient /etc/systemd/system /run/systemd/system \
    /usr/local/lib/systemd/system /usr/lib/systemd/system; do
    for _f in "$_d/$1.d/"*.conf; do
      [ -f "$_f" ] || continue
      _bn=${_f##*/}
      case $_bd in *"$_tab$_bn$_nl"*) continue ;; esac
      _bd="$_bd$_f$_tab$_bn$_nl"
    done
  done
  printf '%s' "$_bd" | LC_ALL=C sort -t "$_tab" -k 2,2 | LC_ALL=C sed "s/$_tab.*//"
}
