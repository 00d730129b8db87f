#!/usr/bin/env bash
# csi-node-driver-registrar in kubelet mode, end to end: kube-lite (HTTPS,
# bearer tokens) or the real control plane, the example CSI driver,
# kubelet-sim (the kubelet's side of plugin registration, which also
# registers the Node) and the registrar, checked through the API with curl
# and jq, the registration socket itself (tests/e2e/reg_tool) and /healthz.
#
#   tests/e2e/test_registrar.sh <build-dir>      (WORLD=kubernetes: on the real control plane)
#
# worlds: kube-lite kubernetes
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed". Every
# process started here is stopped and must exit as the check expects.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${CSI_BUILD_DIR:-build}}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
KL="$B/bin/kube-lite"
DRV="$B/bin/example-csi-driver"
SIM="$B/bin/kubelet-sim"
REG="$B/bin/csi-node-driver-registrar"
TOOL="$B/tests/e2e/reg_tool"
WORK=$(mktemp -d)
NODE=node-1
DRIVER=hostpath.csi.example.com
REGDIR="$WORK/plugins_registry"
SOCK="$REGDIR/$DRIVER-reg.sock"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

for tool in jq curl openssl; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
for b in "$KL" "$DRV" "$SIM" "$REG" "$TOOL"; do
  [ -x "$b" ] || { bad "$b is built (make)"; finish; }
done

# ---- flag rules (no cluster needed) -------------------------------------------------------

out=$("$REG" --csi-address=/nonexistent.sock 2>&1)
rc=$?
check "without --kubelet-registration-path it exits 1" 1 "$rc"
check "... with one line saying so" "csi-node-driver-registrar: kubelet-registration-path is a required parameter" "$out"
out=$("$REG" --kubelet-registration-path=/x/csi.sock --http-endpoint=:9809 --health-port=9810 2>&1)
rc=$?
check "--http-endpoint with --health-port exits 1" 1 "$rc"
check "... with one line naming both" "csi-node-driver-registrar: only one of \`--health-port\` and \`--http-endpoint\` can be set." "$out"
out=$("$REG" --mode=kubelet-registration-probe --csi-address=/nonexistent.sock 2>&1)
rc=$?
check "--mode=kubelet-registration-probe exits 0 at once" "0 " "$rc $out"
out=$("$REG" --node-registration=direct --csi-address=/nonexistent.sock 2>&1)
check "direct mode without a node name exits 1 with one line" 1 "$(printf '%s\n' "$out" | grep -c 'needs the node name')"
contains "--version prints the binary's name" "csi-node-driver-registrar" "$("$REG" --version 2>&1)"

# ---- the world: kube-lite or the real control plane, driver, kubelet-sim ------------------------

mkdir -p "$REGDIR" "$WORK/drv/state"
# In kubelet mode only kubelet-sim talks to the API (as the admin here): the
# registrar needs no credentials and no RBAC.
"$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
echo 'admin-token,admin,1,"system:masters"' >"$WORK/tokens.csv"
world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
  --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
  --kubeconfig-token admin-token || finish
start_driver() {
  start drv "$DRV" --endpoint "unix://$WORK/drv/csi.sock" --state-dir "$WORK/drv/state" \
    --drivername "$DRIVER" --nodeid "$NODE-id" --topology topology.example.com/zone=z1 \
    --max-volumes-per-node 7 --sync=false
  wait_for 20 test -S "$WORK/drv/csi.sock"
}
start_driver
start sim "$SIM" --kubeconfig "$WORK/admin.kubeconfig" --node-name "$NODE" \
  --plugins-registry-dir "$REGDIR" --root-dir "$WORK/root" -v=2

# start_reg NAME [ARGS...]: a registrar for the driver, /healthz on a free port
start_reg() {
  local name=$1
  shift
  start "$name" "$REG" --csi-address="$WORK/drv/csi.sock" \
    --kubelet-registration-path="$WORK/drv/csi.sock" --plugin-registration-path="$REGDIR" \
    --http-endpoint=127.0.0.1:0 "$@"
}
health_port() { sed -n 's/.*Serving \/healthz on .*(port \([0-9]*\)).*/\1/p' "$WORK/$1.log" | tail -n 1; }
healthz() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$(health_port "$1")/healthz"; }
is_red() { local c; c=$(healthz "$1"); [ "$c" != 200 ] && [ "$c" != 000 ]; }
# Reads with curl and jq: kubectl's and python's start-up is what a busy machine makes slow.
api() { acurl "$1"; }
node_json() { api "/api/v1/nodes/$NODE"; }
csinode_json() { api "/apis/storage.k8s.io/v1/csinodes/$NODE"; }
zone_label() { node_json | jq -r '.metadata.labels["topology.example.com/zone"] // ""'; }
nodeid_ann() { node_json | jq -r '.metadata.annotations["csi.volume.kubernetes.io/nodeid"] // ""'; }
has_nodeid() { [ "$(nodeid_ann)" = "{\"$DRIVER\":\"$NODE-id\"}" ]; }
no_nodeid() { [ -z "$(nodeid_ann)" ]; }
# An empty drivers list is [] from kube-lite and null from kube-apiserver (etcd's
# protobuf keeps no empty list): both mean no entry.
csinode_drivers() { csinode_json | jq -c '.spec.drivers // []'; }
registrations() { grep -c 'Registered driver' "$WORK/sim.log"; }
EXPECT_LAST="$WORK/last"
sim_up() { grep -q 'watching' "$WORK/sim.log" && [ "$(node_json | jq -r '.metadata.name // ""')" = "$NODE" ]; }
expect "kubelet-sim registers its Node" 20 sim_up

