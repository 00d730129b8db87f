#!/usr/bin/env bash
# Benchmarks storage capacity tracking: kube-lite (plain HTTP, no built-in
# controllers) holding NODES Nodes, each with a CSINode of the driver and
# its own topology segment (label topology.example.com/node), and CLASSES
# WaitForFirstConsumer StorageClasses; the example driver (--sync=false);
# csi-provisioner --enable-capacity with a high capacity client budget (the
# controller is measured, not upstream's 1 qps limiter). Prints figures, no
# assertions:
#   - time from start until every object exists (NODES x CLASSES creates);
#   - time of a full poll: from the last sample before its first GetCapacity
#     call to the first sample after its NODES x CLASSES-th (the
#     provisioner's csi_sidecar_operations_seconds count, sampled about
#     every 100 ms: an upper bound), with the deepest capacity queue seen;
#   - API writes on CSIStorageCapacity objects during that poll when nothing
#     changed (kube-lite's apiserver_request_total; target 0);
#   - provisioner VmRSS / VmHWM (target <= 50 MB), and without
#     --enable-capacity for comparison;
#   - a restart with every object present: time of its first round, writes
#     (target 0), its cache sizes.
#
#   hack/bench/run-capacity-bench.sh            2000 nodes x 3 classes
#   NODES=500 CLASSES=2 THREADS=4 B=build hack/bench/run-capacity-bench.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh
B=${B:-build}
NODES=${NODES:-2000}
CLASSES=${CLASSES:-3}
THREADS=${THREADS:-1}
POLL=${POLL:-30}
DRIVER=cap.csi.example.com

make --no-print-directory -s B="$B" "$B/bin/kube-lite" "$B/bin/example-csi-driver" \
  "$B/bin/csi-provisioner" >/dev/null

tmp=$(mktemp -d "${TMPDIR:-/tmp}/capacity-bench.XXXXXX")
KL_PID=
DRV_PID=
PROV_PID=

# shellcheck disable=SC2317 # called through the EXIT trap
cleanup() {
  stop "$PROV_PID"
  stop "$DRV_PID"
  stop "$KL_PID"
  rm -rf "$tmp"
}
trap cleanup EXIT

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b - a}'; }
kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

"$B/bin/kube-lite" --listen 127.0.0.1:0 --controllers= >"$tmp/kube-lite.out" 2>"$tmp/kube-lite.log" &
KL_PID=$!
for _ in $(seq 1 200); do
  grep -q 'serving on' "$tmp/kube-lite.out" 2>/dev/null && break
  sleep 0.05
done
URL=$(sed -n 's/^kube-lite: serving on //p' "$tmp/kube-lite.out")
[ -n "$URL" ] || { echo "kube-lite did not start: $(cat "$tmp/kube-lite.log")" >&2; exit 1; }
cat >"$tmp/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kl, cluster: {server: "$URL"}}]
users: [{name: u, user: {}}]
contexts: [{name: c, context: {cluster: kl, user: u}}]
current-context: c
EOF

# Nodes, CSINodes and classes over one keep-alive connection.
t0=$(now)
python3 - "$URL" "$NODES" "$CLASSES" "$DRIVER" <<'EOF'
import http.client, json, sys, urllib.parse
url, nodes, classes, driver = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
u = urllib.parse.urlparse(url)
c = http.client.HTTPConnection(u.hostname, u.port)
def post(path, obj):
    c.request("POST", path, json.dumps(obj), {"Content-Type": "application/json"})
    r = c.getresponse()
    body = r.read()
    if r.status != 201:
        sys.exit("POST %s: %d %s" % (path, r.status, body[:200]))
for i in range(1, nodes + 1):
    n = "node-%d" % i
    post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {
        "kubernetes.io/hostname": n, "topology.example.com/node": n}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    post("/apis/storage.k8s.io/v1/csinodes", {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": n}, "spec": {"drivers": [{"name": driver, "nodeID": n,
        "topologyKeys": ["topology.example.com/node"]}]}})
