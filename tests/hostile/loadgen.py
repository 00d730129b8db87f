#!/usr/bin/env python3
"""loadgen: keeps the storage sidecars busy for tests/e2e/test_hostile.sh.

Talks to kube-lite directly (not through the hostile proxy), so what it
writes is what the sidecars are meant to see. Every --interval it creates a
claim and a pod on a node that uses it (kube-lite's binder and attach
stand-ins then ask for a volume and a VolumeAttachment), and deletes the pod
and the claim made --keep rounds before, so provisioning, attaching,
detaching and deletion all run at once.

With --bucket-class and --access-class it does the same for COSI in each
round: a BucketClaim of that BucketClass and a BucketAccess of that
BucketAccessClass on it (Secret <name>-creds), and deletes those made
--keep rounds before: in even rounds the access and then the claim, in odd
rounds only the claim (the access is then orphaned: the sidecar deletes it
with the Bucket when it had granted it, else it waits for a claim that will
not come, as upstream's does). --record FILE gets, at the end, the COSI
objects it deleted, orphaned and left (JSON), for the convergence checks.

With --grow (the claims' StorageClass must allow volume expansion) it grows
every claim that is Bound halfway through its life to 2Gi (it is deleted
while the resize may still run), and every --keep-every rounds makes a claim
grow-<n> that it keeps: once Bound grown to 2Gi; one in four two rounds later
again to 3Gi (while the first resize may still run: the resizer then ends at
2Gi or 3Gi, the PV and allocatedResources alike), one in four again to 3Gi
once the first resize is done and waits for the node (NodeResizePending: as
upstream's, the resizer must then wait for the kubelet and stay at 2Gi).

With --snapshot-class it plays upstream's snapshot-controller for the kept
claims' volumes: every round a dynamic VolumeSnapshotContent
snapcontent-<VolumeSnapshot UID> (volumeSnapshotRef, source.volumeHandle of a
kept claim's bound PV, the class, deletionPolicy Delete, the
volumesnapshotcontent-bound-protection finalizer), deleted as that
controller deletes (the volumesnapshot-being-deleted annotation, then DELETE):
one in three a round later, one in three --keep rounds later, the rest left.
The record then also holds the kept claims, the size each was last asked
for and the sizes the resizer may leave it at, and the contents deleted and
left (name and VolumeSnapshot UID). The VolumeSnapshot UIDs (and so the
contents' names and paths) come from --seed, so that a replay of the proxy's
seed meets the same fates.

Stops on SIGTERM or SIGUSR1 and prints what it did.
"""

import argparse
import json
import os
import random
import signal
import sys
import threading
import uuid
import urllib.error
import urllib.request

# Set on SIGTERM/SIGUSR1: no new request is sent (each answers as failed),
# so the round in hand ends at once and the record is written within the
# test's grace period even when every request would take its full timeout
# on a loaded machine (seed 1712285005: a round outlived the 15 s grace,
# the generator was killed and left no record).
STOP = threading.Event()


def call(server, method, path, body=None):
    if STOP.is_set():
        return 0
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def get(server, path):
    """The object at PATH as kube-lite has it (None on any error)."""
    if STOP.is_set():
        return None
    try:
        with urllib.request.urlopen(server + path, timeout=10) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def call_json(server, method, path, body, ctype):
    if STOP.is_set():
        return 0
    data = json.dumps(body).encode()
    req = urllib.request.Request(server + path, data=data, method=method)
    req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def grow(a, ns, name, size, codes, what):
    c = call_json(a.server, "PATCH", ns + "/persistentvolumeclaims/" + name,
                  {"spec": {"resources": {"requests": {"storage": size}}}}, "application/merge-patch+json")
    count(codes, what, c)
    return c == 200


def volume_handle(a, ns, name):
    """The volume handle of claim NAME's PV once the claim is Bound, else None."""
    pvc = get(a.server, ns + "/persistentvolumeclaims/" + name) or {}
    if (pvc.get("status") or {}).get("phase") != "Bound" or not (pvc.get("spec") or {}).get("volumeName"):
        return None
    pv = get(a.server, "/api/v1/persistentvolumes/" + pvc["spec"]["volumeName"]) or {}
    return ((pv.get("spec") or {}).get("csi") or {}).get("volumeHandle")


VSC = "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents"


def content_create(a, handle, codes, rng):
    """A dynamic VolumeSnapshotContent as upstream's snapshot-controller writes
    it for a VolumeSnapshot (which does not exist here: the sidecar does not read it)."""
    vs_uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    name = "snapcontent-" + vs_uid
    body = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": name, "finalizers": ["snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"]},
        "spec": {
            "driver": a.driver,
            "deletionPolicy": "Delete",
            "volumeSnapshotClassName": a.snapshot_class,
            "source": {"volumeHandle": handle},
            "volumeSnapshotRef": {
                "kind": "VolumeSnapshot",
                "apiVersion": "snapshot.storage.k8s.io/v1",
                "name": "vs-" + vs_uid[:8],
                "namespace": a.namespace,
                "uid": vs_uid,
            },
        },
    }
    c = call(a.server, "POST", VSC, body)
    count(codes, "create content", c)
    return {"name": name, "uid": vs_uid} if c in (200, 201) else None


