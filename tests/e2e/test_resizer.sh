#!/usr/bin/env bash
# csi-resizer end to end: kube-lite (HTTPS, bearer tokens, RBAC, its binder),
# the example CSI driver, csi-provisioner for the volumes, and csi-resizer
# running with the service-account token that manifests/resizer/rbac.yaml
# grants. Claims of a class with allowVolumeExpansion are edited to a bigger
# size; checks read the API with curl/kubectl and the driver's status.json.
#
#   tests/e2e/test_resizer.sh <build-dir>       (WORLD=kubernetes: on the real control plane)
#
# worlds: kube-lite kubernetes
#
# kube-apiserver 1.20 predates status.allocatedResources (1.24, gated) and
# status.allocatedResourceStatuses (1.28) and drops them from what the
# resizer writes: each check says what it expects in each world.
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
RSZ="$B/bin/csi-resizer"
WORK=$(mktemp -d)
NS=default
EXPECT_LAST="$WORK/last"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

# drv EXPR: EXPR over the driver's status.json (s; vols; byname; byid)
drv() {
  python3 -c '
import json, sys
try:
    s = json.load(open(sys.argv[1] + "/state/status.json"))
except Exception:
    s = {"volumes": [], "calls": {}}
vols = s.get("volumes", [])
byname = {v["name"]: v for v in vols}
byid = {v["id"]: v for v in vols}
r = eval(sys.argv[2])
print(r if isinstance(r, str) else json.dumps(r, sort_keys=True))' "$WORK/drv" "$1"
}
KR() { kubectl --kubeconfig "$WORK/resizer.kubeconfig" --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
started() { grep -qs 'Starting external resizer' "$WORK/$1.log" || ! alive "$1"; }

for tool in kubectl python3 openssl curl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; echo "$passed passed, $failed failed"; exit 1; }
done
[ -x "$RSZ" ] && [ -x "$PROV" ] && [ -x "$DRV" ] || { bad "csi-resizer, csi-provisioner and example-csi-driver are built"; echo "$passed passed, $failed failed"; exit 1; }

# ---- the world: TLS, tokens, RBAC ------------------------------------------------------------

"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
cat >"$WORK/tokens.csv" <<EOF
admin-token,admin,1,"system:masters"
resizer-token,system:serviceaccount:$NS:csi-resizer,2
EOF
if ! world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --authorization-mode RBAC --kubeconfig-token admin-token --controllers binder; then
  echo "$passed passed, $failed failed"
  exit 1
fi
sed 's/token: admin-token/token: resizer-token/' "$WORK/admin.kubeconfig" >"$WORK/resizer.kubeconfig"

contains "without rbac.yaml the resizer's account may not watch claims" "Forbidden" \
  "$(KR get pvc 2>&1)"
out=$(K apply -f "$ROOT/manifests/resizer/rbac.yaml" 2>&1)
check "rbac.yaml applies" "serviceaccount/csi-resizer created
clusterrole.rbac.authorization.k8s.io/external-resizer-runner created
clusterrolebinding.rbac.authorization.k8s.io/csi-resizer-role created
role.rbac.authorization.k8s.io/external-resizer-cfg created
rolebinding.rbac.authorization.k8s.io/csi-resizer-role-cfg created" "$out"
check "with rbac.yaml it may list claims and volumes" "" \
  "$(KR get pvc -o name 2>&1)$(KR get pv -o name 2>&1)"
# rcurl ARGS... PATH: curl as the resizer's service account
rcurl() {
  local path=${*: -1}
  curl -s --max-time 10 -H 'Authorization: Bearer resizer-token' --cacert "$WORK/pki/ca.crt" "${@:1:$#-1}" "$SERVER$path"
}
contains "but may not patch claims' spec" "Forbidden" \
  "$(rcurl -X PATCH -H 'Content-Type: application/merge-patch+json' --data '{}' "/api/v1/namespaces/$NS/persistentvolumeclaims/nothing")"
contains "nor read secrets" "Forbidden" "$(KR get secrets 2>&1)"

cat >"$WORK/cluster.yaml" <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: rsz
provisioner: hostpath.csi.example.com
allowVolumeExpansion: true
parameters:
  csi.storage.k8s.io/fstype: ext4
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fixed
provisioner: hostpath.csi.example.com
EOF
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then
  ok "classes created"
