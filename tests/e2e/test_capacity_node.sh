#!/usr/bin/env bash
# Storage capacity tracking in node mode (--enable-capacity with
# --node-deployment) end to end: kube-lite (HTTPS, tokens, RBAC) with three
# nodes, each running its own example CSI driver (its own node segment and
# pool: 4, 6 and 8 GiB) and its own provisioner in node mode with the
# service-account token that manifests/provisioner/rbac.yaml grants, as the
# pods of one DaemonSet (POD_NAME, NAMESPACE, ownerref level 1).
#
#   tests/e2e/test_capacity_node.sh <build-dir>
#
# kube-lite only: CSIStorageCapacity is storage.k8s.io/v1 from Kubernetes 1.24
# on, and the real control plane here is 1.20 (test_capacity.sh checks there
# that --enable-capacity refuses to start).
#
# Each node must publish exactly one CSIStorageCapacity per
# WaitForFirstConsumer class: its own segment in nodeTopology, its own
# managed-by label (external-provisioner-<node>), its own driver's capacity,
# the DaemonSet as owner. A volume provisioned on node-2 lowers node-2's
# object only; a stopped node's object is left alone by the others; a
# central provisioner's object is left alone by all. A node name too long
# for a label gets upstream's hashed label; a driver without topology gets
# an object without nodeTopology and a warning. Prints "ok"/"FAIL" per
# check and ends with "N passed, N failed"; every process started here is
# stopped (trap) and must exit 0 on SIGTERM.
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
declare -A POOL=([node-1]=4Gi [node-2]=6Gi [node-3]=8Gi)
DRIVER=local.csi.example.com
DS_UID=7c0e2b1a-0000-4000-8000-0000000000d5
# 48 characters: "external-provisioner-<node>" would be 69, over a label's 63
LONG=node-with-a-long-name.rack-17.zone-a.example.com
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
EXPECT_LAST="$WORK/csc.last"

trap cleanup EXIT


# ---- kubectl and JSON -------------------------------------------------------------------

# cj EXPR: EXPR over the capacity objects (items; mine = the local driver's
# objects of node-1..3, managed by external-provisioner-<node>; mb(i) = label)
cj() {
  K get csistoragecapacities -n "$NS" -o json 2>/dev/null | python3 -c '
import json, sys
try:
    o = json.load(sys.stdin)
    items = o["items"]
    mb = lambda i: i["metadata"].get("labels", {}).get("csi.storage.k8s.io/managed-by", "")
    mine = [i for i in items if mb(i).startswith("external-provisioner-") and i["metadata"]["labels"].get("csi.storage.k8s.io/drivername") == "local.csi.example.com"]
    r = eval(sys.argv[1])
except Exception as e:
    r = "<%s: %s>" % (type(e).__name__, e)
print(r if isinstance(r, str) else json.dumps(r, sort_keys=True))' "$1"
}
# The node objects as "class node capacity managed-by" lines, sorted.
SUMMARY='"\n".join(sorted("%s %s %s %s" % (i["storageClassName"], i.get("nodeTopology", {}).get("matchLabels", {}).get("topology.example.com/node", "-"), i.get("capacity"), mb(i)) for i in mine))'
# summary_is EXPECTED: the summary equals EXPECTED (else it is left in $WORK/csc.last)
summary_is() { cj "$SUMMARY" >"$WORK/csc.last"; [ "$(cat "$WORK/csc.last")" = "$1" ]; }
refused() { klmetrics | grep -E '^apiserver_request_total\{.*code="40[13]"' | sort; }
# gc_calls NODE: GetCapacity calls node NODE's driver answered so far
gc_calls() {
  python3 -c 'import json, sys
try:
    print(json.load(open(sys.argv[1])).get("calls", {}).get("GetCapacity", 0))
except Exception:
    print(0)' "$WORK/$1/state/status.json"
}
# polls_done N NODE...: N more polls (one GetCapacity per WaitForFirstConsumer class, two
# classes) of each NODE since gc_mark: the settle point of the "nothing changes" checks,
# which a fixed sleep is not on a loaded machine
declare -A GC0=()
gc_mark() { local n; for n in "$@"; do GC0[$n]=$(gc_calls "$n"); done; }
polls_done() {
  local want=$(($1 * 2)) n
  shift
  for n in "$@"; do [ "$(($(gc_calls "$n") - ${GC0[$n]:-0}))" -ge "$want" ] || return 1; done
}

