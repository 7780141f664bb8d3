#!/usr/bin/env bash
# Installs everything and runs the whole test suite, twin tests included (root).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(scripts/setup.sh)
export PATH="$PWD/$VENV/bin:$PATH"
"$VENV/bin/remedy" runbooks check
exec "$VENV/bin/python" -m pytest -ra "$@"
