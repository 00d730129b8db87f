#!/usr/bin/env bash
# worlds: kube-lite kubernetes
# csi-provisioner end to end, volume sources: clones (PVC dataSource) and
# restores (VolumeSnapshot dataSource), their protection finalizers and the
# snapshot orphan sweeper. kube-lite (HTTPS, bearer tokens, RBAC) or, with
# WORLD=kubernetes, the real control plane 1.20 with the snapshot.storage.k8s.io/v1
# CRDs of tests/e2e/fixtures/snapshot-crds.yaml (kube-lite serves those types
# built in), the example CSI driver and the provisioner running with the
# service-account token that manifests/provisioner/rbac.yaml grants; checked
# with kubectl and the driver's status.json. Driver snapshots are made with
# tests/e2e/csi_call; VolumeSnapshots and their contents are written by hand
# with the status the snapshot controller would give them (none runs here).
#
#   [WORLD=kubernetes] tests/e2e/test_provisioner_sources.sh <build-dir>
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed"; exits
# non-zero when a check failed. Every process started here is stopped with
# SIGTERM and must exit 0; their logs are copied to the output when they
# hold a sanitizer report.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
DRV="$B/bin/example-csi-driver"
PROV="$B/bin/csi-provisioner"
CSI_CALL="$B/tests/e2e/csi_call"
WORK=$(mktemp -d)
NS=default
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

CLONE_FIN=provisioner.storage.kubernetes.io/cloning-protection
SNAP_FIN=provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection
HANDLE_PVC="error getting handle for DataSource Type PersistentVolumeClaim by Name"
HANDLE_VS="error getting handle for DataSource Type VolumeSnapshot by Name"

trap cleanup EXIT

# ---- kubectl, JSON and the driver's state ---------------------------------------------------

# drv DIR EXPR: EXPR over the driver in DIR (lib.sh's drv_eval)
drv() { drv_eval "$1" "$2"; }
events() {
  K get events -n "$NS" --field-selector "involvedObject.name=$1" \
    -o jsonpath='{range .items[*]}{.reason}{"\t"}{.message}{"\n"}{end}' 2>/dev/null
}
uid_of() { jp "$1" "$2" '{.metadata.uid}'; }
# has_fin KIND NAME FINALIZER / lacks_fin KIND NAME FINALIZER (an existing object)
has_fin() { [[ "$(jp "$1" "$2" '{.metadata.finalizers}')" == *"\"$3\""* ]]; }
lacks_fin() { [ -n "$(uid_of "$1" "$2")" ] && ! has_fin "$@"; }
# volume of a bound claim in the driver: [id, capacity, source]
vol_of() { drv "$WORK/$1" "[byname.get('$2', {}).get(k) for k in ('id', 'capacity_bytes', 'source')]"; }
vol_id() { drv "$WORK/$1" "byname.get('$2', {}).get('id', '')"; }
drv_lacks() { [ "$(drv "$WORK/$1" "'$2' in byname")" = false ]; }
# pending_unprovisioned CLAIM DRIVER-DIR: Pending, unbound, no volume of its name
pending_unprovisioned() {
  echo "$(jp pvc "$1" '{.status.phase}|{.spec.volumeName}')|$(drv "$WORK/$2" "'pvc-$(uid_of pvc "$1")' in byname")"
}

# pvc NAME CLASS [SIZE] [SPEC-YAML]: a RWO claim, optionally from a source
pvc() {
  cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: $1
  namespace: $NS
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: $2
  resources:
    requests:
      storage: ${3:-1Gi}
${4:-}
EOF
}
# clone NAME CLASS SIZE SOURCE-CLAIM
clone() { pvc "$1" "$2" "$3" "  dataSource: {kind: PersistentVolumeClaim, name: $4}"; }
# restore NAME CLASS SIZE SNAPSHOT [MORE-SPEC-YAML]
restore() { pvc "$1" "$2" "$3" "  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: $4}${5:-}"; }

