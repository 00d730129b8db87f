#!/usr/bin/env bash
# Sourced by the benchmarks under hack/bench: what starting and stopping the
# local world takes in each of them.

# stop PID [NAME]: SIGTERM, SIGKILL after 20 s; a nonzero exit is reported
# when NAME is given.
# shellcheck disable=SC2317 # called from the scripts' cleanup traps
stop() {
  local pid=$1 name=${2:-} rc
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 200); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    [ -z "$name" ] || echo "  $name did not stop within 20 s of SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rc=0
  wait "$pid" 2>/dev/null || rc=$?
  if [ -n "$name" ] && [ "$rc" -ne 0 ]; then
    echo "  $name exited with status $rc" >&2
  fi
}

# wait_serving FILE: 0 once FILE says "serving on" (kube-lite's and the
# example driver's ready line), 1 after 10 s without it.
wait_serving() {
  local i
  for i in $(seq 1 200); do
    grep -q 'serving on' "$1" 2>/dev/null && return 0
    [ "$i" = 200 ] || sleep 0.05
  done
  return 1
}
