#!/usr/bin/env bash
# snapshot-controller-sim end to end: the API (kube-lite with its binder, or
# the real control plane), the example CSI driver, csi-provisioner,
# csi-snapshotter (with manifests/snapshotter/rbac.yaml's account) and
# snapshot-controller-sim, the stand-in for upstream's snapshot-controller.
# Users' objects only: VolumeSnapshots, claims, classes, one pre-provisioned
# content. Checks read the API with curl and the driver's status.json.
#
#   tests/e2e/test_snapshot_controller.sh <build-dir>
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
CTL="$B/bin/snapshot-controller-sim"
CSI_CALL="$B/tests/e2e/csi_call"
WORK=$(mktemp -d)
NS=default
DRIVER=hostpath.csi.example.com
EXPECT_LAST="$WORK/last"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

F_SRC=snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection
F_BOUND=snapshot.storage.kubernetes.io/volumesnapshot-bound-protection
F_PVC=snapshot.storage.kubernetes.io/pvc-as-source-protection
F_CONTENT=snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection
BEING_DEL=snapshot.storage.kubernetes.io/volumesnapshot-being-deleted

# drv EXPR: EXPR over the driver's state (lib.sh's drv_eval)
drv() { drv_eval "$WORK/drv" "$1"; }
started() { grep -qs "$2" "$WORK/$1.log" || ! alive "$1"; }

require_tools kubectl python3 openssl curl
require_built "$CTL" "$SNAP" "$PROV" "$DRV" "$CSI_CALL"

# ---- the world ------------------------------------------------------------------------------------

rbac_world_up snapshotter csi-snapshotter --controllers binder || finish
snapshot_crds_up
out=$(K apply -f "$ROOT/manifests/snapshotter/rbac.yaml" 2>&1)
contains "the snapshotter's rbac.yaml applies" "clusterrole.rbac.authorization.k8s.io/external-snapshotter-runner created" "$out"

cat >"$WORK/classes.yaml" <<EOF
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
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: snaps-default
  annotations:
    snapshot.storage.kubernetes.io/is-default-class: "true"
driver: $DRIVER
deletionPolicy: Delete
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: other-default
  annotations:
    snapshot.storage.kubernetes.io/is-default-class: "true"
driver: other.csi.example.com
deletionPolicy: Delete
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: snaps-retain
driver: $DRIVER
deletionPolicy: Retain
EOF
if K create -f "$WORK/classes.yaml" >"$WORK/classes.out" 2>&1; then ok "classes created"; else bad "classes" "$(cat "$WORK/classes.out")"; fi

# ---- driver, provisioner, snapshotter, controller ------------------------------------------------

mkdir -p "$WORK/drv/state"
start drv "$DRV" --endpoint "unix://$WORK/drv/csi.sock" --state-dir "$WORK/drv/state" \
  --drivername "$DRIVER" --nodeid node-1 --capacity 20Gi --plugin-caps CONTROLLER_SERVICE
start prov "$PROV" --csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/admin.kubeconfig" \
  --worker-threads=4 --retry-interval-start=100ms --retry-interval-max=2s --kube-api-qps=100 --kube-api-burst=200
start snap "$SNAP" --csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/snapshotter.kubeconfig" \
  --worker-threads=4 --retry-interval-start=200ms --retry-interval-max=2s --kube-api-qps=100 \
  --kube-api-burst=200
HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
CTL_ARGS=(--kubeconfig "$WORK/admin.kubeconfig" --worker-threads=4 --retry-interval-start=100ms
  --retry-interval-max=2s --kube-api-qps=100 --kube-api-burst=200 --leader-election
  "--leader-election-namespace=$NS" --leader-election-lease-duration=3s
  --leader-election-renew-deadline=2s --leader-election-retry-period=500ms --v=5)
start ctl "$CTL" "${CTL_ARGS[@]}" --http-endpoint="127.0.0.1:$HTTP_PORT"
if wait_for 60 started snap 'Starting CSI snapshotter' && alive snap; then ok "csi-snapshotter starts"; else bad "csi-snapshotter starts" "$(tail -n 20 "$WORK/snap.log")"; fi
if wait_for 60 started ctl 'Starting snapshot controller' && alive ctl; then ok "snapshot-controller-sim starts"; else bad "snapshot-controller-sim starts" "$(tail -n 20 "$WORK/ctl.log")"; fi
check "its Lease is upstream's snapshot-controller-leader" snapshot-controller-leader \
  "$(K get lease -n "$NS" snapshot-controller-leader -o jsonpath='{.metadata.name}' 2>&1)"

# ---- helpers --------------------------------------------------------------------------------------

