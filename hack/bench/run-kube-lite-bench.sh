#!/usr/bin/env bash
# Benchmarks kube-lite: builds the project and hack/bench/bench_kube_lite.c,
# then runs the benchmark, which spawns fresh kube-lite servers itself
# (start time, creates/s and gets/s, watch delivery latency, RSS at 200,000
# objects) and prints one figure per line next to its target. Exits 1 when
# any request or delivery check failed. Extra arguments go to the benchmark,
# e.g. --only=rw,watch --ops=10000 --server-arg=--threads=2.
#
#   hack/bench/run-kube-lite-bench.sh [bench flags...]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

make -s
mkdir -p build/bench
# shellcheck disable=SC2046 # pkg-config output is meant to split
cc -O2 -std=gnu11 -D_GNU_SOURCE -Icommon -Ihack -Ibuild/gen $(pkg-config --cflags json-c libcurl) \
  hack/bench/bench_kube_lite.c build/lib/libcsisidecar.a \
  $(pkg-config --libs json-c libcurl) -lpthread -o build/bench/bench_kube_lite

exec build/bench/bench_kube_lite build/bin/kube-lite "$@"
