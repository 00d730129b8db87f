#!/usr/bin/env bash
# kubelet-sim as the kubelet of node-1, end to end: kube-lite (its binder
# and attach stand-ins) or the real control plane (its PV binder and
# attach-detach controller), two example CSI drivers (one attaching and
# staging, one that needs neither: its CSIDriver says attachRequired
# false), a csi-provisioner per driver, csi-attacher, a registrar per
# driver and kubelet-sim; csi-resizer for the online expansion of a mounted
# claim (ControllerExpandVolume, then NodeExpandVolume by kubelet-sim and
# the claim's resize finished). Checks read the API with curl and jq and
# the drivers' status.json.
#
#   tests/e2e/test_kubelet_sim.sh <build-dir>    (WORLD=kubernetes: on the real control plane)
#
# worlds: kube-lite kubernetes
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed". Every
# process started here is stopped; kubelet-sim must exit 0 on SIGTERM.
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
SIM="$B/bin/kubelet-sim"
RSZ="$B/bin/csi-resizer"
WORK=$(mktemp -d)
NODE=node-1
NS=default
DA=hostpath.csi.example.com   # attaches (CSIDriver absent) and stages
DB=noattach.csi.example.com   # CSIDriver attachRequired: false; no staging
REGDIR="$WORK/$NODE/plugins_registry"
KROOT="$WORK/$NODE/root"
EXPECT_LAST="$WORK/last"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

for tool in kubectl jq curl python3 sha256sum; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
for b in "$KL" "$DRV" "$PROV" "$ATT" "$REG" "$SIM" "$RSZ"; do
  [ -x "$b" ] || { bad "$b is built (make)"; finish; }
done

# ---- helpers -------------------------------------------------------------------------------

