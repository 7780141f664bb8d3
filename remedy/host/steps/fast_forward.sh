# Bring the proven commits (the lock naming tt-stack#49 and the revs, the
# managed file) from the scratch clone into the checkout, as its owner, by a
# fast-forward: HEAD and flake.lock move in one short step, or not at all if
# someone committed meanwhile. The new HEAD goes into the run journal, for a
# rollback.
need journal run_id flake_dir
owner_of "$flake_dir"
commits=$(jget commits)
[ "${commits:-0}" != 0 ] ||
  noop "no new commit in the scratch clone; nothing to bring into the checkout"
[ -n "$(jget toplevel)" ] || give_up "nothing was proven: the checkout is not \
moved"
scratch=$(jget scratch)
would "fast-forward $flake_dir to the proven commits"
if ! out=$(as_owner sh -c \
  'git -C "$1" fetch -q "$2" HEAD &&
    git -C "$1" merge -q --ff-only FETCH_HEAD' \
  sh "$flake_dir" "$scratch" 2>&1 </dev/null); then
  case $out in
  *"untracked working tree files"*)
    files=$(printf '%s\n' "$out" |
      awk '/^(\t|    )/ { sub(/^[ \t]+/, ""); printf "%s%s", s, $0; s = ", " }')
    hint="untracked files in the way: ${files:-?}; move them away" ;;
  *) hint="$(why_of "$out") (did someone commit meanwhile? run again)" ;;
  esac
  give_up "cannot fast-forward $flake_dir to the proven commits: $hint"
fi
head=$(as_owner git -C "$flake_dir" rev-parse HEAD </dev/null)
say lock_commit "$head"
jset "lock_commit=$head" || give_up "cannot write the run journal $journal"
done_ "fast-forwarded $flake_dir to $(printf "%.12s" "$head")"