for i in range(1, classes + 1):
    post("/apis/storage.k8s.io/v1/storageclasses", {"apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass", "metadata": {"name": "wffc-%d" % i}, "provisioner": driver,
        "volumeBindingMode": "WaitForFirstConsumer", "parameters": {"pool": "p%d" % i}})
EOF
t1=$(now)
WANT=$((NODES * CLASSES))
echo "capacity benchmark on $(nproc) cores: $NODES Nodes + CSINodes (one segment each) x $CLASSES" \
  "WaitForFirstConsumer classes = $WANT CSIStorageCapacity objects; --capacity-threads=$THREADS"
echo "  cluster objects created in $(secs "$t0" "$t1") s"

"$B/bin/example-csi-driver" --endpoint="unix://$tmp/csi.sock" --state-dir="$tmp/state" \
  --drivername="$DRIVER" --nodeid=node-1 --capacity=1Ti --sync=false \
  --topology=topology.example.com/node=node-1 \
  --plugin-caps=CONTROLLER_SERVICE,VOLUME_ACCESSIBILITY_CONSTRAINTS \
  --controller-caps=CREATE_DELETE_VOLUME,GET_CAPACITY 2>"$tmp/driver.log" &
DRV_PID=$!
for _ in $(seq 1 200); do
  grep -q 'serving on' "$tmp/driver.log" 2>/dev/null && break
  sleep 0.05
