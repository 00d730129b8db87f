#!/usr/bin/env bash
# worlds: kube-lite kubernetes
# Storage capacity tracking end to end (--enable-capacity): kube-lite (HTTPS,
# bearer tokens, RBAC), the example CSI driver with topology and csi-provisioner
# running with the service-account token that manifests/provisioner/rbac.yaml
# grants. CSIStorageCapacity objects are checked with kubectl: one per
# (zone x WaitForFirstConsumer class), their capacity after a provision and a
# delete, their removal with their class or segment, Immediate classes only
# with --capacity-for-immediate-binding, the owner per
# --capacity-ownerref-level, no write while nothing changes.
#
#   tests/e2e/test_capacity.sh <build-dir>
#
# CSIStorageCapacity is storage.k8s.io/v1 from Kubernetes 1.24 on, so with
# WORLD=kubernetes (the real control plane 1.20) only one scenario runs: the
# provisioner with --enable-capacity refuses to start, with exit code 1 and one
# line saying what the API server lacks.
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed"; exits
# non-zero when a check failed. Every process started here is stopped with
# SIGTERM and must exit 0.
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
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
EXPECT_LAST="$WORK/csc.last"

trap cleanup EXIT

# ---- kubectl and JSON -------------------------------------------------------------------

# drv DIR EXPR: EXPR over the driver in DIR (lib.sh's drv_eval)
drv() { drv_eval "$1" "$2"; }
events() {
  K get events -n "${2:-$NS}" --field-selector "involvedObject.name=$1" \
    -o jsonpath='{range .items[*]}{.reason}{"\t"}{.message}{"\n"}{end}' 2>/dev/null
}

# Our capacity objects (managed-by external-provisioner) as "class zone
# capacity max" lines, sorted; zone "-" for an object without topology.
CSC_SUMMARY='"\n".join(sorted("%s %s %s %s" % (i["storageClassName"], i.get("nodeTopology", {}).get("matchLabels", {}).get("topology.example.com/zone", "-"), i.get("capacity"), i.get("maximumVolumeSize", "-")) for i in o["items"] if i["metadata"]["labels"].get("csi.storage.k8s.io/managed-by") == "external-provisioner"))'
cscs() { K get csistoragecapacities -n "$NS" -o json 2>/dev/null | pyj "$CSC_SUMMARY"; }
# csc_is EXPECTED: the summary equals EXPECTED (else it is left in $WORK/csc.last)
csc_is() { cscs >"$WORK/csc.last"; [ "$(cat "$WORK/csc.last")" = "$1" ]; }
csc_json() { K get csistoragecapacities -n "$NS" -o json 2>/dev/null | pyj "$1"; }
prov_metric() { curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
# Writes kube-lite answered on CSIStorageCapacity objects so far.
csc_writes() {
  klmetrics | awk '/^apiserver_request_total\{/ && /resource="csistoragecapacities"/ && /verb="(create|update|patch|delete)"/ {s += $NF} END {print s + 0}'
}
refused() { klmetrics | grep -E '^apiserver_request_total\{.*code="40[13]"' | sort; }
# csc_writes_are N: N writes since W0. kube-lite counts a write a moment after the object
# changed in its store, so a check right after seeing the change polls for the count.
csc_writes_are() { echo "$(($(csc_writes) - W0))" >"$EXPECT_LAST"; [ "$(cat "$EXPECT_LAST")" = "$1" ]; }

# ---- start: kube-lite with TLS, tokens and RBAC -----------------------------------------

for tool in kubectl python3 openssl curl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; echo "$passed passed, $failed failed"; exit 1; }
done
"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
SA_USER="system:serviceaccount:$NS:csi-provisioner"
cat >"$WORK/tokens.csv" <<EOF
admin-token,admin,1,"system:masters"
provisioner-token,$SA_USER,2
EOF

# ---- the real control plane 1.20: --enable-capacity fails fast ---------------------------------

