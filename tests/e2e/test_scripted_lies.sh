#!/usr/bin/env bash
# Replays, deterministically, sequences of lies the hostile test found with a
# random seed: kube-lite (plain HTTP on loopback) behind
# tests/hostile/hostile_proxy.py with --scale 0 and a --script, so the proxy
# tells exactly the lies listed and nothing else, and the sidecar under test
# must converge once they are told.
#
#   tests/e2e/test_scripted_lies.sh <build-dir>
#
# csi-snapshotter (hostile seed 1251649813): after CreateSnapshot and the
# content's status write, the removal of the being-created annotation is
# refused with a 409; the error status written then (readyToUse false, as
# upstream's) takes effect but its answer is garbled (a snapshotHandle of the
# wrong type). The watch event of the sidecar's first write (the annotation)
# is garbled as well: the informer refuses it and lists again 0.8 s later,
# so no event of the sync's own writes queues the content again and the next
# sync is the failure's retry. Before the fix that sync decided on our last
# usable answer (readyToUse true), dropped the annotation and ended the work
# as done; the relist's readyToUse false woke no sync: the content stayed
# readyToUse false for good. Hostile seed 664144540: the same with the
# error write's answer undecodable, which the client reports as an error
# although the write took effect; scenario lies2 tells it as a 500 after the
# write.
#
# Hostile seed 2072689225 (scenario lies3): a write of a deleting content
# fails (the clear-status write after DeleteSnapshot, refused with a 409
# here), so the next sync reads the content back; that GET's answer has
# annotations of the wrong type. Before the fix the read-back took it: the
# being-deleted annotation was hidden, the sync found a ready content with
# nothing to do and ended as done, and the content kept its status and its
# finalizer for good (nothing changed on the server to wake a sync).
#
# csi-attacher (scenario lies4, found by reading the code after the seeds
# above): a VolumeAttachment that another finalizer keeps is detached; the
# status write that says so is refused. Before the fix our finalizer went
# first, so the retry found nothing of ours to do and status.attached stayed
# true for good; now the status is written first and the retry detaches
# again.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${CSI_BUILD_DIR:-build}}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
KL="$B/bin/kube-lite"
DRV="$B/bin/example-csi-driver"
SNAP="$B/bin/csi-snapshotter"
ATT="$B/bin/csi-attacher"
CSI_CALL="$B/tests/e2e/csi_call"
PROXY="$ROOT/tests/hostile/hostile_proxy.py"
WORK=$(mktemp -d)
EXPECT_LAST="$WORK/last"
DRIVER=lies.csi.example.com
VSC=/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
trap cleanup EXIT

require_tools python3 curl
require_built "$KL" "$DRV" "$SNAP" "$ATT" "$CSI_CALL"

start kube-lite "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/admin.kubeconfig"
kl_http_up() { grep -q 'serving on http://' "$WORK/kube-lite.log" || ! alive kube-lite; }
if ! wait_for 20 kl_http_up || ! alive kube-lite; then
  bad "kube-lite starts" "$(cat "$WORK/kube-lite.log")"
  finish
fi
SERVER=$(sed -n 's/^kube-lite: serving on //p' "$WORK/kube-lite.log")
# api PATH / post PATH JSON: straight to kube-lite, never through the proxy
api() { curl -s --max-time 10 "$SERVER$1"; }
post() { curl -s --max-time 10 -H 'Content-Type: application/json' -X POST --data "$2" "$SERVER$1" >/dev/null; }

# proxy NAME SCRIPT: a proxy telling only the lies of SCRIPT; its URL in $PROXY_URL
proxy() {
  start "$1" python3 "$PROXY" --upstream "$SERVER" --seed 1 --scale 0 --script "$2"
  local up="grep -q 'serving on http://' '$WORK/$1.log'"
  if ! wait_for 20 sh -c "$up" || ! alive "$1"; then
    bad "the proxy $1 starts" "$(cat "$WORK/$1.log")"
    finish
  fi
  PROXY_URL=$(sed -n 's/^hostile-proxy: serving on //p' "$WORK/$1.log")
  sed "s#server: .*#server: $PROXY_URL#" "$WORK/admin.kubeconfig" >"$WORK/$1.kubeconfig"
}

mkdir -p "$WORK/drv/state"
SOCK="$WORK/drv/csi.sock"
start drv "$DRV" --endpoint "unix://$SOCK" --state-dir "$WORK/drv/state" --drivername "$DRIVER" --nodeid node-1
wait_for 20 test -S "$SOCK" || { bad "the example driver starts" "$(cat "$WORK/drv.log")"; finish; }

# ---- csi-snapshotter: a blind status write, a refused annotation removal, a blind error write ----

