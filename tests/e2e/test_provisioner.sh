#!/usr/bin/env bash
# worlds: kube-lite kubernetes
# csi-provisioner end to end: kube-lite (HTTPS, bearer tokens, RBAC) or, with
# WORLD=kubernetes, the real control plane 1.20 (its PV binder and protection
# controllers), the example CSI driver and the provisioner running with the
# service-account token that manifests/provisioner/rbac.yaml grants, checked
# with kubectl and the driver's status.json.
#
#   [WORLD=kubernetes] tests/e2e/test_provisioner.sh <build-dir>
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed"; exits
# non-zero when a check failed. Every process started here is stopped with
# SIGTERM and must exit 0 (the leader killed on purpose excepted); their
# logs are copied to the output when they hold a sanitizer report.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
DRV="$B/bin/example-csi-driver"
PROV="$B/bin/csi-provisioner"
WORK=$(mktemp -d)
NS=default
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

# ---- kubectl and JSON -------------------------------------------------------------------

# drv DIR EXPR: EXPR over the driver in DIR (lib.sh's drv_eval)
drv() { drv_eval "$1" "$2"; }
events() {
  K get events -n "${2:-$NS}" --field-selector "involvedObject.name=$1" \
    -o jsonpath='{range .items[*]}{.reason}{"\t"}{.message}{"\n"}{end}' 2>/dev/null
}
uid_of() { jp pvc "$1" '{.metadata.uid}'; }
# pvc_has_fin CLAIM FINALIZER
pvc_has_fin() {
  local f
  f=$(jp pvc "$1" '{.metadata.finalizers}')
  [[ "$f" == *"\"$2\""* ]]
}
no_pvc_fin() { ! pvc_has_fin "$1" "$2"; }
# The claim uids the intent record (a Lease) of driver A holds.
INTENT_LEASE=hostpath-csi-example-com-provisioner-intents
INTENT_ANN=external-provisioner.volume.kubernetes.io/intents
intent_uids() {
  K get lease "$INTENT_LEASE" -n "$NS" -o json 2>/dev/null |
    pyj '" ".join(sorted(e["claim"]["metadata"]["uid"] for e in json.loads(o["metadata"]["annotations"]["'"$INTENT_ANN"'"])["entries"]))'
}
intent_has() { [[ " $(intent_uids) " == *" $1 "* ]]; }
intent_lacks() { local u; u=$(intent_uids); [[ "$u" != "<"* ]] && [[ " $u " != *" $1 "* ]]; }
intent_empty() { [ -z "$(intent_uids)" ]; }
# api_writes VERB RESOURCE: requests of that verb on that resource the API answered so far
# (the provisioners' own on the real control plane, whose controllers write claims and PVs too)
api_writes() { requests "$1" "$2" '.*' "$SA_USER"; }
# record_writes: successful writes of driver A's intent record (provisioner metric)
record_writes() {
  curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk 'index($0, "csi_provisioner_intent_record_writes_total{result=\"ok\"}") == 1 {s += $NF} END {print s + 0}'
}
# wq_adds QUEUE: keys added to driver A's work queue so far (each one sync)
wq_adds() {
  curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk -v p="workqueue_adds_total{name=\"$1\"}" 'index($0, p) == 1 {s += $NF} END {print s + 0}'
}
drv_lacks() { [ "$(drv "$1" "'$2' in byname")" = false ]; }

# pvc NAME CLASS [SIZE] [VOLUME-MODE]: creates a claim (RWO)
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
  volumeMode: ${4:-Filesystem}
  resources:
    requests:
      storage: ${3:-1Gi}
EOF
}

# ---- start: kube-lite or the real control plane, with TLS, tokens and RBAC --------------

for tool in kubectl python3 openssl curl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; echo "$passed passed, $failed failed"; exit 1; }
done
"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
SA_USER="system:serviceaccount:$NS:csi-provisioner"
cat >"$WORK/tokens.csv" <<EOF
admin-token,admin,1,"system:masters"
provisioner-token,$SA_USER,2
EOF
if ! world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --authorization-mode RBAC --kubeconfig-token admin-token; then
  echo "$passed passed, $failed failed"
  exit 1
fi
sed 's/token: admin-token/token: provisioner-token/' "$WORK/admin.kubeconfig" >"$WORK/provisioner.kubeconfig"

contains "without rbac.yaml the service account may not watch claims" "Forbidden" "$(KP get pvc -A 2>&1)"
out=$(K apply -f "$ROOT/manifests/provisioner/rbac.yaml" 2>&1)
check "rbac.yaml applies" "serviceaccount/csi-provisioner created
clusterrole.rbac.authorization.k8s.io/external-provisioner-runner created
clusterrolebinding.rbac.authorization.k8s.io/csi-provisioner-role created
role.rbac.authorization.k8s.io/external-provisioner-cfg created
rolebinding.rbac.authorization.k8s.io/csi-provisioner-role-cfg created" "$out"
check "with rbac.yaml the service account may list claims in every namespace" "" "$(KP get pvc -A -o name 2>&1)"
contains "but may not list secrets" "Forbidden" "$(KP get secrets 2>&1)"
contains "nor touch leases outside its namespace" "Forbidden" "$(KP get leases -n kube-system 2>&1)"