# 1.20 has no CSIStorageCapacity in storage.k8s.io/v1 (only v1alpha1, behind a feature gate):
# the provisioner must say so at start-up and exit 1, not wait for a cache that never syncs.
if on_real; then
  if ! world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
    --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
    --authorization-mode RBAC --kubeconfig-token admin-token; then
    finish
  fi
  sed 's/token: admin-token/token: provisioner-token/' "$WORK/admin.kubeconfig" >"$WORK/provisioner.kubeconfig"
  if K apply -f "$ROOT/manifests/provisioner/rbac.yaml" >"$WORK/rbac.out" 2>&1; then ok "rbac.yaml applies"; else bad "rbac.yaml applies" "$(cat "$WORK/rbac.out")"; fi
  REFUSED0=$(requests '.*' '.*' '40[13]' "$SA_USER")
  mkdir -p "$WORK/drv/state"
  start drv "$DRV" --endpoint "unix://$WORK/drv/csi.sock" --state-dir "$WORK/drv/state" \
    --drivername cap.csi.example.com --nodeid node-1 --capacity 10Gi \
    --plugin-caps CONTROLLER_SERVICE --controller-caps CREATE_DELETE_VOLUME,GET_CAPACITY
  drv_up() { grep -qs 'serving on' "$WORK/drv.log" || ! alive drv; }
  if wait_for 30 drv_up && alive drv; then ok "the driver serves"; else bad "the driver starts" "$(cat "$WORK/drv.log")"; fi
  NAMESPACE=$NS start prov "$PROV" --kubeconfig "$WORK/provisioner.kubeconfig" \
    --csi-address "$WORK/drv/csi.sock" --enable-capacity --capacity-ownerref-level=-1
  gone() { ! alive prov; }
  expect "--enable-capacity on 1.20: the provisioner exits at start-up" 60 gone
  stop prov
  check "with exit code 1" 1 "${RC[prov]:-none}"
  check "and one line saying what the API server lacks" \
    "csi-provisioner: --enable-capacity: the API server does not serve storage.k8s.io/v1 CSIStorageCapacity (Kubernetes 1.24 or newer)" \
    "$(grep -v '^I[0-9]' "$WORK/prov.log")"
  check "its discovery request was allowed (no 401/403)" "$REFUSED0" "$(requests '.*' '.*' '40[13]' "$SA_USER")"
  stop drv
  check "drv exits 0 on SIGTERM" 0 "${RC[drv]:-none}"
  for n in "${NAMES[@]}"; do
    if grep -Eq 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK/$n.log"; then
      bad "$n: sanitizer report"
      cat "$WORK/$n.log"
    fi
  done
  finish
fi

# ---- everything else: kube-lite -------------------------------------------------------------

start kube-lite "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/admin.kubeconfig" \
  --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --authorization-mode RBAC --kubeconfig-token admin-token
if wait_for 20 kl_up && alive kube-lite; then
  ok "kube-lite serves HTTPS with tokens and RBAC"
else
  bad "kube-lite starts" "$(cat "$WORK/kube-lite.log")"
  echo "$passed passed, $failed failed"
  exit 1
fi
sed 's/token: admin-token/token: provisioner-token/' "$WORK/admin.kubeconfig" >"$WORK/provisioner.kubeconfig"

contains "without rbac.yaml the service account may not list capacity objects" "Forbidden" \
  "$(KP get csistoragecapacities -n "$NS" 2>&1)"
if K apply -f "$ROOT/manifests/provisioner/rbac.yaml" >"$WORK/rbac.out" 2>&1; then ok "rbac.yaml applies"; else bad "rbac.yaml applies" "$(cat "$WORK/rbac.out")"; fi
check "with rbac.yaml it may list capacity objects in its namespace" "" "$(KP get csistoragecapacities -n "$NS" -o name 2>&1)"
contains "but not in another namespace" "Forbidden" "$(KP get csistoragecapacities -n kube-system 2>&1)"