else
  bad "classes" "$(cat "$WORK/cluster.out")"
fi

refused() { requests '.*' '.*' '40[13]' 'system:serviceaccount:.*'; }
REFUSED0=$(refused)

# ---- driver, provisioner, resizer -----------------------------------------------------------

mkdir -p "$WORK/drv/state"
start drv "$DRV" --endpoint "unix://$WORK/drv/csi.sock" --state-dir "$WORK/drv/state" \
  --drivername hostpath.csi.example.com --nodeid node-1 --capacity 20Gi \
  --plugin-caps CONTROLLER_SERVICE,ONLINE \
  --controller-caps CREATE_DELETE_VOLUME,PUBLISH_UNPUBLISH_VOLUME,LIST_VOLUMES,GET_CAPACITY,EXPAND_VOLUME,CREATE_DELETE_SNAPSHOT,LIST_SNAPSHOTS,CLONE_VOLUME,PUBLISH_READONLY,LIST_VOLUMES_PUBLISHED_NODES,GET_VOLUME,SINGLE_NODE_MULTI_WRITER,MODIFY_VOLUME
start prov "$PROV" --csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/admin.kubeconfig" \
  --worker-threads=4 --retry-interval-start=100ms --retry-interval-max=2s --kube-api-qps=100 --kube-api-burst=200
HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start rsz "$RSZ" --csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/resizer.kubeconfig" \
  --workers=4 --retry-interval-start=500ms --retry-interval-max=4s --kube-api-qps=100 \
  --kube-api-burst=200 --leader-election "--leader-election-namespace=$NS" \
  --http-endpoint="127.0.0.1:$HTTP_PORT" --v=5
if wait_for 60 started rsz && alive rsz; then ok "csi-resizer starts"; else bad "csi-resizer starts" "$(tail -n 20 "$WORK/rsz.log")"; fi
check "the Lease is upstream's external-resizer-<sanitized driver>" "external-resizer-hostpath-csi-example-com" \
  "$(K get lease -n "$NS" external-resizer-hostpath-csi-example-com -o jsonpath='{.metadata.name}' 2>&1)"

# ---- helpers ------------------------------------------------------------------------------------

api() { acurl "$1"; }
post() { acurl -H 'Content-Type: application/json' -X POST --data "$2" "$1" >/dev/null; }
mpatch() { acurl -H 'Content-Type: application/merge-patch+json' -X PATCH --data "$2" "$1"; }
pvc() { # pvc NAME CLASS [MODE]: a ReadWriteOnce claim of 1Gi
  post "/api/v1/namespaces/$NS/persistentvolumeclaims" '{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"'"$1"'"},"spec":{"accessModes":["ReadWriteOnce"],"volumeMode":"'"${3:-Filesystem}"'","storageClassName":"'"$2"'","resources":{"requests":{"storage":"1Gi"}}}}'
}
grow() { mpatch "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" '{"spec":{"resources":{"requests":{"storage":"'"$2"'"}}}}'; }
claim() { api "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" | pyj "$2" | tee "$EXPECT_LAST"; }
pv_of() { claim "$1" 'o.get("spec", {}).get("volumeName", "")'; }
pvf() { api "/api/v1/persistentvolumes/$(pv_of "$1")" | pyj "$2" | tee "$EXPECT_LAST"; }
handle_of() { pvf "$1" 'o["spec"]["csi"]["volumeHandle"]'; }
bound() { [ "$(claim "$1" 'o.get("status", {}).get("phase", "")')" = Bound ]; }
drv_size() { drv "byid.get('$1', {}).get('capacity_bytes', 0)"; }
size_is() { [ "$(drv_size "$1" | tee "$EXPECT_LAST")" = "$2" ]; }
pv_cap_is() { [ "$(pvf "$1" 'o["spec"]["capacity"]["storage"]')" = "$2" ]; }
cond_types() { claim "$1" '",".join(c["type"] for c in o.get("status", {}).get("conditions", []))'; }
conds_are() { [ "$(cond_types "$1")" = "$2" ]; }
cap_is() { [ "$(claim "$1" 'o.get("status", {}).get("capacity", {}).get("storage", "")')" = "$2" ]; }
events() { api "/api/v1/namespaces/$NS/events?fieldSelector=involvedObject.name=$1" | pyj '"\n".join("%s %s %s" % (e["type"], e["reason"], e["message"]) for e in o.get("items", []))'; }
calls() { drv "s.get('calls', {}).get('ControllerExpandVolume', 0)"; }
calls_are() { [ "$(calls | tee "$EXPECT_LAST")" = "$1" ]; }
# patches RES: 2xx PATCH writes to RES (and its subresources) by the resizer's account
patches() { requests '(patch|PATCH)' "$1(/[a-z]+)?" '2[0-9][0-9]' 'system:serviceaccount:default:csi-resizer'; }
writes_are() {
  echo "$(($(patches persistentvolumeclaims) - PVCP0)) $(($(patches persistentvolumes) - PVP0))" >"$EXPECT_LAST"
  [ "$(cat "$EXPECT_LAST")" = "$1" ]
}
# kube-lite counts the writes of every user: the user's own edit of the claim is one more
on_real && LITE=0 || LITE=1

