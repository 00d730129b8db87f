#!/usr/bin/env bash
# `make demo` end to end: hack/demo.sh runs non-interactively (plain output)
# in a scratch DEMO_DIR, so it never touches a demo a user runs in
# build/demo; every step of its scenario is asserted, the world it leaves is
# used with kubectl, a second run replaces the first, and `hack/demo.sh down`
# leaves no process and no socket. Also: every manifests/ folder renders with
# kustomize and the rendering applies to the API server, and the README's flag
# tables are current (hack/gen-flags-doc.sh --check).
#
#   tests/e2e/test_demo.sh <build-dir>    (WORLD=kubernetes: make demo CLUSTER=kubernetes)
#
# worlds: kube-lite kubernetes
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${CSI_BUILD_DIR:-build}}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
# Short: the world's unix sockets live below it (108-byte limit).
WORK=$(mktemp -d /tmp/demo-test.XXXXXX)
DEMO_WORLD="$WORK/world"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

CLUSTER=kube-lite
SERVES="kube-lite serves https://127.0.0.1:"
if on_real; then
  CLUSTER=kubernetes
  SERVES="kube-apiserver serves https://127.0.0.1:"
fi
demo() { CLUSTER=$CLUSTER DEMO_DIR="$DEMO_WORLD" DEMO_BUILD_DIR="$B" "$ROOT/hack/demo.sh" "$@"; }
teardown() {
  demo down >/dev/null 2>&1
  stop_all
  world_down
  rm -rf "$WORK"
}
trap teardown EXIT

for tool in kubectl jq openssl curl setsid; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done