# Cluster objects: a node in zone z1 with a CSINode for the topology driver,
# and the storage classes of every check below.
cat >"$WORK/cluster.yaml" <<'EOF'
apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels:
    topology.example.com/zone: z1
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: node-1
spec:
  drivers:
  - name: topo.csi.example.com
    nodeID: node-1
    topologyKeys: [topology.example.com/zone]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: imm
provisioner: hostpath.csi.example.com
reclaimPolicy: Delete
volumeBindingMode: Immediate
parameters:
  csi.storage.k8s.io/fstype: ext4
  color: blue
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: wffc
provisioner: hostpath.csi.example.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: opts
provisioner: hostpath.csi.example.com
mountOptions: [noatime, nfsvers=4.1]
parameters:
  csi.storage.k8s.io/fstype: xfs
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: sec
provisioner: hostpath.csi.example.com
parameters:
  csi.storage.k8s.io/provisioner-secret-name: ${pvc.name}-secret
  csi.storage.k8s.io/provisioner-secret-namespace: ${pvc.namespace}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: retain
provisioner: hostpath.csi.example.com
reclaimPolicy: Retain
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: topo
provisioner: topo.csi.example.com
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: topo-wffc
provisioner: topo.csi.example.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: le
provisioner: le.csi.example.com
EOF
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then
  ok "node, CSINode and storage classes created with kubectl"
else
  bad "cluster objects" "$(cat "$WORK/cluster.out")"
fi

# Requests the API refused so far (the checks above): any refused later is
# one of the provisioners lacking a permission.
refused() { requests '.*' '.*' '40[13]' "$SA_USER"; }
REFUSED0=$(refused)
if [ "$REFUSED0" -gt 0 ]; then ok "the API counts the refused requests of the service account"; else
  bad "the API counts the refused requests of the service account" "[$REFUSED0]"; fi

# ---- drivers and provisioners -------------------------------------------------------------

# driver NAME DRIVER-NAME ARGS...: one example driver, socket and state in $WORK/NAME
driver() {
  local name=$1 dname=$2
  shift 2
  mkdir -p "$WORK/$name/state"
  start "$name" "$DRV" --endpoint "unix://$WORK/$name/csi.sock" --state-dir "$WORK/$name/state" \
    --drivername "$dname" --nodeid node-1 "$@"
}
PROV_ARGS=(--kubeconfig "$WORK/provisioner.kubeconfig" --worker-threads=4 --retry-interval-start=100ms
  --retry-interval-max=2s --kube-api-qps=100 --kube-api-burst=200)
# provisioner NAME DRIVER-DIR ARGS...
provisioner() {
  local name=$1 dir=$2
  shift 2
  start "$name" "$PROV" --csi-address "$WORK/$dir/csi.sock" "${PROV_ARGS[@]}" "$@"
}
started() { grep -q 'provisioner started' "$WORK/$1.log" || ! alive "$1"; }
HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# A: the main pair; no topology, attach required (PUBLISH_UNPUBLISH_VOLUME).
driver drv-a hostpath.csi.example.com --plugin-caps CONTROLLER_SERVICE
# B: topology in zone z1, every CSI call limited to 1 s.
driver drv-b topo.csi.example.com --plugin-caps CONTROLLER_SERVICE,VOLUME_ACCESSIBILITY_CONSTRAINTS \
  --controller-caps CREATE_DELETE_VOLUME --topology topology.example.com/zone=z1
# LE: one driver, two provisioner replicas with leader election.
driver drv-le le.csi.example.com --plugin-caps CONTROLLER_SERVICE --controller-caps CREATE_DELETE_VOLUME
provisioner prov-a drv-a --http-endpoint="127.0.0.1:$HTTP_PORT"
provisioner prov-b drv-b --timeout=1s
LE_ARGS=(--leader-election "--leader-election-namespace=$NS" --leader-election-lease-duration=3s
  --leader-election-renew-deadline=2s --leader-election-retry-period=500ms)
# Each replica gets its own host name (the lease holder identity), as pods do.
HAVE_UTS=0
if unshare -u -- true 2>/dev/null; then HAVE_UTS=1; fi
replica() {
  local name=$1
  if [ "$HAVE_UTS" = 1 ]; then
    start "$name" unshare -u -- sh -c 'hostname "$0" && exec "$@"' "$name" \
      "$PROV" --csi-address "$WORK/drv-le/csi.sock" "${PROV_ARGS[@]}" "${LE_ARGS[@]}"
  else
    start "$name" "$PROV" --csi-address "$WORK/drv-le/csi.sock" "${PROV_ARGS[@]}" "${LE_ARGS[@]}"
  fi
}
replica le-one
replica le-two
ready prov-a
ready prov-b

# ---- Immediate binding: the PV, field by field ---------------------------------------------

