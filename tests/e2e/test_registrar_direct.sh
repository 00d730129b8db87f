#!/usr/bin/env bash
# csi-node-driver-registrar in direct mode (--node-registration=direct), end
# to end: kube-lite with HTTPS, bearer tokens and RBAC (or the real control
# plane), the registrars running with the service-account token
# manifests/registrar/rbac.yaml grants, and example drivers of different
# names on one node.
#
#   tests/e2e/test_registrar_direct.sh <build-dir>   (WORLD=kubernetes: on the real control plane)
#
# worlds: kube-lite kubernetes
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed".
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${CSI_BUILD_DIR:-build}}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
KL="$B/bin/kube-lite"
DRV="$B/bin/example-csi-driver"
REG="$B/bin/csi-node-driver-registrar"
WORK=$(mktemp -d)
NODE=node-1
NS=default
A=a.csi.example.com
BD=b.csi.example.com
C=c.csi.example.com
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

for tool in kubectl jq openssl curl python3; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
for b in "$KL" "$DRV" "$REG"; do
  [ -x "$b" ] || { bad "$b is built (make)"; finish; }
done

# ---- the world with TLS, tokens and RBAC ------------------------------------------------------

SA_USER=system:serviceaccount:$NS:csi-node-driver-registrar
"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
cat >"$WORK/tokens.csv" <<EOF
admin-token,admin,1,"system:masters"
registrar-token,$SA_USER,2
EOF
world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --authorization-mode RBAC --kubeconfig-token admin-token || finish
sed 's/token: admin-token/token: registrar-token/' "$WORK/admin.kubeconfig" >"$WORK/registrar.kubeconfig"
KR() { kubectl --kubeconfig "$WORK/registrar.kubeconfig" --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }

contains "without rbac.yaml the service account may not read nodes" Forbidden "$(KR get node "$NODE" 2>&1)"
out=$(K apply -f "$ROOT/manifests/registrar/rbac.yaml" 2>&1)
check "rbac.yaml applies" "serviceaccount/csi-node-driver-registrar created
clusterrole.rbac.authorization.k8s.io/csi-node-driver-registrar-direct created
clusterrolebinding.rbac.authorization.k8s.io/csi-node-driver-registrar-direct created" "$out"
contains "with rbac.yaml it may not delete nodes" Forbidden "$(KR delete node "$NODE" --wait=false 2>&1)"
contains "nor read secrets" Forbidden "$(KR get secrets 2>&1)"
# From here on the service account is the registrars' alone: none of their
# requests may be refused (kube-lite counts 401/403 of any caller, the
# audit log of the real control plane those of the service account).
refused() { requests '.*' '.*' '40[13]' "$SA_USER"; }
# (kubectl may have its answer a moment before the audit log has the line)
refused_ge() { [ "$(refused)" -ge "$1" ]; }
expect "the API counts the three refused requests above" 10 refused_ge 3
REFUSED0=$(refused)

# The node, with a rack label some other component set.
cat <<EOF | K create -f - >/dev/null
apiVersion: v1
kind: Node
metadata:
  name: $NODE
  labels:
    kubernetes.io/hostname: $NODE
    topology.example.com/rack: r9
EOF

# driver NAME DRIVER-NAME TOPOLOGY MAX-VOLUMES
driver() {
  mkdir -p "$WORK/$1/state"
  start "$1" "$DRV" --endpoint "unix://$WORK/$1/csi.sock" --state-dir "$WORK/$1/state" \
    --drivername "$2" --nodeid "$NODE-$1" --topology "$3" --max-volumes-per-node "$4" --sync=false
}
# reg NAME DRIVER-DIR [ARGS...]: a direct-mode registrar with the service account's token
reg() {
  local name=$1 dir=$2
  shift 2
  start "$name" env NODE_NAME="$NODE" "$REG" --csi-address="$WORK/$dir/csi.sock" \
    --node-registration=direct --kubeconfig="$WORK/registrar.kubeconfig" --http-endpoint=127.0.0.1:0 "$@"
}
driver da "$A" topology.example.com/zone=z1 5
driver db "$BD" topology.example.com/zone=z1 0
driver dc "$C" topology.example.com/rack=r1 0
for d in da db dc; do wait_for 20 test -S "$WORK/$d/csi.sock"; done

# api PATH: a GET as admin with curl (kubectl's start-up costs seconds on a busy machine)
api() { acurl "$1"; }
node_json() { api "/api/v1/nodes/$NODE"; }
csinode_json() { api "/apis/storage.k8s.io/v1/csinodes/$NODE"; }
# jq, not python: its start-up is what a busy machine makes slow
label() { node_json | jq -r --arg k "$1" '.metadata.labels[$k] // ""'; }
nodeid() { node_json | jq -r '.metadata.annotations["csi.volume.kubernetes.io/nodeid"] // ""'; }
EXPECT_LAST="$WORK/last"
nodeid_is() { nodeid >"$WORK/last"; [ "$(cat "$WORK/last")" = "$1" ]; }
entries() { csinode_json | jq -c '[(.spec.drivers // [])[] | .name + "=" + .nodeID] | sort'; }
entries_are() { entries >"$WORK/last"; [ "$(cat "$WORK/last")" = "$1" ]; }
events() {
  api "/api/v1/namespaces/$NS/events?fieldSelector=involvedObject.name%3D$1" |
    jq -r '.items[] | (.reason // "") + "\t" + (.message // "")'
}
health_port() { sed -n 's/.*Serving \/healthz on .*(port \([0-9]*\)).*/\1/p' "$WORK/$1.log" | tail -n 1; }
healthz() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$(health_port "$1")/healthz"; }
BOTH="{\"$A\":\"$NODE-da\",\"$BD\":\"$NODE-db\"}"

