#!/usr/bin/env bash
# csi-attacher end to end: kube-lite (HTTPS, bearer tokens, RBAC, its binder
# and attach/detach stand-ins), the example CSI driver, csi-provisioner for
# the volumes, and csi-attacher running with the service-account token that
# manifests/attacher/rbac.yaml grants. Pods on nodes make and delete the
# VolumeAttachments, as kube-controller-manager does; checks read the API
# with kubectl and the driver's status.json.
#
#   tests/e2e/test_attacher.sh <build-dir>       (WORLD=kubernetes: on the real control plane)
#
# worlds: kube-lite kubernetes
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed"; exits
# non-zero when a check failed. Every process started here is stopped with
# SIGTERM and must exit 0 (the leader killed on purpose excepted).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
KL="$B/bin/kube-lite"
DRV="$B/bin/example-csi-driver"
PROV="$B/bin/csi-provisioner"
ATT="$B/bin/csi-attacher"
CSI_CALL="$B/tests/e2e/csi_call"
WORK=$(mktemp -d)
NS=default
EXPECT_LAST="$WORK/last"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

# drv DIR EXPR: EXPR over the driver in DIR (lib.sh's drv_eval)
drv() { drv_eval "$1" "$2"; }
KA() { kubectl --kubeconfig "$WORK/attacher.kubeconfig" --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
started() { grep -qs 'attacher started' "$WORK/$1.log" || ! alive "$1"; }

require_tools kubectl python3 openssl curl
require_built "$ATT" "$CSI_CALL"

# ---- kube-lite with TLS, tokens, RBAC and the attach stand-in -----------------------------

rbac_world_up attacher csi-attacher --controllers binder,attach || finish

contains "without rbac.yaml the attacher's account may not watch VolumeAttachments" "Forbidden" \
  "$(KA get volumeattachments 2>&1)"
out=$(K apply -f "$ROOT/manifests/attacher/rbac.yaml" 2>&1)
check "rbac.yaml applies" "serviceaccount/csi-attacher created
clusterrole.rbac.authorization.k8s.io/external-attacher-runner created
clusterrolebinding.rbac.authorization.k8s.io/csi-attacher-role created
role.rbac.authorization.k8s.io/external-attacher-cfg created
rolebinding.rbac.authorization.k8s.io/csi-attacher-role-cfg created" "$out"
check "with rbac.yaml it may list VolumeAttachments and nodes" "" \
  "$(KA get volumeattachments -o name 2>&1)$(KA get nodes -o name 2>&1)"
contains "but may not delete PVs" "Forbidden" "$(KA delete pv nothing 2>&1)"
contains "nor list secrets" "Forbidden" "$(KA get secrets 2>&1)"

# node-1: CSINode entry. node-2: only the Node annotation (the seed design's
# fallback). node-gone: an id the driver does not know (a node that went away).
cat >"$WORK/cluster.yaml" <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: node-1
  annotations:
    volumes.kubernetes.io/controller-managed-attach-detach: "true"
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: node-1
spec:
  drivers:
  - name: hostpath.csi.example.com
    nodeID: node-1
---
apiVersion: v1
kind: Node
metadata:
  name: node-2
  annotations:
    volumes.kubernetes.io/controller-managed-attach-detach: "true"
    csi.volume.kubernetes.io/nodeid: '{"hostpath.csi.example.com":"node-2"}'
---
apiVersion: v1
kind: Node
metadata:
  name: node-gone
  annotations:
    volumes.kubernetes.io/controller-managed-attach-detach: "true"
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: node-gone
spec:
  drivers:
  - name: hostpath.csi.example.com
    nodeID: gone-id
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: att
provisioner: hostpath.csi.example.com
parameters:
  csi.storage.k8s.io/fstype: ext4
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: att-sec
provisioner: hostpath.csi.example.com
parameters:
  csi.storage.k8s.io/controller-publish-secret-name: ${pvc.name}-publish
  csi.storage.k8s.io/controller-publish-secret-namespace: ${pvc.namespace}
---
apiVersion: v1
kind: Secret
metadata:
  name: c-sec-publish
  namespace: default
data:
  user: YWRtaW4=
---
apiVersion: v1
kind: Secret
metadata:
  name: c-badsec-publish
  namespace: default
data:
  user: bWFsbG9yeQ==
EOF
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then
  ok "nodes, CSINodes, classes and secrets created"
else
  bad "cluster objects" "$(cat "$WORK/cluster.out")"
fi

refused() { requests '.*' '(?!events).*' '40[13]' 'system:serviceaccount:.*'; }
REFUSED0=$(refused)

# ---- drivers, provisioner, attachers --------------------------------------------------------

driver() {
  local name=$1 dname=$2
  shift 2
  mkdir -p "$WORK/$name/state"
  start "$name" "$DRV" --endpoint "unix://$WORK/$name/csi.sock" --state-dir "$WORK/$name/state" \
    --drivername "$dname" --nodeid node-1 "$@"
}
# A: every capability; knows node-1 and node-2; the error table's NOT_FOUND
# for unknown nodes; publish secrets must hold user=admin.
driver drv-a hostpath.csi.example.com --known-nodes node-2 --unpublish-missing-ok=false \
  --publish-secret user=admin --plugin-caps CONTROLLER_SERVICE
# T: no PUBLISH_UNPUBLISH_VOLUME: the trivial handler, two replicas.
driver drv-t trivial.csi.example.com --plugin-caps CONTROLLER_SERVICE --controller-caps CREATE_DELETE_VOLUME
start prov "$PROV" --csi-address "$WORK/drv-a/csi.sock" --kubeconfig "$WORK/admin.kubeconfig" \
  --worker-threads=4 --retry-interval-start=100ms --retry-interval-max=2s --kube-api-qps=100 --kube-api-burst=200
HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ATT_ARGS=(--kubeconfig "$WORK/attacher.kubeconfig" --worker-threads=4 --retry-interval-start=100ms
  --retry-interval-max=1s --kube-api-qps=100 --kube-api-burst=200)
start att-a "$ATT" --csi-address "$WORK/drv-a/csi.sock" "${ATT_ARGS[@]}" --reconcile-sync=1s \
  --http-endpoint="127.0.0.1:$HTTP_PORT"
LE_PORT1=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LE_PORT2=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LE_ARGS=(--leader-election "--leader-election-namespace=$NS" --leader-election-lease-duration=3s
  --leader-election-renew-deadline=2s --leader-election-retry-period=500ms)
HAVE_UTS=0
if unshare -u -- true 2>/dev/null; then HAVE_UTS=1; fi
replica() {
  local name=$1
  shift
  if [ "$HAVE_UTS" = 1 ]; then
    start "$name" unshare -u -- sh -c 'hostname "$0" && exec "$@"' "$name" \
      "$ATT" --csi-address "$WORK/drv-t/csi.sock" "${ATT_ARGS[@]}" "${LE_ARGS[@]}" "$@"
  else
    start "$name" "$ATT" --csi-address "$WORK/drv-t/csi.sock" "${ATT_ARGS[@]}" "${LE_ARGS[@]}" "$@"
  fi
}
replica le-one --http-endpoint="127.0.0.1:$LE_PORT1"
replica le-two --http-endpoint="127.0.0.1:$LE_PORT2"
if wait_for 60 started att-a && alive att-a; then ok "att-a starts"; else bad "att-a starts" "$(tail -n 20 "$WORK/att-a.log")"; fi

# ---- helpers over the API ------------------------------------------------------------------

# api PATH: a GET as admin with curl (polls would spend most of their time
# starting kubectl on a loaded machine)
api() { acurl "$1"; }
# post PATH JSON / del PATH: writes as admin with curl
post() { acurl -H 'Content-Type: application/json' -X POST --data "$2" "$1" >/dev/null; }
del() { acurl -X DELETE "$1" >/dev/null; }
pvc() { # pvc NAME [CLASS]: a ReadWriteOnce claim of 1Gi
  post "/api/v1/namespaces/$NS/persistentvolumeclaims" '{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"'"$1"'"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"'"${2:-att}"'","resources":{"requests":{"storage":"1Gi"}}}}'
}
pod() { # pod NAME NODE CLAIM
  post "/api/v1/namespaces/$NS/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"'"$1"'"},"spec":{"nodeName":"'"$2"'","containers":[{"name":"app","image":"busybox"}],"volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"'"$3"'"}}]}}'
}
delpod() { for p in "$@"; do del "/api/v1/namespaces/$NS/pods/$p?gracePeriodSeconds=0"; done; }
# va NAME NODE CLAIM / delva NAME...: a VolumeAttachment made and deleted by hand, as the
# attach-detach controller would. The error cases use these: after failed attaches the real
# controller backs off (up to 2 minutes) before it detaches, and it never attaches a
# single-node volume to a second node; the attacher's side is the same either way.
va() {
  post /apis/storage.k8s.io/v1/volumeattachments '{"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachment","metadata":{"name":"'"$1"'"},"spec":{"attacher":"hostpath.csi.example.com","nodeName":"'"$2"'","source":{"persistentVolumeName":"'"$(pv_of "$3")"'"}}}'
}
delva() { for v in "$@"; do del "/apis/storage.k8s.io/v1/volumeattachments/$v"; done; }
pv_of() { api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | pyj 'o.get("spec", {}).get("volumeName", "")'; }
handle_of() { api "/api/v1/persistentvolumes/$(pv_of "$1")" | pyj 'o["spec"]["csi"]["volumeHandle"]'; }
# va_of CLAIM NODE: the name of the VolumeAttachment for the claim's PV on NODE
va_of() {
  local pv
  pv=$(pv_of "$1")
  api /apis/storage.k8s.io/v1/volumeattachments |
    pyj "([i['metadata']['name'] for i in o['items'] if i['spec']['source'].get('persistentVolumeName') == '$pv' and i['spec']['nodeName'] == '$2'] + [''])[0]"
}
va_json() { api "/apis/storage.k8s.io/v1/volumeattachments/$1"; }
va_field() { va_json "$1" | pyj "$2" | tee "$EXPECT_LAST"; }
attached() { [ "$(va_field "$1" 'o.get("status", {}).get("attached", False)')" = true ]; }
att_error_has() { [[ "$(va_field "$1" 'o.get("status", {}).get("attachError", {}).get("message", "")')" == *"$2"* ]]; }
det_error_has() { [[ "$(va_field "$1" 'o.get("status", {}).get("detachError", {}).get("message", "")')" == *"$2"* ]]; }
no_att_error() { [ "$(va_field "$1" '"attachError" in o.get("status", {})')" = false ]; }
va_gone() { [ "$(va_json "$1" | pyj 'o.get("code", 0)')" = 404 ]; }
published() { drv "$WORK/drv-a" "sorted(byid.get('$1', {}).get('published_nodes', []))"; }
published_is() { [ "$(published "$1" | tee "$EXPECT_LAST")" = "$2" ]; }
has_va() { [ -n "$(va_of "$1" "$2")" ]; }
# patches RESOURCE: PATCH writes so far to the resource (and its subresources) that took effect
# (2xx): a guarded patch refused on a stale cache (422) and retried is one write, not two
patches() { requests '(patch|PATCH)' "$1(/[a-z]+)?" '2[0-9][0-9]'; }
bound() { [ "$(api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | pyj 'o.get("status", {}).get("phase", "")')" = Bound ]; }
# writes_are "PV VA": the PATCH writes to PVs and VAs since PVP0 and VAP0. A write the attacher
# made is visible in the API a moment before the API counts it (kube-lite counts after the
# store, kube-apiserver's audit line comes at the response's end): the checks poll for it.
writes_are() {
  echo "$(($(patches persistentvolumes) - PVP0)) $(($(patches volumeattachments) - VAP0))" >"$EXPECT_LAST"
  [ "$(cat "$EXPECT_LAST")" = "$1" ]
}

