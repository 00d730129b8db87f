#!/usr/bin/env bash
# livenessprobe end to end: the example CSI driver (Probe failures and
# delays injected through its faults.json), the sidecar on free loopback
# ports, and curl on /healthz and /metrics. No API server is involved.
#
#   tests/e2e/test_livenessprobe.sh <build-dir>
#
# Prints "ok"/"FAIL" per check and ends with "N passed, N failed". Every
# process started here is stopped and must exit as the check expects.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${CSI_BUILD_DIR:-build}}
[ -d "$B" ] || B="$ROOT/$B"
B=$(cd "$B" && pwd)
DRV="$B/bin/example-csi-driver"
LP="$B/bin/livenessprobe"
WORK=$(mktemp -d)
DRIVER=hostpath.csi.example.com
SOCK="$WORK/drv/csi.sock"
# shellcheck source=tests/e2e/lib.sh
. "$ROOT/tests/e2e/lib.sh"

trap cleanup EXIT

for tool in curl python3; do
  command -v "$tool" >/dev/null || { bad "$tool is installed (hack/install-deps.sh)"; finish; }
done
for b in "$DRV" "$LP"; do
  [ -x "$b" ] || { bad "$b is built (make)"; finish; }
done

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# get PORT PATH: "<code> <body>" of a GET
get() { curl -s --max-time 10 -w ' %{http_code}' "http://127.0.0.1:$1$2" | awk '{ c = $NF; $NF = ""; sub(/ $/, ""); print c " " $0 }'; }
code_of() { curl -s -o /dev/null --max-time 10 -w '%{http_code}' "http://127.0.0.1:$1$2"; }
# port_of NAME: the port its ServeMux line names
port_of() { sed -n 's/.*ServeMux listening on .*(port \([0-9]*\)).*/\1/p' "$WORK/$1.log" | tail -n 1; }
listening() { [ -n "$(port_of "$1")" ]; }
start_driver() {
  start drv "$DRV" --endpoint "unix://$SOCK" --state-dir "$WORK/drv/state" --drivername "$DRIVER" --sync=false
  wait_for 20 test -S "$SOCK"
}
# run_lp ARGS...: a livenessprobe run to its end; "<exit status>|<output>"
run_lp() {
  local out rc
  out=$(timeout 20 "$LP" "$@" 2>&1)
  rc=$?
  printf '%s|%s' "$rc" "$out"
}
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# ---- flags (no driver needed) ---------------------------------------------------------------

check "an unknown flag: exit 1 with one line" "1|livenessprobe: flag provided but not defined: -no-such-flag" \
  "$(run_lp --no-such-flag)"
check "--health-port beside --http-endpoint: exit 1 with upstream's sentence" \
  "1|livenessprobe: Only one of \`--health-port\` and \`--http-endpoint\` can be explicitly set" \
  "$(run_lp --health-port=9809 --http-endpoint=127.0.0.1:0)"
check "--metrics-address beside --http-endpoint: exit 1 with upstream's sentence" \
  "1|livenessprobe: Only one of \`--metrics-address\` and \`--http-endpoint\` can be explicitly set" \
  "$(run_lp --metrics-address=127.0.0.1:0 --http-endpoint=127.0.0.1:0)"
check "--probe-timeout=0: exit 1 with one line" \
  "1|livenessprobe: --probe-timeout must be greater than 0 (got 0s): every probe would fail" \
  "$(run_lp --probe-timeout=0)"
check "a --health-port that is no port: exit 1 at once, before waiting for a driver" \
  "1|livenessprobe: --health-port: \"http\" is not a port number (0-65535)" \
  "$(run_lp --health-port=http --csi-address=/nonexistent.sock)"
