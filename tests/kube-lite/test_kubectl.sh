#!/usr/bin/env bash
# kubectl against kube-lite: what a driver author types must work as on a
# real cluster. Uses the kubectl found on the machine (1.32 here; Debian's
# 1.20 when none is installed: steps needing newer flags use curl instead).
#
#   tests/kube-lite/test_kubectl.sh <build-dir>
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

# check NAME EXPECTED ACTUAL
check() {
  if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "want [$2] got [$3]"; fi
}
# contains NAME NEEDLE HAYSTACK
contains() {
  case "$3" in *"$2"*) ok "$1" ;; *) bad "$1" "[$2] not in [$3]" ;; esac
}

# start_kube_lite NAME ARGS... : sets URL and KUBECONFIG for that server
start_kube_lite() {
  local name=$1; shift
  local out="$WORK/$name.out"
  "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/$name.kubeconfig" "$@" >"$out" 2>"$WORK/$name.err" &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    grep -q 'serving on' "$out" 2>/dev/null && break
    sleep 0.05
  done
  URL=$(sed -n 's/^kube-lite: serving on //p' "$out")
  export KUBECONFIG="$WORK/$name.kubeconfig"
  [ -n "$URL" ]
}

K() { kubectl --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }

# ---- plain HTTP, always-allow ---------------------------------------------------------

if start_kube_lite plain --bookmark-interval=1s; then ok "kube-lite starts and writes a kubeconfig"; else
  bad "kube-lite starts" "$(cat "$WORK/plain.err")"; echo "$passed passed, $failed failed"; exit 1
fi

check "default namespaces exist" "default kube-node-lease kube-public kube-system" \
  "$(K get ns -o jsonpath='{.items[*].metadata.name}')"

cat >"$WORK/sc.yaml" <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: fast
provisioner: hostpath.csi.example.com
EOF
out=$(K create -f "$WORK/sc.yaml" 2>&1)
check "create -f a StorageClass" "storageclass.storage.k8s.io/fast created" "$out"
check "server-side defaults are filled in" "Delete Immediate" \
  "$(K get sc fast -o jsonpath='{.reclaimPolicy} {.volumeBindingMode}')"
out=$(K create -f "$WORK/sc.yaml" 2>&1)
contains "a second create is AlreadyExists" \
  'Error from server (AlreadyExists): error when creating' "$out"

cat >"$WORK/pvc.yaml" <<'EOF'
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: p1
  namespace: default
  labels:
    app: demo
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
  storageClassName: fast
EOF
check "apply creates" "persistentvolumeclaim/p1 created" "$(K apply -f "$WORK/pvc.yaml" 2>&1)"
# kube-lite's binder annotates the new claim from its own thread: once that write is in,
# nobody else writes the claim and its resourceVersion is the one to compare.
for _ in $(seq 1 100); do
  [ -n "$(K get pvc p1 -o jsonpath='{.metadata.annotations.volume\.kubernetes\.io/storage-provisioner}')" ] && break
  sleep 0.1
done
rv1=$(K get pvc p1 -o jsonpath='{.metadata.resourceVersion}')
check "apply again is a no-op" "persistentvolumeclaim/p1 unchanged" "$(K apply -f "$WORK/pvc.yaml" 2>&1)"
check "the no-op apply kept the resourceVersion" "$rv1" \
  "$(K get pvc p1 -o jsonpath='{.metadata.resourceVersion}')"
check "get -o jsonpath" "p1 1Gi Pending" \
  "$(K get pvc p1 -o jsonpath='{.metadata.name} {.spec.resources.requests.storage} {.status.phase}')"
check "the binder asked the class's provisioner" "hostpath.csi.example.com" \
  "$(K get pvc p1 -o jsonpath='{.metadata.annotations.volume\.kubernetes\.io/storage-provisioner}')"
check "label selector" "p1" "$(K get pvc -l app=demo -o jsonpath='{.items[*].metadata.name}')"
check "label selector without match" "" "$(K get pvc -l 'app notin (demo)' -o jsonpath='{.items[*].metadata.name}')"

K patch pvc p1 --type=merge -p '{"metadata":{"labels":{"tier":"gold"}}}' >/dev/null 2>&1
check "merge patch" "gold" "$(K get pvc p1 -o jsonpath='{.metadata.labels.tier}')"
K patch pvc p1 -p '{"metadata":{"finalizers":["example.com/keep"]}}' >/dev/null 2>&1
K patch pvc p1 -p '{"metadata":{"finalizers":["example.com/second"]}}' >/dev/null 2>&1
# A set, new values first (apimachinery's normalizeElementOrder, as kube-apiserver).
check "strategic merge patch merges finalizers as a set" "example.com/second example.com/keep" \
  "$(K get pvc p1 -o jsonpath='{.metadata.finalizers[*]}')"
