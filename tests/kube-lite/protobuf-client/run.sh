#!/usr/bin/env bash
# Builds kl-protobuf-client (main.go: client-go with ContentType protobuf,
# as external-provisioner v6 runs it) against the client-go vendored in
# Kubernetes 1.20.2's source tree, offline, into the build directory, then
# runs it against a fresh kube-lite.
#
#   tests/kube-lite/protobuf-client/run.sh <build-dir>
#
# The tree is the one hack/kubernetes/build.sh unpacks into
# ${K8S_CACHE:-~/.cache/csi-sidecars/kubernetes}/<version>/gopath (built
# first when missing); its compiled packages are cached beside it, so only
# the first run on a machine pays for compiling client-go. GOPATH mode
# resolves vendor/ only below the tree that holds it, so the program gets a
# GOPATH of its own in the build directory whose vendor/ is a symlink to the
# tree's. Ends with the client's "N passed, N failed".
set -uo pipefail

B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
case $B in /*) ;; *) B=$ROOT/$B ;; esac
CACHE=${K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/csi-sidecars/kubernetes}
TREE=$CACHE/1.20.5+really1.20.2-1.1+deb12u1/gopath/src/k8s.io/kubernetes
OUT=$B/protobuf-client
BIN=$OUT/kl-protobuf-client

if [ ! -d "$TREE/vendor/k8s.io/client-go" ]; then
  "$ROOT/hack/kubernetes/build.sh" >/dev/null
fi
if ! command -v go >/dev/null 2>&1 || [ ! -d "$TREE/vendor/k8s.io/client-go" ]; then
  echo "FAIL needs go and the Kubernetes 1.20 tree of hack/kubernetes/build.sh ($TREE): run hack/install-deps.sh"
  echo "0 passed, 1 failed"
  exit 1
fi

PKG=$OUT/gopath/src/klpbclient
GOCACHE_DIR=$CACHE/1.20.5+really1.20.2-1.1+deb12u1/gocache-protobuf-client
mkdir -p "$PKG" "$GOCACHE_DIR"
cp "$ROOT/tests/kube-lite/protobuf-client/main.go" "$PKG/main.go"
ln -sfn "$TREE/vendor" "$PKG/vendor"
if ! (cd "$PKG" && GOPATH=$OUT/gopath GO111MODULE=off CGO_ENABLED=0 GOFLAGS= GOCACHE=$GOCACHE_DIR \
  go build -o "$BIN" . >"$OUT/build.log" 2>&1); then
  cat "$OUT/build.log"
  echo "FAIL build of kl-protobuf-client"
  echo "0 passed, 1 failed"
  exit 1
fi

KL=$B/bin/kube-lite
WORK=$(mktemp -d)
KLPID=
cleanup() {
  [ -n "$KLPID" ] && kill "$KLPID" 2>/dev/null && wait "$KLPID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
# No controllers: the client's watch sees only its own writes.
"$KL" --listen 127.0.0.1:0 --controllers= --write-kubeconfig "$WORK/kubeconfig" >"$WORK/out" 2>"$WORK/err" &
KLPID=$!
for _ in $(seq 100); do
  grep -q "serving on" "$WORK/out" 2>/dev/null && break
  sleep 0.1
done
if ! grep -q "serving on" "$WORK/out"; then
  cat "$WORK/err"
  echo "FAIL kube-lite did not start"
  echo "0 passed, 1 failed"
  exit 1
fi
"$BIN" --kubeconfig "$WORK/kubeconfig"
