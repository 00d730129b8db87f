#!/usr/bin/env bash
# Benchmarks livenessprobe: how fast it answers after its start, its idle
# memory and the CPU a probe costs. Prints figures; asserts nothing.
#
#   hack/bench/bench_livenessprobe.sh            (B=build RUNS=20 REQUESTS=1000 by default)
#
# The example driver is up first. Start time: from just before fork + exec
# to the first 200 on /healthz (a Python poller tries to connect every
# 0.5 ms and sends GET /healthz once the port accepts), so it holds exec,
# dynamic loading, the driver connection, GetPluginInfo, listening and one
# Probe. Memory: /proc/PID/status VmRSS and /proc/PID/smaps_rollup of an idle
# sidecar 2 s after a few probes, split into shared (library pages other
# processes share) and private pages. CPU: the sidecar's CPU time (all
# threads, /proc/PID/task/*/schedstat) over REQUESTS sequential /healthz,
# each on a new connection as the kubelet makes them, and the driver's for
# comparison.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${B:-build}
RUNS=${RUNS:-20}
REQUESTS=${REQUESTS:-1000}
make --no-print-directory -s B="$B" "$B/bin/example-csi-driver" "$B/bin/livenessprobe" >/dev/null
# A freshly linked binary's pages stay dirty in the page cache until written
# back, and would count as the sidecar's private dirty memory.
sync
LP="$B/bin/livenessprobe"
DRV="$B/bin/example-csi-driver"
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/livenessprobe-bench.XXXXXX")
DRV_PID=
LP_PID=
cleanup() {
  stop "$LP_PID"
  stop "$DRV_PID"
  rm -rf "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/state"
"$DRV" --endpoint "unix://$tmp/csi.sock" --state-dir "$tmp/state" --sync=false >"$tmp/drv.log" 2>&1 &
DRV_PID=$!
wait_serving "$tmp/drv.log" || { echo "the example driver did not start" >&2; exit 1; }

echo "livenessprobe benchmark ($(nproc) cores, load $(load))"

# ---- start time ------------------------------------------------------------------------------
python3 - "$LP" "$tmp/csi.sock" "$RUNS" <<'PY'
import os, socket, subprocess, sys, time

lp, sock, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p

def healthz(port):
    """The status of GET /healthz, or None while the port is closed."""
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return None
    with c:
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1])

times, versions = [], []
for _ in range(runs):
    port = free_port()
    t0 = time.perf_counter()
    p = subprocess.Popen([lp, "--csi-address=" + sock, "--http-endpoint=127.0.0.1:%d" % port],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    code = None
    while code is None and time.perf_counter() - t0 < 10:
        code = healthz(port)
        if code is None:
            time.sleep(0.0005)
    t1 = time.perf_counter()
    p.terminate()
    p.wait()
    if code != 200:
        sys.exit("no 200 from /healthz within 10 s (got %s)" % code)
    times.append((t1 - t0) * 1000)
    t0 = time.perf_counter()
    subprocess.run([lp, "--version"], stdout=subprocess.DEVNULL, check=True)
    versions.append((time.perf_counter() - t0) * 1000)

def stats(a):
    a = sorted(a)
    return "median %.1f ms (min %.1f, max %.1f; %d runs)" % (a[len(a) // 2], a[0], a[-1], len(a))

print("start: exec -> first 200 on /healthz: " + stats(times))
print("  exec + dynamic loading alone (--version): " + stats(versions))
PY

# ---- idle memory -------------------------------------------------------------------------------
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$LP" --csi-address="$tmp/csi.sock" --http-endpoint="127.0.0.1:$PORT" >"$tmp/lp.log" 2>&1 &
LP_PID=$!
for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.05; done
for _ in 1 2 3 4 5; do curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz"; done
sleep 2
awk '
  FNR == NR && /^VmRSS:/ { rss = $2 }
  FNR != NR && /^Shared_Clean:/ { sc = $2 } FNR != NR && /^Shared_Dirty:/ { sd = $2 }
  FNR != NR && /^Private_Clean:/ { pc = $2 } FNR != NR && /^Private_Dirty:/ { pd = $2 }
  FNR != NR && /^Pss:/ { pss = $2 }
  END { printf "idle: VmRSS %.1f MiB = shared %.1f MiB (clean %.1f, dirty %.1f) + private %.1f MiB (clean %.1f, dirty %.1f); PSS %.1f MiB\n",
          rss/1024, (sc+sd)/1024, sc/1024, sd/1024, (pc+pd)/1024, pc/1024, pd/1024, pss/1024 }' \
  "/proc/$LP_PID/status" "/proc/$LP_PID/smaps_rollup"
echo "  threads: $(ls "/proc/$LP_PID/task" | wc -l)"

# ---- CPU per probe -------------------------------------------------------------------------------
# cpu_ns PID: CPU time all threads of PID have used so far
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d\n", s }'; }
idle0=$(cpu_ns "$LP_PID")
sleep 10
idle1=$(cpu_ns "$LP_PID")
l0=$(cpu_ns "$LP_PID")
d0=$(cpu_ns "$DRV_PID")
wall=$(python3 - "$PORT" "$REQUESTS" <<'PY'
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
t0 = time.perf_counter()
for _ in range(n):
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = c.recv(4096)
        if not chunk:
            break
        data += chunk
    c.close()
    if b" 200 " not in data.split(b"\r\n", 1)[0]:
        sys.exit("not 200: %r" % data[:80])
print("%.0f" % ((time.perf_counter() - t0) * 1000))
PY
)
l1=$(cpu_ns "$LP_PID")
d1=$(cpu_ns "$DRV_PID")
echo "CPU: $REQUESTS /healthz in $wall ms: livenessprobe $(((l1 - l0) / 1000000)) ms CPU" \
  "(all threads), the driver's Probe $(((d1 - d0) / 1000000)) ms"
echo "  idle: $(((idle1 - idle0) / 1000000)) ms CPU in 10 s"
size "$LP" | awk 'NR == 2 { printf "binary: text %.0f KiB, data+bss %.0f KiB; ", $1/1024, ($2+$3)/1024 }'
echo "$(ldd "$LP" | grep -c '=> /') shared libraries"
