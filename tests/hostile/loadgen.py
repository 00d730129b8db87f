#!/usr/bin/env python3
"""loadgen: keeps the storage sidecars busy for tests/e2e/test_hostile.sh.

Talks to kube-lite directly (not through the hostile proxy), so what it
writes is what the sidecars are meant to see. Every --interval it creates a
claim and a pod on a node that uses it (kube-lite's binder and attach
stand-ins then ask for a volume and a VolumeAttachment), and deletes the pod
and the claim made --keep rounds before, so provisioning, attaching,
detaching and deletion all run at once. Stops on SIGTERM or SIGUSR1 and
prints what it did.
"""

import argparse
import json
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="kube-lite, http://host:port")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--class", dest="sc", required=True, help="the StorageClass of the claims")
    ap.add_argument("--nodes", default="node-1", help="comma-separated nodes the pods run on")
    ap.add_argument("--prefix", default="load")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between rounds")
    ap.add_argument("--keep", type=int, default=6, help="rounds a claim and its pod live")
    a = ap.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    ns = "/api/v1/namespaces/%s" % a.namespace
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
        old = i - a.keep
        if old >= 0:
            oname = "%s-%d" % (a.prefix, old)
            c = call(a.server, "DELETE", ns + "/pods/" + oname)
            codes[("delete pod", c)] = codes.get(("delete pod", c), 0) + 1
            c = call(a.server, "DELETE", ns + "/persistentvolumeclaims/" + oname)
            codes[("delete pvc", c)] = codes.get(("delete pvc", c), 0) + 1
        i += 1
        stop.wait(a.interval)
    print("loadgen: %d rounds; %s" % (i, ", ".join("%s %d: %d" % (w, c, n) for (w, c), n in sorted(codes.items()))))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
