#!/usr/bin/env bash
# csi-snapshotter end to end: kube-lite (HTTPS, bearer tokens, RBAC, its
# binder), the example CSI driver, csi-provisioner for the source volumes,
# and csi-snapshotter running with the service-account token that
# manifests/snapshotter/rbac.yaml grants. The script plays upstream's
# snapshot-controller: it writes the VolumeSnapshotContents (VolumeSnapshot
# reference, class, finalizer) and, to delete one, the
# volumesnapshot-being-deleted annotation and the DELETE. Checks read the API
# with curl and the driver's status.json.
#
#   tests/e2e/test_snapshotter.sh <build-dir>
#
# worlds: kube-lite kubernetes
#
# kube-lite serves snapshot.storage.k8s.io v1 as built-in types; on the real
# control plane the test installs manifests/snapshotter/crd/ first.
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed"; exits
# non-zero when a check failed. Every process started here is stopped with
# SIGTERM and must exit 0.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
DRV="$B/bin/example-csi-driver"
PROV="$B/bin/csi-provisioner"
SNAP="$B/bin/csi-snapshotter"
CSI_CALL="$B/tests/e2e/csi_call"
WORK=$(mktemp -d)
NS=default
DRIVER=hostpath.csi.example.com
EXPECT_LAST="$WORK/last"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

