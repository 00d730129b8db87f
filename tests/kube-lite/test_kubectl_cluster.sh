#!/usr/bin/env bash
# kubectl against kube-lite as against a real cluster: the columns `kubectl
# get` prints (server-side Tables), the generator commands that send
# protobuf bodies (create namespace|secret|configmap|serviceaccount|role|
# rolebinding|clusterrole|clusterrolebinding|token), apps/v1 workloads
# applied and listed, the default StorageClass, emptied finalizers dropped.
# Uses the kubectl on PATH (hack/install-deps.sh installs it).
#
#   tests/kube-lite/test_kubectl_cluster.sh <build-dir>
#
# Ends with "N passed, N failed". kube-lite listens on 127.0.0.1 with a free
# port and is always stopped, also when a step fails.
set -uo pipefail

B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KL="$B/bin/kube-lite"
[ -x "$KL" ] || KL="$ROOT/$B/bin/kube-lite"
WORK=$(mktemp -d)
PIDS=()
passed=0
failed=0

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ $# -gt 1 ] && echo "     $2"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "want [$2] got [$3]"; fi; }
contains() { case "$3" in *"$2"*) ok "$1" ;; *) bad "$1" "[$2] not in [$3]" ;; esac; }

# start_kube_lite NAME ARGS... : sets URL and KUBECONFIG for that server
start_kube_lite() {
  local name=$1; shift
  "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/$name.kubeconfig" "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PIDS+=($!)
  for _ in $(seq 1 200); do
    grep -q 'serving on' "$WORK/$name.out" 2>/dev/null && break
    sleep 0.05
  done
  URL=$(sed -n 's/^kube-lite: serving on //p' "$WORK/$name.out")
  export KUBECONFIG="$WORK/$name.kubeconfig"
  [ -n "$URL" ]
}

