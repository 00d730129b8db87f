#!/usr/bin/env bash
# Keys whose syncs keep failing, at a high rate, do not keep a sidecar from
# serving its other keys: csi-attacher and csi-provisioner with two workers
# each and fast retries (--retry-interval-start=10ms, --retry-interval-max=200ms).
#
#   tests/e2e/test_failing_keys.sh build
#
# kube-lite only (WORLD is ignored): plain HTTP on loopback, its PV binder and
# no attach/detach stand-in (the script makes the VolumeAttachments) +
# example-csi-driver (on a unix socket, seeded with the volumes of the
# healthy static PVs) + csi-attacher + csi-provisioner, /metrics on loopback.
#  1. Attacher: 40 VolumeAttachments that cannot attach: 20 name a PV that
#     does not exist (the attacher fails), 20 a PV whose volume the driver does
#     not know (ControllerPublishVolume answers NOT_FOUND). Once their retries
#     pass 10 a key (workqueue_retries_total of csi-attacher-va), 5 healthy
#     ones are created: all attached within 30 s, while every failing one
#     fails again afterwards (a later status.attachError.time) and the retries
#     keep growing. The 40 are deleted: gone, their retries stop, the 5 stay;
#     then the 5 and the PVs go, the driver holds no publication.
#  2. Provisioner: 40 claims that cannot be provisioned: 20 of a class whose
#     provisioner secret does not exist (the provisioner fails), 20 of 1 PiB
#     (CreateVolume answers OUT_OF_RANGE). Once their retries pass 10 a key
#     (workqueue_retries_total of claims), 5 healthy claims are created: all
#     Bound within 30 s, while every failing claim fails again afterwards (the
#     provisioner's log) and stays Pending. The 40 are deleted: gone, their
#     retries stop, no volume made for them; then the 5 go with their volumes.
# Prints ok/FAIL lines and ends with "N passed, N failed". Every process it
# starts is stopped and must exit 0 on SIGTERM; a sanitizer report in a log
# fails a check. Takes ~15-25 s. KEEP_WORK=1 keeps the work directory.
# shellcheck disable=SC2317 # the predicates are called through expect and wait_for
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-build}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" 2>/dev/null && pwd || echo "$B")
DRV="$B/bin/example-csi-driver"
ATT="$B/bin/csi-attacher"
PROV="$B/bin/csi-provisioner"
DRIVER_NAME=hostpath.csi.example.com
FAILING=20 # of each kind: 2 x 20 failing keys per sidecar
GOOD=5
DEADLINE=${DEADLINE:-30} # healthy keys are served within it (a convergence bound, not a benchmark)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/failing-keys.XXXXXX")
NS=default
EXPECT_LAST="$WORK/last"
WORLD=kube-lite # its flags and counters are kube-lite's
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

require_tools kubectl python3 curl
require_built "$B/bin/kube-lite" "$DRV" "$ATT" "$PROV"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# retries PORT QUEUE: workqueue_retries_total of QUEUE in the sidecar's /metrics on PORT
retries() {
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk -v p="workqueue_retries_total{name=\"$2\"}" 'index($0, p) == 1 {s += $NF} END {print s + 0}'
}
retries_above() { retries "$1" "$2" >"$EXPECT_LAST"; [ "$(cat "$EXPECT_LAST")" -gt "$3" ]; }
# retries_settle PORT QUEUE: no retry in the last second
retries_settle() {
  local a b
  a=$(retries "$1" "$2")
  sleep 1
  b=$(retries "$1" "$2")
  echo "$a -> $b" >"$EXPECT_LAST"
  [ "$a" = "$b" ]
}
# drv DIR EXPR: EXPR over the driver in DIR (lib.sh's drv_eval; drv_calls uses it)
drv() { drv_eval "$1" "$2"; }
# list PATH GROUP EXPR: EXPR over the items (bound to o) of the objects labelled group=GROUP
list() { acurl "$1?labelSelector=group%3D$2" | pyj "(lambda o: $3)(o['items'])"; }
# both FUNCTION GROUP1 GROUP2: FUNCTION's answers for the two groups, on one line
both() { echo "$("$1" "$2") $("$1" "$3")"; }
# eq WANT COMMAND...: COMMAND prints WANT (the last output in $EXPECT_LAST)
eq() {
  local want=$1
  shift
  "$@" >"$EXPECT_LAST" 2>&1
  [ "$(cat "$EXPECT_LAST")" = "$want" ]
}
VAS=/apis/storage.k8s.io/v1/volumeattachments
PVCS=/api/v1/namespaces/$NS/persistentvolumeclaims
# vas GROUP: "existing attached" VolumeAttachments of GROUP
vas() { list "$VAS" "$1" '"%d %d" % (len(o), len([i for i in o if i.get("status", {}).get("attached")]))'; }
# claims GROUP: "existing bound" claims of GROUP
claims() { list "$PVCS" "$1" '"%d %d" % (len(o), len([i for i in o if i.get("status", {}).get("phase") == "Bound"]))'; }
publications() { drv "$WORK" 'sorted(v["id"] for v in vols if v.get("published_nodes"))'; }
seq2() { seq -f %02g 1 "$1"; }