# ---- attach and detach through pods ------------------------------------------------------------

for c in c1 c2 c3 cg c-sec c-badsec; do
  case $c in c-sec | c-badsec) pvc "$c" att-sec ;; *) pvc "$c" ;; esac
done
for c in c1 c2 c3 cg c-sec c-badsec; do expect "claim $c is provisioned and Bound" 30 bound "$c"; done
H1=$(handle_of c1)
FIN=external-attacher/hostpath-csi-example-com
sleep 1 # let the provisioner's last writes land before counting
PVP0=$(patches persistentvolumes)
VAP0=$(patches volumeattachments)
pod p1 node-1 c1
expect "a pod on node-1 gets a VolumeAttachment" 20 has_va c1 node-1
VA1=$(va_of c1 node-1)
expect "the attacher attaches it" 30 attached "$VA1"
check "the driver publishes the volume on node-1" '["node-1"]' "$(published "$H1")"
check "publication: RWO with SINGLE_NODE_MULTI_WRITER, mount, ext4, read-write" \
  '["SINGLE_NODE_MULTI_WRITER", "mount", "ext4", false]' \
  "$(drv "$WORK/drv-a" "[[p['access_mode'], p['access_type'], p['fs_type'], p['readonly']] for p in byid['$H1']['publications']][0]")"