expect "the provisioner creates its intent record (a Lease), empty" 20 intent_empty
pvc_w0=$(( $(api_writes patch persistentvolumeclaims) + $(api_writes update persistentvolumeclaims) ))
pv_w0=$(api_writes create persistentvolumes)
rec_w0=$(record_writes)
claim_syncs0=$(wq_adds claims)
volume_syncs0=$(wq_adds volumes)
pvc p-imm imm
expect "an Immediate claim becomes Bound" 20 phase_is pvc p-imm Bound
uid=$(uid_of p-imm)
IMM_PV="pvc-$uid"
check "the claim is bound to pvc-<uid>" "$IMM_PV" "$(jp pvc p-imm '{.spec.volumeName}')"
pvjson=$(K get pv "$IMM_PV" -o json 2>&1)
handle=$(drv "$WORK/drv-a" "byname.get('$IMM_PV', {}).get('id', '')")
vpath=$(drv "$WORK/drv-a" "byname.get('$IMM_PV', {}).get('path', '')")
check "PV claimRef names the claim and its uid" "{\"name\": \"p-imm\", \"namespace\": \"$NS\", \"uid\": \"$uid\"}" \
  "$(pyj '{k: o["spec"]["claimRef"].get(k) for k in ("name", "namespace", "uid")}' <<<"$pvjson")"
# kube-apiserver's StorageObjectInUseProtection admission adds kubernetes.io/pv-protection to
# every PV it creates (kube-controller-manager's pv-protection controller removes it once the
# PV is deleted and unused); kube-lite has no such plugin.
PV_PROT=""
on_real && PV_PROT=', "kubernetes.io/pv-protection"'
check "PV finalizer" '["external-provisioner.volume.kubernetes.io/finalizer"'"$PV_PROT"']' \
  "$(pyj 'o["metadata"].get("finalizers")' <<<"$pvjson")"
check "PV annotations: provisioned-by and empty deletion-secret references" \
  '{"pv.kubernetes.io/provisioned-by": "hostpath.csi.example.com", "volume.kubernetes.io/provisioner-deletion-secret-name": "", "volume.kubernetes.io/provisioner-deletion-secret-namespace": ""}' \
  "$(pyj 'o["metadata"].get("annotations")' <<<"$pvjson")"
check "PV capacity, class, reclaim policy, volume mode, access modes" \
  '["1Gi", "imm", "Delete", "Filesystem", ["ReadWriteOnce"]]' \
  "$(pyj '[o["spec"]["capacity"]["storage"], o["spec"]["storageClassName"], o["spec"]["persistentVolumeReclaimPolicy"], o["spec"]["volumeMode"], o["spec"]["accessModes"]]' <<<"$pvjson")"
check "PV csi: driver, the driver's volume id, fsType" "[\"hostpath.csi.example.com\", \"$handle\", \"ext4\"]" \
  "$(pyj '[o["spec"]["csi"].get(k) for k in ("driver", "volumeHandle", "fsType")]' <<<"$pvjson")"
check "PV volumeAttributes: the volume context plus the provisioner identity" "path=$vpath identity-ok" \
  "$(pyj '"path=%s %s" % (o["spec"]["csi"]["volumeAttributes"].get("path"), "identity-ok" if __import__("re").fullmatch(r"[0-9]{13}-[0-9]{1,4}-hostpath\.csi\.example\.com", o["spec"]["csi"]["volumeAttributes"].get("storage.kubernetes.io/csiProvisionerIdentity", "")) and len(o["spec"]["csi"]["volumeAttributes"]) == 2 else o["spec"]["csi"]["volumeAttributes"])' <<<"$pvjson")"
expect "event Provisioning" 10 has_event p-imm $'Provisioning\tExternal provisioner is provisioning volume for claim "default/p-imm"'
expect "event ProvisioningSucceeded" 10 has_event p-imm $'ProvisioningSucceeded\tSuccessfully provisioned volume '"$IMM_PV"
check "the claim never gets the provisioning-in-progress finalizer" "" \
  "$(jp pvc p-imm '{.metadata.finalizers}' | grep -o provisioning-in-progress)"
expect "its intent leaves the record with an idle write once the PV exists" 20 intent_empty
# The writes just seen in the API are counted a moment later: by the API (kube-lite after its
# store, kube-apiserver at the response's end in its audit log) and by the provisioner's own
# metric (once the answer is back). The counts are polled for; one too many still fails.
object_writes_are() {
  local pvc_w pv_w
  pvc_w=$(( $(api_writes patch persistentvolumeclaims) + $(api_writes update persistentvolumeclaims) - pvc_w0 ))
  pv_w=$(( $(api_writes create persistentvolumes) - pv_w0 ))
  echo "PV $pv_w PVC $pvc_w" >"$WORK/last"
  [ "$(cat "$WORK/last")" = "$1" ]
}
record_writes_are() { echo "$(( $(record_writes) - rec_w0 ))" >"$WORK/last"; [ "$(cat "$WORK/last")" = "$1" ]; }
EXPECT_LAST="$WORK/last" expect "one claim provisioned: 1 object write (the PV create), no PVC write" 10 \
  object_writes_are "PV 1 PVC 0"
