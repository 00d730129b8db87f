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
import json
import os
import sys
import time

from bench_lib import Client, Sampler, events_written, listed, parallel, proc_cpu_ms, proc_mem, wait, writes_of

GROUP = "/apis/objectstorage.k8s.io/v1alpha1"
# Upstream v0.2.2's object writes for the same steps, read from its code:
# claim: controller Create Bucket + UpdateStatus claim + Update claim
# (finalizer), sidecar UpdateStatus claim + Update Bucket + UpdateStatus Bucket;
# access: Secret create + Update BucketAccess + UpdateStatus BucketAccess (+
# Update Bucket for the first access of a bucket); deletion: claim -> Delete
# Bucket, Update Bucket, Update claim; access -> Update Secret, Delete Secret,
# Update BucketAccess (plus the user's deletes).
UPSTREAM = {"claims": 6.0, "accesses": 4.0, "deletes": 6.0}


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
