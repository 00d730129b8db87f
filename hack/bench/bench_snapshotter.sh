#!/usr/bin/env bash
# Benchmarks csi-snapshotter end to end: kube-lite (plain HTTP, no built-in
# controllers: nobody but the snapshotter and the benchmark writes; it serves
# snapshot.storage.k8s.io v1 built in) + the example driver (its default
# capabilities, --sync=false: its fsync is not what is measured) +
# csi-snapshotter, on this machine's cores. hack/bench/bench_snapshotter.py
# plays upstream's snapshot-controller: it writes N dynamic
# VolumeSnapshotContents at once and polls until every one is readyToUse,
# then deletes them all (the being-deleted annotation, then DELETE) and polls
# until they are gone (see its header for how each figure is taken).
#
#   hack/bench/bench_snapshotter.sh [N]               N snapshots in each run (1000)
#   N_DEFAULT=100 hack/bench/bench_snapshotter.sh     fewer at upstream's default budget (N)
#   ONLY=high hack/bench/bench_snapshotter.sh         only the runs whose title has this word
#
# Runs, each against a fresh world:
#   1. upstream's default client budget (--kube-api-qps=5 --kube-api-burst=10,
#      the default --worker-threads=10) with N_DEFAULT snapshots: at 3 writes
#      per snapshot and 2 per deletion a run of 1000 takes about 17 minutes;
#   2. a high budget (--kube-api-qps=10000 --kube-api-burst=10000, default
#      --worker-threads) with N snapshots.
# Each prints snapshots/s (created and deleted), API object writes and Events
# per snapshot (upstream's, read from its code, beside them), the
# snapshotter's CPU per snapshot and its idle and peak memory and threads.
# The only failure is correctness (a snapshot not ready or a content not
# gone), exit 1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh
B=${B:-build}
N=${1:-${N:-1000}}
N_DEFAULT=${N_DEFAULT:-$N}
ONLY=${ONLY:-}
DRIVER=hostpath.csi.example.com

make --no-print-directory -s B="$B" "$B/bin/kube-lite" "$B/bin/example-csi-driver" "$B/bin/csi-snapshotter" >/dev/null
# A freshly linked binary's pages are dirty in the page cache until written
# back and would count as the snapshotter's private dirty memory.
sync

WORK=$(mktemp -d "${TMPDIR:-/tmp}/snapshotter-bench.XXXXXX")
KL_PID="" DRV_PID="" SNAP_PID=""
stop_all() {
  stop "$SNAP_PID" csi-snapshotter
  stop "$DRV_PID" example-csi-driver
  stop "$KL_PID" kube-lite
  KL_PID="" DRV_PID="" SNAP_PID=""
}
trap 'stop_all; rm -rf "$WORK"' EXIT

# run TITLE N QPS BURST [csi-snapshotter flags...]
run() {
  local title=$1 n=$2 qps=$3 burst=$4
  shift 4
  if [ -n "$ONLY" ] && [[ "$title" != *"$ONLY"* ]]; then return 0; fi
  local d
  d=$(mktemp -d "$WORK/run.XXXXXX")
  mkdir -p "$d/state"
  echo
  echo "== $title: $n snapshots created, then deleted; csi-snapshotter --kube-api-qps=$qps --kube-api-burst=$burst $* [load average $(load)]"
  start_kube_lite "$d" --controllers=
  python3 hack/bench/bench_snapshotter.py setup --url "$URL" --driver "$DRIVER" --state "$d/state"
  "$B/bin/example-csi-driver" --endpoint="unix://$d/csi.sock" --state-dir="$d/state" \
    --drivername="$DRIVER" --nodeid=node-1 --capacity=1Ei --sync=false 2>"$d/driver.log" &
  DRV_PID=$!
  wait_serving "$d/driver.log" || { echo "the driver did not start: $(cat "$d/driver.log")" >&2; exit 1; }
  local port
  port=$(free_port)
  "$B/bin/csi-snapshotter" --kubeconfig="$d/kubeconfig" --csi-address="$d/csi.sock" \
    --http-endpoint="127.0.0.1:$port" --kube-api-qps="$qps" --kube-api-burst="$burst" "$@" \
    2>"$d/snapshotter.log" &
  SNAP_PID=$!
  for _ in $(seq 1 1200); do
    grep -q 'Starting CSI snapshotter' "$d/snapshotter.log" 2>/dev/null && break
    kill -0 "$SNAP_PID" 2>/dev/null || break
    sleep 0.05
  done
  grep -q 'Starting CSI snapshotter' "$d/snapshotter.log" ||
    { echo "the snapshotter did not start: $(tail -n 5 "$d/snapshotter.log")" >&2; exit 1; }
  if ! python3 hack/bench/bench_snapshotter.py run --url "$URL" --n "$n" --driver "$DRIVER" --state "$d/state" \
    --pid "snapshotter=$SNAP_PID" --pid "driver=$DRV_PID" --port "snapshotter=$port" --qps "$qps" --burst "$burst" \
    --timeout "$((n * 3 / (qps < 100 ? 4 : 50) + 120))"; then
    echo "  FAILED; snapshotter log tail:"
    grep -v '^I' "$d/snapshotter.log" | tail -n 10 | sed 's/^/    /'
    stop_all
    exit 1
  fi
  echo "  load average after the run: $(load)"
  stop_all
  rm -rf "$d"
}

echo "csi-snapshotter benchmark on $(nproc) cores ($(uname -m)); kube-lite, example driver, snapshotter and" \
  "load generator share them; load average $(load)"
run "upstream's default budget" "$N_DEFAULT" 5 10
run "high budget" "$N" 10000 10000
echo
echo "Upstream external-snapshotter (v8.6.0, read from pkg/sidecar-controller): per dynamic snapshot 3 object"
echo "writes (being-created annotation, status, annotation removed) + 1 GET, no Event; per deletion 2 writes"
echo "(status cleared, finalizer) + 1 GET; every one through its client rate limiter: at qps 5 at most"
echo "1.25 snapshots/s and 1.67 deletions/s once the burst is spent."
