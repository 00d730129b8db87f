#!/usr/bin/env bash
# CPU floor of one provisioned + deleted volume: builds
# hack/bench/bench_floor.c against the project library, starts a fresh
# kube-lite (plain HTTP on 127.0.0.1, a free port, no built-in controllers:
# only its answers are wanted) and the example driver (unix socket,
# --sync=false) in a temporary directory, runs the single-threaded loops and
# stops both on any exit. Arguments go to bench_floor (see its header), e.g.
# --n=5000 --events=2.
#
#   hack/bench/bench_floor.sh [bench_floor flags...]
#   B=build hack/bench/bench_floor.sh --n=2000 --warmup=100
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${B:-build}
PKGS=(grpc libprotobuf-c json-c libcurl yaml-0.1 libmicrohttpd)

make --no-print-directory -s B="$B" "$B/bin/kube-lite" "$B/bin/example-csi-driver" \
  "$B/lib/libcsisidecar.a" >/dev/null

# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/floor-bench.XXXXXX")
KL_PID=
DRV_PID=

# shellcheck disable=SC2317 # called through the EXIT trap
cleanup() {
  stop "$DRV_PID" example-csi-driver
  DRV_PID=
  stop "$KL_PID" kube-lite
  KL_PID=
  rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck disable=SC2046 # pkg-config output is meant to split
cc -O2 -std=gnu11 -D_GNU_SOURCE -I. -Icommon -I"$B/gen" $(pkg-config --cflags "${PKGS[@]}") \
  hack/bench/bench_floor.c "$B/lib/libcsisidecar.a" \
  $(pkg-config --libs "${PKGS[@]}") -lpthread -o "$tmp/bench_floor"

"$B/bin/kube-lite" --listen 127.0.0.1:0 --write-kubeconfig "$tmp/kubeconfig" --controllers= \
  >"$tmp/kube-lite.out" 2>"$tmp/kube-lite.log" &
KL_PID=$!
wait_serving "$tmp/kube-lite.out" ||
  { echo "kube-lite did not start: $(cat "$tmp/kube-lite.log")" >&2; exit 1; }

"$B/bin/example-csi-driver" --endpoint="unix://$tmp/csi.sock" --state-dir="$tmp/state" \
  --nodeid=node-1 --plugin-caps=CONTROLLER_SERVICE --capacity=1Ei --sync=false \
  2>"$tmp/driver.log" &
DRV_PID=$!
wait_serving "$tmp/driver.log" ||
  { echo "the driver did not start: $(cat "$tmp/driver.log")" >&2; exit 1; }

echo "bench_floor on $(nproc) cores ($(uname -m)); kube-lite and the driver run beside it"
status=0
"$tmp/bench_floor" --kubeconfig="$tmp/kubeconfig" --endpoint="unix://$tmp/csi.sock" "$@" ||
  status=$?
if [ "$status" -ne 0 ]; then
  echo "FAILED (exit $status); kube-lite log tail:" >&2
  tail -n 5 "$tmp/kube-lite.log" >&2
  echo "driver log tail:" >&2
  tail -n 5 "$tmp/driver.log" >&2
  status=1
fi
exit "$status"