EXPECT_LAST="$WORK/last" expect "plus 2 writes of the intent record (amortised over concurrent claims)" 10 \
  record_writes_are 2
# The claim's own events (added, annotated, bound) and its PV's (created,
# bound) wake a worker only when a sync has something to do: one claim sync
# provisions; at most one more may follow a claim update that raced with it
# or a retried step; no PV event wakes anything. Before, the PV's creation
# queued the claim too: three claim syncs at least.
claim_syncs=$(( $(wq_adds claims) - claim_syncs0 ))
volume_syncs=$(( $(wq_adds volumes) - volume_syncs0 ))
if [ "$claim_syncs" -ge 1 ] && [ "$claim_syncs" -le 2 ] && [ "$volume_syncs" = 0 ]; then
  ok "one claim provisioned: 1-2 claim syncs, no volume sync (claims $claim_syncs)"
else
  bad "one claim provisioned: 1-2 claim syncs, no volume sync" "claims $claim_syncs volumes $volume_syncs"
fi
check "the driver holds exactly one volume: the PV's name, 1 GiB, reserved parameters stripped" \
  "[[\"$IMM_PV\", 1073741824, \"mount\", {\"color\": \"blue\"}]]" \
  "$(drv "$WORK/drv-a" '[[v["name"], v["capacity_bytes"], v["access_type"], v["parameters"]] for v in vols]')"

# ---- WaitForFirstConsumer ------------------------------------------------------------------

pvc p-wffc wffc
sleep 1
check "a WaitForFirstConsumer claim without a node stays Pending, unprovisioned" "Pending|||1" \
  "$(jp pvc p-wffc '{.status.phase}|{.spec.volumeName}|{.metadata.annotations.volume\.kubernetes\.io/selected-node}')|$(drv "$WORK/drv-a" 'len(vols)')"
cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: Pod
metadata:
  name: pod-wffc
  namespace: $NS
spec:
  nodeName: node-1
  containers:
  - name: app
    image: busybox
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: p-wffc
EOF
# kube-lite's binder selects the node of a pod that uses the claim; in 1.20 kube-scheduler's
# volume binder does, while it schedules the pod, and a pod created with spec.nodeName (no
# kubelet or scheduler here) never passes through it: the test writes what it would write.
on_real && K annotate pvc p-wffc volume.kubernetes.io/selected-node=node-1 >/dev/null
expect "a pod on node-1 selects the node and the claim becomes Bound" 20 phase_is pvc p-wffc Bound
check "the selected node is node-1" "node-1" "$(jp pvc p-wffc '{.metadata.annotations.volume\.kubernetes\.io/selected-node}')"
# At once: no kubelet finishes a graceful deletion, and on the real control plane the
# pvc-protection controller keeps the claim while a pod that uses it exists.
K delete pod pod-wffc --grace-period=0 --force --wait=false >/dev/null 2>&1

# ---- volume mode, fsType, mount options ------------------------------------------------------

pvc p-block imm 2Gi Block
pvc p-opts opts
expect "a Block claim becomes Bound" 20 phase_is pvc p-block Bound
BLOCK_PV=$(jp pvc p-block '{.spec.volumeName}')
check "Block: PV volumeMode Block, no fsType, 2Gi" '["Block", false, "2Gi"]' \
  "$(K get pv "$BLOCK_PV" -o json | pyj '[o["spec"]["volumeMode"], "fsType" in o["spec"]["csi"], o["spec"]["capacity"]["storage"]]')"
check "Block: the driver made a block volume" "block" "$(drv "$WORK/drv-a" "byname.get('$BLOCK_PV', {}).get('access_type')")"
expect "a claim of a class with fstype and mountOptions becomes Bound" 20 phase_is pvc p-opts Bound
OPTS_PV=$(jp pvc p-opts '{.spec.volumeName}')
check "csi.storage.k8s.io/fstype -> csi.fsType; mountOptions copied; nothing reserved reaches the driver" \
  '["xfs", ["noatime", "nfsvers=4.1"], {}]' \
  "$(K get pv "$OPTS_PV" -o json | pyj '[o["spec"]["csi"].get("fsType"), o["spec"].get("mountOptions")]' | sed 's/]$//'), $(drv "$WORK/drv-a" "byname.get('$OPTS_PV', {}).get('parameters')")]"

# ---- secrets with templates ------------------------------------------------------------------

pvc p-sec sec
expect "a missing provisioner secret gives ProvisioningFailed naming it" 20 has_event p-sec \
  $'ProvisioningFailed\terror getting secret p-sec-secret in namespace default: secrets "p-sec-secret" not found'
check "and nothing is provisioned" "Pending|" "$(jp pvc p-sec '{.status.phase}|{.spec.volumeName}')"
cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: Secret
metadata:
  name: p-sec-secret
  namespace: $NS
data:
  password: c2VjcmV0
