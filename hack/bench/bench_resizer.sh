#!/usr/bin/env bash
# Benchmarks csi-resizer end to end: kube-lite (plain HTTP, no built-in
# controllers: nobody but the resizer writes during a run) + the example
# driver (its default capabilities, --sync=false: its fsync is not what is
# measured) + csi-resizer, on this machine's cores. hack/bench/bench_resizer.py
# creates N claims bound to N PVs directly through the API (and the driver's
# volumes in its state file) before the driver and the resizer start, then
# grows every claim from 1Gi to 2Gi at once and polls until each resize is
# finished on the controller side (see its header for how each figure is taken).
#
#   hack/bench/bench_resizer.sh [N]               N claims in each run (1000)
#   N_DEFAULT=100 hack/bench/bench_resizer.sh     fewer at upstream's default budget (N)
#   ONLY=high hack/bench/bench_resizer.sh         only the runs whose title has this word
#   MODE=Block hack/bench/bench_resizer.sh        raw block claims (below)
#
# Runs, each against a fresh world:
#   1. upstream's default client budget (--kube-api-qps=5 --kube-api-burst=10,
#      the default --workers=10) with N_DEFAULT claims: at 3 writes per resize
#      a run of 1000 takes about 10 minutes;
#   2. a high budget (--kube-api-qps=10000 --kube-api-burst=10000, default
#      --workers) with N claims.
# MODE=Filesystem (default): the example driver has node EXPAND_VOLUME, so it
# answers node_expansion_required for a mounted volume and a resize is done
# on the controller side when the PV has the new capacity and the claim the
# FileSystemResizePending condition. MODE=Block: no node expansion; done when
# the claim's status.capacity is the new size. Each run prints resizes/s, API
# object writes and Events per resize (upstream's, read from its code, beside
# them), the resizer's CPU per resize and its idle and peak memory and
# threads. The only failure is correctness (a resize not finished), exit 1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh
B=${B:-build}
N=${1:-${N:-1000}}
N_DEFAULT=${N_DEFAULT:-$N}
ONLY=${ONLY:-}
MODE=${MODE:-Filesystem}
DRIVER=hostpath.csi.example.com

make --no-print-directory -s B="$B" "$B/bin/kube-lite" "$B/bin/example-csi-driver" "$B/bin/csi-resizer" >/dev/null
# A freshly linked binary's pages are dirty in the page cache until written
# back and would count as the resizer's private dirty memory.
sync

WORK=$(mktemp -d "${TMPDIR:-/tmp}/resizer-bench.XXXXXX")
KL_PID="" DRV_PID="" RSZ_PID=""
stop_all() {
  stop "$RSZ_PID" csi-resizer
  stop "$DRV_PID" example-csi-driver
  stop "$KL_PID" kube-lite
  KL_PID="" DRV_PID="" RSZ_PID=""
}
trap 'stop_all; rm -rf "$WORK"' EXIT

# run TITLE N QPS BURST [csi-resizer flags...]
run() {
  local title=$1 n=$2 qps=$3 burst=$4
  shift 4
  if [ -n "$ONLY" ] && [[ "$title" != *"$ONLY"* ]]; then return 0; fi
  local d
  d=$(mktemp -d "$WORK/run.XXXXXX")
  mkdir -p "$d/state"
  echo
  echo "== $title: $n $MODE claims 1Gi -> 2Gi; csi-resizer --kube-api-qps=$qps --kube-api-burst=$burst $* [load average $(load)]"
  start_kube_lite "$d" --controllers=
  python3 hack/bench/bench_resizer.py setup --url "$URL" --n "$n" --mode "$MODE" --driver "$DRIVER" \
    --state "$d/state"
  "$B/bin/example-csi-driver" --endpoint="unix://$d/csi.sock" --state-dir="$d/state" \
    --drivername="$DRIVER" --nodeid=node-1 --capacity=1Ei --sync=false 2>"$d/driver.log" &
  DRV_PID=$!
  wait_serving "$d/driver.log" || { echo "the driver did not start: $(cat "$d/driver.log")" >&2; exit 1; }
  local port
  port=$(free_port)
  "$B/bin/csi-resizer" --kubeconfig="$d/kubeconfig" --csi-address="$d/csi.sock" \
    --http-endpoint="127.0.0.1:$port" --kube-api-qps="$qps" --kube-api-burst="$burst" "$@" \
    2>"$d/resizer.log" &
  RSZ_PID=$!
  for _ in $(seq 1 1200); do
    grep -q 'Starting external resizer' "$d/resizer.log" 2>/dev/null && break
    kill -0 "$RSZ_PID" 2>/dev/null || break
    sleep 0.05
  done
  grep -q 'Starting external resizer' "$d/resizer.log" ||
    { echo "the resizer did not start: $(tail -n 5 "$d/resizer.log")" >&2; exit 1; }
  if ! python3 hack/bench/bench_resizer.py run --url "$URL" --n "$n" --mode "$MODE" \
    --pid "resizer=$RSZ_PID" --pid "driver=$DRV_PID" --port "resizer=$port" --qps "$qps" --burst "$burst" \
    --timeout "$((n * 3 / (qps < 100 ? 4 : 50) + 120))"; then
    echo "  FAILED; resizer log tail:"
    grep -v '^I' "$d/resizer.log" | tail -n 10 | sed 's/^/    /'
    stop_all
    exit 1
  fi
  echo "  load average after the run: $(load)"
  stop_all
  rm -rf "$d"
}

echo "csi-resizer benchmark on $(nproc) cores ($(uname -m)); kube-lite, example driver, resizer and" \
  "load generator share them; load average $(load)"
run "upstream's default budget" "$N_DEFAULT" 5 10
run "high budget" "$N" 10000 10000
echo
echo "Upstream external-resizer (v2.2.1, read from pkg/controller): 3 object writes per resize (claim status"
echo "patch, PV patch, claim status patch) and 2 Events, every one through its client rate limiter; at qps 5"
echo "that is at most 1 resize/s once the burst is spent. Here Events take spare tokens only."
