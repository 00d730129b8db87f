#!/usr/bin/env bash
# Starts and stops a real Kubernetes control plane in a folder: etcd,
# kube-apiserver, kube-controller-manager and (optionally) kube-scheduler
# 1.20.2 from hack/kubernetes/build.sh's cache. Loopback only, free ports,
# HTTPS with a throwaway CA, static bearer tokens per identity, RBAC on.
#
#   hack/kubernetes/cluster.sh up DIR [options]
#   hack/kubernetes/cluster.sh down DIR
#   hack/kubernetes/cluster.sh status DIR
#
# up options:
#   --token-auth-file F    extra tokens (kube-apiserver's CSV format: token,user,uid,"group,...")
#   --kubeconfig-token T   the token of DIR/admin.kubeconfig (default admin-token; a
#                          system:masters line is added for it unless F has one)
#   --controllers LIST     kube-controller-manager's --controllers (default: the PV binder,
#                          attach-detach, namespace, garbage collector, service accounts and
#                          their tokens, PVC and PV protection)
#   --scheduler            also run kube-scheduler
#   --pki DIR2             use DIR2/{ca.crt,server.crt,server.key}
#                          (hack/kube-lite/gen-certs.sh) instead of making them
#   --owner PID            stop the control plane when process PID ends (a test
#                          that is killed leaves nothing running)
#
# After `up`: DIR/admin.kubeconfig, DIR/server (the URL), DIR/pki/, DIR/logs/,
# DIR/run/*.pid. `up` returns once the API answers /readyz, the default
# namespace and its service account exist; it fails with the log's tail when
# a process dies. `down` stops every process `up` started (pid files checked
# against /proc/PID/cmdline) and removes the folder's run state and etcd data.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CMD=${1:-}
DIR=${2:-}
[ -n "$CMD" ] && [ -n "$DIR" ] || {
  echo "usage: hack/kubernetes/cluster.sh up|down|status DIR [options]" >&2
  exit 2
}
shift 2
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

die() {
  echo "hack/kubernetes/cluster.sh: $*" >&2
  exit 1
}

NAMES=(kube-scheduler kube-controller-manager kube-apiserver etcd watchdog)

# pid_of NAME: the pid in run/NAME.pid when that process still runs the
# program it was started as
pid_of() {
  local f=$DIR/run/$1.pid pid
  [ -s "$f" ] || return 1
  pid=$(cat "$f")
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$(cat "$DIR/run/$1.tag")" || return 1
  echo "$pid"
}

# running PID: the process exists and is not a zombie (one that has exited
# but was not reaped yet, which kill -0 still finds)
running() {
  local st
  st=$(sed -n 's/^.*) \(.\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# any_running PID...: one of them still runs
any_running() {
  local pid
  for pid in "$@"; do running "$pid" && return 0; done
  return 1
}

# down: SIGTERM to every process at once, SIGKILL to what is left after 10 s,
# and back only once none runs (a loaded machine takes a while to tear down
# a SIGKILLed kube-apiserver; the demo's test found one still there)
down() {
  local n pid i pids=()
  for n in "${NAMES[@]}"; do
    [ "$n" = watchdog ] && [ "${KEEP_WATCHDOG:-0}" = 1 ] && continue
    if pid=$(pid_of "$n"); then
      pids+=("$pid")
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for ((i = 0; i < 100; i++)); do
    any_running "${pids[@]}" || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do running "$pid" && kill -KILL "$pid" 2>/dev/null; done
  for ((i = 0; i < 300; i++)); do
    any_running "${pids[@]}" || break
    sleep 0.1
  done
  if [ -s "$DIR/run/etcd-data" ]; then
    rm -rf "$(cat "$DIR/run/etcd-data")"
  fi
  rm -rf "$DIR/run"
}

status() {
  local n pid
  for n in "${NAMES[@]}"; do
    if pid=$(pid_of "$n"); then echo "$n running (pid $pid)"; else echo "$n stopped"; fi
  done
}

case $CMD in
down)
  [ -d "$DIR/run" ] || exit 0
  down
  exit 0
  ;;
status)
  status
  exit 0
  ;;
up) ;;
*) die "unknown command '$CMD' (up, down, status)" ;;
esac

# ---- up ---------------------------------------------------------------------------------------
TOKENS_IN="" ADMIN_TOKEN=admin-token SCHED=0 PKI_IN="" OWNER=""
CONTROLLERS=persistentvolume-binder,attachdetach,namespace,garbagecollector,serviceaccount,serviceaccount-token,pvc-protection,pv-protection
while [ $# -gt 0 ]; do
  case $1 in
  --token-auth-file) TOKENS_IN=$2 && shift 2 ;;
  --kubeconfig-token) ADMIN_TOKEN=$2 && shift 2 ;;
  --controllers) CONTROLLERS=$2 && shift 2 ;;
  --scheduler) SCHED=1 && shift ;;
  --pki) PKI_IN=$2 && shift 2 ;;
  --owner) OWNER=$2 && shift 2 ;;
  *) die "unknown option '$1'" ;;
  esac
