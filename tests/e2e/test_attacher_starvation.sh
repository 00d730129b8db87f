#!/usr/bin/env bash
# Attaches are not starved by a detach backlog (upstream
# external-attacher#761: one FIFO queue makes a new attach wait behind
# every detach queued before it).
#
#   tests/e2e/test_attacher_starvation.sh <build-dir>
#
# kube-lite (plain HTTP, no built-in controllers) + example-csi-driver
# (seeded with 510 volumes) + csi-attacher --worker-threads=2.
#  1. 500 VolumeAttachments are created and attached (no injected delay).
#  2. Every ControllerPublish and ControllerUnpublish now takes DELAY_MS
#     (20 ms): the 500 are deleted in one deletecollection request, a
#     backlog of ~500 x 20 ms / 2 workers plus the API writes. Once the
#     first detaches have
#     reached the driver (and the attacher's metrics show the detach
#     queue's depth and its oldest item's wait), 10 new VolumeAttachments
#     are created.
#  3. Ordering, not timing: all 10 are attached while detaches of the
#     backlog are still outstanding (VolumeAttachments of the 500 still
#     exist when the 10th is seen attached), and in the driver's own log
#     the last ControllerPublish of the 10 arrives before the backlog's last
#     ControllerUnpublish. Then the backlog drains: the 500 are gone, the
#     driver holds exactly the 10 new publications.
#
# Prints ok/FAIL lines and ends with "N passed, N failed". Every process it
# starts is stopped and must exit 0 on SIGTERM; sanitizer reports in the
# children's logs fail a check. Takes ~20-40 s. KEEP=1 keeps the work
# directory.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" 2>/dev/null && pwd || echo "$B")
KL="$B/bin/kube-lite"
DRV="$B/bin/example-csi-driver"
ATT="$B/bin/csi-attacher"
DRIVER_NAME=hostpath.csi.example.com
OLD=${OLD:-500}
NEW=${NEW:-10}
DELAY_MS=${DELAY_MS:-20}
WORKERS=${WORKERS:-2}
TIMEOUT=${TIMEOUT:-90}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/att-starve.XXXXXX")
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

