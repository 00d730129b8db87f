#!/usr/bin/env bash
# CustomResourceDefinitions on kube-lite with kubectl: a CRD applied from
# tests/kube-lite/fixtures/ becomes a served, discoverable type; its custom
# objects are created, listed with printer columns, watched, patched (merge,
# JSON; strategic merge refused), updated through /status, validated
# against the schema, finalized and deleted; a protected group without
# api-approved.kubernetes.io is refused; deleting the CRD stops serving it.
# Then COSI's manifests (manifests/cosi): refused without the annotation,
# applied with kustomize, Established, the example objects created and
# listed, schema violations refused in kube-apiserver's words, the writes
# objectstorage-controller and -sidecar make (guarded merge and JSON patches,
# /status), finalizers, and deletion of it all.
#
#   tests/kube-lite/test_crd.sh <build-dir>
#
# Ends with "N passed, N failed".
set -uo pipefail

B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FX="$ROOT/tests/kube-lite/fixtures"
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
lacks() { case "$3" in *"$2"*) bad "$1" "[$2] in [$3]" ;; *) ok "$1" ;; esac; }

out="$WORK/kl.out"
"$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/kl.kubeconfig" >"$out" 2>"$WORK/kl.err" &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q 'serving on' "$out" 2>/dev/null && break; sleep 0.05; done
URL=$(sed -n 's/^kube-lite: serving on //p' "$out")
if [ -z "$URL" ]; then bad "kube-lite starts" "$(cat "$WORK/kl.err")"; echo "$passed passed, $failed failed"; exit 1; fi
export KUBECONFIG="$WORK/kl.kubeconfig"
K() { kubectl --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
WAPI="$URL/apis/demo.example.com/v1alpha1"

# ---- the CRD ------------------------------------------------------------------------

check "apply -f a CRD creates it" "customresourcedefinition.apiextensions.k8s.io/widgets.demo.example.com created" \
  "$(K apply -f "$FX/widget-crd.yaml" 2>&1)"
check "the CRD becomes Established" "customresourcedefinition.apiextensions.k8s.io/widgets.demo.example.com condition met" \
  "$(K wait --for condition=established --timeout=10s crd/widgets.demo.example.com 2>&1)"
check "status.acceptedNames and NamesAccepted are set" "Widget widgets True" \
  "$(K get crd widgets.demo.example.com -o jsonpath='{.status.acceptedNames.kind} {.status.acceptedNames.plural} {.status.conditions[?(@.type=="NamesAccepted")].status}')"
check "a second apply of the same CRD is unchanged" "customresourcedefinition.apiextensions.k8s.io/widgets.demo.example.com unchanged" \
  "$(K apply -f "$FX/widget-crd.yaml" 2>&1)"
contains "the group is in /apis" '"name":"demo.example.com"' "$(curl -s "$URL/apis")"
contains "the resource is in /apis/<group>/<version>" '"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget"' \
  "$(curl -s "$WAPI")"
contains "kubectl api-resources lists it with its short name" "widgets" \
  "$(K api-resources --api-group=demo.example.com 2>&1 | grep wd)"

# ---- custom objects ------------------------------------------------------------------

check "apply -f a custom object creates it" "widget.demo.example.com/w1 created" "$(K apply -f "$FX/widget.yaml" 2>&1)"
check "schema default filled, unknown field pruned, preserved field kept, generation 1" "1||kept|1" \
  "$(K get wd w1 -o jsonpath='{.spec.replicas}|{.spec.unknownField}|{.spec.extra.anything}|{.metadata.generation}')"
table=$(K get widgets 2>&1)
contains "kubectl get prints the printer columns" "NAME   SIZE    REPLICAS   READY   AGE" "$table"
contains "the row has the column values" "w1     small   1" "$table"
check "label selector" "w1" "$(K get widgets -l tier=gold -o jsonpath='{.items[*].metadata.name}')"
check "label selector that matches nothing" "" "$(K get widgets -l tier=silver -o jsonpath='{.items[*].metadata.name}')"
check "field selector metadata.name" "w1" "$(K get widgets --field-selector metadata.name=w1 -o jsonpath='{.items[*].metadata.name}')"
contains "an unsupported field selector is a 400" "field label not supported: spec.size" \
  "$(K get widgets --field-selector spec.size=small 2>&1)"

rv=$(K get wd w1 -o jsonpath='{.metadata.resourceVersion}')
curl -sN "$WAPI/namespaces/default/widgets?watch=1&resourceVersion=$rv&timeoutSeconds=60&allowWatchBookmarks=true" >"$WORK/watch.out" &
WATCH=$!
sleep 0.3
check "merge patch" "widget.demo.example.com/w1 patched" "$(K patch wd w1 --type=merge -p '{"spec":{"size":"large"}}' 2>&1)"
check "a spec change bumps the generation" "large 2" "$(K get wd w1 -o jsonpath='{.spec.size} {.metadata.generation}')"
check "JSON patch" "widget.demo.example.com/w1 patched" \
  "$(K patch wd w1 --type=json -p '[{"op":"replace","path":"/spec/replicas","value":3}]' 2>&1)"
contains "strategic merge patch is refused (415)" "application/strategic-merge-patch+json is not supported by demo.example.com/v1alpha1, Kind=Widget" \
  "$(K patch wd w1 -p '{"spec":{"size":"small"}}' 2>&1)"
# Until the JSON patch's event arrived (seconds on a busy machine), then the watch goes.
for _ in $(seq 1 200); do grep -q '"replicas":3' "$WORK/watch.out" && break; sleep 0.1; done
kill "$WATCH" 2>/dev/null
wait "$WATCH" 2>/dev/null
contains "the watch sees the change" '"type":"MODIFIED","object":{"kind":"Widget","apiVersion":"demo.example.com/v1alpha1"' "$(cat "$WORK/watch.out")"
contains "the watch sees the new spec" '"size":"large"' "$(cat "$WORK/watch.out")"

# ---- the status subresource ------------------------------------------------------------

check "patch through /status" "widget.demo.example.com/w1 patched" \
  "$(K patch wd w1 --subresource=status --type=merge -p '{"status":{"ready":true,"message":"up"},"spec":{"size":"small"}}' 2>&1)"
check "/status changed the status only, generation kept" "true large 3" \
  "$(K get wd w1 -o jsonpath='{.status.ready} {.spec.size} {.metadata.generation}')"
K patch wd w1 --type=merge -p '{"status":{"ready":false}}' >/dev/null 2>&1
check "the main resource ignores status" "true" "$(K get wd w1 -o jsonpath='{.status.ready}')"
contains "READY column from the status" "w1     large   3          true" "$(K get widgets 2>&1)"

# ---- validation ----------------------------------------------------------------------------

bad_obj() { # name spec-json
  printf '{"apiVersion":"demo.example.com/v1alpha1","kind":"Widget","metadata":{"name":"%s"},"spec":%s}' "$1" "$2" >"$WORK/$1.json"
  K create -f "$WORK/$1.json" 2>&1
}
check "enum violation" 'The Widget "w2" is invalid: spec.size: Unsupported value: "huge": supported values: "small", "large"' \
  "$(bad_obj w2 '{"size":"huge"}')"
check "required property" 'The Widget "w3" is invalid: spec.size: Required value' "$(bad_obj w3 '{}')"
check "wrong type" 'The Widget "w4" is invalid: spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"' \
  "$(bad_obj w4 '{"size":"small","replicas":"three"}')"
check "map of strings" 'The Widget "w5" is invalid: spec.params.n: Invalid value: "integer": spec.params.n in body must be of type string: "integer"' \
  "$(bad_obj w5 '{"size":"small","params":{"n":1}}')"
code=$(curl -s -o "$WORK/inv.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data '{"apiVersion":"demo.example.com/v1alpha1","kind":"Widget","metadata":{"name":"w6"}}' "$WAPI/namespaces/default/widgets")
check "422 Invalid with causes" "422 Invalid FieldValueRequired spec" \
  "$code $(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); c=s["details"]["causes"][0]; print(s["reason"], c["reason"], c["field"])' "$WORK/inv.json")"

# ---- finalizers and deletion ----------------------------------------------------------------

K patch wd w1 --type=merge -p '{"metadata":{"finalizers":["demo.example.com/hold"]}}' >/dev/null 2>&1
K delete wd w1 --wait=false >/dev/null 2>&1
check "delete with a finalizer sets deletionTimestamp" "yes" \
  "$(K get wd w1 -o jsonpath='{.metadata.deletionTimestamp}' | grep -q . && echo yes)"
K patch wd w1 --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1
contains "removing the last finalizer deletes it" "NotFound" "$(K get wd w1 2>&1)"

# ---- api-approved --------------------------------------------------------------------------

check "a protected group without api-approved.kubernetes.io is refused" \
  'The CustomResourceDefinition "gadgets.demo.k8s.io" is invalid: metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation "api-approved.kubernetes.io", see https://github.com/kubernetes/enhancements/pull/1111' \
  "$(K apply -f "$FX/protected-crd.yaml" 2>&1)"
sed 's|^  name: gadgets.demo.k8s.io|  name: gadgets.demo.k8s.io\n  annotations:\n    api-approved.kubernetes.io: "unapproved, testing only"|' \
  "$FX/protected-crd.yaml" >"$WORK/approved.yaml"
check "with the annotation it is accepted" "customresourcedefinition.apiextensions.k8s.io/gadgets.demo.k8s.io created" \
  "$(K apply -f "$WORK/approved.yaml" 2>&1)"
printf '{"apiVersion":"demo.k8s.io/v1","kind":"Gadget","metadata":{"name":"g1"},"anything":{"goes":1}}' >"$WORK/g1.json"
check "a cluster-scoped custom object" "gadget.demo.k8s.io/g1 created" "$(K create -f "$WORK/g1.json" 2>&1)"
check "preserve-unknown-fields at the root keeps everything" "1" "$(K get gadget g1 -o jsonpath='{.anything.goes}')"
contains "no printer columns: Name and Age" "NAME   AGE" "$(K get gadgets 2>&1)"

# ---- deleting the CRD ----------------------------------------------------------------------

K apply -f "$FX/widget.yaml" >/dev/null 2>&1
check "delete the CRD" 'customresourcedefinition.apiextensions.k8s.io "widgets.demo.example.com" deleted' \
  "$(K delete -f "$FX/widget-crd.yaml" 2>&1)"
check "its API is no longer served" "404" "$(curl -s -o /dev/null -w '%{http_code}' "$WAPI/namespaces/default/widgets")"
lacks "nor discovered" '"demo.example.com"' "$(curl -s "$URL/apis")"
K apply -f "$FX/widget-crd.yaml" >/dev/null 2>&1
K wait --for condition=established --timeout=10s crd/widgets.demo.example.com >/dev/null 2>&1
check "created again, it has none of the old objects" "" \
  "$(K get widgets -A -o jsonpath='{.items[*].metadata.name}' 2>&1)"

# ---- COSI: manifests/cosi (the five objectstorage.k8s.io CRDs, RBAC, Deployments) ------------
# The CRDs are upstream COSI v0.2.2's: no printer columns (kubectl shows NAME
# and AGE) and no enums (deletionPolicy is any string; only types, required
# fields and defaults are checked).

COSI="$ROOT/manifests/cosi"
OSAPI="$URL/apis/objectstorage.k8s.io/v1alpha1"
for f in "$COSI"/crd/*.yaml; do
  plural=$(basename "$f" .yaml)
  plural=${plural#objectstorage.k8s.io_}
  K annotate --local -f "$f" -o json api-approved.kubernetes.io- >"$WORK/unapproved.json" 2>&1
  check "$plural without api-approved.kubernetes.io is refused" \
    "The CustomResourceDefinition \"$plural.objectstorage.k8s.io\" is invalid: metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111" \
    "$(K create -f "$WORK/unapproved.json" 2>&1)"
done
out=$(K apply -k "$COSI" 2>&1)
check "kubectl apply -k manifests/cosi succeeds" 0 "$?"
check "it creates the 5 CRDs, RBAC and both Deployments (17 objects)" 17 "$(grep -c ' created$' <<<"$out")"
CRDS=(bucketclasses bucketclaims buckets bucketaccessclasses bucketaccesses)
CRD_REFS=()
for c in "${CRDS[@]}"; do CRD_REFS+=("crd/$c.objectstorage.k8s.io"); done
check "the five CRDs become Established" 5 \
  "$(K wait --for condition=established --timeout=10s "${CRD_REFS[@]}" 2>&1 | grep -c 'condition met')"
check "each carries the approval condition (ApprovedAnnotation)" "True True True True True" \
  "$(for c in "${CRDS[@]}"; do K get crd "$c.objectstorage.k8s.io" -o jsonpath='{.status.conditions[?(@.type=="KubernetesAPIApprovalPolicyConformant")].status}'; echo; done | tr '\n' ' ' | sed 's/ $//')"
contains "discovery lists the claims with their status subresource" '"name":"bucketclaims/status","singularName":"","namespaced":true,"kind":"BucketClaim"' \
  "$(curl -s "$OSAPI")"
check "kubectl apply -f manifests/cosi/example/ creates each example object" \
  "bucketaccess.objectstorage.k8s.io/example-access created
bucketaccessclass.objectstorage.k8s.io/example-cosi-key created
bucketclaim.objectstorage.k8s.io/example-bucket created
bucketclass.objectstorage.k8s.io/example-cosi created" "$(K apply -f "$COSI/example/" 2>&1)"
table=$(K get bucketclaims 2>&1)
contains "kubectl get bucketclaims: the columns (Name and Age: the CRD declares none)" "NAME             AGE" "$table"
contains "kubectl get bucketclaims: the example's row" "example-bucket   " "$table"
check "kubectl get of each kind" "example-cosi example-cosi-key example-bucket example-access" \
  "$(for k in bucketclass bucketaccessclass bucketclaim bucketaccess; do K get "$k" -o jsonpath='{.items[*].metadata.name}'; echo; done | tr '\n' ' ' | sed 's/ $//')"

cosi_obj() { # kind name body-json (fields beside metadata)
  printf '{"apiVersion":"objectstorage.k8s.io/v1alpha1","kind":"%s","metadata":{"name":"%s"},%s}' "$1" "$2" "$3" >"$WORK/$2.json"
  K create -f "$WORK/$2.json" 2>&1
}
check "a BucketClass without deletionPolicy gets Retain" "bucketclass.objectstorage.k8s.io/kept created Retain" \
  "$(cosi_obj BucketClass kept '"driverName":"cosi.example.com"') $(K get bucketclass kept -o jsonpath='{.deletionPolicy}')"
check "deletionPolicy is free text in v0.2.2 (no enum): accepted" "bucketclass.objectstorage.k8s.io/free created" \
  "$(cosi_obj BucketClass free '"driverName":"cosi.example.com","deletionPolicy":"Sometimes"')"
check "a BucketClass without driverName is refused" 'The BucketClass "bad1" is invalid: driverName: Required value' \
  "$(cosi_obj BucketClass bad1 '"deletionPolicy":"Delete"')"
check "a BucketClaim without protocols is refused" 'The BucketClaim "bad2" is invalid: spec.protocols: Required value' \
  "$(cosi_obj BucketClaim bad2 '"spec":{"bucketClassName":"example-cosi"}')"
check "a BucketClaim whose protocols are not a list is refused" \
  'The BucketClaim "bad3" is invalid: spec.protocols: Invalid value: "string": spec.protocols in body must be of type array: "string"' \
  "$(cosi_obj BucketClaim bad3 '"spec":{"protocols":"S3"}')"
check "a BucketAccess without its three required fields is refused" \
  'The BucketAccess "bad4" is invalid: 
* spec.bucketAccessClassName: Required value
* spec.bucketClaimName: Required value
* spec.credentialsSecretName: Required value' \
  "$(cosi_obj BucketAccess bad4 '"spec":{"protocol":"S3"}')"
check "a Bucket whose bucketClaim is no object is refused" \
  'The Bucket "bad5" is invalid: spec.bucketClaim: Invalid value: "string": spec.bucketClaim in body must be of type object: "string"' \
  "$(cosi_obj Bucket bad5 '"spec":{"driverName":"d","bucketClassName":"c","protocols":["S3"],"bucketClaim":"x"}')"

# The controller's and the sidecar's writes: guarded patches, /status.
CLAIM="$OSAPI/namespaces/default/bucketclaims"
rv=$(K get bucketclaim example-bucket -o jsonpath='{.metadata.resourceVersion}')
curl -sN "$CLAIM?watch=1&resourceVersion=$rv&timeoutSeconds=60" >"$WORK/cosi-watch.out" &
WATCH=$!
sleep 0.3
check "merge patch at the read resourceVersion (the claim's finalizer)" "bucketclaim.objectstorage.k8s.io/example-bucket patched" \
  "$(K patch bucketclaim example-bucket --type=merge -p "{\"metadata\":{\"resourceVersion\":\"$rv\",\"finalizers\":[\"cosi.objectstorage.k8s.io/bucketclaim-protection\"]}}" 2>&1)"
contains "merge patch at a stale resourceVersion: conflict" \
  'Operation cannot be fulfilled on bucketclaims.objectstorage.k8s.io "example-bucket": the object has been modified; please apply your changes to the latest version and try again' \
  "$(K patch bucketclaim example-bucket --type=merge -p "{\"metadata\":{\"resourceVersion\":\"$rv\",\"labels\":{\"a\":\"b\"}}}" 2>&1)"
code=$(curl -s -o "$WORK/jp.json" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json-patch+json' \
  --data "[{\"op\":\"test\",\"path\":\"/metadata/resourceVersion\",\"value\":\"$rv\"},{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":{\"a\":\"b\"}}]" \
  "$CLAIM/example-bucket")
check "JSON patch whose resourceVersion test fails: 422" 422 "$code"
rv=$(K get bucketclaim example-bucket -o jsonpath='{.metadata.resourceVersion}')
check "JSON patch at the read resourceVersion" "bucketclaim.objectstorage.k8s.io/example-bucket patched" \
  "$(K patch bucketclaim example-bucket --type=json -p "[{\"op\":\"test\",\"path\":\"/metadata/resourceVersion\",\"value\":\"$rv\"},{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":{\"app\":\"cosi\"}}]" 2>&1)"
check "status patch through /status" "bucketclaim.objectstorage.k8s.io/example-bucket patched" \
  "$(K patch bucketclaim example-bucket --subresource=status --type=merge -p '{"status":{"bucketName":"bucket-1","bucketReady":true},"spec":{"protocols":["GCP"]}}' 2>&1)"
check "/status changed the status only" "true bucket-1 S3" \
  "$(K get bucketclaim example-bucket -o jsonpath='{.status.bucketReady} {.status.bucketName} {.spec.protocols[0]}')"
K patch bucketclaim example-bucket --type=merge -p '{"status":{"bucketReady":false}}' >/dev/null 2>&1
check "the main resource ignores status" "true" "$(K get bucketclaim example-bucket -o jsonpath='{.status.bucketReady}')"
printf '{"apiVersion":"objectstorage.k8s.io/v1alpha1","kind":"BucketClaim","metadata":{"name":"c2"},"spec":{"protocols":["S3"]}}' >"$WORK/c2.json"
K create -f "$WORK/c2.json" >/dev/null 2>&1
check "a status without bucketReady (required) is refused" 'The BucketClaim "c2" is invalid: status.bucketReady: Required value' \
  "$(K patch bucketclaim c2 --subresource=status --type=merge -p '{"status":{"bucketName":"x"}}' 2>&1)"
check "status through /status by JSON patch" "bucketaccess.objectstorage.k8s.io/example-access patched true acct-1" \
  "$(K patch bucketaccess example-access --subresource=status --type=json -p '[{"op":"add","path":"/status","value":{"accountID":"acct-1","accessGranted":true}}]' 2>&1) $(K get bucketaccess example-access -o jsonpath='{.status.accessGranted} {.status.accountID}')"
# Until the last event arrived (a busy machine may take seconds), then the watch goes.
for _ in $(seq 1 200); do grep -q '"name":"c2"' "$WORK/cosi-watch.out" && break; sleep 0.1; done
kill "$WATCH" 2>/dev/null
wait "$WATCH" 2>/dev/null
check "the watch sees the finalizer, label and status writes, then the new claim" "MODIFIED MODIFIED MODIFIED ADDED:c2" \
  "$(python3 -c '
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(" ".join(e["type"] + ("" if e["object"]["metadata"]["name"] == "example-bucket" else ":" + e["object"]["metadata"]["name"]) for e in evs))' "$WORK/cosi-watch.out")"

K delete bucketclaim example-bucket --wait=false >/dev/null 2>&1
check "deleting a claim with its finalizer sets deletionTimestamp" "yes" \
  "$(K get bucketclaim example-bucket -o jsonpath='{.metadata.deletionTimestamp}' | grep -q . && echo yes)"
K patch bucketclaim example-bucket --type=json -p '[{"op":"test","path":"/metadata/finalizers/0","value":"cosi.objectstorage.k8s.io/bucketclaim-protection"},{"op":"remove","path":"/metadata/finalizers/0"}]' >/dev/null 2>&1
contains "removing the finalizer deletes it" "NotFound" "$(K get bucketclaim example-bucket 2>&1)"
out=$(K delete -k "$COSI" 2>&1)
check "kubectl delete -k manifests/cosi" 0 "$?"
check "the COSI API is no longer served" "404" "$(curl -s -o /dev/null -w '%{http_code}' "$OSAPI/bucketclasses")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