EOF
expect "once the secret exists the claim becomes Bound" 20 phase_is pvc p-sec Bound
SEC_PV=$(jp pvc p-sec '{.spec.volumeName}')
check "PV deletion-secret annotations hold the expanded templates" "p-sec-secret/$NS" \
  "$(jp pv "$SEC_PV" '{.metadata.annotations.volume\.kubernetes\.io/provisioner-deletion-secret-name}/{.metadata.annotations.volume\.kubernetes\.io/provisioner-deletion-secret-namespace}')"

# ---- reclaim policies ----------------------------------------------------------------------

claim_syncs0=$(wq_adds claims)
volume_syncs0=$(wq_adds volumes)
K delete pvc p-imm --wait=false >/dev/null 2>&1
expect "reclaim Delete: deleting the claim removes the PV" 20 is_gone pv "$IMM_PV"
expect "reclaim Delete: and the driver's volume" 10 drv_lacks "$WORK/drv-a" "$IMM_PV"
# Released wakes the one sync (DeleteVolume, delete, finalizer); the
# deletion's own event and the claim's going wake nothing.
check "one volume deleted: one volume sync, no claim sync" "claims 0 volumes 1" \
  "claims $(( $(wq_adds claims) - claim_syncs0 )) volumes $(( $(wq_adds volumes) - volume_syncs0 ))"
K delete pvc p-sec --wait=false >/dev/null 2>&1
expect "reclaim Delete with a deletion secret: the PV goes" 20 is_gone pv "$SEC_PV"
expect "reclaim Delete with a deletion secret: and its volume" 10 drv_lacks "$WORK/drv-a" "$SEC_PV"

pvc p-ret retain
expect "a Retain claim becomes Bound" 20 phase_is pvc p-ret Bound
RET_PV=$(jp pvc p-ret '{.spec.volumeName}')
# (kube-lite keeps an emptied list as [] where kube-apiserver omits it; on the real control
# plane the admission's kubernetes.io/pv-protection stays while the PV exists)
pv_no_fins() { local f; f=$(jp pv "$1" '{.metadata.finalizers}'); [ "$f" = "[${PV_PROT#, }]" ] || { ! on_real && [ -z "$f" ]; }; }
expect "reclaim Retain: the PV finalizer is removed" 10 pv_no_fins "$RET_PV"
K delete pvc p-ret --wait=false >/dev/null 2>&1
expect "reclaim Retain: the PV is Released when its claim goes" 20 phase_is pv "$RET_PV" Released
sleep 0.5
check "reclaim Retain: the PV and the driver's volume stay" "Released true" \
  "$(jp pv "$RET_PV" '{.status.phase}') $(drv "$WORK/drv-a" "'$RET_PV' in byname")"

# A PV being deleted without our finalizer had its volume deleted already (the finalizer goes
# last): upstream's shouldDelete leaves it alone, and so must a provisioner that did not see the
# deletion (a successor). On a real cluster kubernetes.io/pv-protection keeps every deleted PV a
# while after the provisioner removed its finalizer; example.com/hold plays it in both worlds.
PV_FIN=external-provisioner.volume.kubernetes.io/finalizer
# drop_pv_fin PV FINALIZER: removes one finalizer with a guarded JSON patch, again if a
# controller changed the list meanwhile (kube-controller-manager's pv-protection)
drop_pv_fin() {
  local i idx
  for i in 1 2 3 4 5; do
    idx=$(K get pv "$1" -o json | pyj 'o["metadata"]["finalizers"].index("'"$2"'")')
    [[ "$idx" =~ ^[0-9]+$ ]] || return 1
    K patch pv "$1" --type=json -p '[{"op": "test", "path": "/metadata/finalizers/'"$idx"'", "value": "'"$2"'"},
      {"op": "remove", "path": "/metadata/finalizers/'"$idx"'"}]' >/dev/null 2>&1 && return 0
  done
  return 1
}
pvc p-held imm
expect "a claim for the removed-finalizer check becomes Bound" 20 phase_is pvc p-held Bound
HELD_PV=$(jp pvc p-held '{.spec.volumeName}')
K patch pv "$HELD_PV" --type=json -p '[{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/hold"}]' >/dev/null
K delete pv "$HELD_PV" --wait=false >/dev/null 2>&1
drop_pv_fin "$HELD_PV" "$PV_FIN" || bad "removed finalizer: our finalizer removed by hand" "$(K get pv "$HELD_PV" -o yaml 2>&1)"
held_del0=$(drv_calls "$WORK/drv-a" DeleteVolume)
volume_syncs0=$(wq_adds volumes)
K delete pvc p-held --wait=false >/dev/null 2>&1
expect "removed finalizer: the deleted PV is Released once its claim goes" 20 phase_is pv "$HELD_PV" Released
sleep 1
check "removed finalizer: no sync, no DeleteVolume, the driver keeps the volume" "0 0 true" \
  "$(( $(wq_adds volumes) - volume_syncs0 )) $(( $(drv_calls "$WORK/drv-a" DeleteVolume) - held_del0 )) $(drv "$WORK/drv-a" "'$HELD_PV' in byname")"
