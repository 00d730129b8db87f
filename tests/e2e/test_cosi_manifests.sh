#!/usr/bin/env bash
# manifests/cosi on an API server with RBAC: the kustomize rendering and its
# images, `kubectl apply -k` of the CRDs, RBAC and Deployments, the example
# objects, and the RBAC of each binary verb by verb: every request
# objectstorage-controller and objectstorage-sidecar make is allowed to
# their ServiceAccounts, and update (they patch) and the verbs outside
# their lists are refused. Each verb is tried as a real request with the
# account's bearer token (dry-run for writes; 403 or not); on the real
# control plane `kubectl auth can-i --as` must answer the same.
#
#   tests/e2e/test_cosi_manifests.sh <build-dir>   (WORLD=kubernetes: on the real control plane)
#
# worlds: kube-lite kubernetes
#
# Ends with "N passed, N failed"; exits non-zero when a check failed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${CSI_BUILD_DIR:-build}}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
WORK=$(mktemp -d)
COSI="$ROOT/manifests/cosi"
NS=default
CTRL_SA=container-object-storage-controller-sa
SC_SA=example-cosi-driver
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

for tool in kubectl python3 openssl curl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
on_real || [ -x "$B/bin/kube-lite" ] || { bad "kube-lite is built ($B/bin/kube-lite)"; finish; }

# ---- the rendering -------------------------------------------------------------------------

if K kustomize "$COSI" >"$WORK/render.yaml" 2>"$WORK/render.err"; then
  ok "manifests/cosi renders with kustomize"
else
  bad "manifests/cosi renders with kustomize" "$(cat "$WORK/render.err")"
fi
check "the rendering: 5 CRDs, 2 ServiceAccounts, 2 ClusterRoles and bindings, 2 Roles and bindings, 2 Deployments" \
  "2 ClusterRole 2 ClusterRoleBinding 5 CustomResourceDefinition 2 Deployment 2 Role 2 RoleBinding 2 ServiceAccount" \
  "$(sed -n 's/^kind: //p' "$WORK/render.yaml" | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? " " : ""), $1, $2}')"
check "every CRD carries the api-approved annotation" 5 \
  "$(grep -c '^    api-approved.kubernetes.io: https://github.com/kubernetes/enhancements/tree/master/keps/sig-storage/1979-object-storage-support$' "$WORK/render.yaml")"
check "the images" "csi-sidecars/example-cosi-driver:latest csi-sidecars/objectstorage-controller:latest csi-sidecars/objectstorage-sidecar:latest" \
  "$(sed -n 's/^ *image: //p' "$WORK/render.yaml" | sort -u | tr '\n' ' ' | sed 's/ $//')"
mkdir -p "$WORK/overlay"
ln -s "$COSI" "$WORK/overlay/base"
cat >"$WORK/overlay/kustomization.yaml" <<'EOF'
resources: [base]
images:
  - {name: csi-sidecars/objectstorage-controller, newName: registry.example.com/objectstorage-controller, newTag: v9.9.9}
  - {name: csi-sidecars/objectstorage-sidecar, newName: registry.example.com/objectstorage-sidecar, newTag: v9.9.9}
  - {name: csi-sidecars/example-cosi-driver, newName: registry.example.com/example-cosi-driver, newTag: v9.9.9}
EOF
check "an overlay's images: sets every image" \
  "registry.example.com/example-cosi-driver:v9.9.9 registry.example.com/objectstorage-controller:v9.9.9 registry.example.com/objectstorage-sidecar:v9.9.9" \
  "$(K kustomize "$WORK/overlay" 2>&1 | sed -n 's/^ *image: //p' | sort -u | tr '\n' ' ' | sed 's/ $//')"
check "the sidecar talks to the driver over the shared socket" \
  "--driver-addr=unix:///var/lib/cosi/cosi.sock --endpoint=unix:///var/lib/cosi/cosi.sock" \
  "$(grep -Eo -- '--(driver-addr|endpoint)=[^ ]+' "$WORK/render.yaml" | tr '\n' ' ' | sed 's/ $//')"

# ---- the API server, with tokens for both accounts ---------------------------------------------

