"""The approved bump: one host-side program that the deploy and the manual script run.

A bump takes only what a person approved (tt-stack#49, host data ``bump_to``,
``trusted_signers``, ``required_fix_rev``). The deciding is done on the host, by one
program (remedy/host/approved_bump.sh) that the bump step's program
(remedy/host/steps/bump.sh) runs and whose answer it reads.

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

from remedy import host

# The program's functions, in a file of the host-side engine (remedy/host): a test runs
# one alone (``function_argv``).
FUNCTIONS = host.text("approved_bump_functions.sh")


def function_argv(function: str, *args: str) -> list[str]:
    """One of the program's shell functions on its own (ARGS its arguments): how a test
    runs the very judgement (``signature``, ``ancestry``, ``git_remote`` …) the bump
    makes."""
    return ["sh", "-c", FUNCTIONS + f'\n{function} "$@"', "sh", *args]
