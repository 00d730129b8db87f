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

Stops on SIGTERM or SIGUSR1 and prints what it did.
"""

import argparse
import json
import os
import signal
import sys
import threading
import urllib.error
import urllib.request


def call(server, method, path, body=None):
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
    a = ap.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    ns = "/api/v1/namespaces/%s" % a.namespace
    cosi = "/apis/objectstorage.k8s.io/v1alpha1/namespaces/%s" % a.namespace
    claims = {"made": [], "deleted": []}  # BucketClaims (names)
    accesses = {"made": [], "deleted": [], "orphaned": []}  # BucketAccesses (names)
    nodes = a.nodes.split(",")
    codes = {}
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
                },
                f,
            )
        os.rename(a.record + ".tmp", a.record)
    print("loadgen: %d rounds; %s" % (i, ", ".join("%s %d: %d" % (w, c, n) for (w, c), n in sorted(codes.items()))))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