on_exit() {
  stop_all
  if [ -n "${KEEP:-}" ]; then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap on_exit EXIT

note() { echo "     $1"; }
K() { kubectl --kubeconfig "$WORK/admin.kubeconfig" --cache-dir "$WORK/cache" --request-timeout=30s "$@"; }
api() { curl -sS --max-time 10 "$URL$1"; }
early_exit() {
  echo "$passed passed, $failed failed"
  exit 1
}

for t in kubectl curl jq; do
  command -v "$t" >/dev/null || { bad "$t is installed (hack/install-deps.sh)"; early_exit; }
done
for b in "$KL" "$DRV" "$ATT"; do
  [ -x "$b" ] || { bad "binary $b exists (make B=$B)"; early_exit; }
done

TOTAL=$((OLD + NEW))
mkdir -p "$WORK/state"
{
  printf '{"version":1,"volumes":['
  for i in $(seq 1 "$TOTAL"); do
    [ "$i" -eq 1 ] || printf ','
    printf '{"id":"vol-%04d","name":"seed-%04d","capacity_bytes":1048576,"access_type":"mount","parameters":{}}' "$i" "$i"
  done
  printf '],"snapshots":[]}\n'
} >"$WORK/state/state.json"

start kube-lite "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/admin.kubeconfig" --controllers=
wait_for 20 grep -q 'serving on http' "$WORK/kube-lite.log"
URL=$(sed -n 's/^kube-lite: serving on //p' "$WORK/kube-lite.log")
if [ -n "$URL" ] && alive kube-lite; then ok "kube-lite serves on $URL"; else
  bad "kube-lite starts" "$(cat "$WORK/kube-lite.log")"
  early_exit
fi
# -v=5: the driver logs every request as it arrives, in arrival order.
start driver "$DRV" --endpoint="unix://$WORK/csi.sock" --state-dir="$WORK/state" --nodeid=node-1 \
  --plugin-caps=CONTROLLER_SERVICE --capacity=1Pi --sync=false -v=5
if wait_for 30 grep -q 'serving on' "$WORK/driver.log" && alive driver; then
  ok "example driver serves its $TOTAL seeded volumes"
else
  bad "example driver starts" "$(tail -n 20 "$WORK/driver.log")"
  early_exit
fi

{
  cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: worker-1
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: worker-1
spec:
  drivers:
  - name: $DRIVER_NAME
    nodeID: node-1
    topologyKeys: null
EOF
  # printf, not cat: no fork per object (forks are slow on a loaded machine)
  for i in $(seq -f %04g 1 "$TOTAL"); do
    printf -- '---\napiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: pv-%s\nspec:
  capacity:\n    storage: 1Mi\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Retain
  csi:\n    driver: %s\n    volumeHandle: vol-%s\n' "$i" "$DRIVER_NAME" "$i"
  done
} >"$WORK/world.yaml"
check "a node, its CSINode and $TOTAL PVs created" "$((TOTAL + 2))" \
  "$(K create -f "$WORK/world.yaml" 2>&1 | grep -c ' created$')"

# vas FROM TO GROUP: VolumeAttachments va-FROM..va-TO on worker-1
vas() {
  local i
  for i in $(seq -f %04g "$1" "$2"); do
    printf -- '---\napiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata:\n  name: va-%s
  labels:\n    group: %s\nspec:\n  attacher: %s\n  nodeName: worker-1\n  source:
    persistentVolumeName: pv-%s\n' "$i" "$3" "$DRIVER_NAME" "$i"
  done
}
vas 1 "$OLD" old >"$WORK/old.yaml"
vas "$((OLD + 1))" "$TOTAL" new >"$WORK/new.yaml"

HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start attacher "$ATT" --kubeconfig="$WORK/admin.kubeconfig" --csi-address="$WORK/csi.sock" \
  --worker-threads="$WORKERS" --kube-api-qps=1000 --kube-api-burst=1000 \
  --retry-interval-start=50ms --retry-interval-max=1s --timeout=10s -v=2 \
  --http-endpoint="127.0.0.1:$HTTP_PORT"
# metric NAME: its value for the detach queue, from the attacher's /metrics
metric() {
  curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" |
    awk -v m="$1{queue=\"csi-attacher-va-detach\"}" '$1 == m {print $2}'
}

# counts GROUP: "existing attached" VolumeAttachments of GROUP
counts() {
  api "/apis/storage.k8s.io/v1/volumeattachments?labelSelector=group%3D$1" |
    jq -r '[(.items | length), ([.items[] | select(.status.attached == true)] | length)] | map(tostring) | join(" ")'
}
publications() { jq '[.volumes[] | (.published_nodes // [])[]] | length' "$WORK/state/status.json" 2>/dev/null; }
calls() { jq ".calls.$1 // 0" "$WORK/state/status.json" 2>/dev/null; }

# ---- 1. 500 attached ------------------------------------------------------------------------

check "$OLD VolumeAttachments created" "$OLD" "$(K create -f "$WORK/old.yaml" 2>&1 | grep -c ' created$')"
old_attached() { [ "$(counts old)" = "$OLD $OLD" ] && [ "$(publications)" = "$OLD" ]; }
if wait_for "$TIMEOUT" old_attached; then ok "all $OLD attached"; else
  bad "all $OLD attached within ${TIMEOUT}s" "existing/attached: $(counts old), publications $(publications)
$(grep -v '^I' "$WORK/attacher.log" | tail -n 10)"
  early_exit
fi

# ---- 2. the backlog, then the attaches ----------------------------------------------------------

faults "$WORK" "{\"ControllerPublishVolume\": {\"delay_ms\": $DELAY_MS}, \"ControllerUnpublishVolume\": {\"delay_ms\": $DELAY_MS}}"
t0=$SECONDS
code=$(curl -sS -o "$WORK/dc.json" -w '%{http_code}' --max-time 30 -X DELETE \
  "$URL/apis/storage.k8s.io/v1/volumeattachments?labelSelector=group%3Dold")
check "the $OLD VolumeAttachments deleted in one deletecollection request" 200 "$code"
u0=$(calls ControllerUnpublishVolume)
backlog_started() { [ "$(($(calls ControllerUnpublishVolume) - u0))" -ge 5 ]; }
expect "the first detaches reach the driver" 30 backlog_started
depth=$(metric csi_attacher_queue_depth)
oldest=$(metric csi_attacher_queue_oldest_waiting_seconds)
if awk -v d="${depth:-0}" -v o="${oldest:-0}" 'BEGIN {exit !(d > 0 && o > 0)}'; then
  ok "the backlog is visible: csi_attacher_queue_depth $depth, oldest waiting ${oldest}s (detach queue)"
else
  bad "the backlog is visible in the attacher's metrics" "depth [$depth], oldest waiting [$oldest]"
fi
check "$NEW new VolumeAttachments created" "$NEW" "$(K create -f "$WORK/new.yaml" 2>&1 | grep -c ' created$')"

# Poll: the moment all NEW are attached, how many of the OLD still exist.
left=""
end=$((SECONDS + TIMEOUT))
while [ "$SECONDS" -lt "$end" ]; do
  n=$(counts new)
  if [ "$n" = "$NEW $NEW" ]; then
    read -r left _ <<<"$(counts old)"
    break
  fi
  sleep 0.1
done
if [ -n "$left" ]; then
  ok "all $NEW new VolumeAttachments attached ($((SECONDS - t0)) s after the deletes)"
  if [ "$left" -gt 0 ]; then
    ok "... while the detach backlog was not done ($left of $OLD deleted VolumeAttachments still there)"
  else
    bad "the $NEW attaches finish before the detach backlog" "no deleted VolumeAttachment was left when the last attach was seen"
  fi
else
  bad "all $NEW new VolumeAttachments attached within ${TIMEOUT}s" "new existing/attached: $(counts new); old left: $(counts old)"
fi

# The driver's view: request arrival order in its log.
last_pub_line() { grep -n 'ControllerPublishVolume {' "$WORK/driver.log" | tail -n 1 | cut -d: -f1; }
last_unpub_line() { grep -n 'ControllerUnpublishVolume {' "$WORK/driver.log" | tail -n 1 | cut -d: -f1; }

old_gone() { [ "$(counts old)" = "0 0" ] && [ "$(publications)" = "$NEW" ]; }
if wait_for "$TIMEOUT" old_gone; then ok "the backlog drains: the $OLD are gone ($((SECONDS - t0)) s after the deletes)"; else
  bad "the backlog drained within ${TIMEOUT}s" "old existing/attached: $(counts old), publications $(publications)"
fi
sleep 0.5
lp=$(last_pub_line)
lu=$(last_unpub_line)
after=$(awk -v p="${lp:-0}" 'NR > p && /ControllerUnpublishVolume \{/' "$WORK/driver.log" | wc -l)
if [ -n "$lp" ] && [ -n "$lu" ] && [ "$lp" -lt "$lu" ]; then
  ok "in the driver's log the last ControllerPublish comes before the last ControllerUnpublish ($after unpublishes after it)"
else
  bad "in the driver's log the last ControllerPublish comes before the last ControllerUnpublish" "last publish at line ${lp:-none}, last unpublish at line ${lu:-none}"
fi
check "the driver holds exactly the $NEW new publications" "$NEW" "$(publications)"
pubs=$(jq -r '.volumes[] | select((.published_nodes // []) | length > 0) | .id' "$WORK/state/status.json" | sort | tr '\n' ' ')
check "... of the new volumes" "$(for i in $(seq "$((OLD + 1))" "$TOTAL"); do printf 'vol-%04d ' "$i"; done)" "$pubs"
check "every deleted VolumeAttachment is gone, every new one is attached" "0 0 / $NEW $NEW" "$(counts old) / $(counts new)"

# ---- stop ------------------------------------------------------------------------------------

stop attacher
check "the attacher exits 0 on SIGTERM" 0 "${RC[attacher]}"
stop driver
check "the driver exits 0 on SIGTERM" 0 "${RC[driver]}"
stop kube-lite
check "kube-lite exits 0 on SIGTERM" 0 "${RC[kube-lite]}"
SAN_RE='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer'
san=0
for log in attacher.log driver.log kube-lite.log; do
  if grep -Eq "$SAN_RE" "$WORK/$log"; then
    san=1
    echo "---- sanitizer report in $log:"
    grep -E -A 40 "$SAN_RE" "$WORK/$log" | head -n 120
  fi
done
check "no sanitizer report from any child" 0 "$san"
if [ "$failed" -gt 0 ]; then
  echo "---- attacher log (warnings and errors), last lines:"
  grep -v '^I' "$WORK/attacher.log" | tail -n 30
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