api() { acurl "$1"; }
post() { acurl -H 'Content-Type: application/json' -X POST --data "$2" "$1" >/dev/null; }
merge() { acurl -H 'Content-Type: application/merge-patch+json' -X PATCH --data "$2" "$1" >/dev/null; }
del() { acurl -X DELETE "$1" >/dev/null; }
node_json() { api "/api/v1/nodes/${1:-$NODE}"; }
lease_json() { api "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${1:-$NODE}"; }
pod_json() { api "/api/v1/namespaces/$NS/pods/$1"; }
# in_use: Node status.volumesInUse as one JSON line
in_use() { node_json | jq -c '.status.volumesInUse // []' | tee "$EXPECT_LAST"; }
pvc() { # pvc NAME CLASS
  post "/api/v1/namespaces/$NS/persistentvolumeclaims" '{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"'"$1"'"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"'"$2"'","resources":{"requests":{"storage":"1Gi"}}}}'
}
pod() { # pod NAME NODE [CLAIM] [FINALIZER]
  local vols="" fin=""
  [ -n "${3:-}" ] && vols=',"volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"'"$3"'"}}]'
  [ -n "${4:-}" ] && fin=',"finalizers":["'"$4"'"]'
  post "/api/v1/namespaces/$NS/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"'"$1"'"'"$fin"'},"spec":{"nodeName":"'"$2"'","containers":[{"name":"app","image":"busybox"}]'"$vols"'}}'
}
# delpod NAME: a delete as a user makes it (the real API server then waits for the
# kubelet: deletionTimestamp; kube-lite removes the pod at once)
delpod() { del "/api/v1/namespaces/$NS/pods/$1"; }
# vanish NAME: a delete with grace period 0 (the pod is gone at once in both worlds)
vanish() {
  acurl -X DELETE -H 'Content-Type: application/json' --data '{"gracePeriodSeconds":0}' \
    "/api/v1/namespaces/$NS/pods/$1" >/dev/null
}
bound() { [ "$(api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | jq -r '.status.phase // ""')" = Bound ]; }
pv_of() { api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | jq -r '.spec.volumeName // ""'; }
handle_of() { api "/api/v1/persistentvolumes/$(pv_of "$1")" | jq -r '.spec.csi.volumeHandle // ""'; }
uid_of() { pod_json "$1" | jq -r '.metadata.uid // ""'; }
phase_of() { pod_json "$1" | jq -r '.status.phase // ""'; }
running() { [ "$(pod_json "$1" | jq -r '[.status.phase, (.status.conditions // [] | map(select(.type == "Ready")) | .[0].status)] | join(" ")' | tee "$EXPECT_LAST")" = "Running True" ]; }
pod_gone() { [ "$(pod_json "$1" | jq -r '.code // 0')" = 404 ]; }
# va_of CLAIM NODE: the VolumeAttachment of the claim's PV on NODE, found by what it names
va_of() {
  api /apis/storage.k8s.io/v1/volumeattachments |
    jq -r --arg pv "$(pv_of "$1")" --arg n "$2" '[.items[] | select(.spec.source.persistentVolumeName == $pv and .spec.nodeName == $n) | .metadata.name][0] // ""'
}
va_attached() { [ "$(api "/apis/storage.k8s.io/v1/volumeattachments/$1" | jq -r '.status.attached // false')" = true ]; }
va_gone() { [ "$(api "/apis/storage.k8s.io/v1/volumeattachments/$1" | jq -r '.code // 0')" = 404 ]; }
unique() { echo "kubernetes.io/csi/$1^$2"; }
sha() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
# drv DIR EXPR: EXPR over the driver in DIR (lib.sh's drv_eval)
drv() { drv_eval "$1" "$2"; }
staged_at() { drv "$1" "byid.get('$2', {}).get('staged', {}).get('staging_target_path', '')"; }
targets() { drv "$1" "sorted(p['target_path'] for p in byid.get('$2', {}).get('node_publications', []))" | tee "$EXPECT_LAST"; }
published_nodes() { drv "$1" "sorted(byid.get('$2', {}).get('published_nodes', []))"; }
# val_is WANT COMMAND...: COMMAND prints WANT (for expect: the command runs on every poll)
val_is() { [ "$("${@:2}")" = "$1" ]; }
val_not() { [ "$("${@:2}")" != "$1" ]; }
val_ge() { [ "$("${@:2}")" -ge "$1" ]; }
cmad_of() { node_json "$1" | jq -r '.metadata.annotations["volumes.kubernetes.io/controller-managed-attach-detach"] // ""'; }
lease_secs() { lease_json "$1" | jq -r '.spec.leaseDurationSeconds'; }
n_targets() { drv "$1" "len(byid.get('$2', {}).get('node_publications', []))"; }
# at_least FILE PATTERN N: FILE has at least N lines holding PATTERN
lines() { grep -c -- "$2" "$1" 2>/dev/null; }
at_least() { [ "$(lines "$1" "$2")" -ge "$3" ]; }

# ---- the world -----------------------------------------------------------------------------

mkdir -p "$REGDIR" "$KROOT" "$WORK/a/state" "$WORK/b/state"
"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
echo 'admin-token,admin,1,"system:masters"' >"$WORK/tokens.csv"
world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --kubeconfig-token admin-token --controllers binder,attach || finish

cat >"$WORK/cluster.yaml" <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: sc-a
provisioner: $DA
allowVolumeExpansion: true
parameters:
  csi.storage.k8s.io/fstype: ext4
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: sc-b
provisioner: $DB
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: $DB
spec:
  attachRequired: false
---
apiVersion: v1
kind: Node
metadata:
  name: node-2
  annotations:
    volumes.kubernetes.io/controller-managed-attach-detach: "true"
    csi.volume.kubernetes.io/nodeid: '{"$DA":"node-2"}'
---
apiVersion: v1
kind: Node
metadata:
  name: node-3
EOF
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then
  ok "classes, the CSIDriver of $DB and nodes node-2, node-3 created"
else
  bad "cluster objects" "$(cat "$WORK/cluster.out")"
fi

