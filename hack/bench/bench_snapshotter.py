#!/usr/bin/env python3
"""The csi-snapshotter benchmark's client (hack/bench/bench_snapshotter.sh starts the world).

  bench_snapshotter.py setup --url URL --driver D --state DIR
    Before the driver and the snapshotter start: a VolumeSnapshotClass of
    the driver (deletionPolicy Delete) and DIR/state.json holding VOLUMES
    source volumes, which the example driver loads at start. No PV or
    claim: the snapshotter reads only the content's source.volumeHandle.

  bench_snapshotter.py run --url URL --n N --driver D --pid snapshotter=PID [--pid driver=PID]
                           --port snapshotter=PORT --qps Q --burst B [--timeout S]
    Once the snapshotter has synced: its idle memory, then N dynamic
    VolumeSnapshotContents written at once as upstream's snapshot-controller
    writes them (snapcontent-<VolumeSnapshot UID>: volumeSnapshotRef, the
    class, source.volumeHandle of one of the source volumes, deletionPolicy
    Delete, the bound-protection finalizer; 8 keep-alive threads), timed
    from the first POST until every one is readyToUse with a snapshotHandle
    and without the being-created annotation, the snapshotter's last write
    (one list per 0.2 s). Then every one deleted as that controller deletes:
    the volumesnapshot-being-deleted annotation (a merge patch), then DELETE;
    timed until the list is empty and the driver holds no snapshot.
    Requests are kube-lite's apiserver_request_total (every caller: only
    the snapshotter writes besides this program, whose own POSTs, patches
    and DELETEs are subtracted), split into content writes, Events and
    reads; the snapshotter's own rest_client_requests_total is printed
    beside them as a check. CPU is utime + stime from /proc/PID/stat per
    phase; memory VmRSS, Private_Dirty (/proc/PID/smaps_rollup) and threads
    idle (before the first phase) and peak (sampled every 0.2 s over both).
    With a token bucket of Q/s and B tokens, R requests take at least
    (R - B) / Q seconds: each rate is also given as a share of that limit.
    Exits 1 when a snapshot is not ready or a content not gone in time.
"""
import argparse
import json
import os
import sys
import time
import uuid

from bench_lib import (Client, Sampler, api_count, api_requests, listed, parallel, proc_cpu_ms, proc_mem,
                       wait, writes_of)

NS = "bench"
CLASS = "bench-snap"
VOLUMES = 10
VSC = "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents"
RES = "volumesnapshotcontents"
ANN_CREATING = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
FINALIZER = "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
# Upstream external-snapshotter (v8.6.0 and master, pkg/sidecar-controller/snapshot_controller.go):
# a dynamic snapshot is setAnnVolumeSnapshotBeingCreated (1 patch), CreateSnapshot,
# updateSnapshotContentStatus (1 GET from the API server, then 1 status patch),
# removeAnnVolumeSnapshotBeingCreated (1 patch): 3 writes + 1 read, no Event when it
# succeeds. A deletion with deletionPolicy Delete is DeleteSnapshot,
# clearVolumeContentStatus (1 GET, 1 UpdateStatus), then removeContentFinalizer (1 patch):
# 2 writes + 1 read. Every request goes through the one client rate limiter.
UPSTREAM = {"create": (3, 1), "delete": (2, 1)}


def post(cl, path, body, want=201):
    st, text = cl.req("POST", path, body)
    if st != want:
        raise RuntimeError("POST %s: %d %s" % (path, st, text[:200]))
    return json.loads(text)


def setup(a):
    cl = Client(a.url)
    post(cl, "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses", {
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
        "metadata": {"name": CLASS}, "driver": a.driver, "deletionPolicy": "Delete"})
    vols = [{"id": "vol-%d" % i, "name": "pvc-src-%d" % i, "capacity_bytes": 1 << 30,
             "access_type": "mount", "parameters": {}} for i in range(VOLUMES)]
    with open(os.path.join(a.state, "state.json"), "w") as f:
        json.dump({"version": 1, "volumes": vols, "snapshots": []}, f)
    print("  set up: VolumeSnapshotClass %s (Delete), %d source volumes in the driver" % (CLASS, VOLUMES))
    return 0


def content(a, i, uid):
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
        "metadata": {"name": "snapcontent-" + uid, "finalizers": [FINALIZER]},
        "spec": {"driver": a.driver, "deletionPolicy": "Delete", "volumeSnapshotClassName": CLASS,
                 "source": {"volumeHandle": "vol-%d" % (i % VOLUMES)},
                 "volumeSnapshotRef": {"kind": "VolumeSnapshot", "apiVersion": "snapshot.storage.k8s.io/v1",
                                       "name": "snap-%05d" % i, "namespace": NS, "uid": uid}}}


def driver_snapshots(state):
    try:
        with open(os.path.join(state, "status.json")) as f:
            return len(json.load(f).get("snapshots", []))
    except (OSError, ValueError):
        return -1