# snapshot NAME DRIVER HANDLE RESTORE-SIZE READY [SOURCE-VOLUME-MODE]: a pre-provisioned
# VolumeSnapshotContent "NAME-content" bound to VolumeSnapshot NAME, with the
# status the snapshot controller would write (set through /status).
snapshot() {
  local name=$1 driver=$2 handle=$3 size=$4 ready=$5 mode=${6:-} uid
  cat <<EOF | K create -f - >/dev/null || return 1
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: $name
  namespace: $NS
spec:
  source:
    volumeSnapshotContentName: $name-content
EOF
  uid=$(uid_of volumesnapshot "$name")
  cat <<EOF | K create -f - >/dev/null || return 1
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotContent
metadata:
  name: $name-content
spec:
  driver: $driver
  deletionPolicy: Retain
  ${mode:+sourceVolumeMode: $mode}
  source:
    snapshotHandle: $handle
  volumeSnapshotRef:
    name: $name
    namespace: $NS
    uid: $uid
EOF
  K patch volumesnapshotcontent "$name-content" --subresource=status --type=merge \
    -p "{\"status\": {\"snapshotHandle\": \"$handle\", \"readyToUse\": $ready, \"restoreSize\": $size}}" >/dev/null || return 1
  K patch volumesnapshot "$name" -n "$NS" --subresource=status --type=merge \
    -p "{\"status\": {\"boundVolumeSnapshotContentName\": \"$name-content\", \"readyToUse\": $ready, \"restoreSize\": \"$size\"}}" >/dev/null
}

# ---- start: kube-lite or the real control plane, with TLS, tokens and RBAC --------------

for tool in kubectl python3 openssl curl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; echo "$passed passed, $failed failed"; exit 1; }
done
[ -x "$CSI_CALL" ] || { bad "$CSI_CALL is built (make tests)"; echo "$passed passed, $failed failed"; exit 1; }
"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
cat >"$WORK/tokens.csv" <<EOF
admin-token,admin,1,"system:masters"
provisioner-token,system:serviceaccount:$NS:csi-provisioner,2
EOF
if ! world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --authorization-mode RBAC --kubeconfig-token admin-token; then
  echo "$passed passed, $failed failed"
  exit 1
fi
if on_real; then
  # 1.20 serves no snapshot types of its own: the CRDs first (as a cluster with
  # external-snapshotter has them), before any provisioner starts.
  if out=$(K apply -f "$ROOT/tests/e2e/fixtures/snapshot-crds.yaml" 2>&1) &&
    out=$(K wait --for condition=established --timeout=60s \
      crd/volumesnapshots.snapshot.storage.k8s.io crd/volumesnapshotcontents.snapshot.storage.k8s.io 2>&1); then
    ok "the snapshot.storage.k8s.io/v1 CRDs are established"
  else
    bad "the snapshot.storage.k8s.io/v1 CRDs are established" "$out"
  fi
fi
sed 's/token: admin-token/token: provisioner-token/' "$WORK/admin.kubeconfig" >"$WORK/provisioner.kubeconfig"
if out=$(K apply -f "$ROOT/manifests/provisioner/rbac.yaml" 2>&1); then
  ok "rbac.yaml applies"
else
  bad "rbac.yaml applies" "$out"
fi

# Classes: two of the full driver (cloning across classes of one driver is
# allowed), one of a driver that can neither clone nor restore.
cat >"$WORK/cluster.yaml" <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: gold
provisioner: hostpath.csi.example.com
reclaimPolicy: Delete
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: silver
provisioner: hostpath.csi.example.com
reclaimPolicy: Delete
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: plain
provisioner: plain.csi.example.com
reclaimPolicy: Delete
EOF
if out=$(K create -f "$WORK/cluster.yaml" 2>&1); then ok "storage classes created"; else bad "storage classes" "$out"; fi

# Requests refused so far: any refused later is a provisioner lacking a permission.
refused() { requests '.*' '.*' '40[13]' "system:serviceaccount:$NS:csi-provisioner"; }
REFUSED0=$(refused)

# ---- drivers and provisioners -------------------------------------------------------------

# driver NAME DRIVER-NAME ARGS...: one example driver, socket and state in $WORK/NAME
driver() {
  local name=$1 dname=$2
  shift 2
  mkdir -p "$WORK/$name/state"
  start "$name" "$DRV" --endpoint "unix://$WORK/$name/csi.sock" --state-dir "$WORK/$name/state" \
    --drivername "$dname" --nodeid node-1 --plugin-caps CONTROLLER_SERVICE "$@"
}
# provisioner NAME DRIVER-DIR ARGS...
provisioner() {
  local name=$1 dir=$2
  shift 2
  start "$name" "$PROV" --csi-address "$WORK/$dir/csi.sock" --kubeconfig "$WORK/provisioner.kubeconfig" \
    --worker-threads=4 --retry-interval-start=100ms --retry-interval-max=2s --kube-api-qps=100 \
    --kube-api-burst=200 "$@"
}
started() { grep -qs 'provisioner started' "$WORK/$1.log" || ! alive "$1"; }