driver() { # driver NAME DRIVERNAME ARGS...
  local name=$1 dname=$2
  shift 2
  start "drv-$name" "$DRV" --endpoint "unix://$WORK/$name/csi.sock" --state-dir "$WORK/$name/state" \
    --drivername "$dname" --nodeid "$NODE" --plugin-caps CONTROLLER_SERVICE --sync=false "$@"
  wait_for 20 test -S "$WORK/$name/csi.sock"
  start "prov-$name" "$PROV" --csi-address "$WORK/$name/csi.sock" --kubeconfig "$WORK/admin.kubeconfig" \
    --retry-interval-start=100ms --retry-interval-max=2s
  start "reg-$name" "$REG" --csi-address "$WORK/$name/csi.sock" \
    --kubelet-registration-path "$WORK/$name/csi.sock" --plugin-registration-path "$REGDIR"
}
# driver a logs every request (-v=5): the NodeExpandVolume request is checked
driver a "$DA" --known-nodes node-2 -v=5
driver b "$DB" --controller-caps CREATE_DELETE_VOLUME --node-caps GET_VOLUME_STATS
start att-a "$ATT" --csi-address "$WORK/a/csi.sock" --kubeconfig "$WORK/admin.kubeconfig" \
  --retry-interval-start=100ms --retry-interval-max=1s
start_sim() {
  start sim "$SIM" --kubeconfig "$WORK/admin.kubeconfig" --node-name "$NODE" \
    --plugins-registry-dir "$REGDIR" --root-dir "$KROOT" --node-lease-duration-seconds 4 \
    --node-status-report-frequency 2s --sync-frequency 1s -v=2
}
start_sim
registered() {
  [ "$(api "/apis/storage.k8s.io/v1/csinodes/$NODE" | jq -c '[.spec.drivers[]?.name] | sort')" = "[\"$DA\",\"$DB\"]" ]
}
expect "kubelet-sim registers both drivers (CSINode $NODE lists them)" 30 registered

# ---- the Node ----------------------------------------------------------------------------------

ready_is() { [ "$(node_json | jq -r '.status.conditions[]? | select(.type == "Ready") | "\(.status) \(.reason)"')" = "True KubeletReady" ]; }
ready_field() { node_json | jq -r ".status.conditions[] | select(.type == \"Ready\") | .$1"; }
renew_time() { lease_json | jq -r '.spec.renewTime'; }
nj=$(node_json)
check "the Node carries volumes.kubernetes.io/controller-managed-attach-detach: \"true\"" true \
  "$(jq -r '.metadata.annotations["volumes.kubernetes.io/controller-managed-attach-detach"] // ""' <<<"$nj")"
expect "status: Ready True (KubeletReady) through nodes/status" 10 ready_is
nj=$(node_json)
check "Ready has lastHeartbeatTime and lastTransitionTime" "string string" \
  "$(jq -r '.status.conditions[] | select(.type == "Ready") | [(.lastHeartbeatTime | type), (.lastTransitionTime | type)] | join(" ")' <<<"$nj")"
check "the pressure conditions are False" "DiskPressure=False MemoryPressure=False PIDPressure=False" \
  "$(jq -r '[.status.conditions[] | select(.type != "Ready") | "\(.type)=\(.status)"] | sort | join(" ")' <<<"$nj")"
check "capacity and allocatable for a scheduler: cpu, memory, pods 110" "true true 110 true true 110" \
  "$(jq -r '[.status.capacity, .status.allocatable] | map([(.cpu != null), (.memory != null), .pods]) | flatten | map(tostring) | join(" ")' <<<"$nj")"
check "nodeInfo: linux, the kubelet version" "linux v1.20.0-kubelet-sim" \
  "$(jq -r '[.status.nodeInfo.operatingSystem, .status.nodeInfo.kubeletVersion] | join(" ")' <<<"$nj")"
lj=$(lease_json)
check "Lease kube-node-lease/$NODE: holder $NODE, leaseDurationSeconds as given" "$NODE 4" \
  "$(jq -r '[.spec.holderIdentity, .spec.leaseDurationSeconds] | map(tostring) | join(" ")' <<<"$lj")"
check "the Lease is owned by the Node (kind, name, uid)" "$(jq -c '["Node", .metadata.name, .metadata.uid]' <<<"$nj")" \
  "$(jq -c '.metadata.ownerReferences[0] | [.kind, .name, .uid]' <<<"$lj")"
