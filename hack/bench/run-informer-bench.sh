#!/usr/bin/env bash
# Informer cache size per object and watch event throughput (issue: common/kube).
#   hack/bench/run-informer-bench.sh [objects]     (default 100000)
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s
mkdir -p build/bench
cc -O2 -std=gnu11 -D_GNU_SOURCE -Icommon -Ibuild/gen $(pkg-config --cflags json-c libcurl) \
  hack/bench/bench_informer.c build/lib/libcsisidecar.a \
  $(pkg-config --libs grpc libprotobuf-c json-c libcurl yaml-0.1 libmicrohttpd libcrypto) -lpthread \
  -o build/bench/bench_informer
build/bench/bench_informer build/bin/kube-lite "${1:-100000}"