# ---- claims ---------------------------------------------------------------------------------------

pvc r-fs rsz
pvc r-blk rsz Block
pvc r-fail rsz
pvc r-big rsz
pvc r-fixed fixed
pvc r-use rsz
pvc r-mod rsz
for c in r-fs r-blk r-fail r-big r-fixed r-use r-mod; do expect "claim $c is provisioned and Bound" 60 bound "$c"; done
sleep 1 # the provisioner's last writes land before counting
PVCP0=$(patches persistentvolumeclaims)
PVP0=$(patches persistentvolumes)
check "nothing to resize: no ControllerExpandVolume" 0 "$(calls)"

# ---- a file system volume: node expansion required ------------------------------------------------

H=$(handle_of r-fs)
grow r-fs 2Gi >/dev/null
expect "ControllerExpandVolume grows the volume to 2Gi" 20 size_is "$H" 2147483648
expect "the PV's capacity is 2Gi" 20 pv_cap_is r-fs 2Gi
# upstream keeps the Resizing condition beside it (keepOldResizeConditions)
expect "the claim is Resizing and FileSystemResizePending" 20 conds_are r-fs Resizing,FileSystemResizePending
check "with upstream's message" "Waiting for user to (re-)start a pod to finish file system resize of volume on node." \
  "$(claim r-fs '[c.get("message") for c in o["status"]["conditions"] if c["type"] == "FileSystemResizePending"][0]')"
check "status.capacity stays 1Gi until the node grows the file system" 1Gi \
  "$(claim r-fs 'o["status"]["capacity"]["storage"]')"
check "the PV keeps the pre-resize capacity (AnnotateFsResize)" 1Gi \
  "$(pvf r-fs 'o["metadata"].get("annotations", {}).get("volume.alpha.kubernetes.io/pre-resize-capacity", "")')"
if [ "$LITE" = 1 ]; then
  check "kube-lite keeps allocatedResources and allocatedResourceStatuses (NodeResizePending)" \
    '[{"storage": "2Gi"}, {"storage": "NodeResizePending"}]' \
    "$(claim r-fs '[o["status"].get("allocatedResources"), o["status"].get("allocatedResourceStatuses")]')"
else
  check "kube-apiserver 1.20 drops allocatedResources and allocatedResourceStatuses" '[null, null]' \
    "$(claim r-fs '[o["status"].get("allocatedResources"), o["status"].get("allocatedResourceStatuses")]')"
fi
expect "events: Resizing, FileSystemResizeRequired" 10 has_event r-fs \
  "Normal FileSystemResizeRequired Require file system resize of volume on node"
contains "the Resizing event names the PV" "Normal Resizing External resizer is resizing volume $(pv_of r-fs)" "$(events r-fs)"
sleep 1
expect "one resize: 2 claim status writes and 1 PV write" 10 writes_are "$((2 + LITE)) 1"
check "one ControllerExpandVolume" 1 "$(calls)"
check "the request: required_bytes only, the PV's capability" "2147483648" "$(drv_size "$H")"

# ---- a block volume: no node expansion ------------------------------------------------------------

