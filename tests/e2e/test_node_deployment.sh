#!/usr/bin/env bash
# csi-provisioner --node-deployment end to end: kube-lite (HTTPS, tokens,
# RBAC) with three nodes, each running its own example CSI driver (its own
# node id, topology segment and a pool for 12 volumes of 1 GiB) and its own
# provisioner in node mode with the service-account token that
# manifests/provisioner/rbac.yaml grants.
#
#   tests/e2e/test_node_deployment.sh <build-dir>
#
# 30 Immediate claims need more than any one node holds but less than all
# three: the provisioners race for them (selected-node annotation), each
# claim must be Bound exactly once, its volume on exactly the node its PV's
# nodeAffinity names, no pool overcommitted. Deleting the claims must leave
# no volume and no PV. Prints "ok"/"FAIL" per check and ends with
# "N passed, N failed"; every process started here is stopped (trap) and
# must exit 0 on SIGTERM.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
KL="$B/bin/kube-lite"
DRV="$B/bin/example-csi-driver"
PROV="$B/bin/csi-provisioner"
WORK=$(mktemp -d)
NS=default
NODES=(node-1 node-2 node-3)
CLAIMS=30
GI=1073741824
POOL=12Gi
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT


# ---- kubectl and JSON -------------------------------------------------------------------

# world: claims, PVs and every driver's volumes as one JSON document
world() {
  {
    echo '{"pvcs":'
    K get pvc -n "$NS" -o json
    echo ',"pvs":'
    K get pv -o json
    echo ',"drivers":{'
    local sep=""
    for n in "${NODES[@]}"; do
      printf '%s"%s":' "$sep" "$n"
      cat "$WORK/$n/state/status.json" 2>/dev/null || echo '{"volumes":[]}'
      sep=","
    done
    echo '}}'
  } 2>/dev/null
}
# wj EXPR: EXPR over world(): o; pvcs, pvs (item lists); vols (node -> volumes)
wj() {
  world | python3 -c '
import json, sys
try:
    o = json.load(sys.stdin)
    pvcs = o["pvcs"]["items"]
    pvs = o["pvs"]["items"]
    vols = {n: d.get("volumes", []) for n, d in o["drivers"].items()}
    r = eval(sys.argv[1])
except Exception as e:
    r = "<%s: %s>" % (type(e).__name__, e)
print(r if isinstance(r, str) else json.dumps(r, sort_keys=True))' "$1"
}

# ---- start: kube-lite with TLS, tokens and RBAC -----------------------------------------

for tool in kubectl python3 openssl curl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done

# Node mode needs NODE_NAME: one line and exit 1 before anything else.
out=$(env -u NODE_NAME "$PROV" --node-deployment --csi-address "$WORK/none.sock" 2>&1)
rc=$?
check "--node-deployment without NODE_NAME exits 1" 1 "$rc"
check "... with one line saying what to set" \
  "csi-provisioner: The NODE_NAME environment variable must be set when using --node-deployment." "$out"

"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
SA_USER="system:serviceaccount:$NS:csi-provisioner"
cat >"$WORK/tokens.csv" <<EOF
admin-token,admin,1,"system:masters"
provisioner-token,$SA_USER,2
EOF
start kube-lite "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/admin.kubeconfig" \
  --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --authorization-mode RBAC --kubeconfig-token admin-token
if wait_for 20 kl_up && alive kube-lite; then
  ok "kube-lite serves HTTPS with tokens and RBAC"
else
  bad "kube-lite starts" "$(cat "$WORK/kube-lite.log")"
  finish
fi
sed 's/token: admin-token/token: provisioner-token/' "$WORK/admin.kubeconfig" >"$WORK/provisioner.kubeconfig"
if K apply -f "$ROOT/manifests/provisioner/rbac.yaml" >"$WORK/rbac.out" 2>&1; then
  ok "rbac.yaml applies"
else
  bad "rbac.yaml applies" "$(cat "$WORK/rbac.out")"
fi

{
  for n in "${NODES[@]}"; do
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $n
  labels:
    topology.example.com/node: $n
---
EOF
  done
  cat <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-imm
provisioner: local.csi.example.com
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: noimm
provisioner: noimm.csi.example.com
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-wffc
provisioner: local.csi.example.com
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
EOF
} >"$WORK/cluster.yaml"
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then
  ok "three nodes and the storage classes created with kubectl"
