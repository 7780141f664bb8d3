"""The approved bump: one host-side program that the deploy and the manual script run.

A bump takes only what a person approved (tt-stack#49, host data ``bump_to``,
``trusted_signers``, ``required_fix_rev``). The deciding is done on the host, by one
program, so that both renderers of the step decide alike: the deploy runs it with
pyinfra's quoting and reads its answer with ``parse``; the manual script carries the
same text and reads the same lines in shell.

In the scratch clone it reads the input's locked url and branch from ``flake.lock``
(a Nix expression: the host has no JSON reader but Nix), then

* with ``bump_to`` (PINNED): refuses a rev that is not on the input's branch, then
  locks exactly that rev (``nix flake lock --override-input``);
* otherwise runs the host's update command (the remaining arguments);

reads what it locked, and, when the lock moved and ``trusted_signers`` is set,
refuses a rev without a good signature by one of its keys; with ``required_fix_rev``
it refuses a rev whose history lacks it. Nothing is built.

Its answer, one line each, on stdout:

====================  =====================================================
``old-rev REV``       what the lock held before
``new-rev REV``       what it locks now (``new-url URL`` its url)
``unchanged``         the lock did not move (no commit to make)
``signature S|K|N|A`` ``git log --format=%G?|%GK|%GS|%an <%ae>`` of the rev
``said TEXT``         something to show (a trusted signature, the fix found)
``refused WHY``       the bump may not be taken; it exits 3
====================  =====================================================
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from remedy.core.programs import commands, signers

# remedy.core.readings.nix.parse_flake_lock's reading of flake.lock, in Nix: the input's node
# (following a `follows` path), then its rev, url (locked, else original) and ref.
LOCKED_EXPR = r"""
let
  env = builtins.getEnv;
  lock = builtins.fromJSON (builtins.readFile (env "REMEDY_LOCK"));
  nodes = lock.nodes;
  root = lock.root or "root";
  resolve = ref:
    if builtins.isList ref
    then builtins.foldl' (key: hop: resolve nodes.${key}.inputs.${hop}) root ref
    else ref;
  node = nodes.${resolve nodes.${root}.inputs.${env "REMEDY_INPUT"}};
  locked = node.locked or { };
  original = node.original or { };
  url = spec:
    let kind = spec.type or ""; in
    if kind == "" then ""
    else if kind == "path" && spec ? path then "path:" + spec.path
    else if kind == "git" && spec ? url then
      (if builtins.substring 0 4 spec.url == "git+" then spec.url else "git+" + spec.url)
    else if (kind == "tarball" || kind == "file") && spec ? url then spec.url
    else if kind == "github" || kind == "gitlab" || kind == "sourcehut"
    then "${kind}:${spec.owner or ""}/${spec.repo or ""}"
    else spec.url or "";
  u = if url locked != "" then url locked else url original;
