# Write remedy's managed Nix file (managed_file, relative to the checkout,
# imported by the host's configuration) with the host data's values (text) in
# the scratch clone, as the checkout's owner (or on the builder, as its user),
# and commit it there with message. The checkout moves only with the proven
# commits.
need journal run_id flake_dir managed_file text message flake_host
owner_of "$flake_dir"
at() { if [ -n "${builder_name:-}" ]; then on_builder "$@"; else as_owner \
    "$@"; fi; }
if [ -n "${builder_name:-}" ]; then
  scratch=$(jget builder_scratch) there="the scratch clone on the builder \
$(builder_label)"
else
  scratch=$(jget scratch) there="the scratch clone"
fi
[ -n "$scratch" ] || give_up "no scratch clone to write the managed file in"
f=$scratch/$managed_file
now=$(at sh -c 'cat -- "$1" 2>/dev/null; echo .' sh "$f" </dev/null)
[ "$now" != "$text." ] || noop "$managed_file already holds the host data's \
values"
would "write $managed_file in $there and commit it"
out=$(at sh -c 'mkdir -p -- "$(dirname -- "$1")" && shift && exec "$@"' sh \
    "$f" \
  sh -c "$(ATOMIC_WRITE)" sh "$f" 0644 - printf %s "$text" 2>&1 </dev/null) ||
  give_up "cannot write $managed_file in $there: $(why_of "$out")"
out=$(at sh -c 'git -C "$1" add -- "$2" && shift 2 && "$@"' sh "$scratch" \
  "$managed_file" git -C "$scratch" -c user.name=remedy -c \
      "user.email=remedy@$flake_host" \
  commit -q -m "$message" -- "$managed_file" 2>&1 </dev/null) ||
  give_up "cannot commit $managed_file in $there: $(why_of "$out")"
head=$(at git -C "$scratch" rev-parse HEAD </dev/null)
commits=$(jget commits)
jset "commits=$((${commits:-0} + 1))" "scratch_head=$head" ||
  give_up "cannot write the run journal $journal"
done_ "wrote and committed $managed_file in $there"