else
  bad "cluster objects" "$(cat "$WORK/cluster.out")"
fi

refused() {
  curl -s --max-time 5 --cacert "$WORK/pki/ca.crt" -H 'Authorization: Bearer admin-token' \
    "$(sed -n 's/^kube-lite: serving on //p' "$WORK/kube-lite.log")/metrics" |
    grep -E '^apiserver_request_total\{.*code="40[13]"' | sort
}
REFUSED0=$(refused)

# ---- one driver and one provisioner per node ---------------------------------------------

for n in "${NODES[@]}"; do
  mkdir -p "$WORK/$n/state"
  start "drv-$n" "$DRV" --endpoint "unix://$WORK/$n/csi.sock" --state-dir "$WORK/$n/state" \
    --drivername local.csi.example.com --nodeid "$n" --topology "topology.example.com/node=$n" \
    --capacity "$POOL" --plugin-caps CONTROLLER_SERVICE,VOLUME_ACCESSIBILITY_CONSTRAINTS \
    --controller-caps CREATE_DELETE_VOLUME,GET_CAPACITY
done
for n in "${NODES[@]}"; do
  # --leader-election is given on purpose: node mode ignores it (one lease
  # for every node would leave all but one idle).
  start "prov-$n" env NODE_NAME="$n" "$PROV" --csi-address "$WORK/$n/csi.sock" \
    --kubeconfig "$WORK/provisioner.kubeconfig" --worker-threads=8 --retry-interval-start=100ms \
    --retry-interval-max=2s --kube-api-qps=100 --kube-api-burst=200 --node-deployment \
    --node-deployment-immediate-binding --node-deployment-base-delay=300ms \
    --node-deployment-max-delay=2s --leader-election "--leader-election-namespace=$NS"
done
started() { grep -q 'provisioner started' "$WORK/$1.log" || ! alive "$1"; }
for n in "${NODES[@]}"; do
  if wait_for 30 started "prov-$n" && alive "prov-$n"; then
    ok "prov-$n starts in node mode"
  else
    bad "prov-$n starts" "$(tail -n 20 "$WORK/prov-$n.log")"
  fi
done
contains "prov-node-2 names its node and the driver's node id" \
  "node deployment for node node-2 (driver node id node-2)" "$(cat "$WORK/prov-node-2.log")"
contains "prov-node-1 ignores --leader-election in node mode" \
  "--leader-election is ignored with --node-deployment" "$(cat "$WORK/prov-node-1.log")"

# A driver without topology cannot tell nodes' PVs apart: the sidecar says so.
mkdir -p "$WORK/plain/state"
start drv-plain "$DRV" --endpoint "unix://$WORK/plain/csi.sock" --state-dir "$WORK/plain/state" \
  --drivername plain.csi.example.com --nodeid node-1 --plugin-caps CONTROLLER_SERVICE
start prov-plain env NODE_NAME=node-1 "$PROV" --csi-address "$WORK/plain/csi.sock" \
  --kubeconfig "$WORK/provisioner.kubeconfig" --node-deployment
if wait_for 30 started prov-plain && alive prov-plain; then
  contains "node mode with a driver that reports no topology warns" \
    "the driver reports no topology for this node" "$(cat "$WORK/prov-plain.log")"
else
  bad "prov-plain starts" "$(tail -n 20 "$WORK/prov-plain.log")"
fi
stop prov-plain
stop drv-plain

# --node-deployment-immediate-binding=false: an Immediate claim waits until
# something else (a custom controller, here kubectl) selects the node.
mkdir -p "$WORK/noimm/state"
start drv-noimm "$DRV" --endpoint "unix://$WORK/noimm/csi.sock" --state-dir "$WORK/noimm/state" \
  --drivername noimm.csi.example.com --nodeid node-3 --topology topology.example.com/node=node-3 \
  --plugin-caps CONTROLLER_SERVICE,VOLUME_ACCESSIBILITY_CONSTRAINTS
