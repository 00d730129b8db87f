#!/usr/bin/env bash
# Benchmarks csi-provisioner end to end: kube-lite (plain HTTP, binder on) +
# example driver (no injected delay, --sync=false: the driver's fsync is not
# what is measured) + csi-provisioner, all on this machine's cores. Builds
# the project and hack/bench/bench_provision.c, which creates the claims
# at once (8 keep-alive client threads), follows them with watches and reads
# kube-lite's /metrics (see its header for how each figure is taken).
#
#   hack/bench/bench_provision.sh [N]        N claims for the high-budget run (1000)
#   N_DEFAULT=100 CACHED=100000 B=build hack/bench/bench_provision.sh
#   WORLD=kubernetes hack/bench/bench_provision.sh   the real control plane (below)
#   RUNS=0 hack/bench/bench_provision.sh     the memory cases (3.) only
#   ONLY=error-rate CACHED=0 hack/bench/bench_provision.sh   the runs whose title has these words
#   ONLY="=high client budget" ...           the run of exactly that title
#   QUIET_S=60 hack/bench/bench_provision.sh  threads and memory also after 60 s of quiet
#   PROV_WRAP="valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p" \
#     ONLY="high client budget" CACHED=0 hack/bench/bench_provision.sh 200
#                                            the provisioner under a wrapper: instruction
#                                            counts that repeat, unlike CPU time (the CPU and
#                                            memory lines then describe the wrapper)
#
# Runs, each against a fresh kube-lite, driver and provisioner:
#   1. upstream's default client budget --kube-api-qps=5 --kube-api-burst=10
#      (and the default 100 worker threads) with N_DEFAULT (100) claims only:
#      at 5 requests/s a run of 1000 would take ~20 minutes;
#   2. a high budget --kube-api-qps=10000 --kube-api-burst=10000
#      --worker-threads=100 with N claims;
#   then deletes every claim of the run and times the PVs going away;
#   2b. the same budget with kube-lite's binder off (the claims are created
#      with its annotation; done = PV created): the provisioner's own rate,
#      as the binder's cost grows with the number of PVs;
#   2c. N_FAULT (300) claims at the high budget, without and then with
#   kube-lite's --error-rate=0.2 (20% of API requests answered 500);
#   3. the provisioner's memory with CACHED (100000) PVCs + CACHED PVs in
#      kube-lite, bound, once of another driver and once of this one: VmRSS
#      once its informers synced (the "provisioner started" log line).
#      CACHED=0 skips it.
# WORLD=kubernetes: the same runs against the real Kubernetes 1.20.2 control
# plane of hack/kubernetes/cluster.sh (a fresh one per run; its
# kube-controller-manager's PV binder binds), over HTTPS with bearer tokens;
# the request counts are the provisioner's own, from kube-apiserver's audit
# log. Skipped there, each with a line saying why: 2b (kube-lite's binder
# off), 2c (kube-lite's fault injection) and 3 (100,000 objects of each kind
# through etcd).
#   WORLD=kubernetes N_DEFAULT=20 CACHED=0 B=build/bench hack/bench/bench_provision.sh 200
# Targets are printed next to the figures; the only failures are correctness
# (a claim not Bound, something not deleted), which exit 1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh
B=${B:-build}
N=${1:-${N:-1000}}
N_DEFAULT=${N_DEFAULT:-100}
N_FAULT=${N_FAULT:-300}
CACHED=${CACHED:-100000}
RUNS=${RUNS:-1}
DRIVER_NAME=hostpath.csi.example.com

make --no-print-directory -s B="$B" "$B/bin/kube-lite" "$B/bin/example-csi-driver" \
  "$B/bin/csi-provisioner" >/dev/null
mkdir -p "$B/bench"
make --no-print-directory -s B="$B" "$B/lib/libcsisidecar.a" >/dev/null
# shellcheck disable=SC2046 # pkg-config output is meant to split
cc -O2 -std=gnu11 -D_GNU_SOURCE -I. -Icommon $(pkg-config --cflags json-c libcurl) \
  hack/bench/bench_provision.c "$B/lib/libcsisidecar.a" $(pkg-config --libs json-c libcurl) \
  -lpthread -o "$B/bench/bench_provision"
HELPER="$B/bench/bench_provision"
# Pages of a file just written stay dirty in the page cache until written
# back, and a process mapping them counts them as its private dirty memory:
# a freshly linked binary would inflate the figure by its whole size.
sync

tmp=$(mktemp -d "${TMPDIR:-/tmp}/provision-bench.XXXXXX")
KL_PID=
DRV_PID=
PROV_PID=
status=0

