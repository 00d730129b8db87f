#!/usr/bin/env bash
# Benchmarks csi-node-driver-registrar: how fast it is registered after its
# start, and its idle memory, in both modes. Prints figures; asserts nothing.
#
#   hack/bench/bench_registrar.sh            (B=build RUNS=5 by default)
#
# Kubelet mode: the example driver is up first ("once the driver answers");
# the time is from just before the registrar is started (fork + exec
# included) to the first GetInfo answered on its registration socket
# (tests/e2e/reg_tool polls every 1 ms). Direct mode: kube-lite (plain
# HTTP) with the Node present; the time is from the start to the
# registrar's "Registered driver" log line (klog's microsecond timestamp),
# i.e. Node patched and CSINode created.
# Memory: /proc/PID/status VmRSS and /proc/PID/smaps_rollup 2 s after the
# registration, split into shared (library pages other processes share)
# and private (this process's own) pages.
# Targets (issue 12): registered within 20 ms; kubelet mode idle RSS
# <= 10 MB and private dirty <= 2 MB.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${B:-build}
RUNS=${RUNS:-5}
make --no-print-directory -s B="$B" "$B/bin/kube-lite" "$B/bin/example-csi-driver" \
  "$B/bin/kubelet-sim" "$B/tests/e2e/reg_tool" all >/dev/null
# A freshly linked binary's pages stay dirty in the page cache until written
# back, and would count as the registrar's private dirty memory.
sync
REG="$B/bin/csi-node-driver-registrar"
TOOL="$B/tests/e2e/reg_tool"
DRIVER=hostpath.csi.example.com

