# The approved bump (remedy.core.programs.bump says what it takes and answers):
# in the scratch clone $1, input $2, bump_to $3, trusted_signers' text $4 and
# its file $5, required_fix_rev $6, then the host's command that updates one
# input.
# @include approved_bump_functions.sh
scratch=$1 name=$2 pinned=$3 signers_text=$4 signers_file=$5 fix=$6
shift 6  # the rest: the host's command that updates one input (PINNED empty)
owner=$(id -un)
# stdout only: Nix warns on stderr first when nix.conf has a setting it does not
# know
out=$(locked 2>/dev/null) \
  || refuse "cannot read $name in $scratch/flake.lock: $(why_of "$(locked \
      2>&1)")"
old_rev=$(printf '%s\n' "$out" | sed -n 1p) url=$(printf '%s\n' "$out" | sed \
    -n 2p)
ref=$(printf '%s\n' "$out" | sed -n 3p)
printf 'old-rev %s\n' "$old_rev"
if [ -n "$pinned" ]; then
  remote=$(git_remote "$url") || refuse "bump_to $pinned: cannot check that \
${url:-?} holds it"
  said=$(on_branch "$pinned" "$remote" "${ref:-HEAD}" 2>&1) || true
  case $(printf '%s\n' "$said" | tail -n 1) in
    "on-branch: yes") ;;
    "on-branch: no") refuse "bump_to $pinned is not on ${ref:-the default \
branch} of" \
      "$remote: refused (a rev a person approved is on the branch the input \
follows)" ;;
    *) refuse "bump_to $pinned: cannot check the branch of $remote: $(why_of \
"$said")" ;;
  esac
  pin=$(pin_url "$url" "$ref" "$pinned")
  if ! said=$(nix --extra-experimental-features 'nix-command flakes' flake \
      lock "$scratch" --override-input "$name" "$pin" 2>&1); then
    refuse "locking $name to bump_to $pinned failed: $(why_of "$said") (can \
the host" \
      "fetch ${url:-?} as $owner?)"
  fi
elif ! said=$("$@" 2>&1); then
  refuse "bumping $name failed: $(why_of "$said") (can the host fetch \
${url:-?} as $owner?)"
fi
out=$(locked 2>/dev/null) \
  || refuse "cannot read the bumped flake.lock: $(why_of "$(locked 2>&1)")"
new_rev=$(printf '%s\n' "$out" | sed -n 1p) new_url=$(printf '%s\n' "$out" |
  sed -n 2p)
new_ref=$(printf '%s\n' "$out" | sed -n 3p)
printf 'new-rev %s\nnew-url %s\n' "$new_rev" "$new_url"
short=$(printf '%.12s' "${new_rev:-?}")
repo=
case $new_url in git+file://*) repo=${new_url#git+file://}; repo=${repo%%\?*} \
    ;; esac
if [ "$new_rev" = "$old_rev" ]; then
  echo unchanged
elif [ -n "$signers_file" ]; then
  remote=$(git_remote "$new_url") || remote=$new_url
  # no repository holds a tarball input's rev: its branch is fetched, as --dry
  # does
  said=$(signature "$new_rev" "$remote" "$repo" "$signers_text" \
      "${new_ref:-${ref:-HEAD}}" \
    2>&1) || true
  line=$(printf '%s\n' "$said" | tail -n 1)
  case $line in
    "signature "*) ;;
    *) refuse "cannot check the signature of $name at $short: $(why_of \
"$said")" ;;
  esac
  printf '%s\n' "$line"
  IFS='|' read -r state key signer author <<EOF
${line#signature }
EOF
  [ -n "$state" ] || state=E
  if [ "$state" = G ]; then
    printf 'said %s at %s\n' "$name" "$(describe G "$key" "$signer" "$author" \
"$new_rev")"
  else
    refuse "$name at $(describe "$state" "$key" "$signer" "$author" \
"$new_rev"): not built" \
      "(trusted_signers $signers_file); a person signs it, or sets bump_to to \
a rev they" \
      "approved"
  fi
fi
[ -n "$fix" ] || exit 0
fixed=$(printf '%.12s' "$fix")
if [ -n "$repo" ]; then
  git -C "$repo" merge-base --is-ancestor "$fix" "$new_rev" 2>/dev/null \
    || refuse "$name at $short does not contain required_fix_rev $fixed"
  exit 0
fi
remote=$(git_remote "$new_url") || refuse "cannot check required_fix_rev \
against" \
  "${new_url:-an unknown url}: git cannot fetch that kind of input; unset" \
  "required_fix_rev or use a git input"
said=$(ancestry "$fix" "$new_rev" "$remote" 2>&1) || true
line=$(printf '%s\n' "$said" | tail -n 1)
case $line in
  "ancestry: yes"*) printf 'said required_fix_rev %s is in %s: %s\n' "$fixed" \
      "$short" \
    "${line#ancestry: yes }" ;;
  "ancestry: no"*) refuse "$name at $short does not contain required_fix_rev \
$fixed" \
    "${line#ancestry: no }" ;;
  *) refuse "cannot check required_fix_rev against $new_url: $(why_of \
"$said")" ;;
esac