out=$(run_lp --csi-address=localhost:10000)
check "a --csi-address that is no unix socket: exit 1 with one line" "1 1" \
  "${out%%|*} $(printf '%s\n' "${out#*|}" | wc -l)"
contains "... naming the flag" "csi-address" "$out"
out=$(run_lp --http-endpoint=127.0.0.1:99999 --csi-address=/nonexistent.sock)
check "a bad --http-endpoint: exit 1 at once, one line naming the flag" \
  "1|livenessprobe: --http-endpoint: \"127.0.0.1:99999\": port out of range 0-65535" "$out"
help=$("$LP" --help 2>&1)
contains "--help shows --probe-timeout's default 3s (upstream since 2.16)" $'-probe-timeout duration\n' "$help"
contains "... and its value" "(default 3s)" "$(printf '%s\n' "$help" | grep -A1 -- '^  -probe-timeout ' | tail -n 1)"
contains "--health-port defaults to 9808" '(default "9808")' "$(printf '%s\n' "$help" | grep -A1 -- '^  -health-port ' | tail -n 1)"
contains "--csi-address defaults to /run/csi/socket" '(default "/run/csi/socket")' \
  "$(printf '%s\n' "$help" | grep -A1 -- '^  -csi-address ' | tail -n 1)"
contains "--metrics-path defaults to /metrics" '(default "/metrics")' \
  "$(printf '%s\n' "$help" | grep -A1 -- '^  -metrics-path ' | tail -n 1)"
for flag in automaxprocs http-endpoint metrics-address v vmodule logging-format log-flush-frequency; do
  contains "--$flag is accepted" "  -$flag" "$help"
done

# ---- start: the port opens only once the driver answered --------------------------------------

mkdir -p "$WORK/drv/state"
P1=$(free_port)
start lp1 "$LP" --csi-address="$SOCK" --http-endpoint="127.0.0.1:$P1" --probe-timeout=1s -v=2
sleep 1
alive lp1 && ok "without a driver it waits (no crash)" || bad "without a driver it waits (no crash)" "$(cat "$WORK/lp1.log")"
check "... with its port closed (the kubelet sees connection refused)" 000 "$(code_of "$P1" /healthz)"
start_driver
expect "the driver up: the port opens" 20 listening lp1
check "/healthz: 200 ok" "200 ok" "$(get "$P1" /healthz)"
contains "the driver's name was asked at start (GetPluginInfo)" "CSI driver name: $DRIVER" "$(cat "$WORK/lp1.log")"
check "HEAD /healthz: 200" 200 "$(curl -s -I -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P1/healthz")"
check "another path: 404" 404 "$(code_of "$P1" /healthz/x)"

# ---- the driver's Probe answers ----------------------------------------------------------------

faults "$WORK/drv" '{"Probe": {"fail": {"count": 1, "code": "INTERNAL", "message": "disk on fire"}}}'
check "Probe fails: 500 with grpc-go's words" "500 rpc error: code = Internal desc = disk on fire" "$(get "$P1" /healthz)"
check "... and the next Probe passes: 200" "200 ok" "$(get "$P1" /healthz)"
faults "$WORK/drv" '{"Probe": {"fail": {"count": 1, "code": "FAILED_PRECONDITION", "message": "not mounted"}}}'
check "another code is named as grpc-go names it" "500 rpc error: code = FailedPrecondition desc = not mounted" \
  "$(get "$P1" /healthz)"
faults "$WORK/drv" '{"Probe": {"delay_ms": 3000}}'
t=$(date +%s%N)
check "Probe slower than --probe-timeout=1s: 500" \
  "500 rpc error: code = DeadlineExceeded desc = context deadline exceeded" "$(get "$P1" /healthz)"
took=$(ms_since "$t")
[ "$took" -ge 900 ] && [ "$took" -lt 2500 ] && ok "... answered at the timeout (${took} ms)" ||
  bad "... answered at the timeout" "took ${took} ms"
faults "$WORK/drv" ""
expect "faults cleared: 200 again" 10 test "$(get "$P1" /healthz)" = "200 ok"

# ---- the driver goes away and comes back ----------------------------------------------------------

mv "$SOCK" "$WORK/drv/moved.sock"
check "the socket file removed under a running driver: 500 (as upstream's dial per request)" \
  "500 context deadline exceeded" "$(get "$P1" /healthz)"
mv "$WORK/drv/moved.sock" "$SOCK"
check "... and back: 200" "200 ok" "$(get "$P1" /healthz)"

stop drv
check "the driver stopped: 500" "500 context deadline exceeded" "$(get "$P1" /healthz)"
contains "... logged with the reason" "does not exist" "$(grep 'Failed to establish connection' "$WORK/lp1.log" | tail -n 1)"
alive lp1 && ok "... and the sidecar keeps running" || bad "... and the sidecar keeps running"
start_driver
expect "the driver restarted: 200 again" 10 test "$(get "$P1" /healthz)" = "200 ok"
stop drv KILL 2>/dev/null
check "the driver killed (its socket left behind): 500" "500 context deadline exceeded" "$(get "$P1" /healthz)"
start_driver
check "the driver restarted on the stale socket: 200 at the first probe" "200 ok" "$(get "$P1" /healthz)"

