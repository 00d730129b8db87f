#!/usr/bin/env bash
# Runs every test suite of one build tree and ends with "N passed, N failed".
#
#   tests/run.sh <build-dir> [filter]
#
# Suites are <build-dir>/tests/*/test_* (cmocka binaries) and tests/*/test_*.sh
# (end-to-end scripts that print their own "N passed, N failed" line). A suite
# that crashes, exits non-zero without saying why, or whose output (its own or
# its children's) holds a sanitizer report counts as a failure.
set -uo pipefail

B=${1:-build}
FILTER=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOGDIR="$B/test-logs"
mkdir -p "$LOGDIR"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=86}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=87}
export LSAN_OPTIONS=${LSAN_OPTIONS:-exitcode=88}
export CSI_BUILD_DIR="$B"

passed=0
failed=0
failed_suites=()

run_suite() {
  local name=$1; shift
  local log="$LOGDIR/$name.log"
  mkdir -p "$(dirname "$log")"
  local start=$SECONDS
  "$@" >"$log" 2>&1 </dev/null
  local rc=$?
  local p f
  p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | awk '{s+=$NF} END {print s+0}')
  f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$log" | awk '{s+=$(NF-1)} END {print s+0}')
  # Script suites report "N passed, N failed" themselves.
  local line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
  if [ -n "$line" ]; then
    p=$(echo "$line" | awk '{print $1}')
    f=$(echo "$line" | awk '{print $3}')
  fi
  local why=""
  if grep -Eq 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer' "$log"; then
    why="sanitizer report"
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    why="exit status $rc"
  fi
  if [ -n "$why" ]; then
    f=$((f + 1))
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$f" -gt 0 ]; then
    failed_suites+=("$name")
    echo "FAIL $name: $p passed, $f failed${why:+ ($why)} ($((SECONDS - start)) s) -- log: $log"
    grep -E '^\[  (FAILED|  ERROR)|^\[  ERROR|error:|Assert|ERROR: |runtime error' "$log" | head -n 20 | sed 's/^/    /'
  else
    echo "ok   $name: $p passed ($((SECONDS - start)) s)"
  fi
}

for t in "$B"/tests/*/test_*; do
  [ -x "$t" ] || continue
  name=${t#"$B"/tests/}
  [ -n "$FILTER" ] && [[ "$name" != *$FILTER* ]] && continue
  run_suite "$name" "$t"
done
for t in "$ROOT"/tests/*/test_*.sh; do
  [ -f "$t" ] || continue
  name=${t#"$ROOT"/tests/}
  [ -n "$FILTER" ] && [[ "$name" != *$FILTER* ]] && continue
  run_suite "$name" bash "$t" "$B"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
