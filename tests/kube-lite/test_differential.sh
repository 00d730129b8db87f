#!/usr/bin/env bash
# kube-lite against the real kube-apiserver 1.20.2, request by request: both
# servers are started here (HTTPS with one CA, the same bearer tokens, RBAC),
# tests/kube-lite/differential/scenario.py's requests go to each with curl
# (and its kubectl commands with kubectl) as the admin and as "bob", who holds
# only the RBAC the scenario grants; difftool.py normalises the answers (uids,
# times, resourceVersions, ages: see its norm()) and compares them, one check
# per request.
#
#   tests/kube-lite/test_differential.sh [build-dir]
#
# Prints "ok"/"FAIL" per request and ends with "N passed, N failed". The real
# control plane runs with only the service-account controllers (cluster.sh
# needs them to come up; they touch nothing the scenario reads), kube-lite
# with no controllers: nothing changes objects behind the requests' back.
set -uo pipefail

# ---- where kube-lite differs on purpose --------------------------------------------------------
# One line per difference, "id: reason". The id names the normalisation in
# differential/difftool.py (EXCEPTIONS) that is applied only because it is
# listed here; README.md's "kube-lite and kube-apiserver: the remaining
# differences" has the same list.
EXCEPTIONS=(
  "managed-fields: kube-lite keeps no metadata.managedFields (no field manager; kubectl hides them, clients here never read them)"
  "protection-finalizers: kube-apiserver's StorageObjectInUseProtection admission adds kubernetes.io/pv-protection and kubernetes.io/pvc-protection, which kube-controller-manager's protection controllers remove; kube-lite adds none, so a deleted volume or claim goes at once when nothing else holds it"
  "node-not-ready-taint: kube-apiserver's TaintNodesByCondition admission gives a new Node the node.kubernetes.io/not-ready:NoSchedule taint, which the node lifecycle controller lifts once the node is Ready; kube-lite has no such controller and adds no taint"
  "column-descriptions: Table columnDefinitions[].description are the OpenAPI doc strings of the server's exact version; kube-lite has short ones of its own (kubectl never prints them)"
  "volumeattributesclass-column: kube-lite serves the 1.32 API, whose PV and PVC tables have a VolumeAttributesClass column (1.29+)"
  "newer-api-wording: kube-lite words errors as 1.32 does where 1.20 differs: \"Too long: may not be more than N bytes\" (1.20: \"must have at most\"), ReadWriteOncePod among the access modes (1.22+), \"except resources.requests and volumeAttributesClassName for bound claims\" (1.29+), a shrunk claim \"can not be less than status.capacity\" (RecoverVolumeExpansionFailure, 1.32; 1.20: \"than previous value\")"
  "immutable-diff: after \"... is immutable after creation\" kube-apiserver prints a go-cmp diff of its internal Go structs; kube-lite prints a JSON diff of the fields that changed (the first line, which says what is wrong, is the same)"
  "microtime-format: kube-lite accepts any RFC 3339 time in MicroTime fields (Lease acquireTime/renewTime, Event eventTime) where kube-apiserver insists on exactly six fractional digits (400); client-go always writes six"
  "json-syntax-errors: for a body that is not JSON (or a field of the wrong format), kube-apiserver quotes Go's JSON decoders (encoding/json, json-iterator with byte offsets); kube-lite parses with json-c and words it its own way (the code and reason are the same)"
  "repeated-causes: kube-apiserver 1.20 lists a cause once per validation pass that finds it (a CSINode's create validation runs twice, a Node update's label error shows four times); kube-lite lists each once (the message, which ToAggregate deduplicates, is the same)"
  "schema-item-paths: a custom object's schema error in an array item names the item (spec.protocols[1]), as kube-openapi does since 1.2x; 1.20's go-openapi names the array (spec.protocols), repeating it per bad item"
  "crd-discovery: for a CRD's resources kube-apiserver's discovery lists the verbs in apiextensions' own order and adds storageVersionHash; kube-lite lists the verbs sorted, as for built-in types, and no hash (discovery.c builds both from one table; clients here read neither)"
  "crd-list-continue: a list of custom objects from kube-apiserver carries \"continue\": \"\" when there is no next page (unstructured lists keep the empty field); kube-lite leaves it out, as for built-in lists (same meaning to clients)"
  "events-shared-storage: kube-apiserver stores core/v1 and events.k8s.io/v1 Events as one object seen through either API; kube-lite keeps the two apart, so a core Event is not found through events.k8s.io (the sidecars record events through core/v1 only)"
)

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
WORK=$(mktemp -d)
DIFF="$ROOT/tests/kube-lite/differential"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