# ---- metrics (with --http-endpoint) -----------------------------------------------------------------

m=$(curl -s --max-time 10 "http://127.0.0.1:$P1/metrics")
contains "/metrics: Probe calls by driver, method and code" \
  "csi_sidecar_operations_seconds_count{driver_name=\"$DRIVER\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Identity/Probe\"}" "$m"
contains "... failures by their code" "grpc_status_code=\"Internal\",method_name=\"/csi.v1.Identity/Probe\"} 1" "$m"
contains "... timeouts too" "grpc_status_code=\"DeadlineExceeded\",method_name=\"/csi.v1.Identity/Probe\"}" "$m"
contains "... GetPluginInfo at start under unknown-driver, as upstream" \
  "csi_sidecar_operations_seconds_count{driver_name=\"unknown-driver\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Identity/GetPluginInfo\"} 1" "$m"
contains "... and process_start_time_seconds" "# TYPE process_start_time_seconds gauge" "$m"

stop lp1
check "SIGTERM: exit 0" 0 "${RC[lp1]}"

# ---- --health-port and --metrics-address (the deprecated pair) ----------------------------------------

P2=$(free_port)
P3=$(free_port)
start lp2 "$LP" --csi-address="unix://$SOCK" --health-port="$P2" --metrics-address="127.0.0.1:$P3"
expect "--health-port: listening" 20 listening lp2
check "--health-port: /healthz 200 ok" "200 ok" "$(get "$P2" /healthz)"
contains "... on every IPv4 interface, as upstream" "ServeMux listening on 0.0.0.0:$P2" "$(cat "$WORK/lp2.log")"
check "... without metrics there" 404 "$(code_of "$P2" /metrics)"
contains "--metrics-address: the metrics on a server of their own" "csi_sidecar_operations_seconds_count{driver_name=\"$DRIVER\"" \
  "$(curl -s --max-time 10 "http://127.0.0.1:$P3/metrics")"
check "... which has no /healthz" 404 "$(code_of "$P3" /healthz)"
stop lp2
check "SIGTERM: exit 0" 0 "${RC[lp2]}"

P4=$(free_port)
start lp3 "$LP" --csi-address="$SOCK" --health-port=9808 --http-endpoint="127.0.0.1:$P4" --metrics-path=/m
expect "an explicit --health-port=9808 beside --http-endpoint is accepted, as upstream" 20 listening lp3
check "... /healthz on --http-endpoint" "200 ok" "$(get "$P4" /healthz)"
check "... metrics at --metrics-path" 200 "$(code_of "$P4" /m)"
out=$(run_lp --csi-address="$SOCK" --http-endpoint="127.0.0.1:$P4")
check "a port in use: exit 1" 1 "${out%%|*}"
contains "... its last line naming the flag" "livenessprobe: --http-endpoint: cannot listen on" "$(printf '%s\n' "$out" | tail -n 1)"
stop lp3
check "SIGTERM: exit 0" 0 "${RC[lp3]}"

# ---- start-up failures and SIGTERM while waiting ---------------------------------------------------------

faults "$WORK/drv" '{"GetPluginInfo": {"fail": {"count": 1, "code": "UNIMPLEMENTED", "message": "no name"}}}'
out=$(run_lp --csi-address="$SOCK" --http-endpoint=127.0.0.1:0)
check "GetPluginInfo fails at start: exit 1 (as upstream)" 1 "${out%%|*}"
contains "... saying why" "livenessprobe: Failed to get CSI driver name: rpc error: code = Unimplemented desc = no name" "$out"
faults "$WORK/drv" ""

start lp4 "$LP" --csi-address="$WORK/none.sock" --http-endpoint=127.0.0.1:0
sleep 0.5
t=$(date +%s%N)
stop lp4
check "SIGTERM while waiting for the driver: exit 0" 0 "${RC[lp4]}"
took=$(ms_since "$t")
[ "$took" -lt 2000 ] && ok "... at once (${took} ms)" || bad "... at once" "took ${took} ms"

stop drv
check "the driver stops cleanly" 0 "${RC[drv]}"
finish