done

command -v etcd >/dev/null 2>&1 || die "etcd is missing: run hack/install-deps.sh (etcd-server)"
command -v openssl >/dev/null 2>&1 || die "openssl is missing: run hack/install-deps.sh"
BIN=$("$ROOT/hack/kubernetes/build.sh") || die "the control plane is not built (hack/kubernetes/build.sh failed)"

[ -d "$DIR/run" ] && down
mkdir -p "$DIR/run" "$DIR/logs"

# ---- credentials ------------------------------------------------------------------------------
PKI=$DIR/pki
if [ -n "$PKI_IN" ]; then
  mkdir -p "$PKI"
  for f in ca.crt server.crt server.key; do
    [ -f "$PKI_IN/$f" ] || die "--pki $PKI_IN has no $f (hack/kube-lite/gen-certs.sh makes them)"
    [ "$PKI_IN/$f" -ef "$PKI/$f" ] || cp "$PKI_IN/$f" "$PKI/$f"
  done
elif [ ! -f "$PKI/server.crt" ]; then
  "$ROOT/hack/kube-lite/gen-certs.sh" "$PKI" >/dev/null
fi
[ -f "$PKI/sa.key" ] || openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
[ -f "$PKI/sa.pub" ] || openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null

rand() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
KCM_TOKEN=$(rand) SCHED_TOKEN=$(rand)
{
  [ -n "$TOKENS_IN" ] && cat "$TOKENS_IN"
  if [ -z "$TOKENS_IN" ] || ! grep -q "^$ADMIN_TOKEN," "$TOKENS_IN"; then
    echo "$ADMIN_TOKEN,admin,admin,\"system:masters\""
  fi
  echo "$KCM_TOKEN,system:kube-controller-manager,kcm"
  echo "$SCHED_TOKEN,system:kube-scheduler,scheduler"
} >"$PKI/tokens.csv"
chmod 600 "$PKI/tokens.csv"

# kubeconfig FILE TOKEN URL
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: $3
    certificate-authority: $PKI/ca.crt
users:
- name: user
  user:
    token: $2
contexts:
- name: kubernetes
  context:
    cluster: kubernetes
    user: user
    namespace: default
current-context: kubernetes
EOF
}

