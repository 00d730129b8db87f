# Shared by the end-to-end scripts (sourced, not run): check counters, polling,
# and background processes that are always stopped. The sourcing script sets
# WORK (its scratch directory) first; it may set EXPECT_LAST to a file whose
# content a failed `expect` shows (the last state it polled).
# shellcheck shell=bash

passed=0
failed=0

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

cleanup() {
  stop_all
  rm -rf "$WORK"
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
drv_calls() { drv "$1" "s.get('calls', {}).get('$2', 0)"; }
kl_up() { grep -q 'serving on https://' "$WORK/kube-lite.log" || ! alive kube-lite; }
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
