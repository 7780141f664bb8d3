# The built system's serving unit, drop-ins, kernel parameters and start
# scripts (REMEDY_TOPLEVEL): what the proof reads of a toplevel.
t=$REMEDY_TOPLEVEL
u=$REMEDY_UNIT
echo "@@remedy:section built.unit"
catfile "$t/etc/systemd/system/$u"
echo "@@remedy:section built.dropins"
for f in "$t/etc/systemd/system/$u.d/"*.conf; do [ -f "$f" ] && catfile "$f"; done
echo "@@remedy:section built.kernel"
[ -r "$t/kernel-params" ] && sed -e '$a\' "$t/kernel-params"
echo "@@remedy:section built.scripts"
f=$t/etc/systemd/system/$u
for g in "$f" "$f.d/"*.conf; do [ -f "$g" ] && exec_paths "$g"; done | sort -u | catscripts
