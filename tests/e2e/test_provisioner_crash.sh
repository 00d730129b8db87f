#!/usr/bin/env bash
# worlds: kube-lite kubernetes
# Crash safety of csi-provisioner: no volume is leaked or lost, whatever
# moment the provisioner or the driver dies at.
#
#   [WORLD=kubernetes] tests/e2e/test_provisioner_crash.sh <build-dir>
#
# kube-lite (plain HTTP, binder on) or, with WORLD=kubernetes, the real
# control plane 1.20 (HTTPS, its PV binder and protection controllers) +
# example-csi-driver + csi-provisioner. Every fault is injected in the
# provisioner (CSI_PROVISIONER_CRASH_AT, SIGKILL) or the driver
# (faults.json), so the scenario is the same in both worlds.
#
# Before its first CreateVolume a claim's intent is written to the
# provisioner's intent record (the Lease hostpath-csi-example-com-provisioner-intents,
# one write for many claims); that record alone must let a successor finish
# or undo every create, also for claims deleted meanwhile.
#
#  1. 200 PVCs are created at once (one `kubectl apply -f`). The provisioner
#     is SIGKILLed at random moments (every 0.3-1.5 s) and restarted each
#     time, until every claim is Bound; about one start in three also kills
#     itself at a named point (CSI_PROVISIONER_CRASH_AT, test-only): the
#     n-th time the record holds a claim but its CreateVolume was not sent
#     ("intent"), or the n-th time CreateVolume answered but no PV was made
#     ("create"). CreateVolume is slowed (200 ms) so that kills land while
#     calls are in flight, and the driver itself crashes mid-CreateVolume
#     twice through faults.json (crash at the N-th call before it took
#     effect, then after it took effect) and is restarted on its persisted
#     state. Then: every PVC is bound to exactly one PV of its own, every
#     PV's volumeHandle is a volume of the driver, the driver holds exactly
#     one volume per PV (no duplicate, no leak), no claim carries a
#     finalizer of ours, and the record ends empty after a quiet period.
#  2. A batch of 12 more claims (all in flight at once) is created
#     with CreateVolume slowed to 3 s, for a provisioner that kills itself
#     when the first of those calls answers ("create": between CreateVolume
#     and the PV create). Once every call reached the driver and the record
#     holds every claim, the claims are deleted (they go at once: no
#     finalizer), so their volumes are made for claims that no longer
#     exist, by a provisioner that dies. Its successor must undo them from
#     the record alone. Then every other claim is deleted; the same kills go
#     on, and the driver crashes twice mid-DeleteVolume (before, after).
#     Then: the driver holds no volume, no PV or PVC is left (so none with a
#     finalizer), and the record is empty.
#
# Prints ok/FAIL lines and ends with "N passed, N failed"; on failure it
# prints the difference (claims without PV, extra driver volumes, leftover
# finalizers) and the tail of the logs. Every process it starts is stopped
# with SIGTERM at the end (except the provisioners it SIGKILLs on purpose);
# sanitizer reports found in the children's logs are printed (tests/run.sh
# counts them as failures) and fail a check here too. Takes ~60-70 s plain,
# ~120 s with ASan (2 cores shared with other suites; the two quiet periods
# that let the record empty itself take ~6 s each), ~130 s plain on the real
# control plane (its start included); each phase is bounded by
# PHASE_TIMEOUT (70 s; 150 s on the real control plane).
# KEEP=1 (or KEEP_WORK=1) keeps the work directory (logs, state, the real
# control plane's audit log) for a look afterwards.
set -uo pipefail

B=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
bin() {
  if [ -x "$B/bin/$1" ]; then echo "$B/bin/$1"; else echo "$ROOT/$B/bin/$1"; fi
}
KL=$(bin kube-lite)
DRV=$(bin example-csi-driver)
PROV=$(bin csi-provisioner)
N=${N:-200}
# The late batch is smaller than --worker-threads (16) and than the calls
# the example driver serves at once while each sleeps in its injected delay
# (15 of its 16 threads), so all of it is in flight together.
LATE=${LATE:-12}
# The real control plane binds every claim through kube-controller-manager's PV binder (four
# writes per claim, one worker) and each restarted provisioner lists through kube-apiserver:
# phase 1 took 49 s there on a loaded machine, 9 s on kube-lite. Its bound is twice as wide.
if [ "${WORLD:-kube-lite}" = kubernetes ]; then PHASE_TIMEOUT=${PHASE_TIMEOUT:-150}; else
  PHASE_TIMEOUT=${PHASE_TIMEOUT:-70}; fi