stop_all() {
  stop "$PROV_PID" csi-provisioner
  PROV_PID=
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
    --nodeid=node-1 --plugin-caps=CONTROLLER_SERVICE --capacity=1Ei --sync=false \
    2>"$d/driver.log" &
  DRV_PID=$!
  for _ in $(seq 1 200); do
    grep -q 'serving on' "$d/driver.log" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "the driver did not start: $(cat "$d/driver.log")" >&2
  exit 1
}

# start_prov DIR FLAGS...: waits for the informers to sync ("provisioner started")
start_prov() {
  local d=$1
  shift
  # shellcheck disable=SC2086 # PROV_WRAP is a command line, meant to split
  ${PROV_WRAP:-} "$B/bin/csi-provisioner" --kubeconfig="$d/kubeconfig" --csi-address="$d/csi.sock" \
    --retry-interval-start=50ms --timeout=10s "$@" 2>"$d/prov.log" &
  PROV_PID=$!
  for _ in $(seq 1 6000); do
    grep -q 'provisioner started' "$d/prov.log" 2>/dev/null && return 0
    kill -0 "$PROV_PID" 2>/dev/null || break
    sleep 0.05
  done
  echo "the provisioner did not start: $(tail -n 5 "$d/prov.log")" >&2
  exit 1
}

kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
dirty() { awk '$1 == "Private_Dirty:" {s += $2} END {print s + 0}' "/proc/$1/smaps_rollup"; }
# threads, VmRSS and private dirty memory of the provisioner, one line
proc_line() {
  echo "threads $(kib "$PROV_PID" Threads), VmRSS $(mib "$(kib "$PROV_PID" VmRSS)") MiB, private dirty $(mib "$(dirty "$PROV_PID")") MiB"
}
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

# start_world DIR: kube-lite with KL_ARGS, or the real control plane; sets
# URL and AUTH_ARGS (the helper's credentials and where it counts requests)
AUTH_ARGS=()
start_world() {
  if [ "$WORLD" = kubernetes ]; then
    start_kubernetes "$1"
    AUTH_ARGS=(--cacert="$CA" --token="$ADMIN_TOKEN" --audit-log="$AUDIT" --audit-user="$SIDECAR_USER")
  else
    start_kube_lite "$1" "${KL_ARGS[@]}"
    AUTH_ARGS=()
  fi
}

# (retried: with --error-rate kube-lite answers some creates 500)
storage_class() {
  local code
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    code=$(api_curl -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
      --data "{\"apiVersion\":\"storage.k8s.io/v1\",\"kind\":\"StorageClass\",\"metadata\":{\"name\":\"bench\"},\"provisioner\":\"$DRIVER_NAME\",\"reclaimPolicy\":\"Delete\",\"volumeBindingMode\":\"Immediate\"}" \
      "$URL/apis/storage.k8s.io/v1/storageclasses") || true
    case $code in 201 | 409) return 0 ;; esac
  done
  echo "could not create the StorageClass (last answer: $code)" >&2
  exit 1
}

# run_case TITLE COUNT PROVISIONER-FLAGS...; KL_ARGS and HELPER_ARGS (arrays)
# go to kube-lite and to the helper.
KL_ARGS=()
HELPER_ARGS=()
# ONLY=<words of a title>: those runs alone; ONLY==<title>: that one.
selected() {
  if [[ "${ONLY:-}" == =* ]]; then
    [ "=$1" = "$ONLY" ]
  else
    [ -z "${ONLY:-}" ] || [[ "$1" == *"$ONLY"* ]]
  fi
}
# skip_case TITLE WHY: the line that says a run has no meaning on this world
skip_case() {
  selected "$1" || return 0
  echo "== $1: skipped on WORLD=$WORLD: $2"
}
run_case() {
  local title=$1 count=$2
  shift 2
  selected "$title" || return 0
  local d
  d=$(mktemp -d "$tmp/case.XXXXXX")
  echo "== $title: $count claims; csi-provisioner $* [$WORLD; load average $(load)]"
  start_world "$d"
  start_driver "$d"
  storage_class
  start_prov "$d" "$@"
  echo "  provisioner at start (empty cluster, informers synced): VmRSS $(mib "$(kib "$PROV_PID" VmRSS)") MiB" \
    "(RssAnon $(mib "$(kib "$PROV_PID" RssAnon)") MiB, RssFile $(mib "$(kib "$PROV_PID" RssFile)") MiB: shared libraries)"
  sleep 1
  echo "  provisioner idle: $(proc_line)"
  # (the helper samples the provisioner's threads while the run goes on)
  if ! "$HELPER" run --url="$URL" --count="$count" --prov-pid="$PROV_PID" --state-dir="$d/state" \
    --timeout=1800 "${HELPER_ARGS[@]}" "${AUTH_ARGS[@]}"; then
    status=1
    echo "  FAILED (see above); provisioner log tail:"
    grep -v '^I' "$d/prov.log" | tail -n 10 | sed 's/^/    /'
  fi
  echo "  provisioner right after the run: $(proc_line); load average $(load)"
  if [ "${QUIET_S:-0}" -gt 0 ]; then
    sleep "$QUIET_S"
    echo "  provisioner after ${QUIET_S} s of quiet: $(proc_line)"
  fi
  stop_all
  rm -rf "$d"
}