start prov-noimm env NODE_NAME=node-3 "$PROV" --csi-address "$WORK/noimm/csi.sock" \
  --kubeconfig "$WORK/provisioner.kubeconfig" --node-deployment \
  --node-deployment-immediate-binding=false --node-deployment-base-delay=100ms \
  --retry-interval-start=100ms --retry-interval-max=1s
if wait_for 30 started prov-noimm && alive prov-noimm; then
  ok "prov-noimm starts with --node-deployment-immediate-binding=false"
else
  bad "prov-noimm starts" "$(tail -n 20 "$WORK/prov-noimm.log")"
fi
cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: n-0
  namespace: $NS
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: noimm
  resources:
    requests:
      storage: 1Gi
EOF
sleep 2
n_vols() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1])).get("volumes", [])))' "$WORK/noimm/state/status.json" 2>/dev/null || echo 0; }
check "immediate binding off: an Immediate claim stays Pending, no node taken, no volume" "Pending||0" \
  "$(K get pvc n-0 -o jsonpath='{.status.phase}|{.metadata.annotations.volume\.kubernetes\.io/selected-node}' 2>/dev/null)|$(n_vols)"
K annotate pvc n-0 volume.kubernetes.io/selected-node=node-3 >/dev/null 2>&1
n_bound() { [ "$(K get pvc n-0 -o jsonpath='{.status.phase}' 2>/dev/null)" = Bound ]; }
expect "... once its node is selected by someone else, that node's provisioner binds it" 30 n_bound
K delete pvc n-0 --wait=false >/dev/null 2>&1
n_empty() { [ "$(n_vols)" = 0 ]; }
expect "... and deletes the volume with the claim" 30 n_empty
stop prov-noimm
stop drv-noimm

# ---- WaitForFirstConsumer: the scheduler's node provisions -----------------------------------

cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: w-0
  namespace: $NS
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local-wffc
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: pod-w-0
  namespace: $NS
spec:
  nodeName: node-2
  containers:
  - name: app
    image: busybox
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: w-0
EOF
w_bound() { [ "$(K get pvc w-0 -o jsonpath='{.status.phase}' 2>/dev/null)" = Bound ]; }
expect "a WaitForFirstConsumer claim used by a pod on node-2 becomes Bound" 30 w_bound
check "... its volume is made by node-2's driver only" '{"node-1": 0, "node-2": 1, "node-3": 0}' \
  "$(wj '{n: len(v) for n, v in vols.items()}')"
K delete pod pod-w-0 --wait=false >/dev/null 2>&1
K delete pvc w-0 --wait=false >/dev/null 2>&1
w_gone() { [ "$(wj 'sum(len(v) for v in vols.values()) + len(pvs)')" = 0 ]; }
expect "... and deleting it removes the volume and the PV" 30 w_gone

# ---- RESOURCE_EXHAUSTED gives the claim back to the race ----------------------------------

# node-1's driver refuses its next CreateVolume as full; the claim names
# node-1 already, so node-1 must try, give the node back (annotation
# removed, its intent dropped first) and another attempt binds it.
printf '%s\n' '{"CreateVolume": {"fail": {"count": 1, "code": "RESOURCE_EXHAUSTED", "message": "pool full"}}}' \
  >"$WORK/node-1/state/faults.json.tmp" && mv "$WORK/node-1/state/faults.json.tmp" "$WORK/node-1/state/faults.json"
cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: r-0
  namespace: $NS
  annotations:
    volume.kubernetes.io/selected-node: node-1
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local-imm
  resources:
    requests:
      storage: 1Gi
EOF
# (an emptied finalizer list prints as [])
r_state() { K get pvc r-0 -o jsonpath='{.status.phase}|{.metadata.finalizers}' 2>/dev/null | sed 's/|\[\]$/|/'; }
r_done() { [ "$(r_state)" = "Bound|" ]; }
wait_for 60 r_done
check "a claim whose node answers RESOURCE_EXHAUSTED is rescheduled and Bound, without the in-progress finalizer" \
  "Bound|" "$(r_state)"