# drv EXPR: EXPR over the driver's state (lib.sh's drv_eval)
drv() { drv_eval "$WORK/drv" "$1"; }
KS() { kubectl --kubeconfig "$WORK/snapshotter.kubeconfig" --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
started() { grep -qs 'Starting CSI snapshotter' "$WORK/$1.log" || ! alive "$1"; }

require_tools kubectl python3 openssl curl
require_built "$SNAP" "$PROV" "$DRV" "$CSI_CALL"

# ---- the world: TLS, tokens, RBAC ------------------------------------------------------------

rbac_world_up snapshotter csi-snapshotter --controllers binder || finish
snapshot_crds_up

contains "without rbac.yaml the snapshotter's account may not watch contents" "Forbidden" \
  "$(KS get volumesnapshotcontents 2>&1)"
out=$(K apply -f "$ROOT/manifests/snapshotter/rbac.yaml" 2>&1)
check "rbac.yaml applies" "serviceaccount/csi-snapshotter created
clusterrole.rbac.authorization.k8s.io/external-snapshotter-runner created
clusterrolebinding.rbac.authorization.k8s.io/csi-snapshotter-role created
role.rbac.authorization.k8s.io/external-snapshotter-leaderelection created
rolebinding.rbac.authorization.k8s.io/external-snapshotter-leaderelection created" "$out"
check "with rbac.yaml it may list contents and classes" "" \
  "$(KS get volumesnapshotcontents -o name 2>&1)$(KS get volumesnapshotclasses -o name 2>&1)"
# scurl ARGS... PATH: curl as the snapshotter's service account
scurl() {
  local path=${*: -1}
  curl -s --max-time 10 -H 'Authorization: Bearer snapshotter-token' --cacert "$WORK/pki/ca.crt" "${@:1:$#-1}" "$SERVER$path"
}
contains "but may not delete contents" "Forbidden" \
  "$(scurl -X DELETE "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents/nothing")"
contains "nor read secrets" "Forbidden" "$(KS get secrets 2>&1)"

cat >"$WORK/cluster.yaml" <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: vols
provisioner: $DRIVER
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: snaps
driver: $DRIVER
deletionPolicy: Delete
parameters:
  color: blue
  csi.storage.k8s.io/snapshotter-secret-name: not-read-here
  csi.storage.k8s.io/snapshotter-secret-namespace: default
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: bad-params
driver: $DRIVER
deletionPolicy: Delete
parameters:
  csi.storage.k8s.io/unknown: x
EOF
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then
  ok "classes created"
else
  bad "classes" "$(cat "$WORK/cluster.out")"
fi

refused() { requests '.*' '.*' '40[13]' 'system:serviceaccount:.*'; }
REFUSED0=$(refused)

# ---- driver, provisioner, snapshotter ---------------------------------------------------------

mkdir -p "$WORK/drv/state"
start drv "$DRV" --endpoint "unix://$WORK/drv/csi.sock" --state-dir "$WORK/drv/state" \
  --drivername "$DRIVER" --nodeid node-1 --capacity 20Gi --plugin-caps CONTROLLER_SERVICE
start prov "$PROV" --csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/admin.kubeconfig" \
  --worker-threads=4 --retry-interval-start=100ms --retry-interval-max=2s --kube-api-qps=100 --kube-api-burst=200
HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start snap "$SNAP" --csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/snapshotter.kubeconfig" \
  --worker-threads=4 --retry-interval-start=200ms --retry-interval-max=2s --kube-api-qps=100 \
  --kube-api-burst=200 --leader-election "--leader-election-namespace=$NS" \
  --http-endpoint="127.0.0.1:$HTTP_PORT" --v=5
if wait_for 60 started snap && alive snap; then ok "csi-snapshotter starts"; else bad "csi-snapshotter starts" "$(tail -n 20 "$WORK/snap.log")"; fi
check "the Lease is upstream's external-snapshotter-leader-<sanitized driver>" \
  "external-snapshotter-leader-hostpath-csi-example-com" \
  "$(K get lease -n "$NS" external-snapshotter-leader-hostpath-csi-example-com -o jsonpath='{.metadata.name}' 2>&1)"

# ---- helpers ------------------------------------------------------------------------------------

VSC=/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents
api() { acurl "$1"; }
post() { acurl -H 'Content-Type: application/json' -X POST --data "$2" "$1" >/dev/null; }
mpatch() { acurl -H 'Content-Type: application/merge-patch+json' -X PATCH --data "$2" "$1" >/dev/null; }
pvc() { # pvc NAME: a ReadWriteOnce claim of 1Gi
  post "/api/v1/namespaces/$NS/persistentvolumeclaims" '{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"'"$1"'"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"vols","resources":{"requests":{"storage":"1Gi"}}}}'
}
claim() { api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | pyj "$2"; }
bound() { [ "$(claim "$1" 'o.get("status", {}).get("phase", "")')" = Bound ]; }
handle_of() { api "/api/v1/persistentvolumes/$(claim "$1" 'o["spec"]["volumeName"]')" | pyj 'o["spec"]["csi"]["volumeHandle"]'; }
# content NAME SOURCE-JSON POLICY CLASS UID: what the snapshot-controller creates
content() {
  local cls=""
  [ -n "$4" ] && cls='"volumeSnapshotClassName":"'"$4"'",'
  post "$VSC" '{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent","metadata":{"name":"'"$1"'","finalizers":["snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"]},"spec":{"driver":"'"${DRV_NAME:-$DRIVER}"'","deletionPolicy":"'"$3"'",'"$cls"'"source":'"$2"',"volumeSnapshotRef":{"kind":"VolumeSnapshot","apiVersion":"snapshot.storage.k8s.io/v1","name":"vs-'"$1"'","namespace":"'"$NS"'","uid":"'"$5"'"}}}'
}
vsc() { api "$VSC/$1" | pyj "$2" | tee "$EXPECT_LAST"; }
ready_is() { [ "$(vsc "$1" 'o.get("status", {}).get("readyToUse", "")')" = "$2" ]; }
error_is() { [ "$(vsc "$1" 'o.get("status", {}).get("error", {}).get("message", "")')" = "$2" ]; }
creating_is() { [ "$(vsc "$1" 'o["metadata"].get("annotations", {}).get("snapshot.storage.kubernetes.io/volumesnapshot-being-created", "")')" = "$2" ]; }
gone() { [ "$(vsc "$1" 'o.get("code", "")')" = 404 ]; }
# the snapshot-controller's deletion: the being-deleted annotation, then DELETE
remove() {
  mpatch "$VSC/$1" '{"metadata":{"annotations":{"snapshot.storage.kubernetes.io/volumesnapshot-being-deleted":"yes"}}}'
  acurl -X DELETE "$VSC/$1" >/dev/null
}
events() { api "/api/v1/events?fieldSelector=involvedObject.name=$1" | pyj '"\n".join("%s %s %s" % (e["type"], e["reason"], e["message"]) for e in o.get("items", []))'; }
calls() { drv "s.get('calls', {}).get('$1', 0)"; }
snap_count() { drv 'len(snaps)'; }
patches() { requests '(patch|PATCH)' 'volumesnapshotcontents(/status)?' '2[0-9][0-9]' 'system:serviceaccount:default:csi-snapshotter'; }

pvc src-1
pvc src-2
for c in src-1 src-2; do expect "claim $c is provisioned and Bound" 60 bound "$c"; done
H1=$(handle_of src-1)
H2=$(handle_of src-2)
check "no snapshot call yet" "0 0" "$(calls CreateSnapshot) $(calls DeleteSnapshot)"

# ---- a dynamic snapshot --------------------------------------------------------------------------

UID1=11111111-2222-3333-4444-555555555555
W0=$(patches)
content c-dyn '{"volumeHandle":"'"$H1"'"}' Delete snaps "$UID1"
expect "CreateSnapshot: the content becomes readyToUse" 20 ready_is c-dyn true
SH=$(vsc c-dyn 'o["status"]["snapshotHandle"]')
check "the driver holds snapshot-<VolumeSnapshot UID> of the volume" "$SH $H1" \
  "$(drv "'%s %s' % (snapbyname['snapshot-$UID1']['id'], snapbyname['snapshot-$UID1']['source_volume_id'])")"
check "status.restoreSize is the volume's size" 1073741824 "$(vsc c-dyn 'o["status"]["restoreSize"]')"
check "status.creationTime is the driver's, in nanoseconds" \
  "$(drv "str(snapbyid['$SH']['creation_time_ns'])")" "$(vsc c-dyn 'str(o["status"]["creationTime"])')"
check "no being-created annotation left, the finalizer kept" \
  '[false, ["snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"]]' \
  "$(vsc c-dyn '["snapshot.storage.kubernetes.io/volumesnapshot-being-created" in o["metadata"].get("annotations", {}), o["metadata"]["finalizers"]]')"
check "one CreateSnapshot" 1 "$(calls CreateSnapshot)"
sleep 1
check "three writes, as upstream: the being-created annotation, the status, the annotation dropped" 3 "$(($(patches) - W0))"
# a resync or a restart must not cut it again
C0=$(calls CreateSnapshot)
mpatch "$VSC/c-dyn" '{"metadata":{"labels":{"touched":"yes"}}}'
sleep 1
check "a ready content is not cut again" "$C0" "$(calls CreateSnapshot)"

# ---- deletion: Delete and Retain ------------------------------------------------------------------

remove c-dyn
expect "deletionPolicy Delete: DeleteSnapshot, the finalizer goes and the content with it" 20 gone c-dyn
check "the driver no longer holds the snapshot" "false" "$(drv "'$SH' in snapbyid" | tr 'FT' 'ft')"
check "one DeleteSnapshot" 1 "$(calls DeleteSnapshot)"

UID2=22222222-2222-3333-4444-555555555555
content c-ret '{"volumeHandle":"'"$H2"'"}' Retain snaps "$UID2"
expect "a Retain content becomes ready too" 20 ready_is c-ret true
SR=$(vsc c-ret 'o["status"]["snapshotHandle"]')
remove c-ret
expect "deletionPolicy Retain: the finalizer goes" 20 gone c-ret
check "the driver keeps the snapshot" true "$(drv "'$SR' in snapbyid" | tr 'FT' 'ft')"
check "no DeleteSnapshot for Retain" 1 "$(calls DeleteSnapshot)"

# ---- pre-provisioned --------------------------------------------------------------------------------

read -r PID_SNAP PSIZE < <("$CSI_CALL" "$WORK/drv/csi.sock" create-snapshot "$H2" pre-made 2>&1)
C0=$(calls CreateSnapshot)
L0=$(calls ListSnapshots)
content c-pre '{"snapshotHandle":"'"$PID_SNAP"'"}' Retain "" 33333333-2222-3333-4444-555555555555
expect "pre-provisioned: readyToUse from ListSnapshots" 20 ready_is c-pre true
check "its handle, size and creation time are the driver's" \
  "[\"$PID_SNAP\", $PSIZE, $(drv "str(snapbyid['$PID_SNAP']['creation_time_ns'])")]" \
  "$(vsc c-pre '[o["status"]["snapshotHandle"], o["status"]["restoreSize"], o["status"]["creationTime"]]')"
check "ListSnapshots, no CreateSnapshot" "1 0" "$(($(calls ListSnapshots) - L0)) $(($(calls CreateSnapshot) - C0))"
acurl -X DELETE "$VSC/c-pre" >/dev/null
sleep 1
check "without the being-deleted annotation the snapshotter keeps the finalizer" \
  '["snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"]' "$(vsc c-pre 'o["metadata"]["finalizers"]')"
mpatch "$VSC/c-pre" '{"metadata":{"annotations":{"snapshot.storage.kubernetes.io/volumesnapshot-being-deleted":"yes"}}}'
expect "with it the Retain content goes" 20 gone c-pre
check "the pre-provisioned snapshot stays in the driver" true "$(drv "'$PID_SNAP' in snapbyid" | tr 'FT' 'ft')"

# ---- driver errors: status.error and an Event ---------------------------------------------------------

content c-bad '{"volumeHandle":"no-such-volume"}' Delete snaps 44444444-2222-3333-4444-555555555555
MSG='Failed to create snapshot: failed to take snapshot of the volume no-such-volume: "rpc error: code = NotFound desc = source volume no-such-volume does not exist"'
expect "a driver error is recorded in status.error" 20 error_is c-bad "$MSG"
check "readyToUse false, an RFC 3339 time" "[false, true]" \
  "$(vsc c-bad '[o["status"]["readyToUse"], bool(__import__("re").fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", o["status"]["error"]["time"]))]')"