# FULL: every controller capability (CLONE_VOLUME, CREATE_DELETE_SNAPSHOT);
# its provisioner sweeps orphaned snapshot finalizers every second.
driver drv-full hostpath.csi.example.com
# PLAIN: CREATE_DELETE_VOLUME only.
driver drv-plain plain.csi.example.com --controller-caps CREATE_DELETE_VOLUME
provisioner prov-full drv-full --snapshot-orphan-sweep-interval=1s
provisioner prov-plain drv-plain
ready prov-full
ready prov-plain

# ---- clones ---------------------------------------------------------------------------------

pvc src-1 gold
expect "clone: the source claim becomes Bound" 20 phase_is pvc src-1 Bound
SRC1_PV=$(jp pvc src-1 '{.spec.volumeName}')
SRC1_VOL=$(vol_id drv-full "$SRC1_PV")

# CreateVolume answers UNAVAILABLE (outcome unknown: the clone is still in
# flight) until the look below is done, whatever the machine's load.
faults "$WORK/drv-full" '{"CreateVolume": {"fail": {"count": 100000, "code": "UNAVAILABLE", "message": "busy"}}}'
clone c-1 gold 1Gi src-1
expect "clone: while the clone is provisioned the source carries $CLONE_FIN" 10 has_fin pvc src-1 "$CLONE_FIN"
check "clone: the clone is Pending meanwhile" Pending "$(jp pvc c-1 '{.status.phase}')"
faults "$WORK/drv-full" ""
expect "clone: the clone becomes Bound" 20 phase_is pvc c-1 Bound
C1_PV=$(jp pvc c-1 '{.spec.volumeName}')
expect "clone: the source's finalizer is removed once the clone exists" 10 lacks_fin pvc src-1 "$CLONE_FIN"
check "clone: the driver cloned the source volume, 1 GiB" \
  "[\"1073741824\", {\"id\": \"$SRC1_VOL\", \"type\": \"volume\"}]" \
  "$(drv "$WORK/drv-full" "[str(byname.get('$C1_PV', {}).get('capacity_bytes')), byname.get('$C1_PV', {}).get('source')]")"
check "clone: PV capacity 1Gi, class gold, handle of the new volume" \
  "1Gi gold $(vol_id drv-full "$C1_PV")" \
  "$(jp pv "$C1_PV" '{.spec.capacity.storage} {.spec.storageClassName} {.spec.csi.volumeHandle}')"
expect "clone: event ProvisioningSucceeded" 10 has_event c-1 $'ProvisioningSucceeded\tSuccessfully provisioned volume '"$C1_PV"

# The source is deleted while a clone of it is in flight: the finalizer keeps
# it until the clone is done, then it goes (and its volume with it). The
# clone's CreateVolume answers UNAVAILABLE (outcome unknown: still in
# flight) until the look below is done, so no timing decides what it sees
# on a loaded machine (suites run side by side on 2 cores).
faults "$WORK/drv-full" '{"CreateVolume": {"fail": {"count": 100000, "code": "UNAVAILABLE", "message": "busy"}}}'
clone c-2 gold 1Gi src-1
expect "clone in flight: the source gets the finalizer" 10 has_fin pvc src-1 "$CLONE_FIN"
K delete pvc src-1 --wait=false >/dev/null 2>&1
deleting_but_held() {
  [ -n "$(jp pvc src-1 '{.metadata.deletionTimestamp}')" ] && has_fin pvc src-1 "$CLONE_FIN"
}
if deleting_but_held && phase_is pvc c-2 Pending; then
  ok "clone in flight: the deleted source is held by the finalizer while the clone is Pending"
else
  bad "clone in flight: the deleted source is held" "$(K get pvc src-1 c-2 -o yaml 2>&1 | head -n 40)"