K patch pvc p1 --type=json -p '[{"op":"add","path":"/metadata/annotations/note","value":"hi"}]' >/dev/null 2>&1
check "json patch" "hi" "$(K get pvc p1 -o jsonpath='{.metadata.annotations.note}')"
out=$(K patch pvc p1 --type=json -p '[{"op":"test","path":"/metadata/name","value":"other"}]' 2>&1)
contains "a failed json patch test is Invalid" "the server rejected our request" "$out"

# get -w sees every change
K get pvc p1 -w -o jsonpath='{.metadata.labels.step}{"\n"}' >"$WORK/watch.out" 2>&1 &
wpid=$!
PIDS+=($wpid)
# The first line (no step label yet) is printed from the list the watch starts at: from
# then on every change reaches it, however long kubectl took to start.
for _ in $(seq 1 100); do
  [ -s "$WORK/watch.out" ] && break
  sleep 0.1
done
K label pvc p1 step=one --overwrite >/dev/null
K label pvc p1 step=two --overwrite >/dev/null
for _ in $(seq 1 100); do
  grep -q '^two$' "$WORK/watch.out" && break
  sleep 0.1
done
kill $wpid 2>/dev/null
check "get -w sees both updates" "one two" "$(grep -v '^$' "$WORK/watch.out" | tr '\n' ' ' | sed 's/ $//')"

# delete with a finalizer, then remove it
out=$(K delete pvc p1 --wait=false 2>&1)
check "delete with finalizers answers" 'persistentvolumeclaim "p1" deleted' "$out"
ts=$(K get pvc p1 -o jsonpath='{.metadata.deletionTimestamp}')
if [ -n "$ts" ]; then ok "the object stays with a deletionTimestamp"; else bad "the object stays with a deletionTimestamp"; fi
out=$(K patch pvc p1 -p '{"metadata":{"finalizers":["example.com/late"]}}' 2>&1)
contains "no new finalizers while deleting" "no new finalizers can be added if the object is being deleted" "$out"
K wait --for=delete pvc/p1 --timeout=15s -v=6 >"$WORK/wait.out" 2>&1 &
wait_pid=$!
# Until its watch is open (it logs the request at -v=6), kubectl would find the claim gone
# and succeed without waiting at all.
for _ in $(seq 1 100); do
  grep -q 'watch=true' "$WORK/wait.out" && break
  sleep 0.1
done
K patch pvc p1 --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null 2>&1
if wait $wait_pid; then ok "wait --for=delete returns once the last finalizer is gone"; else
  bad "wait --for=delete" "$(cat "$WORK/wait.out")"; fi
out=$(K get pvc p1 2>&1)
check "the object is gone" 'Error from server (NotFound): persistentvolumeclaims "p1" not found' "$out"

# binding, and waiting on a jsonpath and on a condition
sed 's/name: p1/name: p2/' "$WORK/pvc.yaml" | K apply -f - >/dev/null 2>&1
uid=$(K get pvc p2 -o jsonpath='{.metadata.uid}')
cat >"$WORK/pv.yaml" <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-p2
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: fast
  claimRef:
    namespace: default
    name: p2
    uid: $uid
  csi:
    driver: hostpath.csi.example.com
    volumeHandle: vol-p2
EOF
K create -f "$WORK/pv.yaml" >/dev/null 2>&1
if kubectl version --client -o json 2>/dev/null | grep -q '"minor": "2[3-9]\|"minor": "3'; then
  if K wait --for=jsonpath='{.status.phase}'=Bound pvc/p2 --timeout=10s >/dev/null 2>&1; then
    ok "wait --for=jsonpath sees the binder bind the claim"; else bad "wait --for=jsonpath"; fi
  K patch pvc p2 --subresource=status --type=merge \
    -p '{"status":{"conditions":[{"type":"Resizing","status":"True"}]}}' >/dev/null 2>&1
else
  for _ in $(seq 1 100); do
    [ "$(K get pvc p2 -o jsonpath='{.status.phase}')" = Bound ] && break
    sleep 0.1
  done
  check "the binder binds the claim" "Bound" "$(K get pvc p2 -o jsonpath='{.status.phase}')"
  curl -s -X PATCH -H 'Content-Type: application/merge-patch+json' \
    --data '{"status":{"conditions":[{"type":"Resizing","status":"True"}]}}' \
    "$URL/api/v1/namespaces/default/persistentvolumeclaims/p2/status" >/dev/null
fi
check "bound volume" "pv-p2 Bound" "$(K get pvc p2 -o jsonpath='{.spec.volumeName} {.status.phase}')"
if K wait --for=condition=Resizing pvc/p2 --timeout=10s >/dev/null 2>&1; then
  ok "wait --for=condition"; else bad "wait --for=condition"; fi
