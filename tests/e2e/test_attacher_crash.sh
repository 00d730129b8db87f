#!/usr/bin/env bash
# Crash safety of csi-attacher: whatever moment the attacher (or the driver)
# dies at, every VolumeAttachment ends up telling the truth about the
# driver, no finalizer is left behind, and no publication is leaked.
#
#   tests/e2e/test_attacher_crash.sh <build-dir>
#
# kube-lite (plain HTTP, no built-in controllers: the VolumeAttachments are
# made and deleted by this script) + example-csi-driver (node ids node-1 and
# node-2, its state seeded with 200 volumes) + csi-attacher. Nodes worker-1
# and worker-2 carry CSINodes that map them to node-1 and node-2.
#
#  0. 80 PVs get a VolumeAttachment on worker-1 and are attached (no faults).
#  1. With ControllerPublish and ControllerUnpublish slowed to 200 ms, about
#     200 operations are started at once:
#       pv-001..060  (RWX) their worker-1 VAs are deleted: detaches;
#       pv-001..020  also get a worker-2 VA: attaches on a second node;
#       pv-021..040  the PVs are deleted too: their attacher finalizer must
#                    go once the VA is gone;
#       pv-061..070  (RWX, attached) the PVs are deleted, the VAs stay: the
#                    PVs must stay, with the finalizer;
#       pv-071..080  (RWO, attached on worker-1) get a worker-2 VA, which the
#                    driver refuses (FAILED_PRECONDITION): must stay detached;
#       pv-081..160  new VAs on worker-1: attaches;
#       pv-161..200  new VAs on worker-1 (created first), deleted ~0.5 s
#                    later, while attaching.
#     The attacher is SIGKILLed at random moments (every 0.3-1.5 s, at most
#     MAX_KILLS times) and restarted each time; the driver crashes once
#     mid-ControllerPublish and once mid-ControllerUnpublish, both after the
#     call took effect (persisted, no answer), and is restarted. Then the
#     attacher runs undisturbed until the cluster is quiet.
#  2. Checks: every VA has status.attached=true exactly when the driver has
#     the volume published to the VA's node; every driver publication has
#     its VA; deleted VAs are gone; attached VAs carry the finalizer and the
#     node-id annotation, and so do their PVs (finalizer); a deleted PV is
#     gone unless a VA still uses it; the refused attachments show an
#     attachError.
#
# Prints ok/FAIL lines and ends with "N passed, N failed"; on failure the
# differences and the logs' tails. Every process it starts is stopped (the
# attachers it SIGKILLs on purpose excepted) and must exit 0 on SIGTERM;
# sanitizer reports in the children's logs fail a check. Takes ~20-40 s.
# KEEP=1 keeps the work directory.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" 2>/dev/null && pwd || echo "$B")
KL="$B/bin/kube-lite"
DRV="$B/bin/example-csi-driver"
ATT="$B/bin/csi-attacher"
DRIVER_NAME=hostpath.csi.example.com
FIN=external-attacher/hostpath-csi-example-com
NODE_ID_ANN=csi.alpha.kubernetes.io/node-id
MAX_KILLS=${MAX_KILLS:-8}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-60}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/att-crash.XXXXXX")
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
now_ms() {
  local t=${EPOCHREALTIME/./}
  echo $((10#$t / 1000))
}
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

# ---- processes --------------------------------------------------------------------------

# Appending starts (lib.sh's `start` truncates the log): the driver and the
# attacher are restarted many times and every start's output is kept.
DRV_STARTS=0
start_driver() {
  local before
  before=$(grep -c 'serving on' "$WORK/driver.log" 2>/dev/null)
  "$DRV" --endpoint="unix://$WORK/csi.sock" --state-dir="$WORK/state" --nodeid=node-1 \
    --known-nodes=node-2 --plugin-caps=CONTROLLER_SERVICE --capacity=1Pi -v=5 \
    >>"$WORK/driver.log" 2>&1 &
  PID["driver"]=$!
  [ "$DRV_STARTS" -eq 0 ] && NAMES+=(driver)
  DRV_STARTS=$((DRV_STARTS + 1))
  for _ in $(seq 1 300); do
    [ "$(grep -c 'serving on' "$WORK/driver.log" 2>/dev/null)" -gt "${before:-0}" ] && return 0
    alive driver || return 1
    sleep 0.05
  done
  return 1
}

ATT_STARTS=0
start_attacher() {
  echo "==== start #$((ATT_STARTS + 1)) at $(date +%T.%N)" >>"$WORK/attacher.log"
  "$ATT" --kubeconfig="$WORK/admin.kubeconfig" --csi-address="$WORK/csi.sock" \
    --kube-api-qps=500 --kube-api-burst=1000 --retry-interval-start=50ms \
    --retry-interval-max=1s --timeout=2s -v=4 --vmodule=client=5 --max-grpc-log-length=48 \
    >>"$WORK/attacher.log" 2>&1 &
  PID["attacher"]=$!
  [ "$ATT_STARTS" -eq 0 ] && NAMES+=(attacher)
  ATT_STARTS=$((ATT_STARTS + 1))
}

set_faults() { faults "$WORK" "$1"; }

# ---- the world: kube-lite, nodes, PVs, the seeded driver ----------------------------------

mkdir -p "$WORK/state"
start kube-lite "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/admin.kubeconfig" --controllers=
wait_for 20 grep -q 'serving on http' "$WORK/kube-lite.log"
URL=$(sed -n 's/^kube-lite: serving on //p' "$WORK/kube-lite.log")
if [ -n "$URL" ] && alive kube-lite; then ok "kube-lite serves on $URL"; else
  bad "kube-lite starts" "$(cat "$WORK/kube-lite.log")"
  early_exit
fi

# 200 volumes, as if a provisioner had made them: the driver loads them
# from its state file at start.
{
  printf '{"version":1,"volumes":['
  for i in $(seq -f %03g 1 200); do
    [ "$i" = 001 ] || printf ','
    printf '{"id":"vol-%s","name":"seed-%s","capacity_bytes":1048576,"access_type":"mount","parameters":{}}' "$i" "$i"
  done
  printf '],"snapshots":[]}\n'
} >"$WORK/state/state.json"
if start_driver; then ok "example driver serves its 200 seeded volumes"; else
  bad "example driver starts" "$(tail -n 20 "$WORK/driver.log")"
  early_exit
fi

# group NNN: sets G to the label of pv-NNN's group (see the header); no
# subshells or external commands in the loops that write the manifests:
# forks are slow on a loaded machine.
group() {
  local i=$((10#$1))
  if [ "$i" -le 20 ]; then G=c2; elif [ "$i" -le 40 ]; then G=cdel; elif [ "$i" -le 60 ]; then G=c
  elif [ "$i" -le 70 ]; then G=k; elif [ "$i" -le 80 ]; then G=f; elif [ "$i" -le 160 ]; then G=a
  else G=b; fi
}

# va NAME PV NODE GROUP: one VolumeAttachment document
va() {
  printf -- '---\napiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata:\n  name: %s
  labels:\n    group: %s\nspec:\n  attacher: %s\n  nodeName: %s\n  source:
    persistentVolumeName: %s\n' "$1" "$4" "$DRIVER_NAME" "$3" "$2"
}

{
  for n in 1 2; do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: worker-$n
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: worker-$n
spec:
  drivers:
  - name: $DRIVER_NAME
    nodeID: node-$n
    topologyKeys: null
EOF
  done
  for i in $(seq -f %03g 1 200); do
    group "$i"
    mode=ReadWriteMany
    [ "$G" = f ] && mode=ReadWriteOnce
    printf -- '---\napiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: pv-%s
  labels:\n    group: %s\nspec:\n  capacity:\n    storage: 1Mi\n  accessModes: [%s]
  persistentVolumeReclaimPolicy: Retain\n  csi:\n    driver: %s\n    volumeHandle: vol-%s
    fsType: ext4\n' "$i" "$G" "$mode" "$DRIVER_NAME" "$i"
  done
} >"$WORK/world.yaml"
check "2 nodes, 2 CSINodes and 200 PVs created" 204 "$(K create -f "$WORK/world.yaml" 2>&1 | grep -c ' created$')"

# ---- snapshots and counts ------------------------------------------------------------------

# Writes $WORK/{vas,pvs,driver}.json; false when the API did not answer.
snapshot() {
  api /apis/storage.k8s.io/v1/volumeattachments >"$WORK/vas.json" || return 1
  api /api/v1/persistentvolumes >"$WORK/pvs.json" || return 1
  jq -e '.items' "$WORK/vas.json" >/dev/null 2>&1 || return 1
  jq -e '.items' "$WORK/pvs.json" >/dev/null 2>&1 || return 1
  if [ -f "$WORK/state/status.json" ]; then
    cp "$WORK/state/status.json" "$WORK/driver.json"
  else
    echo '{"volumes":[]}' >"$WORK/driver.json"
  fi
  jq -e '.volumes' "$WORK/driver.json" >/dev/null 2>&1
}
# attached_count GROUP...: VAs of those groups with status.attached=true
attached_count() {
  jq --arg g "$*" '($g | split(" ")) as $gs | [.items[] | select((.metadata.labels.group as $x |
    $gs | index($x)) and .status.attached == true)] | length' "$WORK/vas.json"
}
va_count() {
  jq --arg g "$*" '($g | split(" ")) as $gs | [.items[] | select(.metadata.labels.group as $x |
    $gs | index($x))] | length' "$WORK/vas.json"
}
publications() { jq '[.volumes[] | (.published_nodes // [])[]] | length' "$WORK/driver.json"; }

