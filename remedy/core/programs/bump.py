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

from dataclasses import dataclass, field

from remedy import host
from remedy.core.programs import signers

# The program, in files of the host-side engine (remedy/host): its functions (a test
# runs one alone, ``function_argv``), then its main part.
LOCKED_EXPR = host.text("locked.nix")
FUNCTIONS = host.text("approved_bump_functions.sh")
PROGRAM = host.text("approved_bump.sh")


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