# Events are written by a background thread of the provisioner: node-1's may come after
# the claim is Bound elsewhere.
r_failed_event() {
  K get events --field-selector involvedObject.name=r-0 -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}' \
    >"$WORK/r-0.events" 2>/dev/null
  grep -qF "ProvisioningFailed: rpc error: code = ResourceExhausted desc = pool full" "$WORK/r-0.events"
}
if wait_for 20 r_failed_event; then ok "... after a ProvisioningFailed event from node-1"; else
  bad "... after a ProvisioningFailed event from node-1" "events: $(cat "$WORK/r-0.events")"; fi
check "... with exactly one volume, on the node it selects now" \
  "[\"$(K get pvc r-0 -o jsonpath='{.metadata.annotations.volume\.kubernetes\.io/selected-node}' 2>/dev/null)\"]" \
  "$(wj '[n for n, v in vols.items() for x in v if x["name"] == [c for c in pvcs if c["metadata"]["name"] == "r-0"][0]["spec"]["volumeName"]]')"
rm -f "$WORK/node-1/state/faults.json"
K delete pvc r-0 --wait=false >/dev/null 2>&1
expect "... and deleting it removes the volume and the PV" 30 w_gone

# ---- 30 Immediate claims, raced for by three nodes ---------------------------------------

{
  for ((i = 0; i < CLAIMS; i++)); do
    cat <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: c-$i
  namespace: $NS
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local-imm
  resources:
    requests:
      storage: 1Gi
---
EOF
  done
} >"$WORK/claims.yaml"
K create -f "$WORK/claims.yaml" >/dev/null 2>&1
all_bound() {
  [ "$(wj 'sum(1 for c in pvcs if c["status"].get("phase") == "Bound")')" = "$CLAIMS" ]
}
expect "all $CLAIMS Immediate claims become Bound" 120 all_bound

check "every claim is bound to its own PV (pvc-<uid>)" "$CLAIMS" \
  "$(wj 'len({c["spec"].get("volumeName") for c in pvcs if c["spec"].get("volumeName") == "pvc-" + c["metadata"]["uid"]})')"
check "every claim's selected node is one of the three nodes" "$CLAIMS" \
  "$(wj 'sum(1 for c in pvcs if c["metadata"].get("annotations", {}).get("volume.kubernetes.io/selected-node") in ("node-1", "node-2", "node-3"))')"
check "one PV per claim, no more" "$CLAIMS" "$(wj 'len(pvs)')"
check "the drivers hold exactly one volume per claim in total" "$CLAIMS" \
  "$(wj 'sum(len(v) for v in vols.values())')"
# For each PV: the nodes whose driver holds its volume (by handle and name),
# and the node its nodeAffinity names; both must be that one node.
check "each PV's volume exists in exactly one driver: the node its nodeAffinity names" "[]" \
  "$(wj '[p["metadata"]["name"] for p in pvs if [n for n, v in vols.items() if any(x["id"] == p["spec"]["csi"]["volumeHandle"] and x["name"] == p["metadata"]["name"] for x in v)] != [t["matchExpressions"][0]["values"][0] for t in p["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]]]')"
check "each claim's selected node is the node of its volume" "[]" \
  "$(wj '[c["metadata"]["name"] for c in pvcs if c["metadata"]["annotations"].get("volume.kubernetes.io/selected-node") not in [n for n, v in vols.items() if any(x["name"] == c["spec"]["volumeName"] for x in v)]]')"
check "nodeAffinity is the single In term of the node's segment" "[]" \
  "$(wj '[p["metadata"]["name"] for p in pvs if [[(e["key"], e["operator"], len(e["values"])) for e in t["matchExpressions"]] for t in p["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]] != [[("topology.example.com/node", "In", 1)]]]')"
check "each PV's provisioner identity ends with the driver and its node" "[]" \
  "$(wj '[p["metadata"]["name"] for p in pvs if not __import__("re").fullmatch(r"[0-9]{13}-[0-9]{1,4}-local\.csi\.example\.com-" + p["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0], p["spec"]["csi"]["volumeAttributes"].get("storage.kubernetes.io/csiProvisionerIdentity", ""))]')"
check "no driver holds more than its pool (12 GiB)" "[]" \
  "$(wj "[n for n, v in vols.items() if sum(x['capacity_bytes'] for x in v) > 12 * $GI]")"
used=$(wj '[len(vols[n]) for n in sorted(vols)]')
if [ "$(wj 'sum(1 for v in vols.values() if v) >= 3')" = true ]; then
  ok "all three nodes provisioned some of them ($used)"
