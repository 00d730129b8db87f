# Shared by the end-to-end scripts (sourced, not run): check counters, polling,
# and background processes that are always stopped. The sourcing script sets
# WORK (its scratch directory) first; it may set EXPECT_LAST to a file whose
# content a failed `expect` shows (the last state it polled).
# shellcheck shell=bash

passed=0
failed=0
# A script stopped by a signal (a runner's timeout, ^C) still runs its EXIT
# trap, which stops what it started: untrapped, bash would die without it.
trap 'exit 143' TERM
trap 'exit 130' INT

declare -A PID=() # process name -> pid
declare -A RC=()  # process name -> exit status once stopped
NAMES=()          # start order

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() {
  failed=$((failed + 1))
  echo "FAIL $1"
  [ $# -gt 1 ] && printf '%s\n' "$2" | head -n 20 | sed 's/^/     /'
  return 0
}
# check NAME EXPECTED ACTUAL
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "want [$2]"$'\n'"got  [$3]"; fi; }
# contains NAME NEEDLE HAYSTACK
contains() { case "$3" in *"$2"*) ok "$1" ;; *) bad "$1" "[$2] not in [$3]" ;; esac; }
# expect NAME TIMEOUT-SECONDS COMMAND...: polls COMMAND until it succeeds
expect() {
  local name=$1 secs=$2 last=""
  shift 2
  if wait_for "$secs" "$@"; then
    ok "$name"
  else
    [ -n "${EXPECT_LAST:-}" ] && last=$'\n'"last: $(cat "$EXPECT_LAST" 2>/dev/null)"
    bad "$name" "not within ${secs}s: $*$last"
  fi
}
# wait_for TIMEOUT-SECONDS COMMAND...: 0 once COMMAND succeeds, 1 at the timeout
wait_for() {
  local secs=$1
  shift
  local end=$((SECONDS + secs))
  while :; do
    "$@" && return 0
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 0.1
  done
}

