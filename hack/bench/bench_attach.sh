#!/usr/bin/env bash
# Benchmarks csi-attacher end to end: kube-lite (plain HTTP, no built-in
# controllers) + example driver (no injected delay, --sync=false, node ids
# node-1 and node-2) + csi-attacher, all on this machine's cores. Builds the
# project and hack/bench/bench_attach.c (against common/kube), which sets up
# the PVs, creates and deletes the VolumeAttachments at once (8 client
# threads), follows them with watches and reads kube-lite's /metrics (see
# its header for how each figure is taken).
#
#   hack/bench/bench_attach.sh [N]        N VolumeAttachments per round at the high budget (1000)
#   N_DEFAULT=100 B=build hack/bench/bench_attach.sh
#   RUNS=high hack/bench/bench_attach.sh  only the high-budget case (RUNS=default: only that one)
#
# Cases, each against a fresh kube-lite, driver and attacher; in each, N
# ReadWriteMany PVs exist before the attacher starts, then:
#   first attach (worker-1), later attach of the same PVs (worker-2), detach
#   of the worker-2 VAs, last detach (worker-1), PV deletion;
#   1. upstream's default client budget --kube-api-qps=5 --kube-api-burst=10
#      and the default --worker-threads (10), with N_DEFAULT (100) VAs only:
#      at 5 requests/s, 1,000 attaches would take ~10 minutes; the figures
#      include attaches/s as a fraction of the physical limit that budget
#      allows for the requests made;
#   2. a high budget --kube-api-qps=10000 --kube-api-burst=10000
#      --worker-threads=HIGH_WORKERS (10, upstream's default: the attacher runs
#      3 x that many workers) with N VAs: memory at N attached.
# WORLD=kubernetes: the same cases against the real Kubernetes 1.20.2 control
# plane of hack/kubernetes/cluster.sh (a fresh one per case; its
# kube-controller-manager runs the attach-detach controller, which leaves
# VolumeAttachments it did not create alone), over HTTPS with bearer tokens;
# the request counts are the attacher's own, from kube-apiserver's audit log.
# Nothing is skipped there.
#   WORLD=kubernetes N_DEFAULT=20 B=build/bench hack/bench/bench_attach.sh 200
# It asserts nothing about time; the only failures are correctness (an
# operation not done, a publication left in the driver), which exit 1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh
B=${B:-build}
N=${1:-${N:-1000}}
N_DEFAULT=${N_DEFAULT:-100}
HIGH_WORKERS=${HIGH_WORKERS:-10}
RUNS=${RUNS:-all}

make --no-print-directory -s B="$B" "$B/bin/kube-lite" "$B/bin/example-csi-driver" \
  "$B/bin/csi-attacher" "$B/lib/libcsisidecar.a" >/dev/null
mkdir -p "$B/bench"
PKGS="grpc libprotobuf-c json-c libcurl yaml-0.1 libmicrohttpd libcrypto"
# shellcheck disable=SC2046,SC2086 # pkg-config output is meant to split
cc -O2 -std=gnu11 -D_GNU_SOURCE -I. -Icommon -I"$B/gen" $(pkg-config --cflags $PKGS) \
  hack/bench/bench_attach.c "$B/lib/libcsisidecar.a" $(pkg-config --libs $PKGS) -lpthread \
  -o "$B/bench/bench_attach"
HELPER="$B/bench/bench_attach"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/attach-bench.XXXXXX")
KL_PID=
DRV_PID=
ATT_PID=
status=0

stop_all() {
  stop "$ATT_PID" csi-attacher
  ATT_PID=
  stop "$DRV_PID" example-csi-driver
  DRV_PID=
  stop "$KL_PID" kube-lite
  KL_PID=
  stop_kubernetes
}

# shellcheck disable=SC2317 # called through the EXIT trap
cleanup() {
  stop_all
  rm -rf "$tmp"
}
trap cleanup EXIT

start_driver() {
  local d=$1
  "$B/bin/example-csi-driver" --endpoint="unix://$d/csi.sock" --state-dir="$d/state" \
    --nodeid=node-1 --known-nodes=node-2 --plugin-caps=CONTROLLER_SERVICE --capacity=1Ei \
    --sync=false 2>"$d/driver.log" &
  DRV_PID=$!
  for _ in $(seq 1 600); do
    grep -q 'serving on' "$d/driver.log" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "the driver did not start: $(cat "$d/driver.log")" >&2
  exit 1
}