vj=$(va_json "$VA1")
check "VA: our finalizer, the node-id annotation, attachmentMetadata = publish_context" \
  "[[\"$FIN\"], \"node-1\", {\"devicePath\": \"$(drv "$WORK/drv-a" "byid['$H1']['path']")\"}]" \
  "$(pyj '[o["metadata"].get("finalizers"), o["metadata"].get("annotations", {}).get("csi.alpha.kubernetes.io/node-id"), o["status"].get("attachmentMetadata")]' <<<"$vj")"
contains "the PV carries our finalizer" "\"$FIN\"" "$(api "/api/v1/persistentvolumes/$(pv_of c1)" | pyj 'o["metadata"].get("finalizers")')"
sleep 1 # a write too many would show by now
expect "first attach of a PV: 1 PV write (finalizer) and 2 VA writes (finalizer+annotation, status)" 10 \
  writes_are "1 2"

pod p2 node-2 c2
expect "a pod on node-2 gets a VolumeAttachment" 20 has_va c2 node-2
VA2=$(va_of c2 node-2)
expect "node id from the Node annotation: attached" 30 attached "$VA2"
check "the VA records node id node-2 (no CSINode for node-2)" "node-2" \
  "$(va_field "$VA2" 'o["metadata"].get("annotations", {}).get("csi.alpha.kubernetes.io/node-id")')"
