#!/usr/bin/env bash
# Benchmarks the example CSI driver's CreateVolume path: builds
# hack/bench/bench_driver_create.c against the project library, starts the
# driver on a fresh state directory with a large pool, runs CALLS (10000)
# CreateVolume calls from THREADS (16) threads, stops the driver and prints
# the figure. Extra arguments go to the driver, e.g. --sync=false.
#
#   hack/bench/run-driver-bench.sh [driver flags...]
#   B=build CALLS=10000 THREADS=16 hack/bench/run-driver-bench.sh --sync=false
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${B:-build}
CALLS=${CALLS:-10000}
THREADS=${THREADS:-16}
PKGS=(grpc libprotobuf-c json-c libcurl yaml-0.1 libmicrohttpd)

make --no-print-directory B="$B" "$B/bin/example-csi-driver" "$B/lib/libcsisidecar.a" >/dev/null

tmp=$(mktemp -d "${TMPDIR:-/tmp}/driver-bench.XXXXXX")
pid=
# shellcheck disable=SC2317 # called through the EXIT trap
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck disable=SC2046 # pkg-config output is meant to split
cc -O2 -std=gnu11 -D_GNU_SOURCE -Icommon -I"$B/gen" $(pkg-config --cflags "${PKGS[@]}") \
  hack/bench/bench_driver_create.c "$B/lib/libcsisidecar.a" \
  $(pkg-config --libs "${PKGS[@]}") -lpthread -o "$tmp/bench_driver_create"

"$B/bin/example-csi-driver" --endpoint="unix://$tmp/csi.sock" --state-dir="$tmp/state" \
  --capacity=1Pi "$@" 2>"$tmp/driver.log" &
pid=$!

status=0
"$tmp/bench_driver_create" "unix://$tmp/csi.sock" "$CALLS" "$THREADS" || status=$?

kill -TERM "$pid"
wait "$pid" || { echo "driver exited with $?; its log:"; tail -n 20 "$tmp/driver.log"; status=1; }
pid=
exit "$status"