# ---- phase 0: 80 attachments to start from ---------------------------------------------------

{
  for i in $(seq -f %03g 1 80); do
    group "$i"
    va "va-$i-w1" "pv-$i" worker-1 "${G}1"
  done
} >"$WORK/phase0.yaml"
start_attacher
check "80 VolumeAttachments on worker-1 created" 80 "$(K create -f "$WORK/phase0.yaml" 2>&1 | grep -c ' created$')"
phase0_done() { snapshot && [ "$(attached_count c21 cdel1 c1 k1 f1)" -eq 80 ] && [ "$(publications)" -eq 80 ]; }
if wait_for "$PHASE_TIMEOUT" phase0_done; then ok "the 80 are attached (status and driver)"; else
  bad "the 80 attached within ${PHASE_TIMEOUT}s" "attached $(attached_count c21 cdel1 c1 k1 f1), publications $(publications)
$(grep -v '^I' "$WORK/attacher.log" | tail -n 10)"
  early_exit
fi

# ---- phase 1: ~200 operations under SIGKILLs and driver crashes ---------------------------------

DELAY='"delay_ms": 200'
# The driver's first crash is mid-Unpublish (its 45th, of 60 detaches and
# then 40), the second mid-Publish (the 20th after its restart: a restarted
# driver counts afresh).
set_faults "{\"ControllerPublishVolume\": {$DELAY},
  \"ControllerUnpublishVolume\": {$DELAY, \"crash\": {\"at\": 45, \"when\": \"after\"}}}"
