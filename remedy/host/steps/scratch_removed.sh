# Remove the scratch clone the run made, whatever happened before (the checkout
# has what was proven, or nothing), and any a killed run left: every run that
# makes one holds the host lock, so none of them is in use. With a builder, this
# host's clones there go too.
need journal run_id flake_dir
owner_of "$flake_dir"
if [ -n "${builder_name:-}" ] && [ -n "$(jget builder_scratch)" ]; then
  would "remove the scratch clones on the builder $builder_name"
  on_builder sh -c "$(SCRATCH_REMOVED)" sh "$(builder_clones)" "$builder_user" \
      ||
    note "could not remove the scratch clones on the builder $(builder_label)"
fi
mine=$(jget scratch)
found=$(as_owner find /tmp -maxdepth 1 -name 'remedy-bump.*' -user "$owner" \
    2>/dev/null)
[ -n "$found" ] || noop "no scratch clone"
would "remove the scratch clones of $owner under /tmp"
left=$(printf '%s\n' "$found" | grep -cvxF -- "${mine:-/}")
[ "$left" -eq 0 ] || note "removed $left scratch clone(s) that a killed run \
left"
as_owner sh -c "$(SCRATCH_REMOVED)" sh 'remedy-bump.*' "$owner" ||
  give_up "could not remove the scratch clones of $owner under /tmp"
done_ "removed the scratch clones of $owner under /tmp"