# ---- the world ---------------------------------------------------------------------------

world_up --controllers binder || finish
mkdir -p "$WORK/state"
{
  printf '{"version":1,"volumes":['
  for i in $(seq 1 "$GOOD"); do
    [ "$i" -eq 1 ] || printf ','
    printf '{"id":"vol-%02d","name":"seed-%02d","capacity_bytes":1048576,"access_type":"mount","parameters":{}}' "$i" "$i"
  done
  printf '],"snapshots":[]}\n'
} >"$WORK/state/state.json"
start driver "$DRV" --endpoint="unix://$WORK/csi.sock" --state-dir="$WORK/state" --nodeid=node-1 \
  --plugin-caps=CONTROLLER_SERVICE --capacity=100Gi --sync=false
if wait_for 30 grep -q 'serving on' "$WORK/driver.log" && alive driver; then ok "example driver serves"; else
  bad "example driver starts" "$(tail -n 20 "$WORK/driver.log")"
  finish
fi

{
  cat <<EOF
apiVersion: v1
kind: Node
metadata: {name: worker-1}
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: worker-1}
spec:
  drivers: [{name: $DRIVER_NAME, nodeID: node-1}]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: good}
provisioner: $DRIVER_NAME
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: nosecret}
provisioner: $DRIVER_NAME
parameters:
  csi.storage.k8s.io/provisioner-secret-name: \${pvc.name}-secret
  csi.storage.k8s.io/provisioner-secret-namespace: \${pvc.namespace}
EOF
  # pv NAME HANDLE: a static PV of the driver
  pv() { printf -- '---\napiVersion: v1\nkind: PersistentVolume\nmetadata: {name: %s}\nspec:\n  capacity: {storage: 1Mi}\n  accessModes: [ReadWriteOnce]\n  storageClassName: static\n  persistentVolumeReclaimPolicy: Retain\n  csi: {driver: %s, volumeHandle: %s}\n' "$1" "$DRIVER_NAME" "$2"; }
  for i in $(seq2 "$GOOD"); do pv "pv-good-$i" "vol-$i"; done
  for i in $(seq2 "$FAILING"); do pv "pv-novol-$i" "missing-$i"; done
} >"$WORK/world.yaml"
check "a node, its CSINode, 2 classes and $((GOOD + FAILING)) static PVs created" "$((GOOD + FAILING + 4))" \
  "$(K create -f "$WORK/world.yaml" 2>&1 | grep -c ' created$')"

APORT=$(free_port)
PPORT=$(free_port)
FAST=(--kubeconfig="$WORK/admin.kubeconfig" --csi-address="$WORK/csi.sock" --worker-threads=2
  --retry-interval-start=10ms --retry-interval-max=200ms --timeout=10s
  --kube-api-qps=1000 --kube-api-burst=1000 -v=2)
start attacher "$ATT" "${FAST[@]}" --http-endpoint="127.0.0.1:$APORT"
start provisioner "$PROV" "${FAST[@]}" --http-endpoint="127.0.0.1:$PPORT"
for s in attacher provisioner; do
  if wait_for 30 grep -q "$s started" "$WORK/$s.log" && alive "$s"; then ok "$s starts"; else
    bad "$s starts" "$(tail -n 20 "$WORK/$s.log")"
    finish
  fi
done

# ---- 1. the attacher -------------------------------------------------------------------------

# va NAME PV GROUP
va() { printf -- '---\napiVersion: storage.k8s.io/v1\nkind: VolumeAttachment\nmetadata:\n  name: %s\n  labels: {group: %s}\nspec:\n  attacher: %s\n  nodeName: worker-1\n  source: {persistentVolumeName: %s}\n' "$1" "$3" "$DRIVER_NAME" "$2"; }
for i in $(seq2 "$FAILING"); do va "va-nopv-$i" "pv-nopv-$i" nopv; va "va-novol-$i" "pv-novol-$i" novol; done >"$WORK/va-bad.yaml"
for i in $(seq2 "$GOOD"); do va "va-good-$i" "pv-good-$i" good; done >"$WORK/va-good.yaml"
check "$((2 * FAILING)) failing VolumeAttachments created" "$((2 * FAILING))" \
  "$(K create -f "$WORK/va-bad.yaml" 2>&1 | grep -c ' created$')"