r0=$(jq -r '.spec.renewTime' <<<"$lj")
lease_moved() { [ "$(renew_time)" != "$r0" ]; }
expect "the Lease is renewed (renewTime moves, every lease duration / 4)" 5 lease_moved
h0=$(ready_field lastHeartbeatTime)
t0=$(ready_field lastTransitionTime)
heartbeat_moved() { [ "$(ready_field lastHeartbeatTime)" != "$h0" ]; }
expect "the Ready heartbeat is refreshed (--node-status-report-frequency)" 8 heartbeat_moved
check "... while lastTransitionTime stays" "$t0" "$(ready_field lastTransitionTime)"

# An existing Node without the annotation gets it; the default lease duration is 40 s.
mkdir -p "$WORK/node-3/plugins_registry"
start sim3 "$SIM" --kubeconfig "$WORK/admin.kubeconfig" --node-name node-3 \
  --plugins-registry-dir "$WORK/node-3/plugins_registry" --root-dir "$WORK/node-3/root"
expect "an existing Node (node-3) gets the annotation too" 20 val_is true cmad_of node-3
expect "... and a Lease of 40 s, as the kubelet's default" 10 val_is 40 lease_secs node-3
stop sim3
check "that kubelet-sim exits 0 on SIGTERM" 0 "${RC[sim3]}"

# ---- a pod with a claim: in use, attached, staged, published, Running -----------------------------

pvc c1 sc-a
pvc c2 sc-a
expect "claim c1 is provisioned and Bound" 30 bound c1
expect "claim c2 is provisioned and Bound" 30 bound c2
H1=$(handle_of c1)
PV1=$(pv_of c1)
U1=$(unique "$DA" "$H1")
# NodeStage fails until the fault is cleared: the volume is reported in use
# before anything is staged, and the failures are retried.
faults "$WORK/a" '{"NodeStageVolume": {"fail": {"count": 100000, "code": "UNAVAILABLE", "message": "backend warming up"}}}'
pod p1 "$NODE" c1
P1=$(uid_of p1)
expect "the attach stand-in makes a VolumeAttachment for c1 on $NODE" 20 val_not "" va_of c1 "$NODE"
VA1=$(va_of c1 "$NODE")
expect "csi-attacher attaches it" 30 va_attached "$VA1"
check "its name is csi-<sha256(handle + driver + node)>" "csi-$(sha "$H1$DA$NODE")" "$VA1"
expect "status.volumesInUse gains $U1" 20 val_is "[\"$U1\"]" in_use
# (A failed call is not in the driver's status.json until its next write: the log counts.)
expect "NodeStageVolume failing is logged with the driver's error and retried (3 times)" 20 \
  at_least "$WORK/sim.log" "volume data: NodeStageVolume: rpc error: code = Unavailable desc = backend warming up" 3
check "meanwhile: in use, not staged, pod Pending" "[\"$U1\"]||Pending" \
  "$(in_use)|$(staged_at "$WORK/a" "$H1")|$(phase_of p1)"
faults "$WORK/a" ""
STAGE1="$KROOT/plugins/kubernetes.io/csi/$DA/$(sha "$H1")/globalmount"
TARGET1="$KROOT/pods/$P1/volumes/kubernetes.io~csi/$PV1/mount"
expect "NodeStageVolume at <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount" 20 \
  val_is "$STAGE1" staged_at "$WORK/a" "$H1"
expect "NodePublishVolume at <root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount" 20 \
  val_is "[\"$TARGET1\"]" targets "$WORK/a" "$H1"
check "publication: read-write, mount, ext4, SINGLE_NODE_MULTI_WRITER (the driver has the capability)" \
  '[false, "mount", "ext4", "SINGLE_NODE_MULTI_WRITER"]' \
  "$(drv "$WORK/a" "[[p['readonly'], p['access_type'], p['fs_type'], p['access_mode']] for p in byid['$H1']['node_publications']][0]")"
expect "pod p1 is Running and Ready" 20 running p1
check "volumesInUse was reported before NodeStageVolume was first called" \
  "in-use stage" "$(grep -o 'volumesInUse now 1 volume\|NodeStageVolume' "$WORK/sim.log" | head -n 2 |
    sed 's/volumesInUse now 1 volume/in-use/; s/NodeStageVolume/stage/' | paste -sd' ')"
