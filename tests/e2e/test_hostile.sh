#!/usr/bin/env bash
# The three sidecars against a hostile API server, end to end: kube-lite
# (plain HTTP on loopback, its binder and attach stand-ins) behind
# tests/hostile/hostile_proxy.py, which forwards every request and corrupts a
# random share of the answers (errors, resets, truncated bodies, invalid
# UTF-8, wrong JSON types at random paths of objects, lists and watch events,
# bad events, duplicated keys, 2 MiB strings, stalls). csi-provisioner,
# csi-attacher and csi-node-driver-registrar (direct mode) all talk to the
# API through the proxy while tests/hostile/loadgen.py keeps creating and
# deleting claims and pods (and so volumes and VolumeAttachments) directly in
# kube-lite. After HOSTILE_SECONDS (default 60) the proxy turns honest and the
# world must converge: fresh claims Bound, their VolumeAttachments attached,
# the node's registration in place.
#
#   tests/e2e/test_hostile.sh <build-dir>
#   HOSTILE_SEED=1234 tests/e2e/test_hostile.sh build/asan   # replays a run's decisions
#
# Also: HOSTILE_SECONDS, HOSTILE_SCALE (multiplies every corruption's
# probability), HOSTILE_SPARE (regex of API paths left alone), HOSTILE_V (the
# sidecars' -v), HOSTILE_LOGS=DIR (keeps every log), HOSTILE_RSS_MIB.
#
# Checks: every sidecar alive, answering /healthz (and /metrics where it has
# one), peak RSS under HOSTILE_RSS_MIB (default 300), no sanitizer report in
# any log, convergence, exit 0 on SIGTERM. Ends with "N passed, N failed".
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${CSI_BUILD_DIR:-build}}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
KL="$B/bin/kube-lite"
DRV="$B/bin/example-csi-driver"
PROV="$B/bin/csi-provisioner"
ATT="$B/bin/csi-attacher"
REG="$B/bin/csi-node-driver-registrar"
PROXY="$ROOT/tests/hostile/hostile_proxy.py"
LOADGEN="$ROOT/tests/hostile/loadgen.py"
HOSTILE_SECONDS=${HOSTILE_SECONDS:-60}
HOSTILE_SEED=${HOSTILE_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
HOSTILE_SEED=$((HOSTILE_SEED % 2147483648))
RSS_MAX_MIB=${HOSTILE_RSS_MIB:-300}
DRIVER=hostpath.csi.example.com
NODE=node-1
NS=default
WORK=$(mktemp -d)
EXPECT_LAST="$WORK/last"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

# ASan keeps freed memory in a quarantine (256 MiB by default) to catch use
# after free; with 2 MiB strings coming and going it fills up and the peak RSS
# measures the quarantine, not the sidecar. 64 MiB still catches what matters.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}quarantine_size_mb=64"

SIDECARS=(prov att reg)
# A sidecar's log with a sanitizer report is copied to the output (run.sh
# fails the suite on it) before the scratch directory goes.
hostile_cleanup() {
  stop_all
  local n
  for n in "${SIDECARS[@]}" kube-lite drv; do
    if grep -Eqs 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK/$n.log"; then
      echo "---- $n.log (sanitizer report)"
      grep -E -B2 -A40 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK/$n.log" | head -n 120
    fi
  done
  # HOSTILE_LOGS=DIR keeps every log of the run there (for a replay's post-mortem).
  [ -n "${HOSTILE_LOGS:-}" ] && mkdir -p "$HOSTILE_LOGS" && cp "$WORK"/*.log "$HOSTILE_LOGS"/
  rm -rf "$WORK"
}
trap hostile_cleanup EXIT

for tool in python3 curl jq; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
for bin in "$KL" "$DRV" "$PROV" "$ATT" "$REG"; do
  [ -x "$bin" ] || { bad "$(basename "$bin") is built (make)"; finish; }
done
echo "seed $HOSTILE_SEED (replay: HOSTILE_SEED=$HOSTILE_SEED $0 $B)"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- kube-lite, the proxy, the driver -----------------------------------------------------------

start kube-lite "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/admin.kubeconfig" --controllers binder,attach
kl_http_up() { grep -q 'serving on http://' "$WORK/kube-lite.log" || ! alive kube-lite; }
if ! wait_for 20 kl_http_up || ! alive kube-lite; then
  bad "kube-lite starts" "$(cat "$WORK/kube-lite.log")"
  finish
fi
SERVER=$(sed -n 's/^kube-lite: serving on //p' "$WORK/kube-lite.log")

start proxy python3 "$PROXY" --upstream "$SERVER" --seed "$HOSTILE_SEED" --scale "${HOSTILE_SCALE:-1}" \
  ${HOSTILE_SPARE:+--spare "$HOSTILE_SPARE"}
proxy_up() { grep -q 'serving on http://' "$WORK/proxy.log" || ! alive proxy; }
if ! wait_for 20 proxy_up || ! alive proxy; then
  bad "the hostile proxy starts" "$(cat "$WORK/proxy.log")"
  finish
fi
PROXY_URL=$(sed -n 's/^hostile-proxy: serving on //p' "$WORK/proxy.log")
sed "s#server: .*#server: $PROXY_URL#" "$WORK/admin.kubeconfig" >"$WORK/hostile.kubeconfig"
ok "kube-lite and the hostile proxy in front of it (seed $HOSTILE_SEED)"

# api PATH / post PATH JSON: straight to kube-lite, never through the proxy
api() { curl -s --max-time 10 "$SERVER$1"; }
post() { curl -s --max-time 10 -H 'Content-Type: application/json' -X POST --data "$2" "$SERVER$1" >/dev/null; }
post /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"'$NODE'","labels":{"kubernetes.io/hostname":"'$NODE'"}}}'
post /apis/storage.k8s.io/v1/storageclasses '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"hostile"},"provisioner":"'$DRIVER'","reclaimPolicy":"Delete","volumeBindingMode":"Immediate"}'
check "the node and the storage class exist" "$NODE hostile" \
  "$(api /api/v1/nodes/$NODE | jq -r .metadata.name) $(api /apis/storage.k8s.io/v1/storageclasses/hostile | jq -r .metadata.name)"

mkdir -p "$WORK/drv/state"
SOCK="$WORK/drv/csi.sock"
start drv "$DRV" --endpoint "unix://$SOCK" --state-dir "$WORK/drv/state" --drivername "$DRIVER" --nodeid "$NODE" \
  --topology topology.example.com/zone=z1
wait_for 20 test -S "$SOCK" || { bad "the example driver starts" "$(cat "$WORK/drv.log")"; finish; }

# ---- the sidecars, through the proxy --------------------------------------------------------------

P_PROV=$(free_port)
P_ATT=$(free_port)
P_REG=$(free_port)
COMMON=(--csi-address="$SOCK" --kubeconfig="$WORK/hostile.kubeconfig" --kube-api-qps=50 --kube-api-burst=100 ${HOSTILE_V:+-v=$HOSTILE_V})
start prov "$PROV" "${COMMON[@]}" --http-endpoint="127.0.0.1:$P_PROV" --worker-threads=8 \
  --retry-interval-start=100ms --retry-interval-max=5s
start att "$ATT" "${COMMON[@]}" --http-endpoint="127.0.0.1:$P_ATT" --worker-threads=4 \
  --retry-interval-start=100ms --retry-interval-max=5s
start reg env NODE_NAME="$NODE" "$REG" --csi-address="$SOCK" --kubeconfig="$WORK/hostile.kubeconfig" \
  --node-registration=direct --http-endpoint="127.0.0.1:$P_REG" ${HOSTILE_V:+-v=$HOSTILE_V}
declare -A PORT=([prov]=$P_PROV [att]=$P_ATT [reg]=$P_REG)

start loadgen python3 "$LOADGEN" --server "$SERVER" --class hostile --nodes "$NODE" --interval 0.5 --keep 6

# While the proxy lies: note the first moment a sidecar is gone.
declare -A DIED=()
end=$((SECONDS + HOSTILE_SECONDS))
while [ "$SECONDS" -lt "$end" ]; do
  for n in "${SIDECARS[@]}"; do
    [ -z "${DIED[$n]:-}" ] && ! alive "$n" && DIED[$n]=$SECONDS
  done
  sleep 1
done
for n in "${SIDECARS[@]}"; do
  if [ -z "${DIED[$n]:-}" ] && alive "$n"; then
    ok "$n is alive after ${HOSTILE_SECONDS}s of a hostile API server"
  else
    bad "$n is alive after ${HOSTILE_SECONDS}s of a hostile API server" "$(tail -n 30 "$WORK/$n.log")"
  fi
done

# /healthz (provisioner and registrar; the attacher has none, as upstream)
# and /metrics (provisioner and attacher) answer.
http_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$1$2"; }
for n in prov reg; do
  check "$n answers /healthz" 200 "$(http_code "${PORT[$n]}" /healthz)"
done
for n in prov att; do
  m=$(curl -s --max-time 10 "http://127.0.0.1:${PORT[$n]}/metrics")
  contains "$n answers /metrics" "# TYPE" "$m"
done

# Peak resident memory (VmHWM) of each sidecar: bounded, whatever it was sent.
for n in "${SIDECARS[@]}"; do
  hwm=$(awk '/^VmHWM:/ {print int($2 / 1024)}' "/proc/${PID[$n]:-0}/status" 2>/dev/null)
  if [ -n "$hwm" ] && [ "$hwm" -le "$RSS_MAX_MIB" ]; then
    ok "$n peak RSS ${hwm} MiB <= ${RSS_MAX_MIB} MiB"
  else
    bad "$n peak RSS ${hwm:-?} MiB <= ${RSS_MAX_MIB} MiB"
  fi
done

# ---- the proxy turns honest: the world converges ----------------------------------------------------

kill -USR1 "${PID[proxy]}"
stop loadgen
# The proxy turns honest, and prints its counts, on its own time (its main thread sees
# the signal within 0.5 s, another thread prints): wait for that line.
wait_for 20 grep -q 'mutations=[0-9]' "$WORK/proxy.log"
kinds=$(grep -Eo 'mutations=[0-9]+ .*' "$WORK/proxy.log" | tail -n 1)
echo "proxy: $kinds"
mutations=$(sed -n 's/^mutations=\([0-9]*\).*/\1/p' <<<"$kinds")
nkinds=$(grep -Eo '[a-z0-9]+=[0-9]+' <<<"$kinds" | grep -vc '^mutations=')
if [ "${mutations:-0}" -ge 50 ] && [ "$nkinds" -ge 8 ]; then
  ok "the proxy lied (${mutations} mutations of ${nkinds} kinds)"
else
  bad "the proxy lied (at least 50 mutations of 8 kinds)" "$kinds"
fi
grep -s '^loadgen:' "$WORK/loadgen.log"

pvc() { post "/api/v1/namespaces/$NS/persistentvolumeclaims" '{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"'"$1"'"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"hostile","resources":{"requests":{"storage":"1Gi"}}}}'; }
pod() { post "/api/v1/namespaces/$NS/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"'"$1"'"},"spec":{"nodeName":"'"$NODE"'","containers":[{"name":"app","image":"busybox"}],"volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"'"$1"'"}}]}}'; }
bound() { [ "$(api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | jq -r '.status.phase // ""' | tee "$EXPECT_LAST")" = Bound ]; }
# attached CLAIM: the VolumeAttachment of the claim's PV on the node says attached
attached() {
  local pv
  pv=$(api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | jq -r '.spec.volumeName // ""')
  [ -n "$pv" ] || return 1
  api /apis/storage.k8s.io/v1/volumeattachments |
    jq -r --arg pv "$pv" --arg node "$NODE" \
      '[.items[] | select(.spec.source.persistentVolumeName == $pv and .spec.nodeName == $node) | .status.attached // false] | tostring' \
      >"$EXPECT_LAST"
  [ "$(cat "$EXPECT_LAST")" = "[true]" ]
}
registered() {
  local ann ent
  ann=$(api /api/v1/nodes/$NODE | jq -r '.metadata.annotations["csi.volume.kubernetes.io/nodeid"] // ""')
  ent=$(api /apis/storage.k8s.io/v1/csinodes/$NODE | jq -r --arg d "$DRIVER" '[(.spec.drivers // [])[] | select(.name == $d) | .nodeID] | tostring')
  echo "$ann $ent" >"$EXPECT_LAST"
  [ "$ann $ent" = "{\"$DRIVER\":\"$NODE\"} [\"$NODE\"]" ]
}
FINAL=(final-1 final-2 final-3)
for c in "${FINAL[@]}"; do
  pvc "$c"
  pod "$c"