VS=/apis/snapshot.storage.k8s.io/v1/namespaces/$NS/volumesnapshots
VSC=/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents
api() { acurl "$1"; }
post() { acurl -H 'Content-Type: application/json' -X POST --data "$2" "$1" >"$WORK/post.out"; }
del() { acurl -X DELETE "$1" >/dev/null; }
pvc() { # pvc NAME [CLASS] [DATASOURCE-JSON]
  local ds=""
  [ -n "${3:-}" ] && ds=',"dataSource":'"$3"
  post "/api/v1/namespaces/$NS/persistentvolumeclaims" '{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"'"$1"'"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"'"${2:-vols}"'","resources":{"requests":{"storage":"1Gi"}}'"$ds"'}}'
}
claim() { api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | pyj "$2" | tee "$EXPECT_LAST"; }
bound() { [ "$(claim "$1" 'o.get("status", {}).get("phase", "")')" = Bound ]; }
handle_of() { api "/api/v1/persistentvolumes/$(claim "$1" 'o["spec"]["volumeName"]')" | pyj 'o["spec"]["csi"]["volumeHandle"]'; }
pvc_fin() { [ "$(claim "$1" '"'"$F_PVC"'" in o["metadata"].get("finalizers", [])')" = "$2" ]; }
# vsnap NAME SOURCE-JSON [CLASS]: a VolumeSnapshot
vsnap() {
  local cls=""
  [ -n "${3:-}" ] && cls=',"volumeSnapshotClassName":"'"$3"'"'
  post "$VS" '{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshot","metadata":{"name":"'"$1"'"},"spec":{"source":'"$2""$cls"'}}'
}
vs() { api "$VS/$1" | pyj "$2" | tee "$EXPECT_LAST"; }
vsc() { api "$VSC/$1" | pyj "$2" | tee "$EXPECT_LAST"; }
vs_ready() { [ "$(vs "$1" 'o.get("status", {}).get("readyToUse", "")')" = True ] || [ "$(vs "$1" 'o.get("status", {}).get("readyToUse", "")')" = true ]; }
vs_error() { [ "$(vs "$1" 'o.get("status", {}).get("error", {}).get("message", "")')" = "$2" ]; }
vs_gone() { [ "$(vs "$1" 'o.get("code", "")')" = 404 ]; }
vsc_gone() { [ "$(vsc "$1" 'o.get("code", "")')" = 404 ]; }
fins() { api "$1" | pyj 'sorted(o["metadata"].get("finalizers", []))'; }
events() { api "/api/v1/namespaces/$NS/events?fieldSelector=involvedObject.name=$1" | pyj '"\n".join("%s %s %s" % (e["type"], e["reason"], e["message"]) for e in o.get("items", []))'; }
in_driver() { drv "'$1' in snapbyid" | tr 'FT' 'ft'; }
RFC3339='__import__("re").fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", o["status"]["creationTime"]) is not None'

pvc src-1
pvc src-2
for c in src-1 src-2; do expect "claim $c is provisioned and Bound" 60 bound "$c"; done
H1=$(handle_of src-1)
H2=$(handle_of src-2)

# ---- a dynamic snapshot of a bound claim -----------------------------------------------------------

# the driver holds the call until released, so the state while the snapshot is cut can be seen
# (a delay is a window a loaded machine can miss: the controller may bind after the driver answered)
faults "$WORK/drv" '{"CreateSnapshot": {"hold": true}}'
vsnap vs-1 '{"persistentVolumeClaimName":"src-1"}' snaps
U1=$(vs vs-1 'o["metadata"]["uid"]')
# while cut: bound to its content but not ready, both snapshot finalizers, the claim's finalizer
cutting() {
  [ "$(vs vs-1 '[o.get("status", {}).get("boundVolumeSnapshotContentName"), o.get("status", {}).get("readyToUse"), sorted(o["metadata"].get("finalizers", []))]')" = \
    "[\"snapcontent-$U1\", false, [\"$F_SRC\", \"$F_BOUND\"]]" ] && pvc_fin src-1 true
}
expect "while it is cut: bound, not ready, as-source and bound protection, pvc-as-source-protection on the claim" 30 cutting
faults "$WORK/drv" ""
expect "the snapshot becomes readyToUse" 30 vs_ready vs-1
check "its content is snapcontent-<snapshot uid>, bound in the status" "snapcontent-$U1" \
  "$(vs vs-1 'o["status"]["boundVolumeSnapshotContentName"]')"
check "status: restoreSize as a quantity, creationTime in RFC 3339, no error" '["1Gi", true, null]' \
  "$(vs vs-1 '[o["status"]["restoreSize"], '"$RFC3339"', o["status"].get("error")]')"