"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
cat >"$WORK/tokens.csv" <<EOF
admin-token,admin,1,"system:masters"
ctrl-token,system:serviceaccount:$NS:$CTRL_SA,2,"system:serviceaccounts,system:serviceaccounts:$NS"
sc-token,system:serviceaccount:$NS:$SC_SA,3,"system:serviceaccounts,system:serviceaccounts:$NS"
EOF
world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --authorization-mode RBAC --kubeconfig-token admin-token --controllers "" || finish

out=$(K apply -k "$COSI" 2>&1)
rc=$?
check "kubectl apply -k manifests/cosi succeeds" 0 "$rc"
[ "$rc" = 0 ] || printf '%s\n' "$out" | head -n 10
established() { [ "$(K get crd -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Established")].status}{"\n"}{end}' | grep -c True)" -ge 5 ]; }
expect "the five CRDs are Established" 30 established
examples() { K apply -f "$COSI/example/" >"$WORK/example.out" 2>&1; }
expect "kubectl apply -f manifests/cosi/example/ creates the four example objects" 20 examples
check "the example claim and access are stored" "example-bucket example-access" \
  "$(K -n "$NS" get bucketclaim example-bucket -o jsonpath='{.metadata.name}') $(K -n "$NS" get bucketaccess example-access -o jsonpath='{.metadata.name}')"
check "each ClusterRole is bound to its account" \
  "container-object-storage-controller-role:$CTRL_SA objectstorage-sidecar-runner:$SC_SA" \
  "$(K get clusterrolebinding container-object-storage-controller -o jsonpath='{.roleRef.name}:{.subjects[0].name}') $(K get clusterrolebinding example-cosi-driver-sidecar -o jsonpath='{.roleRef.name}:{.subjects[0].name}')"

# ---- RBAC, verb by verb --------------------------------------------------------------------------

# req TOKEN METHOD PATH [BODY [CONTENT-TYPE]]: the HTTP code of one request
req() {
  local args=(-s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $1" -X "$2")
  [[ "$SERVER" == https:* ]] && args+=(--cacert "$WORK/pki/ca.crt")
  [ $# -ge 4 ] && args+=(-H "Content-Type: ${5:-application/json}" --data "$4")
  curl "${args[@]}" "$SERVER$3"
}
# may TOKEN VERB RESOURCE[/status] [NAMESPACE]: "yes" unless the server answers 403. Writes
# are dry runs on an object that does not exist: an allowed one ends in 404 or 400/422.
may() {
  local tok=$1 verb=$2 res=$3 ns=${4:-} sub="" base code
  case $res in */status) sub=/status res=${res%/status} ;; esac
  case $res in
  bucket*) base=/apis/objectstorage.k8s.io/v1alpha1 ;;
  leases) base=/apis/coordination.k8s.io/v1 ;;
  *) base=/api/v1 ;;
  esac
  [ -n "$ns" ] && base="$base/namespaces/$ns"
  local coll="$base/$res" one="$base/$res/rbac-probe$sub"
  case $verb in
  get) code=$(req "$tok" GET "$one") ;;
  list) code=$(req "$tok" GET "$coll") ;;
  watch) code=$(req "$tok" GET "$coll?watch=1&timeoutSeconds=1") ;;
  create) code=$(req "$tok" POST "$coll?dryRun=All" '{}') ;;
  update) code=$(req "$tok" PUT "$one?dryRun=All" '{}') ;;
  patch) code=$(req "$tok" PATCH "$one?dryRun=All" '{}' application/merge-patch+json) ;;
  delete) code=$(req "$tok" DELETE "$one?dryRun=All") ;;
  esac
  if [ "$code" = 403 ]; then echo no; elif [[ "$code" =~ ^[2-5][0-9][0-9]$ ]]; then echo yes; else echo "error $code"; fi
}
# can_i SA VERB RESOURCE[/status] [NAMESPACE]: kubectl auth can-i as the account (real world)
can_i() {
  local res=$3 sub=() nsargs=()
  case $res in */status) sub=(--subresource=status) res=${res%/status} ;; esac
  case $res in bucket*) res=$res.objectstorage.k8s.io ;; leases) res=leases.coordination.k8s.io ;; esac
  if [ -n "${4:-}" ]; then
    nsargs=(-n "$4")
  else
    case $res in bucketclaims* | bucketaccesses* | events | secrets | leases*) nsargs=(-A) ;; esac
  fi
  K auth can-i "$2" "$res" "${sub[@]}" "${nsargs[@]}" --as="system:serviceaccount:$NS:$1" 2>/dev/null
}
# grants SA TOKEN WANT RESOURCE[/status] NAMESPACE VERB...: each VERB gets WANT (yes/no)
grants() {
  local sa=$1 tok=$2 want=$3 res=$4 ns=$5 verb got where
  shift 5
  where=${ns:+ in $ns}
  for verb in "$@"; do
    got=$(may "$tok" "$verb" "$res" "$ns")
    check "$sa: $verb $res$where: $want" "$want" "$got"
    if on_real; then
      check "$sa: kubectl auth can-i $verb $res$where: $want" "$want" "$(can_i "$sa" "$verb" "$res" "$ns")"
    fi
  done
}