HB=$(handle_of r-blk)
PVCP0=$(patches persistentvolumeclaims)
PVP0=$(patches persistentvolumes)
grow r-blk 3Gi >/dev/null
expect "block: ControllerExpandVolume to 3Gi" 20 size_is "$HB" 3221225472
expect "block: the claim's capacity is 3Gi" 20 cap_is r-blk 3Gi
check "block: the PV's capacity is 3Gi" 3Gi "$(pvf r-blk 'o["spec"]["capacity"]["storage"]')"
check "block: no resize condition left" "" "$(cond_types r-blk)"
check "block: no pre-resize annotation" "" \
  "$(pvf r-blk 'o["metadata"].get("annotations", {}).get("volume.alpha.kubernetes.io/pre-resize-capacity", "")')"
NNR=$(claim r-blk 'o["metadata"].get("annotations", {}).get("volume.kubernetes.io/node-expansion-not-required", "")')
if [ "$LITE" = 1 ]; then
  # kube-lite's status subresource keeps no metadata change (see the report in the commit)
  check "block: kube-lite drops the node-expansion-not-required annotation written through status" "" "$NNR"
  # kube-lite keeps the emptied map; kube-apiserver omits an empty map (omitempty)
  check "block: kube-lite keeps allocatedResources, the storage status removed" '[{"storage": "3Gi"}, {}]' \
    "$(claim r-blk '[o["status"].get("allocatedResources"), o["status"].get("allocatedResourceStatuses")]')"
else
  check "block: node-expansion-not-required annotation" true "$NNR"
fi
expect "block: event VolumeResizeSuccessful" 10 has_event r-blk "Normal VolumeResizeSuccessful Resize volume succeeded"
sleep 1
expect "block: 2 claim status writes and 1 PV write" 10 writes_are "$((2 + LITE)) 1"

# ---- a driver failure: VolumeResizeFailed and backoff ------------------------------------------------

HF=$(handle_of r-fail)
C0=$(calls)
faults "$WORK/drv" '{"ControllerExpandVolume": {"fail": {"count": 2, "code": "INTERNAL", "message": "disk array busy"}}}'
grow r-fail 2Gi >/dev/null
PVF=$(pv_of r-fail)
expect "a failure: Warning VolumeResizeFailed with upstream's text" 20 has_event r-fail \
  "Warning VolumeResizeFailed resize volume \"$PVF\" by resizer \"hostpath.csi.example.com\" failed: rpc error: code = Internal desc = disk array busy"