fi
faults "$WORK/drv-full" '{"CreateVolume": {"delay_ms": 2000}}'
expect "clone in flight: the clone becomes Bound" 40 phase_is pvc c-2 Bound
C2_PV=$(jp pvc c-2 '{.spec.volumeName}')
check "clone in flight: the clone was made from the source volume" "{\"id\": \"$SRC1_VOL\", \"type\": \"volume\"}" \
  "$(drv "$WORK/drv-full" "byname.get('$C2_PV', {}).get('source')")"
expect "clone in flight: then the source claim is gone" 20 is_gone pvc src-1
expect "clone in flight: its PV and volume are deleted (reclaim Delete)" 20 drv_lacks drv-full "$SRC1_PV"

# Two slow clones of one source at once: both are made, and the source can
# be deleted afterwards (no finalizer is left on it). Both CreateVolumes answer
# UNAVAILABLE (in flight) until the finalizer is seen, then take 2 s: with the
# delay alone, both could be done before a poll on a loaded machine.
pvc src-3 gold
expect "two clones: the source becomes Bound" 20 phase_is pvc src-3 Bound
faults "$WORK/drv-full" '{"CreateVolume": {"fail": {"count": 100000, "code": "UNAVAILABLE", "message": "busy"}}}'
clone c-3a gold 1Gi src-3
clone c-3b gold 1Gi src-3
expect "two clones: the source gets the finalizer" 10 has_fin pvc src-3 "$CLONE_FIN"
faults "$WORK/drv-full" '{"CreateVolume": {"delay_ms": 2000}}'
expect "two clones: both become Bound" 40 eval 'phase_is pvc c-3a Bound && phase_is pvc c-3b Bound'
K delete pvc src-3 --wait=false >/dev/null 2>&1
expect "two clones: the source can be deleted afterwards" 20 is_gone pvc src-3
faults "$WORK/drv-full" ""
# Four clones finishing together (no delay) race to release the source.
pvc src-5 gold
expect "four clones: the source becomes Bound" 20 phase_is pvc src-5 Bound
pids=()
for i in 1 2 3 4; do
  clone "c-5-$i" gold 1Gi src-5 &
  pids+=($!)
done
wait "${pids[@]}"
all_bound() { local i; for i in 1 2 3 4; do phase_is pvc "c-5-$i" Bound || return 1; done; }
expect "four clones: all become Bound" 20 all_bound
IN_PROGRESS=external-provisioner.volume.kubernetes.io/provisioning-in-progress
none_in_progress() { local i; for i in 1 2 3 4; do lacks_fin pvc "c-5-$i" "$IN_PROGRESS" || return 1; done; }
expect "four clones: none keeps the provisioning-in-progress finalizer" 10 none_in_progress
K delete pvc src-5 --wait=false >/dev/null 2>&1
expect "four clones: the source can be deleted afterwards" 20 is_gone pvc src-5
# A clone deleted while its CreateVolume runs (6 s: on a loaded machine a
# poll takes seconds): the volume is cleaned up and the source released.
faults "$WORK/drv-full" '{"CreateVolume": {"delay_ms": 6000}}'

pvc src-4 gold
expect "deleted clone: the source becomes Bound" 20 phase_is pvc src-4 Bound
clone c-4 gold 1Gi src-4
expect "deleted clone: the source gets the finalizer" 10 has_fin pvc src-4 "$CLONE_FIN"
C4_PV="pvc-$(uid_of pvc c-4)"
K delete pvc c-4 --wait=false >/dev/null 2>&1
expect "deleted clone: the claim goes once CreateVolume answered" 20 is_gone pvc c-4
expect "deleted clone: no volume is left for it" 20 drv_lacks drv-full "$C4_PV"
expect "deleted clone: the source's finalizer is removed" 10 lacks_fin pvc src-4 "$CLONE_FIN"
faults "$WORK/drv-full" ""

