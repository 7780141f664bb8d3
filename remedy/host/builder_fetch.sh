# As the checkout's owner on the serving host: the bundle from stdin into the
# scratch clone $1, only as a fast-forward.
t=$(mktemp) || exit 1
cat > "$t" && git -C "$1" fetch -q "$t" HEAD && git -C "$1" merge -q --ff-only \
    FETCH_HEAD
rc=$?
rm -f "$t"
exit "$rc"