else
  bad "all three nodes provisioned some of them" "$used"
fi
check "no claim keeps the provisioning-in-progress finalizer" "[]" \
  "$(wj '[c["metadata"]["name"] for c in pvcs if "external-provisioner.volume.kubernetes.io/provisioning-in-progress" in c["metadata"].get("finalizers", [])]')"
# Each node keeps its own intent record (a Lease named after driver and node).
records=$(K get leases -n "$NS" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' 2>/dev/null |
  grep '^local-csi-example-com-provisioner-intents' | sort | tr '\n' ' ')
check "each node keeps its own intent record" \
  "local-csi-example-com-provisioner-intents-node-1 local-csi-example-com-provisioner-intents-node-2 local-csi-example-com-provisioner-intents-node-3 " \
  "$records"

# ---- a claim no node has room for waits, then lands where room appears ---------------------

# 36 GiB of pools hold 30 GiB: at most 6 GiB is free, so no node fits 7 GiB.
cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: big
  namespace: $NS
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local-imm
  resources:
    requests:
      storage: 7Gi
EOF
sleep 4
check "a 7 GiB claim no node has room for stays Pending, unowned, with no CreateVolume" \
  "Pending||0" \
  "$(K get pvc big -o jsonpath='{.status.phase}|{.metadata.annotations.volume\.kubernetes\.io/selected-node}' 2>/dev/null)|$(K get events --field-selector involvedObject.name=big -o name 2>/dev/null | wc -l)"
# Free the fullest node: only it then has room.
FULL=$(wj 'max(sorted(vols), key=lambda n: len(vols[n]))')
for c in $(wj "' '.join(c['metadata']['name'] for c in pvcs if c['metadata'].get('annotations', {}).get('volume.kubernetes.io/selected-node') == '$FULL')"); do
  K delete pvc "$c" --wait=false >/dev/null 2>&1
done
big_bound() { [ "$(K get pvc big -o jsonpath='{.status.phase}' 2>/dev/null)" = Bound ]; }
expect "once $FULL's claims are deleted, the 7 GiB claim is Bound (checked again after the delay)" 60 big_bound
check "... on $FULL, the only node with room" "$FULL" \
  "$(K get pvc big -o jsonpath='{.metadata.annotations.volume\.kubernetes\.io/selected-node}' 2>/dev/null)"
check "... and its volume is in $FULL's driver" "[\"$FULL\"]" \
  "$(wj '[n for n, v in vols.items() if any(x["capacity_bytes"] == 7 * '"$GI"' for x in v)]')"

# ---- delete them all: each node deletes its own volumes -------------------------------------

# DeleteVolume calls so far and the volumes each driver holds now: every
# call from here on must be for a volume of that node's own.
calls0=$(wj '{n: d.get("calls", {}).get("DeleteVolume", 0) + len(d.get("volumes", [])) for n, d in o["drivers"].items()}')
K delete pvc --all -n "$NS" --wait=false >/dev/null 2>&1
none_left() { [ "$(wj '[sum(len(v) for v in vols.values()), len(pvs), len(pvcs)]')" = "[0, 0, 0]" ]; }
expect "after deleting every claim, no volume, PV or claim is left" 90 none_left
check "every driver ends with zero volumes" '{"node-1": 0, "node-2": 0, "node-3": 0}' \
  "$(wj '{n: len(v) for n, v in vols.items()}')"
check "each driver got one DeleteVolume per volume it held, none for other nodes' volumes" "$calls0" \
  "$(wj '{n: d.get("calls", {}).get("DeleteVolume", 0) for n, d in o["drivers"].items()}')"

# ---- the end: every process stops cleanly -------------------------------------------------------

check "no request of a provisioner was refused (401/403)" "$REFUSED0" "$(refused)"
stop_all
for n in "${NAMES[@]}"; do
  check "$n exits 0 on SIGTERM" 0 "${RC[$n]:-none}"
done
for n in "${NAMES[@]}"; do
  if grep -Eq 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK/$n.log"; then
    bad "$n: sanitizer report"
    cat "$WORK/$n.log"
  fi
done
finish