# ---- registration ------------------------------------------------------------------------

start_reg reg1
expect "the kubelet registers the driver (Node annotation written)" 30 has_nodeid
expect "the registrar hears NotifyRegistrationStatus(true)" 10 grep -q 'registered with the kubelet' "$WORK/reg1.log"
check "the socket is the driver's <name>-reg.sock, owner-only" "srwx------" "$(stat -c %A "$SOCK" 2>&1)"
check "GetInfo answers type, name, endpoint and version 1.0.0" \
  "CSIPlugin $DRIVER $WORK/drv/csi.sock 1.0.0" "$("$TOOL" getinfo "$SOCK" 2>&1)"
check "the topology segment is a Node label" z1 "$(zone_label)"
check "CSINode holds nodeID, topologyKeys and allocatable.count" \
  "{\"allocatable\":{\"count\":7},\"name\":\"$DRIVER\",\"nodeID\":\"$NODE-id\",\"topologyKeys\":[\"topology.example.com/zone\"]}" \
  "$(csinode_json | jq -cS '.spec.drivers[0]')"
check "CSINode is owned by its Node" "$(node_json | jq -c '["Node", .metadata.name, .metadata.uid]')" \
  "$(csinode_json | jq -c '.metadata.ownerReferences[0] | [.kind, .name, .uid]')"
contains "CSINode carries the kubelet's migrated-plugins annotation" "kubernetes.io/gce-pd" \
  "$(csinode_json | jq -r '.metadata.annotations["storage.alpha.kubernetes.io/migrated-plugins"]')"
expect "/healthz is 200 while socket and driver answer" 10 test "$(healthz reg1)" = 200

# ---- SIGTERM: socket removed, the kubelet deregisters ---------------------------------------------------

stop reg1
check "SIGTERM: exit 0" 0 "${RC[reg1]}"
check "SIGTERM: the socket is removed" "gone" "$([ -e "$SOCK" ] && echo present || echo gone)"
expect "the kubelet deregisters: Node annotation entry removed" 20 no_nodeid
expect "... and the CSINode entry" 20 test "$(csinode_drivers)" = "[]"
check "topology labels stay (other drivers may share them)" z1 "$(zone_label)"

# ---- restart and a stale socket left by SIGKILL ------------------------------------------------------

n0=$(registrations)
start_reg reg2
expect "a restarted registrar is registered again" 30 has_nodeid
# The Node is written before the CSINode, kubelet-sim's log line and the
# notification: wait for the last, so the SIGKILL lands on a finished
# registration (n1 below counts it, and the next registration is reg3's).
expect "... and hears NotifyRegistrationStatus(true)" 10 grep -q 'registered with the kubelet' "$WORK/reg2.log"
stop reg2 KILL 2>/dev/null # (bash would report the kill)
check "SIGKILL leaves the socket behind" present "$([ -S "$SOCK" ] && echo present || echo gone)"
n1=$(registrations)
start_reg reg3
expect "a registrar replaces the stale socket and is registered again" 30 \
  sh -c "[ \$(grep -c 'Registered driver' '$WORK/sim.log') -gt $n1 ]"
check "one registration after the restart, one after the stale socket" 2 "$(($(registrations) - n0))"
check "GetInfo answers on the new socket" "CSIPlugin $DRIVER $WORK/drv/csi.sock 1.0.0" "$("$TOOL" getinfo "$SOCK" 2>&1)"
expect "/healthz is 200 after the replacement" 10 test "$(healthz reg3)" = 200
has_nodeid && ok "the Node annotation survived the replacement" || bad "the Node annotation survived the replacement" "$(nodeid_ann)"

# ---- the driver goes away: /healthz turns red -------------------------------------------------------

stop drv
expect "the driver killed: /healthz red within 10 s" 10 is_red reg3
contains "... naming the lost driver" "lost connection" "$(curl -s --max-time 5 "http://127.0.0.1:$(health_port reg3)/healthz")"
stop reg3
check "a red registrar still stops cleanly on SIGTERM" 0 "${RC[reg3]}"
start_driver