drop_pv_fin "$HELD_PV" example.com/hold || bad "removed finalizer: example.com/hold removed" "$(K get pv "$HELD_PV" -o yaml 2>&1)"
expect "removed finalizer: the PV goes once the other finalizers do" 20 is_gone pv "$HELD_PV"

# ---- driver errors ----------------------------------------------------------------------------

faults "$WORK/drv-a" '{"CreateVolume": {"fail": {"count": 2, "code": "INVALID_ARGUMENT", "message": "bad parameter"}}}'
pvc p-inval imm
expect "INVALID_ARGUMENT: ProvisioningFailed with the infeasible prefix" 20 has_event p-inval \
  $'ProvisioningFailed\tVolume provisioning failed with infeasible error. Retries will be delayed. rpc error: code = InvalidArgument desc = bad parameter'
expect "INVALID_ARGUMENT: retried (slowly) until Bound" 30 phase_is pvc p-inval Bound
faults "$WORK/drv-a" ""

calls0=$(drv_calls "$WORK/drv-a" CreateVolume)
faults "$WORK/drv-a" '{"CreateVolume": {"fail": {"count": 3, "code": "UNAVAILABLE", "message": "backend busy"}}}'
pvc p-unavail imm
expect "UNAVAILABLE: ProvisioningFailed" 20 has_event p-unavail \
  $'ProvisioningFailed\trpc error: code = Unavailable desc = backend busy'
expect "UNAVAILABLE: retried until Bound" 30 phase_is pvc p-unavail Bound
check "UNAVAILABLE: three failed calls, then one that worked" 4 "$(( $(drv_calls "$WORK/drv-a" CreateVolume) - calls0 ))"
faults "$WORK/drv-a" ""

# ---- deletion blocked by a VolumeAttachment ---------------------------------------------------

pvc p-va imm
expect "a claim for the attachment check becomes Bound" 20 phase_is pvc p-va Bound
VA_PV=$(jp pvc p-va '{.spec.volumeName}')
cat <<EOF | K create -f - >/dev/null
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata:
  name: va-test
spec:
  attacher: hostpath.csi.example.com
  nodeName: node-1
  source:
    persistentVolumeName: $VA_PV
EOF
K delete pvc p-va --wait=false >/dev/null 2>&1
expect "an attached PV is not deleted: VolumeFailedDelete" 20 has_event "$VA_PV" \
  $'VolumeFailedDelete\tpersistentvolume '"$VA_PV"' is still attached to node node-1'
check "the attached PV and its volume stay" "Released true" \
  "$(jp pv "$VA_PV" '{.status.phase}') $(drv "$WORK/drv-a" "'$VA_PV' in byname")"
K delete volumeattachment va-test --wait=false >/dev/null 2>&1
expect "once the VolumeAttachment is gone the PV goes" 20 is_gone pv "$VA_PV"
expect "and so does its volume" 10 drv_lacks "$WORK/drv-a" "$VA_PV"

# ---- claims deleted during provisioning --------------------------------------------------------

# 7 s (under the default 10 s --timeout): the look below must fall inside
# the call even on a loaded machine (suites run side by side on 2 cores).
faults "$WORK/drv-a" '{"CreateVolume": {"delay_ms": 7000}}'
pvc p-slow imm
SLOW_UID=$(uid_of p-slow)
expect "a slow CreateVolume: the intent record holds the claim first" 10 intent_has "$SLOW_UID"
SLOW_PV="pvc-$SLOW_UID"
K delete pvc p-slow --wait=false >/dev/null 2>&1
expect "deleted during CreateVolume, the claim goes at once (no finalizer holds it)" 10 is_gone pvc p-slow
# Its PV (made once the call returns) is released and deleted, or the
# volume undone from the entry; either way nothing is left.
slow_done() { intent_lacks "$SLOW_UID" && is_gone pv "$SLOW_PV" && drv_lacks "$WORK/drv-a" "$SLOW_PV"; }
expect "the delayed CreateVolume's volume is deleted, and the intent leaves the record" 40 slow_done
faults "$WORK/drv-a" ""

# The driver keeps failing while the claim is deleted: the intent record
# keeps the claim's entry until CreateVolume answers and DeleteVolume ran.
faults "$WORK/drv-a" '{"CreateVolume": {"fail": {"count": 1000, "code": "UNAVAILABLE", "message": "backend down"}}}'
pvc p-gone imm
GONE_UID=$(uid_of p-gone)
GONE_PV="pvc-$GONE_UID"
expect "CreateVolume failing: ProvisioningFailed" 20 has_event p-gone $'ProvisioningFailed\trpc error: code = Unavailable desc = backend down'
K delete pvc p-gone --wait=false >/dev/null 2>&1
expect "deleted while CreateVolume fails, the claim goes at once" 10 is_gone pvc p-gone
sleep 1
if intent_has "$GONE_UID"; then ok "while the outcome is unknown, the intent record keeps the claim's entry"; else
  bad "while the outcome is unknown, the intent record keeps the claim's entry" "record: $(intent_uids)"; fi