check "the driver publishes c2 on node-2" '["node-2"]' "$(published "$(handle_of c2)")"

# Detach: the pod goes, the attach stand-in deletes the VA, the attacher
# unpublishes and lets it go with one write.
sleep 1
VAP0=$(patches volumeattachments)
UNP0=$(drv_calls "$WORK/drv-a" ControllerUnpublishVolume)
delpod p1
expect "deleting the pod detaches: the VA is gone" 30 va_gone "$VA1"
check "the driver no longer publishes c1" '[]' "$(published "$H1")"
sleep 1 # a write or a call too many would show by now
detach_counts_are() {
  echo "$(($(patches volumeattachments) - VAP0)) $(($(drv_calls "$WORK/drv-a" ControllerUnpublishVolume) - UNP0))" >"$EXPECT_LAST"
  [ "$(cat "$EXPECT_LAST")" = "$1" ]
}
expect "detach of a deleted VA: 1 VA write and 1 ControllerUnpublish" 10 detach_counts_are "1 1"
contains "the PV (not deleted) keeps our finalizer" "\"$FIN\"" "$(api "/api/v1/persistentvolumes/$(pv_of c1)" | pyj 'o["metadata"].get("finalizers")')"

# A later attach of the same PV: no PV write.
PVP0=$(patches persistentvolumes)
VAP0=$(patches volumeattachments)
pod p1b node-2 c1
expect "c1 on node-2 gets a VolumeAttachment" 20 has_va c1 node-2
VA1B=$(va_of c1 node-2)
expect "and is attached" 30 attached "$VA1B"
sleep 1 # a write too many would show by now
expect "later attach of a PV: 0 PV writes and 2 VA writes" 10 writes_are "0 2"

# ---- driver errors show in status and recover ------------------------------------------------

faults "$WORK/drv-a" '{"ControllerPublishVolume": {"fail": {"count": 100000, "code": "INTERNAL", "message": "backend busy"}}}'
VA3=va-c3
va "$VA3" node-1 c3
expect "an attach error shows in status.attachError as upstream words it" 30 \
  att_error_has "$VA3" "rpc error: code = Internal desc = backend busy"
# status.attachError.errorCode is newer than Kubernetes 1.20, which drops it
code=13
on_real && code=null
check "the VA is not attached meanwhile; errorCode is the gRPC code ($code)" "[false, $code]" \
  "$(va_field "$VA3" '[o.get("status", {}).get("attached", False), o.get("status", {}).get("attachError", {}).get("errorCode")]')"
long=$(python3 -c 'print("E" * 1990 + "-tail")')
faults "$WORK/drv-a" '{"ControllerPublishVolume": {"fail": {"count": 100000, "code": "INTERNAL", "message": "'"$long"'"}}}'
expect "a 2,000-character driver error lands in status, cut with a marker" 30 att_error_has "$VA3" "EEE... [truncated]"
check "the stored message fits the API's 1024-byte limit" 1024 \
  "$(va_field "$VA3" 'len(o["status"]["attachError"]["message"].encode())')"
