#!/usr/bin/env bash
# Installs everything and runs the whole test suite (root): the runbook check, the unit
# tests and every twin test on the default base (Debian trixie, Nix 2.26), then, on
# Debian bookworm (Nix 2.8), the twin tests whose outcome depends on Nix's CLI (marked
# nix_cli: the bump, the dry run and derivation show, the fetch, the build, the durable
# path end to end). Extra arguments (e.g. -q) go to both pytest runs. Exits non-zero if
# either run fails (both always run).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(scripts/setup.sh)
export PATH="$PWD/$VENV/bin:$PATH"
"$VENV/bin/remedy" runbooks check

status=0
echo "== unit tests and twin tests on trixie (Nix 2.26)" >&2
REMEDY_TWIN_SUITE=trixie "$VENV/bin/python" -m pytest -ra --durations=20 "$@" || status=1
echo "== twin tests that depend on Nix's CLI, on bookworm (Nix 2.8)" >&2
REMEDY_TWIN_SUITE=bookworm "$VENV/bin/python" -m pytest -ra --durations=10 -m "twin and nix_cli" "$@" || status=1
exit "$status"
