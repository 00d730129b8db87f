#!/usr/bin/env bash
# Runs tests/e2e/test_hostile.sh over N fresh seeds (or the seeds given) and
# prints one line per run, "seed S: N passed, N failed", then a summary
# line. A failed run's logs are kept under $HOSTILE_KEEP/seed-S (default
# /tmp/hostile-seeds) for its post-mortem; a passed run keeps nothing.
#
#   tests/hostile/run_seeds.sh <build-dir> <N>
#   tests/hostile/run_seeds.sh <build-dir> 8 2027514010 ...   # these seeds
#
# Not part of `make test` (each run takes about two minutes); the evidence
# for a change to what the hostile test exercises.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:?usage: run_seeds.sh <build-dir> <N> [seed ...]}
N=${2:?usage: run_seeds.sh <build-dir> <N> [seed ...]}
shift 2
KEEP=${HOSTILE_KEEP:-/tmp/hostile-seeds}
seeds=("$@")
while [ "${#seeds[@]}" -lt "$N" ]; do
  seeds+=("$(($(od -An -N4 -tu4 /dev/urandom | tr -d ' ') % 2147483648))")
done

runs=0 bad=0
for s in "${seeds[@]}"; do
  out=$(mktemp)
  HOSTILE_SEED=$s HOSTILE_LOGS="$KEEP/seed-$s" "$ROOT/tests/e2e/test_hostile.sh" "$B" >"$out" 2>&1
  last=$(tail -n 1 "$out")
  runs=$((runs + 1))
  if [[ "$last" =~ ^[0-9]+\ passed,\ 0\ failed$ ]]; then
    rm -rf "$KEEP/seed-$s"
  else
    bad=$((bad + 1))
    mkdir -p "$KEEP/seed-$s" && cp "$out" "$KEEP/seed-$s/test.out"
    grep -A3 '^FAIL' "$out" | sed 's/^/    /'
  fi
  echo "seed $s: $last"
  rm -f "$out"
done
echo "$runs runs of $B: $((runs - bad)) passed, $bad failed"