faults "$WORK/drv-a" ""
expect "once the driver recovers the VA is attached" 30 attached "$VA3"
expect "and attachError is cleared" 10 no_att_error "$VA3"

faults "$WORK/drv-a" '{"ControllerUnpublishVolume": {"fail": {"count": 100000, "code": "UNAVAILABLE", "message": "detach stuck"}}}'
delva "$VA3"
expect "a detach error shows in status.detachError" 30 det_error_has "$VA3" "rpc error: code = Unavailable desc = detach stuck"
check "the VA stays while the detach fails" "" "$(va_gone "$VA3" && echo gone)"
faults "$WORK/drv-a" ""
expect "once the driver recovers the VA is detached and gone" 30 va_gone "$VA3"
check "the driver no longer publishes c3" '[]' "$(published "$(handle_of c3)")"

# ---- published elsewhere: FAILED_PRECONDITION is retried ----------------------------------------

VA4=va-c2-node-1
va "$VA4" node-1 c2
expect "a single-node volume published on node-2 answers FAILED_PRECONDITION" 30 \
  att_error_has "$VA4" "code = FailedPrecondition"
delpod p2
expect "once node-2's VA is detached the retry attaches it on node-1" 30 attached "$VA4"
check "the driver publishes c2 on node-1 only" '["node-1"]' "$(published "$(handle_of c2)")"

# ---- secrets ---------------------------------------------------------------------------------------

pod ps node-1 c-sec
expect "c-sec gets a VolumeAttachment" 20 has_va c-sec node-1
VAS=$(va_of c-sec node-1)
expect "controllerPublishSecretRef's data reaches the driver (it checks user=admin)" 30 attached "$VAS"
VAB=va-c-badsec
va "$VAB" node-1 c-badsec
expect "a secret with another value is refused by the driver" 30 att_error_has "$VAB" "code = Unauthenticated"
K patch secret c-badsec-publish --type merge -p '{"data":{"user":"YWRtaW4="}}' >/dev/null 2>&1
expect "the secret is read again on each retry: fixed, the VA is attached" 30 attached "$VAB"
delpod ps
expect "detach with the secret: the VA is gone" 30 va_gone "$VAS"

# ---- reconcile repairs an out-of-band detach --------------------------------------------------------

H2=$(handle_of c2)
if out=$("$CSI_CALL" "unix://$WORK/drv-a/csi.sock" controller-unpublish "$H2" node-1 2>&1); then
  ok "c2 unpublished from node-1 directly in the driver"
else
  bad "csi_call controller-unpublish" "$out"
fi
expect "the reconcile (--reconcile-sync=1s) publishes it again" 30 published_is "$H2" '["node-1"]'
check "the VA stays attached" true "$(va_field "$VA4" 'o.get("status", {}).get("attached", False)')"

# ---- a deleted node's VolumeAttachment detaches ------------------------------------------------------

VAG=va-cg
va "$VAG" node-gone cg
expect "the driver does not know node-gone's id: NOT_FOUND on attach" 30 att_error_has "$VAG" "code = NotFound"
delva "$VAG"
expect "while the Node exists, NOT_FOUND on detach is an error (retried)" 30 det_error_has "$VAG" "code = NotFound"
del /api/v1/nodes/node-gone
del /apis/storage.k8s.io/v1/csinodes/node-gone
expect "once the Node is deleted, NOT_FOUND ends the detach: the VA is gone" 30 va_gone "$VAG"
contains "the attacher says why" "node node-gone is deleted" "$(cat "$WORK/att-a.log")"

# ---- trivial handler and leader election -------------------------------------------------------------

trivial_va() {
  post /apis/storage.k8s.io/v1/volumeattachments '{"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachment","metadata":{"name":"'"$1"'"},"spec":{"attacher":"trivial.csi.example.com","nodeName":"node-1","source":{"persistentVolumeName":"static-'"$1"'"}}}'
}
LEASE=external-attacher-leader-trivial-csi-example-com
holder() { api "/apis/coordination.k8s.io/v1/namespaces/$NS/leases/$LEASE" | pyj 'o.get("spec", {}).get("holderIdentity", "")'; }
has_holder() { case "$(holder)" in le-one | le-two) return 0 ;; *) return 1 ;; esac; }
if [ "$HAVE_UTS" != 1 ]; then
  bad "leader election" "unshare -u is not available: the replicas would share one identity"