expect "after two failures the third call grows it" 20 size_is "$HF" 2147483648
# With allocatedResources (kube-lite) the retry is at the recorded size and keeps the old resize
# conditions, so the ControllerResizeError stays (as upstream); without (1.20) the retry starts
# afresh and its Resizing replaces it.
if [ "$LITE" = 1 ]; then WANT=Resizing,ControllerResizeError,FileSystemResizePending; else WANT=Resizing,FileSystemResizePending; fi
expect "then FileSystemResizePending ($WANT)" 20 conds_are r-fail "$WANT"
check "three calls in all" 3 "$(($(calls) - C0))"
# (the driver's two failures; a sync that lost a race to a conflict is logged too, and is no
# failure of the driver)
T1=$(grep 'Error syncing PVC default/r-fail: .*disk array busy' "$WORK/rsz.log" | wc -l)
check "two failed syncs logged, with the driver's message" 2 "$T1"
# The first failure's own status write requeues the claim at once (as upstream's informer
# handler does); the next retry waits for the backoff (--retry-interval-start=500ms).
GAP=$(grep "ControllerExpandVolume of $PVF " "$WORK/rsz.log" | python3 -c '
import sys
t = []
for l in sys.stdin:
    h, m, s = l.split()[1].split(":")
    t.append(int(h) * 3600 + int(m) * 60 + float(s))
print("ok" if len(t) == 3 and t[2] - t[1] >= 0.45 else "gaps %s" % [round(b - a, 3) for a, b in zip(t, t[1:])])')
check "the retry after the second failure waited for the backoff" ok "$GAP"
faults "$WORK/drv" ""

# ---- a volume in use and a driver that expands offline only (--handle-volume-inuse-error) --------------
# Upstream's rule: FAILED_PRECONDITION records the claim as in use; while an unfinished pod uses
# it, syncs (on the backoff) send nothing to the driver and say why in a Warning; once no such pod
# is left, the next retry expands. The pod is never scheduled (no nodeName; no kubelet in this
# test): Pending is not finished, so it counts as using the claim, in both worlds.

HU=$(handle_of r-use)
PVU=$(pv_of r-use)
post "/api/v1/namespaces/$NS/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p-use"},"spec":{"containers":[{"name":"app","image":"busybox"}],"volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"r-use"}}]}}'
pod_seen() { [ -n "$(api "/api/v1/namespaces/$NS/pods/p-use" | pyj 'o.get("metadata", {}).get("uid", "")')" ]; }
expect "a pod uses r-use" 10 pod_seen
sleep 1 # the resizer's pod informer has seen it
faults "$WORK/drv" '{"ControllerExpandVolume": {"fail": {"count": 100, "code": "FAILED_PRECONDITION", "message": "volume is in use and this driver expands offline only"}}}'
C0=$(calls)
grow r-use 2Gi >/dev/null
expect "in use: the driver's FailedPrecondition as VolumeResizeFailed" 20 has_event r-use \
  "Warning VolumeResizeFailed resize volume \"$PVU\" by resizer \"hostpath.csi.example.com\" failed: rpc error: code = FailedPrecondition desc = volume is in use and this driver expands offline only"
expect "then upstream's in-use Warning instead of another call" 20 has_event r-use \
  "Warning VolumeResizeFailed Unable to expand $NS/r-use because CSI driver hostpath.csi.example.com only supports offline expansion and volume is currently in-use"
# With allocatedResources (kube-lite) each waiting sync keeps the old resize conditions; without
# (1.20) its Resizing condition replaces the error, as upstream's does.
if [ "$LITE" = 1 ]; then
  check "a ControllerResizeError condition with the driver's error" \
    '["failed to expand pvc with rpc error: code = FailedPrecondition desc = volume is in use and this driver expands offline only"]' \
    "$(claim r-use '[c.get("message", "") for c in o["status"].get("conditions", []) if c["type"] == "ControllerResizeError"]')"
fi
sleep 5 # --retry-interval-max=4s: at least two more syncs
check "while the pod lives: one ControllerExpandVolume only" 1 "$(($(calls) - C0))"
N=$(grep -c "Unable to expand $NS/r-use because" "$WORK/rsz.log")
if [ "$N" -ge 2 ]; then ok "the waiting syncs are retried with backoff ($N)"; else bad "the waiting syncs are retried with backoff" "$N"; fi
check "the volume is unchanged" 1073741824 "$(drv_size "$HU")"
faults "$WORK/drv" ""
acurl -X DELETE "/api/v1/namespaces/$NS/pods/p-use?gracePeriodSeconds=0" >/dev/null
expect "the pod is gone" 30 is_gone pod p-use
expect "once no pod uses it, the retry expands to 2Gi" 20 size_is "$HU" 2147483648
expect "and the claim goes on to FileSystemResizePending" 20 test "$(cond_types r-use | grep -o FileSystemResizePending)" = FileSystemResizePending
check "two ControllerExpandVolume calls in all" 2 "$(($(calls) - C0))"

# ---- infeasible: OUT_OF_RANGE, retried only at --retry-interval-max ------------------------------------

HG=$(handle_of r-big)
C0=$(calls)
grow r-big 50Gi >/dev/null
expect "beyond the pool: VolumeResizeFailed with OutOfRange" 20 has_event r-big "desc = 53687091200 bytes exceed the pool"
if [ "$LITE" = 1 ]; then
  expect "kube-lite: ControllerResizeInfeasible" 10 test "$(claim r-big 'o["status"].get("allocatedResourceStatuses", {}).get("storage", "")')" = ControllerResizeInfeasible
fi
expect "a ControllerResizeError condition with the driver's error" 10 test \
  "$(claim r-big '[c.get("message", "") for c in o["status"].get("conditions", []) if c["type"] == "ControllerResizeError"]')" = \
  '["failed to expand pvc with rpc error: code = OutOfRange desc = 53687091200 bytes exceed the pool of 21474836480 bytes"]'
# Counted from here, once the failure is recorded (the checks above take a
# while on a busy machine): a slow machine can only make the count smaller.
C1=$(calls)
sleep 2
N=$(($(calls) - C1))
if [ "$LITE" = 1 ]; then
  # infeasible at the same size: the slow set (4 s) holds the retries back
  if [ "$N" -le 1 ]; then ok "infeasible: at most 1 call in the next 2 s (slow retry)"; else bad "infeasible: at most 1 call in the next 2 s" "$N calls"; fi
else
  # without allocatedResources the claim's size is retried with the ordinary backoff
  if [ "$N" -le 4 ]; then ok "infeasible: backoff keeps it at most 4 calls in 2 s"; else bad "infeasible: backoff" "$N calls"; fi
fi
check "the volume is unchanged" 1073741824 "$(drv_size "$HG")"

# ---- VolumeAttributesClass: the modify controller -------------------------------------------------------
# kube-apiserver 1.20 has no VolumeAttributesClass: the resizer turns the gate off by itself there
# (as upstream, from discovery), so modify is tested on kube-lite only.

if on_real; then
  contains "1.20: the VolumeAttributesClass gate is turned off (no v1 API)" \
    "Disabling VolumeAttributesClass feature gate because the VolumeAttributesClass v1 API is not available" \
    "$(cat "$WORK/rsz.log")"
else
  contains "kube-lite serves VolumeAttributesClass v1: the modify controller runs" \
    "Starting external resizer for modify volume hostpath.csi.example.com" "$(cat "$WORK/rsz.log")"
  cat >"$WORK/vac.yaml" <<'EOF'
apiVersion: storage.k8s.io/v1
kind: VolumeAttributesClass
metadata:
  name: gold
driverName: hostpath.csi.example.com
parameters:
  iops: "3000"
  throughput: "125"
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttributesClass
metadata:
  name: silly
driverName: hostpath.csi.example.com
parameters:
  iops: "999999"
EOF
  if K create -f "$WORK/vac.yaml" >"$WORK/vac.out" 2>&1; then ok "classes gold and silly created"; else bad "VolumeAttributesClasses" "$(cat "$WORK/vac.out")"; fi
  HM=$(handle_of r-mod)
  setvac() { mpatch "/api/v1/namespaces/$NS/persistentvolumeclaims/$1" '{"spec":{"volumeAttributesClassName":"'"$2"'"}}' >/dev/null; }
  mstatus() { claim "$1" 'json.dumps([o["status"].get("currentVolumeAttributesClassName"), o["status"].get("modifyVolumeStatus")], sort_keys=True)'; }
  mstatus_is() { [ "$(mstatus "$1")" = "$2" ]; }
  mparams() { drv "byid.get('$1', {}).get('mutable_parameters', {})"; }
  mcalls() { drv "s.get('calls', {}).get('ControllerModifyVolume', 0)"; }

  # success: the class's parameters reach the driver; the claim and PV record the class
  setvac r-mod gold
  expect "modify: currentVolumeAttributesClassName becomes gold, no modifyVolumeStatus left" 20 \
    mstatus_is r-mod '["gold", null]'
  check "modify: the driver has the class's parameters as mutable parameters" \
    '{"iops": "3000", "throughput": "125"}' "$(mparams "$HM")"
  check "modify: the PV's spec.volumeAttributesClassName is gold" gold \
    "$(pvf r-mod 'o["spec"].get("volumeAttributesClassName", "")')"
  check "modify: no modify condition left" "" "$(cond_types r-mod)"
  expect "modify: events VolumeModify and VolumeModifySuccessful" 10 has_event r-mod \
    "Normal VolumeModifySuccessful external resizer modified volume r-mod with vac gold successfully"
  contains "modify: the VolumeModify event names the claim and the class" \
    "Normal VolumeModify external resizer is modifying volume r-mod with vac gold" "$(events r-mod)"
  check "modify: one ControllerModifyVolume" 1 "$(mcalls)"

  # the driver refuses (INVALID_ARGUMENT): Infeasible, the error condition, a Warning, slow retries
  faults "$WORK/drv" '{"ControllerModifyVolume": {"fail": {"count": 100, "code": "INVALID_ARGUMENT", "message": "iops 999999 is beyond this backend"}}}'
  setvac r-mod silly
  expect "infeasible: modifyVolumeStatus Infeasible with target silly, current still gold" 20 \
    mstatus_is r-mod '["gold", {"status": "Infeasible", "targetVolumeAttributesClassName": "silly"}]'
  expect "infeasible: Warning VolumeModifyFailed with the driver's error" 10 has_event r-mod \
    "Warning VolumeModifyFailed rpc error: code = InvalidArgument desc = iops 999999 is beyond this backend"
  check "infeasible: ModifyingVolume (failed, waiting) and ModifyVolumeError (InvalidArgument) conditions" \
    '[["ModifyingVolume", "", "Modifying volume to \"silly\" failed. Waiting for retry."], ["ModifyVolumeError", "InvalidArgument", "iops 999999 is beyond this backend"]]' \
    "$(claim r-mod 'json.dumps([[c["type"], c.get("reason", ""), c.get("message", "")] for c in o["status"].get("conditions", [])])')"
  M1=$(mcalls)
  sleep 2
  N=$(($(mcalls) - M1))
  if [ "$N" -le 1 ]; then ok "infeasible: at most 1 call in the next 2 s (slow retry)"; else bad "infeasible: slow retry" "$N calls"; fi
  check "infeasible: the volume keeps gold's parameters" '{"iops": "3000", "throughput": "125"}' "$(mparams "$HM")"

  # roll back to the class in effect: the driver is asked for gold again and the status clears
  faults "$WORK/drv" ""
  setvac r-mod gold
  expect "roll back to gold: modifyVolumeStatus cleared, current gold" 20 mstatus_is r-mod '["gold", null]'
  check "roll back: no modify condition left" "" "$(cond_types r-mod)"

  # a class that does not exist: Pending and a Warning, no driver call
  M2=$(mcalls)
  setvac r-mod platinum
  expect "missing class: modifyVolumeStatus Pending" 20 mstatus_is r-mod '["gold", {"status": "Pending"}]'
  expect "missing class: Warning VolumeModifyFailed" 10 has_event r-mod 'Warning VolumeModifyFailed VAC "platinum" does not exist.'
  check "missing class: no ControllerModifyVolume" 0 "$(($(mcalls) - M2))"
  check "the PV still says gold" gold "$(pvf r-mod 'o["spec"].get("volumeAttributesClassName", "")')"
fi

# ---- nothing refused; a class without allowVolumeExpansion is refused by the API ----------------------

check "no request of the resizer was refused (RBAC is enough)" 0 "$(($(refused) - REFUSED0))"
contains "no expansion for a class without allowVolumeExpansion" "Forbidden" "$(grow r-fixed 2Gi)"
contains "metrics: the queue is upstream's <driver>-pvc" 'workqueue_adds_total{name="hostpath.csi.example.com-pvc"}' \
  "$(curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics")"