in
"${locked.rev or ""}\n${u}\n${locked.ref or original.ref or ""}\n"
"""


def _states_case() -> str:
    """signers.STATES as a shell case: one wording of each signature state."""
    arms = [f"    {state}) what={shlex.quote(text)} ;;" for state, text in signers.STATES.items()]
    return "\n".join([*arms, '    *) what="signature state $1" ;;'])


FUNCTIONS = r"""
refuse() { printf 'refused %s\n' "$*"; exit 3; }
why_of() {  # the line of $1 that says what went wrong (remedy.operations.argv.Ran.why)
  w=$(printf '%s\n' "$1" | grep -iE '(^|[^a-z])(error|failed|fatal)([^a-z]|$)' | tail -n 1)
  [ -n "$w" ] || w=$(printf '%s\n' "$1" | grep -v '^[[:space:]]*$' | tail -n 1)
  printf '%.300s' "${w:-no output}" | sed 's/^[[:space:]]*//'
}
locked() {  # REV, URL and REF of the input, one a line, as flake.lock says
  REMEDY_LOCK="$scratch/flake.lock" REMEDY_INPUT=$name \
    @NIX@ eval --impure --raw --expr "$LOCKED_EXPR"
}
git_remote() {  # remedy.core.readings.nix.git_remote: the URL git fetches the input from
  base=${1%%\?*} query=
  case $1 in *\?*) query=${1#*\?} ;; esac
  case $base in
    git+?*) printf '%s\n' "${base#git+}" ;;
    github:?*/?* | gitlab:?*/?* | sourcehut:?*/?*)
      kind=${base%%:*} rest=${base#*:}
      o=${rest%%/*} r=${rest#*/}; r=${r%%/*}
      case $kind in github) f=https://github.com ;; gitlab) f=https://gitlab.com ;;
        *) f=https://git.sr.ht ;; esac
      printf '%s/%s/%s\n' "$f" "$o" "$r" ;;
    http://* | https://* | ssh://*)
      case "&$query&" in *"&rev="[!\&]*) printf '%s\n' "$base" ;; *) return 1 ;; esac ;;
    *) return 1 ;;
  esac
}
pin_url() {  # URL REF REV: the input's url with its branch (git) and exactly REV
  p=$1
  case $1 in git+*) [ -n "$2" ] && p="$p?ref=$2" ;; esac
  case $p in *\?*) printf '%s&rev=%s\n' "$p" "$3" ;; *) printf '%s?rev=%s\n' "$p" "$3" ;; esac
}
on_branch() (@ON_BRANCH@)
signature() (@SIGNATURE@)
ancestry() (@ANCESTRY@)
describe() {  # STATE KEY SIGNER AUTHOR REV: remedy.core.programs.signers.Signature.describe
  case $1 in
@STATES@
  esac
  k=; [ -n "$2" ] && [ "$1" != G ] && k=" ($2)"
  w=; [ "$1" = G ] && [ -n "$3" ] && w=" as $3"
  printf '%.12s by %s: %s%s%s' "$5" "${4:-?}" "$what" "$k" "$w"
}
"""

MAIN = r"""
scratch=$1 name=$2 pinned=$3 signers_text=$4 signers_file=$5 fix=$6
shift 6  # the rest: the host's command that updates one input (PINNED empty)
owner=$(id -un)
# stdout only: Nix warns on stderr first when nix.conf has a setting it does not know
out=$(locked 2>/dev/null) \
  || refuse "cannot read $name in $scratch/flake.lock: $(why_of "$(locked 2>&1)")"
old_rev=$(printf '%s\n' "$out" | sed -n 1p) url=$(printf '%s\n' "$out" | sed -n 2p)
ref=$(printf '%s\n' "$out" | sed -n 3p)
printf 'old-rev %s\n' "$old_rev"
if [ -n "$pinned" ]; then
  remote=$(git_remote "$url") || refuse "bump_to $pinned: cannot check that ${url:-?} holds it"
  said=$(on_branch "$pinned" "$remote" "${ref:-HEAD}" 2>&1) || true
  case $(printf '%s\n' "$said" | tail -n 1) in
    "on-branch: yes") ;;
    "on-branch: no") refuse "bump_to $pinned is not on ${ref:-the default branch} of" \
      "$remote: refused (a rev a person approved is on the branch the input follows)" ;;
    *) refuse "bump_to $pinned: cannot check the branch of $remote: $(why_of "$said")" ;;
  esac
  pin=$(pin_url "$url" "$ref" "$pinned")
  if ! said=$(@NIX@ flake lock "$scratch" --override-input "$name" "$pin" 2>&1); then
    refuse "locking $name to bump_to $pinned failed: $(why_of "$said") (can the host" \
      "fetch ${url:-?} as $owner?)"
  fi
elif ! said=$("$@" 2>&1); then
  refuse "bumping $name failed: $(why_of "$said") (can the host fetch ${url:-?} as $owner?)"
fi
out=$(locked 2>/dev/null) \
  || refuse "cannot read the bumped flake.lock: $(why_of "$(locked 2>&1)")"
new_rev=$(printf '%s\n' "$out" | sed -n 1p) new_url=$(printf '%s\n' "$out" | sed -n 2p)
new_ref=$(printf '%s\n' "$out" | sed -n 3p)
printf 'new-rev %s\nnew-url %s\n' "$new_rev" "$new_url"
short=$(printf '%.12s' "${new_rev:-?}")
repo=
case $new_url in git+file://*) repo=${new_url#git+file://}; repo=${repo%%\?*} ;; esac
if [ "$new_rev" = "$old_rev" ]; then
  echo unchanged
elif [ -n "$signers_file" ]; then
  remote=$(git_remote "$new_url") || remote=$new_url
  # no repository holds a tarball input's rev: its branch is fetched, as --dry does
  said=$(signature "$new_rev" "$remote" "$repo" "$signers_text" "${new_ref:-${ref:-HEAD}}" \
    2>&1) || true
  line=$(printf '%s\n' "$said" | tail -n 1)
  case $line in
    "signature "*) ;;
    *) refuse "cannot check the signature of $name at $short: $(why_of "$said")" ;;
  esac
  printf '%s\n' "$line"
  IFS='|' read -r state key signer author <<EOF
${line#signature }
EOF
  [ -n "$state" ] || state=E
  if [ "$state" = G ]; then
    printf 'said %s at %s\n' "$name" "$(describe G "$key" "$signer" "$author" "$new_rev")"
  else
    refuse "$name at $(describe "$state" "$key" "$signer" "$author" "$new_rev"): not built" \
      "(trusted_signers $signers_file); a person signs it, or sets bump_to to a rev they" \
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
remote=$(git_remote "$new_url") || refuse "cannot check required_fix_rev against" \
  "${new_url:-an unknown url}: git cannot fetch that kind of input; unset" \
  "required_fix_rev or use a git input"
said=$(ancestry "$fix" "$new_rev" "$remote" 2>&1) || true
line=$(printf '%s\n' "$said" | tail -n 1)
case $line in
  "ancestry: yes"*) printf 'said required_fix_rev %s is in %s: %s\n' "$fixed" "$short" \
    "${line#ancestry: yes }" ;;
  "ancestry: no"*) refuse "$name at $short does not contain required_fix_rev $fixed" \
    "${line#ancestry: no }" ;;
  *) refuse "cannot check required_fix_rev against $new_url: $(why_of "$said")" ;;
esac
"""
FUNCTIONS = (
    FUNCTIONS.replace("@NIX@", shlex.join(commands.nix()))
    .replace("@ON_BRANCH@", commands.ON_BRANCH_SH)
    .replace("@SIGNATURE@", signers.SIGNATURE_SH)
    .replace("@ANCESTRY@", commands.FETCHED_ANCESTRY_SH)
    .replace("@STATES@", _states_case())
    .replace('"$LOCKED_EXPR"', shlex.quote(LOCKED_EXPR))
)
MAIN = MAIN.replace("@NIX@", shlex.join(commands.nix()))
PROGRAM = FUNCTIONS + MAIN


def function_argv(function: str, *args: str) -> list[str]:
    """One of the program's shell functions on its own (ARGS its arguments): how a test
    runs the very judgement (``signature``, ``ancestry``, ``git_remote`` …) the bump
    makes."""
    return ["sh", "-c", FUNCTIONS + f'\n{function} "$@"', "sh", *args]


def argv(
    scratch: str,
    flake_input: str,
    update_argv: list[str],
    pinned: str | None = None,
    allowed_signers: str | None = None,
    trusted_signers: str | None = None,
    required_fix_rev: str | None = None,
) -> list[str]:
    """The approved bump of FLAKE_INPUT in SCRATCH (run it as the checkout's owner):
    PINNED or the host's UPDATE_ARGV (``commands.update_input``), the signature checked
    against ALLOWED_SIGNERS (trusted_signers' text; TRUSTED_SIGNERS names the file), the
    history against REQUIRED_FIX_REV. Prints the lines ``parse`` reads."""
    return [
        "sh", "-c", PROGRAM, "sh", scratch, flake_input, pinned or "",
        allowed_signers or "", (trusted_signers or "?") if allowed_signers is not None else "",
        required_fix_rev or "", *update_argv,
    ]  # fmt: skip


@dataclass
class Bumped:
    """What the approved bump answered."""

    old_rev: str | None = None
    new_rev: str | None = None
    new_url: str | None = None
    unchanged: bool = False
    signature: signers.Signature | None = None
    said: list[str] = field(default_factory=list)
    refused: str | None = None


def parse(stdout: str, why: str = "") -> Bumped:
    """The program's answer (STDOUT). A run that printed no answer at all (a lost
    connection, a shell that died) is refused with WHY, what the command said."""
    out = Bumped()
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word == "old-rev":
            out.old_rev = rest or None
        elif word == "new-rev":
            out.new_rev = rest or None
        elif word == "new-url":
            out.new_url = rest or None
        elif word == "unchanged":
            out.unchanged = True
        elif word == "signature":
            out.signature = signers.parse_signature(line, out.new_rev or "")
        elif word == "said":
            out.said.append(rest)
        elif word == "refused":
            out.refused = rest
    if out.refused is None and out.new_rev is None:
        out.refused = f"the bump did not answer: {why or 'no output'}"
    return out