check "the publication's record sits beside its target (vol_data.json)" "$DA $H1 $PV1 $P1" \
  "$(jq -r '[.driverName, .volumeHandle, .specVolID, .podUID] | join(" ")' "$KROOT/pods/$P1/volumes/kubernetes.io~csi/$PV1/vol_data.json" 2>&1)"

# ---- pods without volumes, pods of other nodes ----------------------------------------------------

pod p0 "$NODE"
expect "a pod without volumes is Running at once" 10 running p0
H2=$(handle_of c2)
pod p-other node-2 c2
attached_on() { local va; va=$(va_of "$1" "$2"); [ -n "$va" ] && va_attached "$va"; }
expect "a pod on node-2 gets its VolumeAttachment attached (there)" 30 attached_on c2 node-2
sleep 2
check "kubelet-sim ignores it: pod Pending, nothing staged or published on node-1, not in use" \
  "Pending||[]|[\"$U1\"]" "$(phase_of p-other)|$(staged_at "$WORK/a" "$H2")|$(targets "$WORK/a" "$H2")|$(in_use)"

# ---- pod deleted at once (it vanished) --------------------------------------------------------------

vanish p1
expect "p1 deleted: NodeUnpublishVolume" 20 val_is "[]" targets "$WORK/a" "$H1"
expect "... NodeUnstageVolume" 20 val_is "" staged_at "$WORK/a" "$H1"
expect "... volumesInUse cleared" 20 val_is "[]" in_use
expect "... the pod is gone" 10 pod_gone p1
expect "... then the volume is detached (its VolumeAttachment is gone)" 30 va_gone "$VA1"
check "the driver holds no publication of c1's volume" "[]" "$(published_nodes "$WORK/a" "$H1")"
check "kubelet-sim removed its records and the pod's directory" "gone" \
  "$([ -e "$KROOT/pods/$P1" ] || [ -e "$KROOT/plugins/kubernetes.io/csi/$DA/$(sha "$H1")" ] && echo left || echo gone)"

# ---- a terminating pod is finished: volumes torn down, then a delete with grace 0 ---------------------

pvc c3 sc-a
expect "claim c3 is Bound" 30 bound c3
H3=$(handle_of c3)
pod p3 "$NODE" c3 kubelet-sim.test/hold
expect "p3 (with a finalizer, so it stays once deleted) is Running" 30 running p3
P3=$(uid_of p3)
check "volumesInUse lists c3's volume" "[\"$(unique "$DA" "$H3")\"]" "$(in_use)"
pod_deletes() { requests '(delete|DELETE)' 'pods' '200'; }
D0=$(pod_deletes)
delpod p3
expect "p3 has a deletionTimestamp: NodeUnpublishVolume" 20 val_is "[]" targets "$WORK/a" "$H3"
expect "... NodeUnstageVolume" 20 val_is "" staged_at "$WORK/a" "$H3"
expect "... volumesInUse cleared" 20 val_is "[]" in_use
expect "... then kubelet-sim deletes the pod (a DELETE after ours)" 20 val_ge $((D0 + 2)) pod_deletes
contains "... with grace period 0 and a precondition on its uid" "pod $NS/p3 ($P3) deleted" "$(grep 'deleted: its volumes' "$WORK/sim.log")"
merge "/api/v1/namespaces/$NS/pods/p3" '{"metadata":{"finalizers":null}}'
expect "once its finalizer goes, p3 is gone" 10 pod_gone p3

# ---- attachRequired false: published without a VolumeAttachment ---------------------------------------

pvc cb sc-b
expect "claim cb ($DB) is Bound" 30 bound cb
HB=$(handle_of cb)
pod pb "$NODE" cb
PB=$(uid_of pb)
expect "NodePublishVolume in $DB without a VolumeAttachment" 20 \
  val_is "[\"$KROOT/pods/$PB/volumes/kubernetes.io~csi/$(pv_of cb)/mount\"]" targets "$WORK/b" "$HB"
