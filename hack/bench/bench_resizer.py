#!/usr/bin/env python3
"""The csi-resizer benchmark's client (hack/bench/bench_resizer.sh starts the world).

  bench_resizer.py setup --url URL --n N --mode Filesystem|Block --state DIR
    Before the driver and the resizer start: a StorageClass with
    allowVolumeExpansion, N claims of 1Gi bound to N PVs of the driver
    (created through the API with their Bound status, as the binder leaves
    them; kube-lite runs no controller) and DIR/state.json holding the N
    volumes, which the example driver loads at start.

  bench_resizer.py run --url URL --n N --mode M --pid resizer=PID [--pid driver=PID]
                       --port resizer=PORT --qps Q --burst B [--timeout S]
    Once the resizer has synced: its idle memory, then every claim grown to
    2Gi at once (N merge patches of spec.resources from 8 keep-alive
    threads), timed from the first patch until every resize is finished on
    the controller side (one list of claims and one of PVs per 0.2 s):
      Filesystem  PV capacity 2Gi and the claim's FileSystemResizePending
                  condition (the example driver has node EXPAND_VOLUME, so it
                  asks for node expansion of a mounted volume; status.capacity
                  stays 1Gi until a kubelet grows the file system);
      Block       PV capacity 2Gi and the claim's status.capacity 2Gi (no
                  node expansion for a raw device).
    Requests are kube-lite's apiserver_request_total (every caller: in the
    phase only the resizer writes, this program's own N patches subtracted),
    split into claim writes, PV writes, Events and reads; the resizer's own
    rest_client_requests_total is printed beside them as a check. CPU is
    utime + stime from /proc/PID/stat over the phase; memory VmRSS,
    Private_Dirty (/proc/PID/smaps_rollup) and threads idle (before the
    phase) and peak (sampled every 0.2 s). With a token bucket of Q/s and
    B tokens, R requests take at least (R - B) / Q seconds: the rate is also
    given as a share of that limit. Exits 1 when a resize is not finished.
"""
import argparse
import json
import os
import sys
import time

from bench_lib import (Client, Sampler, api_count, api_requests, listed, parallel, proc_cpu_ms, proc_mem,
                       wait, writes_of)

NS = "bench"
CLASS = "bench-rsz"
# Upstream external-resizer (v2.2.1 and master, pkg/controller/expand_and_recover.go and
# resize_status.go, RecoverVolumeExpansionFailure GA): per successful resize one claim status
# patch before ControllerExpandVolume (markControllerResizeInProgress), one PV patch after it
# (updatePVCapacity, the pre-resize-capacity annotation in the same patch), one claim status
# patch at the end (markForPendingNodeExpansion or markOverallExpansionAsFinished): 3 object
# writes, no reads (it patches from its informer caches), and 2 Events (Resizing, then
# FileSystemResizeRequired or VolumeResizeSuccessful), all through the same rate limiter.
UPSTREAM_WRITES = 3
UPSTREAM_EVENTS = 2
GROWN = "2Gi"


def names(n):
    return ["rsz-%05d" % i for i in range(n)]


def post(cl, path, body, want=201):
    st, text = cl.req("POST", path, body)
    if st != want:
        raise RuntimeError("POST %s: %d %s" % (path, st, text[:200]))
    return json.loads(text)


def patch(cl, path, body):
    st, text = cl.req("PATCH", path, body, ctype="application/merge-patch+json")
    if st != 200:
        raise RuntimeError("PATCH %s: %d %s" % (path, st, text[:200]))