expect "a Warning SnapshotCreationFailed event" 10 has_event c-bad "Warning SnapshotCreationFailed $MSG"
# each retry sets it again just for its call, as upstream
expect "NotFound is final: the being-created annotation is removed after the call" 10 creating_is c-bad ""
remove c-bad
expect "a content that never got a snapshot goes without DeleteSnapshot" 20 gone c-bad

content c-params '{"volumeHandle":"'"$H1"'"}' Delete bad-params 55555555-2222-3333-4444-555555555555
expect "an unknown csi.storage.k8s.io/ parameter is an error" 20 error_is c-params \
  'Failed to create snapshot: failed to remove CSI Parameters of prefixed keys: found unknown parameter key "csi.storage.k8s.io/unknown" with reserved namespace csi.storage.k8s.io/'
check "no CreateSnapshot and no being-created annotation for a request that cannot be made" "" \
  "$(vsc c-params 'o["metadata"].get("annotations", {}).get("snapshot.storage.kubernetes.io/volumesnapshot-being-created", "")')"
remove c-params
expect "and the content still goes" 20 gone c-params

# a transient error (UNAVAILABLE): retried with backoff, the annotation kept meanwhile
faults "$WORK/drv" '{"CreateSnapshot": {"fail": {"count": 2, "code": "UNAVAILABLE", "message": "busy"}}}'
C0=$(calls CreateSnapshot)
content c-retry '{"volumeHandle":"'"$H1"'"}' Delete snaps 66666666-2222-3333-4444-555555555555
expect "UNAVAILABLE twice, then the snapshot" 20 ready_is c-retry true
check "three CreateSnapshot calls" 3 "$(($(calls CreateSnapshot) - C0))"
check "readyToUse clears the recorded error" null "$(vsc c-retry 'o["status"].get("error")')"
faults "$WORK/drv" ""
# the snapshot-controller deleting while the snapshot is being cut: the
# being-created annotation holds the deletion back until the driver answered
# (the driver holds the call until released: a delay is a window a loaded machine can miss)
faults "$WORK/drv" '{"CreateSnapshot": {"hold": true}}'
content c-race '{"volumeHandle":"'"$H2"'"}' Delete snaps 77777777-2222-3333-4444-555555555555
expect "the being-created annotation is set before CreateSnapshot" 10 creating_is c-race yes
remove c-race
sleep 1
check "deleted while being cut: held back while the call is in flight" yes "$(creating_is c-race yes && echo yes || echo no)"
faults "$WORK/drv" ""
expect "deleted while being cut: the snapshot is still recorded, then deleted" 20 gone c-race
check "nothing leaks in the driver" false "$(drv "'snapshot-77777777-2222-3333-4444-555555555555' in snapbyname" | tr 'FT' 'ft')"

# ---- another driver's content is left alone ----------------------------------------------------------

DRV_NAME=other.csi.example.com content c-other '{"volumeHandle":"'"$H1"'"}' Delete "" 88888888-2222-3333-4444-555555555555
sleep 1
check "another driver's content gets no status" "<KeyError: 'status'>" "$(vsc c-other 'o["status"]')"

# ---- nothing refused; metrics; exits -------------------------------------------------------------------

check "no request of the snapshotter was refused (RBAC is enough)" 0 "$(($(refused) - REFUSED0))"
contains "metrics: the queue is upstream's csi-snapshotter-content" 'workqueue_adds_total{name="csi-snapshotter-content"}' \
  "$(curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics")"
for p in snap prov drv; do
  stop "$p"
  check "$p exits 0 on SIGTERM" 0 "${RC[$p]}"
done
finish