DRIVER_NAME=hostpath.csi.example.com
IN_PROGRESS=external-provisioner.volume.kubernetes.io/provisioning-in-progress
RECORD=/apis/coordination.k8s.io/v1/namespaces/default/leases/hostpath-csi-example-com-provisioner-intents
RECORD_ANN=external-provisioner.volume.kubernetes.io/intents

WORK=$(mktemp -d "${TMPDIR:-/tmp}/prov-crash.XXXXXX")
# world_up, world_down, acurl, on_real; the checks below are this suite's own
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"
# lib.sh's kl_up waits for "serving on https://": this suite's kube-lite serves plain HTTP
kl_up() { grep -q 'serving on http' "$WORK/kube-lite.log" || ! alive kube-lite; }
DRV_PID=
PROV_PID=
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() {
  failed=$((failed + 1))
  echo "FAIL $1"
  [ $# -gt 1 ] && [ -n "$2" ] && printf '%s\n' "$2" | sed 's/^/     /'
  return 0
}
# check NAME EXPECTED ACTUAL [DETAIL]
check() {
  if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "want [$2] got [$3]${4:+
$4}"; fi
}
note() { echo "     $1"; }

# Stops a child with SIGTERM (SIGKILL after 10 s); its exit status in TERM_RC.
TERM_RC=
term() {
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    # A zombie is reaped by wait below.
    [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" = Z ] && break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null && [ "$(ps -o stat= -p "$pid" 2>/dev/null | cut -c1)" != Z ]; then
    echo "process $pid did not stop on SIGTERM within 10 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  TERM_RC=$?
}

cleanup() {
  # Normally everything is stopped already; this is for early exits.
  [ -n "$PROV_PID" ] && term "$PROV_PID"
  [ -n "$DRV_PID" ] && term "$DRV_PID"
  stop_all
  world_down
  if [ -n "${KEEP:-}" ] || [ "${KEEP_WORK:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

now_ms() {
  local t=${EPOCHREALTIME/./}
  echo $((10#$t / 1000))
}

api() { acurl -S "$1"; }
K() { kubectl --kubeconfig "$WORK/admin.kubeconfig" --cache-dir "$WORK/kcache" --request-timeout=30s "$@"; }

# ---- processes ----------------------------------------------------------------------

DRV_STARTS=0
start_driver() {
  local before
  before=$(grep -c 'serving on' "$WORK/driver.log" 2>/dev/null)
  before=${before:-0}
  "$DRV" --endpoint="unix://$WORK/csi.sock" --state-dir="$WORK/state" --nodeid=node-1 \
    --plugin-caps=CONTROLLER_SERVICE --capacity=1Pi -v=5 >>"$WORK/driver.log" 2>&1 &
  DRV_PID=$!
  DRV_STARTS=$((DRV_STARTS + 1))
  for _ in $(seq 1 200); do
    [ "$(grep -c 'serving on' "$WORK/driver.log" 2>/dev/null)" -gt "$before" ] && return 0
    kill -0 "$DRV_PID" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

PROV_STARTS=0
# RANDOM_CRASH=1: most starts get a random self-kill point; CRASH_NEXT: the
# point of the next start only (CSI_PROVISIONER_CRASH_AT=<point>:<n>).
RANDOM_CRASH=0
CRASH_NEXT=
start_prov() {
  local crash=$CRASH_NEXT
  CRASH_NEXT=
  if [ -z "$crash" ] && [ "$RANDOM_CRASH" = 1 ]; then
    case $((RANDOM % 6)) in
      0) crash="intent:$((5 + RANDOM % 20))" ;;
      1) crash="create:$((5 + RANDOM % 20))" ;;
    esac
  fi
  echo "==== start #$((PROV_STARTS + 1)) at $(date +%T.%N) crash point [${crash:-none}]" >>"$WORK/prov.log"
  CSI_PROVISIONER_CRASH_AT=$crash "$PROV" --kubeconfig="$WORK/admin.kubeconfig" --csi-address="$WORK/csi.sock" \
    --worker-threads=16 --kube-api-qps=500 --kube-api-burst=1000 \
    --retry-interval-start=50ms --retry-interval-max=1s --timeout=4s >>"$WORK/prov.log" 2>&1 &
  PROV_PID=$!
  PROV_STARTS=$((PROV_STARTS + 1))
}
# self_kills POINT: how often a provisioner killed itself there so far
self_kills() { grep -c "CSI_PROVISIONER_CRASH_AT: killed at $1 " "$WORK/prov.log"; }
# record_names: the claim names (sorted) the intent record holds; "?" when unreadable
record_names() {
  api "$RECORD" | jq -r --arg a "$RECORD_ANN" '.metadata.annotations[$a] | fromjson |
    .entries[].claim.metadata.name' 2>/dev/null | sort || echo "?"
}
record_empty() { local r; r=$(api "$RECORD" | jq -r --arg a "$RECORD_ANN" '.metadata.annotations[$a] | fromjson | .entries | length' 2>/dev/null); [ "$r" = 0 ]; }

# set_faults JSON: installed atomically (the driver re-reads it on its next call)
set_faults() {
  printf '%s\n' "$1" >"$WORK/state/faults.json.tmp"
  mv -f "$WORK/state/faults.json.tmp" "$WORK/state/faults.json"
}

# ---- state snapshots -------------------------------------------------------------------

# Writes $WORK/{pvcs,pvs,driver}.json; false when the API did not answer.
snapshot() {
  api /api/v1/namespaces/default/persistentvolumeclaims >"$WORK/pvcs.json" || return 1
  api /api/v1/persistentvolumes >"$WORK/pvs.json" || return 1
  jq -e '.items' "$WORK/pvcs.json" >/dev/null 2>&1 || return 1
  jq -e '.items' "$WORK/pvs.json" >/dev/null 2>&1 || return 1
  if [ -f "$WORK/state/status.json" ]; then
    cp "$WORK/state/status.json" "$WORK/driver.json"
  else
    echo '{"volumes":[]}' >"$WORK/driver.json"
  fi
}

# "bound total in-progress" of the claims in the last snapshot
claim_counts() {
  jq -r --arg f "$IN_PROGRESS" '[(.items | map(select(.status.phase == "Bound")) | length),
    (.items | length), (.items | map(select((.metadata.finalizers // []) | index($f))) | length)]
    | map(tostring) | join(" ")' "$WORK/pvcs.json"
}

count_items() { jq '.items | length' "$1"; }
driver_volumes() { jq '.volumes | length' "$WORK/driver.json"; }

# ---- the chaos loop --------------------------------------------------------------------

KILLS=0
PROV_EXITS=0
DRV_CRASHES=0
# Fault rules installed after the driver's 1st and 2nd crash in this phase.
FAULTS_AFTER_CRASH1=
FAULTS_AFTER_CRASH2=
DRV_BAD_EXIT=

NO_KILLS=0 # 1: supervise without the random SIGKILLs
next_kill_ms() { echo $(($(now_ms) + 300 + RANDOM % 1201)); }

# One round of supervision: restart a crashed driver (with the next fault
# rules) or an exited provisioner, and SIGKILL the provisioner when due.
supervise() {
  if [ -n "$DRV_PID" ] && ! kill -0 "$DRV_PID" 2>/dev/null; then
    wait "$DRV_PID" 2>/dev/null
    local rc=$?
    DRV_PID=
    if [ "$rc" -eq 137 ]; then
      DRV_CRASHES=$((DRV_CRASHES + 1))
      echo "     driver crashed (fault injection, crash #$DRV_CRASHES); restarting it"
      if [ "$PHASE_CRASHES" -eq 0 ]; then
        set_faults "$FAULTS_AFTER_CRASH1"
      else
        set_faults "$FAULTS_AFTER_CRASH2"
      fi
      PHASE_CRASHES=$((PHASE_CRASHES + 1))
    else
      DRV_BAD_EXIT="$DRV_BAD_EXIT $rc"
      echo "     driver exited with status $rc (not an injected crash); restarting it"
    fi
    start_driver || echo "     driver restart failed: $(tail -n 3 "$WORK/driver.log")"
  fi
  if [ -n "$PROV_PID" ] && ! kill -0 "$PROV_PID" 2>/dev/null; then
    wait "$PROV_PID" 2>/dev/null
    PROV_EXITS=$((PROV_EXITS + 1))
    start_prov
  fi
  if [ "$NO_KILLS" -eq 0 ] && [ "$(now_ms)" -ge "$NEXT_KILL" ]; then
    kill -KILL "$PROV_PID" 2>/dev/null
    wait "$PROV_PID" 2>/dev/null
    KILLS=$((KILLS + 1))
    start_prov
    NEXT_KILL=$(next_kill_ms)
  fi
}

# chaos COND: supervise until COND succeeds (checked on a fresh snapshot)
# or PHASE_TIMEOUT passes. The provisioner left running at the end is not
# killed, so the final state is one it reached by itself.
chaos() {
  local cond=$1 deadline=$(($(now_ms) + PHASE_TIMEOUT * 1000))
  NEXT_KILL=$(next_kill_ms)
  while [ "$(now_ms)" -lt "$deadline" ]; do
    if snapshot && "$cond"; then
      return 0
    fi
    supervise
    sleep 0.1
  done
  return 1
}

# ---- the checks --------------------------------------------------------------------

# Lists for the diffs, from the last snapshot.
lists() {
  jq -r '.items[] | [.metadata.name, .metadata.uid, (.spec.volumeName // ""),
    (.status.phase // "")] | @tsv' "$WORK/pvcs.json" | sort >"$WORK/l.pvcs"
  jq -r '.items[] | [.metadata.name, (.spec.claimRef.uid // ""), (.spec.csi.volumeHandle // ""),
    (.spec.claimRef.name // "")] | @tsv' "$WORK/pvs.json" | sort >"$WORK/l.pvs"
  jq -r '.volumes[] | [.id, .name] | @tsv' "$WORK/driver.json" | sort >"$WORK/l.vols"
}

leftover_finalizers() {
  local kind
  for kind in pvcs pvs; do
    jq -r --arg k "${kind%s}" '.items[] | select((.metadata.finalizers // []) | length > 0) |
      "\($k) \(.metadata.name): finalizers \(.metadata.finalizers | join(","))" +
      (if .metadata.deletionTimestamp then " (deleting since \(.metadata.deletionTimestamp))"
       else "" end)' "$WORK/$kind.json"
  done
}

check_bound_state() {
  lists
  local n_pvc n_pv n_vol
  n_pvc=$(wc -l <"$WORK/l.pvcs")
  n_pv=$(wc -l <"$WORK/l.pvs")
  n_vol=$(wc -l <"$WORK/l.vols")
  check "all $N claims exist" "$N" "$n_pvc"
  local unbound
  unbound=$(awk -F'\t' '$4 != "Bound" {print $1 " (phase " $4 ")"}' "$WORK/l.pvcs")
  check "every claim is Bound" "" "$unbound" "claims not Bound: $(echo "$unbound" | head -n 20 | tr '\n' ' ')"
  # name uid volumeName -> the PV of that name must point back at the uid
  local no_pv
  no_pv=$(awk -F'\t' 'NR == FNR {pv[$1] = $2; next}
    { if ($3 == "" || !($3 in pv)) print $1 " (volumeName \"" $3 "\" is no PV)";
      else if (pv[$3] != $2) print $1 " (PV " $3 " has claimRef.uid " pv[$3] ")" }' \
    "$WORK/l.pvs" "$WORK/l.pvcs")
  check "every claim is bound to a PV whose claimRef is that claim" "" "$no_pv" \
    "claims without their PV:
$(echo "$no_pv" | head -n 20)"
  local shared
  shared=$(awk -F'\t' '$3 != "" {print $3}' "$WORK/l.pvcs" | sort | uniq -d)
  check "no PV is bound to two claims" "" "$shared"
  local per_claim
  per_claim=$(awk -F'\t' '{print $2}' "$WORK/l.pvs" | sort | uniq -d)
  check "no claim has two PVs" "" "$per_claim" "claim uids with several PVs: $per_claim"
  check "exactly one PV per claim" "$n_pvc" "$n_pv" \
    "PVs no claim is bound to: $(awk -F'\t' 'NR == FNR {b[$3] = 1; next} !($1 in b) {print $1}' \
      "$WORK/l.pvcs" "$WORK/l.pvs" | head -n 20 | tr '\n' ' ')"
  local missing
  missing=$(awk -F'\t' 'NR == FNR {v[$1] = 1; next} !($3 in v) {print $1 " -> " $3}' \
    "$WORK/l.vols" "$WORK/l.pvs")
  check "every PV's volumeHandle is a volume of the driver" "" "$missing" \
    "PVs whose volume the driver does not have:
$(echo "$missing" | head -n 20)"
  local extra
  extra=$(awk -F'\t' 'NR == FNR {h[$3] = 1; next} !($1 in h) {print $1 " (name " $2 ")"}' \
    "$WORK/l.pvs" "$WORK/l.vols")
  check "the driver holds one volume per PV (no extra volume)" "$n_pv" "$n_vol" \
    "driver volumes no PV refers to (leaked):
$(echo "$extra" | head -n 20)"
  local fins
  fins=$(jq -r '.items[] | select((.metadata.finalizers // []) |
    map(select(test("provision"))) | length > 0) | .metadata.name' "$WORK/pvcs.json")
  check "no claim carries a finalizer of ours" "" "$fins" \
    "claims with a provisioner finalizer: $(echo "$fins" | head -n 20 | tr '\n' ' ')"
}

# ---- start -------------------------------------------------------------------------

for b in "$KL" "$DRV" "$PROV"; do
  if [ ! -x "$b" ]; then
    bad "binary $b exists (make B=$B)"
    echo "$passed passed, $failed failed"
    exit 1
  fi
done
for t in kubectl curl jq; do
  if ! command -v "$t" >/dev/null; then
    bad "$t is installed (hack/install-deps.sh)"
    echo "$passed passed, $failed failed"
    exit 1
  fi
done

start=$SECONDS
# kube-lite: plain HTTP, no tokens; the real control plane: HTTPS and the admin token
if ! world_up; then
  echo "$passed passed, $failed failed"
  exit 1
fi
mkdir -p "$WORK/state"
# CreateVolume takes 200 ms, and the driver crashes at its 30th call before
# the call has any effect; after that crash, at the 30th call after it took
# effect (persisted, no answer); after that, no more crashes.
set_faults '{"CreateVolume": {"delay_ms": 200, "crash": {"at": 30, "when": "before"}}}'
FAULTS_AFTER_CRASH1='{"CreateVolume": {"delay_ms": 200, "crash": {"at": 30, "when": "after"}}}'
FAULTS_AFTER_CRASH2='{"CreateVolume": {"delay_ms": 200}}'
if start_driver; then ok "example driver serves"; else
  bad "example driver starts" "$(cat "$WORK/driver.log")"
  echo "$passed passed, $failed failed"
  exit 1
fi

cat >"$WORK/sc.yaml" <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: crash
provisioner: $DRIVER_NAME
reclaimPolicy: Delete
volumeBindingMode: Immediate
EOF
check "StorageClass created" "storageclass.storage.k8s.io/crash created" \
  "$(K create -f "$WORK/sc.yaml" 2>&1)"

# claims FILE PREFIX COUNT: a multi-document file of COUNT claims
claims() {
  local i
  : >"$1"
  for i in $(seq -w 1 "$3"); do
    cat >>"$1" <<EOF
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: $2-$i
  namespace: default
  labels:
    batch: $2
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Mi
  storageClassName: crash
EOF
  done
}

# ---- phase 1: provisioning under SIGKILLs and driver crashes ---------------------------------

PHASE_CRASHES=0
# The first provisioner kills itself once the record holds its 5th claim
# (CreateVolume not sent), the next once its 5th CreateVolume answered (no
# PV yet); then random SIGKILLs and random self-kill points.
CRASH_NEXT=intent:5
start_prov
claims "$WORK/claims.yaml" claim "$N" "$N"
applied=$(K apply -f "$WORK/claims.yaml" 2>&1 | grep -c ' created$')
check "$N claims created by one kubectl apply" "$N" "$applied"
NO_KILLS=1
CRASH_NEXT=create:5
deadline=$(($(now_ms) + PHASE_TIMEOUT * 1000))
while [ "$(now_ms)" -lt "$deadline" ] && [ "$(self_kills create)" -lt 1 ]; do
  supervise
  sleep 0.1
done
CRASH_NEXT=
NO_KILLS=0
RANDOM_CRASH=1
check "a provisioner killed itself with a claim in the record and its CreateVolume not sent" \
  1 "$(self_kills intent)"
check "a provisioner killed itself after CreateVolume answered, before the PV create" \
  1 "$(self_kills create)"

all_bound() {
  local c
  read -r -a c <<<"$(claim_counts)"
  [ "${c[0]}" -eq "$N" ] && [ "${c[1]}" -eq "$N" ] && [ "${c[2]}" -eq 0 ]
}
t0=$SECONDS
if chaos all_bound; then
  ok "all $N claims Bound ($((SECONDS - t0)) s)"
else
  bad "all $N claims Bound within ${PHASE_TIMEOUT} s" "bound/total/in-progress: $(claim_counts)"
fi
RANDOM_CRASH=0
note "provisioner: $KILLS SIGKILLs, $PROV_EXITS exits by itself (driver loss or a crash point: $(self_kills intent) at intent, $(self_kills create) at create), $PROV_STARTS starts"
if [ "$KILLS" -ge 2 ]; then ok "the provisioner was SIGKILLed while claims were pending ($KILLS times)"; else
  bad "the provisioner was SIGKILLed at least twice while claims were pending" "$KILLS kills"; fi
check "the driver crashed mid-CreateVolume before and after the call took effect" 2 "$DRV_CRASHES"
check "the driver exited only through the injected crashes" "" "$DRV_BAD_EXIT"
check_bound_state

# The record empties itself once nothing happens (done entries leave with
# an idle write).
quiet_empty() {
  local deadline=$(($(now_ms) + 30000))
  while [ "$(now_ms)" -lt "$deadline" ]; do
    record_empty && return 0
    supervise
    sleep 0.2
  done
  return 1
}
NO_KILLS=1
if quiet_empty; then ok "the intent record is empty after a quiet period"; else
  bad "the intent record is empty after a quiet period" "it names: $(record_names | head -n 10 | tr '\n' ' ')"
fi
NO_KILLS=0
PHASE1_FAILED=$failed

# ---- phase 2: deletion, with claims deleted while CreateVolume is in flight ------------------

KILLS=0
PROV_EXITS=0
DRV_CRASHES=0
PHASE_CRASHES=0
# CreateVolume takes 3 s now (< --timeout; long enough to look at every late
# claim while its call is in flight, even on a loaded machine). The
# provisioner now running kills itself when the first of those calls
# answers: between CreateVolume and the PV create.
set_faults '{"CreateVolume": {"delay_ms": 3000}}'
kill -KILL "$PROV_PID" 2>/dev/null
wait "$PROV_PID" 2>/dev/null
create_kills0=$(self_kills create)
# The late claims exist before the provisioner starts: its first list hands
# it all of them at once, so every CreateVolume is in flight before the
# first answers (created one by one under a watch, a loaded machine could
# spread them over more than those 3 s).
claims "$WORK/late.yaml" late "$LATE"
applied=$(K apply -f "$WORK/late.yaml" 2>&1 | grep -c ' created$')
check "$LATE late claims created" "$LATE" "$applied"
# The claims are the provisioner's once the PV binder names its driver in them (1.20's binder
# writes the beta annotation only, kube-lite's both); until then the provisioner's list would
# skip them and their later updates trickle in one by one. Wait for all of them.
late_announced() {
  [ "$(api /api/v1/namespaces/default/persistentvolumeclaims | jq --arg d "$DRIVER_NAME" '[.items[] |
    select((.metadata.name | startswith("late-")) and ((.metadata.annotations // {}) |
    (.["volume.kubernetes.io/storage-provisioner"] // .["volume.beta.kubernetes.io/storage-provisioner"])) == $d)] | length')" = "$LATE" ]
}
deadline=$(($(now_ms) + 30000))
until late_announced || [ "$(now_ms)" -ge "$deadline" ]; do sleep 0.1; done
if late_announced; then ok "the binder named the driver in every late claim"; else
  bad "the binder named the driver in every late claim within 30 s"; fi
CRASH_NEXT=create:1
start_prov
NO_KILLS=1
api /api/v1/namespaces/default/persistentvolumeclaims |
  jq -r '.items[] | select(.metadata.name | startswith("late-")) | "pvc-" + .metadata.uid' |
  sort >"$WORK/late.volnames"
# Wait until every late claim's CreateVolume has reached the driver (it logs
# requests on arrival at -v=5): from then on each call is in flight for 3 s.
arrived=0
for _ in $(seq 1 400); do
  arrived=$(grep -o 'CreateVolume {"name":"pvc-[0-9a-f-]*"' "$WORK/driver.log" |
    sed 's/.*"name":"//; s/"$//' | sort -u | comm -12 - "$WORK/late.volnames" | wc -l)
  [ "$arrived" -ge "$LATE" ] && break
  sleep 0.025
done
taken=$(record_names | grep -c '^late-')
out=$(K delete pvc -l batch=late --wait=false 2>&1)
late_deleted=$(echo "$out" | grep -c 'deleted')
check "every late claim's CreateVolume reached the driver before the claims were deleted" \
  "$LATE" "$arrived"
check "the intent record held every late claim when they were deleted" "$LATE" "$taken"
check "the $LATE late claims deleted" "$LATE" "$late_deleted"
late_claims_gone() {
  [ "$(api /api/v1/namespaces/default/persistentvolumeclaims | jq '[.items[] | select(.metadata.name | startswith("late-"))] | length')" = 0 ]
}
if ! on_real; then
  if late_claims_gone; then ok "the deleted late claims go at once (no finalizer holds them)"; else
    bad "the deleted late claims go at once (no finalizer holds them)"; fi
else
  # 1.20's StorageObjectInUseProtection admission gives every claim kubernetes.io/pvc-protection,
  # which kube-controller-manager's pvc-protection controller removes once no pod uses the
  # deleted claim: no other finalizer may hold them, and they go once it has.
  held=$(api /api/v1/namespaces/default/persistentvolumeclaims | jq -r '.items[] |
    select(.metadata.name | startswith("late-")) | (.metadata.finalizers // [])[] |
    select(. != "kubernetes.io/pvc-protection")' | sort -u)
  check "the deleted late claims hold no finalizer but kube-controller-manager's pvc-protection" "" "$held"
  deadline=$(($(now_ms) + 30000))
  until late_claims_gone || [ "$(now_ms)" -ge "$deadline" ]; do sleep 0.1; done
  if late_claims_gone; then ok "the deleted late claims go once the pvc-protection controller released them"; else
    bad "the deleted late claims go once the pvc-protection controller released them (30 s)"; fi
fi

LATE_SEEN=0
# Volumes of deleted late claims that the driver holds: the in-flight calls
# completed after the claims were deleted (and the provisioner died).
late_seen() {
  local seen
  seen=$(jq -r '.volumes[].name' "$WORK/driver.json" | sort | comm -12 - "$WORK/late.volnames" | wc -l)
  [ "$seen" -gt "$LATE_SEEN" ] && LATE_SEEN=$seen
  return 0
}
# The successor repeats each CreateVolume (3 s, queued behind the original
# call in the driver) from the record's entry to learn the volume, deletes
# it, then drops the entry. No random kills here: a provisioner killed more
# often than a CreateVolume takes can never finish one (as upstream's).
late_gone() {
  late_seen
  [ "$LATE_SEEN" -gt 0 ] || return 1
  [ "$(jq -r '.volumes[].name' "$WORK/driver.json" | sort | comm -12 - "$WORK/late.volnames" | wc -l)" -eq 0 ] || return 1
  [ "$(jq '[.items[] | select(.spec.claimRef.name // "" | startswith("late-"))] | length' "$WORK/pvs.json")" -eq 0 ] || return 1
  [ "$(record_names | grep -c '^late-')" -eq 0 ]
}
t0=$SECONDS
if chaos late_gone; then
  ok "the late claims' volumes are undone from the record alone, their entries gone ($((SECONDS - t0)) s)"
else
  bad "the late claims' volumes undone within ${PHASE_TIMEOUT} s" \
    "record: $(record_names | tr '\n' ' '); late volumes in the driver: $(jq -r '.volumes[].name' "$WORK/driver.json" | sort | comm -12 - "$WORK/late.volnames" | tr '\n' ' ')"
fi
check "the provisioner holding them killed itself between CreateVolume and the PV create" \
  1 "$(($(self_kills create) - create_kills0))"
NO_KILLS=0

# Now every bound claim, under random kills, with DeleteVolume taking 200 ms
# and crashing the driver at its 40th call, before, then after it took effect.
set_faults '{"DeleteVolume": {"delay_ms": 200, "crash": {"at": 40, "when": "before"}}}'
FAULTS_AFTER_CRASH1='{"DeleteVolume": {"delay_ms": 200, "crash": {"at": 40, "when": "after"}}}'
FAULTS_AFTER_CRASH2='{"DeleteVolume": {"delay_ms": 200}}'
out=$(K delete pvc -l batch=claim --wait=false 2>&1)
check "the $N bound claims deleted" "$N" "$(echo "$out" | grep -c 'deleted')"

all_gone() {
  late_seen
  [ "$(count_items "$WORK/pvcs.json")" -eq 0 ] && [ "$(count_items "$WORK/pvs.json")" -eq 0 ] &&
    [ "$(driver_volumes)" -eq 0 ]
}
t0=$SECONDS
if chaos all_gone; then
  ok "every claim, PV and volume is gone ($((SECONDS - t0)) s)"
else
  bad "every claim, PV and volume gone within ${PHASE_TIMEOUT} s"
fi
note "provisioner: $KILLS SIGKILLs, $PROV_EXITS exits by itself (driver loss), $PROV_STARTS starts in all"
if [ "$LATE_SEEN" -gt 0 ]; then
  ok "the driver created volumes for deleted late claims ($LATE_SEEN of $LATE seen at once), all removed"
else
  bad "the late claims' CreateVolume calls completed after the claims were deleted" \
    "no volume of a late claim was ever seen in the driver's status.json"
fi
check "the driver crashed mid-DeleteVolume before and after the call took effect" 2 "$DRV_CRASHES"
check "the driver exited only through the injected crashes" "" "$DRV_BAD_EXIT"
snapshot
check "the driver holds no volume" 0 "$(driver_volumes)" \
  "leaked volumes: $(jq -r '.volumes[] | "\(.id) (\(.name))"' "$WORK/driver.json" | head -n 20 | tr '\n' ' ')"
check "no PV is left" 0 "$(count_items "$WORK/pvs.json")" \
  "$(jq -r '.items[] | "\(.metadata.name) phase \(.status.phase // "") handle \(.spec.csi.volumeHandle // "")"' \
    "$WORK/pvs.json" | head -n 20)"
check "no PVC is left" 0 "$(count_items "$WORK/pvcs.json")" \
  "$(jq -r '.items[] | "\(.metadata.name) phase \(.status.phase // "")"' "$WORK/pvcs.json" | head -n 20)"
check "no PVC or PV is left with a finalizer" "" "$(leftover_finalizers)"
NO_KILLS=1
if quiet_empty; then ok "the intent record ends empty"; else
  bad "the intent record ends empty" "it names: $(record_names | head -n 10 | tr '\n' ' ')"
fi

# ---- stop, and look for sanitizer reports ----------------------------------------------------

term "$PROV_PID"
PROV_PID=
check "the provisioner exits 0 on SIGTERM" 0 "$TERM_RC" "$(tail -n 5 "$WORK/prov.log")"
term "$DRV_PID"
DRV_PID=
check "the driver exits 0 on SIGTERM" 0 "$TERM_RC" "$(tail -n 5 "$WORK/driver.log")"
if on_real; then
  world_down
else
  stop kube-lite
  check "kube-lite exits 0 on SIGTERM" 0 "${RC[kube-lite]:-none}" "$(tail -n 5 "$WORK/kube-lite.log")"
fi

SAN_RE='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer'
san=0
for log in prov.log driver.log kube-lite.log; do
  if grep -Eqs "$SAN_RE" "$WORK/$log"; then
    san=1
    echo "---- sanitizer report in $log:"
    grep -E -A 40 "$SAN_RE" "$WORK/$log" | head -n 120
  fi
done
check "no sanitizer report from any child" 0 "$san"

if [ "$failed" -gt 0 ]; then
  [ "$PHASE1_FAILED" -gt 0 ] && echo "---- (phase 1 failed)"
  echo "---- tail of the provisioner log:"
  grep -v '^I' "$WORK/prov.log" | tail -n 30
  echo "---- tail of the driver log:"
  tail -n 15 "$WORK/driver.log"
fi
note "total $((SECONDS - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