# ---- a non-socket file where the socket goes ----------------------------------------------------------

expect "(the kubelet dropped the registration)" 20 no_nodeid
echo "not a socket" >"$SOCK"
out=$("$REG" --csi-address="$WORK/drv/csi.sock" --kubelet-registration-path=/x/csi.sock \
  --plugin-registration-path="$REGDIR" 2>&1)
rc=$?
check "a regular file at the socket path: exit 1" 1 "$rc"
contains "... saying it is not a socket" "is not a socket" "$out"
check "... and the file is left alone" "not a socket" "$(cat "$SOCK")"
rm -f "$SOCK"

# ---- the kubelet reports failure: exit 1 ---------------------------------------------------------------

faults "$WORK/drv" '{"NodeGetInfo": {"fail": {"count": 1, "code": "INTERNAL", "message": "no node info today"}}}'
start_reg reg4
for _ in $(seq 300); do alive reg4 || break; sleep 0.1; done
stop reg4
check "NotifyRegistrationStatus(false): the registrar exits 1" 1 "${RC[reg4]}"
contains "... logging the kubelet's error" "no node info today" "$(grep 'Registration process failed' "$WORK/reg4.log")"
no_nodeid && ok "... and nothing was left registered" || bad "... and nothing was left registered" "$(nodeid_ann)"
faults "$WORK/drv" ""
start_reg reg5
expect "the restarted container registers" 30 has_nodeid
# kubelet-sim has four workers: the duplicate below is only refused once
# reg5's registration is on record, which the notification comes after.
expect "... and hears NotifyRegistrationStatus(true)" 10 grep -q 'registered with the kubelet' "$WORK/reg5.log"

# ---- kubelet-sim tolerates any answer ----------------------------------------------------------------------

fake() {
  local name=$1
  shift
  start "$name" "$TOOL" fake "$REGDIR/$name.sock" "$@"
}
fake fake-type DevicePlugin dev.example.com "" 1.0.0
fake fake-v2 CSIPlugin v2.csi.example.com "" 2.0.0,3.1.0
fake fake-v0 CSIPlugin v0.csi.example.com "" 0.3.0
fake fake-none CSIPlugin none.csi.example.com "" -
fake fake-junk CSIPlugin junk.csi.example.com "" "latest,v1,1.x"
fake fake-dup CSIPlugin "$DRIVER" "$WORK/drv/csi.sock" 1.0.0
fake fake-hang CSIPlugin hang.csi.example.com "" 1.0.0 hang
expect "an unknown plugin type is refused" 20 grep -q 'notify false: no handler registered for plugin type: DevicePlugin' "$WORK/fake-type.log"
expect "only 2.x and 3.x versions are refused" 20 grep -q 'notify false: could not find a highest supported version' "$WORK/fake-v2.log"
expect "a 0.x version is refused" 20 grep -q 'notify false: highest supported version reported by driver is 0.3.0, must be v1.x' "$WORK/fake-v0.log"
expect "no versions at all are refused" 20 grep -q 'notify false: CSI driver reporting empty array for supported versions' "$WORK/fake-none.log"
expect "unparseable versions are refused" 20 grep -q 'notify false: could not find a highest supported version' "$WORK/fake-junk.log"
expect "a second socket for a registered driver with the same version is refused" 20 grep -q 'notify false: Failed to validate plugin' "$WORK/fake-dup.log"
expect "a GetInfo that hangs times out after the kubelet's 1 s" 20 grep -q 'fake-hang.sock: rpc error: code = DeadlineExceeded' "$WORK/sim.log"
for f in fake-type fake-v2 fake-v0 fake-none fake-junk fake-dup fake-hang; do stop "$f"; done
alive sim && ok "kubelet-sim is still running" || bad "kubelet-sim is still running" "$(tail -n 20 "$WORK/sim.log")"
has_nodeid && ok "the real driver stays registered through all of it" || bad "the real driver stays registered through all of it" "$(nodeid_ann)"
expect "refused plugins leave no trace on the Node" 10 test "$(node_json | jq -c '.metadata.labels | keys')" = '["kubernetes.io/hostname","topology.example.com/zone"]'

stop reg5
check "reg5 exits 0" 0 "${RC[reg5]}"
stop sim
check "kubelet-sim exits 0 on SIGTERM" 0 "${RC[sim]}"
stop drv
for n in "${NAMES[@]}"; do
  if grep -q 'ERROR: AddressSanitizer\|runtime error:\|LeakSanitizer' "$WORK/$n.log" 2>/dev/null; then
    bad "$n: sanitizer report" "$(grep -A5 'ERROR\|runtime error' "$WORK/$n.log")"
    cat "$WORK/$n.log"
  fi
done
finish