cleanup() {
  stop_all
  [ -d "$WORK/k8s/run" ] && "$ROOT/hack/kubernetes/cluster.sh" down "$WORK/k8s"
  if [ "${KEEP_WORK:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

for tool in kubectl python3 curl openssl etcd; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
[ -x "$B/bin/kube-lite" ] || { bad "kube-lite is built ($B/bin/kube-lite)"; finish; }
"$ROOT/hack/kubernetes/build.sh" >/dev/null 2>&1 || { bad "the control plane is built (hack/kubernetes/build.sh)"; finish; }

"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
cat >"$WORK/tokens.csv" <<EOF
admin-token,admin,1,"system:masters"
bob-token,bob,2
EOF

# kube-lite first (it is up at once), then the real control plane (~20 s).
start kube-lite "$B/bin/kube-lite" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/kube-lite.kubeconfig" \
  --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --authorization-mode RBAC --kubeconfig-token admin-token --controllers ""
if ! REAL=$("$ROOT/hack/kubernetes/cluster.sh" up "$WORK/k8s" --pki "$WORK/pki" \
  --token-auth-file "$WORK/tokens.csv" --kubeconfig-token admin-token \
  --controllers serviceaccount,serviceaccount-token --owner $$ 2>"$WORK/k8s-up.log"); then
  bad "the real control plane starts" "$(tail -n 20 "$WORK/k8s-up.log")"
  finish
fi
ok "kube-apiserver 1.20 serves on $REAL"
if wait_for 20 kl_up && alive kube-lite; then
  LITE=$(sed -n 's/^kube-lite: serving on //p' "$WORK/kube-lite.log")
  ok "kube-lite serves on $LITE"
else
  bad "kube-lite starts" "$(cat "$WORK/kube-lite.log")"
  finish
fi
# etcd's address, for the scenario's compaction (kube-apiserver's own flag).
ETCD=$(tr '\0' '\n' <"/proc/$(cat "$WORK/k8s/run/kube-apiserver.pid")/cmdline" | sed -n '/^--etcd-servers$/{n;p}')

# Both scenarios at once: each server only sees its own requests.
run() {
  python3 "$DIFF/difftool.py" run --server "$1" --ca "$WORK/pki/ca.crt" --kubeconfig "$2" \
    --token admin=admin-token --token bob=bob-token --compact "$3" --out "$4"
}
run "$REAL" "$WORK/k8s/admin.kubeconfig" "etcd:$ETCD" "$WORK/real.json" 2>"$WORK/real.err" &
real_pid=$!
run "$LITE" "$WORK/kube-lite.kubeconfig" kube-lite "$WORK/lite.json" 2>"$WORK/lite.err" &
lite_pid=$!
wait "$real_pid" || bad "the scenario runs against kube-apiserver" "$(tail -n 20 "$WORK/real.err")"
wait "$lite_pid" || bad "the scenario runs against kube-lite" "$(tail -n 20 "$WORK/lite.err")"

printf '%s\n' "${EXCEPTIONS[@]}" >"$WORK/exceptions"
if [ -s "$WORK/real.json" ] && [ -s "$WORK/lite.json" ]; then
  while IFS= read -r line; do
    case $line in
    "ok   "*) ok "${line#ok   }" ;;
    "FAIL "*)
      failed=$((failed + 1))
      echo "$line"
      ;;
    *) echo "$line" ;;
    esac
  done < <(python3 "$DIFF/difftool.py" compare "$WORK/real.json" "$WORK/lite.json" --exceptions "$WORK/exceptions")
fi

alive kube-lite && ok "kube-lite still runs" || bad "kube-lite still runs" "$(tail -n 20 "$WORK/kube-lite.log")"
stop kube-lite
check "kube-lite exits 0 on SIGTERM" 0 "${RC[kube-lite]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