expect "their syncs fail over and over: retries of csi-attacher-va pass 10 a key" 60 \
  retries_above "$APORT" csi-attacher-va "$((20 * FAILING))"
# errs GROUP TEXT: how many VAs of GROUP are unattached with TEXT in status.attachError
errs() { list "$VAS" "$1" "str(len([i for i in o if not i.get('status', {}).get('attached') and '$2' in i.get('status', {}).get('attachError', {}).get('message', '')]))"; }
expect "each VA of a missing PV says so in status.attachError" 10 eq "$FAILING" errs nopv "PersistentVolume pv-nopv-"
expect "each VA of a volume the driver lacks shows its NOT_FOUND" 10 eq "$FAILING" errs novol "code = NotFound"
r0=$(retries "$APORT" csi-attacher-va)
p0=$(drv_calls "$WORK" ControllerPublishVolume)

check "$GOOD healthy VolumeAttachments created" "$GOOD" "$(K create -f "$WORK/va-good.yaml" 2>&1 | grep -c ' created$')"
t0=$SECONDS
if wait_for "$DEADLINE" eq "$GOOD $GOOD" vas good; then
  ok "all $GOOD healthy VolumeAttachments attached within ${DEADLINE}s ($((SECONDS - t0)) s)"
else
  bad "all $GOOD healthy VolumeAttachments attached within ${DEADLINE}s" "existing/attached: $(cat "$EXPECT_LAST")"
fi
T=$(date -u +%Y-%m-%dT%H:%M:%SZ)
# failed_after GROUP: the VAs of GROUP whose last attach error is older than $T
failed_after() { list "$VAS" "$1" "' '.join(sorted(i['metadata']['name'] for i in o if i.get('status', {}).get('attachError', {}).get('time', '') <= '$T'))"; }
expect "every VA of a missing PV fails again after that (a later attachError.time)" 10 eq "" failed_after nopv
expect "every VA of a volume the driver lacks fails again after that" 10 eq "" failed_after novol
check "none of the $((2 * FAILING)) is attached" "$FAILING 0 $FAILING 0" "$(vas nopv) $(vas novol)"
r1=$(retries "$APORT" csi-attacher-va)
p1=$(drv_calls "$WORK" ControllerPublishVolume)
if [ "$((r1 - r0))" -ge "$((4 * FAILING))" ] && [ "$((p1 - p0))" -ge "$((2 * FAILING))" ]; then
  ok "the failures went on meanwhile: $((r1 - r0)) retries, $((p1 - p0)) ControllerPublishVolume calls"
else
  bad "the failures went on meanwhile" "retries $r0 -> $r1, ControllerPublishVolume calls $p0 -> $p1"
fi
check "the driver publishes exactly the $GOOD healthy volumes" \
  "$(drv "$WORK" "sorted('vol-%02d' % i for i in range(1, $GOOD + 1))")" "$(publications)"

for g in nopv novol; do acurl -X DELETE "$VAS?labelSelector=group%3D$g" >/dev/null; done
expect "the $((2 * FAILING)) failing VolumeAttachments are deleted and gone" 30 eq "0 0 0 0" both vas nopv novol
expect "their retries stop" 10 retries_settle "$APORT" csi-attacher-va
check "the $GOOD healthy ones stay attached" "$GOOD $GOOD" "$(vas good)"
acurl -X DELETE "$VAS?labelSelector=group%3Dgood" >/dev/null
expect "the healthy ones are detached and gone" 30 eq "0 0" vas good
check "the driver holds no publication" "[]" "$(publications)"
acurl -X DELETE /api/v1/persistentvolumes >/dev/null
no_pvs() { acurl /api/v1/persistentvolumes | pyj 'str(len(o["items"]))'; }
expect "the static PVs are deleted (the attacher drops its finalizer)" 30 eq 0 no_pvs

# ---- 2. the provisioner ---------------------------------------------------------------------

# pvc NAME CLASS SIZE GROUP
pvc() { printf -- '---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: %s\n  namespace: %s\n  labels: {group: %s}\nspec:\n  accessModes: [ReadWriteOnce]\n  storageClassName: %s\n  resources: {requests: {storage: %s}}\n' "$1" "$NS" "$4" "$2" "$3"; }
for i in $(seq2 "$FAILING"); do pvc "c-nosec-$i" nosecret 1Gi nosec; pvc "c-big-$i" good 1Pi big; done >"$WORK/pvc-bad.yaml"
for i in $(seq2 "$GOOD"); do pvc "c-good-$i" good 1Gi good; done >"$WORK/pvc-good.yaml"
check "$((2 * FAILING)) failing claims created" "$((2 * FAILING))" "$(K create -f "$WORK/pvc-bad.yaml" 2>&1 | grep -c ' created$')"
expect "their syncs fail over and over: retries of claims pass 10 a key" 60 \
  retries_above "$PPORT" claims "$((20 * FAILING))"
