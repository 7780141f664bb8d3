# JSON on stdin, as one line per value: PATH, a tab, TYPE, a tab, VALUE. PATH
# joins object keys and array indexes with "."; TYPE is string, number, true,
# false, null, or object/array (VALUE: how many members). A string's escapes are
# read (\uXXXX of ASCII only; others stay as written), and a newline or a tab in
# it is a blank. JSON that does not parse prints "@@error WHERE" and exits 1. No
# JSON reader runs on a NixOS host by default (no python3, no jq): the verify
# step reads a probe's answer so.
BEGIN { RS = "\001"; hex = "0123456789abcdef" }
{ text = text $0 }
function fail(what) { printf "@@error %s at %d\n", what, pos; bad = 1; exit 1 }
function ws() {
  while (pos <= n && index(" \t\r\n", substr(text, pos, 1))) pos++
}
function put(path, type, value) {
  gsub(/[\t\n]/, " ", value)
  printf "%s\t%s\t%s\n", path, type, value
}
function str(   out, c, d, code) {
  pos++  # the opening quote
  out = ""
  while (pos <= n) {
    c = substr(text, pos, 1)
    if (c == "\"") { pos++; return out }
    if (c == "\\") {
      d = substr(text, pos + 1, 1)
      if (d == "n") out = out "\n"
      else if (d == "t") out = out "\t"
      else if (d == "r" || d == "b" || d == "f") out = out " "
      else if (d == "u") {
        code = tolower(substr(text, pos + 2, 4))
        if (code ~ /^00[0-7][0-9a-f]$/) {
          out = out sprintf("%c", (index(hex, substr(code, 3, 1)) - 1) * 16 + \
            index(hex, substr(code, 4, 1)) - 1)
        } else out = out "\\u" code
        pos += 4
      } else out = out d
      pos += 2
      continue
    }
    out = out c
    pos++
  }
  fail("an unterminated string")
}
function value(path,   c, count, key, m) {
  ws()
  c = substr(text, pos, 1)
  if (c == "{") {
    pos++; count = 0; ws()
    if (substr(text, pos, 1) == "}") { pos++; put(path, "object", 0); return }
    while (1) {
      ws()
      if (substr(text, pos, 1) != "\"") fail("a key that is no string")
      key = str(); ws()
      if (substr(text, pos, 1) != ":") fail("no colon")
      pos++
      value(path == "" ? key : path "." key); count++; ws()
      c = substr(text, pos, 1); pos++
      if (c == "}") break
      if (c != ",") fail("no comma in an object")
    }
    put(path, "object", count); return
  }
  if (c == "[") {
    pos++; count = 0; ws()
    if (substr(text, pos, 1) == "]") { pos++; put(path, "array", 0); return }
    while (1) {
      value(path == "" ? count : path "." count); count++; ws()
      c = substr(text, pos, 1); pos++
      if (c == "]") break
      if (c != ",") fail("no comma in an array")
    }
    put(path, "array", count); return
  }
  if (c == "\"") { put(path, "string", str()); return }
  if (match(substr(text, pos), /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?/)) {
    put(path, "number", substr(text, pos, RLENGTH)); pos += RLENGTH; return
  }
  for (m = 1; m <= 3; m++) {
    key = m == 1 ? "true" : m == 2 ? "false" : "null"
    if (substr(text, pos, length(key)) == key) {
      put(path, key, "")
      pos += length(key)
      return
    }
  }
  fail("no JSON value")
}
END {
  if (bad) exit 1
  n = length(text); pos = 1
  value("")
  ws()
  if (pos <= n) fail("more after the value")
}
