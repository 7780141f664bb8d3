# Release free hugepages above the targets (items SIZE_KB:PAGES), runtime only:
# the next boot's kernel parameters give their own count. Only free pages go;
# the kernel keeps the pages in use.
shift "$nargs"
label() {
  if [ "$1" -ge 1048576 ] && [ $(($1 % 1048576)) -eq 0 ]; then
    echo "$(($1 / 1048576))G"
  else
    echo "$(($1 / 1024))M"
  fi
}
releases=
for p in "$@"; do
  kb=${p%%:*} want=${p#*:}
  d=/sys/kernel/mm/hugepages/hugepages-${kb}kB
  [ -r "$d/nr_hugepages" ] || continue
  nr=$(cat "$d/nr_hugepages") free=$(cat "$d/free_hugepages")
  [ "$nr" -gt "$want" ] || continue
  new=$((nr - free))
  [ "$new" -ge "$want" ] || new=$want
  [ "$new" -lt "$nr" ] && releases="$releases $kb:$nr:$new"
done
[ -n "$releases" ] || noop "no free hugepages above the target"
said=
for r in $releases; do
  kb=${r%%:*} r=${r#*:}
  said="${said:+$said, }hugepages $(label "$kb"): ${r%:*} -> ${r#*:}"
done
would "$said"
for r in $releases; do
  kb=${r%%:*} new=${r##*:}
  d=/sys/kernel/mm/hugepages/hugepages-${kb}kB
  echo "$new" >"$d/nr_hugepages" || give_up "could not write $d/nr_hugepages"
  log blue "hugepages $(label "$kb"): $(echo "$r" | cut -d: -f2) -> $(cat \
"$d/nr_hugepages")"
done
done_ "$said"