post /apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses '{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotClass","metadata":{"name":"lies"},"driver":"'$DRIVER'","deletionPolicy":"Delete"}'
VOL=$("$CSI_CALL" "unix://$SOCK" create-volume lies-vol 2>&1)
contains "the driver has a volume to snapshot" "vol-" "$VOL"
# scenario NAME ERROR-WRITE-LIE: the lies above on content snapcontent-NAME,
# the error status write meeting ERROR-WRITE-LIE
scenario() {
  local n=$1 how=$2 C=$VSC/snapcontent-$1
  local err='{"method": "PATCH", "path": "'$C'/status$", "nth": 2, "do": "wrongtype", "at": "status.snapshotHandle"}'
  [ "$how" = fail-after ] && err='{"method": "PATCH", "path": "'$C'/status$", "nth": 2, "do": "fail-after"}'
  proxy "proxy-$n" '[
    {"method": "PATCH", "path": "'$C'$", "nth": 2, "do": "refuse"}, '"$err"',
    {"method": "WATCH", "path": "volumesnapshotcontents$", "match": "volumesnapshot-being-created", "do": "wrongtype", "at": "object.spec.driver"}]'
  start "snap-$n" "$SNAP" --csi-address "$SOCK" --kubeconfig "$WORK/proxy-$n.kubeconfig" \
    --retry-interval-start=100ms --retry-interval-max=2s -v=5
  snap_started() { grep -qs 'Starting CSI snapshotter' "$WORK/snap-$n.log" || ! alive "snap-$n"; }
  if wait_for 30 snap_started && alive "snap-$n"; then ok "$n: csi-snapshotter starts behind the scripted proxy"; else bad "$n: csi-snapshotter starts" "$(tail -n 20 "$WORK/snap-$n.log")"; fi
  post "$VSC" '{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent","metadata":{"name":"snapcontent-'"$n"'"},"spec":{"driver":"'$DRIVER'","deletionPolicy":"Delete","volumeSnapshotClassName":"lies","source":{"volumeHandle":"'"$VOL"'"},"volumeSnapshotRef":{"kind":"VolumeSnapshot","apiVersion":"snapshot.storage.k8s.io/v1","name":"vs-'"$n"'","namespace":"default","uid":"11111111-2222-3333-4444-'"$3"'"}}}'
  told() { [ "$(grep -c 'scripted' "$WORK/proxy-$n.log")" -ge "$1" ]; }
  expect "$n: the proxy told all three lies" 30 told 3
  state() {
    api "$C" | python3 -c '
import json, sys
o = json.load(sys.stdin)
st = o.get("status", {})
ann = o["metadata"].get("annotations", {})
print(st.get("readyToUse"), bool(st.get("snapshotHandle")), "snapshot.storage.kubernetes.io/volumesnapshot-being-created" in ann)' >"$EXPECT_LAST" 2>&1
    [ "$(cat "$EXPECT_LAST")" = "True True False" ]
  }
  expect "$n: the content ends readyToUse with its handle and without the being-created annotation" 30 state
  stop "snap-$n"
  check "$n: csi-snapshotter exits 0 on SIGTERM" "0" "${RC[snap-$n]}"
}
scenario lies wrongtype 555555555555
contains "lies: the sidecar saw that the error write's answer was unusable" "the answer is not used" "$(cat "$WORK/snap-lies.log")"
# The same with the error write answered 500 although it took effect.
scenario lies2 fail-after 666666666666

# ---- csi-snapshotter: a deletion's blind write, then a garbled read-back --------------------------

n=lies3 C=$VSC/snapcontent-lies3
# The finalizer a bound content carries; the sidecar removes it once the
# snapshot is deleted and the status cleared.
BOUND=snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection
proxy "proxy-$n" '[
  {"method": "PATCH", "path": "'$C'/status$", "nth": 2, "do": "refuse"},
  {"method": "GET", "path": "'$C'$", "nth": 1, "do": "wrongtype", "at": "metadata.annotations"}]'
start "snap-$n" "$SNAP" --csi-address "$SOCK" --kubeconfig "$WORK/proxy-$n.kubeconfig" \
  --retry-interval-start=100ms --retry-interval-max=2s -v=5
if wait_for 30 snap_started && alive "snap-$n"; then ok "$n: csi-snapshotter starts behind the scripted proxy"; else bad "$n: csi-snapshotter starts" "$(tail -n 20 "$WORK/snap-$n.log")"; fi
post "$VSC" '{"apiVersion":"snapshot.storage.k8s.io/v1","kind":"VolumeSnapshotContent","metadata":{"name":"snapcontent-'"$n"'","finalizers":["'"$BOUND"'"]},"spec":{"driver":"'$DRIVER'","deletionPolicy":"Delete","volumeSnapshotClassName":"lies","source":{"volumeHandle":"'"$VOL"'"},"volumeSnapshotRef":{"kind":"VolumeSnapshot","apiVersion":"snapshot.storage.k8s.io/v1","name":"vs-'"$n"'","namespace":"default","uid":"11111111-2222-3333-4444-777777777777"}}}'
ready3() {
  api "$C" | python3 -c '
import json, sys
o = json.load(sys.stdin)
st = o.get("status", {})
print(st.get("readyToUse"), st.get("snapshotHandle", ""), "snapshot.storage.kubernetes.io/volumesnapshot-being-created" in o["metadata"].get("annotations", {}))' >"$EXPECT_LAST" 2>&1
  [[ "$(cat "$EXPECT_LAST")" == "True snap-"*" False" ]]
}
expect "$n: the content is made ready first (no lie told yet)" 30 ready3
SNAP_ID=$(cut -d' ' -f2 "$EXPECT_LAST")
# As the snapshot-controller deletes a content: the being-deleted annotation, then the delete.
curl -s --max-time 10 -H 'Content-Type: application/merge-patch+json' -X PATCH --data \
  '{"metadata":{"annotations":{"snapshot.storage.kubernetes.io/volumesnapshot-being-deleted":"yes"}}}' "$SERVER$C" >/dev/null