# The demo's processes, from its pid files: "name pid" per line.
world_pids() {
  local f
  for f in "$DEMO_WORLD"/run/*.pid; do [ -e "$f" ] && echo "$(basename "$f" .pid) $(cat "$f")"; done
}
# sanitizer_reports: the demo's logs holding one are shown (a report in the
# suite's output fails it in tests/run.sh)
sanitizer_reports() {
  local f
  for f in "$DEMO_WORLD"/logs/*.log; do
    [ -e "$f" ] || continue
    if grep -Eq 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$f"; then
      echo "---- $f"
      cat "$f"
    fi
  done
}

# ---- the scenario, as a user runs it --------------------------------------------------------

# assert_run OUTPUT-FILE RC LABEL: every step of one demo run
assert_run() {
  local out=$1 rc=$2 label=$3 text
  text=$(cat "$out")
  check "$label: hack/demo.sh exits 0" 0 "$rc"
  check "$label: no check failed" "" "$(grep '✗' "$out")"
  check "$label: plain output (no terminal control characters)" "" "$(grep -l $'\r\|\033' "$out")"
  local want=(
    "$SERVES"
    "from manifests/: "
    "the registrar needs none (kubelet mode)"
    "✓ csi-provisioner is healthy"
    "✓ csi-attacher is healthy"
    "✓ csi-resizer is healthy"
    "✓ csi-snapshotter is healthy"
    "✓ registrar on node-1 is healthy"
    "✓ pvc/demo-claim got the default class example-hostpath"
    "✓ a VolumeAttachment for"
    "✓ the driver holds the publication on node-2"
    "✓ pod/demo-pod is Running (kubelet-sim on node-2)"
    "✓ node/node-2 lists the volume in status.volumesInUse"
    "✓ the driver on node-2 staged the volume and published it into the pod"
    "✓ csi-resizer grew the volume in the driver to 2Gi"
    "✓ kubelet-sim on node-2 grew it on the node: pvc/demo-claim has capacity 2Gi"
    "✓ no resize condition left on the claim (FileSystemResizePending gone)"
    "has capacity 2Gi"
    "✓ the driver on node-2 sees the volume at 2Gi"
    "✓ pod/demo-pod kept running"
    "✓ volumesnapshot/demo-snapshot is ready to use (snapshot-controller-sim, csi-snapshotter)"
    "✓ volumesnapshot/demo-snapshot got the default class example-snapclass"
    "✓ its VolumeSnapshotContent holds the driver's snapshot of the volume, restoreSize 2Gi"
    "✓ the driver holds one snapshot of the volume, 2Gi"
    "✓ pvc/demo-restore is Bound"
    "✓ the driver created its volume from the snapshot"
    "✓ pod/demo-restore-pod is Running (kubelet-sim on node-2)"
    "✓ the driver on node-2 staged and published both volumes"
    "✓ pod/demo-restore-pod is gone"
    "✓ volumesnapshot/demo-snapshot is gone"
    "✓ its VolumeSnapshotContent is gone"
    "✓ the driver deleted the snapshot"
    "✓ pvc/demo-restore is gone"
    "✓ the driver on node-2 unpublished and unstaged the volume"
    "✓ pod/demo-pod is gone (kubelet-sim removed it)"
    "✓ node/node-2 no longer lists the volume in volumesInUse"
    "✓ pod/demo-pod is on node-2"
    "✓ csinode/node-1 lists hostpath.csi.example.com with nodeID node-1"
    "✓ csinode/node-2 lists hostpath.csi.example.com with nodeID node-2"
    "✓ node/node-1 has the csi.volume.kubernetes.io/nodeid annotation"
    "✓ node/node-2 has label topology.example.com/zone=zone-2"
    "✓ pvc/demo-claim is Pending (waiting for its first consumer)"
    "✓ no volume is provisioned before a pod uses the claim"
    "✓ pvc/demo-claim is Bound"
    "is in node-2's zone"
    "✓ the driver created the volume in zone-2"
    "✓ the VolumeAttachment is gone"
    "✓ the driver holds no publication"
    "✓ pvc/demo-claim is gone"
    "✓ the driver deleted the volumes"
    "✓ the five objectstorage.k8s.io CRDs are Established"
    "✓ bucketclaim/example-bucket is ready"
    "is ready with the driver's bucket id"
    "✓ secret/example-bucket-credentials holds the BucketInfo with S3 credentials"
    "✓ bucketaccess/example-access is gone (access revoked)"
    "✓ nothing is left in the COSI driver"
    "every step passed"
    "export KUBECONFIG=$DEMO_WORLD/kubeconfig"
    "kubectl get pv,pvc,volumeattachments,csinodes"
    "kubectl get volumesnapshotclasses,volumesnapshots,volumesnapshotcontents -A"
    "kubectl get bucketclasses,bucketclaims,buckets,bucketaccesses -A"
    "logs: $DEMO_WORLD/logs/"
  )
  local w
  for w in "${want[@]}"; do contains "$label: $w" "$w" "$text"; done
  # A status line prints each value once (it printed "size=2Gitrue 2Gi",
  # "ready=truetrue").
  check "$label: no status value printed twice" "" \
    "$(grep -E 'size=[^ ]*true|ready=(true|false)(true|false)|granted=(true|false)(true|false)' <<<"$text")"
  # The summary table: one row per step with its time, API writes and calls.
  contains "$label: summary names CreateVolume" "CreateVolume 1" "$text"
  contains "$label: summary names ControllerUnpublishVolume (both volumes)" "ControllerUnpublishVolume 2" "$text"
  contains "$label: summary names DeleteVolume (both claims)" "DeleteVolume 2" "$text"
  contains "$label: summary names NodeStageVolume" "NodeStageVolume 1" "$text"
  contains "$label: summary names NodeUnstageVolume (both volumes)" "NodeUnstageVolume 2" "$text"
  # The online resize: its own row, with the controller's and the node's expansion.
  local row
  row=$(grep '^  resized online ' "$out")
  contains "$label: summary row of the resize names ControllerExpandVolume" "ControllerExpandVolume 1" "$row"
  contains "$label: summary row of the resize names NodeExpandVolume" "NodeExpandVolume 1" "$row"
  # Snapshot and restore: their rows, with the driver's calls.
  row=$(grep '^  snapshot taken ' "$out")
  contains "$label: summary row of the snapshot names CreateSnapshot" "CreateSnapshot 1" "$row"
  row=$(grep '^  restored ' "$out")
  contains "$label: summary row of the restore names CreateVolume" "CreateVolume 1" "$row"
  contains "$label: ... and NodePublishVolume" "NodePublishVolume 1" "$row"
  row=$(grep '^  snapshot deleted ' "$out")
  contains "$label: summary row of the snapshot's deletion names DeleteSnapshot" "DeleteSnapshot 1" "$row"
  contains "$label: summary names DriverCreateBucket" "DriverCreateBucket 1" "$text"
  contains "$label: summary names DriverGrantBucketAccess" "DriverGrantBucketAccess 1" "$text"
  contains "$label: summary names DriverRevokeBucketAccess and DriverDeleteBucket" \
    "DriverDeleteBucket 1, DriverRevokeBucketAccess 1" "$text"
  check "$label: summary saved in the logs folder" 0 "$(cmp -s <(sed -n '/^  step  /,$p' "$out") \
    <(sed -n '/^  step  /,$p' "$DEMO_WORLD/logs/summary.txt"); echo $?)"
}

t=$SECONDS
demo up --no-build --plain >"$WORK/run1.out" 2>&1
rc=$?
echo "# first run: $((SECONDS - t)) s"
assert_run "$WORK/run1.out" "$rc" "first run"
[ "$rc" -eq 0 ] || cat "$WORK/run1.out"

# The world kubectl sees afterwards.
KW() { kubectl --kubeconfig "$DEMO_WORLD/kubeconfig" --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
check "the world keeps running: the default StorageClass" "true" \
  "$(KW get storageclass example-hostpath -o jsonpath='{.metadata.annotations.storageclass\.kubernetes\.io/is-default-class}' 2>&1)"
check "the world keeps running: both nodes' CSINodes" "csinode.storage.k8s.io/node-1 csinode.storage.k8s.io/node-2" \
  "$(KW get csinodes -o name 2>&1 | sort | tr '\n' ' ' | sed 's/ $//')"
check "the scenario left no volume behind" "" "$(KW get pv,pvc,volumeattachments -A -o name 2>&1)"
check "nor any snapshot" "" "$(KW get volumesnapshots,volumesnapshotcontents -A -o name 2>&1)"
check "nor any bucket" "" "$(KW get bucketclaims,buckets,bucketaccesses -A -o name 2>&1)"
# Each sidecar runs with its own token and only its manifests' RBAC.
contains "the provisioner's token may not read secrets in kube-system" "Forbidden" \
  "$(kubectl --kubeconfig "$DEMO_WORLD/run/csi-provisioner.kubeconfig" --cache-dir "$WORK/cache" get secrets -n kube-system 2>&1)"
check "no sidecar or kubelet-sim was refused by RBAC" "" \
  "$(grep -il 'forbidden' "$DEMO_WORLD"/logs/csi-*.log "$DEMO_WORLD"/logs/objectstorage-*.log "$DEMO_WORLD"/logs/kubelet-sim-*.log 2>/dev/null)"
first=$(world_pids)

# A second run replaces the first world.
t=$SECONDS
demo up --no-build --plain >"$WORK/run2.out" 2>&1
rc=$?
echo "# second run: $((SECONDS - t)) s"
sed -n '/^  step  /,/^$/p' "$WORK/run2.out"
assert_run "$WORK/run2.out" "$rc" "second run"
contains "second run: stops the first world" "stopping the previous world" "$(cat "$WORK/run2.out")"
left=""
while read -r n p; do
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && [ "$(world_pids | awk -v n="$n" '$1 == n { print $2 }')" != "$p" ] && left+="$n "
done <<<"$first"
check "second run: none of the first world's processes is left" "" "$left"
check "second run: the first world's processes exited 0 on SIGTERM" "" \
  "$(grep 'exited with status\|did not exit' "$WORK/run2.out")"

# ---- down -------------------------------------------------------------------------------------
last=$(world_pids)
# the control plane's own pid files (CLUSTER=kubernetes): etcd's command line
# names only its tmpfs data directory
for f in "$DEMO_WORLD"/k8s/run/*.pid; do [ -e "$f" ] && last+=$'\n'"k8s/$(basename "$f" .pid) $(cat "$f")"; done
t=$SECONDS
out=$(demo down 2>&1)
echo "# down: $((SECONDS - t)) s"
check "down: quiet, every process exited 0" "" "$out"
# A process that did not exit 0: its last lines.
for n in $(awk '{ print $1 }' "$DEMO_WORLD/logs/exit-codes" 2>/dev/null); do
  echo "---- last lines of $n.log"
  tail -n 15 "$DEMO_WORLD/logs/$n.log"
done
left=""
# A zombie (exited, not yet reaped by whoever adopted it) is gone too.
runs() { [ -n "$1" ] && [ -r "/proc/$1/stat" ] && [ "$(sed -n 's/^.*) \(.\) .*/\1/p' "/proc/$1/stat")" != Z ]; }
while read -r n p; do runs "$p" && left+="$n "; done <<<"$last"
check "down: no process of the demo is left" "" "$left"
# The control plane's processes (etcd, kube-apiserver, ...) keep pid files of
# their own: none may run with the demo's folder on its command line.
check "down: nothing runs from the demo's folder (the control plane included)" "" \
  "$(pgrep -af -- "$DEMO_WORLD/" | grep -v pgrep)"
check "down: no socket is left" "" "$(find "$WORK" -type s 2>/dev/null)"
check "down: only the logs are kept" "logs" "$(ls "$DEMO_WORLD" 2>&1)"
check "down: a second down is harmless" "" "$(demo down 2>&1)"
reports=$(sanitizer_reports)
check "no sanitizer report in the demo's logs" "" "$reports"
[ -z "$reports" ] || printf '%s\n' "$reports" | head -n 80

# ---- manifests: every kustomize rendering applies to the API server ----------------------------
t=$SECONDS

world_up --controllers "" || finish
API=$([ "$CLUSTER" = kubernetes ] && echo kube-apiserver || echo kube-lite)
K() { kubectl --kubeconfig "$WORK/admin.kubeconfig" --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
while read -r dir; do
  rel=${dir#"$ROOT"/}
  if ! K kustomize "$dir" >"$WORK/render.yaml" 2>"$WORK/render.err"; then
    bad "$rel renders with kustomize" "$(cat "$WORK/render.err")"
    continue
  fi
  ok "$rel renders with kustomize ($(grep -c '^kind:' "$WORK/render.yaml") objects)"
  out=$(K apply -f "$WORK/render.yaml" 2>&1)
  rc=$?
  check "$rel applies to $API" 0 "$rc"
  [ "$rc" = 0 ] || printf '%s\n' "$out" | head -n 10
  # Folders are alternatives (they share names): each starts from nothing.
  K delete -f "$WORK/render.yaml" --ignore-not-found --wait=false >/dev/null 2>&1
done < <(find "$ROOT/manifests" -name kustomization.yaml -printf '%h\n' | sort)
# The images are kustomize parameters: an overlay points them elsewhere.
mkdir -p "$WORK/overlay"
ln -s "$ROOT/manifests" "$WORK/overlay/base"
cat >"$WORK/overlay/kustomization.yaml" <<'EOF'
resources: [base]
images:
  - {name: csi-sidecars/csi-provisioner, newName: registry.example.com/csi-provisioner, newTag: v9.9.9}
  - {name: csi-sidecars/csi-attacher, newName: registry.example.com/csi-attacher, newTag: v9.9.9}
  - {name: csi-sidecars/csi-resizer, newName: registry.example.com/csi-resizer, newTag: v9.9.9}
  - {name: csi-sidecars/csi-snapshotter, newName: registry.example.com/csi-snapshotter, newTag: v9.9.9}
  - {name: csi-sidecars/csi-node-driver-registrar, newName: registry.example.com/csi-node-driver-registrar, newTag: v9.9.9}
  - {name: csi-sidecars/livenessprobe, newName: registry.example.com/livenessprobe, newTag: v9.9.9}
  - {name: csi-sidecars/example-csi-driver, newName: registry.example.com/example-csi-driver, newTag: v9.9.9}
EOF
check "an overlay's images: sets every image of manifests/" \
  "registry.example.com/csi-attacher:v9.9.9 registry.example.com/csi-node-driver-registrar:v9.9.9 registry.example.com/csi-provisioner:v9.9.9 registry.example.com/csi-resizer:v9.9.9 registry.example.com/csi-snapshotter:v9.9.9 registry.example.com/example-csi-driver:v9.9.9 registry.example.com/livenessprobe:v9.9.9" \
  "$(K kustomize "$WORK/overlay" 2>&1 | sed -n 's/^ *image: //p' | sort -u | tr '\n' ' ' | sed 's/ $//')"
# The controller pod's account gets the resizer's roles (manifests/resizer/rbac.yaml) beside the
# other sidecars': the top-level rendering binds it to them.
K kustomize "$ROOT/manifests" >"$WORK/top.yaml" 2>&1 && K apply -f "$WORK/top.yaml" >/dev/null 2>&1
check "manifests/: the controller pod's account is bound to external-resizer-runner and -cfg" \
  "ClusterRole/external-resizer-runner csi-hostpath-controller Role/external-resizer-cfg csi-hostpath-controller" \
  "$(K get clusterrolebinding csi-hostpath-controller-resizer -o jsonpath='{.roleRef.kind}/{.roleRef.name} {.subjects[0].name}' 2>&1) $(K get rolebinding csi-hostpath-controller-resizer-cfg -n default -o jsonpath='{.roleRef.kind}/{.roleRef.name} {.subjects[0].name}' 2>&1)"
check "manifests/: the controller Deployment carries csi-resizer with its liveness probe" \
  "csi-resizer /healthz/leader-election" \
  "$(K get deployment csi-hostpath-controller -n default -o jsonpath='{range .spec.template.spec.containers[?(@.name=="csi-resizer")]}{.name} {.livenessProbe.httpGet.path}{end}' 2>&1)"
# ... and the snapshotter's (manifests/snapshotter/rbac.yaml): its cluster role and its
# leader-election Role.
check "manifests/: the controller pod's account is bound to external-snapshotter-runner and -leaderelection" \
  "ClusterRole/external-snapshotter-runner csi-hostpath-controller Role/external-snapshotter-leaderelection csi-hostpath-controller" \
  "$(K get clusterrolebinding csi-hostpath-controller-snapshotter -o jsonpath='{.roleRef.kind}/{.roleRef.name} {.subjects[0].name}' 2>&1) $(K get rolebinding csi-hostpath-controller-snapshotter-leaderelection -n default -o jsonpath='{.roleRef.kind}/{.roleRef.name} {.subjects[0].name}' 2>&1)"
check "manifests/: the controller Deployment carries csi-snapshotter with its liveness probe" \
  "csi-snapshotter /healthz/leader-election" \
  "$(K get deployment csi-hostpath-controller -n default -o jsonpath='{range .spec.template.spec.containers[?(@.name=="csi-snapshotter")]}{.name} {.livenessProbe.httpGet.path}{end}' 2>&1)"
# Both pods probe their driver through livenessprobe, as upstream's csi-driver-host-path: a
# liveness-probe container on the driver's socket serving /healthz on 9898, and the driver
# container's livenessProbe on that port.
# probe_wiring KIND NAME: "<liveness-probe args> <its /csi volume> | <driver's probe path:port>
# <driver's healthz port> <driver's /csi volume>"
probe_wiring() {
  K get "$1" "$2" -n default -o jsonpath='{range .spec.template.spec.containers[?(@.name=="liveness-probe")]}{.args} {.volumeMounts[?(@.mountPath=="/csi")].name}{end} | {range .spec.template.spec.containers[?(@.name=="hostpath")]}{.livenessProbe.httpGet.path}:{.livenessProbe.httpGet.port} {.ports[?(@.name=="healthz")].containerPort} {.volumeMounts[?(@.mountPath=="/csi")].name}{end}' 2>&1
}
WIRED='["--csi-address=/csi/csi.sock","--health-port=9898"] socket-dir | /healthz:healthz 9898 socket-dir'
check "manifests/: the controller Deployment's driver is probed through livenessprobe on 9898" \
  "$WIRED" "$(probe_wiring deployment csi-hostpath-controller)"
check "manifests/: the node DaemonSet's driver is probed through livenessprobe on 9898" \
  "$WIRED" "$(probe_wiring daemonset csi-hostpath-node)"
check "manifests/: both run the livenessprobe image" \
  "csi-sidecars/livenessprobe:latest csi-sidecars/livenessprobe:latest" \
  "$(for w in deployment/csi-hostpath-controller daemonset/csi-hostpath-node; do
    K get "$w" -n default -o jsonpath='{.spec.template.spec.containers[?(@.name=="liveness-probe")].image}' 2>&1
    echo
  done | tr '\n' ' ' | sed 's/ $//')"
if ! on_real; then
  stop kube-lite
  check "kube-lite exits 0" 0 "${RC[kube-lite]}"
fi
echo "# manifests: $((SECONDS - t)) s"

# ---- README flag tables -----------------------------------------------------------------------
if [ -x "$ROOT/hack/gen-flags-doc.sh" ]; then
  out=$("$ROOT/hack/gen-flags-doc.sh" --check "$B" 2>&1)
  check "README's flag tables match --help (hack/gen-flags-doc.sh --check)" 0 "$?"
  [ -z "$out" ] || printf '%s\n' "$out" | head -n 20
fi

finish
