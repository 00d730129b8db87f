#!/usr/bin/env bash
# csi-sidecars end to end (#33, first slice): one process hosting the
# provisioner, attacher, resizer and snapshotter controllers of the example
# driver against kube-lite. A claim is provisioned, attached, grown and
# snapshotted by the one process; it elects on one lease; per-controller
# flags and misconfiguration fail fast with one line.
#
#   tests/e2e/test_sidecars.sh <build-dir>
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed"; every
# process started here is stopped with SIGTERM and must exit 0.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
DRV="$B/bin/example-csi-driver"
ALL="$B/bin/csi-sidecars"
WORK=$(mktemp -d)
NS=default
DRIVER=hostpath.csi.example.com
EXPECT_LAST="$WORK/last"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

drv() {
  python3 -c '
import json, sys
try:
    s = json.load(open(sys.argv[1] + "/state/status.json"))
except Exception:
    s = {"volumes": [], "calls": {}}
vols = s.get("volumes", [])
byid = {v["id"]: v for v in vols}
r = eval(sys.argv[2])
print(r if isinstance(r, str) else json.dumps(r, sort_keys=True))' "$WORK/drv" "$1"
}
api() { acurl "$1"; }
post() { acurl -H 'Content-Type: application/json' -X POST --data "$2" "$1" >/dev/null; }
mpatch() { acurl -H 'Content-Type: application/merge-patch+json' -X PATCH --data "$2" "$1" >/dev/null; }

require_tools kubectl python3 curl || { echo "$passed passed, $failed failed"; exit 1; }
[ -x "$ALL" ] && [ -x "$DRV" ] || { bad "csi-sidecars and example-csi-driver are built"; echo "$passed passed, $failed failed"; exit 1; }

# ---- start-up errors: one line, exit 1 ----------------------------------------------------------

fails() { # fails NAME WANT ARGS...: exit 1 with exactly the line WANT
  local name=$1 want=$2 out rc
  shift 2
  out=$("$ALL" "$@" 2>&1)
  rc=$?
  check "$name" "1 $want" "$rc $out"
}
fails "no --controllers" "csi-sidecars: --controllers: name at least one controller"
fails "an unknown controller" 'csi-sidecars: --controllers: unknown controller "foo"' --controllers=attacher,foo
fails "a flag of a controller that is not enabled" \
  "csi-sidecars: --snapshotter-timeout: the snapshotter controller is not enabled (--controllers=attacher)" \
  --controllers=attacher --snapshotter-timeout=3s
fails "a controller's own check names the controller" \
  "csi-sidecars: provisioner: --worker-threads must be at least 1" \
  --controllers=provisioner --provisioner-worker-threads=0
out=$(NODE_NAME=node-1 "$ALL" --controllers=provisioner,attacher --leader-election --provisioner-node-deployment 2>&1)
check "--provisioner-node-deployment beside a controller that elects fails with one line" \
  "1 csi-sidecars: --provisioner-node-deployment turns leader election off, which the other controllers need: run it in a csi-sidecars of its own" \
  "$? $(tail -n 1 <<<"$out")"
fails "--master is one global flag, not a controller's" \
  "csi-sidecars: flag provided but not defined: -provisioner-master" \
  --controllers=provisioner --provisioner-master=http://127.0.0.1:1
contains "--help lists every controller's flags under its prefix" \
  "-attacher-worker-threads int" "$("$ALL" --help 2>&1)"
contains "--help lists the resizer's and the snapshotter's too" "-snapshotter-snapshot-name-prefix" \
  "$("$ALL" --help 2>&1)"

# ---- the world ----------------------------------------------------------------------------------

if ! world_up --controllers binder; then
  echo "$passed passed, $failed failed"
  exit 1
fi
cat >"$WORK/cluster.yaml" <<EOF
apiVersion: v1
kind: Node
metadata:
  name: node-1
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: node-1
spec:
  drivers:
  - name: $DRIVER
    nodeID: node-1
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: vols
provisioner: $DRIVER
allowVolumeExpansion: true
---
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshotClass
metadata:
  name: snaps
driver: $DRIVER
deletionPolicy: Delete
EOF
if K create -f "$WORK/cluster.yaml" >"$WORK/cluster.out" 2>&1; then ok "node, classes created"; else bad "node, classes" "$(cat "$WORK/cluster.out")"; fi

mkdir -p "$WORK/drv/state"
start drv "$DRV" --endpoint "unix://$WORK/drv/csi.sock" --state-dir "$WORK/drv/state" \
  --drivername "$DRIVER" --nodeid node-1 --capacity 20Gi --plugin-caps CONTROLLER_SERVICE,ONLINE \
  --controller-caps CREATE_DELETE_VOLUME,PUBLISH_UNPUBLISH_VOLUME,EXPAND_VOLUME,CREATE_DELETE_SNAPSHOT,LIST_SNAPSHOTS
HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start all "$ALL" --controllers=provisioner,attacher,resizer,snapshotter \
  --csi-address "$WORK/drv/csi.sock" --kubeconfig "$WORK/admin.kubeconfig" --kube-api-qps=100 \
  --kube-api-burst=200 --leader-election "--leader-election-namespace=$NS" \
  --http-endpoint="127.0.0.1:$HTTP_PORT" --timeout=20s \
  --provisioner-worker-threads=4 --attacher-worker-threads=4 --resizer-workers=4 \
  --snapshotter-worker-threads=4 --v=5
lease_of() { K get lease -n "$NS" "$1" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
led() { [ -n "$(lease_of csi-sidecars-hostpath-csi-example-com)" ] || ! alive all; }
if wait_for 60 led && alive all; then ok "csi-sidecars starts and leads"; else bad "csi-sidecars starts" "$(tail -n 20 "$WORK/all.log")"; fi
check "one lease for the process, none of the standalone controllers'" "csi-sidecars-hostpath-csi-example-com" \
  "$(K get lease -n "$NS" -o name 2>&1 | sed 's|.*/||' | grep -v '^hostpath-csi-example-com-provisioner-intents$' | tr '\n' ' ' | sed 's/ $//')"
check "one Detected CSI driver line: one driver connection" 1 "$(grep -c 'Detected CSI driver' "$WORK/all.log")"

# ---- one claim through every controller ---------------------------------------------------------

post "/api/v1/namespaces/$NS/persistentvolumeclaims" '{"apiVersion":"v1","kind":"PersistentVolumeClaim","metadata":{"name":"c1"},"spec":{"accessModes":["ReadWriteOnce"],"storageClassName":"vols","resources":{"requests":{"storage":"1Gi"}}}}'
claim() { api "/api/v1/namespaces/$NS/persistentvolumeclaims/c1" | pyj "$1" | tee "$EXPECT_LAST"; }
bound() { [ "$(claim 'o.get("status", {}).get("phase", "")')" = Bound ]; }
expect "provisioner: the claim is Bound" 30 bound
PV=$(claim 'o["spec"]["volumeName"]')
ev_source() { # the source component of the claim's event with reason $1
  api "/api/v1/namespaces/$NS/events" | pyj '",".join(sorted({e["source"]["component"] for e in o["items"] if e["reason"] == "'"$1"'" and e["involvedObject"]["name"] == "c1"}))'
}
check "the provisioner's events name csi-provisioner as their source, as the standalone binary's" \
  csi-provisioner "$(ev_source ProvisioningSucceeded)"
post /apis/storage.k8s.io/v1/volumeattachments '{"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachment","metadata":{"name":"va-1"},"spec":{"attacher":"'"$DRIVER"'","nodeName":"node-1","source":{"persistentVolumeName":"'"$PV"'"}}}'
attached() { [ "$(api /apis/storage.k8s.io/v1/volumeattachments/va-1 | pyj 'o.get("status", {}).get("attached", False)' | tee "$EXPECT_LAST")" = true ]; }
expect "attacher: the VolumeAttachment is attached" 30 attached
mpatch "/api/v1/namespaces/$NS/persistentvolumeclaims/c1" '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}'
pv_cap() { [ "$(api "/api/v1/persistentvolumes/$PV" | pyj 'o["spec"]["capacity"]["storage"]' | tee "$EXPECT_LAST")" = 2Gi ]; }
expect "resizer: the volume grows to 2Gi" 30 pv_cap
resized_source() { [ -n "$(ev_source FileSystemResizeRequired)$(ev_source VolumeResizeSuccessful)" ]; }
wait_for 10 resized_source
contains "the resizer's events name the resizer of the driver, as the standalone binary's" \
  "external-resizer" "$(ev_source FileSystemResizeRequired)$(ev_source VolumeResizeSuccessful)"
HANDLE=$(api "/api/v1/persistentvolumes/$PV" | pyj 'o["spec"]["csi"]["volumeHandle"]')
VSC=/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents
post "$VSC" '{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent","metadata":{"name":"snap-1"},"spec":{"driver":"'"$DRIVER"'","deletionPolicy":"Delete","volumeSnapshotClassName":"snaps","source":{"volumeHandle":"'"$HANDLE"'"},"volumeSnapshotRef":{"kind":"VolumeSnapshot","apiVersion":"snapshot.storage.k8s.io/v1","name":"vs-1","namespace":"'"$NS"'","uid":"11111111-2222-3333-4444-555555555555"}}}'
snap_ready() { [ "$(api "$VSC/snap-1" | pyj 'o.get("status", {}).get("readyToUse", "")' | tee "$EXPECT_LAST")" = True ] || [ "$(cat "$EXPECT_LAST")" = true ]; }
expect "snapshotter: the content is readyToUse" 30 snap_ready

metrics=$(curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics")
contains "one metrics endpoint: the CSI operations of every controller" 'method_name="/csi.v1.Controller/CreateSnapshot"' "$metrics"
contains "… the provisioner's too" 'method_name="/csi.v1.Controller/CreateVolume"' "$metrics"
contains "… and the attacher's" 'method_name="/csi.v1.Controller/ControllerPublishVolume"' "$metrics"

for p in all drv; do
  stop "$p"
  check "$p exits 0 on SIGTERM" 0 "${RC[$p]}"
done
finish
