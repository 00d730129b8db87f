#!/usr/bin/env bash
# The five storage sidecars and the two COSI binaries against a hostile API
# server, end to end: kube-lite (plain HTTP on loopback, its binder and attach
# stand-ins, the snapshot types it serves built in, the COSI CRDs of
# manifests/cosi/crd) behind
# tests/hostile/hostile_proxy.py, which forwards every request and corrupts a
# random share of the answers (errors, resets, truncated bodies, invalid
# UTF-8, wrong JSON types at random paths of objects, lists and watch events,
# bad events, duplicated keys, 2 MiB strings, stalls), custom resources
# included. csi-provisioner, csi-attacher, csi-node-driver-registrar (direct
# mode), csi-resizer, csi-snapshotter, objectstorage-controller and
# objectstorage-sidecar (with its own example-cosi-driver) all talk to the API
# through the proxy while tests/hostile/loadgen.py keeps creating and deleting
# claims and pods (and so volumes and VolumeAttachments), growing claims (of
# a class with allowVolumeExpansion), writing and deleting VolumeSnapshotContents
# as upstream's snapshot-controller would (of a Delete VolumeSnapshotClass),
# BucketClaims (of a Delete BucketClass) and BucketAccesses (of a Key
# BucketAccessClass) directly in kube-lite. After HOSTILE_SECONDS (default 60)
# the proxy turns honest and the world must converge: fresh claims Bound,
# their VolumeAttachments attached, the node's registration in place, every
# grown claim the load generator kept grown (PV capacity, allocatedResources,
# FileSystemResizePending: the example driver asks for node expansion, and no
# kubelet runs here), every content it left readyToUse with a snapshot the
# driver holds, every one it deleted gone with its snapshot, fresh
# BucketClaims ready and BucketAccesses granted with their Secrets, every COSI
# object the load generator deleted gone (with its Secret, its Bucket and the
# driver's bucket or grant), every one it left ready or granted, the driver
# holding exactly the buckets of the claims left.
#
#   tests/e2e/test_hostile.sh <build-dir>
#   HOSTILE_SEED=1234 tests/e2e/test_hostile.sh build/asan   # replays a run's decisions
#
# Also: HOSTILE_SECONDS, HOSTILE_SCALE (multiplies every corruption's
# probability), HOSTILE_PROBS (a JSON object of probabilities by kind, to
# narrow a replay down to one corruption: see the proxy's DEFAULTS),
# HOSTILE_SPARE (regex of API paths left alone), HOSTILE_V (the sidecars'
# -v), HOSTILE_LOGS=DIR (keeps every log, the COSI objects, claims, PVs and
# contents as last seen, both drivers' status.json and the load generator's
# record), HOSTILE_RSS_MIB. The load generator's contents take their names
# from the seed too, so a replay meets the same fates on their paths.
#
# Checks: every sidecar alive, answering /healthz and /metrics where it has
# them, peak RSS under HOSTILE_RSS_MIB (default 300), no sanitizer report in
# any log, convergence, exit 0 on SIGTERM; and against an API server that
# never answers, SIGTERM while starting ends each one at once with 0. Ends
# with "N passed, N failed".
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
RSZ="$B/bin/csi-resizer"
SNAP="$B/bin/csi-snapshotter"
CDRV="$B/bin/example-cosi-driver"
CTRL="$B/bin/objectstorage-controller"
SC="$B/bin/objectstorage-sidecar"
PROXY="$ROOT/tests/hostile/hostile_proxy.py"
LOADGEN="$ROOT/tests/hostile/loadgen.py"
HOSTILE_SECONDS=${HOSTILE_SECONDS:-60}
HOSTILE_SEED=${HOSTILE_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
HOSTILE_SEED=$((HOSTILE_SEED % 2147483648))
RSS_MAX_MIB=${HOSTILE_RSS_MIB:-300}
DRIVER=hostpath.csi.example.com
COSI_DRIVER=cosi.example.com
COSI=/apis/objectstorage.k8s.io/v1alpha1
VSC=/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents
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

SIDECARS=(prov att reg rsz snap ctrl sc)
# A sidecar's log with a sanitizer report is copied to the output (run.sh
# fails the suite on it) before the scratch directory goes.
hostile_cleanup() {
  stop_all
  local n
  for n in "${SIDECARS[@]}" kube-lite drv cdrv; do
    if grep -Eqs 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK/$n.log"; then
      echo "---- $n.log (sanitizer report)"
      grep -E -B2 -A40 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK/$n.log" | head -n 120
    fi
  done
  # HOSTILE_LOGS=DIR keeps every log of the run there (for a replay's post-mortem).
  # With it the COSI world as last seen (cosi-*.json, the COSI driver's status.json),
  # the claims, PVs and contents (storage-*.json), the CSI driver's status.json and
  # the load generator's record.
  if [ -n "${HOSTILE_LOGS:-}" ]; then
    mkdir -p "$HOSTILE_LOGS" && cp "$WORK"/*.log "$HOSTILE_LOGS"/
    cp "$WORK"/cosi-*.json "$WORK"/storage-*.json "$WORK/loadgen.json" "$HOSTILE_LOGS"/ 2>/dev/null
    cp "$WORK/drv/state/status.json" "$HOSTILE_LOGS/csi-driver-status.json" 2>/dev/null
    cp "$WORK/cdrv/state/status.json" "$HOSTILE_LOGS/cosi-driver-status.json" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap hostile_cleanup EXIT

for tool in python3 curl jq kubectl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
for bin in "$KL" "$DRV" "$PROV" "$ATT" "$REG" "$RSZ" "$SNAP" "$CDRV" "$CTRL" "$SC"; do
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
  ${HOSTILE_SPARE:+--spare "$HOSTILE_SPARE"} ${HOSTILE_PROBS:+--probs "$HOSTILE_PROBS"}
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
post /apis/storage.k8s.io/v1/storageclasses '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"hostile"},"provisioner":"'$DRIVER'","reclaimPolicy":"Delete","volumeBindingMode":"Immediate","allowVolumeExpansion":true}'
post /apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses '{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotClass","metadata":{"name":"hostile-snaps"},"driver":"'$DRIVER'","deletionPolicy":"Delete","parameters":{"color":"blue"}}'
check "the node, the storage class (expandable) and the snapshot class exist" "$NODE hostile true hostile-snaps" \
  "$(api /api/v1/nodes/$NODE | jq -r .metadata.name) $(api /apis/storage.k8s.io/v1/storageclasses/hostile | jq -r '.metadata.name + " " + (.allowVolumeExpansion | tostring)') $(api /apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses/hostile-snaps | jq -r .metadata.name)"

# The COSI CRDs, applied as an admin would (kubectl, straight to kube-lite), and
# the classes of the load generator's BucketClaims and BucketAccesses.
out=$(K apply -f "$ROOT/manifests/cosi/crd/" 2>&1)
contains "the COSI CRDs apply to kube-lite" "customresourcedefinition.apiextensions.k8s.io/buckets.objectstorage.k8s.io created" "$out"
established() {
  [ "$(K get crd -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Established")].status}{"\n"}{end}' 2>/dev/null | grep -c True)" -ge 5 ]
}
expect "the five COSI CRDs are Established" 30 established
post $COSI/bucketclasses '{"apiVersion":"objectstorage.k8s.io/v1alpha1","kind":"BucketClass","metadata":{"name":"hostile-delete"},"driverName":"'$COSI_DRIVER'","deletionPolicy":"Delete","parameters":{"protocol":"s3","region":"eu-west-1"}}'
post $COSI/bucketaccessclasses '{"apiVersion":"objectstorage.k8s.io/v1alpha1","kind":"BucketAccessClass","metadata":{"name":"hostile-key"},"driverName":"'$COSI_DRIVER'","authenticationType":"Key"}'
check "the BucketClass (Delete) and the BucketAccessClass (Key) exist" "hostile-delete hostile-key" \
  "$(api $COSI/bucketclasses/hostile-delete | jq -r .metadata.name) $(api $COSI/bucketaccessclasses/hostile-key | jq -r .metadata.name)"

mkdir -p "$WORK/drv/state"
SOCK="$WORK/drv/csi.sock"
start drv "$DRV" --endpoint "unix://$SOCK" --state-dir "$WORK/drv/state" --drivername "$DRIVER" --nodeid "$NODE" \
  --topology topology.example.com/zone=z1
wait_for 20 test -S "$SOCK" || { bad "the example driver starts" "$(cat "$WORK/drv.log")"; finish; }
mkdir -p "$WORK/cdrv/state"
CSOCK="$WORK/cdrv/cosi.sock"
start cdrv "$CDRV" --endpoint "unix://$CSOCK" --state-dir "$WORK/cdrv/state" --drivername "$COSI_DRIVER"
wait_for 20 test -S "$CSOCK" || { bad "the example COSI driver starts" "$(cat "$WORK/cdrv.log")"; finish; }

# ---- the sidecars, through the proxy --------------------------------------------------------------

P_PROV=$(free_port)
P_ATT=$(free_port)
P_REG=$(free_port)
P_RSZ=$(free_port)
P_SNAP=$(free_port)
P_CTRL=$(free_port)
P_SC=$(free_port)
COMMON=(--csi-address="$SOCK" --kubeconfig="$WORK/hostile.kubeconfig" --kube-api-qps=50 --kube-api-burst=100 ${HOSTILE_V:+-v=$HOSTILE_V})
start prov "$PROV" "${COMMON[@]}" --http-endpoint="127.0.0.1:$P_PROV" --worker-threads=8 \
  --retry-interval-start=100ms --retry-interval-max=5s
start att "$ATT" "${COMMON[@]}" --http-endpoint="127.0.0.1:$P_ATT" --worker-threads=4 \
  --retry-interval-start=100ms --retry-interval-max=5s
start reg env NODE_NAME="$NODE" "$REG" --csi-address="$SOCK" --kubeconfig="$WORK/hostile.kubeconfig" \
  --node-registration=direct --http-endpoint="127.0.0.1:$P_REG" ${HOSTILE_V:+-v=$HOSTILE_V}
# The resizer and the snapshotter elect no leader (their default, as the
# provisioner and the attacher here).
start rsz "$RSZ" "${COMMON[@]}" --http-endpoint="127.0.0.1:$P_RSZ" --workers=4 \
  --retry-interval-start=100ms --retry-interval-max=5s
start snap "$SNAP" "${COMMON[@]}" --http-endpoint="127.0.0.1:$P_SNAP" --worker-threads=4 \
  --retry-interval-start=100ms --retry-interval-max=5s
# The COSI binaries elect no leader here (one replica each); their default
# qps (5) could not keep up with the load generator.
COSI_COMMON=(--kubeconfig="$WORK/hostile.kubeconfig" --kube-api-qps=50 --kube-api-burst=100 --leader-election=false
  --worker-threads=4 --retry-interval-start=100ms --retry-interval-max=5s ${HOSTILE_V:+-v=$HOSTILE_V})
start ctrl "$CTRL" "${COSI_COMMON[@]}" --http-endpoint="127.0.0.1:$P_CTRL"
start sc "$SC" "${COSI_COMMON[@]}" --http-endpoint="127.0.0.1:$P_SC" --driver-addr "unix://$CSOCK"
declare -A PORT=([prov]=$P_PROV [att]=$P_ATT [reg]=$P_REG [rsz]=$P_RSZ [snap]=$P_SNAP [ctrl]=$P_CTRL [sc]=$P_SC)

start loadgen python3 "$LOADGEN" --server "$SERVER" --class hostile --nodes "$NODE" --interval 0.5 --keep 6 \
  --bucket-class hostile-delete --access-class hostile-key --grow --snapshot-class hostile-snaps \
  --driver "$DRIVER" --seed "$HOSTILE_SEED" --record "$WORK/loadgen.json"

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

# /healthz (provisioner, registrar and the COSI binaries; the attacher, the
# resizer and the snapshotter have none, as upstream) and /metrics (all but
# the registrar) answer. Without
# leader election the COSI binaries serve no /healthz/leader-election (the
# kit registers it only with an election to report on).
http_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$1$2"; }
for n in prov reg ctrl sc; do
  check "$n answers /healthz" 200 "$(http_code "${PORT[$n]}" /healthz)"
done
for n in ctrl sc; do
  check "$n serves no /healthz/leader-election with --leader-election=false" 404 \
    "$(http_code "${PORT[$n]}" /healthz/leader-election)"
done
for n in prov att rsz snap ctrl sc; do
  m=$(curl -s --max-time 10 "http://127.0.0.1:${PORT[$n]}/metrics")
  contains "$n answers /metrics" "# TYPE" "$m"
  case $n in
    rsz) contains "... with its work queue's metrics" "workqueue_adds_total{name=\"$DRIVER-pvc\"}" "$m" ;;
    snap)
      contains "... with its work queue's metrics" 'workqueue_adds_total{name="csi-snapshotter-content"}' "$m"
      contains "... and the driver calls'" 'method_name="/csi.v1.Controller/CreateSnapshot"' "$m"
      ;;
    ctrl) contains "... with its work queue's metrics" 'workqueue_adds_total{name="bucketclaims"}' "$m" ;;
    sc)
      contains "... with its work queues' metrics" 'workqueue_adds_total{name="cosi-bucketaccesses"}' "$m"
      contains "... and the driver calls'" 'method_name="/cosi.v1alpha1.Provisioner/DriverCreateBucket"' "$m"
      ;;
  esac
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
# the signal within 0.5 s, another thread prints): wait for the last of those lines.
wait_for 20 grep -q '^hostile-proxy: by client:' "$WORK/proxy.log"
kinds=$(grep -E '^hostile-proxy: requests=' "$WORK/proxy.log" | grep -Eo 'mutations=[0-9]+ .*' | tail -n 1)
echo "proxy: $kinds"
mutations=$(sed -n 's/^mutations=\([0-9]*\).*/\1/p' <<<"$kinds")
nkinds=$(grep -Eo '[a-z0-9]+=[0-9]+' <<<"$kinds" | grep -vc '^mutations=')
if [ "${mutations:-0}" -ge 50 ] && [ "$nkinds" -ge 8 ]; then
  ok "the proxy lied (${mutations} mutations of ${nkinds} kinds)"
else
  bad "the proxy lied (at least 50 mutations of 8 kinds)" "$kinds"
fi
# ... and to the COSI binaries: on their custom resources, and to each of them.
ckinds=$(grep -E '^hostile-proxy: group objectstorage.k8s.io:' "$WORK/proxy.log" | grep -Eo 'mutations=[0-9]+ .*' | head -n 1)
echo "proxy, objectstorage.k8s.io: $ckinds"
grep -E '^hostile-proxy: by client:' "$WORK/proxy.log" | head -n 1 | sed 's/^hostile-proxy: /proxy, /'
cmut=$(sed -n 's/^mutations=\([0-9]*\).*/\1/p' <<<"$ckinds")
cnkinds=$(grep -Eo '[a-z0-9]+=[0-9]+' <<<"$ckinds" | grep -vc '^mutations=')
if [ "${cmut:-0}" -ge 20 ] && [ "$cnkinds" -ge 6 ]; then
  ok "the proxy lied about the COSI objects (${cmut} mutations of ${cnkinds} kinds)"
else
  bad "the proxy lied about the COSI objects (at least 20 mutations of 6 kinds)" "$ckinds"
fi
# ... and about the snapshot objects.
skinds=$(grep -E '^hostile-proxy: group snapshot.storage.k8s.io:' "$WORK/proxy.log" | grep -Eo 'mutations=[0-9]+ .*' | head -n 1)
echo "proxy, snapshot.storage.k8s.io: $skinds"
smut=$(sed -n 's/^mutations=\([0-9]*\).*/\1/p' <<<"$skinds")
snkinds=$(grep -Eo '[a-z0-9]+=[0-9]+' <<<"$skinds" | grep -vc '^mutations=')
if [ "${smut:-0}" -ge 20 ] && [ "$snkinds" -ge 6 ]; then
  ok "the proxy lied about the snapshot objects (${smut} mutations of ${snkinds} kinds)"
else
  bad "the proxy lied about the snapshot objects (at least 20 mutations of 6 kinds)" "$skinds"
fi
agents=$(grep -E '^hostile-proxy: by client:' "$WORK/proxy.log" | head -n 1)
for a in csi-resizer csi-snapshotter cosi-controller-manager cosi; do
  na=$(grep -Eo " $a=[0-9]+" <<<"$agents" | cut -d= -f2)
  if [ "${na:-0}" -ge 10 ]; then
    ok "... $na of them to $a's requests"
  else
    bad "... at least 10 of them to $a's requests" "$agents"
  fi
done
wait_for 10 test -s "$WORK/loadgen.json"
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
[ -n "${HOSTILE_LOGS:-}" ] && api /apis/storage.k8s.io/v1/volumeattachments >"$WORK/storage-vas.json"

# Resizes and snapshots: what the load generator left (its record) against
# kube-lite's claims, PVs and contents and the driver's snapshots.
# storage_py EXPR: EXPR over that state (pvc, pv, vsc: claims, PVs, contents by
# name; ds: the driver's snapshots by name; rec: the record), printed
storage_py() {
  api "/api/v1/namespaces/$NS/persistentvolumeclaims" >"$WORK/storage-pvcs.json"
  api /api/v1/persistentvolumes >"$WORK/storage-pvs.json"
  api $VSC >"$WORK/storage-contents.json"
  python3 - "$WORK" "$WORK/drv/state/status.json" "$WORK/loadgen.json" "$1" <<'PY'
import json, sys

def items(name):
    try:
        return {o["metadata"]["name"]: o for o in json.load(open("%s/storage-%s.json" % (sys.argv[1], name)))["items"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}

pvc, pv, vsc = items("pvcs"), items("pvs"), items("contents")
try:
    ds = {x["name"]: x for x in json.load(open(sys.argv[2])).get("snapshots", [])}
except (OSError, ValueError):
    ds = {}
try:
    rec = json.load(open(sys.argv[3]))
except (OSError, ValueError):
    rec = {}
# the kept claims grown: {name: {"asked": the size last asked for, "expect": the sizes the resizer may leave}}
grown = {n: k for n, k in rec.get("kept_claims", {}).items() if k["asked"] != "1Gi"}


def st(o):
    return o.get("status") or {}


def pv_of(claim):
    return pv.get((pvc.get(claim, {}).get("spec") or {}).get("volumeName") or "", {})


def pv_size(n):
    return ((pv_of(n).get("spec") or {}).get("capacity") or {}).get("storage")


def resized(n, k):
    """What is not yet as the resizer leaves a claim grown to one of the sizes
    k["expect"] with this driver (node expansion required, no kubelet): that
    size in allocatedResources as in the PV's capacity, NodeResizePending,
    FileSystemResizePending; capacity still the old 1Gi."""
    s = st(pvc.get(n, {}))
    conds = {c.get("type"): c.get("status") for c in s.get("conditions") or []}
    size = (s.get("allocatedResources") or {}).get("storage")
    have = [size in k["expect"] and size == pv_size(n), (s.get("allocatedResourceStatuses") or {}).get("storage"),
            conds.get("FileSystemResizePending"), (s.get("capacity") or {}).get("storage")]
    want = [True, "NodeResizePending", "True", "1Gi"]
    return [] if have == want else [(n, k, size, pv_size(n), have[1:])]


r = eval(sys.argv[4])
print(r if isinstance(r, str) else json.dumps(r, sort_keys=True))
PY
}
storage_is() { [ "$(storage_py "$1" | tee "$EXPECT_LAST")" = "$2" ]; }
echo "load generator: $(storage_py '"%d claims kept, %d grown: %d again while the first resize could run (%d now 3Gi), %d again while it waited for the node; %d contents left, %d deleted" % (len(rec.get("kept_claims", {})), len(grown), sum(1 for k in grown.values() if len(k["expect"]) == 2), sum(1 for n, k in grown.items() if len(k["expect"]) == 2 and pv_size(n) == "3Gi"), sum(1 for k in grown.values() if k["asked"] == "3Gi" and k["expect"] == ["2Gi"]), len(rec.get("contents_left", [])), len(rec.get("contents_deleted", [])))')"
check "the load generator grew kept claims (some twice) and made and deleted contents" "True" \
  "$(storage_py 'str(len(grown) >= 3 and any(k["asked"] == "3Gi" for k in grown.values()) and len(rec.get("contents_left", [])) >= 5 and len(rec.get("contents_deleted", [])) >= 10)')"
# Grown again while the first resize could still run: the resizer ends at either size. Grown
# again once that resize waited for the node (NodeResizePending): it stays at the first size
# until a kubelet finishes the node's part, as upstream's (expand_and_recover.go).
expect "every claim it grew and kept has a PV of the size asked for (2Gi; 2Gi or 3Gi when grown again during the resize; 2Gi when grown again while it waits for the node)" 60 storage_is \
  '[(n, k, pv_size(n)) for n, k in sorted(grown.items()) if pv_size(n) not in k["expect"]]' '[]'
expect "... and is as the resizer leaves it (allocatedResources the PV's size, NodeResizePending, FileSystemResizePending, capacity 1Gi)" 30 storage_is \
  '[x for n, k in sorted(grown.items()) for x in resized(n, k)]' '[]'
expect "every content it left is readyToUse, its snapshotHandle a snapshot the driver holds" 60 storage_is \
  '[(c["name"], st(vsc.get(c["name"], {})).get("readyToUse"), st(vsc.get(c["name"], {})).get("snapshotHandle")) for c in rec.get("contents_left", []) if st(vsc.get(c["name"], {})).get("readyToUse") is not True or ds.get("snapshot-" + c["uid"], {}).get("id") != st(vsc.get(c["name"], {})).get("snapshotHandle")]' '[]'
expect "every content it deleted is gone" 45 storage_is \
  '[c["name"] for c in rec.get("contents_deleted", []) if c["name"] in vsc]' '[]'
expect "the driver holds exactly the snapshots of the contents left (snapshot-<VolumeSnapshot UID>)" 30 storage_is \
  '[("too many", n) for n in sorted(set(ds) - {"snapshot-" + c["spec"]["volumeSnapshotRef"]["uid"] for c in vsc.values()})] + [("missing", n) for n in sorted({"snapshot-" + c["spec"]["volumeSnapshotRef"]["uid"] for c in vsc.values()} - set(ds))]' '[]'

# COSI: fresh BucketClaims and BucketAccesses, then the load generator's.
bclaim() { post "$COSI/namespaces/$NS/bucketclaims" '{"apiVersion":"objectstorage.k8s.io/v1alpha1","kind":"BucketClaim","metadata":{"name":"'"$1"'"},"spec":{"bucketClassName":"hostile-delete","protocols":["S3"]}}'; }
baccess() { post "$COSI/namespaces/$NS/bucketaccesses" '{"apiVersion":"objectstorage.k8s.io/v1alpha1","kind":"BucketAccess","metadata":{"name":"'"$1"'"},"spec":{"bucketClaimName":"'"$1"'","bucketAccessClassName":"hostile-key","credentialsSecretName":"'"$1"'-creds","protocol":"S3"}}'; }
claim_ready() { [ "$(api "$COSI/namespaces/$NS/bucketclaims/$1" | jq -r '.status.bucketReady // false' | tee "$EXPECT_LAST")" = true ]; }
# granted ACCESS: status.accessGranted, and its Secret is there with the BucketInfo
granted() {
  local g s
  g=$(api "$COSI/namespaces/$NS/bucketaccesses/$1" | jq -r '.status.accessGranted // false')
  s=$(api "/api/v1/namespaces/$NS/secrets/$1-creds" | jq -r '(.data.BucketInfo // "") | length > 0')
  echo "$1: accessGranted $g, Secret with BucketInfo $s" >"$EXPECT_LAST"
  [ "$g $s" = "true true" ]
}
started() { grep -q "$2" "$WORK/$1.log"; }
expect "the controller started (its caches synced)" 45 started ctrl 'objectstorage-controller started'
expect "the COSI sidecar started (its caches synced)" 45 started sc 'objectstorage-sidecar for driver'
CFINAL=(final-cosi-1 final-cosi-2)
for c in "${CFINAL[@]}"; do
  bclaim "$c"
  baccess "$c"
done
expect "the BucketClaims made after the lies stopped are ready" 45 all claim_ready "${CFINAL[@]}"
expect "their BucketAccesses are granted, with their Secrets" 45 all granted "${CFINAL[@]}"

# cosi_state: what is left, as JSON lines the checks below read (kube-lite's
# claims, accesses, Buckets and Secrets; the driver's buckets and grants)
cosi_state() {
  local r
  for r in namespaces/$NS/bucketclaims namespaces/$NS/bucketaccesses buckets; do
    api "$COSI/$r" >"$WORK/cosi-${r##*/}.json"
  done
  # The Secrets' metadata only: no credential in a kept file.
  api "/api/v1/namespaces/$NS/secrets" | jq '[.items[] | .metadata]' >"$WORK/cosi-secrets.json"
  {
    api "$COSI/namespaces/$NS/bucketclaims" | jq -c '{claims: [.items[] | {name: .metadata.name, uid: .metadata.uid, ready: (.status.bucketReady // false), deleting: (.metadata.deletionTimestamp != null)}]}'
    api "$COSI/namespaces/$NS/bucketaccesses" | jq -c '{accesses: [.items[] | {name: .metadata.name, uid: .metadata.uid, granted: (.status.accessGranted // false)}]}'
    api "$COSI/buckets" | jq -c '{buckets: [.items[] | {name: .metadata.name, claim: (.spec.bucketClaim.name // ""), ready: (.status.bucketReady // false)}]}'
    api "/api/v1/namespaces/$NS/secrets" | jq -c '{secrets: [.items[] | .metadata.name]}'
  } >"$WORK/cosi-state.json"
}
# cosi_py EXPR: EXPR over the state (c, a, b: claims, accesses, Buckets by name; sec: Secret
# names; d: the driver's buckets by name, dg: its grants' names; W: the Bucket names the claims
# not being deleted want, G: the grant names of the accesses granted; rec: the load
# generator's record), printed
cosi_py() {
  cosi_state
  python3 - "$WORK/cosi-state.json" "$WORK/cdrv/state/status.json" "$WORK/loadgen.json" "$1" <<'PY'
import json, sys
st = {}
for line in open(sys.argv[1]):
    if line.strip():
        st.update(json.loads(line))
try:
    drv = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    drv = {"buckets": []}
try:
    rec = json.load(open(sys.argv[3]))
except (OSError, ValueError):
    rec = {"claims_deleted": [], "claims_left": [], "accesses_deleted": [], "accesses_orphaned": [], "accesses_left": []}
c = {x["name"]: x for x in st.get("claims", [])}
a = {x["name"]: x for x in st.get("accesses", [])}
b = {x["name"]: x for x in st.get("buckets", [])}
sec = set(st.get("secrets", []))
d = {x["name"]: x for x in drv.get("buckets", [])}
W = {"bucket-" + x["uid"] for x in c.values() if not x["deleting"]}  # the Buckets the claims want
G = {"ba-" + x["uid"] for x in a.values() if x["granted"]}  # the grants the accesses granted hold
dg = {g["name"] for x in d.values() for g in x.get("grants", [])}


def diff(what, have, want):
    """What is in have and not in want, and the other way round."""
    return [(what + " too many", n) for n in sorted(set(have) - set(want))] + [
        (what + " missing", n) for n in sorted(set(want) - set(have))
    ]


r = eval(sys.argv[4])
print(r if isinstance(r, str) else json.dumps(r, sort_keys=True))
PY
}
# cosi_is NAME EXPR WANT: polls until EXPR prints WANT (the last value shown on failure)
cosi_is() { [ "$(cosi_py "$1" | tee "$EXPECT_LAST")" = "$2" ]; }
check "the load generator made and deleted BucketClaims and BucketAccesses" "True" \
  "$(cosi_py 'str(len(rec["claims_deleted"]) >= 5 and len(rec["accesses_deleted"]) >= 3 and len(rec["accesses_orphaned"]) >= 3 and len(rec["claims_left"]) >= 1)')"
expect "every BucketClaim the load generator deleted is gone" 60 cosi_is \
  '[n for n in rec["claims_deleted"] if n in c]' '[]'
expect "every BucketAccess it deleted is gone, with its Secret" 45 cosi_is \
  '[n for n in rec["accesses_deleted"] if n in a or n + "-creds" in sec]' '[]'
# An access whose claim went first: deleted with the Bucket (and then its Secret
# too) when it was granted, else left waiting, never granted (as upstream).
expect "every BucketAccess whose claim it deleted is gone with its Secret, or waits ungranted" 45 cosi_is \
  '[n for n in rec["accesses_orphaned"] if (n in a and a[n]["granted"]) or (n not in a and n + "-creds" in sec)]' '[]'
expect "every BucketClaim it left is ready" 60 cosi_is \
  '[n for n in rec["claims_left"] if not c.get(n, {}).get("ready")]' '[]'
expect "every BucketAccess it left is granted, with its Secret" 60 cosi_is \
  '[n for n in rec["accesses_left"] if not a.get(n, {}).get("granted") or n + "-creds" not in sec]' '[]'
expect "the Buckets left are exactly those of the claims not being deleted (bucket-<claim uid>), all ready" 45 cosi_is \
  'diff("Bucket", b, W) + [("not ready", n) for n in sorted(b) if not b[n]["ready"]]' '[]'
expect "the driver holds exactly the buckets of the Buckets left (none of a deleted claim)" 30 cosi_is \
  'diff("driver bucket", d, b)' '[]'
expect "the driver holds exactly the grants of the accesses granted (ba-<access uid>)" 30 cosi_is \
  'diff("driver grant", dg, G)' '[]'
for n in "${SIDECARS[@]}"; do
  if alive "$n"; then ok "$n is still alive"; else bad "$n is still alive" "$(tail -n 30 "$WORK/$n.log")"; fi
done
# For a post-mortem (HOSTILE_LOGS): every sidecar's metrics as it ends (queues, driver calls).
if [ -n "${HOSTILE_LOGS:-}" ]; then
  for n in prov att rsz snap ctrl sc; do curl -s --max-time 10 "http://127.0.0.1:${PORT[$n]}/metrics" >"$WORK/$n-metrics.log"; done
fi

# ---- stop: every sidecar exits 0 on SIGTERM, no sanitizer report anywhere ---------------------------

for n in reg att rsz snap prov sc ctrl; do
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
BH_PORT=$(head -n 1 "$WORK/blackhole.log")
sed "s#server: .*#server: http://127.0.0.1:$BH_PORT#" "$WORK/admin.kubeconfig" >"$WORK/blackhole.kubeconfig"
start prov-bh "$PROV" --csi-address="$SOCK" --kubeconfig="$WORK/blackhole.kubeconfig"
start att-bh "$ATT" --csi-address="$SOCK" --kubeconfig="$WORK/blackhole.kubeconfig"
start rsz-bh "$RSZ" --csi-address="$SOCK" --kubeconfig="$WORK/blackhole.kubeconfig"
start snap-bh "$SNAP" --csi-address="$SOCK" --kubeconfig="$WORK/blackhole.kubeconfig"
# The COSI binaries as deployed (leader election on: stuck taking the lease)
# and without leader election (stuck waiting for their caches).
start ctrl-bh "$CTRL" --kubeconfig="$WORK/blackhole.kubeconfig"
start sc-bh "$SC" --kubeconfig="$WORK/blackhole.kubeconfig" --driver-addr "unix://$CSOCK"
start ctrl-bh-nole "$CTRL" --kubeconfig="$WORK/blackhole.kubeconfig" --leader-election=false
start sc-bh-nole "$SC" --kubeconfig="$WORK/blackhole.kubeconfig" --driver-addr "unix://$CSOCK" --leader-election=false
expect "against a silent API server the provisioner is starting (it found the driver)" 20 \
  grep -q 'Detected CSI driver' "$WORK/prov-bh.log"
expect "... and the attacher" 20 grep -q 'Detected CSI driver' "$WORK/att-bh.log"
expect "... and the resizer" 20 grep -q 'Detected CSI driver' "$WORK/rsz-bh.log"
expect "... and the snapshotter" 20 grep -q 'Detected CSI driver' "$WORK/snap-bh.log"
detected() { grep -q 'Detected COSI driver' "$WORK/$1.log"; }
expect "... and the COSI sidecars (they found the COSI driver)" 20 all detected sc-bh sc-bh-nole
# asking NAME: NAME has a connection open to the silent API server (it is waiting on it):
# one of its sockets is an established TCP connection to that port (/proc, no ss needed)
asking() {
  python3 - "${PID[$1]:-0}" "$BH_PORT" <<'PY'
import os, sys
pid, port = sys.argv[1], int(sys.argv[2])
try:
    inodes = {os.readlink("/proc/%s/fd/%s" % (pid, fd))[8:-1] for fd in os.listdir("/proc/%s/fd" % pid)}
except OSError:
    sys.exit(1)
for line in open("/proc/net/tcp").readlines()[1:]:
    f = line.split()
    if f[3] == "01" and int(f[2].split(":")[1], 16) == port and f[9] in inodes:
        sys.exit(0)
sys.exit(1)
PY
}
for n in rsz-bh snap-bh ctrl-bh sc-bh ctrl-bh-nole sc-bh-nole; do
  expect "$n is waiting on the silent API server" 20 asking "$n"
done
sleep 1 # into the wait for the caches (or the lease)
# All signalled at once; each must be gone within 5 s of it.
BH=(prov-bh att-bh rsz-bh snap-bh ctrl-bh sc-bh ctrl-bh-nole sc-bh-nole)
declare -A GONE_AT=()
t=$SECONDS
for n in "${BH[@]}"; do kill -TERM "${PID[$n]}" 2>/dev/null; done
while [ $((SECONDS - t)) -lt 15 ]; do
  left=0
  for n in "${BH[@]}"; do
    [ -n "${GONE_AT[$n]:-}" ] && continue
    if alive "$n"; then left=1; else GONE_AT[$n]=$((SECONDS - t)); fi
  done
  [ "$left" = 0 ] && break
  sleep 0.1
done
for n in "${BH[@]}"; do
  stop "$n"
  took=${GONE_AT[$n]:-}
  case $n in
    ctrl-bh | sc-bh) why="not after the lease request's timeout" ;;
    *) why="not after the 5 min sync timeout" ;;
  esac
  check "$n, still starting, exits 0 on SIGTERM at once ($why)" "0 fast" \
    "${RC[$n]} $([ -n "$took" ] && [ "$took" -le 5 ] && echo fast || echo "after ${took:-more than 15} s")"
done
stop blackhole
stop drv
stop cdrv
reports=$(grep -El 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK"/*.log 2>/dev/null | xargs -r -n1 basename)
check "no sanitizer report in any log" "" "$reports"
grep -s 'handler error' "$WORK/proxy.log" | head -n 5
finish
