# Prove the fix is in before anything durable changes. Ask Nix what the scratch
# clone's configuration needs (a dry run): derivations that would compile on the
# host (neither preferLocalBuild nor a text file) give up unless
# allow_local_build=yes. Then, memory-gated and bounded, build its toplevel and
# read the built system: it must hold every setting of the items
# prove:KIND<TAB>LABEL<TAB>VALUE. Then build each flake check (items
# check:NAME#ATTR; checks_default=yes: an absent one is the default's, said
# quietly). The proven toplevel goes into the run journal. With a builder, the
# build and the checks run there, the closure is copied here and checked valid,
# and the builder clone's commits come back into the scratch clone.
need journal run_id flake_dir flake_host flake_input unit min_gb \
    nix_memory_max_gb \
  nix_timeout_s build_max_jobs build_cores allow_local_build checks_default
shift "$nargs"
items=
for i in "$@"; do items="$items$i$_nl"; done
# @include-text LOCAL_BUILDS local_builds.sh
# @include-text LOCAL_BUILDS_NIX local_builds.nix
# @include-text CHECK_EXPR flake_check.nix
# @include-text SYSTEM_CHANGES system_changes.sh
# @include-text FETCH builder_fetch.sh
# @include-text DAEMON_BOUND daemon_bound.sh
# @include system_lacks.sh
owner_of "$flake_dir"
scratch=$(jget scratch) there=$scratch
if [ -n "${builder_name:-}" ]; then
  there=$(jget builder_scratch)
  [ -n "$there" ] && [ -n "$scratch" ] ||
    give_up "no scratch clone on the builder $(builder_label) to build"
else
  [ -n "$scratch" ] || give_up "no scratch clone to build"
fi
short=$(printf '%.12s' "$(jget new_rev)")
short=${short:-?}
bounded=
[ -n "${builder_name:-}" ] || bounded="; in memory, the owner's nix in a \
transient scope and nix-daemon.service's builds by a runtime MemoryMax, \
restored after"
would "build and prove the configuration in $there$bounded"
daemon_record=${journal%/*}/nix-daemon-bound
# DAEMON_BOUND: with a nix-daemon the builds run in its cgroup, not in the
# owner's scope: nix-daemon.service gets the same bound for the run
daemon_bound() {
  _o=$(sh -c "$(DAEMON_BOUND)" sh set "$daemon_record" "$bound" 2>&1) ||
    give_up "cannot bound nix-daemon.service's builds: $(why_of "$_o")"
  [ -n "${_daemon_said:-}" ] || log blue "$_o"
  _daemon_said=yes
}
daemon_unbound() {
  _o=$(sh -c "$(DAEMON_BOUND)" sh restore "$daemon_record" 2>&1) ||
    log yellow "cannot restore nix-daemon.service's MemoryMax: $(why_of "$_o")"
}
err=$(mktemp) || give_up "cannot make a temporary file"
trap 'rm -f -- "$err"; daemon_unbound >/dev/null 2>&1' EXIT
attr="$there#nixosConfigurations.\"$flake_host\".config.system.build.toplevel"
# DOING: the memory bound of a nix here, in $bound; gives up below the gate
gate() {
  why=$(refusal "$min_gb" "$1 on the host")
  if [ -n "$why" ]; then
    log red "$why"
    say refused "$why"
    give_up "$why"
  fi
  bound=$(nix_bound)
  daemon_bound
}
# The output of a nix that failed, for remedy.core.config.options (what host
# data to fix).
said_out() { printf '%s\n' "$1" | tail -n 40 | sed 's/^/@@remedy output /'; }
# DRY_OUTPUT: the derivations it would build that compile here, in $heavy
heavy_of() {
  heavy=
  drvs=$(printf '%s\n' "$1" | awk '/will be built/ { b = 1; next }
    /^[[:space:]]+\/nix\/store\// { if (b) print $1; next } { b = 0 }')
  [ -n "$drvs" ] || return 0
  if nix_at_least 2 15; then set -- derivation show; else set -- \
      show-derivation; fi
  # shellcheck disable=SC2086  # store paths, one a word
  found=$(as_owner sh -c "$(LOCAL_BUILDS)" sh "$(LOCAL_BUILDS_NIX)" \
    nix --extra-experimental-features 'nix-command flakes' "$@" $drvs 2>&1 \
        </dev/null) ||
    give_up "cannot read the derivations to build: $(why_of "$found")"
  heavy=$(printf '%s\n' "$found" | grep '^/nix/store/' | tr '\n' ' ')
}
compile_refused() {  # WHAT
  # shellcheck disable=SC2086  # store paths, one a word
  set -- "$1" $heavy
  _what=$1
  shift
  _names=$(for _h in "$@"; do echo "${_h##*/}"; done | head -n 5 | paste -sd, \
      - | sed 's/,/, /g')
  give_up "$_what needs $# derivation(s) compiled on the serving host \
($_names): a build competes with the model server for memory; push binaries to \
a cache the host substitutes from, or set allow_local_build=true (bounded by \
build_max_jobs/build_cores)"
}
toplevel_of() {  # BUILD_OUTPUT (nix build --json): the out path
  printf '%s\n' "$1" | sed -n 's/.*"out":"\([^"]*\)".*/\1/p' | head -n 1
}
if [ -n "${builder_name:-}" ]; then
  log blue "building the new system on $builder_name (max-jobs \
$builder_max_jobs, cores $builder_cores)"
  if ! out=$(builder_nix build nix --extra-experimental-features \
      'nix-command flakes' \
    build --no-link --json --max-jobs "$builder_max_jobs" --cores \
        "$builder_cores" \
    "$attr" 2>"$err" </dev/null); then
    rc=$?
    e=$(cat "$err")
    said_out "$e"
    why=$(builder_lost "$rc" build "$e")
    [ -n "$why" ] || why=$(bound_hit "$e" "build on the builder \
$(builder_label)" 0 "$builder_timeout_s")
    give_up "${why:-the new configuration does not build on the builder \
$(builder_label): $(why_of "$e$_nl$out")}"
  fi
