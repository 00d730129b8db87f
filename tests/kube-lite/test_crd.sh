#!/usr/bin/env bash
# CustomResourceDefinitions on kube-lite with kubectl: a CRD applied from
# tests/kube-lite/fixtures/ becomes a served, discoverable type; its custom
# objects are created, listed with printer columns, watched, patched (merge,
# JSON; strategic merge refused), updated through /status, validated
# against the schema, finalized and deleted; a protected group without
# api-approved.kubernetes.io is refused; deleting the CRD stops serving it.
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
curl -sN "$WAPI/namespaces/default/widgets?watch=1&resourceVersion=$rv&timeoutSeconds=3&allowWatchBookmarks=true" >"$WORK/watch.out" &
WATCH=$!
sleep 0.3
check "merge patch" "widget.demo.example.com/w1 patched" "$(K patch wd w1 --type=merge -p '{"spec":{"size":"large"}}' 2>&1)"
check "a spec change bumps the generation" "large 2" "$(K get wd w1 -o jsonpath='{.spec.size} {.metadata.generation}')"
check "JSON patch" "widget.demo.example.com/w1 patched" \
  "$(K patch wd w1 --type=json -p '[{"op":"replace","path":"/spec/replicas","value":3}]' 2>&1)"
contains "strategic merge patch is refused (415)" "application/strategic-merge-patch+json is not supported by demo.example.com/v1alpha1, Kind=Widget" \
  "$(K patch wd w1 -p '{"spec":{"size":"small"}}' 2>&1)"
wait $WATCH
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

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
