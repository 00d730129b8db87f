#!/usr/bin/env bash
# Runs libFuzzer targets built by tests/fuzz/fuzz.mk and prints one line per
# target (executions, findings), then "N passed, N failed".
#
#   tests/fuzz/run.sh fuzz  SECONDS BUILD_DIR TARGET...   long runs; new inputs kept
#                                                          in BUILD_DIR/corpus/<target>
#   tests/fuzz/run.sh check SECONDS BUILD_DIR TARGET...   every seed and regression
#                                                          input, then SECONDS of new
#                                                          inputs in a scratch dir
#
# Seeds and regression inputs: tests/fuzz/corpus/<target>/ (read, never
# written). A finding (crash, sanitizer report, leak, timeout, out of
# memory) is written to BUILD_DIR/findings/<target>/ and fails the target;
# libFuzzer stops at the first one. An optional dictionary is
# tests/fuzz/dict/<target>.dict. The log of each run is
# BUILD_DIR/logs/<target>.log.
set -uo pipefail

MODE=$1
SECONDS_PER=$2
FB=$3
shift 3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1

# Sanitizer reports must stop the run and be seen (run.sh of the suites
# sets its own exit codes; libFuzzer counts any crash).
export ASAN_OPTIONS=${FUZZ_ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${FUZZ_UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

passed=0
failed=0
for t in "$@"; do
  bin=$FB/bin/$t
  seeds=tests/fuzz/corpus/$t
  findings=$FB/findings/$t
  log=$FB/logs/$t.log
  mkdir -p "$findings" "$FB/logs" "$seeds"
  if [ "$MODE" = fuzz ]; then
    work=$FB/corpus/$t
    mkdir -p "$work"
  else
    work=$(mktemp -d "$FB/check-$t.XXXXXX")
  fi
  dict=()
  if [ -f "tests/fuzz/dict/$t.dict" ]; then
    dict=(-dict="tests/fuzz/dict/$t.dict")
  fi
  before=$(find "$findings" -type f | wc -l)
  "$bin" -max_total_time="$SECONDS_PER" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -print_final_stats=1 -artifact_prefix="$findings/" "${dict[@]}" "$work" "$seeds" \
    >"$log" 2>&1 </dev/null
  rc=$?
  after=$(find "$findings" -type f | wc -l)
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -1)
  new=$((after - before))
  if [ "$rc" -ne 0 ] && [ "$new" -eq 0 ]; then
    new=1 # a crash libFuzzer could not write out (e.g. in its own start-up)
  fi
  if [ "$MODE" != fuzz ]; then
    rm -rf "$work"
  fi
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    printf '%-24s %12s executions  0 findings\n' "$t" "${execs:-?}"
  else
    failed=$((failed + 1))
    printf '%-24s %12s executions  %d finding(s): %s (log %s)\n' "$t" "${execs:-?}" "$new" \
      "$(ls -t "$findings" | head -1)" "$log"
    grep -m1 -E '^==[0-9]+==ERROR|runtime error|SUMMARY' "$log" | sed 's/^/    /'
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