else
  gate evaluating
  if ! dry=$(owner_nix eval "$bound" nix --extra-experimental-features \
      'nix-command flakes' \
    build --dry-run --no-link "$attr" 2>&1 </dev/null); then
    said_out "$dry"
    why=$(bound_hit "$dry" evaluation "$bound" "$nix_timeout_s")
    give_up "${why:-the new configuration does not evaluate: $(why_of "$dry")}"
  fi
  heavy_of "$dry"
  for h in $heavy; do answer say+ local_builds "$h"; done
  [ -z "$heavy" ] || [ "$allow_local_build" = yes ] || compile_refused "the \
bump"
  gate building
  log blue "building $attr (max-jobs $build_max_jobs, cores $build_cores)"
  if ! out=$(owner_nix build "$bound" nix --extra-experimental-features \
      'nix-command flakes' \
    build --no-link --json --max-jobs "$build_max_jobs" --cores "$build_cores" \
        "$attr" \
    2>"$err" </dev/null); then
    e=$(cat "$err")
    said_out "$e"
    why=$(bound_hit "$e" build "$bound" "$nix_timeout_s")
    give_up "${why:-the new configuration does not build: $(why_of \
"$e$_nl$out")}"
  fi
fi
toplevel=$(toplevel_of "$out")
[ -n "$toplevel" ] || give_up "unreadable nix build output: $(printf '%.200s' \
"$out")"
# flake checks: each is built for the bumped lock, behind the same dry run and
# gate
results=
checks=$(printf '%s' "$items" | sed -n 's/^check://p')
for check in $checks; do
  what="flake check $check"
  set -- env "REMEDY_FLAKE_DIR=$there" "REMEDY_CHECK_INPUT=${check%%#*}" \
    "REMEDY_CHECK_ATTR=${check#*#}" nix --extra-experimental-features \
        'nix-command flakes' \
    build --no-link
  if [ -n "${builder_name:-}" ]; then
    ok=
    dry=$(builder_nix eval "$@" --dry-run --impure --expr "$(CHECK_EXPR)" 2>&1 \
        </dev/null) && rc=0 || rc=$?
    [ "$rc" != 0 ] || ok=yes
  else
    gate "evaluating $what"
    ok=
    dry=$(owner_nix eval "$bound" "$@" --dry-run --impure --expr \
        "$(CHECK_EXPR)" 2>&1 </dev/null) &&
      ok=yes || ok=
  fi
  if [ -z "$ok" ]; then
    case $dry in *"remedy: no such flake output"*)
      results="$results${_nl}absent $check"
      continue ;;
    esac
    said_out "$dry"
    if [ -n "${builder_name:-}" ]; then
      why=$(builder_lost "$rc" "evaluation of $what" "$dry")
      [ -n "$why" ] || why=$(bound_hit "$dry" "evaluation of $what on the \
builder $(builder_label)" 0 "$builder_timeout_s")
      give_up "${why:-$what does not evaluate on the builder $(builder_label): \
$(why_of "$dry")}"
    fi
    why=$(bound_hit "$dry" evaluation "$bound" "$nix_timeout_s")
    give_up "${why:-$what does not evaluate: $(why_of "$dry")}"
  fi
  if [ -z "${builder_name:-}" ]; then
    heavy_of "$dry"
    [ -z "$heavy" ] || [ "$allow_local_build" = yes ] || compile_refused "$what"
    gate "building $what"
    log blue "building $what"
    built=$(owner_nix check "$bound" "$@" --json --max-jobs "$build_max_jobs" \
      --cores "$build_cores" --impure --expr "$(CHECK_EXPR)" 2>&1 </dev/null) \
          && ok=yes || ok=
    on='' timeout=$nix_timeout_s
  else
    log blue "building $what on $builder_name"
    ok=yes
    built=$(builder_nix check "$@" --json --max-jobs "$builder_max_jobs" \
      --cores "$builder_cores" --impure --expr "$(CHECK_EXPR)" 2>&1 \
          </dev/null) || { rc=$? ok=; }
    on=" on the builder $(builder_label)" timeout=$builder_timeout_s bound=0
    if [ -z "$ok" ]; then
      why=$(builder_lost "$rc" "build of $what" "$built")
      [ -z "$why" ] || { said_out "$built"; give_up "$why"; }
    fi
  fi
  if [ -n "$ok" ]; then
    results="$results${_nl}passed $check"
    continue
  fi
  why=$(bound_hit "$built" "$what$on" "$bound" "$timeout")
  [ -z "$why" ] || { said_out "$built"; give_up "$why"; }
  tail=$(printf '%s\n' "$built" | sed -n \
      's/^[[:space:]]*> \{0,1\}\(.*[^[:space:]]\)[[:space:]]*$/\1/p' |
    tail -n 3)
  [ -n "$tail" ] || tail=$(printf '%s\n' "$built" | sed -n \
      's/^[[:space:]]*\(error:.*\)/\1/p' |
    tail -n 1)
  [ -n "$tail" ] || tail=$(printf '%s\n' "$built" | grep -v '^[[:space:]]*$' |
    tail -n 1)
  last=$(printf '%s\n' "$tail" | tail -n 1)
  results="$results${_nl}failed $check $(printf '%s\n' "$tail" | paste -sd'|' \
- | sed 's/|/ \/ /g')"
  break
