#!/usr/bin/env python3
"""The COSI benchmark's client (hack/bench/bench_cosi.sh starts the world).

Phases, each timed from its first request to the last object done (polled
with one list per 0.2 s):
  claims    N BucketClaims of a Delete class -> every claim status.bucketReady
  accesses  N BucketAccesses (Key), one per claim -> every status.accessGranted
  deletes   every access and claim deleted -> no BucketClaim, Bucket or
            BucketAccess left, the driver holds no bucket
Per phase and binary: API writes (the binary's own rest_client_requests_total,
POST/PUT/PATCH/DELETE, from its /metrics) and CPU (utime + stime from
/proc/PID/stat); Events apart (kube-lite's apiserver_request_total for
resource events, both binaries together). Memory: VmRSS, Private_Dirty
(/proc/PID/smaps_rollup) and threads once idle before the first phase
(idle) and the highest seen while sampling every 0.2 s (peak).
"""
import argparse
import http.client
import json
import os
import re
import sys
import threading
import time
import urllib.parse

GROUP = "/apis/objectstorage.k8s.io/v1alpha1"
# Upstream v0.2.2's object writes for the same steps, read from its code:
# claim: controller Create Bucket + UpdateStatus claim + Update claim
# (finalizer), sidecar UpdateStatus claim + Update Bucket + UpdateStatus Bucket;
# access: Secret create + Update BucketAccess + UpdateStatus BucketAccess (+
# Update Bucket for the first access of a bucket); deletion: claim -> Delete
# Bucket, Update Bucket, Update claim; access -> Update Secret, Delete Secret,
# Update BucketAccess (plus the user's deletes).
UPSTREAM = {"claims": 6.0, "accesses": 4.0, "deletes": 6.0}


class Client:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.local = threading.local()

    def conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self.local.c = c
        return c

    def req(self, method, path, body=None):
        for attempt in range(5):
            c = self.conn()
            try:
                data = json.dumps(body).encode() if body is not None else None
                hdrs = {"Content-Type": "application/json"} if data else {}
                c.request(method, path, body=data, headers=hdrs)
                r = c.getresponse()
                text = r.read()
                return r.status, text
            except (OSError, http.client.HTTPException):
                c.close()
                self.local.c = None
                time.sleep(0.1 * (attempt + 1))
        raise RuntimeError("%s %s: no answer" % (method, path))