stop rsz
check "rsz exits 0 on SIGTERM" 0 "${RC[rsz]}"

# ---- VolumeAttributesClass=false: no modify controller; --handle-volume-inuse-error=false: no pods (kube-lite)
if ! on_real; then
  PODREQ0=$(requests '(LIST|WATCH|list|watch)' pods '.*')
  start rsz-off "$RSZ" --csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/resizer.kubeconfig" \
    --workers=2 --retry-interval-start=500ms --retry-interval-max=4s --kube-api-qps=100 \
    --kube-api-burst=200 --feature-gates=VolumeAttributesClass=false --handle-volume-inuse-error=false --v=5
  if wait_for 60 started rsz-off && alive rsz-off; then ok "gate off: csi-resizer starts"; else bad "gate off: csi-resizer starts" "$(tail -n 20 "$WORK/rsz-off.log")"; fi
  M3=$(mcalls)
  setvac r-mod silly
  sleep 3
  check "gate off: no ControllerModifyVolume" 0 "$(($(mcalls) - M3))"
  check "gate off: the claim's modify status is left alone" '["gold", {"status": "Pending"}]' "$(mstatus r-mod)"
  check "gate off: no modify controller started" "" "$(grep 'for modify volume' "$WORK/rsz-off.log")"
  check "--handle-volume-inuse-error=false: no pod list or watch" 0 "$(($(requests '(LIST|WATCH|list|watch)' pods '.*') - PODREQ0))"
  stop rsz-off
  check "rsz-off exits 0 on SIGTERM" 0 "${RC[rsz-off]}"
fi
for p in prov drv; do
  stop "$p"
  check "$p exits 0 on SIGTERM" 0 "${RC[$p]}"
done
finish