class Phase:
    """The counters at the start of a phase; report() prints what it took."""

    def __init__(self, a, cl, pids, ports):
        self.a, self.cl, self.pids, self.ports = a, cl, pids, ports
        self.r0 = api_requests(cl)
        self.w0 = writes_of(ports["snapshotter"])
        self.c0 = {k: proc_cpu_ms(p) for k, p in pids.items()}
        self.t0 = time.time()

    def report(self, what, ok, own_writes, upstream):
        a = self.a
        dt = time.time() - self.t0
        cpu = {k: proc_cpu_ms(p) - self.c0[k] for k, p in self.pids.items()}
        own = writes_of(self.ports["snapshotter"]) - self.w0
        r1 = api_requests(self.cl)
        # Events the recorder still holds are written after the phase: wait for them.
        time.sleep(3)
        r2 = api_requests(self.cl)

        def delta(r, verbs, res):
            return api_count(r, verbs, res) - api_count(self.r0, verbs, res)

        objw = delta(r1, ("patch", "update"), RES) - own_writes
        ev = delta(r2, ("create", "patch"), "events")
        reads = delta(r1, ("get",), RES)
        failed = sum(n for (v, r, c), n in r1.items() if not c.startswith("2")) - \
            sum(n for (v, r, c), n in self.r0.items() if not c.startswith("2"))
        limit = a.n * a.qps / max(objw + reads - a.burst, 1) if a.qps < 1000 else 0
        print("  %-28s %s" % (what, "%d in %.2f s: %.*f/s%s" % (
            a.n, dt, 2 if a.n / dt < 10 else 1, a.n / dt, " (%.0f%% of the %.2f/s the budget allows for these requests)" % (
                100 * (a.n / dt) / limit, limit) if limit else "")))
        print("  %-28s %.2f content writes + %.2f Events (by 3 s after the last), %.2f reads; "
              "%d requests answered non-2xx" % ("API per snapshot", objw / a.n, ev / a.n, reads / a.n, failed))
        print("  %-28s %.2f writes per snapshot (its rest_client_requests_total: objects + Events)" % (
            "snapshotter's own count", own / a.n))
        print("  %-28s %d content writes + %d read, no Event (read from its code)" % (
            "upstream external-snapshotter", upstream[0], upstream[1]))
        drv = " (example driver %.2f)" % (cpu["driver"] / a.n) if "driver" in cpu else ""
        print("  %-28s %.2f ms per snapshot%s" % ("snapshotter CPU", cpu["snapshotter"] / a.n, drv))
        return ok


def run(a):
    pids = {k: int(v) for k, v in (p.split("=") for p in a.pid)}
    ports = {k: int(v) for k, v in (p.split("=") for p in a.port)}
    cl = Client(a.url)
    time.sleep(2)
    idle = {k: proc_mem(p) for k, p in pids.items()}
    sampler = Sampler(pids)
    sampler.start()
    items = [(i, str(uuid.uuid4())) for i in range(a.n)]

    ph = Phase(a, cl, pids, ports)
    parallel(lambda it: post(cl, VSC, content(a, *it)), items)

    def all_ready():
        return sum(1 for c in listed(cl, VSC) if (c.get("status") or {}).get("readyToUse") is True and
                   (c.get("status") or {}).get("snapshotHandle") and
                   ANN_CREATING not in (c["metadata"].get("annotations") or {})) == a.n
    ok = wait(cl, "%d snapshots ready" % a.n, all_ready, a.timeout)
    ok = ph.report("snapshots readyToUse", ok, 0, UPSTREAM["create"]) and ok
    if ok:
        print("  %-28s %d" % ("driver's snapshots", driver_snapshots(a.state)))

    def delete(it):
        name = "snapcontent-" + it[1]
        st, text = cl.req("PATCH", VSC + "/" + name, {"metadata": {"annotations": {
            "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted": "yes"}}},
            ctype="application/merge-patch+json")
        if st != 200:
            raise RuntimeError("PATCH %s: %d %s" % (name, st, text[:200]))
        st, text = cl.req("DELETE", VSC + "/" + name)
        if st not in (200, 202):
            raise RuntimeError("DELETE %s: %d %s" % (name, st, text[:200]))

    ph = Phase(a, cl, pids, ports)
    parallel(delete, items)

    def all_gone():
        return not listed(cl, VSC) and driver_snapshots(a.state) == 0
    ok2 = wait(cl, "%d contents gone" % a.n, all_gone, a.timeout)
    # our own N annotation patches are subtracted
    ok2 = ph.report("contents deleted", ok2, a.n, UPSTREAM["delete"]) and ok2
    sampler.stop.set()
    sampler.join()
    print("  %-28s VmRSS idle/peak      private dirty idle/peak   threads idle/peak" % "memory")
    for k in sorted(pids):
        i, p = idle[k], sampler.peak[k]
        print("  %-28s %5.1f / %5.1f MiB     %5.1f / %5.1f MiB         %d / %d" % (
            k, i[0] / 1024, p[0] / 1024, i[1] / 1024, p[1] / 1024, i[2], p[2]))
    return 0 if ok and ok2 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["setup", "run"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--driver", default="hostpath.csi.example.com")
    ap.add_argument("--state", required=True, help="the driver's state directory")
    ap.add_argument("--pid", action="append", default=[], help="name=pid (snapshotter required)")
    ap.add_argument("--port", action="append", default=[], help="name=metrics port (snapshotter)")
    ap.add_argument("--qps", type=float, default=5)
    ap.add_argument("--burst", type=float, default=10)
    ap.add_argument("--timeout", type=int, default=900)
    a = ap.parse_args()
    return setup(a) if a.cmd == "setup" else run(a)


if __name__ == "__main__":
    sys.exit(main())