def setup(a):
    cl = Client(a.url)
    post(cl, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    post(cl, "/apis/storage.k8s.io/v1/storageclasses", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": CLASS},
        "provisioner": a.driver, "allowVolumeExpansion": True, "reclaimPolicy": "Delete"})
    fs = a.mode == "Filesystem"

    def bound_pair(name):
        pvc = post(cl, "/api/v1/namespaces/%s/persistentvolumeclaims" % NS, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "annotations": {
                "pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes",
                "volume.kubernetes.io/storage-provisioner": a.driver}},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS, "volumeMode": a.mode,
                     "volumeName": "pv-" + name, "resources": {"requests": {"storage": "1Gi"}}}})
        post(cl, "/api/v1/persistentvolumes", {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pv-" + name, "annotations": {"pv.kubernetes.io/provisioned-by": a.driver}},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Delete", "storageClassName": CLASS,
                     "volumeMode": a.mode,
                     "claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": NS,
                                  "name": name, "uid": pvc["metadata"]["uid"]},
                     "csi": dict({"driver": a.driver, "volumeHandle": "vol-" + name},
                                 **({"fsType": "ext4"} if fs else {}))}})
        patch(cl, "/api/v1/persistentvolumes/pv-%s/status" % name, {"status": {"phase": "Bound"}})
        patch(cl, "/api/v1/namespaces/%s/persistentvolumeclaims/%s/status" % (NS, name), {"status": {
            "phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}})

    t0 = time.time()
    parallel(bound_pair, names(a.n))
    vols = [{"id": "vol-" + n, "name": "pvc-" + n, "capacity_bytes": 1 << 30,
             "access_type": "mount" if fs else "block", "parameters": {}} for n in names(a.n)]
    with open(os.path.join(a.state, "state.json"), "w") as f:
        json.dump({"version": 1, "volumes": vols, "snapshots": []}, f)
    print("  set up: %d %s claims bound to PVs of %s (%.1f s), %d driver volumes" % (
        a.n, a.mode, a.driver, time.time() - t0, a.n))
    return 0


def resize_done(a, cl):
    fs = a.mode == "Filesystem"

    def done():
        pvs = listed(cl, "/api/v1/persistentvolumes")
        grown = sum(1 for p in pvs if p["spec"]["capacity"]["storage"] == GROWN)
        if grown < a.n:
            return False
        n = 0
        for c in listed(cl, "/api/v1/namespaces/%s/persistentvolumeclaims" % NS):
            st = c.get("status") or {}
            if fs:
                n += any(x.get("type") == "FileSystemResizePending" and x.get("status") == "True"
                         for x in st.get("conditions") or [])
            else:
                n += (st.get("capacity") or {}).get("storage") == GROWN
        return n == a.n
    return done


def run(a):
    pids = {k: int(v) for k, v in (p.split("=") for p in a.pid)}
    ports = {k: int(v) for k, v in (p.split("=") for p in a.port)}
    cl = Client(a.url)
    time.sleep(2)
    idle = {k: proc_mem(p) for k, p in pids.items()}
    sampler = Sampler(pids)
    sampler.start()
    r0 = api_requests(cl)
    w0 = writes_of(ports["resizer"])
    c0 = {k: proc_cpu_ms(p) for k, p in pids.items()}
    t0 = time.time()
    parallel(lambda n: patch(cl, "/api/v1/namespaces/%s/persistentvolumeclaims/%s" % (NS, n),
                             {"spec": {"resources": {"requests": {"storage": GROWN}}}}), names(a.n))
    ok = wait(cl, "%d resizes" % a.n, resize_done(a, cl), a.timeout)
    dt = time.time() - t0
    cpu = {k: proc_cpu_ms(p) - c0[k] for k, p in pids.items()}
    own = writes_of(ports["resizer"]) - w0
    r1 = api_requests(cl)
    # Events the recorder still holds are written after the last resize: wait for them.
    time.sleep(3)
    r2 = api_requests(cl)
    sampler.stop.set()
    sampler.join()

    def delta(r, verbs, res):
        return api_count(r, verbs, res) - api_count(r0, verbs, res)

    pvc_w = delta(r1, ("patch", "update"), "persistentvolumeclaims") - a.n  # our own spec patches
    pv_w = delta(r1, ("patch", "update"), "persistentvolumes")
    ev = delta(r2, ("create", "patch"), "events")
    reads = delta(r1, ("get",), "persistentvolumeclaims") + delta(r1, ("get",), "persistentvolumes")
    failed = sum(n for (v, r, c), n in r1.items() if not c.startswith("2")) - \
        sum(n for (v, r, c), n in r0.items() if not c.startswith("2"))
    objw = pvc_w + pv_w
    # The budget: the requests that took tokens (events use spare ones only, see common/kube/events.c)
    limit = a.n * a.qps / max(objw + reads - a.burst, 1) if a.qps < 1000 else 0
    print("  %-26s %s" % ("resizes finished", "%d in %.2f s: %.1f resizes/s%s" % (
        a.n, dt, a.n / dt, " (%.0f%% of the %.2f/s the budget allows for these requests)" % (
            100 * (a.n / dt) / limit, limit) if limit else "")))
    print("  %-26s %.2f object writes (claim status %.2f + PV %.2f) + %.2f Events (by 3 s after the "
          "last resize), %.2f reads; %d requests answered non-2xx" % (
              "API per resize", objw / a.n, pvc_w / a.n, pv_w / a.n, ev / a.n, reads / a.n, failed))
    print("  %-26s %.2f writes per resize (its rest_client_requests_total: objects + the Events "
          "written by then)" % ("resizer's own count", own / a.n))
    print("  %-26s %d object writes + %d Events, no reads (read from its code)" % (
        "upstream external-resizer", UPSTREAM_WRITES, UPSTREAM_EVENTS))
    drv = " (example driver %.2f)" % (cpu["driver"] / a.n) if "driver" in cpu else ""
    print("  %-26s %.2f ms per resize%s" % ("resizer CPU", cpu["resizer"] / a.n, drv))
    print("  %-26s VmRSS idle/peak      private dirty idle/peak   threads idle/peak" % "memory")
    for k in sorted(pids):
        i, p = idle[k], sampler.peak[k]
        print("  %-26s %5.1f / %5.1f MiB     %5.1f / %5.1f MiB         %d / %d" % (
            k, i[0] / 1024, p[0] / 1024, i[1] / 1024, p[1] / 1024, i[2], p[2]))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["setup", "run"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--mode", choices=["Filesystem", "Block"], default="Filesystem")
    ap.add_argument("--driver", default="hostpath.csi.example.com")
    ap.add_argument("--state")
    ap.add_argument("--pid", action="append", default=[], help="name=pid (resizer required)")
    ap.add_argument("--port", action="append", default=[], help="name=metrics port (resizer)")
    ap.add_argument("--qps", type=float, default=5)
    ap.add_argument("--burst", type=float, default=10)
    ap.add_argument("--timeout", type=int, default=900)
    a = ap.parse_args()
    return setup(a) if a.cmd == "setup" else run(a)


if __name__ == "__main__":
    sys.exit(main())
