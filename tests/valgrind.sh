#!/usr/bin/env bash
# Runs the CSI client integration test under valgrind's memcheck: no
# definite or indirect leaks and no memory errors allowed.
#
# "Possibly lost" blocks are not errors here: gRPC keeps per-thread and
# abseil random-pool state alive until process exit on purpose, and
# valgrind can only call those "possibly lost" (see
# ../shared/docs/toolchain-notes.md). Definite and indirect leaks are ours
# and fail the run.
set -euo pipefail
B=${1:-build}
log="$B/test-logs/valgrind-csi-client.log"
mkdir -p "$(dirname "$log")"
if valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite,indirect \
    --show-leak-kinds=definite,indirect --error-exitcode=99 \
    "$B/tests/csi/test_csi_client" >"$log" 2>&1 </dev/null; then
  grep -E '^\[  PASSED  \]' "$log"
  echo "valgrind: no definite or indirect leaks, no memory errors"
else
  rc=$?
  tail -n 60 "$log"
  echo "valgrind: test_csi_client failed (exit $rc); full log in $log"
  exit 1
fi