# ---- start: kube-lite with TLS, tokens and RBAC -----------------------------------------

for tool in kubectl python3 openssl curl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
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

# Nodes, the DaemonSet's pods (one per node, and one for the long-named
# node), two WaitForFirstConsumer classes, an Immediate one (no objects
# without --capacity-for-immediate-binding) and an object of a central
# provisioner for the same driver, which no node may touch.
{
  for n in "${NODES[@]}" "$LONG"; do
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $n
  labels:
    topology.example.com/node: $n
---
apiVersion: v1
kind: Pod
metadata:
  name: csi-provisioner-node-$n
  namespace: $NS
  ownerReferences:
  - apiVersion: apps/v1
    kind: DaemonSet
    name: csi-provisioner-node
    uid: $DS_UID
    controller: true
spec:
  nodeName: $n
  containers:
  - name: csi-provisioner
    image: csi-provisioner
---
EOF
  done
  cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-wffc
provisioner: $DRIVER
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-fast
provisioner: $DRIVER
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
parameters:
  tier: fast
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-imm
provisioner: $DRIVER
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata:
  name: central
  namespace: $NS
  labels:
    csi.storage.k8s.io/drivername: $DRIVER
    csi.storage.k8s.io/managed-by: external-provisioner
storageClassName: local-wffc
nodeTopology:
  matchLabels:
    topology.example.com/node: node-1
capacity: 1Gi
EOF
} >"$WORK/cluster.yaml"
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then
  ok "nodes, the DaemonSet's pods, the classes and a central object created with kubectl"
else
  bad "cluster objects" "$(cat "$WORK/cluster.out")"
fi
REFUSED0=$(refused)

# ---- one driver and one provisioner per node ---------------------------------------------

start_drv() {
  local n=$1
  mkdir -p "$WORK/$n/state"
  start "drv-$n" "$DRV" --endpoint "unix://$WORK/$n/csi.sock" --state-dir "$WORK/$n/state" \
    --drivername "$DRIVER" --nodeid "$n" --topology "topology.example.com/node=$n" \
    --capacity "${POOL[$n]:-2Gi}" --plugin-caps CONTROLLER_SERVICE,VOLUME_ACCESSIBILITY_CONSTRAINTS \
    --controller-caps CREATE_DELETE_VOLUME,GET_CAPACITY
}
start_prov() {
  local n=$1
  start "prov-$n" env NODE_NAME="$n" NAMESPACE="$NS" POD_NAME="csi-provisioner-node-$n" \
    "$PROV" --csi-address "$WORK/$n/csi.sock" --kubeconfig "$WORK/provisioner.kubeconfig" \
    --worker-threads=4 --retry-interval-start=100ms --retry-interval-max=2s \
    --node-deployment --node-deployment-immediate-binding=false \
    --enable-capacity --capacity-poll-interval=1s
}
started() { grep -q 'provisioner started' "$WORK/$1.log" || ! alive "$1"; }
for n in "${NODES[@]}"; do start_drv "$n"; done
for n in "${NODES[@]}"; do start_prov "$n"; done
for n in "${NODES[@]}"; do
  if wait_for 30 started "prov-$n" && alive "prov-$n"; then
    ok "prov-$n starts in node mode with --enable-capacity"
  else
    bad "prov-$n starts" "$(tail -n 20 "$WORK/prov-$n.log")"
  fi
done
contains "prov-node-2 says which segment and label it publishes under" \
  "fixed topology segment {topology.example.com/node=node-2}, managed-by external-provisioner-node-2" \
  "$(cat "$WORK/prov-node-2.log")"