# ---- two drivers on one node, started together -----------------------------------------------------

reg ra da --cleanup-on-exit
reg rb db
expect "both drivers' node ids are in the annotation" 30 nodeid_is "$BOTH"
expect "both drivers have their CSINode entry" 30 entries_are "[\"$A=$NODE-da\",\"$BD=$NODE-db\"]"
check "the shared topology label is set once" z1 "$(label topology.example.com/zone)"
check "allocatable.count from max_volumes_per_node, none when 0" '[{"count":5},null]' \
  "$(csinode_json | jq -c '[.spec.drivers | sort_by(.name)[] | .allocatable]')"
check "topologyKeys of each entry" '[["topology.example.com/zone"],["topology.example.com/zone"]]' \
  "$(csinode_json | jq -c '[.spec.drivers | sort_by(.name)[] | .topologyKeys]')"
check "the CSINode the registrars created is owned by the Node" "$(node_json | jq -c '["Node", .metadata.name, .metadata.uid]')" \
  "$(csinode_json | jq -c '.metadata.ownerReferences[0] | [.kind, .name, .uid]')"
expect "/healthz is 200 in direct mode" 10 test "$(healthz rb)" = 200

# ---- a topology label collision ---------------------------------------------------------------------------

reg rc dc
expect "a label collision is logged" 30 grep -q 'detected topology value collision' "$WORK/rc.log"
expect "... and recorded as an Event on the Node" 30 has_event "$NODE" "TopologyValueCollision"
contains "... whose message names the label and both values" \
  '"topology.example.com/rack":"r1" but existing label is "topology.example.com/rack":"r9"' \
  "$(events "$NODE" | grep TopologyValueCollision)"
check "the existing label is not overwritten" r9 "$(label topology.example.com/rack)"
check "the colliding driver registers nothing" "$BOTH" "$(nodeid)"
alive rc && ok "the colliding registrar keeps running (and retrying)" || bad "the colliding registrar keeps running" "$(tail "$WORK/rc.log")"
stop rc
check "it stops cleanly" 0 "${RC[rc]}"

# ---- entries removed by hand come back ---------------------------------------------------------------

K annotate --overwrite node "$NODE" "csi.volume.kubernetes.io/nodeid={\"$A\":\"$NODE-da\"}" >/dev/null
expect "an annotation entry removed by hand comes back" 30 nodeid_is "$BOTH"
i=$(csinode_json | jq --arg d "$BD" '[.spec.drivers[].name] | index($d)')
K patch csinode "$NODE" --type=json -p "[{\"op\":\"remove\",\"path\":\"/spec/drivers/$i\"}]" >/dev/null
expect "a CSINode entry removed by hand comes back" 30 entries_are "[\"$A=$NODE-da\",\"$BD=$NODE-db\"]"
K delete csinode "$NODE" >/dev/null
expect "a CSINode deleted by hand is re-created with both entries" 30 entries_are "[\"$A=$NODE-da\",\"$BD=$NODE-db\"]"
K label node "$NODE" topology.example.com/zone- >/dev/null
expect "a topology label removed by hand comes back" 30 test "$(label topology.example.com/zone)" = z1

# ---- a malformed annotation is reported, not overwritten --------------------------------------------------

K annotate --overwrite node "$NODE" 'csi.volume.kubernetes.io/nodeid=not json' >/dev/null
expect "a malformed annotation is reported as an Event" 30 has_event "$NODE" "NodeRegistrationFailed"
# Either registrar may be the one whose Event landed first: wait for the log
# line of whichever failed, not for one of them in particular.
expect "... and logged, naming the annotation" 30 \
  grep -q 'Registering driver .* failed: .*csi\.volume\.kubernetes\.io/nodeid' "$WORK/ra.log" "$WORK/rb.log"
check "... and is left as it is" "not json" "$(nodeid)"
K annotate node "$NODE" 'csi.volume.kubernetes.io/nodeid-' >/dev/null
expect "once it is removed both entries are written again" 60 nodeid_is "$BOTH"

# ---- cleanup on exit removes only ours ---------------------------------------------------------------------

stop ra
check "SIGTERM with --cleanup-on-exit: exit 0" 0 "${RC[ra]}"
check "only the other driver is left in the annotation" "{\"$BD\":\"$NODE-db\"}" "$(nodeid)"
check "only the other driver is left in CSINode" "[\"$BD=$NODE-db\"]" "$(entries)"
check "labels stay" "z1 r9" "$(label topology.example.com/zone) $(label topology.example.com/rack)"
stop rb
check "SIGTERM without --cleanup-on-exit: exit 0" 0 "${RC[rb]}"
check "... and its entries stay" "{\"$BD\":\"$NODE-db\"}|[\"$BD=$NODE-db\"]" "$(nodeid)|$(entries)"

check "rbac.yaml is enough: no request of the registrars was refused (401/403)" "$REFUSED0" "$(refused)"

for d in da db dc; do stop "$d"; done
for n in "${NAMES[@]}"; do
  if grep -q 'ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer' "$WORK/$n.log" 2>/dev/null; then
    bad "$n: sanitizer report" "$(grep -A5 'ERROR\|runtime error' "$WORK/$n.log")"
  fi
done
finish