# Nodes: node-1 in z1, node-2 and node-3 in z2 (one segment), node-4 without
# the driver, node-5 whose CSINode names the key but whose label is missing.
DRIVER=cap.csi.example.com
{
  for n in 1:z1 2:z2 3:z2 5:; do
    name=node-${n%%:*} zone=${n#*:}
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels:
    kubernetes.io/hostname: $name
$([ -n "$zone" ] && echo "    topology.example.com/zone: $zone")
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: $name
spec:
  drivers:
  - name: $DRIVER
    nodeID: $name
    topologyKeys: [topology.example.com/zone]
---
EOF
  done
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: node-4
  labels:
    topology.example.com/zone: z4
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: node-4
spec:
  drivers:
  - name: other.csi.example.com
    nodeID: node-4
    topologyKeys: [topology.example.com/zone]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fast
provisioner: $DRIVER
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: slow
provisioner: $DRIVER
volumeBindingMode: WaitForFirstConsumer
parameters:
  tier: slow
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: imm
provisioner: $DRIVER
volumeBindingMode: Immediate
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: foreign
provisioner: other.csi.example.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: Pod
metadata:
  name: csi-provisioner-0
  namespace: $NS
  ownerReferences:
  - apiVersion: apps/v1
    kind: StatefulSet
    name: csi-provisioner
    uid: 5e0c1d4a-0000-4000-8000-000000000001
    controller: true
spec:
  containers:
  - name: csi-provisioner
    image: csi-provisioner
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata:
  name: leftover
  namespace: $NS
  labels:
    csi.storage.k8s.io/drivername: $DRIVER
    csi.storage.k8s.io/managed-by: external-provisioner
storageClassName: deleted-long-ago
nodeTopology:
  matchLabels:
    topology.example.com/zone: z1
capacity: 1Gi
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata:
  name: someone-elses
  namespace: $NS
  labels:
    csi.storage.k8s.io/drivername: $DRIVER
    csi.storage.k8s.io/managed-by: another-manager
storageClassName: fast
nodeTopology:
  matchLabels:
    topology.example.com/zone: z1
capacity: 1Gi
EOF
} >"$WORK/cluster.yaml"
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then
  ok "nodes, CSINodes, classes, the provisioner's pod and two old capacity objects created"
else
  bad "cluster objects" "$(cat "$WORK/cluster.out")"
fi
POD_UID=$(jp pod csi-provisioner-0 '{.metadata.uid}')

# ---- driver and provisioner -------------------------------------------------------------------

mkdir -p "$WORK/drv/state"
start drv "$DRV" --endpoint "unix://$WORK/drv/csi.sock" --state-dir "$WORK/drv/state" \
  --drivername "$DRIVER" --nodeid node-1 --capacity 10Gi \
  --plugin-caps CONTROLLER_SERVICE,VOLUME_ACCESSIBILITY_CONSTRAINTS \
  --controller-caps CREATE_DELETE_VOLUME,GET_CAPACITY --topology topology.example.com/zone=z1
HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
PROV_ARGS=(--csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/provisioner.kubeconfig"
  --worker-threads=4 --retry-interval-start=100ms --retry-interval-max=2s --enable-capacity
  --kube-api-capacity-qps=100 --kube-api-capacity-burst=100 "--http-endpoint=127.0.0.1:$HTTP_PORT")
started() { grep -q 'provisioner started' "$WORK/$1.log" || ! alive "$1"; }

# Misconfiguration fails fast with one line.
out=$(env -u NAMESPACE POD_NAME=csi-provisioner-0 "$PROV" "${PROV_ARGS[@]}" 2>&1)
rc=$?
check "without NAMESPACE: exit 1 and one line saying what to set" "1|csi-provisioner: need NAMESPACE env variable for CSIStorageCapacity objects (--enable-capacity)" "$rc|$out"
out=$(env -u POD_NAME NAMESPACE=$NS "$PROV" "${PROV_ARGS[@]}" 2>&1)
rc=$?
contains "without POD_NAME (owner level 1): exit $rc, one line naming POD_NAME" "1|csi-provisioner: need POD_NAME env variable" "$rc|$out"
out=$(NAMESPACE=$NS POD_NAME=csi-provisioner-0 timeout 30 "$PROV" "${PROV_ARGS[@]}" --capacity-ownerref-level=2 2>&1 | grep -v '^[IW][0-9]')
contains "owner level 2 needs the StatefulSet: the lookup failure is fatal" "look up owner(s) of pod" "$out"
# Requests refused so far (the checks above): any refused later is the
# provisioner lacking a permission of rbac.yaml.
REFUSED0=$(refused)

# Run 1: the pod as owner, a poll interval long enough that every change seen
# below comes from an event or a provision.
NAMESPACE=$NS POD_NAME=csi-provisioner-0 start prov1 "$PROV" "${PROV_ARGS[@]}" \
  --capacity-ownerref-level=0 --capacity-poll-interval=1h
ready prov1
WANT1="fast z1 10Gi 10Gi
fast z2 0 0
slow z1 10Gi 10Gi
slow z2 0 0"
WANT1_WITH_FOREIGN="$WANT1"
expect "one object per zone x WaitForFirstConsumer class (z2 has no capacity here), the leftover gone, the foreign one kept" 20 csc_is "$WANT1_WITH_FOREIGN"
check "every object of ours is named csisc-*, labelled and owned by the pod" "true" \
  "$(csc_json "all(i['metadata']['name'].startswith('csisc-') and i['metadata'].get('generateName') == 'csisc-' and i['metadata']['labels'] == {'csi.storage.k8s.io/drivername': '$DRIVER', 'csi.storage.k8s.io/managed-by': 'external-provisioner'} and i['metadata'].get('ownerReferences') == [{'apiVersion': 'v1', 'kind': 'Pod', 'name': 'csi-provisioner-0', 'uid': '$POD_UID', 'controller': True}] for i in o['items'] if i['metadata']['labels']['csi.storage.k8s.io/managed-by'] == 'external-provisioner')")"
check "nodeTopology is a matchLabels selector of the zone" '{"matchLabels": {"topology.example.com/zone": "z1"}}' \
  "$(csc_json "[i['nodeTopology'] for i in o['items'] if i['storageClassName'] == 'slow' and i['capacity'] == '10Gi'][0]")"
check "the foreign object (other managed-by) is untouched" "someone-elses 1Gi" \
  "$(jp csistoragecapacities someone-elses '{.metadata.name} {.capacity}')"
contains "the driver was asked with GetCapacity" '"GetCapacity"' "$(drv "$WORK/drv" "s['calls']")"
metrics_are() { [ "$(prov_metric csistoragecapacities_desired_goal) $(prov_metric csistoragecapacities_desired_current) $(prov_metric csistoragecapacities_obsolete)" = "$1" ]; }
expect "gauges: desired_goal 4, desired_current 4, obsolete 0" 10 metrics_are "4 4 0"
contains "the work queue is upstream's csistoragecapacity" 'workqueue_adds_total{name="csistoragecapacity"}' \
  "$(curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics")"