contains "... and that the DaemonSet owns its objects" \
  "using apps/v1/DaemonSet csi-provisioner-node as owner of CSIStorageCapacity objects" \
  "$(cat "$WORK/prov-node-2.log")"

WANT="local-fast node-1 4Gi external-provisioner-node-1
local-fast node-2 6Gi external-provisioner-node-2
local-fast node-3 8Gi external-provisioner-node-3
local-wffc node-1 4Gi external-provisioner-node-1
local-wffc node-2 6Gi external-provisioner-node-2
local-wffc node-3 8Gi external-provisioner-node-3"
want() { summary_is "$WANT"; }
expect "one object per node and WaitForFirstConsumer class: its segment, its label, its pool" 30 want
check "each nodeTopology is exactly its node's segment" '[]' \
  "$(cj '[i["metadata"]["name"] for i in mine if i["nodeTopology"] != {"matchLabels": {"topology.example.com/node": i["metadata"]["labels"]["csi.storage.k8s.io/managed-by"][len("external-provisioner-"):]}}]')"
check "every node object is owned by the DaemonSet and labelled with the driver" '[]' \
  "$(cj '[i["metadata"]["name"] for i in mine if i["metadata"].get("ownerReferences") != [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "csi-provisioner-node", "uid": "'"$DS_UID"'", "controller": True}] or i["metadata"]["labels"].get("csi.storage.k8s.io/drivername") != "'"$DRIVER"'"]')"
check "the central provisioner's object is left as it was" "1Gi external-provisioner" \
  "$(K get csistoragecapacity central -n "$NS" -o jsonpath='{.capacity} {.metadata.labels.csi\.storage\.k8s\.io/managed-by}' 2>/dev/null)"
NAMES0=$(cj 'sorted(i["metadata"]["name"] for i in mine)')
gc_mark "${NODES[@]}"
wait_for 30 polls_done 3 "${NODES[@]}" || bad "three polls of every node within 30 s"
check "three polls later the same objects, no duplicate, none deleted" "$NAMES0" \
  "$(cj 'sorted(i["metadata"]["name"] for i in mine)')"

# ---- a volume on node-2 lowers node-2's object only ---------------------------------------

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
      storage: 2Gi
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
w_bound() { [ "$(K get pvc w-0 -n "$NS" -o jsonpath='{.status.phase}' 2>/dev/null)" = Bound ]; }
expect "a 2 GiB WaitForFirstConsumer claim used on node-2 becomes Bound" 30 w_bound
WANT2="local-fast node-1 4Gi external-provisioner-node-1
local-fast node-2 4Gi external-provisioner-node-2
local-fast node-3 8Gi external-provisioner-node-3
local-wffc node-1 4Gi external-provisioner-node-1
local-wffc node-2 4Gi external-provisioner-node-2
local-wffc node-3 8Gi external-provisioner-node-3"
want2() { summary_is "$WANT2"; }
expect "... node-2's objects drop by 2 GiB, node-1's and node-3's stay" 30 want2
check "... by updating the same objects" "$NAMES0" "$(cj 'sorted(i["metadata"]["name"] for i in mine)')"
K delete pod pod-w-0 -n "$NS" --wait=false >/dev/null 2>&1
K delete pvc w-0 -n "$NS" --wait=false >/dev/null 2>&1
expect "deleting the claim gives node-2 its 6 GiB back" 30 want

# ---- a stopped node's objects are nobody else's business -----------------------------------

N3=$(cj 'sorted(i["metadata"]["name"] for i in mine if i["nodeTopology"]["matchLabels"]["topology.example.com/node"] == "node-3")')
stop prov-node-3
check "prov-node-3 exits 0 on SIGTERM" 0 "${RC[prov-node-3]}"
gc_mark node-1 node-2
wait_for 30 polls_done 4 node-1 node-2 || bad "four polls of node-1 and node-2 within 30 s"
check "four polls of the other nodes later node-3's objects are still there, unchanged" "$WANT" \
  "$(cj "$SUMMARY")"
