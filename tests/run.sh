#!/usr/bin/env bash
# Runs test suites and ends with one line "N passed, N failed".
#
#   tests/run.sh <build-dir> [filter]          every suite of one build tree
#   tests/run.sh --all <build-dir> <san-dir>   what `make test` runs: every suite
#                                              of both trees, valgrind, lint, the
#                                              fuzz targets' check
#
# Suites are <build-dir>/tests/*/test_* (cmocka binaries) and tests/*/test_*.sh
# (end-to-end scripts that print their own "N passed, N failed" line). A suite
# that crashes, exits non-zero without saying why, or whose output (its own or
# its children's) holds a sanitizer report counts as a failure. A script with a
# line "# worlds: kube-lite kubernetes" also runs against the real control plane
# (WORLD=kubernetes, hack/kubernetes/), once, with the plain build.
#
# Suites run TEST_JOBS at a time (default 3): most of an end-to-end suite's
# time is spent waiting on other processes, so a few in parallel keep two
# cores busy. The longest suites start first; lint runs beside them.
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
JOBS=${TEST_JOBS:-3}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=86}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=87}
export LSAN_OPTIONS=${LSAN_OPTIONS:-exitcode=88}

RESULTS=$(mktemp -d)
trap 'rm -rf "$RESULTS"' EXIT
declare -a QUEUE=() # "label<TAB>log<TAB>build<TAB>command..." in start order
declare -a ORDER=()

# queue LABEL LOG BUILD COMMAND...: adds a suite to run.
queue() {
  local label=$1 log=$2 build=$3
  shift 3
  QUEUE+=("$(printf '%s\t%s\t%s\t%s' "$label" "$log" "$build" "$(printf '%q ' "$@")")")
}

# Runs one suite (in a background job) and writes its result file:
# "passed failed why seconds".
run_one() {
  local idx=$1 label=$2 log=$3 build=$4 cmd=$5
  mkdir -p "$(dirname "$log")"
  local start=$SECONDS
  CSI_BUILD_DIR="$build" eval "$cmd" >"$log" 2>&1 </dev/null
  local rc=$?
  # CPU seconds (user + system) of the suite's processes that were waited
  # for: this job runs in its own subshell, so `times` sees only them (not
  # inside $(...), a subshell of its own with no children).
  local cpu
  times >"$RESULTS/$idx.times"
  cpu=$(tail -n 1 "$RESULTS/$idx.times" | awk '{s = 0; for (i = 1; i <= NF; i++) {split($i, a, "m"); s += a[1] * 60 + a[2]} printf "%.1f", s}')
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
  printf '%s %s %s %s\n' "$p" "$f" "$((SECONDS - start))" "$why" >"$RESULTS/$idx"
  if [ "$f" -gt 0 ]; then
    {
      echo "FAIL $label: $p passed, $f failed${why:+ ($why)} ($((SECONDS - start)) s, ${cpu} s CPU) -- log: $log"
      # a FAIL line with the want/got lines indented under it
      grep -E -A4 '^\[  (FAILED|  ERROR)|^\[  ERROR|error:|Assert|ERROR: |runtime error|^FAIL ' "$log" |
        grep -E '^\[  (FAILED|  ERROR)|^\[  ERROR|error:|Assert|ERROR: |runtime error|^FAIL |^     ' |
        head -n 40 | sed 's/^/    /'
    } >"$RESULTS/$idx.msg"
  else
    echo "ok   $label: $p passed ($((SECONDS - start)) s, ${cpu} s CPU)" >"$RESULTS/$idx.msg"
  fi
  cat "$RESULTS/$idx.msg"
}

# queue_real BUILD: the end-to-end scripts that say "# worlds: ... kubernetes" once
# more against the real control plane (hack/kubernetes/; WORLD=kubernetes). They go
# first: they are the longest. TEST_WORLDS=kube-lite leaves them out.
queue_real() {
  local b=$1 t name
  [[ " ${TEST_WORLDS:-kube-lite kubernetes} " == *" kubernetes "* ]] || return 0
  local logdir="$b/test-logs"
  mkdir -p "$logdir"
  for t in "$ROOT"/tests/*/test_*.sh; do
    [ -f "$t" ] || continue
    grep -Eq '^# worlds:.* kubernetes( |$)' "$t" || continue
    name=${t#"$ROOT"/tests/}
    [ -n "$FILTER" ] && [[ "$name" != *$FILTER* ]] && continue
    queue "kubernetes: $name" "$logdir/kubernetes_${name//\//_}.log" "$b" env WORLD=kubernetes bash "$t" "$b"
  done
}

queue_tree() {
  local b=$1 label=$2
  local logdir="$b/test-logs"
  mkdir -p "$logdir"
  local t name
  # Scripts first: they are the long ones.
  for t in "$ROOT"/tests/*/test_*.sh; do
    [ -f "$t" ] || continue
    name=${t#"$ROOT"/tests/}
    [ -n "$FILTER" ] && [[ "$name" != *$FILTER* ]] && continue
    queue "$label$name" "$logdir/${name//\//_}.log" "$b" bash "$t" "$b"
  done
  for t in "$b"/tests/*/test_*; do
    [ -x "$t" ] || continue
    name=${t#"$b"/tests/}
    [ -n "$FILTER" ] && [[ "$name" != *$FILTER* ]] && continue
    queue "$label$name" "$logdir/${name//\//_}.log" "$b" "$t"
  done
}

if [ "$ALL" -eq 1 ]; then
  # lint is the longest single job: start it first, beside the suites.
  queue "lint" "$B/test-logs/lint.log" "$B" make -C "$ROOT" --no-print-directory lint B="$B"
  # Every libFuzzer target over its corpus plus FUZZ_CHECK_SECONDS (10) of
  # new inputs, built with clang into $B/fuzz (tests/fuzz/README.md).
  queue "fuzz" "$B/test-logs/fuzz.log" "$B" make -C "$ROOT" --no-print-directory \
    -f tests/fuzz/fuzz.mk -j2 FB="$B/fuzz" fuzz-check
  queue_real "$B"
  queue_tree "$SAN_B" "asan+ubsan: "
  queue_tree "$B" ""
  queue "valgrind: csi/test_csi_client" "$B/test-logs/valgrind.log" "$B" "$ROOT/tests/valgrind.sh" "$B"
else
  queue_real "$B"
  queue_tree "$B" ""
fi

running=0
for i in "${!QUEUE[@]}"; do
  IFS=$'\t' read -r label log build cmd <<<"${QUEUE[$i]}"
  ORDER+=("$i")
  while [ "$running" -ge "$JOBS" ]; do
    wait -n
    running=$((running - 1))
  done
  run_one "$i" "$label" "$log" "$build" "$cmd" &
  running=$((running + 1))
done
wait

passed=0
failed=0
for i in "${ORDER[@]}"; do
  if [ ! -f "$RESULTS/$i" ]; then
    failed=$((failed + 1))
    IFS=$'\t' read -r label _ <<<"${QUEUE[$i]}"
    echo "FAIL $label: no result"
    continue
  fi
  read -r p f _ <"$RESULTS/$i"
  passed=$((passed + p))
  failed=$((failed + f))
done
if [ "$failed" -gt 0 ]; then
  echo "---- failed suites"
  for i in "${ORDER[@]}"; do
    [ -f "$RESULTS/$i.msg" ] && grep -q '^FAIL' "$RESULTS/$i.msg" && cat "$RESULTS/$i.msg"
  done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