del0=$(drv_calls "$WORK/drv-a" DeleteVolume)
faults "$WORK/drv-a" ""
gone_done() { intent_lacks "$GONE_UID" && [ "$(( $(drv_calls "$WORK/drv-a" DeleteVolume) - del0 ))" -ge 1 ]; }
expect "once the driver answers, the entry is cleaned up and leaves the record" 30 gone_done
check "the volume made by the repeated CreateVolume was deleted" "false 1" \
  "$(drv "$WORK/drv-a" "'$GONE_PV' in byname") $(( $(drv_calls "$WORK/drv-a" DeleteVolume) - del0 ))"

# ---- claims an older version left with the in-progress finalizer --------------------------

IN_PROGRESS_FIN=external-provisioner.volume.kubernetes.io/provisioning-in-progress
# old_pvc NAME: a claim as an older version left it, carrying the in-progress finalizer
old_pvc() {
  cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: $1
  namespace: $NS
  finalizers: [$IN_PROGRESS_FIN]
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: imm
  resources:
    requests:
      storage: 1Gi
EOF
}
old_pvc p-old
expect "upgrade: a claim left with the in-progress finalizer is provisioned" 20 phase_is pvc p-old Bound
expect "upgrade: ... and the finalizer is released" 10 no_pvc_fin p-old "$IN_PROGRESS_FIN"
faults "$WORK/drv-a" '{"CreateVolume": {"fail": {"count": 1000, "code": "UNAVAILABLE", "message": "backend down"}}}'
old_pvc p-old-gone
OLD_GONE_PV="pvc-$(uid_of p-old-gone)"
expect "upgrade: CreateVolume failing for a claim left with the finalizer" 20 has_event p-old-gone \
  $'ProvisioningFailed\trpc error: code = Unavailable desc = backend down'
K delete pvc p-old-gone --wait=false >/dev/null 2>&1
sleep 1
check "upgrade: deleted, it is held by the old finalizer while the outcome is unknown" "true" \
  "$(K get pvc p-old-gone -o json 2>&1 | pyj '"deletionTimestamp" in o["metadata"]' | tr A-Z a-z)"
faults "$WORK/drv-a" ""
expect "upgrade: once the driver answers, the volume is undone and the claim released" 20 is_gone pvc p-old-gone
expect "upgrade: and the driver holds no volume for it" 10 drv_lacks "$WORK/drv-a" "$OLD_GONE_PV"
K delete pvc p-old --wait=false >/dev/null 2>&1

# ---- topology -----------------------------------------------------------------------------

ZONE_AFFINITY='{"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.example.com/zone", "operator": "In", "values": ["z1"]}]}]}}'
pvc p-topo topo
expect "topology: an Immediate claim becomes Bound" 20 phase_is pvc p-topo Bound
TOPO_PV=$(jp pvc p-topo '{.spec.volumeName}')
check "topology: PV nodeAffinity topology.example.com/zone In [z1]" "$ZONE_AFFINITY" \
  "$(K get pv "$TOPO_PV" -o json | pyj 'o["spec"].get("nodeAffinity")')"
check "topology: the driver placed the volume in z1" '{"topology.example.com/zone": "z1"}' \
  "$(drv "$WORK/drv-b" "byname.get('$TOPO_PV', {}).get('topology')")"

# B runs with --timeout=1s: a CreateVolume slower than that is retried.
faults "$WORK/drv-b" '{"CreateVolume": {"delay_ms": 1500}}'
pvc p-timeout topo
expect "timeout: ProvisioningFailed with DeadlineExceeded" 20 has_event p-timeout \
  $'ProvisioningFailed\trpc error: code = DeadlineExceeded desc = '
check "timeout: the claim is not bound meanwhile" "Pending" "$(jp pvc p-timeout '{.status.phase}')"
faults "$WORK/drv-b" ""
expect "timeout: retried until Bound once the driver is fast again" 20 phase_is pvc p-timeout Bound
TIMEOUT_PV=$(jp pvc p-timeout '{.spec.volumeName}')
check "timeout: the retries made one volume" 1 "$(drv "$WORK/drv-b" "sum(1 for v in vols if v['name'] == '$TIMEOUT_PV')")"

# RESOURCE_EXHAUSTED with a selected node gives the node back to the scheduler.
faults "$WORK/drv-b" '{"CreateVolume": {"fail": {"count": 1, "code": "RESOURCE_EXHAUSTED", "message": "zone z1 is full"}}}'
pvc p-full topo-wffc
K annotate pvc p-full volume.kubernetes.io/selected-node=node-1 >/dev/null
expect "RESOURCE_EXHAUSTED: ProvisioningFailed" 20 has_event p-full \
  $'ProvisioningFailed\trpc error: code = ResourceExhausted desc = zone z1 is full'