check "... the same objects" "$N3" \
  "$(cj 'sorted(i["metadata"]["name"] for i in mine if i["nodeTopology"]["matchLabels"]["topology.example.com/node"] == "node-3")')"
gc_mark node-3
start_prov node-3
if wait_for 30 started prov-node-3 && alive prov-node-3; then
  ok "prov-node-3 starts again"
else
  bad "prov-node-3 starts again" "$(tail -n 20 "$WORK/prov-node-3.log")"
fi
# its first sync and two polls: whatever it would create or delete is done by then
wait_for 30 polls_done 3 node-3 || bad "three polls of the restarted node-3 within 30 s"
check "... and takes its objects back: none created, none deleted" "$NAMES0" \
  "$(cj 'sorted(i["metadata"]["name"] for i in mine)')"

# ---- a node name too long for the label ----------------------------------------------------

start_drv "$LONG"
start_prov "$LONG"
if wait_for 30 started "prov-$LONG" && alive "prov-$LONG"; then
  ok "a provisioner on a node with a 48-character name starts"
else
  bad "long node name starts" "$(tail -n 20 "$WORK/prov-$LONG.log")"
fi
# upstream's rule: base cut to fit, FNV-1a of the base, the whole node name
LONG_MB="exter-53f40b57-$LONG"
long_ok() {
  [ "$(cj '"|".join(sorted("%s %s %s" % (i["storageClassName"], i["nodeTopology"]["matchLabels"]["topology.example.com/node"], i["capacity"]) for i in items if mb(i) == "'"$LONG_MB"'"))')" = \
    "local-fast $LONG 2Gi|local-wffc $LONG 2Gi" ]
}
expect "its objects carry the shortened label $LONG_MB (63 characters) and its segment" 30 long_ok
check "... which is 63 characters long" 63 "${#LONG_MB}"
stop "prov-$LONG"
stop "drv-$LONG"

# ---- a driver without topology -------------------------------------------------------------

# As upstream: the node's fixed segment is empty, so its objects have no
# nodeTopology (they match every node); the sidecar warns.
mkdir -p "$WORK/plain/state"
cat <<EOF | K create -f - >/dev/null
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: plain-wffc
provisioner: plain.csi.example.com
volumeBindingMode: WaitForFirstConsumer
EOF
start drv-plain "$DRV" --endpoint "unix://$WORK/plain/csi.sock" --state-dir "$WORK/plain/state" \
  --drivername plain.csi.example.com --nodeid node-1 --capacity 3Gi \
  --plugin-caps CONTROLLER_SERVICE --controller-caps CREATE_DELETE_VOLUME,GET_CAPACITY
start prov-plain env NODE_NAME=node-1 NAMESPACE="$NS" POD_NAME=csi-provisioner-node-node-1 \
  "$PROV" --csi-address "$WORK/plain/csi.sock" --kubeconfig "$WORK/provisioner.kubeconfig" \
  --node-deployment --enable-capacity --capacity-poll-interval=1s
if wait_for 30 started prov-plain && alive prov-plain; then
  contains "node mode with a driver without topology warns about objects without nodeTopology" \
    "its CSIStorageCapacity objects have no nodeTopology" "$(cat "$WORK/prov-plain.log")"
else
  bad "prov-plain starts" "$(tail -n 20 "$WORK/prov-plain.log")"
fi
plain_ok() {
  [ "$(cj '[[i["storageClassName"], i["nodeTopology"], i["capacity"], mb(i)] for i in items if i["metadata"]["labels"].get("csi.storage.k8s.io/drivername") == "plain.csi.example.com"]')" = \
    '[["plain-wffc", {}, "3Gi", "external-provisioner-node-1"]]' ]
}
expect "... and publishes one object without nodeTopology under node-1's label" 30 plain_ok
stop prov-plain
stop drv-plain
check "the local driver's node objects are untouched by it" "$WANT" "$(cj "$SUMMARY")"

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