# Another class of the same driver: allowed (upstream since v3.2, #699).
pvc src-2 gold 2Gi
expect "clone: a 2Gi source becomes Bound" 20 phase_is pvc src-2 Bound
SRC2_VOL=$(vol_id drv-full "$(jp pvc src-2 '{.spec.volumeName}')")
clone c-silver silver 3Gi src-2
expect "clone into another class of the same driver becomes Bound" 20 phase_is pvc c-silver Bound
SILVER_PV=$(jp pvc c-silver '{.spec.volumeName}')
check "clone into another class: 3 GiB from the source volume, PV class silver" \
  "[\"3221225472\", {\"id\": \"$SRC2_VOL\", \"type\": \"volume\"}] silver" \
  "$(drv "$WORK/drv-full" "[str(byname.get('$SILVER_PV', {}).get('capacity_bytes')), byname.get('$SILVER_PV', {}).get('source')]") $(jp pv "$SILVER_PV" '{.spec.storageClassName}')"

# Refused clones: upstream's messages, the claim stays Pending and unprovisioned.
clone c-missing gold 1Gi nope
expect "clone of a missing claim: ProvisioningFailed" 20 has_event c-missing \
  $'ProvisioningFailed\t'"$HANDLE_PVC"' nope: error getting PVC nope (namespace "default") from api server: persistentvolumeclaim "nope" not found'
clone c-small gold 1Gi src-2
expect "clone smaller than its source: ProvisioningFailed" 20 has_event c-small \
  $'ProvisioningFailed\t'"$HANDLE_PVC"' src-2: error, new PVC request must be greater than or equal in size to the specified PVC data source, requested 1073741824 but source is 2147483648'
pvc plain-1 plain
expect "a claim of the plain driver becomes Bound" 20 phase_is pvc plain-1 Bound
clone c-foreign gold 1Gi plain-1
expect "clone of another driver's volume: ProvisioningFailed" 20 has_event c-foreign \
  $'ProvisioningFailed\t'"$HANDLE_PVC"' plain-1: claim in dataSource not bound or invalid'
clone c-nocap plain 1Gi plain-1
expect "clone with a driver lacking CLONE_VOLUME: ProvisioningFailed" 20 has_event c-nocap \
  $'ProvisioningFailed\tCSI driver does not support clone operations: controller CLONE_VOLUME capability is not reported'
sleep 1
check "refused clones stay Pending with no volume" \
  "Pending||false Pending||false Pending||false Pending||false" \
  "$(pending_unprovisioned c-missing drv-full) $(pending_unprovisioned c-small drv-full) $(pending_unprovisioned c-foreign drv-full) $(pending_unprovisioned c-nocap drv-plain)"
check "refused clones leave no protection finalizer on their sources" "true true" \
  "$(lacks_fin pvc src-2 "$CLONE_FIN" && echo true || echo false) $(lacks_fin pvc plain-1 "$CLONE_FIN" && echo true || echo false)"

# A source carrying the cloning-protection finalizer from before (upstream
# leaves it on every clone source until the source is deleted): deleting it
# waits for the claims still being cloned from it, then the finalizer goes
# (upstream's cloning-protection controller).
pvc legacy gold 2Gi
expect "legacy source: Bound" 20 phase_is pvc legacy Bound
# added to the claim's finalizers (on the real control plane it has kubernetes.io/pvc-protection)
K patch pvc legacy --type=merge -p "{\"metadata\": {\"finalizers\": $(K get pvc legacy -o json |
  pyj 'o["metadata"].get("finalizers", []) + ["'"$CLONE_FIN"'"]')}}" >/dev/null
clone c-legacy gold 1Gi legacy
expect "legacy source: a clone of it is refused (too small) and stays Pending" 20 has_event c-legacy \
  $'ProvisioningFailed\t'"$HANDLE_PVC"' legacy: error, new PVC request must be greater than or equal in size'
K delete pvc legacy --wait=false >/dev/null 2>&1
sleep 1
check "legacy source: deleted, it is held while a clone of it is Pending" "true true" \
  "$([ -n "$(jp pvc legacy '{.metadata.deletionTimestamp}')" ] && echo true || echo false) $(has_fin pvc legacy "$CLONE_FIN" && echo true || echo false)"
K delete pvc c-legacy --wait=false >/dev/null 2>&1
expect "legacy source: once no clone is Pending the finalizer goes and so does the claim" 20 is_gone pvc legacy

# ---- snapshot restores ------------------------------------------------------------------------

