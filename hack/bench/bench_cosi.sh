#!/usr/bin/env bash
# Benchmarks the COSI pair end to end: kube-lite (plain HTTP) with the CRDs of
# manifests/cosi + the example COSI driver (--sync=false: its fsync is not
# what is measured) + objectstorage-controller + objectstorage-sidecar, on
# this machine's cores. hack/bench/bench_cosi.py creates the objects (8
# keep-alive client threads), polls until every one is done and reads
# kube-lite's /metrics and the binaries' /proc files (see its header).
#
#   hack/bench/bench_cosi.sh [N]              N claims + N accesses at the high budget (1000)
#   N_DEFAULT=50 hack/bench/bench_cosi.sh     claims at upstream's default budget (100)
#   ONLY=default hack/bench/bench_cosi.sh     only the runs whose title has this word
#
# Runs, each against a fresh world:
#   1. upstream's default client budget (--kube-api-qps=5 --kube-api-burst=10 and
#      the default --worker-threads) with N_DEFAULT BucketClaims, then as many
#      BucketAccesses, then all deleted: at 5 requests/s a run of 1000 would take
#      most of an hour, and the figures per bucket do not change with N;
#   2. a high budget (--kube-api-qps=10000 --kube-api-burst=10000) with N.
# Each prints, per phase (claims ready, accesses granted, all deleted): objects/s,
# API object writes per object (Events apart) by binary, CPU ms per object by
# binary; and per binary idle (after start) and peak RSS, private dirty memory
# and threads. Upstream's writes for the same steps are printed beside ours
# (from its v0.2.2 code: 6 per greenfield claim, 4-5 per access). The only
# failures are correctness (an object not done in time), which exit 1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh
B=${B:-build}
N=${1:-${N:-1000}}
N_DEFAULT=${N_DEFAULT:-100}
ONLY=${ONLY:-}
DRIVER=cosi.example.com

make --no-print-directory -s B="$B" "$B/bin/kube-lite" "$B/bin/example-cosi-driver" \
  "$B/bin/objectstorage-controller" "$B/bin/objectstorage-sidecar" >/dev/null

WORK=$(mktemp -d)
KL_PID="" DRV_PID="" CTRL_PID="" SC_PID=""
cleanup() {
  stop "$SC_PID" objectstorage-sidecar
  stop "$CTRL_PID" objectstorage-controller
  stop "$DRV_PID" example-cosi-driver
  stop "$KL_PID" kube-lite
  KL_PID="" DRV_PID="" CTRL_PID="" SC_PID=""
}
trap 'cleanup; rm -rf "$WORK"' EXIT

# run TITLE N QPS BURST [extra flags for both binaries...]
run() {
  local title=$1 n=$2 qps=$3 burst=$4
  shift 4
  if [ -n "$ONLY" ] && [[ "$title" != *"$ONLY"* ]]; then return 0; fi
  local d="$WORK/run-$RANDOM"
  mkdir -p "$d/state"
  "$B/bin/kube-lite" --listen 127.0.0.1:0 --write-kubeconfig "$d/kubeconfig" --controllers "" \
    >"$d/kube-lite.log" 2>&1 &
  KL_PID=$!
  wait_serving "$d/kube-lite.log" || { echo "kube-lite did not start" >&2; exit 1; }
  local url
  url=$(sed -n 's/^kube-lite: serving on //p' "$d/kube-lite.log")
  kubectl --kubeconfig "$d/kubeconfig" apply -f manifests/cosi/crd/ >/dev/null
  kubectl --kubeconfig "$d/kubeconfig" wait --for condition=established --timeout=30s \
    crd/buckets.objectstorage.k8s.io crd/bucketclaims.objectstorage.k8s.io \
    crd/bucketaccesses.objectstorage.k8s.io >/dev/null
  "$B/bin/example-cosi-driver" --endpoint "unix://$d/cosi.sock" --drivername "$DRIVER" \
    --state-dir "$d/state" --sync=false >"$d/driver.log" 2>&1 &
  DRV_PID=$!
  for _ in $(seq 1 100); do [ -S "$d/cosi.sock" ] && break; sleep 0.05; done
  local pc ps
  pc=$(free_port)
  ps=$(free_port)
  "$B/bin/objectstorage-controller" --kubeconfig "$d/kubeconfig" --leader-election=false \
    --http-endpoint "127.0.0.1:$pc" \
    --kube-api-qps="$qps" --kube-api-burst="$burst" "$@" >"$d/controller.log" 2>&1 &
  CTRL_PID=$!
  "$B/bin/objectstorage-sidecar" --kubeconfig "$d/kubeconfig" --leader-election=false \
    --driver-addr "unix://$d/cosi.sock" --http-endpoint "127.0.0.1:$ps" --kube-api-qps="$qps" --kube-api-burst="$burst" "$@" \
    >"$d/sidecar.log" 2>&1 &
  SC_PID=$!
  echo
  echo "== $title: $n BucketClaims + $n BucketAccesses, --kube-api-qps=$qps --kube-api-burst=$burst $*"
  python3 hack/bench/bench_cosi.py --url "$url" --n "$n" --driver "$DRIVER" \
    --pid "controller=$CTRL_PID" --pid "sidecar=$SC_PID" --pid "driver=$DRV_PID" \
    --port "controller=$pc" --port "sidecar=$ps" --state "$d/state" \
    --timeout "$((n * 3 / (qps < 100 ? 1 : 50) + 120))" ||
    { echo "  (logs: $d)"; trap - EXIT; cleanup; exit 1; }
  cleanup
}

run "upstream's default budget" "$N_DEFAULT" 5 10
run "high budget" "$N" 10000 10000