# ---- processes --------------------------------------------------------------------------------
# launch NAME TAG COMMAND...: a daemon in its own session; TAG is a string of
# its command line that identifies it in /proc (pids get recycled)
launch() {
  local name=$1 tag=$2
  shift 2
  printf '%s\n' "$tag" >"$DIR/run/$name.tag"
  rm -f "$DIR/run/$name.pid"
  # The program writes its own pid (setsid forks when it happens to lead a
  # process group, and then $! is not the program's).
  setsid bash -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$DIR/run/$name.pid" "$@" \
    </dev/null >>"$DIR/logs/$name.log" 2>&1 &
  local i
  for ((i = 0; i < 100; i++)); do
    [ -s "$DIR/run/$name.pid" ] && return 0
    sleep 0.05
  done
  die "$name did not start"
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
fail_with_log() {
  local name=$1 why=$2
  echo "hack/kubernetes/cluster.sh: $why; last lines of $DIR/logs/$name.log:" >&2
  tail -n 20 "$DIR/logs/$name.log" >&2
  down
  exit 1
}

# etcd: its data in memory (tmpfs) when there is one; a port taken between
# free_port and the bind (another suite) means another try
ETCD_DATA=$(mktemp -d "$([ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo "$DIR")/csi-etcd.XXXXXX")
echo "$ETCD_DATA" >"$DIR/run/etcd-data"
for try in 1 2 3 4 5; do
  EP=$(free_port) PP=$(free_port)
  : >"$DIR/logs/etcd.log"
  launch etcd "$ETCD_DATA" etcd --name default --data-dir "$ETCD_DATA" \
    --listen-client-urls "http://127.0.0.1:$EP" --advertise-client-urls "http://127.0.0.1:$EP" \
    --listen-peer-urls "http://127.0.0.1:$PP" --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
    --initial-cluster "default=http://127.0.0.1:$PP" --log-level warn --logger zap
  ok=0
  for ((i = 0; i < 200; i++)); do
    if curl -sf --max-time 1 "http://127.0.0.1:$EP/health" 2>/dev/null | grep -q '"health":"true"'; then
      ok=1
      break
    fi
    pid_of etcd >/dev/null || break
    sleep 0.1
  done
  [ "$ok" = 1 ] && break
  grep -q 'address already in use' "$DIR/logs/etcd.log" && [ "$try" -lt 5 ] && continue
  pid_of etcd >/dev/null || fail_with_log etcd "etcd exited"
  fail_with_log etcd "etcd did not become healthy in 20 s"
done

# The audit log, one JSON line per finished request (who, verb, resource,
# code): what the tests count API writes per caller with.
cat >"$DIR/run/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
EOF
# --allow-privileged: the node plugins of manifests/ run privileged, as on
# every kubeadm cluster.
for try in 1 2 3 4 5; do
  AP=$(free_port)
  : >"$DIR/logs/kube-apiserver.log"
  launch kube-apiserver "$BIN/kube-apiserver" "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$EP" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$AP" --insecure-port 0 \
    --tls-cert-file "$PKI/server.crt" --tls-private-key-file "$PKI/server.key" \
    --client-ca-file "$PKI/ca.crt" --token-auth-file "$PKI/tokens.csv" \
    --authorization-mode Node,RBAC --allow-privileged=true \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.0.0.0/24 --cert-dir "$DIR/run/apiserver-certs" \
    --audit-policy-file "$DIR/run/audit-policy.yaml" --audit-log-path "$DIR/logs/audit.log" \
    --audit-log-mode blocking --profiling=false --v 1
  URL=https://127.0.0.1:$AP
  ok=0
  for ((i = 0; i < 600; i++)); do
    if [ "$(curl -s --max-time 2 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" "$URL/readyz" 2>/dev/null)" = ok ]; then
      ok=1
      break
    fi
    pid_of kube-apiserver >/dev/null || break
    sleep 0.1
  done
  [ "$ok" = 1 ] && break
  grep -q 'address already in use' "$DIR/logs/kube-apiserver.log" && [ "$try" -lt 5 ] && continue
  pid_of kube-apiserver >/dev/null || fail_with_log kube-apiserver "kube-apiserver exited"
  fail_with_log kube-apiserver "kube-apiserver did not become ready in 60 s"
done
echo "$URL" >"$DIR/server"
kubeconfig "$DIR/admin.kubeconfig" "$ADMIN_TOKEN" "$URL"
kubeconfig "$DIR/run/kcm.kubeconfig" "$KCM_TOKEN" "$URL"
kubeconfig "$DIR/run/scheduler.kubeconfig" "$SCHED_TOKEN" "$URL"

# The controllers run with a service account each (their bootstrap roles),
# as kubeadm sets them up; nothing serves on a port of theirs.
launch kube-controller-manager "$DIR/run/kcm.kubeconfig" "$BIN/kube-controller-manager" \
  --kubeconfig "$DIR/run/kcm.kubeconfig" --controllers "$CONTROLLERS" --use-service-account-credentials \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --leader-elect=false --port 0 --secure-port 0 --profiling=false --v 1
if [ "$SCHED" = 1 ]; then
  launch kube-scheduler "$DIR/run/scheduler.kubeconfig" "$BIN/kube-scheduler" \
    --kubeconfig "$DIR/run/scheduler.kubeconfig" --leader-elect=false --port 0 --secure-port 0 \
    --profiling=false --v 1
fi

if [ -n "$OWNER" ]; then
  # The watchdog ends with its owner and takes the control plane with it.
  printf '%s\n' "csi-cluster-watchdog $DIR" >"$DIR/run/watchdog.tag"
  setsid bash -c 'echo $$ >"$3/run/watchdog.pid"
    while kill -0 "$1" 2>/dev/null && [ -d "$3/run" ]; do sleep 1; done
    [ -d "$3/run" ] && KEEP_WATCHDOG=1 "$2" down "$3"' "csi-cluster-watchdog $DIR" \
    "$OWNER" "$ROOT/hack/kubernetes/cluster.sh" "$DIR" </dev/null >>"$DIR/logs/watchdog.log" 2>&1 &
fi

# Pods can be created once the default service account has its token
# (the ServiceAccount admission plugin refuses them before).
sa_ready() {
  curl -s --max-time 2 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
    "$URL/api/v1/namespaces/default/serviceaccounts/default" | grep -q '"secrets"'
}
for ((i = 0; i < 600; i++)); do
  sa_ready && break
  pid_of kube-controller-manager >/dev/null || fail_with_log kube-controller-manager "kube-controller-manager exited"
  sleep 0.1
done
sa_ready || fail_with_log kube-controller-manager "the default service account and its token did not appear in 60 s"
if [ "$SCHED" = 1 ]; then
  pid_of kube-scheduler >/dev/null || fail_with_log kube-scheduler "kube-scheduler exited"
fi
echo "$URL"