no_selected_node() { [ -z "$(jp pvc "$1" '{.metadata.annotations.volume\.kubernetes\.io/selected-node}')" ]; }
expect "RESOURCE_EXHAUSTED: the selected-node annotation is removed" 10 no_selected_node p-full
check "RESOURCE_EXHAUSTED: the claim stays Pending" "Pending|" "$(jp pvc p-full '{.status.phase}|{.spec.volumeName}')"
faults "$WORK/drv-b" ""
K annotate pvc p-full volume.kubernetes.io/selected-node=node-1 >/dev/null
expect "RESOURCE_EXHAUSTED: once the node is selected again the claim becomes Bound" 20 phase_is pvc p-full Bound

# The same driver with --strict-topology: only the selected node's topology.
stop prov-b
provisioner prov-b-strict drv-b --timeout=1s --strict-topology
ready prov-b-strict
pvc p-strict topo-wffc
K annotate pvc p-strict volume.kubernetes.io/selected-node=node-1 >/dev/null
expect "--strict-topology: a claim with a selected node becomes Bound" 20 phase_is pvc p-strict Bound
check "--strict-topology: PV nodeAffinity zone In [z1]" "$ZONE_AFFINITY" \
  "$(K get pv "$(jp pvc p-strict '{.spec.volumeName}')" -o json | pyj 'o["spec"].get("nodeAffinity")')"

# ---- leader election ---------------------------------------------------------------------------

LEASE=le-csi-example-com
holder() { jp lease "$LEASE" '{.spec.holderIdentity}'; }
has_holder() { case "$(holder)" in le-one | le-two) return 0 ;; *) return 1 ;; esac; }
if [ "$HAVE_UTS" != 1 ]; then
  bad "leader election" "unshare -u is not available: the replicas would share one identity"
elif ! wait_for 20 has_holder; then
  bad "leader election: a replica takes the lease $LEASE" "holder [$(holder)]"$'\n'"$(tail -n 5 "$WORK/le-one.log" "$WORK/le-two.log")"
else
  LEADER=$(holder)
  if [ "$LEADER" = le-one ]; then OTHER=le-two; else OTHER=le-one; fi
  ok "leader election: $LEADER holds the lease $LEASE"
  expect "leader election: the leader runs the controllers" 20 started "$LEADER"
  pvc p-le-0 le
  expect "leader election: the leader provisions" 20 phase_is pvc p-le-0 Bound
  check "leader election: the other replica waits" "no" \
    "$(grep -q 'provisioner started' "$WORK/$OTHER.log" && echo yes || echo no)"
  stop "$LEADER" KILL
  for i in 1 2 3; do pvc "p-le-$i" le; done
  for i in 1 2 3; do
    expect "leader election: after kill -9 of the leader, the other replica binds p-le-$i" 30 phase_is pvc "p-le-$i" Bound
  done
  check "leader election: the other replica holds the lease" "$OTHER" "$(holder)"
  check "leader election: one volume per claim" 4 "$(drv "$WORK/drv-le" 'len(vols)')"
fi

# ---- metrics and health ----------------------------------------------------------------------

metrics=$(curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics")
m_line() { grep -E "^$1" <<<"$metrics" | grep -F -- "$2" | head -n 1; }
line=$(m_line 'csi_sidecar_operations_seconds_count\{' 'method_name="/csi.v1.Controller/CreateVolume"')
contains "/metrics: csi_sidecar_operations_seconds counts CreateVolume" 'driver_name="hostpath.csi.example.com"' "$line"
line=$(m_line 'controller_persistentvolumeclaim_provision_total\{' 'class="imm"')
if [[ "$line" =~ \ ([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -gt 0 ]; then
  ok "/metrics: controller_persistentvolumeclaim_provision_total counts class imm"
else
  bad "/metrics: controller_persistentvolumeclaim_provision_total" "[$line]"
fi
check "/healthz answers ok" "ok" "$(curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/healthz")"

# ---- clean up through the provisioners -------------------------------------------------------

K delete pvc p-wffc p-block p-opts p-inval p-unavail p-topo p-timeout p-full p-strict --wait=false >/dev/null 2>&1
only_retained() {
  [ "$(drv "$WORK/drv-a" 'sorted(v["name"] for v in vols)')" = "$(python3 -c 'import json, sys; print(json.dumps(sorted(sys.argv[1:])))' "$RET_PV" "$HELD_PV")" ]
}
expect "every deleted claim's volume is deleted; the retained one stays, and the one whose finalizer was removed by hand" 30 only_retained
b_empty() { [ "$(drv "$WORK/drv-b" 'len(vols)')" = 0 ]; }
expect "the topology driver ends with no volume" 30 b_empty
no_pvs() {
  [ "$(K get pv -o json 2>&1 | pyj '[i["metadata"]["name"] for i in o["items"] if i["spec"].get("storageClassName") != "le"]')" = "[\"$RET_PV\"]" ]
}
expect "no PV is left but the retained one (and the leader-election ones)" 20 no_pvs

# ---- the end: every process stops cleanly -------------------------------------------------------

check "no request of a provisioner was refused (401/403)" "$REFUSED0" "$(refused)"
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
if [ "$failed" -gt 0 ]; then
  for n in "${NAMES[@]}"; do
    echo "---- last lines of $n.log"
    tail -n 15 "$WORK/$n.log"
  done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