expect "pod pb is Running" 20 running pb
check "no VolumeAttachment for cb, nothing staged (no STAGE_UNSTAGE_VOLUME), not in volumesInUse (not attachable)" \
  "||0|[]" "$(va_of cb "$NODE")|$(staged_at "$WORK/b" "$HB")|$(drv_calls "$WORK/b" NodeStageVolume)|$(in_use)"
delpod pb
expect "pb deleted: NodeUnpublishVolume in $DB" 20 val_is "[]" targets "$WORK/b" "$HB"

# ---- two pods share a volume: one staging, unstaged after the last -----------------------------------

pvc c5 sc-a
expect "claim c5 is Bound" 30 bound c5
H5=$(handle_of c5)
pod p5a "$NODE" c5
pod p5b "$NODE" c5
both_running() { running p5a && running p5b; }
expect "two pods on one volume: both Running" 30 both_running
check "one NodeStageVolume, two targets" "1 2" \
  "$(drv "$WORK/a" "1 if byid['$H5'].get('staged') else 0") $(drv "$WORK/a" "len(byid['$H5'].get('node_publications', []))")"
delpod p5a
expect "p5a deleted: its target is unpublished" 20 val_is 1 n_targets "$WORK/a" "$H5"
sleep 1
check "... the volume stays staged and in use for p5b" "staged [\"$(unique "$DA" "$H5")\"]" \
  "$([ -n "$(staged_at "$WORK/a" "$H5")" ] && echo staged || echo unstaged) $(in_use)"
delpod p5b
expect "p5b deleted: unstaged after the last pod" 20 val_is "" staged_at "$WORK/a" "$H5"
expect "... and no longer in use" 20 val_is "[]" in_use

# ---- online expansion: csi-resizer grows a mounted claim, kubelet-sim the file system ---------------

# claim_j NAME FILTER: jq over the claim
claim_j() { api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | jq -c "$2" | tee "$EXPECT_LAST"; }
drv_cap() { drv "$WORK/a" "byid.get('$1', {}).get('capacity_bytes', 0)"; }
# resized NAME SIZE: status.capacity is SIZE and no resize condition or storage status is left
resized() {
  [ "$(claim_j "$1" '[.status.capacity.storage, [.status.conditions[]?.type], (.status.allocatedResourceStatuses // {} | .storage)]')" = "[\"$2\",[],null]" ]
}
pvc c6 sc-a
expect "claim c6 is Bound" 30 bound c6
H6=$(handle_of c6)
PV6=$(pv_of c6)
pod p6 "$NODE" c6
expect "p6 is Running" 30 running p6
P6=$(uid_of p6)
start rsz "$RSZ" --csi-address "$WORK/a/csi.sock" --kubeconfig "$WORK/admin.kubeconfig" \
  --retry-interval-start=200ms --retry-interval-max=2s -v=2
# The first NodeExpandVolume fails: kubelet-sim retries it with backoff.
faults "$WORK/a" '{"NodeExpandVolume": {"fail": {"count": 1, "code": "INTERNAL", "message": "resize2fs busy"}}}'
NE0=$(drv_calls "$WORK/a" NodeExpandVolume)
merge "/api/v1/namespaces/$NS/persistentvolumeclaims/c6" '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}'
expect "csi-resizer: ControllerExpandVolume grows c6's volume to 2Gi" 30 val_is 2147483648 drv_cap "$H6"
expect "kubelet-sim: NodeExpandVolume on the mounted volume, the claim's capacity 2Gi, no resize condition or status left" 30 resized c6 2Gi
contains "the first NodeExpandVolume failed and was retried" \
  "NodeExpandVolume: rpc error: code = Internal desc = resize2fs busy" "$(cat "$WORK/sim.log")"