pvc snap-src gold 1Gi
expect "restore: the snapshot's source claim becomes Bound" 20 phase_is pvc snap-src Bound
SNAP_SRC_VOL=$(vol_id drv-full "$(jp pvc snap-src '{.spec.volumeName}')")
if out=$("$CSI_CALL" "unix://$WORK/drv-full/csi.sock" create-snapshot "$SNAP_SRC_VOL" snap-1 2>&1); then
  SNAP1=${out%% *}
  check "csi_call create-snapshot: a snapshot of the volume, 1 GiB" "1073741824 $SNAP_SRC_VOL" \
    "${out##* } $(drv "$WORK/drv-full" "[x['source_volume_id'] for x in s.get('snapshots', []) if x['id'] == '$SNAP1'][0]")"
else
  SNAP1=none
  bad "csi_call create-snapshot" "$out"
fi
if snapshot vs-1 hostpath.csi.example.com "$SNAP1" 1073741824 true 2>"$WORK/snap.err"; then
  ok "a bound, ready VolumeSnapshot and its VolumeSnapshotContent"
else
  bad "VolumeSnapshot vs-1" "$(cat "$WORK/snap.err")"
fi

# CreateVolume answers UNAVAILABLE (outcome unknown: the restore is still in
# flight) until the look below is done: two sweeps (every 1 s) pass while
# the claim is Pending, whatever the machine's load.
faults "$WORK/drv-full" '{"CreateVolume": {"fail": {"count": 100000, "code": "UNAVAILABLE", "message": "busy"}}}'
restore r-1 gold 1Gi vs-1
expect "restore: during provisioning the snapshot carries $SNAP_FIN" 10 has_fin volumesnapshot vs-1 "$SNAP_FIN"
sleep 2.5
check "restore: the sweeper (every 1 s) keeps it while the claim is Pending" "true Pending" \
  "$(has_fin volumesnapshot vs-1 "$SNAP_FIN" && echo true || echo false) $(jp pvc r-1 '{.status.phase}')"
faults "$WORK/drv-full" '{"CreateVolume": {"delay_ms": 2000}}'
expect "restore: the claim becomes Bound" 40 phase_is pvc r-1 Bound
faults "$WORK/drv-full" ""
R1_PV=$(jp pvc r-1 '{.spec.volumeName}')
expect "restore: the snapshot's finalizer is released" 10 lacks_fin volumesnapshot vs-1 "$SNAP_FIN"
check "restore: the driver restored the volume from the snapshot, 1 GiB" \
  "[\"1073741824\", {\"id\": \"$SNAP1\", \"type\": \"snapshot\"}]" \
  "$(drv "$WORK/drv-full" "[str(byname.get('$R1_PV', {}).get('capacity_bytes')), byname.get('$R1_PV', {}).get('source')]")"
check "restore: PV capacity 1Gi, class gold" "1Gi gold" "$(jp pv "$R1_PV" '{.spec.capacity.storage} {.spec.storageClassName}')"

# Refused restores: upstream's messages, the claim stays Pending.
snapshot vs-notready hostpath.csi.example.com "$SNAP1" 1073741824 false
restore r-notready gold 1Gi vs-notready
expect "restore from a snapshot that is not ready: ProvisioningFailed" 20 has_event r-notready \
  $'ProvisioningFailed\t'"$HANDLE_VS"' vs-notready: snapshot vs-notready is not Ready'
snapshot vs-foreign plain.csi.example.com "$SNAP1" 1073741824 true
restore r-foreign gold 1Gi vs-foreign
expect "restore from another driver's snapshot: ProvisioningFailed" 20 has_event r-foreign \
  $'ProvisioningFailed\t'"$HANDLE_VS"' vs-foreign: snapshot vs-foreign not bound'
snapshot vs-big hostpath.csi.example.com "$SNAP1" 2147483648 true
restore r-small gold 1Gi vs-big
expect "restore smaller than the snapshot's restoreSize: ProvisioningFailed" 20 has_event r-small \
  $'ProvisioningFailed\t'"$HANDLE_VS"' vs-big: requested volume size 1073741824 is less than the size 2147483648 for the source snapshot vs-big'
restore r-missing gold 1Gi vs-none
expect "restore from a missing snapshot: ProvisioningFailed" 20 has_event r-missing \
  $'ProvisioningFailed\t'"$HANDLE_VS"' vs-none: error getting snapshot vs-none from api server: volumesnapshots.snapshot.storage.k8s.io "vs-none" not found'