done
expect "the node's registration is in place (annotation and CSINode entry)" 45 registered
all() { local f=$1 c; shift; for c in "$@"; do "$f" "$c" || return 1; done; }
expect "the claims made after the lies stopped are Bound" 45 all bound "${FINAL[@]}"
expect "their VolumeAttachments are attached" 45 all attached "${FINAL[@]}"
for n in "${SIDECARS[@]}"; do
  if alive "$n"; then ok "$n is still alive"; else bad "$n is still alive" "$(tail -n 30 "$WORK/$n.log")"; fi
done

# ---- stop: every sidecar exits 0 on SIGTERM, no sanitizer report anywhere ---------------------------

for n in reg att prov; do
  stop "$n"
  check "$n exits 0 on SIGTERM" 0 "${RC[$n]}"
done
stop proxy
stop kube-lite
check "kube-lite survived and exits 0" 0 "${RC[kube-lite]}"

# ---- an API server that accepts and never answers: SIGTERM while starting -------------------------
# The sidecars wait minutes for their caches to sync; a pod deleted meanwhile
# must not hang in Terminating.
start blackhole python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
held = []
while True:
    held.append(s.accept()[0])
'
wait_for 10 grep -q '^[0-9]' "$WORK/blackhole.log"
sed "s#server: .*#server: http://127.0.0.1:$(head -n 1 "$WORK/blackhole.log")#" "$WORK/admin.kubeconfig" >"$WORK/blackhole.kubeconfig"
start prov-bh "$PROV" --csi-address="$SOCK" --kubeconfig="$WORK/blackhole.kubeconfig"
start att-bh "$ATT" --csi-address="$SOCK" --kubeconfig="$WORK/blackhole.kubeconfig"
expect "against a silent API server the provisioner is starting (it found the driver)" 20 \
  grep -q 'Detected CSI driver' "$WORK/prov-bh.log"
expect "... and the attacher" 20 grep -q 'Detected CSI driver' "$WORK/att-bh.log"
sleep 1 # into the wait for the caches
for n in prov-bh att-bh; do
  t=$SECONDS
  stop "$n"
  check "$n, still starting, exits 0 on SIGTERM at once (not after the 5 min sync timeout)" "0 fast" \
    "${RC[$n]} $([ $((SECONDS - t)) -le 5 ] && echo fast || echo "after $((SECONDS - t)) s")"
done
stop blackhole
stop drv
reports=$(grep -El 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK"/*.log 2>/dev/null | xargs -r -n1 basename)
check "no sanitizer report in any log" "" "$reports"
grep -s 'handler error' "$WORK/proxy.log" | head -n 5
finish