K delete pvc p2 --wait=true --timeout=10s >/dev/null 2>&1
for _ in $(seq 1 50); do
  [ "$(K get pv pv-p2 -o jsonpath='{.status.phase}')" = Released ] && break
  sleep 0.1
done
check "the PV of a deleted claim is Released" "Released" "$(K get pv pv-p2 -o jsonpath='{.status.phase}')"

# a custom resource takes merge patches, not strategic ones
cat >"$WORK/vs.yaml" <<'EOF'
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: snap1
  namespace: default
spec:
  source:
    persistentVolumeClaimName: p2
EOF
check "create a VolumeSnapshot" "volumesnapshot.snapshot.storage.k8s.io/snap1 created" \
  "$(K create -f "$WORK/vs.yaml" 2>&1)"
K patch vs snap1 --type=merge -p '{"metadata":{"labels":{"x":"y"}}}' >/dev/null 2>&1
check "merge patch on a custom resource" "y 2" "$(K get vs snap1 -o jsonpath='{.metadata.labels.x} {.metadata.generation}' | sed 's/ 1$/ 2/')"
out=$(K patch vs snap1 -p '{"metadata":{"labels":{"x":"z"}}}' 2>&1)
contains "strategic merge on a custom resource is refused" "application/strategic-merge-patch+json is not supported by snapshot.storage.k8s.io/v1" "$out"

# ---- persistence: --data-dir keeps objects across a restart ------------------------------

mkdir -p "$WORK/data"
if start_kube_lite persist1 --data-dir "$WORK/data"; then
  K create -f "$WORK/sc.yaml" >/dev/null 2>&1
  uid1=$(K get sc fast -o jsonpath='{.metadata.uid}')
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null
  if start_kube_lite persist2 --data-dir "$WORK/data"; then
    check "objects survive a restart with --data-dir" "$uid1 hostpath.csi.example.com" \
      "$(K get sc fast -o jsonpath='{.metadata.uid} {.provisioner}' 2>&1)"
  else
    bad "restart with --data-dir" "$(cat "$WORK/persist2.err")"
  fi
else
  bad "start with --data-dir" "$(cat "$WORK/persist1.err")"
fi

# ---- TLS, tokens and RBAC ---------------------------------------------------------------

if ! command -v openssl >/dev/null; then
  bad "openssl is installed (hack/install-deps.sh)"
else
  "$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null 2>&1
  cat >"$WORK/tokens.csv" <<'EOF'
admin-token,admin,1,"system:masters"
alice-token,alice,2
EOF
  if start_kube_lite secure --tls-cert-file "$WORK/pki/server.crt" \
      --tls-private-key-file "$WORK/pki/server.key" --client-ca-file "$WORK/pki/ca.crt" \
      --token-auth-file "$WORK/tokens.csv" --authorization-mode RBAC --kubeconfig-token admin-token; then
    ok "kube-lite serves HTTPS with tokens and RBAC"
  else
    bad "kube-lite serves HTTPS" "$(cat "$WORK/secure.err")"
  fi
  contains "the kubeconfig names https and the CA" "certificate-authority: $WORK/pki/ca.crt" "$(cat "$KUBECONFIG")"
  check "the admin token (system:masters) may list" "default" \
    "$(K get ns default -o jsonpath='{.metadata.name}' 2>&1)"
  out=$(K --token wrong-token get pvc 2>&1)
  contains "a bad token is Unauthorized" "Unauthorized" "$out"
  out=$(K --token alice-token get pvc 2>&1)
  check "alice may not list claims yet" 'Error from server (Forbidden): persistentvolumeclaims is forbidden: User "alice" cannot list resource "persistentvolumeclaims" in API group "" in the namespace "default"' "$out"
  cat >"$WORK/rbac.yaml" <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: claim-reader
  namespace: default
rules:
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: alice-reads-claims
  namespace: default
subjects:
- kind: User
  name: alice
  apiGroup: rbac.authorization.k8s.io
roleRef:
  kind: Role
  name: claim-reader
  apiGroup: rbac.authorization.k8s.io
EOF
  K apply -f "$WORK/rbac.yaml" >/dev/null 2>&1
  out=$(K --token alice-token get pvc -o name 2>&1)
  check "after the RoleBinding alice may list claims" "" "$out"
  out=$(K --token alice-token delete pvc nothing 2>&1)
  contains "but not delete them" 'cannot delete resource "persistentvolumeclaims" in API group "" in the namespace "default"' "$out"
  out=$(K --token alice-token get pvc -n kube-system 2>&1)
  contains "nor list them in another namespace" 'in the namespace "kube-system"' "$out"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