FAULTS_AFTER_CRASH1="{\"ControllerPublishVolume\": {$DELAY, \"crash\": {\"at\": 20, \"when\": \"after\"}},
  \"ControllerUnpublishVolume\": {$DELAY}}"
FAULTS_AFTER_CRASH2="{\"ControllerPublishVolume\": {$DELAY}, \"ControllerUnpublishVolume\": {$DELAY}}"

KILLS=0
ATT_EXITS=0
DRV_CRASHES=0
DRV_BAD_EXIT=
NO_KILLS=0
next_kill_ms() { echo $(($(now_ms) + 300 + RANDOM % 1201)); }
NEXT_KILL=$(next_kill_ms)

# One round of supervision: restart a crashed driver (with the next fault
# rules) or an exited attacher (it exits when it loses the driver), and
# SIGKILL the attacher when due.
supervise() {
  if ! alive driver; then
    stop driver
    if [ "${RC[driver]}" = 137 ]; then
      DRV_CRASHES=$((DRV_CRASHES + 1))
      note "driver crashed (fault injection, crash #$DRV_CRASHES); restarting it"
      if [ "$DRV_CRASHES" -eq 1 ]; then set_faults "$FAULTS_AFTER_CRASH1"; else set_faults "$FAULTS_AFTER_CRASH2"; fi
    else
      DRV_BAD_EXIT="$DRV_BAD_EXIT ${RC[driver]}"
      note "driver exited with status ${RC[driver]} (not an injected crash); restarting it"
    fi
    start_driver || note "driver restart failed: $(tail -n 3 "$WORK/driver.log")"
  fi
  if ! alive attacher; then
    stop attacher
    ATT_EXITS=$((ATT_EXITS + 1))
    start_attacher
  fi
  if [ "$NO_KILLS" -eq 0 ] && [ "$KILLS" -lt "$MAX_KILLS" ] && [ "$(now_ms)" -ge "$NEXT_KILL" ]; then
    stop attacher KILL 2>/dev/null # no "Killed" job notice
    KILLS=$((KILLS + 1))
    start_attacher
    NEXT_KILL=$(next_kill_ms)
  fi
}

