#!/usr/bin/env bash
# Installs everything and runs the whole test suite (root): the runbook check, the unit
# tests and every twin test on the default base (Debian trixie, Nix 2.26), then, on
# Debian bookworm (Nix 2.8), the twin tests whose outcome depends on Nix's CLI (marked
# nix_cli: the bump, the dry run and derivation show, the fetch, the build, the durable
# path end to end). Extra arguments (e.g. -q) go to every pytest run.
#
# Twin tests mostly wait (a server loading, a switch, a reboot), so the trixie tests run
# as REMEDY_TEST_SHARDS shares (default 3, `--shard I/N` in tests/conftest.py) at once,
# beside the bookworm run; each twin has its own name, slot and ports. The shares are
# dealt by the tests' measured durations (tests/durations.json, tests/sharding.py);
# REMEDY_STORE_DURATIONS=1 writes this run's durations of the trixie tests that passed
# into that file (commit it when the shares drift apart). Each run's output is kept in
# a file and printed when it ends; the last line sums them up. Exits non-zero if any
# run fails (all always run).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(scripts/setup.sh)
export PATH="$PWD/$VENV/bin:$PATH"
# The shipped alert rules, as teams load them: a file promtool rejects, or a rule whose
# unit case fails, fails CI before any test runs.
promtool check rules monitoring/remedy.rules.yml
promtool test rules monitoring/remedy.rules.test.yml
logs=$(mktemp -d "${TMPDIR:-/tmp}/remedy-test.XXXXXXXX")
trap 'rm -rf -- "$logs"' EXIT
# The suite's own state root: remedy's audit log, its fleet locks and each pytest
# session's state (tests/conftest.py makes one per session under REMEDY_TEST_STATE and
# fails the session if root's real state changed) live here, never in root's.
export REMEDY_TEST_STATE="$logs/state" XDG_STATE_HOME="$logs/state" \
  REMEDY_LOCK_DIR="$logs/lock"
unset REMEDY_AUDIT_LOG
mkdir -p "$REMEDY_LOCK_DIR"
"$VENV/bin/remedy" runbooks check
"$VENV/bin/remedy" settings check
# What earlier test runs that were killed left (their twins); a run takes down only its own.
"$VENV/bin/python" -c 'from tests.conftest import clear_dead_test_twins as c; c()'

SHARDS=${REMEDY_TEST_SHARDS:-3}
case "$SHARDS" in '' | *[!0-9]* | 0)
  echo "test.sh: REMEDY_TEST_SHARDS=$SHARDS: expected a whole number of at least 1" >&2
  exit 2 ;;
esac
runs=()
start() {  # NAME SUITE PYTEST-ARGS...: one pytest in the background, output in a file
  local name=$1 suite=$2
  shift 2
  runs+=("$name")
  echo "== $name: started (Debian $suite)" >&2
  (
    rc=0
    env REMEDY_TWIN_SUITE="$suite" "$VENV/bin/python" -m pytest "$@" \
      >"$logs/$name.log" 2>&1 </dev/null || rc=$?
    echo "$rc" >"$logs/$name.rc"
    echo "== $name: ended (exit $rc)" >&2
  ) &
}

store=()
case "${REMEDY_STORE_DURATIONS:-}" in
  '' | 0) ;;
  1) store=(--store-durations) ;;  # the bookworm run's are of the same tests: not stored
  *) echo "test.sh: REMEDY_STORE_DURATIONS=$REMEDY_STORE_DURATIONS: expected 0 or 1" >&2
    exit 2 ;;
esac
began=$(date +%s)
for i in $(seq 1 "$SHARDS"); do
  start "trixie-$i-of-$SHARDS" trixie -ra --durations=10 --shard "$i/$SHARDS" "${store[@]}" "$@"
done
start bookworm-nix-cli bookworm -ra --durations=10 -m "twin and nix_cli" "$@"
wait

status=0 passed=0 failed=0 skipped=0
for name in "${runs[@]}"; do
  rc=$(cat "$logs/$name.rc" 2>/dev/null || echo 1)
  echo
  echo "== $name (exit $rc)"
  cat "$logs/$name.log"
  # pytest exits 5 when a share holds no test (extra arguments filtered them all out)
  case "$rc" in 0 | 5) ;; *) status=1 ;; esac
  # pytest's closing line, with -q or without: "3 passed, 1 skipped in 9.1s"
  summary=$(grep -E '(passed|failed|error|skipped|deselected|no tests ran).* in [0-9.]+s' \
    "$logs/$name.log" | tail -n 1 || true)
  for kind in passed failed skipped error errors; do
    n=$(printf '%s\n' "$summary" | grep -oE "[0-9]+ $kind\b" | grep -oE '^[0-9]+' || true)
    case "$kind" in
      passed) passed=$((passed + ${n:-0})) ;;
      skipped) skipped=$((skipped + ${n:-0})) ;;
      *) failed=$((failed + ${n:-0})) ;;
    esac
  done
done
[ "$passed" -gt 0 ] || status=1
echo
echo "== all runs: $(( $(date +%s) - began )) s"
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