# start NAME COMMAND...: runs in the background, output in $WORK/NAME.log
start() {
  local name=$1
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PID[$name]=$!
  NAMES+=("$name")
}
alive() { [ -n "${PID[$1]:-}" ] && kill -0 "${PID[$1]}" 2>/dev/null; }
# stop NAME [SIGNAL]: signals it (TERM by default), waits, records the exit
# status; one still running after 15 s is killed and recorded as "hung"
stop() {
  local name=$1 sig=${2:-TERM} i
  [ -n "${PID[$name]:-}" ] || return 0
  kill -"$sig" "${PID[$name]}" 2>/dev/null
  for ((i = 0; i < 150; i++)); do alive "$name" || break; sleep 0.1; done
  if alive "$name"; then
    kill -KILL "${PID[$name]}" 2>/dev/null
    wait "${PID[$name]}" 2>/dev/null
    RC[$name]=hung
  else
    wait "${PID[$name]}" 2>/dev/null
    RC[$name]=$?
  fi
  unset "PID[$name]"
}
# stop_all: every process still running, the last started first
stop_all() {
  local i
  for ((i = ${#NAMES[@]} - 1; i >= 0; i--)); do stop "${NAMES[$i]}"; done
}

# ---- the world the scripts share: kube-lite, kubectl, the example driver ----------------

# KEEP_WORK=1 keeps the scratch directory (logs, the audit log) for a look
cleanup() {
  stop_all
  world_down
  if [ "${KEEP_WORK:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
K() { kubectl --kubeconfig "$WORK/admin.kubeconfig" --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
jp() { K get "$1" "$2" -o jsonpath="$3" 2>/dev/null; }
# pyj EXPR: evaluates a Python expression over the JSON on stdin (bound to o)
pyj() {
  python3 -c '
import json, sys
try:
    o = json.load(sys.stdin)
    r = eval(sys.argv[1])
except Exception as e:
    r = "<%s: %s>" % (type(e).__name__, e)
print(r if isinstance(r, str) else json.dumps(r, sort_keys=True))' "$1"
}
# faults DIR JSON: installs fault rules (write + rename, as the driver wants); "" clears
faults() {
  if [ -z "$2" ]; then
    rm -f "$1/state/faults.json"
  else
    printf '%s\n' "$2" >"$1/state/faults.json.tmp" && mv "$1/state/faults.json.tmp" "$1/state/faults.json"
  fi
}
# has_event NAME TEXT: the events of NAME hold TEXT (a variable, not a pipeline:
# grep -q stopping early would fail it under pipefail)
has_event() { local e; e=$(events "$1"); [[ "$e" == *"$2"* ]]; }
phase_is() { [ "$(jp "$1" "$2" '{.status.phase}')" = "$3" ]; }
is_gone() { local out; out=$(K get "$1" "$2" -o name 2>&1); [[ "$out" == *NotFound* ]]; }
# drv_eval DIR EXPR: the Python expression EXPR over the example driver's DIR/state/status.json,
# with s (the whole file; empty lists when it cannot be read yet), vols, snaps, and
# byname/byid/snapbyname/snapbyid (volumes and snapshots by name and id). A string prints as
# it is, anything else as JSON with sorted keys. Each suite's drv names its driver's DIR.
drv_eval() {
  python3 -c '
import json, sys
try:
    s = json.load(open(sys.argv[1] + "/state/status.json"))
except Exception:
    s = {"volumes": [], "snapshots": [], "calls": {}}
vols = s.get("volumes", [])
snaps = s.get("snapshots", [])
byname = {v.get("name"): v for v in vols}
byid = {v.get("id"): v for v in vols}
snapbyname = {v.get("name"): v for v in snaps}
snapbyid = {v.get("id"): v for v in snaps}
r = eval(sys.argv[2])
print(r if isinstance(r, str) else json.dumps(r, sort_keys=True))' "$1" "$2"
}
drv_calls() { drv "$1" "s.get('calls', {}).get('$2', 0)"; }
kl_up() { grep -qs 'serving on http' "$WORK/kube-lite.log" || ! alive kube-lite; }
KP() { kubectl --kubeconfig "$WORK/provisioner.kubeconfig" --cache-dir "$WORK/cache" --request-timeout=10s "$@"; }
# ready NAME: the provisioner runs its controllers (or says why not)
ready() {
  if wait_for 30 started "$1" && alive "$1"; then ok "$1 starts"; else bad "$1 starts" "$(tail -n 20 "$WORK/$1.log")"; fi
}
klmetrics() {
  curl -s --max-time 5 --cacert "$WORK/pki/ca.crt" -H 'Authorization: Bearer admin-token' \
    "$(sed -n 's/^kube-lite: serving on //p' "$WORK/kube-lite.log")/metrics"
}
finish() {
  if [ "$failed" -gt 0 ]; then
    for n in "${NAMES[@]}"; do
      echo "---- last lines of $n.log"
      tail -n 15 "$WORK/$n.log"
    done
  fi
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

# ---- two worlds: kube-lite (default) or the real control plane ------------------------------
# WORLD=kubernetes runs a suite against etcd + kube-apiserver + kube-controller-manager 1.20
# (hack/kubernetes/); WORLD=kube-lite (the default) against kube-lite. A suite calls
# world_up with kube-lite's flags; on the real control plane the ones that have a meaning
# there are translated (tokens, TLS material, the admin token) and the controllers are
# kube-controller-manager's own (PV binder, attach-detach, protection, ...).
WORLD=${WORLD:-kube-lite}
case $WORLD in kube-lite | kubernetes) ;; *)
  echo "WORLD must be kube-lite or kubernetes, not '$WORLD'" >&2
  exit 2
  ;;
esac
SERVER=""       # the API's URL once world_up returned
ADMIN_TOKEN=""  # the admin's bearer token ("" for kube-lite without tokens)
on_real() { [ "$WORLD" = kubernetes ]; }

# world_up KUBE-LITE-FLAGS...: 0 once the API serves, 1 (with a failed check) otherwise
world_up() {
  local a tokens="" token="" scheduler=0 ctl=""
  for a in "$@"; do
    case $a in --kubeconfig-token=*) token=${a#*=} ;; --token-auth-file=*) tokens=${a#*=} ;; esac
  done
  local prev=""
  for a in "$@"; do
    case $prev in --kubeconfig-token) token=$a ;; --token-auth-file) tokens=$a ;; --controllers) ctl=$a ;; esac
    prev=$a
  done
  if ! on_real; then
    start kube-lite "$B/bin/kube-lite" --listen 127.0.0.1:0 --write-kubeconfig "$WORK/admin.kubeconfig" "$@"
    if wait_for 20 kl_up && alive kube-lite; then
      SERVER=$(sed -n 's/^kube-lite: serving on //p' "$WORK/kube-lite.log")
      ADMIN_TOKEN=$token
      ok "kube-lite serves"
      return 0
    fi
    bad "kube-lite starts" "$(cat "$WORK/kube-lite.log")"
    return 1
  fi
  [ -n "$token" ] || token=admin-token
  [ -f "$WORK/pki/ca.crt" ] || "$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
  local args=(--pki "$WORK/pki" --kubeconfig-token "$token" --owner $$)
  [ -n "$tokens" ] && args+=(--token-auth-file "$tokens")
  [ "${WORLD_SCHEDULER:-0}" = 1 ] && args+=(--scheduler)
  if SERVER=$("$ROOT/hack/kubernetes/cluster.sh" up "$WORK/k8s" "${args[@]}" 2>"$WORK/k8s-up.log"); then
    cp "$WORK/k8s/admin.kubeconfig" "$WORK/admin.kubeconfig"
    ADMIN_TOKEN=$token
    ok "the real control plane serves (etcd, kube-apiserver, kube-controller-manager 1.20.2)"
    return 0
  fi
  bad "the real control plane starts" "$(tail -n 20 "$WORK/k8s-up.log")"
  return 1
}
# rbac_world_up NAME ACCOUNT [KUBE-LITE-FLAGS...]: world_up with TLS (certificates in
# $WORK/pki), bearer tokens and RBAC for one sidecar's suite: the admin (admin-token, in
# system:masters) and NAME-token for system:serviceaccount:$NS:ACCOUNT, whose kubeconfig is
# $WORK/NAME.kubeconfig. The flags go to world_up (e.g. --controllers binder). 0 once the
# API serves.
rbac_world_up() {
  local name=$1 account=$2
  shift 2
  "$ROOT/hack/kube-lite/gen-certs.sh" "$WORK/pki" >/dev/null
  printf 'admin-token,admin,1,"system:masters"\n%s-token,system:serviceaccount:%s:%s,2\n' \
    "$name" "$NS" "$account" >"$WORK/tokens.csv"
  world_up --tls-cert-file "$WORK/pki/server.crt" --tls-private-key-file "$WORK/pki/server.key" \
    --client-ca-file "$WORK/pki/ca.crt" --token-auth-file "$WORK/tokens.csv" \
    --authorization-mode RBAC --kubeconfig-token admin-token "$@" || return 1
  sed "s/token: admin-token/token: $name-token/" "$WORK/admin.kubeconfig" >"$WORK/$name.kubeconfig"
}
# snapshot_crds_up: on the real control plane, manifests/snapshotter/crd/ applied and the three
# snapshot.storage.k8s.io CRDs Established (two checks); kube-lite serves those types built in
snapshot_crds_up() {
  on_real || return 0
  local out
  out=$(K apply -f "$ROOT/manifests/snapshotter/crd/" 2>&1)
  contains "the snapshot CRDs apply" "customresourcedefinition.apiextensions.k8s.io/volumesnapshots.snapshot.storage.k8s.io created" "$out"
  expect "the three snapshot CRDs are Established" 30 snapshot_crds_established
}
snapshot_crds_established() {
  [ "$(K get crd -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Established")].status}{"\n"}{end}' |
    grep -c 'snapshot.storage.k8s.io True')" -ge 3 ]
}
# require_tools TOOL...: each is installed, else a failed check and the suite ends
require_tools() {
  local t
  for t in "$@"; do command -v "$t" >/dev/null || { bad "$t is installed (hack/install-deps.sh)"; finish; }; done
}
# require_built FILE...: each is built, else a failed check and the suite ends
require_built() {
  local f
  for f in "$@"; do [ -x "$f" ] || { bad "${f##*/} is built (make tests)"; finish; }; done
}
world_down() { on_real && [ -d "$WORK/k8s" ] && "$ROOT/hack/kubernetes/cluster.sh" down "$WORK/k8s"; return 0; }
# acurl ARGS... PATH: curl as the admin against the API (TLS and token when the world has them)
acurl() {
  local auth=()
  [ -n "$ADMIN_TOKEN" ] && auth=(-H "Authorization: Bearer $ADMIN_TOKEN")
  [[ "$SERVER" == https:* ]] && auth+=(--cacert "$WORK/pki/ca.crt")
  local path=${*: -1}
  curl -s --max-time 10 "${auth[@]}" "${@:1:$#-1}" "$SERVER$path"
}
# requests VERB-REGEX RESOURCE-REGEX CODE-REGEX [USER-REGEX]: how many API requests matched
# so far. kube-lite counts them in apiserver_request_total (any user); the real control plane
# in its audit log (one line per completed request), where USER-REGEX can pick the caller.
requests() {
  if on_real; then
    python3 - "$WORK/k8s/logs/audit.log" "$@" <<'PY'
import json, re, sys
path, verb, res, code = sys.argv[1:5]
user = sys.argv[5] if len(sys.argv) > 5 else ".*"
n = 0
try:
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        ref = e.get("objectRef") or {}
        r = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
        c = str((e.get("responseStatus") or {}).get("code", ""))
        if (re.fullmatch(verb, e.get("verb", "")) and re.fullmatch(res, r) and re.fullmatch(code, c)
                and re.fullmatch(user, (e.get("user") or {}).get("username", ""))):
            n += 1
except OSError:
    pass
print(n)
PY
  else
    klmetrics | python3 -c '
import re, sys
verb, res, code = sys.argv[1:4]
n = 0
for line in sys.stdin:
    m = re.match(r"apiserver_request_total\{(.*)\} (\S+)$", line.strip())
    if not m:
        continue
    l = dict(re.findall(r"(\w+)=\"([^\"]*)\"", m.group(1)))
    if re.fullmatch(verb, l.get("verb", "")) and re.fullmatch(res, l.get("resource", "")) and re.fullmatch(code, l.get("code", "")):
        n += int(float(m.group(2)))
print(n)' "$1" "$2" "$3"
  fi
}