def content_delete(a, content, codes):
    """The snapshot-controller's deletion: the being-deleted annotation, then DELETE."""
    c = call_json(a.server, "PATCH", VSC + "/" + content["name"],
                  {"metadata": {"annotations": {"snapshot.storage.kubernetes.io/volumesnapshot-being-deleted": "yes"}}},
                  "application/merge-patch+json")
    count(codes, "annotate content", c)
    c = call(a.server, "DELETE", VSC + "/" + content["name"])
    count(codes, "delete content", c)
    return c in (200, 202)


def node_pending(a, ns, name, size):
    """The claim's resize to SIZE is done on the controller's side and waits for the node."""
    st = (get(a.server, ns + "/persistentvolumeclaims/" + name) or {}).get("status") or {}
    return ((st.get("allocatedResourceStatuses") or {}).get("storage") == "NodeResizePending" and
            (st.get("allocatedResources") or {}).get("storage") == size)


def count(codes, what, c):
    codes[(what, c)] = codes.get((what, c), 0) + 1


def cosi_round(a, cosi, name, codes, claims, accesses):
    """A BucketClaim NAME and a BucketAccess NAME on it."""
    claim = {
        "apiVersion": "objectstorage.k8s.io/v1alpha1",
        "kind": "BucketClaim",
        "metadata": {"name": name},
        "spec": {"bucketClassName": a.bucket_class, "protocols": ["S3"]},
    }
    access = {
        "apiVersion": "objectstorage.k8s.io/v1alpha1",
        "kind": "BucketAccess",
        "metadata": {"name": name},
        "spec": {
            "bucketClaimName": name,
            "bucketAccessClassName": a.access_class,
            "credentialsSecretName": name + "-creds",
            "protocol": "S3",
        },
    }
    c = call(a.server, "POST", cosi + "/bucketclaims", claim)
    count(codes, "create bucketclaim", c)
    if c in (200, 201):
        claims["made"].append(name)
    c = call(a.server, "POST", cosi + "/bucketaccesses", access)
    count(codes, "create bucketaccess", c)
    if c in (200, 201):
        accesses["made"].append(name)