tmp=$(mktemp -d "${TMPDIR:-/tmp}/registrar-bench.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/reg" "$tmp/state"
"$B/bin/example-csi-driver" --endpoint "unix://$tmp/csi.sock" --state-dir "$tmp/state" \
  --drivername "$DRIVER" --nodeid node-1-id --topology topology.example.com/zone=z1 \
  --sync=false >"$tmp/drv.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do [ -S "$tmp/csi.sock" ] && break; sleep 0.05; done

# mem PID LABEL: VmRSS and the smaps_rollup split
mem() {
  local pid=$1 label=$2
  awk -v l="$label" '
    FNR == NR && /^VmRSS:/ { rss = $2 }
    FNR != NR && /^Shared_Clean:/ { sc = $2 } FNR != NR && /^Shared_Dirty:/ { sd = $2 }
    FNR != NR && /^Private_Clean:/ { pc = $2 } FNR != NR && /^Private_Dirty:/ { pd = $2 }
    FNR != NR && /^Pss:/ { pss = $2 }
    END { printf "  %s idle: VmRSS %.1f MiB = shared %.1f MiB (clean %.1f, dirty %.1f) + private %.1f MiB (clean %.1f, dirty %.1f); PSS %.1f MiB\n",
            l, rss/1024, (sc+sd)/1024, sc/1024, sd/1024, (pc+pd)/1024, pc/1024, pd/1024, pss/1024 }' \
    "/proc/$pid/status" "/proc/$pid/smaps_rollup"
}
stats() { sort -n | awk '{ a[NR] = $1; s += $1 } END { printf "min %.1f ms, median %.1f ms, max %.1f ms (%d runs)", a[1], a[int((NR + 1) / 2)], a[NR], NR }'; }

echo "csi-node-driver-registrar benchmark ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"

# klog_at LOG PATTERN: seconds of the day of the first line matching PATTERN
klog_at() { sed -n "s/^I[0-9]\{4\} \([0-9:.]*\) .*$2.*/\1/p" "$1" | head -n 1 |
  awk -F: '{ printf "%.6f", $1 * 3600 + $2 * 60 + $3 }'; }
# sod NS: seconds of the day (local time) of a wall clock in nanoseconds
sod() { date -d "@$(echo "$1 / 1000000000" | bc -l)" +%H:%M:%S.%N | awk -F: '{ printf "%.6f", $1 * 3600 + $2 * 60 + $3 }'; }
ms() { echo "($2 - $1) * 1000" | bc -l; }
# cpu_ms PID: CPU time all threads of PID have used so far (schedstat, ns),
# which a loaded machine stretches far less than wall time
cpu_ms() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.1f\n", s / 1e6 }'; }

# ---- kubelet mode -----------------------------------------------------------------------------
: >"$tmp/kubelet.ms"
: >"$tmp/exec.ms"
: >"$tmp/main.ms"
: >"$tmp/cpu.ms"
for i in $(seq "$RUNS"); do
  t0=$(date +%s%N)
  "$REG" --csi-address="$tmp/csi.sock" --kubelet-registration-path="$tmp/csi.sock" \
    --plugin-registration-path="$tmp/reg" >"$tmp/reg-$i.log" 2>&1 &
  pid=$!
  t1=$("$TOOL" wait "$tmp/reg/$DRIVER-reg.sock" 20)
  cpu_ms "$pid" >>"$tmp/cpu.ms"
  echo "$(((t1 - t0) / 1000)) / 1000" | bc -l >>"$tmp/kubelet.ms"
  # where the time went: exec and dynamic loading up to main()'s first line,
  # then main() up to the socket serving (the registrar's own log)
  s0=$(sod "$t0")
  ms "$s0" "$(klog_at "$tmp/reg-$i.log" 'Version:')" >>"$tmp/exec.ms"
  ms "$(klog_at "$tmp/reg-$i.log" 'Version:')" "$(klog_at "$tmp/reg-$i.log" 'Registration Server started')" >>"$tmp/main.ms"
  if [ "$i" -eq "$RUNS" ]; then
    sleep 2
    echo "kubelet mode (target: registered within 20 ms, RSS <= 10 MB, private dirty <= 2 MB)"
    echo "  start -> GetInfo answered: $(stats <"$tmp/kubelet.ms")"
    echo "    of which exec + loading the shared libraries: $(stats <"$tmp/exec.ms")"
    echo "    of which main() -> socket served (driver connect, GetPluginInfo, listen): $(stats <"$tmp/main.ms")"
    echo "  CPU time used by then (all threads, exec and loading included): $(stats <"$tmp/cpu.ms")"
    mem "$pid" "kubelet mode"
    echo "  threads: $(ls "/proc/$pid/task" | wc -l)"
  fi
  kill "$pid"
  wait "$pid" || true
done

# ---- direct mode ------------------------------------------------------------------------------
"$B/bin/kube-lite" --listen 127.0.0.1:0 --write-kubeconfig "$tmp/kc" >"$tmp/kl.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 200); do grep -q 'serving on' "$tmp/kl.log" && break; sleep 0.05; done
url=$(sed -n 's/^kube-lite: serving on //p' "$tmp/kl.log")
curl -s -o /dev/null -X POST -H 'Content-Type: application/json' "$url/api/v1/nodes" \
  -d '{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-1"}}'
now_sec() { date +%H:%M:%S.%N | awk -F: '{ printf "%.6f", $1 * 3600 + $2 * 60 + $3 }'; }
: >"$tmp/direct.ms"
: >"$tmp/dcpu.ms"
for i in $(seq "$RUNS"); do
  t0=$(now_sec)
  "$REG" --csi-address="$tmp/csi.sock" --node-registration=direct --node-name=node-1 \
    --kubeconfig="$tmp/kc" --cleanup-on-exit >"$tmp/direct-$i.log" 2>&1 &
  pid=$!
  for _ in $(seq 400); do grep -q 'Registered driver' "$tmp/direct-$i.log" && break; sleep 0.05; done
  cpu_ms "$pid" >>"$tmp/dcpu.ms"
  t1=$(klog_at "$tmp/direct-$i.log" 'Registered driver')
  echo "($t1 - $t0) * 1000" | bc -l >>"$tmp/direct.ms"
  if [ "$i" -eq "$RUNS" ]; then
    sleep 2
    echo "direct mode (kube-lite on the same cores; Node patch + CSINode create)"
    echo "  start -> registration written: $(stats <"$tmp/direct.ms")"
    echo "  CPU time used by then (all threads): $(stats <"$tmp/dcpu.ms")"
    mem "$pid" "direct mode"
    echo "  threads: $(ls "/proc/$pid/task" | wc -l)"
  fi
  kill "$pid"
  wait "$pid" || true
done
# The floor under every start: exec and the dynamic loader, with nothing else
# (--version returns right after parsing the flags).
: >"$tmp/ver.ms"
for i in $(seq "$RUNS"); do
  t0=$(date +%s%N)
  "$REG" --version >/dev/null
  echo "$((($(date +%s%N) - t0) / 1000)) / 1000" | bc -l >>"$tmp/ver.ms"
done
echo "exec + dynamic loading alone (--version): $(stats <"$tmp/ver.ms"); $(ldd "$REG" | grep -c '=> /') shared libraries," \
  "$(LD_DEBUG=statistics "$REG" --version 2>&1 | sed -n 's/.*final number of relocations: *\([0-9]*\).*/\1/p' | head -n 1) symbol relocations"
size "$REG" | awk 'NR == 2 { printf "binary: text %.0f KiB, data+bss %.0f KiB\n", $1/1024, ($2+$3)/1024 }'
ldd "$REG" | awk '{ print $3 }' | grep / | xargs -r du -Lk 2>/dev/null | sort -rn | head -n 5 |
  awk '{ printf "  largest shared library: %s (%d KiB)\n", $2, $1 }'