# A provision refreshes at once (the poll is an hour away) every class in
# the segment of the new volume (its PV's nodeAffinity), and nothing else.
RV_Z2=$(csc_json "[i['metadata']['resourceVersion'] for i in o['items'] if i['storageClassName'] == 'fast' and i['capacity'] == '0'][0]")
W0=$(csc_writes)
cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: c1
  namespace: $NS
  annotations:
    volume.kubernetes.io/selected-node: node-1
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: fast
  resources:
    requests:
      storage: 3Gi
EOF
expect "the claim is provisioned" 20 phase_is pvc c1 Bound
WANT2="fast z1 7Gi 7Gi
fast z2 0 0
slow z1 7Gi 7Gi
slow z2 0 0"
expect "after the provision, both classes in z1 show 7Gi" 10 csc_is "$WANT2"
check "the object of fast in z2 (another segment) was not rewritten" "$RV_Z2" \
  "$(csc_json "[i['metadata']['resourceVersion'] for i in o['items'] if i['storageClassName'] == 'fast' and i['capacity'] == '0'][0]")"
expect "two writes for the provision: the two changed objects" 10 csc_writes_are 2

# Someone deletes one of our objects: it comes back. Someone edits one: it is put right.
VICTIM=$(csc_json "[i['metadata']['name'] for i in o['items'] if i['storageClassName'] == 'slow' and i['capacity'] == '0'][0]")
K delete csistoragecapacity "$VICTIM" -n "$NS" >/dev/null
recreated() { csc_is "$WANT2" && is_gone csistoragecapacity "$VICTIM"; }
expect "an object deleted by hand is re-created" 10 recreated
EDIT=$(csc_json "[i['metadata']['name'] for i in o['items'] if i['storageClassName'] == 'slow' and i['capacity'] == '7Gi'][0]")
K patch csistoragecapacity "$EDIT" -n "$NS" --type=merge -p '{"capacity":"1"}' >/dev/null
edited() { [ "$(jp csistoragecapacity "$EDIT" '{.capacity}')" = 7Gi ]; }
expect "an object edited by hand is corrected" 10 edited