{
  # Those to be deleted mid-attach first: the attacher takes them on first.
  for i in $(seq -f %03g 161 200); do va "va-$i-w1" "pv-$i" worker-1 b1; done
  for i in $(seq -f %03g 1 20); do va "va-$i-w2" "pv-$i" worker-2 e2; done
  for i in $(seq -f %03g 71 80); do va "va-$i-w2" "pv-$i" worker-2 f2; done
  for i in $(seq -f %03g 81 160); do va "va-$i-w1" "pv-$i" worker-1 a1; done
} >"$WORK/phase1.yaml"
t0=$SECONDS
# delete_all PATH SELECTOR: one deletecollection request; prints its status
delete_all() {
  curl -sS --max-time 30 -X DELETE "$URL$1?labelSelector=$2" | jq -r '.status'
}
check "150 VolumeAttachments created at once" 150 "$(K create -f "$WORK/phase1.yaml" 2>&1 | grep -c ' created$')"
check "60 attached VolumeAttachments deleted (deletecollection)" Success \
  "$(delete_all /apis/storage.k8s.io/v1/volumeattachments 'group+in+(c21,cdel1,c1)')"
# The 40 to delete mid-attach: as soon as 10 of their ControllerPublish
# calls have reached the driver (it logs each on arrival; they take 200 ms),
# all 40 are deleted in one request.
b_arrived() {
  supervise
  [ "$(grep -o 'ControllerPublishVolume {"volume_id":"vol-\(1[6-9][0-9]\|200\)"' "$WORK/driver.log" |
    sort -u | wc -l)" -ge 10 ]
}
wait_for 30 b_arrived
snapshot && B_STATE=$(jq -r --arg f "$FIN" '[.items[] | select(.metadata.labels.group == "b1")] |
  "\(map(select(.status.attached == true)) | length) attached, \(map(select(.status.attached != true and
  ((.metadata.finalizers // []) | index($f)))) | length) with the finalizer but not attached yet"' "$WORK/vas.json")
check "40 new VolumeAttachments deleted while attaching" Success \
  "$(delete_all /apis/storage.k8s.io/v1/volumeattachments group%3Db1)"
note "of those, just before: $B_STATE"
check "20 PVs being detached and 10 attached PVs deleted" Success \
  "$(delete_all /api/v1/persistentvolumes 'group+in+(cdel,k)')"

# Quiet: deleted VAs gone, the rest settled, the PVs that must go gone.
quiet() {
  snapshot || return 1
  [ "$(va_count c21 cdel1 c1 b1)" -eq 0 ] || return 1
  [ "$(attached_count e2 a1 k1)" -eq 110 ] || return 1
  [ "$(jq '[.items[] | select(.metadata.labels.group == "f2" and .status.attachError.message != null)]
    | length' "$WORK/vas.json")" -eq 10 ] || return 1
  [ "$(jq '[.items[] | select(.metadata.labels.group == "cdel")] | length' "$WORK/pvs.json")" -eq 0 ] || return 1
  [ "$(publications)" -eq 120 ]
}
deadline=$((SECONDS + PHASE_TIMEOUT))
while [ "$SECONDS" -lt "$deadline" ]; do
  # The driver's second crash (at the 20th ControllerPublish after its restart) may come
  # after the cluster looks quiet (the refused worker-2 retries keep calling): wait for it,
  # or the driver would die after this loop and nobody would restart it.
  [ "$KILLS" -ge "$MAX_KILLS" ] && [ "$DRV_CRASHES" -ge 2 ] && quiet && break
  # Until MAX_KILLS, keep killing even when quiet was reached: the
  # attacher must also survive SIGKILLs while idle.
  supervise
  sleep 0.1
done
if quiet; then ok "quiet after $KILLS SIGKILLs ($((SECONDS - t0)) s)"; else
  bad "quiet within ${PHASE_TIMEOUT}s" "deleted VAs left $(va_count c21 cdel1 c1 b1), attached $(attached_count e2 a1 k1) of 110, publications $(publications) (want 120)"
fi
note "attacher: $KILLS SIGKILLs, $ATT_EXITS exits by itself (driver loss), $ATT_STARTS starts"
if [ "$KILLS" -ge 3 ]; then ok "the attacher was SIGKILLed mid-work ($KILLS times)"; else bad "the attacher was SIGKILLed at least 3 times" "$KILLS"; fi
check "the driver crashed mid-ControllerPublish and mid-ControllerUnpublish, after the call took effect" 2 "$DRV_CRASHES"
check "the driver exited only through the injected crashes" "" "$DRV_BAD_EXIT"

# A last undisturbed stretch: nothing may change any more.
sleep 1
snapshot

# ---- phase 2: the invariants ---------------------------------------------------------------

# "handle@node-id" of every driver publication
jq -r '.volumes[] | .id as $v | (.published_nodes // [])[] | "\($v)@\(.)"' "$WORK/driver.json" |
  sort >"$WORK/l.pubs"
# name, handle@node-id, attached, deleting, finalizer, node-id annotation
jq -r --slurpfile pvs "$WORK/pvs.json" '
  ($pvs[0].items | map({key: .metadata.name, value: .spec.csi.volumeHandle}) | from_entries) as $h |
  {"worker-1": "node-1", "worker-2": "node-2"} as $ids |
  .items[] | [.metadata.name,
    "\($h[.spec.source.persistentVolumeName] // ("no-pv:" + .spec.source.persistentVolumeName))@\($ids[.spec.nodeName])",
    (.status.attached // false | tostring), (.metadata.deletionTimestamp != null | tostring),
    ((.metadata.finalizers // []) | index($f) != null | tostring),
    (.metadata.annotations[$a] // "")] | @tsv' --arg f "$FIN" --arg a "$NODE_ID_ANN" \
  "$WORK/vas.json" | sort >"$WORK/l.vas"

wrong=$(awk -F'\t' 'NR == FNR {p[$1] = 1; next}
  { pub = ($2 in p) ? "true" : "false"; if (pub != $3) print $1 ": status.attached=" $3 ", driver published (" $2 ")=" pub }' \
  "$WORK/l.pubs" "$WORK/l.vas")
check "every VolumeAttachment is attached exactly when the driver has it published to that node" "" "$wrong"
orphans=$(awk -F'\t' 'NR == FNR {v[$2] = 1; next} !($1 in v) {print $1}' "$WORK/l.vas" "$WORK/l.pubs")
check "the driver holds no publication without a VolumeAttachment" "" "$orphans"
check "no VolumeAttachment is left deleting" "" "$(awk -F'\t' '$4 == "true" {print $1}' "$WORK/l.vas")"
check "the deleted VolumeAttachments are gone, the others are there" "0 120 10" \
  "$(va_count c21 cdel1 c1 b1) $(va_count e2 a1 k1 f1) $(va_count f2)"
check "every attached VolumeAttachment has the attacher finalizer" "" \
  "$(awk -F'\t' '$3 == "true" && $5 != "true" {print $1}' "$WORK/l.vas")"
check "every attached VolumeAttachment has its node id annotation" "" \
  "$(awk -F'\t' '$3 == "true" {split($2, a, "@"); if ($6 != a[2]) print $1 ": [" $6 "] want " a[2]}' "$WORK/l.vas")"
refused=$(jq -r '.items[] | select(.metadata.labels.group == "f2") |
  "\(.status.attached // false) \(.status.attachError.message // "" | test("FailedPrecondition|FAILED_PRECONDITION|already published"))"' \
  "$WORK/vas.json" | sort | uniq -c | sed 's/^ *//')
check "the 10 refused worker-2 attachments of RWO volumes: not attached, attachError says why" "10 false true" "$refused"

# PVs: which VA uses which, from the snapshot
jq -r '.items[] | .spec.source.persistentVolumeName' "$WORK/vas.json" | sort -u >"$WORK/l.used"
jq -r --arg f "$FIN" '.items[] | [.metadata.name, (.metadata.deletionTimestamp != null | tostring),
  ((.metadata.finalizers // []) | index($f) != null | tostring)] | @tsv' "$WORK/pvs.json" | sort >"$WORK/l.pvs"
check "the 20 deleted PVs no VA uses are gone, the 10 in use are kept" "0 10" \
  "$(jq '[.items[] | select(.metadata.labels.group == "cdel")] | length' "$WORK/pvs.json") $(jq '[.items[] | select(.metadata.labels.group == "k")] | length' "$WORK/pvs.json")"
check "no PV is left deleting without a VolumeAttachment using it" "" \
  "$(awk -F'\t' 'NR == FNR {u[$1] = 1; next} $2 == "true" && !($1 in u) {print $1}' "$WORK/l.used" "$WORK/l.pvs")"
check "the deleted PVs still in use keep the attacher finalizer" "" \
  "$(awk -F'\t' '$2 == "true" && $3 != "true" {print $1}' "$WORK/l.pvs")"
noref=$(jq -r '.items[] | select(.status.attached == true) | .spec.source.persistentVolumeName' "$WORK/vas.json" |
  sort -u | awk -F'\t' 'NR == FNR {if ($3 == "true") f[$1] = 1; next} !($1 in f) {print $1}' "$WORK/l.pvs" -)
check "every PV of an attached VolumeAttachment has the attacher finalizer" "" "$noref"

# ---- stop, and look for sanitizer reports ----------------------------------------------------

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
# --max-grpc-log-length=48: every logged CSI response is cut to 48 characters
resp=$(grep -c 'GRPC response: ' "$WORK/attacher.log")
long=$(grep -o 'GRPC response: .*' "$WORK/attacher.log" | awk '{sub(/^GRPC response: /, ""); if (length($0) > 48) n++} END {print n + 0}')
check "--max-grpc-log-length=48: CSI responses logged (>0), none longer than 48" "yes 0" \
  "$([ "$resp" -gt 0 ] && echo yes || echo "no ($resp)") $long"
if [ "$failed" -gt 0 ]; then
  echo "---- attacher log (warnings and errors), last lines:"
  grep -v '^I' "$WORK/attacher.log" | tail -n 30
  echo "---- driver log, last lines:"
  grep -v 'ControllerPublishVolume {\|ControllerUnpublishVolume {' "$WORK/driver.log" | tail -n 15
fi
note "total $((SECONDS - t0)) s from the first operation"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