restore r-nocap plain 1Gi vs-1
expect "restore with a driver lacking CREATE_DELETE_SNAPSHOT: ProvisioningFailed" 20 has_event r-nocap \
  $'ProvisioningFailed\tCSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT capability is not reported'
sleep 1
check "refused restores stay Pending with no volume" \
  "Pending||false Pending||false Pending||false Pending||false Pending||false" \
  "$(pending_unprovisioned r-notready drv-full) $(pending_unprovisioned r-foreign drv-full) $(pending_unprovisioned r-small drv-full) $(pending_unprovisioned r-missing drv-full) $(pending_unprovisioned r-nocap drv-plain)"
check "refused restores put no finalizer on their snapshots" "true true true true" \
  "$(for s in vs-notready vs-foreign vs-big vs-1; do lacks_fin volumesnapshot "$s" "$SNAP_FIN" && echo -n "true " || echo -n "false "; done | sed 's/ $//')"

# A snapshot being deleted (held by someone else's finalizer) is no source.
snapshot vs-dying hostpath.csi.example.com "$SNAP1" 1073741824 true
K patch volumesnapshot vs-dying -n "$NS" --type=merge -p '{"metadata": {"finalizers": ["example.com/hold"]}}' >/dev/null
K delete volumesnapshot vs-dying -n "$NS" --wait=false >/dev/null 2>&1
restore r-dying gold 1Gi vs-dying
expect "restore from a snapshot being deleted: ProvisioningFailed" 20 has_event r-dying \
  $'ProvisioningFailed\t'"$HANDLE_VS"' vs-dying: snapshot vs-dying is being deleted'
check "restore from a snapshot being deleted: Pending, no volume, no finalizer added" "Pending||false false" \
  "$(pending_unprovisioned r-dying drv-full) $(has_fin volumesnapshot vs-dying "$SNAP_FIN" && echo true || echo false)"
K patch volumesnapshot vs-dying -n "$NS" --type=json -p '[{"op": "remove", "path": "/metadata/finalizers"}]' >/dev/null
K delete pvc r-dying --wait=false >/dev/null 2>&1

# Volume mode conversion needs the content's permission.
snapshot vs-fs hostpath.csi.example.com "$SNAP1" 1073741824 true Filesystem
restore r-block gold 1Gi vs-fs $'\n  volumeMode: Block'
expect "restore changing the volume mode without permission: ProvisioningFailed" 20 has_event r-block \
  $'ProvisioningFailed\t'"$HANDLE_VS"' vs-fs: requested volume default/r-block modifies the mode of the source volume but does not have permission to do so. snapshot.storage.k8s.io/allow-volume-mode-change annotation is not present on snapshotcontent vs-fs-content'
K annotate volumesnapshotcontent vs-fs-content snapshot.storage.k8s.io/allow-volume-mode-change=true >/dev/null
expect "restore changing the volume mode: Bound once the content allows it" 20 phase_is pvc r-block Bound
check "restore changing the volume mode: a block volume from the snapshot" "[\"block\", {\"id\": \"$SNAP1\", \"type\": \"snapshot\"}]" \
  "$(drv "$WORK/drv-full" "[byname.get('$(jp pvc r-block '{.spec.volumeName}')', {}).get(k) for k in ('access_type', 'source')]")"

# Once the snapshot is ready the waiting claim is restored.
K patch volumesnapshot vs-notready -n "$NS" --subresource=status --type=merge -p '{"status": {"readyToUse": true}}' >/dev/null
expect "restore: the claim waiting for a not-ready snapshot becomes Bound once it is ready" 20 phase_is pvc r-notready Bound
check "restore: and its volume comes from the snapshot" "{\"id\": \"$SNAP1\", \"type\": \"snapshot\"}" \
  "$(drv "$WORK/drv-full" "byname.get('$(jp pvc r-notready '{.spec.volumeName}')', {}).get('source')")"

