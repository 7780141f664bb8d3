# On the builder: a scratch directory, the bundle from stdin, a clone of it;
# prints the clone's path. A failure leaves nothing behind. $1: the serving
# host's tag.
d=$(mktemp -d "/tmp/remedy-bump.$1.XXXXXXXX") || exit 1
if cat > "$d/in.bundle" && git -c advice.detachedHead=false clone -q \
    "$d/in.bundle" "$d/flake"; then
  rm -f "$d/in.bundle"
  echo "$d/flake"
else
  rm -rf -- "$d"
  exit 1
fi
