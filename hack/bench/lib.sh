#!/usr/bin/env bash
# Sourced by the benchmarks under hack/bench: what starting and stopping the
# local world takes in each of them.

# stop PID [NAME]: SIGTERM, SIGKILL after 20 s; a nonzero exit is reported
# when NAME is given.
# shellcheck disable=SC2317 # called from the scripts' cleanup traps
stop() {
  local pid=$1 name=${2:-} rc
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    [ -z "$name" ] || echo "  $name did not stop within 20 s of SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rc=0
  wait "$pid" 2>/dev/null || rc=$?
  if [ -n "$name" ] && [ "$rc" -ne 0 ]; then
    echo "  $name exited with status $rc" >&2
  fi
}

# wait_serving FILE: 0 once FILE says "serving on" (kube-lite's and the
# example driver's ready line), 1 after 10 s without it.
wait_serving() {
  local i
  for i in $(seq 1 200); do
    grep -q 'serving on' "$1" 2>/dev/null && return 0
    [ "$i" = 200 ] || sleep 0.05
  done
  return 1
}

# free_port: a free TCP port on the loopback interface
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_kube_lite DIR [kube-lite options]: kube-lite on a free loopback port
# (plain HTTP), DIR/kubeconfig written; sets URL and KL_PID (stop "$KL_PID").
# Needs B, the build directory.
start_kube_lite() {
  local d=$1
  shift
  "$B/bin/kube-lite" --listen 127.0.0.1:0 --write-kubeconfig "$d/kubeconfig" "$@" \
    >"$d/kube-lite.out" 2>"$d/kube-lite.log" &
  # shellcheck disable=SC2034 # read by the scripts that source this file
  KL_PID=$!
  wait_serving "$d/kube-lite.out" || true
  URL=$(sed -n 's/^kube-lite: serving on //p' "$d/kube-lite.out")
  [ -n "$URL" ] || { echo "kube-lite did not start: $(cat "$d/kube-lite.log")" >&2; exit 1; }
}

# ---- the world: kube-lite, or WORLD=kubernetes, the real control plane --------------------
# Kubernetes 1.20.2 (etcd, kube-apiserver, kube-controller-manager with its
# PV binder and attach-detach controller) from hack/kubernetes/cluster.sh:
# HTTPS with its own CA, bearer tokens. The sidecar gets a token of its own
# (user csi-sidecar-bench, group system:masters), so that kube-apiserver's
# audit log tells its requests apart from the benchmark's and the
# controllers'.
WORLD=${WORLD:-kube-lite}
case $WORLD in
kube-lite | kubernetes) ;;
*)
  echo "WORLD=$WORLD: kube-lite or kubernetes" >&2
  exit 2
  ;;
esac
SIDECAR_USER=csi-sidecar-bench
SIDECAR_TOKEN=csi-sidecar-bench-token
ADMIN_TOKEN=admin-token
K8S_DIR=
CA=
AUDIT=

# start_kubernetes DIR [cluster.sh up options]: sets URL, CA, AUDIT,
# K8S_DIR; writes DIR/kubeconfig (the sidecar's token) and
# DIR/admin.kubeconfig (the benchmark's)
start_kubernetes() {
  local d=$1
  shift
  printf '%s,%s,%s,"system:masters"\n' "$SIDECAR_TOKEN" "$SIDECAR_USER" "$SIDECAR_USER" \
    >"$d/tokens.csv"
  K8S_DIR=$d/k8s
  if ! hack/kubernetes/cluster.sh up "$K8S_DIR" --token-auth-file "$d/tokens.csv" \
    --kubeconfig-token "$ADMIN_TOKEN" --owner $$ "$@" >"$d/cluster.out" 2>&1; then
    echo "the control plane did not start: $(tail -n 20 "$d/cluster.out")" >&2
    exit 1
  fi
  # shellcheck disable=SC2034 # read by the scripts that source this file
  URL=$(cat "$K8S_DIR/server")
  CA=$K8S_DIR/pki/ca.crt
  # shellcheck disable=SC2034
  AUDIT=$K8S_DIR/logs/audit.log
  cp "$K8S_DIR/admin.kubeconfig" "$d/admin.kubeconfig"
  sed "s/^\( *token:\).*/\1 $SIDECAR_TOKEN/" "$K8S_DIR/admin.kubeconfig" >"$d/kubeconfig"
}

# shellcheck disable=SC2317 # called from the scripts' cleanup traps
stop_kubernetes() {
  [ -n "$K8S_DIR" ] || return 0
  hack/kubernetes/cluster.sh down "$K8S_DIR" >/dev/null 2>&1 || true
  K8S_DIR=
}

# api_curl ARGS...: curl to the world's API as the benchmark (admin)
api_curl() {
  if [ "$WORLD" = kubernetes ]; then
    curl --cacert "$CA" -H "Authorization: Bearer $ADMIN_TOKEN" "$@"
  else
    curl "$@"
  fi
}

# load: the load average, for the figures' context
load() { cut -d' ' -f1-3 /proc/loadavg; }