done
printf '%s\n' "$results" | while IFS= read -r r; do
  [ -n "$r" ] || continue
  answer say+ flake_checks "$r"
  # shellcheck disable=SC2086  # its words
  set -- $r
  case $1 in
  passed) log green "flake check $2: passed" ;;
  absent)
    if [ "$checks_default" = yes ]; then c=blue; else c=red; fi
    log "$c" "flake check $2: no such output, not built" ;;
  failed)
    d=${r#failed "$2" }
    log red "flake check $2: failed: $d" ;;
  esac
done
daemon_unbound
case $results in *"${_nl}failed "*)
  give_up "$what failed${on:-} for $flake_input at the bumped rev: ${last:-?} \
(the switch would deploy what the check rejects)" ;;
esac
if [ -n "${builder_name:-}" ]; then
  if [ "$(jget commits)" != "" ] && [ "$(jget commits)" != 0 ]; then
    out=$(on_builder git -C "$there" bundle create - HEAD 2>/dev/null \
        </dev/null |
      as_owner sh -c "$(FETCH)" sh "$scratch" 2>&1) ||
      give_up "cannot bring the proven commits from the builder \
$(builder_label): $(why_of "$out")"
  fi
  log blue "copying $toplevel from $builder_name"
  sigs=--no-check-sigs
  [ "$builder_signed" != yes ] || sigs=
  bound=$(nix_bound)
  # shellcheck disable=SC2086  # $sigs is one flag or none
  if ! out=$(NIX_SSHOPTS=$(builder_ssh) sh -c "$(NIX_BOUNDED)" sh \
    "remedy-nix-copy-$(scope_id)" "$bound" "${nix_timeout_s}s" \
    nix --extra-experimental-features 'nix-command flakes' copy $sigs \
    --from "ssh-ng://$builder_user@$builder_address" "$toplevel" 2>&1 \
        </dev/null); then
    hint=$(bound_hit "$out" copy 0 "$nix_timeout_s")
    if [ -n "$hint" ]; then
      hint=" ($hint)"
    else
      case $out in
      # Nix 2.8 says "lacks a valid signature", later ones "lacks a signature"
      *"lacks a signature"* | *"lacks a valid signature"*) hint=" (the copy \
checks signatures: the builder must sign with secret-key-files and this host \
trust its key in trusted-public-keys; or builder_unsigned_copy = true)" ;;
      *"No space left"*) hint=" (this host's store is full: collect garbage, \
nix-collect-garbage -d)" ;;
      esac
    fi
    give_up "the copy of $toplevel from the builder $(builder_label) failed: \
$(why_of "$out")$hint"
  fi
  # the whole closure, its contents and (signed) its signatures against this
  # host's trusted-public-keys; unsigned, the contents only: their hashes came
  # from the builder too
  trust=
  [ "$builder_signed" = yes ] || trust=--no-trust
  # shellcheck disable=SC2086  # $trust is one flag or none
  out=$(nix_ store verify -r $trust "$toplevel" 2>&1 </dev/null) ||
    give_up "the closure of $toplevel copied from $(builder_label) does not \
verify here (nix store verify -r${trust:+ $trust}): $(why_of "$out")"
fi
# the proof: the built system holds every setting it must
lacks=$(system_lacks "$toplevel" "$unit" "$(printf '%s' "$items" |
  sed -n 's/^prove://p')")
[ -z "$lacks" ] ||
  give_up "$flake_input at $short builds a system without $lacks (the fix is \
not in)"
log green "proven: $toplevel holds every setting it must"
# what the switch changes beyond the settings (for the report)
current=$(readlink -f /run/current-system)
if [ -n "$current" ]; then
  changed=$(sh -c "$(SYSTEM_CHANGES)" sh "$current" "$toplevel" "" \
    "${builder_name:-}" 2>/dev/null)
  # each an answer line (the outcome keeps the boot's: lib.sh answer)
  set -f
  IFS=$_nl
  # shellcheck disable=SC2086  # a line each
  set -- $changed
  unset IFS
  set +f
  for line in "$@"; do answer changes "$line"; done
fi
say toplevel "$toplevel"
[ -z "${builder_name:-}" ] || say built_on "$builder_name"
head=$(as_owner git -C "$scratch" rev-parse HEAD 2>/dev/null </dev/null)
jset "toplevel=$toplevel" "proven_head=$head" || give_up "cannot write the run \
journal $journal"
done_ "proven: $toplevel"