# A restore deleted while CreateVolume keeps failing: the claim goes at once,
# but its intent entry keeps the snapshot protected until the driver answers
# and the repeated volume is deleted.
faults "$WORK/drv-full" '{"CreateVolume": {"fail": {"count": 1000, "code": "UNAVAILABLE", "message": "backend down"}}}'
restore r-gone gold 1Gi vs-notready
GONE_PV="pvc-$(uid_of pvc r-gone)"
expect "restore, CreateVolume failing: ProvisioningFailed" 20 has_event r-gone $'ProvisioningFailed\trpc error: code = Unavailable desc = backend down'
check "restore, CreateVolume failing: the snapshot is protected" true \
  "$(has_fin volumesnapshot vs-notready "$SNAP_FIN" && echo true || echo false)"
K delete pvc r-gone --wait=false >/dev/null 2>&1
sleep 1.5
check "restore deleted while CreateVolume fails: claim gone, snapshot still protected (sweeper included)" "true true" \
  "$(is_gone pvc r-gone && echo true || echo false) $(has_fin volumesnapshot vs-notready "$SNAP_FIN" && echo true || echo false)"
faults "$WORK/drv-full" ""
expect "restore deleted: no volume is left for it" 10 drv_lacks drv-full "$GONE_PV"
expect "restore deleted: the snapshot's finalizer is released" 10 lacks_fin volumesnapshot vs-notready "$SNAP_FIN"

# ---- the orphan sweeper -------------------------------------------------------------------------

# A finalizer left behind (a crash between CreateVolume and its release) on a
# snapshot no pending claim uses is removed; one a pending claim uses stays
# until that claim is gone. (vs-1 is still named by the Pending r-nocap.)
snapshot vs-orphan hostpath.csi.example.com "$SNAP1" 1073741824 true
add_snap_fin() { K patch volumesnapshot "$1" -n "$NS" --type=merge -p "{\"metadata\": {\"finalizers\": [\"$SNAP_FIN\"]}}" >/dev/null; }
add_snap_fin vs-orphan
add_snap_fin vs-big
add_snap_fin vs-1
expect "sweeper: removes the leftover finalizer of a snapshot no claim uses" 10 \
  lacks_fin volumesnapshot vs-orphan "$SNAP_FIN"
check "sweeper: keeps the finalizers of snapshots Pending claims (r-small, r-nocap) use" "true true" \
  "$(has_fin volumesnapshot vs-big "$SNAP_FIN" && echo true || echo false) $(has_fin volumesnapshot vs-1 "$SNAP_FIN" && echo true || echo false)"
K delete pvc r-small --wait=false >/dev/null 2>&1
expect "sweeper: removes one once its claim is gone" 10 lacks_fin volumesnapshot vs-big "$SNAP_FIN"
K delete volumesnapshot vs-big -n "$NS" --wait=false >/dev/null 2>&1
expect "sweeper: the snapshot can then be deleted" 10 is_gone volumesnapshot vs-big

# ---- clean up through the provisioners -------------------------------------------------------

K delete pvc --all -n "$NS" --wait=false >/dev/null 2>&1
no_volumes() { [ "$(drv "$WORK/drv-full" 'len(vols)')/$(drv "$WORK/drv-plain" 'len(vols)')" = 0/0 ]; }
if wait_for 30 no_volumes; then
  ok "every claim deleted: the drivers hold no volume"
else
  bad "every claim deleted: the drivers hold no volume" \
    "$(drv "$WORK/drv-full" '[v["name"] for v in vols]') $(drv "$WORK/drv-plain" '[v["name"] for v in vols]')"
fi
no_claims() { [ -z "$(K get pvc -n "$NS" -o name 2>&1)" ]; }
if wait_for 20 no_claims; then
  ok "and no claim is left (no finalizer holds one)"
else
  bad "and no claim is left (no finalizer holds one)" \
    "$(K get pvc -n "$NS" -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.finalizers} {.spec.volumeName}{"\n"}{end}' 2>&1)"
fi
if out=$("$CSI_CALL" "unix://$WORK/drv-full/csi.sock" delete-snapshot "$SNAP1" 2>&1); then
  check "csi_call delete-snapshot removes the driver's snapshot" 0 "$(drv "$WORK/drv-full" "len(s.get('snapshots', []))")"
else
  bad "csi_call delete-snapshot" "$out"
fi

# ---- the end: every process stops cleanly -------------------------------------------------------

check "no request of a provisioner was refused (401/403)" "$REFUSED0" "$(refused)"
stop_all
for n in "${NAMES[@]}"; do check "$n exits 0 on SIGTERM" 0 "${RC[$n]:-none}"; done
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
