# In a scratch clone of the checkout (as its owner), bump the input with the
# host's Nix command, or lock it to bump_to (pinned_rev), and commit flake.lock
# there (lock_message: {new} stands for the new rev). The checkout itself moves
# only once the build proves the fix. A fetch that fails, a rev off the branch,
# an untrusted signature (allowed_signers: trusted_signers' text) or a history
# without required_fix_rev gives up the durable path: the approved bump decides
# (approved_bump.sh). With a builder, the scratch clone goes there and the bump
# runs with the builder's own Nix. update=no: only the scratch clone.
need journal run_id flake_dir flake_input flake_host update pinned_rev \
    allowed_signers \
  trusted_signers required_fix_rev lock_message
# @include-text APPROVED_BUMP approved_bump.sh
# @include-text RECEIVE builder_receive.sh
owner_of "$flake_dir"
# the checkout must be as the plan found it: remedy commits only its own files,
# and never mixes a bump with a person's changes or a pending generation
dirty=$(as_owner git -C "$flake_dir" status --porcelain --untracked-files=no \
    2>&1 </dev/null |
  head -n 3 | tr '\n' ';')
[ -z "$dirty" ] ||
  give_up "$flake_dir has uncommitted changes ($dirty); commit or stash them \
first, remedy only commits its own files"
profile=$(readlink -f /nix/var/nix/profiles/system) current=$(readlink -f \
    /run/current-system)
[ "$profile" = "$current" ] ||
  give_up "the system profile ($profile) differs from /run/current-system \
($current): reconcile them by hand first"
would "clone $flake_dir into a scratch directory and bump $flake_input there"
# a killed run's hung build
systemctl stop --no-block 'remedy-nix-*.scope' >/dev/null 2>&1
as_owner sh -c "$(SCRATCH_REMOVED)" sh 'remedy-bump.*' "$owner" </dev/null \
    >/dev/null 2>&1
scratch=$(as_owner mktemp -d /tmp/remedy-bump.XXXXXXXX 2>&1 </dev/null) ||
  give_up "cannot make a scratch directory as $owner: $(why_of "$scratch")"
jset "scratch=$scratch" || give_up "cannot write the run journal $journal"
out=$(as_owner git clone -q "$flake_dir" "$scratch" 2>&1 </dev/null) ||
  give_up "cannot clone $flake_dir into $scratch: $(why_of "$out")"
at() { if [ -n "${builder_name:-}" ]; then on_builder "$@"; else as_owner \
    "$@"; fi; }
there=$scratch at_=
if [ -n "${builder_name:-}" ]; then
  at_=" (on the builder $(builder_label))"
  said=$(on_builder nix --version 2>&1 </dev/null)
  form=$(update_form "$said")
  [ -n "$form" ] ||
    give_up "the builder $(builder_label) cannot be reached or has no Nix: \
$(why_of "$said")"
  log blue "the builder $(builder_label) answers: $(printf '%s\n' "$said" | \
grep '^nix (' | head -n 1)"
  # remedy clones, bumps, commits and bundles there with git, and Nix runs git
  # for a flake in a git checkout (before 2.20) and to fetch a git input; a
  # stock NixOS has none (nixos/modules/config/system-path.nix)
  has=$(on_builder sh -c 'command -v git || echo remedy-lacks-git' </dev/null \
      2>&1)
  case $has in *remedy-lacks-git)
    give_up "the builder $(builder_label) has no git, which remedy runs there \
(the clone, the bump, its commit): a stock NixOS has none; add \
programs.git.enable = true; (or pkgs.git in environment.systemPackages) to its \
configuration and switch it" ;;
  esac
  on_builder pkill -u "$builder_user" -f "/tmp/remedy-bump.$builder_tag." \
      </dev/null >/dev/null 2>&1
  on_builder sh -c "$(SCRATCH_REMOVED)" sh "$(builder_clones)" "$builder_user" \
      </dev/null >/dev/null 2>&1
  there=$(as_owner git -C "$scratch" bundle create - HEAD 2>/dev/null |
    on_builder sh -c "$(RECEIVE)" sh "$builder_tag" 2>&1 | tail -n 1)
  case $there in
  /tmp/*) ;;
  *) give_up "the scratch clone on the builder $(builder_label) failed: \
$(why_of "$there")" ;;
  esac
  jset "builder=$builder_name" "builder_scratch=$there" ||
    give_up "cannot write the run journal $journal"
else
  form=$(update_form "$(nix --version 2>/dev/null)")
fi
if [ "$update" != yes ]; then
  note "$flake_input not bumped: the next boot already has what it gives"
  done_ "made the scratch clone"
fi
if [ "$form" = new ]; then
  set -- nix --extra-experimental-features 'nix-command flakes' flake update \
      "$flake_input" \
    --flake "$there"
else
  set -- nix --extra-experimental-features 'nix-command flakes' flake lock \
      "$there" \
    --update-input "$flake_input"
fi
answer=$(at sh -c "$(APPROVED_BUMP)" sh "$there" "$flake_input" "$pinned_rev" \
  "$allowed_signers" "$trusted_signers" "$required_fix_rev" "$@" 2>&1 \
      </dev/null)
printf '%s\n' "$answer" | sed -n 's/^signature /@@remedy say signature /p'
printf '%s\n' "$answer" | sed -n 's/^said /@@remedy log green /p'
new_rev=$(printf '%s\n' "$answer" | sed -n 's/^new-rev //p' | tail -n 1)
new_url=$(printf '%s\n' "$answer" | sed -n 's/^new-url //p' | tail -n 1)
refused=$(printf '%s\n' "$answer" | sed -n 's/^refused //p' | tail -n 1)
[ -z "$new_rev" ] || say new_rev "$new_rev"
[ -n "$refused" ] || [ -n "$new_rev" ] ||
  refused="the bump did not answer: $(why_of "$answer")"
[ -z "$refused" ] || give_up "$refused$at_"
short=$(printf '%.12s' "$new_rev")
if printf '%s\n' "$answer" | grep -qx unchanged; then
  note "$flake_input is already at $short"
  jset "new_rev=$new_rev" "new_url=$new_url" || give_up "cannot write the run \
journal $journal"
  done_ "$flake_input is already at $short"
fi
message=$(printf '%s' "$lock_message" | sed "s/{new}/$short/")
out=$(at git -C "$there" -c user.name=remedy -c \
    "user.email=remedy@$flake_host" \
  commit -q -m "$message" -- flake.lock 2>&1 </dev/null) ||
  give_up "cannot commit flake.lock in the scratch clone${at_:+ on the builder \
$(builder_label)}: $(why_of "$out")"
head=$(at git -C "$there" rev-parse HEAD 2>/dev/null </dev/null)
jset "new_rev=$new_rev" "new_url=$new_url" commits=1 "scratch_head=$head" ||
  give_up "cannot write the run journal $journal"
done_ "bumped $flake_input to $short in the scratch clone"