elif ! wait_for 30 has_holder; then
  bad "leader election: a replica takes the lease $LEASE" "holder [$(holder)]"$'\n'"$(tail -n 5 "$WORK/le-one.log" "$WORK/le-two.log")"
else
  LEADER=$(holder)
  if [ "$LEADER" = le-one ]; then OTHER=le-two; else OTHER=le-one; fi
  ok "leader election: $LEADER holds the lease $LEASE"
  expect "the leader runs the trivial handler" 30 started "$LEADER"
  contains "it says why" "using trivial handler" "$(cat "$WORK/$LEADER.log")"
  trivial_va tv-0
  expect "trivial handler: the VA is marked attached" 30 attached tv-0
  check "trivial handler: no finalizer, no metadata, no ControllerPublish" '[null, null, 0]' \
    "$(va_field tv-0 '[o["metadata"].get("finalizers"), o["status"].get("attachmentMetadata")]' | sed 's/]$//'), $(drv_calls "$WORK/drv-t" ControllerPublishVolume)]"
  check "the other replica waits" no "$(grep -q 'attacher started' "$WORK/$OTHER.log" && echo yes || echo no)"
  port=$LE_PORT1
  [ "$LEADER" = le-two ] && port=$LE_PORT2
  check "/healthz/leader-election answers ok" ok "$(curl -s --max-time 5 "http://127.0.0.1:$port/healthz/leader-election")"
  stop "$LEADER" KILL
  trivial_va tv-1
  expect "after kill -9 of the leader, the other replica attaches the next VA" 40 attached tv-1
  check "the other replica holds the lease" "$OTHER" "$(holder)"
  del /apis/storage.k8s.io/v1/volumeattachments/tv-0
  del /apis/storage.k8s.io/v1/volumeattachments/tv-1
  expect "trivial VAs delete without a finalizer" 20 va_gone tv-1
fi

# ---- metrics ------------------------------------------------------------------------------------------

metrics=$(curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics")
for q in csi-attacher-va csi-attacher-va-detach csi-attacher-pv; do
  contains "/metrics: workqueue_adds_total of $q" "workqueue_adds_total{name=\"$q\"}" "$metrics"
  contains "/metrics: csi_attacher_queue_depth of $q" "csi_attacher_queue_depth{queue=\"$q\"}" "$metrics"
  contains "/metrics: csi_attacher_queue_oldest_waiting_seconds of $q" "csi_attacher_queue_oldest_waiting_seconds{queue=\"$q\"}" "$metrics"
done
contains "/metrics: csi_sidecar_operations_seconds counts ControllerPublishVolume" \
  'method_name="/csi.v1.Controller/ControllerPublishVolume"' "$(grep '^csi_sidecar_operations_seconds_count' <<<"$metrics")"

# ---- clean up through the sidecars: PV finalizers go once no VA uses a deleted PV ----------------------

delpod p1b
delva "$VA4" "$VAB"
no_vas() { [ "$(api /apis/storage.k8s.io/v1/volumeattachments | pyj 'len([i for i in o["items"] if i["spec"]["attacher"] == "hostpath.csi.example.com"])')" = 0 ]; }
expect "every VA of the driver is detached and gone" 40 no_vas
check "the driver holds no publication" '[]' "$(drv "$WORK/drv-a" '[v["name"] for v in vols if v.get("published_nodes")]')"
for c in c1 c2 c3 cg c-sec c-badsec; do del "/api/v1/namespaces/$NS/persistentvolumeclaims/$c"; done
no_pvs() { [ "$(api /api/v1/persistentvolumes | pyj 'len(o["items"])')" = 0 ]; }
expect "released PVs are deleted: the attacher drops its PV finalizer, the provisioner the volume" 40 no_pvs
check "the driver ends with no volume" 0 "$(drv "$WORK/drv-a" 'len(vols)')"

# ---- the end: every process stops cleanly ----------------------------------------------------------

check "no request of the attacher was refused (401/403; events excepted, as upstream)" "$REFUSED0" "$(refused)"
stop_all
for n in "${NAMES[@]}"; do
  if [ "$n" = "${LEADER:-}" ]; then
    check "$n (the leader killed with SIGKILL) died of it" 137 "${RC[$n]:-none}"
  else
    check "$n exits 0 on SIGTERM" 0 "${RC[$n]:-none}"
  fi
done
for n in "${NAMES[@]}"; do
  if grep -Eq 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$WORK/$n.log"; then
    bad "$n: sanitizer report"
    cat "$WORK/$n.log"
  fi
done
finish