# Sanity: the admin reaches every resource the table below names. Lists and
# watches go across namespaces (as the informers do), single objects in one.
for r in buckets bucketclaims bucketclasses bucketaccesses bucketaccessclasses; do
  check "admin: list $r" yes "$(may admin-token list "$r")"
done

# objectstorage-controller
C=("$CTRL_SA" ctrl-token)
grants "${C[@]}" yes bucketclaims "" list watch
grants "${C[@]}" yes bucketclaims "$NS" get patch
grants "${C[@]}" no bucketclaims "$NS" update create delete
grants "${C[@]}" yes bucketclaims/status "$NS" patch
grants "${C[@]}" no bucketclaims/status "$NS" update
grants "${C[@]}" yes buckets "" get list watch create delete patch
grants "${C[@]}" no buckets "" update
grants "${C[@]}" no buckets/status "" patch
grants "${C[@]}" yes bucketclasses "" get list watch
grants "${C[@]}" no bucketclasses "" patch
grants "${C[@]}" no bucketaccesses "$NS" get list
grants "${C[@]}" no bucketaccessclasses "" get
grants "${C[@]}" yes events "$NS" create patch
grants "${C[@]}" yes events kube-public create
grants "${C[@]}" no events "$NS" update list
grants "${C[@]}" yes leases "$NS" get create update
grants "${C[@]}" no leases "$NS" list watch patch delete
grants "${C[@]}" no leases kube-system get
grants "${C[@]}" no secrets "$NS" get

# objectstorage-sidecar (the example driver's account)
S=("$SC_SA" sc-token)
grants "${S[@]}" yes buckets "" get list watch patch
grants "${S[@]}" no buckets "" create delete update
grants "${S[@]}" yes buckets/status "" patch
grants "${S[@]}" no buckets/status "" update
grants "${S[@]}" yes bucketclaims "" list watch
grants "${S[@]}" yes bucketclaims "$NS" get patch
grants "${S[@]}" no bucketclaims "$NS" update delete create
grants "${S[@]}" yes bucketclaims/status "$NS" patch
grants "${S[@]}" yes bucketaccesses "" list watch
grants "${S[@]}" yes bucketaccesses "$NS" get patch delete
grants "${S[@]}" no bucketaccesses "$NS" create update
grants "${S[@]}" yes bucketaccesses/status "$NS" patch
grants "${S[@]}" no bucketaccesses/status "$NS" update
grants "${S[@]}" yes bucketaccessclasses "" get list watch
grants "${S[@]}" yes bucketclasses "" get list watch
grants "${S[@]}" no bucketclasses "" patch
grants "${S[@]}" yes secrets kube-public get create delete patch
grants "${S[@]}" no secrets kube-public list watch update
grants "${S[@]}" yes events kube-public create patch
grants "${S[@]}" yes leases "$NS" get create update
grants "${S[@]}" no leases "$NS" list
grants "${S[@]}" no leases kube-system create

# ---- removal ---------------------------------------------------------------------------------------

K delete -f "$COSI/example/" --wait=false >/dev/null 2>&1
out=$(K delete -k "$COSI" --wait=false 2>&1)
check "kubectl delete -k manifests/cosi succeeds" 0 "$?"
if ! on_real; then
  stop kube-lite
  check "kube-lite exits 0" 0 "${RC[kube-lite]}"
fi
finish