done

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
metric() {
  local text
  text=$(curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" || true)
  awk -v m="$1" 'index($0, m) == 1 {print $NF; exit}' <<<"$text"
}
# GetCapacity calls the provisioner made so far (every result code).
get_capacity_calls() {
  local text
  text=$(curl -s --max-time 5 "http://127.0.0.1:$PORT/metrics" || true)
  awk '/^csi_sidecar_operations_seconds_count\{/ && /GetCapacity/ {s += $NF} END {print s + 0}' <<<"$text"
}
csc_writes() {
  local text
  text=$(curl -s --max-time 5 "$URL/metrics" || true)
  awk '/^apiserver_request_total\{/ && /resource="csistoragecapacities"/ && /verb="(create|update|patch|delete)"/ {s += $NF} END {print s + 0}' <<<"$text"
}

# The same provisioner without capacity tracking, for comparison.
"$B/bin/csi-provisioner" --kubeconfig="$tmp/kubeconfig" --csi-address="$tmp/csi.sock" \
  2>"$tmp/prov0.log" &
PROV_PID=$!
for _ in $(seq 1 1200); do
  grep -q 'provisioner started' "$tmp/prov0.log" 2>/dev/null && break
  sleep 0.05
done
sleep 1
echo "  for comparison, the provisioner without --enable-capacity: VmRSS $(mib "$(kib "$PROV_PID" VmRSS)") MiB" \
  "(RssAnon $(mib "$(kib "$PROV_PID" RssAnon)") MiB)"
stop "$PROV_PID"
PROV_PID=

t2=$(now)
NAMESPACE=default "$B/bin/csi-provisioner" --kubeconfig="$tmp/kubeconfig" --csi-address="$tmp/csi.sock" \
  --enable-capacity --capacity-ownerref-level=-1 "--capacity-poll-interval=${POLL}s" \
  "--capacity-threads=$THREADS" --kube-api-capacity-qps=10000 --kube-api-capacity-burst=10000 \
  "--http-endpoint=127.0.0.1:$PORT" -v=2 2>"$tmp/prov.log" &
PROV_PID=$!
for _ in $(seq 1 1200); do
  grep -q 'provisioner started' "$tmp/prov.log" 2>/dev/null && break
  kill -0 "$PROV_PID" 2>/dev/null || { echo "the provisioner died: $(tail -n 5 "$tmp/prov.log")" >&2; exit 1; }
  sleep 0.05
done
t3=$(now)
echo "  provisioner up (informers synced, $NODES segments known) $(secs "$t2" "$t3") s after start"
current=0
for _ in $(seq 1 3000); do
  current=$(metric 'csistoragecapacities_desired_current ')
  [ "${current:-0}" = "$WANT" ] && break
  sleep 0.1
done
t4=$(now)
echo "  all $current objects created $(secs "$t2" "$t4") s after start ($(secs "$t3" "$t4") s after the informers synced)"
echo "  provisioner after the initial sync: VmRSS $(mib "$(kib "$PROV_PID" VmRSS)") MiB" \
  "(RssAnon $(mib "$(kib "$PROV_PID" RssAnon)") MiB), VmHWM $(mib "$(kib "$PROV_PID" VmHWM)") MiB (target <= 50 MB)"

# Let the first round settle (the creates' own events re-check each item once).
base=$(get_capacity_calls)
while :; do
  sleep 1
  c=$(get_capacity_calls)
  [ "$c" = "$base" ] && break
  base=$c
done
w0=$(csc_writes)
echo "  waiting for the next poll (every ${POLL} s) with nothing changed ..."
start=
deepest=0
before=$(now)
for _ in $(seq 1 $((POLL * 20 + 3000))); do
  sampled=$(now)
  c=$(get_capacity_calls)
  # The poll began after the previous sample that saw no call yet.
  if [ -z "$start" ] && [ "$c" != "$base" ]; then start=$before; fi
  before=$sampled
  if [ -n "$start" ]; then
    d=$(metric 'workqueue_depth{name="csistoragecapacity"}')
    d=${d%.*}
    [ "${d:-0}" -gt "$deepest" ] && deepest=$d
  fi
  if [ -n "$start" ] && [ "$((c - base))" -ge "$WANT" ]; then break; fi
  sleep 0.1
done
end=$(now)
w1=$(csc_writes)
echo "  full poll: $((c - base)) GetCapacity calls in $(secs "$start" "$end") s (sampled every 0.1 s);" \
  "deepest capacity queue seen: $deepest (one entry per object at most: $WANT)"
echo "  API writes on CSIStorageCapacity objects during that poll: $((w1 - w0)) (target 0)"
echo "  provisioner after a poll: VmRSS $(mib "$(kib "$PROV_PID" VmRSS)") MiB" \
  "(RssAnon $(mib "$(kib "$PROV_PID" RssAnon)") MiB), VmHWM $(mib "$(kib "$PROV_PID" VmHWM)") MiB (target <= 50 MB)"

# A restart with every object present: the caches it starts with, and no
# write once its first round is done.
stop "$PROV_PID"
w0=$(csc_writes)
t5=$(now)
NAMESPACE=default "$B/bin/csi-provisioner" --kubeconfig="$tmp/kubeconfig" --csi-address="$tmp/csi.sock" \
  --enable-capacity --capacity-ownerref-level=-1 "--capacity-poll-interval=${POLL}s" \
  "--capacity-threads=$THREADS" --kube-api-capacity-qps=10000 --kube-api-capacity-burst=10000 \
  "--http-endpoint=127.0.0.1:$PORT" -v=2 2>"$tmp/prov2.log" &
PROV_PID=$!
for _ in $(seq 1 1200); do
  grep -q 'provisioner started' "$tmp/prov2.log" 2>/dev/null && break
  sleep 0.05
done
base=$(get_capacity_calls)
for _ in $(seq 1 3000); do
  sleep 0.1
  base=$(get_capacity_calls)
  [ "$base" -ge "$WANT" ] && break
done
t6=$(now)
echo "  restart with the $WANT objects present: first round of GetCapacity done $(secs "$t5" "$t6") s after start;" \
  "API writes: $(($(csc_writes) - w0)) (target 0)"
echo "  $(sed -n 's/.*\] capacity caches: /caches: /p' "$tmp/prov2.log")"
echo "  provisioner after the restart: VmRSS $(mib "$(kib "$PROV_PID" VmRSS)") MiB" \
  "(RssAnon $(mib "$(kib "$PROV_PID" RssAnon)") MiB), VmHWM $(mib "$(kib "$PROV_PID" VmHWM)") MiB (target <= 50 MB)"
