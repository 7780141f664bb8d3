# system_lacks TOPLEVEL UNIT PROOFS: the settings the built system TOPLEVEL
# lacks, "; " between (nothing: it holds every one). PROOFS: one a line,
# KIND<TAB>LABEL <TAB>VALUE (remedy.core.config.desired.proof_items): the start
# script's parser, a variable its start chain sets, a hugepage pool of its
# kernel parameters, flags that must be absent, and a data setting's variable,
# property, sysctl or flag, and the memory guard (an ExecCondition= line).
# The start script is the one UNIT's ExecStart leads
# to (through a `script =` wrapper). A list-valued property (plist: one
# NAME=VALUE line per item, EnvironmentFile=...) must hold the wanted line and
# keep every NAME= line the running system's unit has (the serving module's own
# EnvironmentFile=-/etc/tenstorrent-serving/env): NixOS merges a mkForce'd list
# by replacing every other definition. A pown line before it names an item
# remedy's own file added before (its earlier value): the new system need not
# keep that one, remedy's file replaces it.
system_lacks() {
  _top=$1 _lacks='' _own=''
  _unit_file=$_top/etc/systemd/system/$2
  _was=/run/current-system/etc/systemd/system/$2
  _exec=$(exec_path "$_unit_file" "$_unit_file.d"/*.conf)
  _script=$(flags_script "$_exec")
  while IFS='	' read -r _kind _label _value; do
    [ -n "$_kind" ] || continue
    case $_kind in
    parser) grep -q -- "--tool-call-parser $_value" "$_script" 2>/dev/null ;;
    env) grep -Fqsw -- "$_value" "$_script" "$_exec" "$_unit_file" \
        "$_unit_file.d"/*.conf ;;
    pages) grep -Eq "(^| )hugepagesz=${_value%%=*} hugepages=${_value#*=}( \
|\$)" \
        "$_top/kernel-params" 2>/dev/null ;;
    absent) ! grep -Eq -- "$_value" "$_script" 2>/dev/null ;;
    denv) grep -Fqs -- "$_value" "$_unit_file" "$_unit_file.d"/*.conf ;;
    prop) grep -Fqsx -- "$_value" "$_unit_file" "$_unit_file.d"/*.conf ;;
    pown) _own="$_own$_value
" ;;
    plist)
      _dropped=$(list_dropped "${_value%%=*}" "$_was" "$_unit_file" "$_own")
      [ -z "$_dropped" ] || _label="$_label (it drops $_dropped)"
      [ -z "$_dropped" ] &&
        grep -Fqsx -- "$_value" "$_unit_file" "$_unit_file.d"/*.conf ;;
    sysctl)
      cat "$_top"/etc/sysctl.d/*.conf 2>/dev/null | awk -v k="${_value%%=*}" \
          -v v="${_value#*=}" '
        { l = $0; sub(/^[ \t]*-?/, "", l); i = index(l, "=")
          if (!i) next
          a = substr(l, 1, i - 1); b = substr(l, i + 1)
          gsub(/^[ \t]+|[ \t]+$/, "", a); gsub(/^[ \t]+|[ \t]+$/, "", b)
          if (a == k && b == v) f = 1 }
        END { exit !f }' ;;
    flag) grep -Fqs -- "$_value" "$_script" ;;
    # the memory guard: an ExecCondition= line that runs it with the threshold
    guard) grep -s '^[[:space:]]*ExecCondition=' "$_unit_file" \
        "$_unit_file.d"/*.conf | grep -Fq -- "$_value" ;;
    *) false ;;
    esac || _lacks="${_lacks:+$_lacks; }$_label"
  done <<PROOFS
$3
PROOFS
  printf '%s' "$_lacks"
}

# list_dropped NAME OLD NEW [OWN]: the NAME=VALUE lines of unit OLD (and its
# .d/*.conf) that unit NEW (and its .d/*.conf) lacks, ", " between (an empty
# NAME= reset is no item), but the lines of OWN (remedy's earlier items).
list_dropped() {
  { cat "$3" "$3.d"/*.conf; printf '\n%s' "${4:-}"; echo '@@remedy-end'
    cat "$2" "$2.d"/*.conf; } 2>/dev/null | awk -v n="$1=" '
    !d { if ($0 == "@@remedy-end") d = 1; else have[$0] = 1; next }
    index($0, n) == 1 && $0 != n && !($0 in have) && !seen[$0]++ {
      out = out (out == "" ? "" : ", ") $0 }
    END { printf "%s", out }'
}