def parallel(fn, items, threads=8):
    errs = []

    def work(chunk):
        for it in chunk:
            try:
                fn(it)
            except Exception as e:  # reported below
                errs.append(str(e))

    ts = [threading.Thread(target=work, args=(items[i::threads],)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise RuntimeError(errs[0])


def proc_cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def proc_mem(pid):
    rss = threads = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    dirty = 0
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Private_Dirty:"):
                dirty = int(line.split()[1])
    return rss, dirty, threads


def writes_of(port):
    """The binary's own successful write requests (all kinds, Events included)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    n = 0
    for m in re.finditer(r'^rest_client_requests_total\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("method") in ("POST", "PUT", "PATCH", "DELETE") and labels.get("code", "").startswith("2"):
            n += float(m.group(2))
    return n


def events_written(cl):
    _, text = cl.req("GET", "/metrics")
    n = 0
    for m in re.finditer(r'^apiserver_request_total\{([^}]*)\} (\S+)$', text.decode(), re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("resource") == "events" and labels.get("verb") in ("create", "patch", "update"):
            n += float(m.group(2))
    return n


class Sampler(threading.Thread):
    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids = pids
        self.peak = {k: (0, 0, 0) for k in pids}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for k, pid in self.pids.items():
                try:
                    r, d, t = proc_mem(pid)
                except OSError:
                    continue
                p = self.peak[k]
                self.peak[k] = (max(p[0], r), max(p[1], d), max(p[2], t))
            time.sleep(0.2)


def listed(cl, path):
    st, text = cl.req("GET", path)
    if st != 200:
        raise RuntimeError("GET %s: %d" % (path, st))
    return json.loads(text).get("items", [])


def wait(cl, what, done, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if done():
            return True
        time.sleep(0.2)
    print("  FAIL: %s not done within %ds" % (what, timeout))
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--driver", required=True)
    ap.add_argument("--pid", action="append", default=[], help="name=pid")
    ap.add_argument("--port", action="append", default=[], help="name=metrics port")
    ap.add_argument("--state", required=True)
    ap.add_argument("--timeout", type=int, default=600)
    a = ap.parse_args()
    pids = {k: int(v) for k, v in (p.split("=") for p in a.pid)}
    ports = {k: int(v) for k, v in (p.split("=") for p in a.port)}
    cl = Client(a.url)
    ns = "bench"
    cl.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    cl.req("POST", GROUP + "/bucketclasses", {
        "apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClass",
        "metadata": {"name": "bench"}, "driverName": a.driver, "deletionPolicy": "Delete"})
    cl.req("POST", GROUP + "/bucketaccessclasses", {
        "apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketAccessClass",
        "metadata": {"name": "bench"}, "driverName": a.driver, "authenticationType": "Key"})
    time.sleep(2)
    idle = {k: proc_mem(p) for k, p in pids.items()}
    sampler = Sampler(pids)
    sampler.start()
    names = ["b%05d" % i for i in range(a.n)]
    ok = True
    rows = []

    def phase(title, act, done):
        nonlocal ok
        w0 = {k: writes_of(p) for k, p in ports.items()}
        c0 = {k: proc_cpu_ms(p) for k, p in pids.items()}
        e0 = events_written(cl)
        t0 = time.time()
        act()
        ok = wait(cl, title, done, a.timeout) and ok
        dt = time.time() - t0
        w = {k: writes_of(p) - w0[k] for k, p in ports.items()}
        c = {k: proc_cpu_ms(p) - c0[k] for k, p in pids.items()}
        ev = events_written(cl) - e0
        rows.append((title, dt, w, c, ev))

    def bc_create(n):
        st, text = cl.req("POST", GROUP + "/namespaces/%s/bucketclaims" % ns, {
            "apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClaim",
            "metadata": {"name": n}, "spec": {"bucketClassName": "bench", "protocols": ["S3"]}})
        if st != 201:
            raise RuntimeError("create claim %s: %d %s" % (n, st, text[:200]))

    def ba_create(n):
        st, text = cl.req("POST", GROUP + "/namespaces/%s/bucketaccesses" % ns, {
            "apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketAccess",
            "metadata": {"name": n}, "spec": {"bucketClaimName": n, "bucketAccessClassName": "bench",
                                              "credentialsSecretName": n + "-creds", "protocol": "S3"}})
        if st != 201:
            raise RuntimeError("create access %s: %d %s" % (n, st, text[:200]))

    def all_ready():
        items = listed(cl, GROUP + "/namespaces/%s/bucketclaims" % ns)
        return len(items) == a.n and all((i.get("status") or {}).get("bucketReady") for i in items)

    def all_granted():
        items = listed(cl, GROUP + "/namespaces/%s/bucketaccesses" % ns)
        return len(items) == a.n and all((i.get("status") or {}).get("accessGranted") for i in items)

    def delete_all():
        parallel(lambda n: cl.req("DELETE", GROUP + "/namespaces/%s/bucketaccesses/%s" % (ns, n)), names)
        parallel(lambda n: cl.req("DELETE", GROUP + "/namespaces/%s/bucketclaims/%s" % (ns, n)), names)

    def driver_buckets():
        try:
            return len(json.load(open(os.path.join(a.state, "status.json"))).get("buckets", []))
        except (OSError, ValueError):
            return -1

    def all_gone():
        return (not listed(cl, GROUP + "/namespaces/%s/bucketaccesses" % ns)
                and not listed(cl, GROUP + "/namespaces/%s/bucketclaims" % ns)
                and not listed(cl, GROUP + "/buckets")
                and not listed(cl, "/api/v1/namespaces/%s/secrets" % ns)
                and driver_buckets() == 0)

    phase("claims", lambda: parallel(bc_create, names), all_ready)
    if ok:
        phase("accesses", lambda: parallel(ba_create, names), all_granted)
    if ok:
        phase("deletes", delete_all, all_gone)
    sampler.stop.set()
    sampler.join()

    print("  %-9s %9s  %-28s %-26s %s" % ("phase", "objects/s", "API writes per object", "CPU ms per object", "upstream writes"))
    for title, dt, w, c, ev in rows:
        ws = " + ".join("%s %.2f" % (k[:4], v / a.n) for k, v in sorted(w.items()))
        # the driver's CPU is shown apart: it is the test double's, not ours
        cs = " + ".join("%s %.2f" % (k[:4], v / a.n) for k, v in sorted(c.items()) if k != "driver")
        if "driver" in c:
            cs += " (driver %.2f)" % (c["driver"] / a.n)
        tot = sum(w.values()) / a.n
        print("  %-9s %9.1f  %-28s %-26s %.0f  (Events: %.2f/object; total ours %.2f)" % (
            title, a.n / dt, ws, cs, UPSTREAM[title], ev / a.n, tot))
    print("  memory      VmRSS idle/peak    private dirty idle/peak   threads idle/peak")
    for k in sorted(pids):
        i, p = idle[k], sampler.peak[k]
        print("  %-10s  %5.1f / %5.1f MiB  %5.1f / %5.1f MiB        %d / %d" % (
            k, i[0] / 1024, p[0] / 1024, i[1] / 1024, p[1] / 1024, i[2], p[2]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
