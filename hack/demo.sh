#!/usr/bin/env bash
# The local world in one command: kube-lite (HTTPS, tokens, RBAC from
# manifests/), the example CSI driver in its controller and node roles, the
# sidecars (provisioner, attacher, resizer, snapshotter, registrar) each with
# its own service-account token, kubelet-sim for two nodes and
# snapshot-controller-sim for the cluster's snapshot-controller; then a storage
# scenario played with kubectl (provision, attach, mount, resize online,
# snapshot, restore, delete; COSI buckets), step by step, and a summary. The
# world is left running for kubectl.
#
#   hack/demo.sh [up] [--no-build] [--plain]   (make demo)
#   hack/demo.sh down                          (make demo-down)
#   hack/demo.sh status
#
# CLUSTER=kubernetes (make demo CLUSTER=kubernetes) plays the same scenario on
# the real control plane (hack/kubernetes/: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler 1.20.2) instead of kube-lite: the
# real scheduler places the pod (and so picks the node of the
# WaitForFirstConsumer claim), the real PV binder and attach-detach controller
# do their part, kubelet-sim is each node's kubelet.
#
# Environment:
#   DEMO_DIR        the world's directory (default build/demo): kubeconfig,
#                   logs/, run/ (pid files, exit codes), sockets, driver state
#   DEMO_BUILD_DIR  where the binaries are built (default build, as `make`)
#
# `up` first stops a world already running in DEMO_DIR, so running it twice
# replaces the first world. `down` stops every process `up` started (by the
# pid files in run/, checked against /proc so a recycled pid is never hit)
# and removes everything but logs/. Progress: a live line while waiting when
# stdout is a terminal, plain lines otherwise or with --plain. Exit status 0
# when every step passed, 1 otherwise (the world is left up for a look).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
D=${DEMO_DIR:-$ROOT/build/demo}
B=${DEMO_BUILD_DIR:-$ROOT/build}
DRIVER=hostpath.csi.example.com
ZONE_KEY=topology.example.com/zone
NODES=(node-1 node-2)
POD_NODE=node-2 # the pod goes here, so the volume must land in zone-2
NS=default
CLUSTER=${CLUSTER:-kube-lite}
case $CLUSTER in kube-lite | kubernetes) ;; *)
  echo "CLUSTER must be kube-lite or kubernetes, not '$CLUSTER'" >&2
  exit 2
  ;;
esac

# ---- output -------------------------------------------------------------------------------