check "the content's reference names the snapshot (kind, apiVersion, namespace, name, uid, resourceVersion)" \
  "[\"VolumeSnapshot\", \"snapshot.storage.k8s.io/v1\", \"$NS\", \"vs-1\", \"$U1\", true]" \
  "$(vsc "snapcontent-$U1" '[o["spec"]["volumeSnapshotRef"][k] for k in ("kind", "apiVersion", "namespace", "name", "uid")] + [bool(o["spec"]["volumeSnapshotRef"].get("resourceVersion"))]')"
check "the content: the volume's handle, the class, its policy, the driver" \
  "[\"$H1\", \"snaps\", \"Delete\", \"$DRIVER\"]" \
  "$(vsc "snapcontent-$U1" '[o["spec"]["source"]["volumeHandle"], o["spec"]["volumeSnapshotClassName"], o["spec"]["deletionPolicy"], o["spec"]["driver"]]')"
SH1=$(vsc "snapcontent-$U1" 'o["status"]["snapshotHandle"]')
check "the driver holds the snapshot of the claim's volume" "$H1" "$(drv "snapbyid.get('$SH1', {}).get('source_volume_id', '')")"
check "the content has the controller's volumesnapshotcontent-bound-protection" "[\"$F_CONTENT\"]" \
  "$(fins "$VSC/snapcontent-$U1")"
check "the snapshot: as-source and bound protection (Delete policy)" "[\"$F_SRC\", \"$F_BOUND\"]" \
  "$(fins "$VS/vs-1")"
expect "ready, the claim's pvc-as-source-protection is released" 10 pvc_fin src-1 false
expect "events CreatingSnapshot, SnapshotCreated, SnapshotReady" 10 has_event vs-1 "Normal SnapshotReady Snapshot $NS/vs-1 is ready to use."
contains "CreatingSnapshot" "Normal CreatingSnapshot Waiting for a snapshot $NS/vs-1 to be created by the CSI driver." "$(events vs-1)"

# ---- a claim restored from it ------------------------------------------------------------------------

pvc restore-1 vols '{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"vs-1"}'
expect "a claim with the snapshot as dataSource is provisioned and Bound" 60 bound restore-1
check "the driver made its volume from the snapshot" "snapshot $SH1" \
  "$(drv "[(v.get('source') or {}).get('type', '') + ' ' + (v.get('source') or {}).get('id', '') for v in vols if v['id'] == '$(handle_of restore-1)'][0]")"

# ---- the default class ---------------------------------------------------------------------------------

vsnap vs-def '{"persistentVolumeClaimName":"src-2"}'
UD=$(vs vs-def 'o["metadata"]["uid"]')
expect "a snapshot without a class becomes ready" 30 vs_ready vs-def
check "it gets its driver's default class (another driver's default does not count)" snaps-default \
  "$(vs vs-def 'o["spec"]["volumeSnapshotClassName"]')"
check "its content has that class" snaps-default "$(vsc "snapcontent-$UD" 'o["spec"]["volumeSnapshotClassName"]')"

# ---- a pre-provisioned content --------------------------------------------------------------------------

read -r PRE_ID _ < <("$CSI_CALL" "$WORK/drv/csi.sock" create-snapshot "$H2" pre-made 2>&1)
post "$VSC" '{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent","metadata":{"name":"pre-c"},"spec":{"driver":"'"$DRIVER"'","deletionPolicy":"Retain","source":{"snapshotHandle":"'"$PRE_ID"'"},"volumeSnapshotRef":{"name":"vs-pre","namespace":"'"$NS"'"}}}'
vsnap vs-pre '{"volumeSnapshotContentName":"pre-c"}'
UP=$(vs vs-pre 'o["metadata"]["uid"]')
expect "a snapshot naming a pre-provisioned content becomes ready" 30 vs_ready vs-pre
check "it is bound to that content" pre-c "$(vs vs-pre 'o["status"]["boundVolumeSnapshotContentName"]')"
check "the content's reference gets the snapshot's uid" "$UP" "$(vsc pre-c 'o["spec"]["volumeSnapshotRef"]["uid"]')"
check "the content gets the controller's finalizer" "[\"$F_CONTENT\"]" "$(fins "$VSC/pre-c")"
check "the snapshot only as-source protection (Retain)" "[\"$F_SRC\"]" "$(fins "$VS/vs-pre")"

# ---- a bad class ---------------------------------------------------------------------------------------

vsnap vs-bad '{"persistentVolumeClaimName":"src-1"}' nope
expect "a missing class is an error on the snapshot" 20 vs_error vs-bad \
  'Failed to get snapshot class with error volumesnapshotclass.snapshot.storage.k8s.io "nope" not found'
