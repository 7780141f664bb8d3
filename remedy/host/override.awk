# The fallback's start script: the durable one (the file) with its one
# --tool-call-parser given the value parser, and the variables of exports
# (KEY=VALUE lines) exported after the shebang. Exits 3, writing nothing useful,
# unless the flag occurs exactly once.
{
  lines[NR] = $0
  n += gsub(/--tool-call-parser[ =][A-Za-z0-9_]+/, "&", $0)
}
END {
  if (n != 1) {
    printf "%s: --tool-call-parser appears %d times, expected exactly once\n",
      FILENAME, n > "/dev/stderr"
    exit 3
  }
  start = 1
  if (lines[1] ~ /^#!/) { print lines[1]; start = 2 }
  print "# remedy: runtime override (tt-stack#49); /run is wiped at reboot"
  ne = split(exports, ex, "\n")
  for (i = 1; i <= ne; i++) if (ex[i] != "") print "export " ex[i]
  flag = "--tool-call-parser[ =][A-Za-z0-9_]+"
  for (i = start; i <= NR; i++) {
    line = lines[i]
    sub(flag, "--tool-call-parser " parser, line)
    print line
  }
}