check "NodeExpandVolume was called twice (one failure, one success)" 2 "$(($(drv_calls "$WORK/a" NodeExpandVolume) - NE0))"
faults "$WORK/a" ""
STAGE6="$KROOT/plugins/kubernetes.io/csi/$DA/$(sha "$H6")/globalmount"
TARGET6="$KROOT/pods/$P6/volumes/kubernetes.io~csi/$PV6/mount"
# The driver logs each request as JSON at -v=5: the last NodeExpandVolume.
req=$(grep "NodeExpandVolume {" "$WORK/drv-a.log" | tail -n 1 | sed 's/^.*NodeExpandVolume //')
check "the request: volume_id, volume_path the pod's target, staging_target_path, required_bytes the PV's new capacity, the PV's capability as the kubelet maps it" \
  "[\"$H6\",\"$TARGET6\",\"$STAGE6\",2147483648,null,\"ext4\",\"SINGLE_NODE_MULTI_WRITER\"]" \
  "$(jq -c '[.volume_id, .volume_path, .staging_target_path, .capacity_range.required_bytes, .capacity_range.limit_bytes, .volume_capability.mount.fs_type, .volume_capability.access_mode.mode]' <<<"$req" 2>&1)"
pv6_is() { [ "$(api "/api/v1/persistentvolumes/$PV6" | jq -c '[.spec.capacity.storage, .metadata.annotations["volume.alpha.kubernetes.io/pre-resize-capacity"]]' | tee "$EXPECT_LAST")" = "$1" ]; }
expect "the PV's capacity is 2Gi, its pre-resize annotation dropped by the resizer" 10 pv6_is '["2Gi",null]'
check "the driver's volume is 2Gi" 2147483648 "$(drv_cap "$H6")"
contains "kubelet-sim logs the expansion" "NodeExpandVolume: $(unique "$DA" "$H6") grown to 2Gi" "$(cat "$WORK/sim.log")"
check "pod p6 stays Running" "Running True" "$(pod_json p6 | jq -r '[.status.phase, (.status.conditions // [] | map(select(.type == "Ready")) | .[0].status)] | join(" ")')"
sleep 2
check "nothing more: one ControllerExpandVolume, no NodeExpandVolume after the resize" "1 2" \
  "$(drv_calls "$WORK/a" ControllerExpandVolume) $(($(drv_calls "$WORK/a" NodeExpandVolume) - NE0))"
stop rsz
check "csi-resizer exits 0 on SIGTERM" 0 "${RC[rsz]}"
delpod p6
expect "p6 deleted: unpublished and unstaged" 20 val_is "" staged_at "$WORK/a" "$H6"

# ---- a pod that vanished while kubelet-sim was away ---------------------------------------------------

pvc c4 sc-a
expect "claim c4 is Bound" 30 bound c4
H4=$(handle_of c4)
pod p4 "$NODE" c4
expect "p4 is Running" 30 running p4
stop sim KILL 2>/dev/null # (bash would report the kill)
vanish p4
expect "(p4 deleted while kubelet-sim is down)" 10 pod_gone p4
check "its volume is still staged and published in the driver" "1 1" \
  "$(drv "$WORK/a" "1 if byid['$H4'].get('staged') else 0") $(drv "$WORK/a" "len(byid['$H4'].get('node_publications', []))")"
mv "$WORK/sim.log" "$WORK/sim-1.log"
start_sim
expect "restarted, kubelet-sim finds the records and unpublishes" 30 val_is "[]" targets "$WORK/a" "$H4"
expect "... and unstages" 20 val_is "" staged_at "$WORK/a" "$H4"
expect "... and volumesInUse is empty" 20 val_is "[]" in_use
contains "... as its log says" "found publication of $(unique "$DA" "$H4")" "$(cat "$WORK/sim.log")"
alive sim && ok "kubelet-sim is still running" || bad "kubelet-sim is still running" "$(tail -n 20 "$WORK/sim.log")"

# ---- the end ---------------------------------------------------------------------------------------

stop sim
check "kubelet-sim exits 0 on SIGTERM" 0 "${RC[sim]}"
stop_all
for n in "${NAMES[@]}" sim-1; do
  if grep -q 'ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer' "$WORK/$n.log" 2>/dev/null; then
    bad "$n: sanitizer report" "$(grep -A5 'ERROR\|runtime error' "$WORK/$n.log")"
    cat "$WORK/$n.log"
  fi
done
finish