expect "with a Warning GetSnapshotClassFailed event" 10 has_event vs-bad "Warning GetSnapshotClassFailed"
check "no content, no finalizer" "[] 404" "$(fins "$VS/vs-bad") $(vsc "snapcontent-$(vs vs-bad 'o["metadata"]["uid"]')" 'o.get("code", "")')"
del "$VS/vs-bad"
expect "it can be deleted" 20 vs_gone vs-bad

contains "metrics: upstream's queue names" 'workqueue_adds_total{name="snapshot-controller-snapshot"}' \
  "$(curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics")"

# ---- a crash in the middle: the next run picks up, one content, one snapshot in the driver ---------------

faults "$WORK/drv" '{"CreateSnapshot": {"hold": true}}'
N0=$(drv 'len(snaps)')
vsnap vs-crash '{"persistentVolumeClaimName":"src-2"}' snaps
UC=$(vs vs-crash 'o["metadata"]["uid"]')
has_content() { [ "$(vsc "snapcontent-$UC" 'o["metadata"]["name"]')" = "snapcontent-$UC" ]; }
expect "its content is made" 20 has_content
stop ctl KILL
check "the controller is killed while the snapshot is cut" 137 "${RC[ctl]}"
start ctl2 "$CTL" "${CTL_ARGS[@]}"
faults "$WORK/drv" ""
expect "restarted, it finishes the snapshot" 40 vs_ready vs-crash
check "one content for it, one more snapshot in the driver" "1 $((N0 + 1))" \
  "$(api "$VSC" | pyj 'len([i for i in o["items"] if i["spec"]["volumeSnapshotRef"].get("uid") == "'"$UC"'"])') $(drv 'len(snaps)')"
expect "and src-2's pvc-as-source-protection is released" 10 pvc_fin src-2 false

# ---- deletion with Delete: the driver's snapshot, the content, the snapshot go --------------------------

del "$VS/vs-1"
expect "the snapshot goes" 30 vs_gone vs-1
expect "its content goes" 30 vsc_gone "snapcontent-$U1"
check "the driver no longer holds the snapshot" false "$(in_driver "$SH1")"

# ---- a Pending claim being restored holds the deletion back ----------------------------------------------

SHD=$(vsc "snapcontent-$UD" 'o["status"]["snapshotHandle"]')
pvc restore-2 no-such-class '{"apiGroup":"snapshot.storage.k8s.io","kind":"VolumeSnapshot","name":"vs-def"}'
del "$VS/vs-def"
expect "deleting while a Pending claim restores from it: SnapshotDeletePending" 20 has_event vs-def \
  "Warning SnapshotDeletePending Snapshot is being used to restore a PVC"
check "the snapshot keeps both finalizers meanwhile" "[\"$F_SRC\", \"$F_BOUND\"]" "$(fins "$VS/vs-def")"
check "and the content stays" "[\"$F_CONTENT\"]" "$(fins "$VSC/snapcontent-$UD")"
del "/api/v1/namespaces/$NS/persistentvolumeclaims/restore-2"
expect "the claim gone, the snapshot goes" 30 vs_gone vs-def
expect "with its content" 30 vsc_gone "snapcontent-$UD"
check "and the driver's snapshot" false "$(in_driver "$SHD")"

# ---- deletion with Retain: the content stays --------------------------------------------------------------

vsnap vs-ret '{"persistentVolumeClaimName":"src-1"}' snaps-retain
UR=$(vs vs-ret 'o["metadata"]["uid"]')
expect "a Retain snapshot becomes ready" 30 vs_ready vs-ret
check "with as-source protection only" "[\"$F_SRC\"]" "$(fins "$VS/vs-ret")"
SHR=$(vsc "snapcontent-$UR" 'o["status"]["snapshotHandle"]')
del "$VS/vs-ret"
expect "the Retain snapshot goes" 30 vs_gone vs-ret
check "its content stays, marked being-deleted, with its finalizer" "[\"yes\", [\"$F_CONTENT\"], false]" \
  "$(vsc "snapcontent-$UR" '[o["metadata"].get("annotations", {}).get("'"$BEING_DEL"'"), o["metadata"]["finalizers"], "deletionTimestamp" in o["metadata"]]')"
check "the driver keeps the snapshot" true "$(in_driver "$SHR")"
del "$VS/vs-pre"
expect "the pre-provisioned snapshot goes" 30 vs_gone vs-pre
check "its Retain content stays" pre-c "$(vsc pre-c 'o["metadata"]["name"]')"

# ---- exits ----------------------------------------------------------------------------------------------

for p in ctl2 snap prov drv; do
  stop "$p"
  check "$p exits 0 on SIGTERM" 0 "${RC[$p]}"
done
finish