# A deleted StorageClass takes its objects along; so does a segment that loses its nodes.
K delete storageclass slow >/dev/null
expect "deleting class slow deletes its objects" 10 csc_is "fast z1 7Gi 7Gi
fast z2 0 0"
K delete node node-2 node-3 >/dev/null
expect "deleting the nodes of z2 deletes the objects of z2" 10 csc_is "fast z1 7Gi 7Gi"
K label node node-5 topology.example.com/zone=z5 >/dev/null
expect "a node that gets its zone label adds a segment" 10 csc_is "fast z1 7Gi 7Gi
fast z5 0 0"
expect "gauges follow: goal 2, current 2, obsolete 0" 10 metrics_are "2 2 0"

# A delete refreshes the class too.
K delete pvc c1 --wait=false >/dev/null
pv_gone() { [ "$(K get pv -o name 2>/dev/null)" = "" ]; }
expect "the claim's volume is deleted" 20 pv_gone
expect "after the delete, class fast in z1 shows 10Gi again" 10 csc_is "fast z1 10Gi 10Gi
fast z5 0 0"
stop prov1
check "prov1 exits 0 on SIGTERM" 0 "${RC[prov1]:-none}"

# Run 2: Immediate classes too, no owner, a short poll. The objects of the
# first run keep their owner (upstream only adds a missing owner).
W0=$(csc_writes)
NAMESPACE=$NS start prov2 "$PROV" "${PROV_ARGS[@]}" --capacity-ownerref-level=-1 \
  --capacity-for-immediate-binding --capacity-poll-interval=1s
ready prov2
expect "with --capacity-for-immediate-binding the Immediate class gets objects" 10 csc_is "fast z1 10Gi 10Gi
fast z5 0 0
imm z1 10Gi 10Gi
imm z5 0 0"
check "with --capacity-ownerref-level=-1 new objects have no owner" "[null, null]" \
  "$(csc_json "[i['metadata'].get('ownerReferences') for i in o['items'] if i['storageClassName'] == 'imm']")"
expect "the restart wrote only the two new objects" 10 csc_writes_are 2
# Two polls of the four objects (8 GetCapacity calls), however slow the machine: a fixed
# sleep could see fewer on a loaded one. The writes are counted across those polls.
G0=$(drv_calls "$WORK/drv" GetCapacity)
W0=$(csc_writes)
t_poll=$SECONDS
polled() { G1=$(drv_calls "$WORK/drv" GetCapacity); [ "$((G1 - G0))" -ge 8 ]; }
if wait_for 20 polled; then ok "the 1 s poll asks the driver for every object again ($((G1 - G0)) GetCapacity calls in $((SECONDS - t_poll)) s)"; else bad "polls call GetCapacity" "$G0 -> $G1 in 20 s"; fi
check "polls that find nothing changed write nothing" 0 "$(($(csc_writes) - W0))"
stop prov2
check "prov2 exits 0 on SIGTERM" 0 "${RC[prov2]:-none}"