echo "csi-provisioner benchmark on $(nproc) cores ($(uname -m)); $WORLD, example driver," \
  "provisioner and load generator share them; load average $(load)"
if [ "$RUNS" != 0 ]; then
  run_case "upstream default client budget (N=$N_DEFAULT to keep it short)" "$N_DEFAULT" \
    --kube-api-qps=5 --kube-api-burst=10
  run_case "high client budget" "$N" \
    --kube-api-qps=10000 --kube-api-burst=10000 --worker-threads=100
  # The same without kube-lite's binder, whose cost grows with the number of
  # PVs (it scans them for every claim): the provisioner's own throughput.
  ALONE="high client budget, provisioner alone (kube-lite binder off, claims created with the storage-provisioner annotation; done = PV created and claim released; no deletion phase)"
  REF="high client budget, fault-free reference for the next run"
  FAULT="high client budget, kube-lite --error-rate=0.2 (20% of API requests answered 500)"
  if [ "$WORLD" = kubernetes ]; then
    skip_case "$ALONE" "it times the provisioner without kube-lite's binder; kube-controller-manager's binder is the real one and is what the run above measures"
    skip_case "$REF" "it is the reference of the fault-injection run, which is skipped"
    skip_case "$FAULT" "kube-apiserver has no fault injection"
  else
    KL_ARGS=(--controllers=)
    HELPER_ARGS=(--no-binder)
    run_case "$ALONE" "$N" --kube-api-qps=10000 --kube-api-burst=10000 --worker-threads=100
    KL_ARGS=()
    HELPER_ARGS=()
    # Transient API errors: kube-lite answers 20% of requests (any verb) 500.
    # Target: N_FAULT claims bound, and deleted, in at most twice the
    # fault-free time plus 2 s (the request path retries them in place).
    run_case "$REF" "$N_FAULT" --kube-api-qps=10000 --kube-api-burst=10000 --worker-threads=100
    KL_ARGS=(--error-rate=0.2)
    run_case "$FAULT" "$N_FAULT" --kube-api-qps=10000 --kube-api-burst=10000 --worker-threads=100
    KL_ARGS=()
  fi
fi

# cache_case OWNER TITLE: the provisioner's memory with CACHED bound PVCs and
# PVs of driver OWNER.
cache_case() {
  local owner=$1 title=$2 d
  d=$(mktemp -d "$tmp/cache.XXXXXX")
  echo "== provisioner memory with $CACHED PVCs + $CACHED PVs $title"
  # No built-in controllers: the objects are created bound and stay as they are.
  start_kube_lite "$d" --controllers= --history=1000
  "$HELPER" fill --url="$URL" --count="$CACHED" --fill-driver="$owner" || status=1
  start_driver "$d"
  t0=$(date +%s.%N)
  start_prov "$d" --kube-api-qps=10000 --kube-api-burst=10000 --worker-threads=100
  t1=$(date +%s.%N)
  rss=$(kib "$PROV_PID" VmRSS)
  hwm=$(kib "$PROV_PID" VmHWM)
  anon=$(kib "$PROV_PID" RssAnon)
  sleep 2
  rss2=$(kib "$PROV_PID" VmRSS)
  echo "  informers synced $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s after start"
  echo "  provisioner VmRSS once synced: $(mib "$rss") MiB (RssAnon $(mib "$anon") MiB; $(mib "$rss2") MiB 2 s later), peak VmHWM $(mib "$hwm") MiB (target <= 100 MB)"
  stop_all
}

if [ "$CACHED" -gt 0 ] && [ "$WORLD" = kubernetes ]; then
  echo "== provisioner memory with $CACHED PVCs + $CACHED PVs: skipped on WORLD=$WORLD:" \
    "filling etcd with $((2 * CACHED)) objects through kube-apiserver takes ages; kube-lite's figure" \
    "is the informers' memory, which does not depend on the server"
elif [ "$CACHED" -gt 0 ]; then
  cache_case other.csi.example.com "of another driver (not cached: filtered out)"
  cache_case "$DRIVER_NAME" "of this driver, all Bound (settled: neither is cached)"
fi
exit "$status"