# unlogged GROUP FROM TEXT: the claims of GROUP without a failure line (with TEXT) in the
# provisioner's log after line FROM
unlogged() {
  local n
  tail -n +"$(($2 + 1))" "$WORK/provisioner.log" >"$WORK/log-tail" # a file: grep -q may stop early
  for n in $(list "$PVCS" "$1" "' '.join(sorted(i['metadata']['name'] for i in o))"); do
    grep -q "persistentvolumeclaims/$n: .*$3" "$WORK/log-tail" || printf '%s ' "$n"
  done
}
expect "each claim of the class without its secret fails for the secret" 10 eq "" unlogged nosec 0 "error getting secret"
expect "each 1 PiB claim fails with the driver's OUT_OF_RANGE" 10 eq "" unlogged big 0 "code = OutOfRange"
r0=$(retries "$PPORT" claims)
c0=$(drv_calls "$WORK" CreateVolume)

check "$GOOD healthy claims created" "$GOOD" "$(K create -f "$WORK/pvc-good.yaml" 2>&1 | grep -c ' created$')"
t0=$SECONDS
if wait_for "$DEADLINE" eq "$GOOD $GOOD" claims good; then
  ok "all $GOOD healthy claims Bound within ${DEADLINE}s ($((SECONDS - t0)) s)"
else
  bad "all $GOOD healthy claims Bound within ${DEADLINE}s" "existing/bound: $(cat "$EXPECT_LAST")"
fi
L=$(wc -l <"$WORK/provisioner.log")
expect "every claim without its secret fails again after that" 10 eq "" unlogged nosec "$L" "error getting secret"
expect "every 1 PiB claim fails again after that" 10 eq "" unlogged big "$L" "code = OutOfRange"
pending() { list "$PVCS" "$1" "str(len([i for i in o if i.get('status', {}).get('phase', 'Pending') == 'Pending' and not i['spec'].get('volumeName')]))"; }
check "the $((2 * FAILING)) stay Pending, unbound" "$FAILING $FAILING" "$(pending nosec) $(pending big)"
r1=$(retries "$PPORT" claims)
c1=$(drv_calls "$WORK" CreateVolume)
if [ "$((r1 - r0))" -ge "$((4 * FAILING))" ] && [ "$((c1 - c0))" -ge "$((2 * FAILING))" ]; then
  ok "the failures went on meanwhile: $((r1 - r0)) retries, $((c1 - c0)) CreateVolume calls"
else
  bad "the failures went on meanwhile" "retries $r0 -> $r1, CreateVolume calls $c0 -> $c1"
fi
good_pvs() { list "$PVCS" good "sorted(i['spec'].get('volumeName', '') for i in o)"; }
check "the driver made exactly the volumes of the $GOOD healthy claims" "$(good_pvs)" \
  "$(drv "$WORK" 'sorted(v["name"] for v in vols if not v["name"].startswith("seed-"))')"

for g in nosec big; do acurl -X DELETE "$PVCS?labelSelector=group%3D$g" >/dev/null; done
expect "the $((2 * FAILING)) failing claims are deleted and gone" 30 eq "0 0 0 0" both claims nosec big
expect "their retries stop" 10 retries_settle "$PPORT" claims
check "the $GOOD healthy claims stay Bound" "$GOOD $GOOD" "$(claims good)"
acurl -X DELETE "$PVCS?labelSelector=group%3Dgood" >/dev/null
expect "the healthy claims go with their PVs (reclaim Delete)" 30 eq 0 no_pvs
expect "and their volumes: the driver holds only its $GOOD seeded ones" 20 eq "$GOOD" drv "$WORK" 'str(len(vols))'

# ---- the end ---------------------------------------------------------------------------------

stop_all
for n in "${NAMES[@]}"; do check "$n exits 0 on SIGTERM" 0 "${RC[$n]:-none}"; done
SAN_RE='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer'
for n in "${NAMES[@]}"; do
  if grep -Eq "$SAN_RE" "$WORK/$n.log"; then
    bad "$n: no sanitizer report" "$(grep -E -A 40 "$SAN_RE" "$WORK/$n.log")"
  else
    ok "$n: no sanitizer report"
  fi
done
finish