# Run 3: owner level 1 (the pod's StatefulSet, read from the pod only): the
# existing objects gain that owner with a patch.
NAMESPACE=$NS POD_NAME=csi-provisioner-0 start prov3 "$PROV" "${PROV_ARGS[@]}" \
  --capacity-ownerref-level=1 --capacity-poll-interval=1h
ready prov3
contains "the owner is the StatefulSet" "using apps/v1/StatefulSet csi-provisioner as owner" "$(cat "$WORK/prov3.log")"
owned_by_sts() {
  [ "$(csc_json "all(any(r['kind'] == 'StatefulSet' and r.get('controller') for r in i['metadata'].get('ownerReferences', [])) for i in o['items'] if i['metadata']['labels']['csi.storage.k8s.io/managed-by'] == 'external-provisioner' and i['storageClassName'] == 'fast')")" = true ]
}
expect "objects without that owner get it added" 10 owned_by_sts
expect "without --capacity-for-immediate-binding the Immediate class loses its objects" 10 csc_is "fast z1 10Gi 10Gi
fast z5 0 0"
stop prov3
check "prov3 exits 0 on SIGTERM" 0 "${RC[prov3]:-none}"

# Run 4: a driver without topology (no VOLUME_ACCESSIBILITY_CONSTRAINTS) has
# one segment matching every node: one object per class, nodeTopology {}.
mkdir -p "$WORK/flat/state"
start flat "$DRV" --endpoint "unix://$WORK/flat/csi.sock" --state-dir "$WORK/flat/state" \
  --drivername flat.csi.example.com --nodeid node-1 --capacity 5Gi \
  --plugin-caps CONTROLLER_SERVICE --controller-caps CREATE_DELETE_VOLUME,GET_CAPACITY
cat <<EOF | K create -f - >/dev/null
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: flat
provisioner: flat.csi.example.com
volumeBindingMode: WaitForFirstConsumer
EOF
# (the last --csi-address wins)
NAMESPACE=$NS start prov4 "$PROV" "${PROV_ARGS[@]}" --csi-address "$WORK/flat/csi.sock" \
  --capacity-ownerref-level=-1 --capacity-poll-interval=1h
ready prov4
flat_is() {
  [ "$(csc_json "[[i['storageClassName'], i['nodeTopology'], i['capacity']] for i in o['items'] if i['metadata']['labels'].get('csi.storage.k8s.io/drivername') == 'flat.csi.example.com']")" = "$1" ]
}
expect "without topology: one object for the class, matching every node" 10 flat_is '[["flat", {}, "5Gi"]]'
check "the first driver's objects are left alone by this one's provisioner" "fast z1 10Gi 10Gi
fast z5 0 0
flat - 5Gi 5Gi" "$(cscs)"
stop prov4
check "prov4 exits 0 on SIGTERM" 0 "${RC[prov4]:-none}"

# ---- the end -----------------------------------------------------------------------------------

check "no request of a provisioner was refused (401/403)" "$REFUSED0" "$(refused)"
stop_all
for n in "${NAMES[@]}"; do
  case "$n" in prov*) ;; *) check "$n exits 0 on SIGTERM" 0 "${RC[$n]:-none}" ;; esac
done
for n in "${NAMES[@]}"; do
  if grep -Eq 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK/$n.log"; then
    bad "$n: sanitizer report"
    cat "$WORK/$n.log"
  fi
done
if [ "$failed" -gt 0 ]; then
  for n in "${NAMES[@]}"; do
    echo "---- last lines of $n.log"
    tail -n 15 "$WORK/$n.log"
  done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
