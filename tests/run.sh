#!/usr/bin/env bash
# Runs test suites and ends with one line "N passed, N failed".
#
#   tests/run.sh <build-dir> [filter]          every suite of one build tree
#   tests/run.sh --all <build-dir> <san-dir>   what `make test` runs: every suite
#                                              of both trees, valgrind, lint
#
# Suites are <build-dir>/tests/*/test_* (cmocka binaries) and tests/*/test_*.sh
# (end-to-end scripts that print their own "N passed, N failed" line). A suite
# that crashes, exits non-zero without saying why, or whose output (its own or
# its children's) holds a sanitizer report counts as a failure.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ALL=0
if [ "${1:-}" = "--all" ]; then
  ALL=1
  shift
  B=$1
  SAN_B=$2
  FILTER=""
else
  B=${1:-build}
  FILTER=${2:-}
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=86}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=87}
export LSAN_OPTIONS=${LSAN_OPTIONS:-exitcode=88}

passed=0
failed=0
failed_suites=()

run_suite() {
  local name=$1; shift
  local log="$LOGDIR/${name//\//_}.log"
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
  elif [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
    p=1 # a check without test counts (lint) passed as a whole
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

run_tree() {
  local b=$1 label=$2
  export CSI_BUILD_DIR="$b"
  LOGDIR="$b/test-logs"
  mkdir -p "$LOGDIR"
  for t in "$b"/tests/*/test_*; do
    [ -x "$t" ] || continue
    local name=${t#"$b"/tests/}
    [ -n "$FILTER" ] && [[ "$name" != *$FILTER* ]] && continue
    run_suite "$label$name" "$t"
  done
  for t in "$ROOT"/tests/*/test_*.sh; do
    [ -f "$t" ] || continue
    local name=${t#"$ROOT"/tests/}
    [ -n "$FILTER" ] && [[ "$name" != *$FILTER* ]] && continue
    run_suite "$label$name" bash "$t" "$b"
  done
}

if [ "$ALL" -eq 1 ]; then
  run_tree "$B" ""
  run_tree "$SAN_B" "asan+ubsan: "
  LOGDIR="$B/test-logs"
  run_suite "valgrind: csi/test_csi_client" "$ROOT/tests/valgrind.sh" "$B"
  run_suite "lint" make -C "$ROOT" --no-print-directory lint B="$B"
else
  run_tree "$B" ""
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