# start_world DIR: kube-lite, or the real control plane; sets URL, HELPER_KC
# (the benchmark's kubeconfig) and AUDIT_ARGS (where the helper counts)
AUDIT_ARGS=()
start_world() {
  if [ "$WORLD" = kubernetes ]; then
    start_kubernetes "$1"
    HELPER_KC=$1/admin.kubeconfig
    AUDIT_ARGS=(--audit-log="$AUDIT" --audit-user="$SIDECAR_USER")
  else
    start_kube_lite "$1" --controllers=
    HELPER_KC=$1/kubeconfig
    AUDIT_ARGS=()
  fi
}

# start_attacher DIR FLAGS...: waits until it watches VolumeAttachments,
# PVs and CSINodes (kube-lite counts the watch requests; kube-apiserver logs
# a watch when it ends: there its "attacher started" line, once its
# informers synced), then 1 s more.
start_attacher() {
  local d=$1
  shift
  "$B/bin/csi-attacher" --kubeconfig="$d/kubeconfig" --csi-address="$d/csi.sock" "$@" \
    2>"$d/attacher.log" &
  ATT_PID=$!
  local m
  if [ "$WORLD" = kubernetes ]; then
    for _ in $(seq 1 1200); do
      if grep -q 'attacher started' "$d/attacher.log" 2>/dev/null; then
        sleep 1
        return 0
      fi
      kill -0 "$ATT_PID" 2>/dev/null || break
      sleep 0.05
    done
    echo "the attacher did not start: $(tail -n 5 "$d/attacher.log")" >&2
    exit 1
  fi
  for _ in $(seq 1 600); do
    m=$(curl -s --max-time 5 "$URL/metrics")
    if [[ "$m" == *'verb="watch",resource="volumeattachments"'* &&
      "$m" == *'verb="watch",resource="persistentvolumes"'* &&
      "$m" == *'verb="watch",resource="csinodes"'* ]]; then
      sleep 1
      return 0
    fi
    kill -0 "$ATT_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "the attacher did not start watching: $(tail -n 5 "$d/attacher.log")" >&2
  exit 1
}

# run_case TITLE COUNT QPS BURST ATTACHER-FLAGS...
run_case() {
  local title=$1 count=$2 qps=$3 burst=$4
  shift 4
  local d
  d=$(mktemp -d "$tmp/case.XXXXXX")
  mkdir -p "$d/state"
  echo "=== $title: $count VolumeAttachments per round; csi-attacher --kube-api-qps=$qps --kube-api-burst=$burst $* [$WORLD; load average $(load)]"
  start_world "$d"
  "$HELPER" setup --kubeconfig="$HELPER_KC" --count="$count" --state-dir="$d/state" || status=1
  start_driver "$d"
  start_attacher "$d" --kube-api-qps="$qps" --kube-api-burst="$burst" "$@"
  if ! "$HELPER" run --kubeconfig="$HELPER_KC" --count="$count" --att-pid="$ATT_PID" \
    --state-dir="$d/state" --qps="$qps" --burst="$burst" --timeout=1800 "${AUDIT_ARGS[@]}"; then
    status=1
    echo "  FAILED (see above); attacher log tail:"
    grep -v '^I' "$d/attacher.log" | tail -n 10 | sed 's/^/    /'
  fi
  echo "  load average after the case: $(load)"
  stop_all
  rm -rf "$d"
}

echo "csi-attacher benchmark on $(nproc) cores ($(uname -m)); $WORLD, example driver," \
  "attacher and load generator share them; load average $(load)"
if [ "$RUNS" = all ] || [ "$RUNS" = default ]; then
  run_case "upstream default client budget (default worker threads; N=$N_DEFAULT to keep it short)" \
    "$N_DEFAULT" 5 10
fi
if [ "$RUNS" = all ] || [ "$RUNS" = high ]; then
  run_case "high client budget" "$N" 10000 10000 --worker-threads="$HIGH_WORKERS"
fi
exit "$status"