def cosi_delete(a, cosi, name, access_first, codes, claims, accesses):
    """Deletes the claim NAME, and first its access when access_first (else
    the access is orphaned)."""
    if access_first:
        c = call(a.server, "DELETE", cosi + "/bucketaccesses/" + name)
        count(codes, "delete bucketaccess", c)
        if c in (200, 202):
            accesses["deleted"].append(name)
    c = call(a.server, "DELETE", cosi + "/bucketclaims/" + name)
    count(codes, "delete bucketclaim", c)
    if c in (200, 202):
        claims["deleted"].append(name)
        if not access_first and name in accesses["made"]:
            accesses["orphaned"].append(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="kube-lite, http://host:port")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--class", dest="sc", required=True, help="the StorageClass of the claims")
    ap.add_argument("--nodes", default="node-1", help="comma-separated nodes the pods run on")
    ap.add_argument("--prefix", default="load")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between rounds")
    ap.add_argument("--keep", type=int, default=6, help="rounds a claim and its pod live")
    ap.add_argument("--bucket-class", default="", help="the BucketClass of BucketClaims to make too")
    ap.add_argument("--access-class", default="", help="the BucketAccessClass of BucketAccesses to make too")
    ap.add_argument("--record", default="", help="file for the COSI objects deleted and left (JSON)")
    ap.add_argument("--grow", action="store_true", help="grow claims (the class allows volume expansion)")
    ap.add_argument("--keep-every", type=int, default=8, help="rounds between two kept claims (--grow)")
    ap.add_argument("--snapshot-class", default="", help="the VolumeSnapshotClass of contents to make too")
    ap.add_argument("--driver", default="hostpath.csi.example.com", help="the CSI driver of the contents")
    ap.add_argument("--seed", type=int, default=0, help="seed of the contents' VolumeSnapshot UIDs")
    a = ap.parse_args()

    stop = STOP
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    ns = "/api/v1/namespaces/%s" % a.namespace
    cosi = "/apis/objectstorage.k8s.io/v1alpha1/namespaces/%s" % a.namespace
    claims = {"made": [], "deleted": []}  # BucketClaims (names)
    accesses = {"made": [], "deleted": [], "orphaned": []}  # BucketAccesses (names)
    nodes = a.nodes.split(",")
    codes = {}
    rng = random.Random(a.seed)
    # kept claim -> {"size": last size asked for, "expect": the sizes the resizer may leave,
    # "grown": round of the first growth, "handle": its volume's, "n": its number}
    kept = {}
    contents = []  # [(round made, {"name", "uid"}, round to delete or None)]
    contents_deleted = []
    handles = []  # the kept claims' volume handles known so far, in order
    i = 0
    while not stop.is_set():
        name = "%s-%d" % (a.prefix, i)
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": a.sc,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": nodes[i % len(nodes)],
                "containers": [{"name": "app", "image": "busybox"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": name}}],
            },
        }
        for what, c in (
            ("create pvc", call(a.server, "POST", ns + "/persistentvolumeclaims", claim)),
            ("create pod", call(a.server, "POST", ns + "/pods", pod)),
        ):
            codes[(what, c)] = codes.get((what, c), 0) + 1
        if a.bucket_class and a.access_class:
            cosi_round(a, cosi, name, codes, claims, accesses)
        if a.grow:
            if i % a.keep_every == 0:
                kname = "grow-%d" % (i // a.keep_every)
                kclaim = dict(claim, metadata={"name": kname})
                c = call(a.server, "POST", ns + "/persistentvolumeclaims", kclaim)
                count(codes, "create kept pvc", c)
                if c in (200, 201):
                    kept[kname] = {"size": "1Gi", "expect": ["1Gi"], "grown": None, "handle": None, "n": len(kept)}
            for kname, k in kept.items():
                if k["handle"] is None:
                    k["handle"] = volume_handle(a, ns, kname)
                    if k["handle"] is None:
                        continue
                    handles.append(k["handle"])
                if k["grown"] is None:
                    if grow(a, ns, kname, "2Gi", codes, "grow kept pvc"):
                        k["size"], k["expect"], k["grown"] = "2Gi", ["2Gi"], i
                elif k["n"] % 4 == 1 and k["size"] == "2Gi" and i - k["grown"] >= 2:
                    if grow(a, ns, kname, "3Gi", codes, "grow kept pvc again at once"):
                        k["size"], k["expect"] = "3Gi", ["2Gi", "3Gi"]
                elif k["n"] % 4 == 3 and k["size"] == "2Gi" and node_pending(a, ns, kname, "2Gi"):
                    if grow(a, ns, kname, "3Gi", codes, "grow kept pvc again while it waits for the node"):
                        k["size"], k["expect"] = "3Gi", ["2Gi"]
            half = i - a.keep // 2
            if half >= 0 and volume_handle(a, ns, "%s-%d" % (a.prefix, half)):
                grow(a, ns, "%s-%d" % (a.prefix, half), "2Gi", codes, "grow pvc")
        if a.snapshot_class and handles:
            made = content_create(a, handles[i % len(handles)], codes, rng)
            if made:
                k = len(contents) % 3
                contents.append((i, made, i + 1 if k == 0 else i + a.keep if k == 1 else None))
        for j, (_, made, when) in enumerate(contents):
            if when is not None and when <= i:
                if content_delete(a, made, codes):
                    contents_deleted.append(made)
                contents[j] = (contents[j][0], made, None) if made not in contents_deleted else (-1, made, None)
        old = i - a.keep
        if old >= 0:
            oname = "%s-%d" % (a.prefix, old)
            c = call(a.server, "DELETE", ns + "/pods/" + oname)
            codes[("delete pod", c)] = codes.get(("delete pod", c), 0) + 1
            c = call(a.server, "DELETE", ns + "/persistentvolumeclaims/" + oname)
            codes[("delete pvc", c)] = codes.get(("delete pvc", c), 0) + 1
            if a.bucket_class and a.access_class:
                cosi_delete(a, cosi, oname, old % 2 == 0, codes, claims, accesses)
        i += 1
        stop.wait(a.interval)
    if a.record:
        with open(a.record + ".tmp", "w") as f:
            json.dump(
                {
                    "claims_deleted": claims["deleted"],
                    "claims_left": [n for n in claims["made"] if n not in claims["deleted"]],
                    "accesses_deleted": accesses["deleted"],
                    "accesses_orphaned": accesses["orphaned"],
                    "accesses_left": [n for n in accesses["made"] if n not in accesses["deleted"] + accesses["orphaned"]],
                    "kept_claims": {n: {"asked": k["size"], "expect": k["expect"]} for n, k in kept.items()},
                    "contents_deleted": contents_deleted,
                    "contents_left": [m for (r, m, _) in contents if r >= 0],
                },
                f,
            )
        os.rename(a.record + ".tmp", a.record)
    print("loadgen: %d rounds; %s" % (i, ", ".join("%s %d: %d" % (w, c, n) for (w, c), n in sorted(codes.items()))))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