K() { kubectl --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
# The header line of a `kubectl get`, columns separated by single spaces.
header() { K get "$@" 2>&1 | head -1 | tr -s ' '; }

if ! command -v kubectl >/dev/null; then
  bad "kubectl is installed (hack/install-deps.sh)"; echo "$passed passed, $failed failed"; exit 1
fi
if ! command -v openssl >/dev/null; then
  bad "openssl is installed (hack/install-deps.sh)"; echo "$passed passed, $failed failed"; exit 1
fi
"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null 2>&1
echo 'admin-token,admin,1,"system:masters"' >"$WORK/tokens.csv"
if start_kube_lite tls --tls-cert-file "$WORK/pki/server.crt" \
    --tls-private-key-file "$WORK/pki/server.key" --client-ca-file "$WORK/pki/ca.crt" \
    --token-auth-file "$WORK/tokens.csv" --authorization-mode RBAC \
    --kubeconfig-token admin-token --controllers=binder; then
  ok "kube-lite serves HTTPS with tokens and RBAC"
else
  bad "kube-lite starts" "$(cat "$WORK/tls.err")"; echo "$passed passed, $failed failed"; exit 1
fi

# ---- generator commands (protobuf bodies) ------------------------------------------------

check "create namespace" "namespace/demo created" "$(K create namespace demo 2>&1)"
check "the namespace is Active" "Active" "$(K get ns demo -o jsonpath='{.status.phase}' 2>&1)"
check "create secret generic" "secret/s created" \
  "$(K create secret generic s -n demo --from-literal=user=admin --from-literal=pw=hunter2 2>&1)"
check "the secret's data is base64 of the literals" "YWRtaW4=" \
  "$(K get secret s -n demo -o jsonpath='{.data.user}' 2>&1)"
check "create configmap" "configmap/cm created" \
  "$(K create configmap cm -n demo --from-literal=k=v 2>&1)"
check "the configmap's data" "v" "$(K get cm cm -n demo -o jsonpath='{.data.k}' 2>&1)"
check "create serviceaccount" "serviceaccount/robot created" \
  "$(K create serviceaccount robot -n demo 2>&1)"
check "create role" "role.rbac.authorization.k8s.io/claims created" \
  "$(K create role claims -n demo --verb=get,list --resource=persistentvolumeclaims 2>&1)"
check "the role's rule names the core group" '[{"apiGroups":[""],"resources":["persistentvolumeclaims"],"verbs":["get","list"]}]' \
  "$(K get role claims -n demo -o jsonpath='{.rules}' 2>&1)"
check "create rolebinding" "rolebinding.rbac.authorization.k8s.io/robot-claims created" \
  "$(K create rolebinding robot-claims -n demo --role=claims --serviceaccount=demo:robot 2>&1)"
check "create clusterrole" "clusterrole.rbac.authorization.k8s.io/node-reader created" \
  "$(K create clusterrole node-reader --verb=get,list --resource=nodes 2>&1)"
check "create clusterrolebinding" "clusterrolebinding.rbac.authorization.k8s.io/robot-nodes created" \
  "$(K create clusterrolebinding robot-nodes --clusterrole=node-reader --serviceaccount=demo:robot 2>&1)"
TOKEN=$(K create token robot -n demo --duration=15m 2>"$WORK/token.err")
if [ -n "$TOKEN" ]; then ok "create token"; else bad "create token" "$(cat "$WORK/token.err")"; fi
check "the token lists claims as the service account" "" \
  "$(K --token "$TOKEN" get pvc -n demo -o name 2>&1)"
contains "and is refused what its roles do not grant" \
  'User "system:serviceaccount:demo:robot" cannot list resource "secrets"' \
  "$(K --token "$TOKEN" get secrets -n demo 2>&1)"
contains "a token shorter than 10 minutes is refused" "may not specify a duration less than 10 minutes" \
  "$(K create token robot -n demo --duration=1m 2>&1)"
contains "a bad token is Unauthorized" "Unauthorized" "$(K --token not-a-token get pvc 2>&1)"

# ---- columns (Table output) ------------------------------------------------------------

cat >"$WORK/storage.yaml" <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: hostpath.csi.example.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: demo
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-data
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: standard
  claimRef:
    namespace: demo
    name: data
  csi:
    driver: hostpath.csi.example.com
    volumeHandle: vol-data
EOF
K apply -f "$WORK/storage.yaml" >/dev/null 2>&1
check "a claim without a class gets the default class" "standard" \
  "$(K get pvc data -n demo -o jsonpath='{.spec.storageClassName}' 2>&1)"
check "get storageclass marks the default" "standard (default) hostpath.csi.example.com Delete WaitForFirstConsumer false" \
  "$(K get sc standard --no-headers 2>&1 | tr -s ' ' | cut -d' ' -f1-6)"
for _ in $(seq 1 100); do
  [ "$(K get pvc data -n demo -o jsonpath='{.status.phase}' 2>/dev/null)" = Bound ] && break
  sleep 0.1
done
check "get pvc prints kube-apiserver's columns" \
  "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE" "$(header pvc -n demo)"
check "get pvc shows status, volume, capacity and access modes" "data Bound pv-data 1Gi RWO standard <unset>" \
  "$(K get pvc -n demo --no-headers 2>&1 | tr -s ' ' | cut -d' ' -f1-7)"
check "get pvc -o wide adds VOLUMEMODE" \
  "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE VOLUMEMODE" \
  "$(header pvc -n demo -o wide)"
check "get pv" "NAME CAPACITY ACCESS MODES RECLAIM POLICY STATUS CLAIM STORAGECLASS VOLUMEATTRIBUTESCLASS REASON AGE" \
  "$(header pv)"
check "get pv row" "pv-data 1Gi RWO Delete Bound demo/data standard <unset>" \
  "$(K get pv pv-data --no-headers 2>&1 | tr -s ' ' | cut -d' ' -f1-8)"
check "get secret row" "s Opaque 2" "$(K get secret s -n demo --no-headers 2>&1 | tr -s ' ' | cut -d' ' -f1-3)"
check "get rolebinding row" "robot-claims Role/claims" \
  "$(K get rolebinding robot-claims -n demo --no-headers 2>&1 | tr -s ' ' | cut -d' ' -f1-2)"

# One object of every other type, then each type's header from one `get`
# of many types (kubectl prints one table per type, in the order asked).
K create -f - >"$WORK/fixtures.out" 2>&1 <<'EOF'
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: hostpath.csi.example.com
spec: {}
---
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata:
  name: va-1
spec:
  attacher: hostpath.csi.example.com
  nodeName: node-1
  source:
    persistentVolumeName: pv-data
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
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata:
  name: cap-1
  namespace: demo
storageClassName: standard
capacity: 10Gi
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: lock
  namespace: demo
spec:
  holderIdentity: me
---
apiVersion: v1
kind: Pod
metadata:
  name: app
  namespace: demo
spec:
  containers:
  - name: c
    image: busybox
---
apiVersion: v1
kind: Event
metadata:
  name: ev-1
  namespace: demo
involvedObject:
  kind: PersistentVolumeClaim
  name: data
  namespace: demo
reason: Provisioning
message: working on it
type: Normal
EOF
check "create -f one object of each type" "8" "$(grep -c created "$WORK/fixtures.out")"
mapfile -t heads < <(K get secrets,configmaps,serviceaccounts,roles,csistoragecapacities,leases,pods,events \
  -n demo 2>&1 | grep -E '^(NAME|LAST SEEN) ' | tr -s ' ')
check "get secrets" "NAME TYPE DATA AGE" "${heads[0]:-}"
check "get configmaps" "NAME DATA AGE" "${heads[1]:-}"
check "get serviceaccounts" "NAME SECRETS AGE" "${heads[2]:-}"
check "get roles" "NAME CREATED AT" "${heads[3]:-}"
check "get csistoragecapacities" "NAME STORAGECLASSNAME CAPACITY" "${heads[4]:-}"
check "get leases" "NAME HOLDER AGE" "${heads[5]:-}"
check "get pods" "NAME READY STATUS RESTARTS AGE" "${heads[6]:-}"
check "get events" "LAST SEEN TYPE REASON OBJECT MESSAGE" "${heads[7]:-}"
mapfile -t heads < <(K get namespaces,csidrivers,volumeattachments,csinodes,nodes,clusterrolebindings \
  2>&1 | grep '^NAME ' | tr -s ' ')
check "get namespaces" "NAME STATUS AGE" "${heads[0]:-}"
check "get csidrivers" "NAME ATTACHREQUIRED PODINFOONMOUNT STORAGECAPACITY TOKENREQUESTS REQUIRESREPUBLISH MODES AGE" "${heads[1]:-}"
check "get volumeattachments" "NAME ATTACHER PV NODE ATTACHED AGE" "${heads[2]:-}"
check "get csinodes" "NAME DRIVERS AGE" "${heads[3]:-}"
check "get nodes" "NAME STATUS ROLES AGE VERSION" "${heads[4]:-}"
check "get clusterrolebindings" "NAME ROLE AGE" "${heads[5]:-}"
check "get rolebindings -o wide" "NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS" "$(header rolebindings -n demo -o wide)"

# get -w asks for Tables on the watch too
K get cm -n demo -w --no-headers >"$WORK/watch.out" 2>&1 &
wpid=$!
PIDS+=($wpid)
for _ in $(seq 1 100); do grep -q '^cm ' "$WORK/watch.out" 2>/dev/null && break; sleep 0.1; done
K create configmap cm2 -n demo --from-literal=a=b --from-literal=c=d >/dev/null 2>&1
for _ in $(seq 1 100); do grep -q '^cm2 ' "$WORK/watch.out" 2>/dev/null && break; sleep 0.1; done
kill $wpid 2>/dev/null
check "get -w prints rows with the Table columns" "cm2 2" \
  "$(grep '^cm2 ' "$WORK/watch.out" | head -1 | tr -s ' ' | cut -d' ' -f1-2)"

# ---- apps/v1 workloads --------------------------------------------------------------------

cat >"$WORK/apps.yaml" <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: controller
  namespace: demo
spec:
  replicas: 2
  selector:
    matchLabels: {app: controller}
  template:
    metadata:
      labels: {app: controller}
    spec:
      serviceAccountName: robot
      containers:
      - name: provisioner
        image: csi-provisioner:dev
        args: ["--leader-election"]
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node
  namespace: demo
spec:
  selector:
    matchLabels: {app: node}
  template:
    metadata:
      labels: {app: node}
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      containers:
      - name: registrar
        image: csi-registrar:dev
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: demo
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: db:1
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: rs
  namespace: demo
spec:
  replicas: 3
  selector:
    matchLabels: {app: rs}
  template:
    metadata:
      labels: {app: rs}
    spec:
      containers:
      - name: c
        image: c:1
EOF
out=$(K apply -f "$WORK/apps.yaml" 2>&1)
check "apply -f a Deployment, DaemonSet, StatefulSet and ReplicaSet" \
  "deployment.apps/controller created daemonset.apps/node created statefulset.apps/db created replicaset.apps/rs created" \
  "$(echo "$out" | tr '\n' ' ' | sed 's/ $//')"
check "apply again changes nothing" "4" "$(K apply -f "$WORK/apps.yaml" 2>&1 | grep -c unchanged)"
sed -i 's/csi-provisioner:dev/csi-provisioner:v2/' "$WORK/apps.yaml"
check "apply of a changed template configures" "deployment.apps/controller configured" \
  "$(K apply -f "$WORK/apps.yaml" 2>&1 | grep controller)"
check "the Deployment's generation went up" "2 csi-provisioner:v2" \
  "$(K get deploy controller -n demo -o jsonpath='{.metadata.generation} {.spec.template.spec.containers[0].image}')"
mapfile -t heads < <(K get deployments,daemonsets,statefulsets,replicasets -n demo 2>&1 | grep '^NAME ' | tr -s ' ')
check "get deployments" "NAME READY UP-TO-DATE AVAILABLE AGE" "${heads[0]:-}"
check "get daemonsets" "NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE" "${heads[1]:-}"
check "get statefulsets" "NAME READY AGE" "${heads[2]:-}"
check "get replicasets" "NAME DESIRED CURRENT READY AGE" "${heads[3]:-}"
mapfile -t rows < <(K get deployment/controller replicaset/rs -n demo --no-headers 2>&1 | tr -s ' ' | cut -d' ' -f1-4)
check "get deployment row" "deployment.apps/controller 0/2 0 0" "${rows[0]:-}"
check "get replicaset row" "replicaset.apps/rs 3 0 0" "${rows[1]:-}"
check "delete a Deployment" 'deployment.apps "controller" deleted' \
  "$(K delete deploy controller -n demo 2>&1)"

# ---- omitempty: an emptied finalizer list is dropped -------------------------------------

K patch cm cm -n demo --type=merge -p '{"metadata":{"finalizers":["example.com/keep"]}}' >/dev/null 2>&1
K patch cm cm -n demo --type=json -p '[{"op":"remove","path":"/metadata/finalizers/0"}]' >/dev/null 2>&1
check "a finalizer list emptied by a JSON patch is gone" "false" \
  "$(K get cm cm -n demo -o json | grep -q '"finalizers"' && echo true || echo false)"
out=$(K patch cm cm -n demo --type=json \
  -p '[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["a.io/x"]}]' 2>&1)
check "a JSON patch test of a missing member with null passes" "configmap/cm patched" "$out"
contains "a JSON patch test of a missing member with a value fails" "the server rejected our request" \
  "$(K patch cm cm -n demo --type=json -p '[{"op":"test","path":"/metadata/labels","value":{"a":"b"}}]' 2>&1)"
K patch cm cm -n demo --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null 2>&1

# ---- the project's manifests apply as to a cluster ---------------------------------------

# The CSIDriver made with `create` above would draw apply's warning about
# a missing last-applied annotation, as on a cluster.
K delete csidriver hostpath.csi.example.com >/dev/null 2>&1
while IFS= read -r dir; do
  rel=${dir#"$ROOT"/}
  out=$(K apply -k "$dir" 2>&1)
  if [ $? -eq 0 ] && ! echo "$out" | grep -qiE 'error|warning'; then ok "apply -k $rel"; else
    bad "apply -k $rel" "$out"; fi
  out=$(K apply -k "$dir" 2>&1)
  check "apply -k $rel again changes nothing" "" "$(echo "$out" | grep -v ' unchanged$')"
done < <(find "$ROOT/manifests" -name kustomization.yaml -printf '%h\n' 2>/dev/null | sort)

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