PLAIN=0
[ -t 1 ] || PLAIN=1
# Times in microseconds from bash itself: a busy machine makes every forked
# date or awk cost.
usec() { local t=${EPOCHREALTIME/[.,]/}; echo "$((10#$t))"; }
T0=$(usec)
# elapsed: seconds since the start ("  12.3s") into ELAPSED
elapsed() {
  local t=${EPOCHREALTIME/[.,]/}
  t=$((10#$t - T0))
  printf -v ELAPSED '%5d.%ds' $((t / 1000000)) $((t / 100000 % 10))
}
say() { elapsed; printf '%s  %s\n' "$ELAPSED" "$*"; }
die() {
  [ "$PLAIN" = 1 ] || printf '\r\033[K'
  elapsed
  printf '%s  error: %s\n' "$ELAPSED" "$*" >&2
  [ -d "$D/logs" ] && printf '       logs: %s\n' "$D/logs" >&2
  exit 1
}

# ---- the process table: run/NAME.pid, run/NAME.rc, run/NAME.cmd, logs/NAME.log ------------------

# launch NAME COMMAND...: starts COMMAND in its own session (it outlives this
# script and the terminal); a small bash waits for it and records its exit
# status in run/NAME.rc. run/NAME.pid is the program's own pid.
launch() {
  local name=$1
  shift
  printf '%s\n' "$1" >"$D/run/$name.cmd"
  rm -f "$D/run/$name.rc" "$D/run/$name.pid"
  setsid bash -c '
    run=$1 name=$2
    shift 2
    "$@" </dev/null &
    echo $! >"$run/$name.pid.tmp" && mv "$run/$name.pid.tmp" "$run/$name.pid"
    wait $!
    echo $? >"$run/$name.rc"' demo-launch "$D/run" "$name" "$@" >>"$D/logs/$name.log" 2>&1 </dev/null &
  local i
  for ((i = 0; i < 100; i++)); do
    [ -s "$D/run/$name.pid" ] && return 0
    sleep 0.05
  done
  die "$name did not start"
}
pid_of() { local p; read -r p 2>/dev/null <"$D/run/$1.pid" && echo "$p"; }
# ours NAME: its pid is alive and still runs the binary we started
ours() {
  local pid="" exe="" want=""
  { read -r pid <"$D/run/$1.pid"; } 2>/dev/null || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  { IFS= read -r -d '' exe <"/proc/$pid/cmdline"; } 2>/dev/null
  { IFS= read -r want <"$D/run/$1.cmd"; } 2>/dev/null
  [ -n "$exe" ] && [ "$exe" = "$want" ]
}
names() {
  local f
  for f in "$D"/run/*.pid; do
    [ -e "$f" ] || continue
    f=${f##*/}
    echo "${f%.pid}"
  done
}

# term_wait NAME...: SIGTERM to all of them at once, then waits up to 10 s
# for them to exit; what is left gets SIGKILL
term_wait() {
  local n i left
  for n in "$@"; do ours "$n" && kill -TERM "$(pid_of "$n")" 2>/dev/null; done
  for ((i = 0; i < 100; i++)); do
    left=0
    for n in "$@"; do ours "$n" && left=1; done
    [ "$left" = 0 ] && return 0
    sleep 0.1
  done
  for n in "$@"; do
    if ours "$n"; then
      kill -KILL "$(pid_of "$n")" 2>/dev/null
      echo "demo: $n did not exit on SIGTERM within 10 s: killed" >&2
    fi
  done
}

# stop_world: in tiers, so that nothing sees its peer vanish first (a
# sidecar whose driver went away exits 1, as upstream's): the sidecars and
# the snapshot-controller stand-in, then the kubelets, then the drivers,
# kube-lite last. A line per process that did
# not exit 0 (also kept in logs/exit-codes).
stop_world() {
  [ -d "$D/run" ] || return 0
  local n tier i rc members
  for tier in 'csi-*' 'snapshot-controller-sim' 'objectstorage-*' 'kubelet-sim-*' 'example-*' '*'; do
    members=()
    for n in $(names); do
      # shellcheck disable=SC2053 # the tier is a glob
      [[ $n == $tier ]] && ours "$n" && members+=("$n")
    done
    [ ${#members[@]} -eq 0 ] || term_wait "${members[@]}"
  done
  for n in $(names); do
    # The launcher writes the exit status as soon as the program is gone.
    for ((i = 0; i < 20; i++)); do
      [ -s "$D/run/$n.rc" ] && break
      sleep 0.05
    done
    rc=$(cat "$D/run/$n.rc" 2>/dev/null)
    if [ -n "$rc" ] && [ "$rc" != 0 ]; then
      echo "demo: $n exited with status $rc (see $D/logs/$n.log)" >&2
      echo "$n $rc" >>"$D/logs/exit-codes"
    fi
  done
}

cmd_down() {
  stop_world
  # A real control plane of this world (CLUSTER=kubernetes) goes last.
  if [ -d "$D/k8s/run" ]; then
    "$ROOT/hack/kubernetes/cluster.sh" down "$D/k8s" || echo "demo: stopping the control plane in $D/k8s failed" >&2
  fi
  # Everything but the logs: pid files, sockets, state, keys, kubeconfigs.
  if [ -d "$D" ]; then
    find "$D" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
  fi
  return 0
}

cmd_status() {
  local n
  for n in $(names); do
    if ours "$n"; then
      printf '%-28s running  pid %s  rss %s\n' "$n" "$(pid_of "$n")" "$(rss "$n")"
    else
      printf '%-28s stopped  exit %s\n' "$n" "$(cat "$D/run/$n.rc" 2>/dev/null || echo '?')"
    fi
  done
}
rss() {
  local k v _
  while read -r k v _; do
    [ "$k" = VmRSS: ] && { printf '%d.%d MiB' $((v / 1024)) $((v * 10 / 1024 % 10)); return; }
  done 2>/dev/null <"/proc/$(pid_of "$1")/status"
}

# ---- kubectl and measurements -------------------------------------------------------------

K() { kubectl --kubeconfig "$D/kubeconfig" --cache-dir "$D/cache" --request-timeout=10s "$@"; }
# rbac_only: the ServiceAccounts, Roles, ClusterRoles, bindings and
# CSIDriver of a rendering (its workloads are not for the demo's processes)
rbac_only() {
  awk 'function flush() { if (keep) printf "%s---\n", doc; doc = ""; keep = 0 }
    /^---$/ { flush(); next }
    /^kind: (ServiceAccount|Role|ClusterRole|RoleBinding|ClusterRoleBinding|CSIDriver)$/ { keep = 1 }
    { doc = doc $0 "\n" }
    END { flush() }'
}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# free_ports N: N free loopback ports, one per line
free_ports() {
  "$PY" -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# gen_certs DIR: a throwaway CA and a server certificate for 127.0.0.1, as
# hack/kube-lite/gen-certs.sh makes, with P-256 keys (RSA key generation
# takes seconds on a busy machine); the CA key is not kept
gen_certs() {
  mkdir -p "$1" && (
    cd "$1" || exit 1
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
      -subj "/CN=demo-kube-lite-ca" -keyout ca.key -out ca.crt 2>/dev/null &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=kube-lite" \
        -keyout server.key -out server.csr 2>/dev/null &&
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >ext.cnf &&
      openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
        -extfile ext.cnf -out server.crt 2>/dev/null &&
      rm -f server.csr ext.cnf ca.srl ca.key && chmod 600 server.key
  )
}

# kubelet_rbac: what the kubelets may write (kube-apiserver's Node
# authorizer and system:node role stand here); the demo's own, not part of
# manifests/
kubelet_rbac() {
  cat <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: demo:kubelet
rules:
  - apiGroups: [""]
    resources: ["nodes", "nodes/status"]
    verbs: ["get", "list", "watch", "create", "update", "patch"]
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch", "delete"]
  - apiGroups: [""]
    resources: ["pods/status"]
    verbs: ["patch", "update"]
  - apiGroups: [""]
    resources: ["persistentvolumeclaims", "persistentvolumes", "secrets"]
    verbs: ["get"]
  # node expansion finishes a claim's resize, as the system:node role allows
  - apiGroups: [""]
    resources: ["persistentvolumeclaims/status"]
    verbs: ["get", "update", "patch"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "create", "update", "patch"]
  - apiGroups: ["storage.k8s.io"]
    resources: ["csinodes"]
    verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
  - apiGroups: ["storage.k8s.io"]
    resources: ["csidrivers", "volumeattachments"]
    verbs: ["get", "list", "watch"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create", "patch", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: demo:kubelet
subjects:
  - kind: Group
    name: system:nodes
    apiGroup: rbac.authorization.k8s.io
roleRef:
  kind: ClusterRole
  name: demo:kubelet
  apiGroup: rbac.authorization.k8s.io
EOF
}
healthy() { curl -sf --max-time 2 "http://127.0.0.1:$1${2:-/healthz}" >/dev/null; }
api_url() {
  if [ "$CLUSTER" = kubernetes ]; then
    cat "$D/k8s/server" 2>/dev/null
  else
    sed -n 's/^kube-lite: serving on //p' "$D/logs/kube-lite.log" 2>/dev/null | head -n 1
  fi
}
# api_writes: successful create/update/patch/delete requests the API server
# answered (kube-lite's metrics; kube-apiserver's audit log)
api_writes() {
  if [ "$CLUSTER" = kubernetes ]; then
    [ -s "$D/k8s/logs/audit.log" ] || { echo 0; return; }
    # -R and fromjson?: the line being written as we read is skipped
    jq -Rn '[inputs | fromjson? | select(.verb | IN("create", "update", "patch", "delete", "deletecollection"))
      | select((.responseStatus.code // 0) < 400)] | length' "$D/k8s/logs/audit.log" 2>/dev/null
    return
  fi
  { curl -s --max-time 5 --cacert "$D/pki/ca.crt" -H "Authorization: Bearer $(cat "$D/run/admin.token" 2>/dev/null)" \
    "$(api_url)/metrics" 2>/dev/null || true; } | awk '
    /^apiserver_request_total/ && /verb="(create|update|patch|delete|deletecollection)"/ {
      if (match($0, /code="[0-9]+"/) && substr($0, RSTART + 6, 3) + 0 < 400) s += $NF
    }
    END { print s + 0 }'
}
# driver_calls: every driver's call counts summed, as one JSON object
driver_calls() {
  local f=("$D"/state/*/status.json)
  [ -e "${f[0]}" ] || { echo '{}'; return; }
  jq -s -c '[.[].calls // {} | to_entries[]] | group_by(.key) | map({key: .[0].key, value: (map(.value) | add)}) | from_entries' \
    "${f[@]}" 2>/dev/null || echo '{}'
}

# ---- steps ----------------------------------------------------------------------------------

STEP_NAMES=()
STEP_TIMES=()
STEP_WRITES=()
STEP_CALLS=()
STEP_FAILED=0
step_t0=""
step_w0=""
step_c0="{}"
# Steps follow each other: the counters read at one step's end are the next
# one's start (fewer processes: each costs on a busy machine).
step_begin() {
  step_t0=${EPOCHREALTIME/[.,]/}
  if [ -z "$step_w0" ]; then
    step_w0=$(api_writes)
    step_c0=$(driver_calls)
  fi
  say "▶ $1"
}
# step_end NAME: records the step's time, API writes and driver calls
step_end() {
  local t=${EPOCHREALTIME/[.,]/} w w1 c c1
  t=$((10#$t - 10#$step_t0))
  printf -v t '%d.%02d' $((t / 1000000)) $((t / 10000 % 100))
  w1=$(api_writes)
  c1=$(driver_calls)
  w=$((w1 - step_w0))
  # The calls since step_begin; the Identity and capability chatter is
  # counted but not named.
  c=$(jq -n -r --argjson a "$step_c0" --argjson b "$c1" '
    ($b | to_entries | map(.value -= ($a[.key] // 0)) | map(select(.value > 0))) as $d
    | ($d | map(select(.key | IN("Probe", "GetPluginInfo", "GetPluginCapabilities",
        "ControllerGetCapabilities", "NodeGetCapabilities", "DriverGetInfo") | not)) | map("\(.key) \(.value)") | join(", ")) as $main
    | "\($d | map(.value) | add // 0)\(if $main == "" then "" else " (" + $main + ")" end)"')
  step_w0=$w1
  step_c0=$c1
  STEP_NAMES+=("$1")
  STEP_TIMES+=("$t")
  STEP_WRITES+=("$w")
  STEP_CALLS+=("$c")
}
# check DESCRIPTION COMMAND...: one assertion, printed as ✓ or ✗
check() {
  local what=$1
  shift
  if "$@"; then
    say "  ✓ $what"
  else
    say "  ✗ $what"
    STEP_FAILED=$((STEP_FAILED + 1))
  fi
}

# show_phases: the scenario objects as they are now
show_phases() { snap && say "    = $(phases)"; }

# wait_until TIMEOUT WHAT COMMAND...: polls COMMAND; shows the objects'
# phases (a live line on a terminal, a line per change without one)
wait_until() {
  local secs=$1 what=$2
  shift 2
  local end=$((SECONDS + secs)) last="" now
  while :; do
    if "$@"; then
      [ "$PLAIN" = 1 ] || printf '\r\033[K'
      say "  ✓ $what"
      return 0
    fi
    if [ "$SECONDS" -ge "$end" ]; then
      [ "$PLAIN" = 1 ] || printf '\r\033[K'
      say "  ✗ $what (not within ${secs}s; $(phases))"
      STEP_FAILED=$((STEP_FAILED + 1))
      return 1
    fi
    now=$(phases)
    if [ "$PLAIN" = 1 ]; then
      [ "$now" = "$last" ] || say "    … $now"
    else
      elapsed
      printf '\r\033[K%s    … waiting: %s' "$ELAPSED" "$now"
    fi
    last=$now
    sleep 0.2
  done
}

# ---- up -------------------------------------------------------------------------------------

bin() {
  local n
  for n in "$@"; do
    [ -x "$B/bin/$n" ] && { echo "$B/bin/$n"; return 0; }
  done
  return 1
}

cmd_up() {
  local build=1 a
  for a in "$@"; do
    case $a in
      --no-build) build=0 ;;
      --plain) PLAIN=1 ;;
      *) echo "usage: hack/demo.sh [up] [--no-build] [--plain] | down | status" >&2; exit 2 ;;
    esac
  done
  # A world already running here goes first (also before a build: its
  # binaries are about to be replaced).
  if [ -d "$D/run" ]; then
    say "stopping the previous world in $D"
    cmd_down
  fi
  mkdir -p "$D"/{run,logs,state,sock,cache}
  rm -f "$D"/logs/*.log "$D/logs/exit-codes" "$D/logs/summary.txt"
  if [ "$build" = 1 ]; then
    say "installing what is missing (hack/install-deps.sh) and building ($B; log: $D/logs/build.log)"
    "$ROOT/hack/install-deps.sh" >"$D/logs/build.log" 2>&1 || die "hack/install-deps.sh failed: $D/logs/build.log"
    make -C "$ROOT" -j"$(nproc 2>/dev/null || echo 2)" B="$B" all >>"$D/logs/build.log" 2>&1 ||
      die "the build failed: $D/logs/build.log"
    # The demo's own time starts now (the issue: under a minute after the build).
    T0=$(usec)
  fi
  for t in kubectl jq openssl curl setsid; do
    command -v "$t" >/dev/null || die "$t is missing: run hack/install-deps.sh"
  done
  KL=$(bin kube-lite) || die "no $B/bin/kube-lite: build first (make)"
  DRV=$(bin example-csi-driver) || die "no $B/bin/example-csi-driver"
  PROV=$(bin csi-provisioner) || die "no $B/bin/csi-provisioner"
  ATT=$(bin csi-attacher) || die "no $B/bin/csi-attacher"
  RSZ=$(bin csi-resizer) || die "no $B/bin/csi-resizer"
  SNAP=$(bin csi-snapshotter) || die "no $B/bin/csi-snapshotter"
  SNAPCTL=$(bin snapshot-controller-sim) || die "no $B/bin/snapshot-controller-sim"
  REG=$(bin csi-node-driver-registrar) || die "no $B/bin/csi-node-driver-registrar"
  KSIM=$(bin kubelet-sim) || die "no $B/bin/kubelet-sim"
  CDRV=$(bin example-cosi-driver) || die "no $B/bin/example-cosi-driver"
  OSC=$(bin objectstorage-controller) || die "no $B/bin/objectstorage-controller"
  OSS=$(bin objectstorage-sidecar) || die "no $B/bin/objectstorage-sidecar"
  local sock_probe="$D/nodes/node-1/plugins_registry/$DRIVER-reg.sock"
  [ ${#sock_probe} -lt 100 ] || die "DEMO_DIR $D is too long for unix socket paths (108 bytes)"

  # ---- kube-lite: TLS, one token per identity, RBAC ------------------------------------------
  if [ "$CLUSTER" = kubernetes ]; then
    step_begin "kube-apiserver 1.20.2 (etcd, controller-manager, scheduler): HTTPS, tokens, RBAC"
  else
    step_begin "kube-lite: HTTPS, tokens, RBAC"
  fi
  gen_certs "$D/pki" || die "cannot make the certificates (openssl)"
  local tok_admin tok_prov tok_att tok_rsz tok_snap tok_cosi_ctrl tok_cosi_sc
  local rnd
  rnd=$(openssl rand -hex $((16 * (7 + ${#NODES[@]}))))
  tok_admin=${rnd:0:32} tok_prov=${rnd:32:32} tok_att=${rnd:64:32}
  tok_rsz=${rnd:$((160 + 32 * ${#NODES[@]})):32}
  tok_snap=${rnd:$((192 + 32 * ${#NODES[@]})):32}
  printf '%s\n' "$tok_admin" >"$D/run/admin.token"
  {
    echo "$tok_admin,admin,1,\"system:masters\""
    echo "$tok_prov,system:serviceaccount:$NS:csi-provisioner,2,\"system:serviceaccounts,system:serviceaccounts:$NS\""
    echo "$tok_att,system:serviceaccount:$NS:csi-attacher,3,\"system:serviceaccounts,system:serviceaccounts:$NS\""
    echo "$tok_rsz,system:serviceaccount:$NS:csi-resizer,6,\"system:serviceaccounts,system:serviceaccounts:$NS\""
    echo "$tok_snap,system:serviceaccount:$NS:csi-snapshotter,7,\"system:serviceaccounts,system:serviceaccounts:$NS\""
    local i=10 n
    for n in "${NODES[@]}"; do
      echo "${rnd:$((96 + 32 * (i - 10))):32},system:node:$n,$i,\"system:nodes\""
      i=$((i + 1))
    done
    # COSI: the accounts of manifests/cosi/rbac.yaml
    tok_cosi_ctrl=${rnd:$((96 + 32 * ${#NODES[@]})):32}
    tok_cosi_sc=${rnd:$((128 + 32 * ${#NODES[@]})):32}
    echo "$tok_cosi_ctrl,system:serviceaccount:$NS:container-object-storage-controller-sa,4,\"system:serviceaccounts,system:serviceaccounts:$NS\""
    echo "$tok_cosi_sc,system:serviceaccount:$NS:example-cosi-driver,5,\"system:serviceaccounts,system:serviceaccounts:$NS\""
  } >"$D/run/tokens.csv"
  chmod 600 "$D/run/tokens.csv" "$D/run/admin.token"
  local i
  if [ "$CLUSTER" = kubernetes ]; then
    # The real control plane keeps its own pid files and logs in k8s/ (down
    # stops it last); the node lifecycle controller takes the not-ready taint
    # off the nodes once kubelet-sim reports them Ready, so the scheduler
    # places pods on them.
    say "  starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler (hack/kubernetes/; the first run builds them: minutes)"
    "$ROOT/hack/kubernetes/cluster.sh" up "$D/k8s" --pki "$D/pki" --token-auth-file "$D/run/tokens.csv" \
      --kubeconfig-token "$tok_admin" --scheduler \
      --controllers persistentvolume-binder,attachdetach,namespace,garbagecollector,serviceaccount,serviceaccount-token,pvc-protection,pv-protection,nodelifecycle \
      >"$D/logs/cluster.log" 2>&1 || die "the control plane did not start: $(tail -n 5 "$D/logs/cluster.log")"
    # Its admin kubeconfig without the token: the template kc_for fills in.
    (umask 077 && sed 's/^    token: .*$/    {}/' "$D/k8s/admin.kubeconfig" >"$D/run/server.kubeconfig")
  else
    # The kubeconfig kube-lite writes has no user: each identity's copy gets
    # its token here (a token on the command line would show in ps).
    launch kube-lite "$KL" --listen 127.0.0.1:0 --write-kubeconfig "$D/run/server.kubeconfig" \
      --tls-cert-file "$D/pki/server.crt" --tls-private-key-file "$D/pki/server.key" \
      --client-ca-file "$D/pki/ca.crt" --token-auth-file "$D/run/tokens.csv" \
      --authorization-mode RBAC \
      --controllers binder,attach,namespaces
    for ((i = 0; i < 200; i++)); do
      [ -n "$(api_url)" ] && break
      ours kube-lite || die "kube-lite exited: $(tail -n 3 "$D/logs/kube-lite.log")"
      sleep 0.05
    done
    [ -n "$(api_url)" ] || die "kube-lite did not start"
  fi
  # kc_for FILE TOKEN: the server's kubeconfig with TOKEN as the user
  kc_for() {
    (umask 077 && sed "s/^    {}\$/    token: $2/" "$D/run/server.kubeconfig" >"$1")
    grep -q "token: $2" "$1" || die "cannot add a token to kube-lite's kubeconfig ($D/run/server.kubeconfig)"
  }
  kc_for "$D/kubeconfig" "$tok_admin"
  kc_for "$D/run/csi-provisioner.kubeconfig" "$tok_prov"
  kc_for "$D/run/csi-attacher.kubeconfig" "$tok_att"
  kc_for "$D/run/csi-resizer.kubeconfig" "$tok_rsz"
  kc_for "$D/run/csi-snapshotter.kubeconfig" "$tok_snap"
  kc_for "$D/run/objectstorage-controller.kubeconfig" "$tok_cosi_ctrl"
  kc_for "$D/run/objectstorage-sidecar.kubeconfig" "$tok_cosi_sc"
  for n in "${NODES[@]}"; do
    kc_for "$D/run/kubelet-$n.kubeconfig" "$(awk -F, -v u="system:node:$n" '$2 == u { print $1 }' "$D/run/tokens.csv")"
  done
  say "  $([ "$CLUSTER" = kubernetes ] && echo kube-apiserver || echo kube-lite) serves $(api_url)"
  # The sidecars' RBAC and the CSIDriver as a cluster gets them (the
  # top-level rendering of manifests/, its workloads left out: here the
  # processes run on this machine), and what the kubelets may write.
  local out n_obj
  out=$(K kustomize "$ROOT/manifests" | rbac_only) || die "manifests/ does not render (kubectl kustomize manifests)"
  n_obj=$(printf '%s\n' "$out" | grep -c '^kind:')
  { printf '%s\n' "$out"; kubelet_rbac; } >"$D/run/cluster.yaml"
  say "  from manifests/: $n_obj objects (the provisioner's, attacher's, resizer's and snapshotter's RBAC, the CSIDriver); the registrar needs none (kubelet mode)"
  out=$(K apply -f "$D/run/cluster.yaml" 2>&1) || die "RBAC and CSIDriver do not apply: $out"
  # kube-lite serves snapshot.storage.k8s.io built in; a cluster gets the CRDs.
  if [ "$CLUSTER" = kubernetes ]; then
    out=$(K apply -f "$ROOT/manifests/snapshotter/crd/" 2>&1) || die "the snapshot CRDs do not apply: $out"
    wait_until 30 "the three snapshot.storage.k8s.io CRDs are Established (manifests/snapshotter/crd)" snapshot_crds_established
  fi
  step_end "$([ "$CLUSTER" = kubernetes ] && echo "control plane, RBAC" || echo "kube-lite, RBAC")"

  # ---- the driver, the sidecars, the nodes ----------------------------------------------------
  step_begin "CSI driver (controller + node roles), sidecars, kubelet-sim"
  mkdir -p "$D/state/controller"
  launch example-csi-driver-controller "$DRV" --drivername "$DRIVER" \
    --endpoint "unix://$D/sock/controller.sock" --state-dir "$D/state/controller" \
    --nodeid controller --known-nodes "$(IFS=,; echo "${NODES[*]}")" --capacity 10Gi
  local pprov patt prsz psnap ports
  mapfile -t ports < <(free_ports $((4 + ${#NODES[@]})))
  pprov=${ports[0]}
  launch csi-provisioner "$PROV" --csi-address "$D/sock/controller.sock" \
    --kubeconfig "$D/run/csi-provisioner.kubeconfig" --leader-election --leader-election-namespace "$NS" \
    --http-endpoint "127.0.0.1:$pprov" --extra-create-metadata -v=2
  patt=${ports[1]}
  launch csi-attacher "$ATT" --csi-address "$D/sock/controller.sock" \
    --kubeconfig "$D/run/csi-attacher.kubeconfig" --leader-election --leader-election-namespace "$NS" \
    --http-endpoint "127.0.0.1:$patt" -v=2
  prsz=${ports[$((2 + ${#NODES[@]}))]}
  launch csi-resizer "$RSZ" --csi-address "$D/sock/controller.sock" \
    --kubeconfig "$D/run/csi-resizer.kubeconfig" --leader-election --leader-election-namespace "$NS" \
    --http-endpoint "127.0.0.1:$prsz" -v=2
  psnap=${ports[$((3 + ${#NODES[@]}))]}
  launch csi-snapshotter "$SNAP" --csi-address "$D/sock/controller.sock" \
    --kubeconfig "$D/run/csi-snapshotter.kubeconfig" --leader-election --leader-election-namespace "$NS" \
    --http-endpoint "127.0.0.1:$psnap" -v=2
  # The cluster's snapshot-controller (VolumeSnapshot -> VolumeSnapshotContent)
  # is no sidecar: its stand-in runs as the admin, as a control-plane
  # component would.
  launch snapshot-controller-sim "$SNAPCTL" --kubeconfig "$D/kubeconfig" \
    --retry-interval-start=100ms --retry-interval-max=2s -v=2
  local k=1 preg nd
  for n in "${NODES[@]}"; do
    nd="$D/nodes/$n"
    mkdir -p "$nd/plugins/$DRIVER" "$nd/plugins_registry" "$D/state/$n"
    launch "example-csi-driver-$n" "$DRV" --drivername "$DRIVER" \
      --endpoint "unix://$nd/plugins/$DRIVER/csi.sock" --state-dir "$D/state/$n" \
      --nodeid "$n" --topology "$ZONE_KEY=zone-$k" --capacity 10Gi --backend-dir "$D/state/controller"
    preg=${ports[$((k + 1))]}
    echo "$preg" >"$D/run/csi-node-driver-registrar-$n.port"
    launch "csi-node-driver-registrar-$n" "$REG" --csi-address "$nd/plugins/$DRIVER/csi.sock" \
      --kubelet-registration-path "$nd/plugins/$DRIVER/csi.sock" \
      --plugin-registration-path "$nd/plugins_registry" --http-endpoint "127.0.0.1:$preg" -v=2
    launch "kubelet-sim-$n" "$KSIM" --kubeconfig "$D/run/kubelet-$n.kubeconfig" --node-name "$n" \
      --plugins-registry-dir "$nd/plugins_registry" --root-dir "$nd/kubelet" --register-node \
      --sync-frequency 1s -v=2
    k=$((k + 1))
  done
  wait_until 30 "csi-provisioner is healthy (:$pprov/healthz/leader-election)" healthy "$pprov" /healthz/leader-election
  wait_until 30 "csi-attacher is healthy (:$patt/healthz/leader-election)" healthy "$patt" /healthz/leader-election
  wait_until 30 "csi-resizer is healthy (:$prsz/healthz/leader-election)" healthy "$prsz" /healthz/leader-election
  wait_until 30 "csi-snapshotter is healthy (:$psnap/healthz/leader-election)" healthy "$psnap" /healthz/leader-election
  for n in "${NODES[@]}"; do
    wait_until 30 "registrar on $n is healthy" healthy "$(cat "$D/run/csi-node-driver-registrar-$n.port")"
  done
  step_end "processes started"

  # ---- node registration -----------------------------------------------------------------------
  step_begin "nodes registered (CSINode, node-id annotation, topology labels)"
  k=1
  for n in "${NODES[@]}"; do
    wait_until 30 "csinode/$n lists $DRIVER with nodeID $n" csinode_ok "$n"
    check "node/$n has the csi.volume.kubernetes.io/nodeid annotation" node_annotated "$n"
    check "node/$n has label $ZONE_KEY=zone-$k" node_label "$n" "zone-$k"
    k=$((k + 1))
  done
  step_end "nodes registered"

  # ---- the scenario ----------------------------------------------------------------------------
  step_begin "default StorageClass (WaitForFirstConsumer, topology) and a claim without a class"
  { cat "$ROOT/manifests/deploy/example/storageclass.yaml"; echo "---"; cat <<EOF; } | K apply -f - >/dev/null ||
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: demo-claim
  namespace: $NS
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
EOF
    die "the example StorageClass or the claim does not apply"
  wait_until 10 "pvc/demo-claim is Pending (waiting for its first consumer)" phase_is PersistentVolumeClaim demo-claim Pending
  check "pvc/demo-claim got the default class example-hostpath" \
    [ "$(q "$(obj PersistentVolumeClaim demo-claim) | .spec.storageClassName // \"\"")" = example-hostpath ]
  check "no volume is provisioned before a pod uses the claim" no_create
  show_phases
  step_end "class + claim"

  # kube-lite has no scheduler: the pod names its node. On the real control
  # plane kube-scheduler places it by its node selector and so chooses the
  # node of the WaitForFirstConsumer claim (volume.kubernetes.io/selected-node).
  local placement="nodeName: $POD_NODE"
  if [ "$CLUSTER" = kubernetes ]; then
    step_begin "kube-scheduler places a pod using the claim on $POD_NODE"
    placement="nodeSelector: {kubernetes.io/hostname: $POD_NODE}"
  else
    step_begin "a pod on $POD_NODE uses the claim"
  fi
  K apply -f - >/dev/null <<EOF || die "the pod does not apply"
apiVersion: v1
kind: Pod
metadata:
  name: demo-pod
  namespace: $NS
spec:
  $placement
  containers:
    - name: app
      image: registry.k8s.io/pause:3.9
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      persistentVolumeClaim:
        claimName: demo-claim
EOF
  wait_until 30 "pvc/demo-claim is Bound" phase_is PersistentVolumeClaim demo-claim Bound
  PV=$(q "$(obj PersistentVolumeClaim demo-claim) | .spec.volumeName // \"\"")
  check "pv/$PV is in $POD_NODE's zone (nodeAffinity $ZONE_KEY=zone-2)" pv_zone "$PV" zone-2
  check "the driver created the volume in zone-2" drv_zone zone-2
  # kube-scheduler binds the pod after the claim is Bound (its volume binding
  # waits for that): wait, do not read once.
  wait_until 30 "pod/demo-pod is on $POD_NODE" pod_node_is "$POD_NODE"
  check "pvc/demo-claim: volume.kubernetes.io/selected-node is $POD_NODE" selected_node_is "$POD_NODE"
  show_phases
  step_end "provisioned"

  step_begin "attached to $POD_NODE, staged and published there by its kubelet"
  wait_until 30 "a VolumeAttachment for $PV on $POD_NODE is attached" va_attached "$PV"
  check "the driver holds the publication on $POD_NODE" drv_published "$POD_NODE"
  HANDLE=$(q "$(obj PersistentVolume "$PV") | .spec.csi.volumeHandle // \"\"")
  wait_until 30 "pod/demo-pod is Running (kubelet-sim on $POD_NODE)" pod_running
  check "node/$POD_NODE lists the volume in status.volumesInUse" in_use_is "$POD_NODE" "kubernetes.io/csi/$DRIVER^$HANDLE"
  check "the driver on $POD_NODE staged the volume and published it into the pod" node_drv_is "$POD_NODE" "true 1"
  show_phases
  step_end "attached, mounted"

  step_begin "claim grown to 2Gi while the pod runs → ControllerExpandVolume, NodeExpandVolume"
  K patch pvc demo-claim -n "$NS" --type merge -p '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}' \
    >/dev/null || die "the claim cannot be resized"
  wait_until 30 "csi-resizer grew the volume in the driver to 2Gi" drv_size_is controller 2147483648
  wait_until 30 "kubelet-sim on $POD_NODE grew it on the node: pvc/demo-claim has capacity 2Gi" claim_resized 2Gi
  check "no resize condition left on the claim (FileSystemResizePending gone)" claim_conditions_are ""
  check "pv/$PV has capacity 2Gi" pv_capacity_is "$PV" 2Gi
  check "the driver on $POD_NODE sees the volume at 2Gi" drv_size_is "$POD_NODE" 2147483648
  check "pod/demo-pod kept running" pod_running
  show_phases
  step_end "resized online"

  step_begin "VolumeSnapshot of the claim → CreateSnapshot"
  { cat "$ROOT/manifests/deploy/example/snapshot/volumesnapshotclass.yaml"; echo "---"; cat <<EOF; } | K apply -f - >/dev/null ||
apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata:
  name: demo-snapshot
  namespace: $NS
spec:
  source:
    persistentVolumeClaimName: demo-claim
EOF
    die "the example VolumeSnapshotClass or the VolumeSnapshot does not apply"
  wait_until 30 "volumesnapshot/demo-snapshot is ready to use (snapshot-controller-sim, csi-snapshotter)" snapshot_ready
  check "volumesnapshot/demo-snapshot got the default class example-snapclass" snapshot_class_is example-snapclass
  check "its VolumeSnapshotContent holds the driver's snapshot of the volume, restoreSize 2Gi" content_ok
  check "the driver holds one snapshot of the volume, 2Gi" drv_snapshots_are "$HANDLE 2147483648"
  say "    = $(snapshot_phases)"
  step_end "snapshot taken"

  step_begin "a new claim restored from the snapshot, used by a second pod on $POD_NODE"
  K apply -f - >/dev/null <<EOF || die "the restored claim or its pod does not apply"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: demo-restore
  namespace: $NS
spec:
  accessModes: [ReadWriteOnce]
  dataSource:
    apiGroup: snapshot.storage.k8s.io
    kind: VolumeSnapshot
    name: demo-snapshot
  resources:
    requests:
      storage: 2Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: demo-restore-pod
  namespace: $NS
spec:
  $placement
  containers:
    - name: app
      image: registry.k8s.io/pause:3.9
      volumeMounts:
        - name: data
          mountPath: /data
  volumes:
    - name: data
      persistentVolumeClaim:
        claimName: demo-restore
EOF
  wait_until 30 "pvc/demo-restore is Bound" phase_is PersistentVolumeClaim demo-restore Bound
  check "the driver created its volume from the snapshot" drv_restored
  wait_until 30 "pod/demo-restore-pod is Running (kubelet-sim on $POD_NODE)" pod_running demo-restore-pod
  check "the driver on $POD_NODE staged and published both volumes" node_drv_is "$POD_NODE" "true 1,true 1"
  show_phases
  step_end "restored"

  step_begin "pods deleted → unpublish, unstage, detach"
  K delete pod demo-pod demo-restore-pod -n "$NS" --wait=false >/dev/null
  wait_until 30 "the driver on $POD_NODE unpublished and unstaged the volume" node_drv_is "$POD_NODE" ""
  wait_until 30 "pod/demo-pod is gone (kubelet-sim removed it)" gone Pod demo-pod
  wait_until 30 "pod/demo-restore-pod is gone" gone Pod demo-restore-pod
  check "node/$POD_NODE no longer lists the volume in volumesInUse" in_use_is "$POD_NODE" ""
  wait_until 30 "the VolumeAttachment is gone" no_va
  check "the driver holds no publication" drv_published ""
  show_phases
  step_end "unmounted, detached"

  step_begin "snapshot deleted → DeleteSnapshot"
  K delete volumesnapshot demo-snapshot -n "$NS" --wait=false >/dev/null
  wait_until 30 "volumesnapshot/demo-snapshot is gone" k_gone volumesnapshot demo-snapshot -n "$NS"
  wait_until 30 "its VolumeSnapshotContent is gone" no_contents
  check "the driver deleted the snapshot" drv_snapshots_are ""
  step_end "snapshot deleted"

  step_begin "claims deleted → DeleteVolume"
  K delete pvc demo-claim demo-restore -n "$NS" --wait=false >/dev/null
  wait_until 30 "pvc/demo-claim is gone" gone PersistentVolumeClaim demo-claim
  wait_until 30 "pvc/demo-restore is gone" gone PersistentVolumeClaim demo-restore
  wait_until 30 "pv/$PV is gone" gone PersistentVolume "$PV"
  check "the driver deleted the volumes" drv_empty
  show_phases
  step_end "deleted"

  # ---- COSI: object buckets -------------------------------------------------------------------
  step_begin "COSI: CRDs and RBAC (manifests/cosi), example COSI driver, objectstorage-sidecar and -controller"
  out=$(K apply -f "$ROOT/manifests/cosi/crd/" 2>&1) || die "the COSI CRDs do not apply: $out"
  out=$(K kustomize "$ROOT/manifests/cosi" | rbac_only) || die "manifests/cosi does not render (kubectl kustomize manifests/cosi)"
  out=$(printf '%s\n' "$out" | K apply -f - 2>&1) || die "the COSI RBAC does not apply: $out"
  wait_until 30 "the five objectstorage.k8s.io CRDs are Established" crds_established
  mkdir -p "$D/state/cosi"
  launch example-cosi-driver "$CDRV" --drivername "$COSI_DRIVER" --endpoint "unix://$D/sock/cosi.sock" \
    --state-dir "$D/state/cosi"
  local posc poss
  mapfile -t ports < <(free_ports 2)
  poss=${ports[0]}
  posc=${ports[1]}
  launch objectstorage-sidecar "$OSS" --driver-addr "unix://$D/sock/cosi.sock" \
    --kubeconfig "$D/run/objectstorage-sidecar.kubeconfig" --leader-election-namespace "$NS" \
    --http-endpoint "127.0.0.1:$poss" -v=2
  launch objectstorage-controller "$OSC" --kubeconfig "$D/run/objectstorage-controller.kubeconfig" \
    --leader-election-namespace "$NS" --http-endpoint "127.0.0.1:$posc" -v=2
  wait_until 30 "objectstorage-sidecar leads and is healthy (:$poss/healthz/leader-election)" healthy "$poss" /healthz/leader-election
  wait_until 30 "objectstorage-controller leads and is healthy (:$posc/healthz/leader-election)" healthy "$posc" /healthz/leader-election
  step_end "COSI started"

  step_begin "BucketClass + BucketClaim → Bucket (DriverCreateBucket)"
  out=$(K apply -f "$ROOT/manifests/cosi/example/bucketclass.yaml" -f "$ROOT/manifests/cosi/example/bucketclaim.yaml" 2>&1) ||
    die "the example BucketClass and BucketClaim do not apply: $out"
  wait_until 30 "bucketclaim/example-bucket is ready" claim_ready
  BKT=$(K get bucketclaim example-bucket -n "$NS" -o jsonpath='{.status.bucketName}')
  check "bucket/$BKT is ready with the driver's bucket id" bucket_ready "$BKT"
  check "the driver holds the bucket" cosi_buckets_are 1
  say "    = $(cosi_phases)"
  step_end "bucket ready"

  step_begin "BucketAccess → DriverGrantBucketAccess → Secret with credentials"
  out=$(K apply -f "$ROOT/manifests/cosi/example/bucketaccessclass.yaml" -f "$ROOT/manifests/cosi/example/bucketaccess.yaml" 2>&1) ||
    die "the example BucketAccessClass and BucketAccess do not apply: $out"
  wait_until 30 "bucketaccess/example-access is granted" access_granted
  check "secret/example-bucket-credentials holds the BucketInfo with S3 credentials" creds_ok
  check "the driver holds one grant" cosi_grants_are 1
  say "    = $(cosi_phases)"
  step_end "access granted"

  step_begin "access and claim deleted → revoke, DeleteBucket"
  K delete bucketaccess example-access -n "$NS" --wait=false >/dev/null
  wait_until 30 "bucketaccess/example-access is gone (access revoked)" k_gone bucketaccess example-access -n "$NS"
  wait_until 30 "secret/example-bucket-credentials is gone" k_gone secret example-bucket-credentials -n "$NS"
  check "the driver holds no grant" cosi_grants_are 0
  K delete bucketclaim example-bucket -n "$NS" --wait=false >/dev/null
  wait_until 30 "bucketclaim/example-bucket is gone" k_gone bucketclaim example-bucket -n "$NS"
  wait_until 30 "bucket/$BKT is gone" k_gone bucket "$BKT"
  check "nothing is left in the COSI driver" cosi_buckets_are 0
  say "    = $(cosi_phases)"
  step_end "bucket deleted"

  # ---- what is left for the user -------------------------------------------------------------------
  summary
  [ "$STEP_FAILED" -eq 0 ]
}

# ---- checks: over one snapshot of the objects (run/snap.json, one kubectl
# call per poll) and the drivers' status.json, read with jq --------------------------------------

SNAP_KINDS=(PersistentVolumeClaim PersistentVolume VolumeAttachment Pod Node CSINode)
SNAP_PATHS=(/api/v1/persistentvolumeclaims /api/v1/persistentvolumes /apis/storage.k8s.io/v1/volumeattachments
  /api/v1/pods /api/v1/nodes /apis/storage.k8s.io/v1/csinodes)
# snap: the scenario's objects as one list (run/snap.json), read with one
# curl (a kubectl per poll costs a second on a busy machine)
snap() {
  local url i args=()
  url=$(api_url)
  for i in "${!SNAP_PATHS[@]}"; do args+=(-o "$D/run/snap.$i" "$url${SNAP_PATHS[$i]}"); done
  curl -sf --max-time 5 --cacert "$D/pki/ca.crt" -H "Authorization: Bearer $(cat "$D/run/admin.token")" "${args[@]}" ||
    return 1
  local files=()
  for i in "${!SNAP_PATHS[@]}"; do files+=("$D/run/snap.$i"); done
  jq -s --arg kinds "${SNAP_KINDS[*]}" '($kinds | split(" ")) as $k
    | {items: [to_entries[] | .key as $i | .value.items[]? | .kind = $k[$i]]}' "${files[@]}" \
    >"$D/run/snap.json.tmp" 2>/dev/null && mv "$D/run/snap.json.tmp" "$D/run/snap.json"
}
# q FILTER [jq args...]: FILTER over the snapshot's items
q() {
  local filter=$1
  shift
  jq -r "$@" "[.items[]] | $filter" "$D/run/snap.json" 2>/dev/null
}
obj() { printf 'map(select(.kind == "%s" and .metadata.name == "%s")) | .[0]' "$1" "$2"; }
phase_is() { snap; [ "$(q "$(obj "$1" "$2") | .status.phase // \"\"")" = "$3" ]; }
gone() { snap && [ "$(q "$(obj "$1" "$2") | . == null")" = true ]; }
csinode_ok() {
  snap
  [ "$(q "$(obj CSINode "$1") | .spec.drivers[]? | select(.name == \$d) | .nodeID" --arg d "$DRIVER")" = "$1" ]
}
node_annotated() {
  [ "$(q "$(obj Node "$1") | .metadata.annotations[\"csi.volume.kubernetes.io/nodeid\"] // \"{}\" | fromjson | .[\$d]" \
    --arg d "$DRIVER")" = "$1" ]
}
node_label() { [ "$(q "$(obj Node "$1") | .metadata.labels[\$k]" --arg k "$ZONE_KEY")" = "$2" ]; }
# pod_running [NAME]: the pod (demo-pod) is Running
pod_running() { snap && [ "$(q "$(obj Pod "${1:-demo-pod}") | .status.phase // \"\"")" = Running ]; }
in_use_is() { [ "$(q "$(obj Node "$1") | .status.volumesInUse // [] | join(\",\")")" = "$2" ]; }
# node_drv_is NODE WANT: what the node's driver process holds, one
# "<staged> <targets>" per volume it has staged or published ("true 1": staged
# and published into one pod; "": nothing)
node_drv_is() {
  [ "$(drv "$1" '[.volumes[] | select(.staged != null or ((.node_publications // []) | length > 0))
    | "\(.staged != null) \((.node_publications // []) | length)"] | join(",")')" = "$2" ]
}
pod_node_is() { snap && [ "$(q "$(obj Pod demo-pod) | .spec.nodeName // \"\"")" = "$1" ]; }
selected_node_is() {
  [ "$(q "$(obj PersistentVolumeClaim demo-claim) | .metadata.annotations[\"volume.kubernetes.io/selected-node\"] // \"\"")" = "$1" ]
}
pv_zone() {
  [ "$(q "$(obj PersistentVolume "$1") | .spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[] | select(.key == \$k) | .values[0]" --arg k "$ZONE_KEY")" = "$2" ]
}
va_attached() {
  snap
  [ "$(q "map(select(.kind == \"VolumeAttachment\" and .spec.source.persistentVolumeName == \$pv)) | map(\"\\(.spec.nodeName)=\\(.status.attached)\") | join(\",\")" --arg pv "$1")" = "$POD_NODE=true" ]
}
no_va() { snap && [ "$(q 'map(select(.kind == "VolumeAttachment")) | length')" = 0 ]; }
# resize: the claim's status.capacity and resize conditions, the PV's capacity
claim_resized() {
  snap && [ "$(q "$(obj PersistentVolumeClaim demo-claim) | .status.capacity.storage // \"\"")" = "$1" ]
}
claim_conditions_are() {
  [ "$(q "$(obj PersistentVolumeClaim demo-claim) | [.status.conditions[]?.type] | join(\",\")")" = "$1" ]
}
pv_capacity_is() { [ "$(q "$(obj PersistentVolume "$1") | .spec.capacity.storage // \"\"")" = "$2" ]; }
# drv ROLE FILTER: FILTER over state/ROLE/status.json
drv() { jq -r "$2" "$D/state/$1/status.json" 2>/dev/null; }
no_create() { [ "$(drv controller '.calls.CreateVolume // 0')" = 0 ]; }
drv_zone() { [ "$(drv controller "[.volumes[].topology[\"$ZONE_KEY\"]] | join(\",\")")" = "$1" ]; }
drv_published() { [ "$(drv controller '[.volumes[].published_nodes[]?] | join(",")')" = "$1" ]; }
drv_empty() { [ "$(drv controller '.volumes | length')" = 0 ]; }
# drv_size_is ROLE BYTES: the size of the one volume ROLE's driver holds
drv_size_is() { [ "$(drv "$1" '[.volumes[].capacity_bytes] | map(tostring) | join(",")')" = "$2" ]; }
# COSI (few objects: kubectl directly)
COSI_DRIVER=cosi.example.com
crds_established() {
  [ "$(K get crd -o jsonpath='{range .items[*]}{.spec.group} {.status.conditions[?(@.type=="Established")].status}{"\n"}{end}' 2>/dev/null |
    grep -c '^objectstorage.k8s.io True$')" = 5 ]
}
claim_ready() { [ "$(K get bucketclaim example-bucket -n "$NS" -o jsonpath='{.status.bucketReady}' 2>/dev/null)" = true ]; }
bucket_ready() {
  [ "$(K get bucket "$1" -o jsonpath='{.status.bucketReady} {.status.bucketID}' 2>/dev/null)" = "true $(drv cosi '.buckets[0].id // ""')" ]
}
access_granted() { [ "$(K get bucketaccess example-access -n "$NS" -o jsonpath='{.status.accessGranted}' 2>/dev/null)" = true ]; }
creds_ok() {
  K get secret example-bucket-credentials -n "$NS" -o jsonpath='{.data.BucketInfo}' 2>/dev/null | base64 -d |
    jq -e '.spec.secretS3.accessKeyID != "" and .spec.secretS3.accessSecretKey != "" and .spec.bucketName != ""' >/dev/null
}
# snapshots (few objects: kubectl directly)
snapshot_crds_established() {
  [ "$(K get crd -o jsonpath='{range .items[*]}{.spec.group} {.status.conditions[?(@.type=="Established")].status}{"\n"}{end}' 2>/dev/null |
    grep -c '^snapshot.storage.k8s.io True$')" = 3 ]
}
snapshot_ready() {
  [ "$(K get volumesnapshot demo-snapshot -n "$NS" -o jsonpath='{.status.readyToUse}' 2>/dev/null)" = true ]
}
snapshot_class_is() {
  [ "$(K get volumesnapshot demo-snapshot -n "$NS" -o jsonpath='{.spec.volumeSnapshotClassName}' 2>/dev/null)" = "$1" ]
}
# content_ok: the snapshot's bound content names the driver's one snapshot and the claim's volume
content_ok() {
  local c
  c=$(K get volumesnapshot demo-snapshot -n "$NS" -o jsonpath='{.status.boundVolumeSnapshotContentName}' 2>/dev/null)
  [ -n "$c" ] && [ "$(K get volumesnapshotcontent "$c" -o jsonpath='{.spec.source.volumeHandle} {.status.snapshotHandle} {.status.restoreSize}' 2>/dev/null)" = \
    "$HANDLE $(drv controller '.snapshots[0].id // ""') 2147483648" ]
}
no_contents() { [ -z "$(K get volumesnapshotcontents -o name 2>/dev/null)" ]; }
# drv_snapshots_are WANT: "<source volume> <size>" of each snapshot the driver holds
drv_snapshots_are() { [ "$(drv controller '[.snapshots[] | "\(.source_volume_id) \(.size_bytes)"] | join(",")')" = "$1" ]; }
# drv_restored: the driver holds a volume whose source is its one snapshot
drv_restored() {
  [ "$(drv controller '(.snapshots[0].id // "-") as $s | [.volumes[] | select(.source.type == "snapshot" and .source.id == $s)] | length')" = 1 ]
}
# or_dash TEXT: TEXT, or a dash when it is empty
or_dash() { if [ -n "$1" ]; then printf '%s' "$1"; else printf '—'; fi; }
snapshot_phases() {
  local r c
  r=$(K get volumesnapshot demo-snapshot -n "$NS" -o jsonpath='{.status.readyToUse} {.status.restoreSize}' 2>/dev/null || true)
  c=$(K get volumesnapshotcontents -o jsonpath='{range .items[*]}{.metadata.name}{end}' 2>/dev/null || true)
  [ "$r" = " " ] && r=""
  echo "volumesnapshot $(or_dash "${r:+ready=${r% *} size=${r#* }}") · content ${c:-—} · driver $(drv controller '.snapshots | length') snapshot(s)"
}
cosi_buckets_are() { [ "$(drv cosi '.buckets | length')" = "$1" ]; }
cosi_grants_are() { [ "$(drv cosi '[.buckets[].grants[]] | length')" = "$1" ]; }
k_gone() { local out; out=$(K get "$@" -o name 2>&1); [[ "$out" == *NotFound* ]]; }
cosi_phases() {
  local c b a
  c=$(K get bucketclaim example-bucket -n "$NS" -o jsonpath='{.status.bucketReady}' 2>/dev/null || true)
  b=$(K get buckets -o jsonpath='{range .items[*]}{.metadata.name}{" ready="}{.status.bucketReady}{end}' 2>/dev/null || true)
  a=$(K get bucketaccess example-access -n "$NS" -o jsonpath='{.status.accessGranted}' 2>/dev/null || true)
  echo "bucketclaim $(or_dash "${c:+ready=$c}") · bucket ${b:-—} · access $(or_dash "${a:+granted=$a}") · driver $(drv cosi '.buckets | length') bucket(s), $(drv cosi '[.buckets[].grants[]] | length') grant(s)"
}
# phases: one line with the scenario objects' state (from the last snapshot)
phases() {
  q '(map(select(.kind == "PersistentVolumeClaim" and .metadata.name == "demo-claim")) | .[0]) as $c
     | (map(select(.kind == "PersistentVolume" and .metadata.name == ($c.spec.volumeName // "-"))) | .[0]) as $v
     | (map(select(.kind == "VolumeAttachment")) | map("\(.spec.nodeName) attached=\(.status.attached // false)") | join(" ")) as $a
     | (map(select(.kind == "Pod" and .metadata.name == "demo-pod")) | .[0]) as $p
     | "pvc \($c.status.phase // "—")\(if $c.status.capacity.storage then " " + $c.status.capacity.storage else "" end) · pv \(if $v then "\($v.metadata.name | .[0:12])… \($v.status.phase // "")" else "—" end)"
       + " · va \(if $a == "" then "—" else $a end) · pod \(if $p then "on \($p.spec.nodeName)" else "—" end)"'
}

summary() {
  local i n
  {
    echo
    echo "  step                  time    API writes  driver calls"
    echo "  --------------------  ------  ----------  ------------"
    for i in "${!STEP_NAMES[@]}"; do
      printf '  %-20s  %5ss  %10s  %s\n' "${STEP_NAMES[$i]}" "${STEP_TIMES[$i]}" "${STEP_WRITES[$i]}" "${STEP_CALLS[$i]}"
    done
    echo
    echo "  processes (resident memory now):"
    for n in $(names); do
      ours "$n" && printf '    %-34s pid %-7s %s\n' "$n" "$(pid_of "$n")" "$(rss "$n")"
    done
    echo
    if [ "$STEP_FAILED" -eq 0 ]; then
      elapsed
      echo "  every step passed in ${ELAPSED// /}; the world keeps running:"
    else
      echo "  $STEP_FAILED check(s) FAILED; the world keeps running for a look:"
    fi
    echo
    echo "    export KUBECONFIG=$D/kubeconfig"
    echo "    kubectl get pv,pvc,volumeattachments,csinodes"
    echo "    kubectl get volumesnapshotclasses,volumesnapshots,volumesnapshotcontents -A"
    echo "    kubectl get bucketclasses,bucketclaims,buckets,bucketaccesses -A"
    echo
    echo "  default StorageClass: example-hostpath (claims without a class get it)"
    echo "  logs: $D/logs/   stop everything: make demo-down (hack/demo.sh down)"
  } | tee "$D/logs/summary.txt"
}

case ${1:-up} in
  up) shift || true; cmd_up "$@" ;;
  --*) cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: hack/demo.sh [up] [--no-build] [--plain] | down | status" >&2; exit 2 ;;
esac