curl -s --max-time 10 -X DELETE "$SERVER$C" >/dev/null
expect "$n: the proxy told both lies" 30 told 2
gone3() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$SERVER$C")" = 404 ]; }
expect "$n: the deleting content is gone (status cleared, finalizer removed)" 30 gone3
check "$n: the driver no longer holds its snapshot $SNAP_ID (DeleteSnapshot)" "False" \
  "$(drv_eval "$WORK/drv" "str('$SNAP_ID' in snapbyid)")"
contains "$n: the sidecar refused the garbled read-back" "error get snapshot content from api server" "$(cat "$WORK/snap-$n.log")"
stop "snap-$n"
check "$n: csi-snapshotter exits 0 on SIGTERM" "0" "${RC[snap-$n]}"

# ---- csi-attacher: a refused status write while detaching a VA another finalizer keeps -------

n=lies4 VA=/apis/storage.k8s.io/v1/volumeattachments/va-lies4
post /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"worker-1"}}'
post /apis/storage.k8s.io/v1/csinodes '{"apiVersion":"storage.k8s.io/v1","kind":"CSINode","metadata":{"name":"worker-1"},"spec":{"drivers":[{"name":"'$DRIVER'","nodeID":"node-1"}]}}'
post /api/v1/persistentvolumes '{"apiVersion":"v1","kind":"PersistentVolume","metadata":{"name":"pv-lies4"},"spec":{"capacity":{"storage":"1Gi"},"accessModes":["ReadWriteOnce"],"persistentVolumeReclaimPolicy":"Retain","csi":{"driver":"'$DRIVER'","volumeHandle":"'"$VOL"'"}}}'
proxy "proxy-$n" '[{"method": "PATCH", "path": "'$VA'/status$", "nth": 2, "do": "refuse"}]'
start "att-$n" "$ATT" --csi-address "$SOCK" --kubeconfig "$WORK/proxy-$n.kubeconfig" \
  --retry-interval-start=100ms --retry-interval-max=2s -v=5
att_started() { grep -qs 'attacher started' "$WORK/att-$n.log" || ! alive "att-$n"; }
if wait_for 30 att_started && alive "att-$n"; then ok "$n: csi-attacher starts behind the scripted proxy"; else bad "$n: csi-attacher starts" "$(tail -n 20 "$WORK/att-$n.log")"; fi
post /apis/storage.k8s.io/v1/volumeattachments '{"apiVersion":"storage.k8s.io/v1","kind":"VolumeAttachment","metadata":{"name":"va-lies4","finalizers":["example.com/keep"]},"spec":{"attacher":"'$DRIVER'","nodeName":"worker-1","source":{"persistentVolumeName":"pv-lies4"}}}'
# va_is WANT: "<attached> <finalizers>" of the VA
va_is() {
  api "$VA" | python3 -c '
import json, sys
o = json.load(sys.stdin)
print(o.get("status", {}).get("attached"), ",".join(o["metadata"].get("finalizers", [])))' >"$EXPECT_LAST" 2>&1
  [ "$(cat "$EXPECT_LAST")" = "$1" ]
}
expect "$n: the VolumeAttachment is attached (no lie told yet)" 30 va_is "True example.com/keep,external-attacher/$(echo "$DRIVER" | tr . -)"
curl -s --max-time 10 -X DELETE "$SERVER$VA" >/dev/null
expect "$n: the proxy told its lie" 30 told 1
expect "$n: detached: status.attached false, only the other finalizer left" 30 va_is "False example.com/keep"
check "$n: the driver no longer publishes the volume" "[]" \
  "$(drv_eval "$WORK/drv" "byid.get('$VOL', {}).get('published_nodes', [])")"
stop "att-$n"
check "$n: csi-attacher exits 0 on SIGTERM" "0" "${RC[att-$n]}"
curl -s --max-time 10 -H 'Content-Type: application/merge-patch+json' -X PATCH --data '{"metadata":{"finalizers":null}}' "$SERVER$VA" >/dev/null

finish
