"""The requests of the differential test, in order; each is one check.

A step is a dict: name, method, path, body (a JSON value, or text sent as
is), ctype, accept, user ("admin", or "bob" who holds only the RBAC granted
below), kind ("request", "watch": the lines of a watch that ends by its
timeoutSeconds, "kubectl": a kubectl command line, "compact": trim the
server's history), save ({var: dotted path in the answer} for ${var} in later
steps), check (False: setup whose answer is not compared).

Watches only replay what already happened (from a saved resourceVersion,
ending after timeoutSeconds=1), so nothing depends on timing.
"""

import copy
import json
import os
import subprocess

NS = "default"
CORE = "/api/v1"
STORAGE = "/apis/storage.k8s.io/v1"
COORD = "/apis/coordination.k8s.io/v1/namespaces/" + NS + "/leases"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
PVS = CORE + "/persistentvolumes"
PVCS = CORE + "/namespaces/" + NS + "/persistentvolumeclaims"
VAS = STORAGE + "/volumeattachments"
NODES = CORE + "/nodes"
CSINODES = STORAGE + "/csinodes"
EVENTS = CORE + "/namespaces/" + NS + "/events"
SECRETS = CORE + "/namespaces/" + NS + "/secrets"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def manifest(rel):
    """A file of manifests/ as JSON. kubectl reads the YAML (Python's yaml
    module is not among the test's dependencies): `annotate --local` needs no
    server and prints the object as written, with an empty annotations map
    added when there was none, which goes again here."""
    out = subprocess.run(["kubectl", "annotate", "--local", "-o", "json", "-f", os.path.join(ROOT, rel),
                          "kube-lite.test/unused-"], capture_output=True, text=True,
                         env=dict(os.environ, KUBECONFIG=os.devnull), check=True).stdout
    obj = json.loads(out)
    if obj["metadata"].get("annotations") == {}:
        del obj["metadata"]["annotations"]
    return obj


MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"
JSONP = "application/json-patch+json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

STEPS = []


def step(name, method="GET", path="", body=None, **kw):
    s = dict(name=name, method=method, path=path, **kw)
    if body is not None:
        s["body"] = body
    STEPS.append(s)
    return s


def get(name, path, **kw):
    return step(name, "GET", path, **kw)


def post(name, path, body, **kw):
    return step(name, "POST", path, body, **kw)


def put(name, path, body, **kw):
    return step(name, "PUT", path, body, **kw)


def patch(name, path, body, ctype, **kw):
    return step(name, "PATCH", path, body, ctype=ctype, **kw)


def delete(name, path, body=None, **kw):
    return step(name, "DELETE", path, body, **kw)


def watch(name, path, **kw):
    sep = "&" if "?" in path else "?"
    return step(name, "GET", path + sep + "watch=1&timeoutSeconds=1", kind="watch", **kw)


def kubectl(name, *args):
    return step(name, kind="kubectl", kubectl=list(args))


def pv(name, handle, labels=None, **spec):
    s = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
         "csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": handle,
                 "volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": "123-hostpath"}},
         "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "fast"}
    s.update(spec)
    meta = {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": "hostpath.csi.k8s.io"}}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": s}


def pvc(name, **spec):
    s = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
         "storageClassName": "fast"}
    s.update(spec)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": s}


def va(name, pvname, node="node-a"):
    return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
            "spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": node,
                     "source": {"persistentVolumeName": pvname}}}


T0 = "2024-01-01T00:00:00Z"
MT0 = "2024-01-01T00:00:00.000000Z"
MT1 = "2024-01-01T00:00:10.000000Z"

# ---- RBAC: bob may read PVs, get VolumeAttachments and get the claim pvc-a -------------------

post("rbac: a ClusterRole", RBAC + "/clusterroles", {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "diff-reader"},
    "rules": [{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "watch"]},
              {"apiGroups": ["storage.k8s.io"], "resources": ["volumeattachments"], "verbs": ["get"]}]})
post("rbac: its ClusterRoleBinding", RBAC + "/clusterrolebindings", {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "diff-reader"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "diff-reader"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]})
post("rbac: a Role with resourceNames", RBAC + "/namespaces/" + NS + "/roles", {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "diff-claim"},
    "rules": [{"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get"],
               "resourceNames": ["pvc-a"]}]})
post("rbac: its RoleBinding", RBAC + "/namespaces/" + NS + "/rolebindings", {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "diff-claim"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "diff-claim"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]})

# ---- PersistentVolume: create, get, list with selectors -------------------------------------

get("pv: list before any (the list's resourceVersion is saved)", PVS, save={"rv_pv0": "metadata.resourceVersion"})
post("pv: create pv-a", PVS, pv("pv-a", "vol-a", {"tier": "gold", "app": "diff"}), save={"uid_pva": "metadata.uid"})
post("pv: create pv-b", PVS, pv("pv-b", "vol-b", {"tier": "silver", "app": "diff"}, persistentVolumeReclaimPolicy="Retain"))
post("pv: create pv-c (no labels, Block)", PVS, pv("pv-c", "vol-c", volumeMode="Block"))
# kube-apiserver's admission gave it kubernetes.io/pv-protection (see the
# exceptions): dropped, so that both servers delete it the same way below.
patch("pv: drop the protection finalizer of pv-c", PVS + "/pv-c", {"metadata": {"finalizers": None}}, MERGE)
post("pv: create pv-a again: 409 AlreadyExists", PVS, pv("pv-a", "vol-a"))
get("pv: get pv-a", PVS + "/pv-a", save={"rv_pva": "metadata.resourceVersion"})
get("pv: get a missing one: 404", PVS + "/nope")
get("pv: list", PVS)
get("pv: labelSelector tier=gold", PVS + "?labelSelector=tier%3Dgold")
get("pv: labelSelector tier in (gold,silver)", PVS + "?labelSelector=tier+in+(gold,silver)")
get("pv: labelSelector !tier", PVS + "?labelSelector=!tier")
get("pv: labelSelector tier!=gold,app", PVS + "?labelSelector=tier!%3Dgold,app")
get("pv: a bad labelSelector: 400", PVS + "?labelSelector=tier%3D%3D%3Dgold")
get("pv: fieldSelector metadata.name=pv-b", PVS + "?fieldSelector=metadata.name%3Dpv-b")
get("pv: fieldSelector metadata.name!=pv-b", PVS + "?fieldSelector=metadata.name!%3Dpv-b")
get("pv: an unsupported fieldSelector: 400", PVS + "?fieldSelector=spec.storageClassName%3Dfast")
get("pv: a malformed fieldSelector: 400", PVS + "?fieldSelector=metadata.name")
get("pv: limit=2 (a continue token)", PVS + "?limit=2", save={"cont": "metadata.continue"})
get("pv: the next page", PVS + "?limit=2&continue=${cont}")
get("pv: as Table", PVS, accept=TABLE)
get("pv: one as Table", PVS + "/pv-a", accept=TABLE)
get("pv: bob may get pv-a", PVS + "/pv-a", user="bob")
delete("pv: bob may not delete pv-a: 403", PVS + "/pv-a", user="bob")
get("pv: bob may not list claims: 403", PVCS, user="bob")
get("pv: bob may not get nodes: 403", NODES + "/node-a", user="bob")

# ---- PersistentVolume: patches, updates, status, conflicts, dry-run ---------------------------

patch("pv: merge patch labels and annotations", PVS + "/pv-a",
      {"metadata": {"labels": {"tier": None, "extra": "1"}, "annotations": {"a.io/b": "c"}}}, MERGE)
patch("pv: strategic merge: claimRef and mountOptions", PVS + "/pv-a",
      {"spec": {"claimRef": {"kind": "PersistentVolumeClaim", "namespace": NS, "name": "pvc-a"},
                "mountOptions": ["ro"]}}, SMP)
patch("pv: json patch with a passing test", PVS + "/pv-a",
      [{"op": "test", "path": "/spec/storageClassName", "value": "fast"},
       {"op": "add", "path": "/metadata/annotations/x.io~1y", "value": "z"},
       {"op": "replace", "path": "/spec/persistentVolumeReclaimPolicy", "value": "Retain"}], JSONP)
patch("pv: json patch with a failing test: 422", PVS + "/pv-a",
      [{"op": "test", "path": "/spec/storageClassName", "value": "slow"}], JSONP)
patch("pv: json patch on a missing path: 422", PVS + "/pv-a",
      [{"op": "replace", "path": "/spec/nope/deeper", "value": 1}], JSONP)
patch("pv: json patch with an unknown op: 422", PVS + "/pv-a",
      [{"op": "bogus", "path": "/spec"}], JSONP)
patch("pv: json patch that is not a list: 400", PVS + "/pv-a", {"op": "add"}, JSONP)
patch("pv: a patch of an unknown type: 415", PVS + "/pv-a", {}, "application/foo+json")
patch("pv: merge patch of a missing object: 404", PVS + "/nope", {"metadata": {"labels": {"a": "b"}}}, MERGE)
patch("pv: the csi source is immutable: 422", PVS + "/pv-a", {"spec": {"csi": {"volumeHandle": "other"}}}, MERGE)
put("pv: update with a stale resourceVersion: 409", PVS + "/pv-a",
    dict(pv("pv-a", "vol-a"), metadata={"name": "pv-a", "resourceVersion": "${rv_pva}"}))
get("pv: get pv-b", PVS + "/pv-b", save={"rv_pvb": "metadata.resourceVersion"})
put("pv: update with the current resourceVersion (status in the body is ignored)", PVS + "/pv-b",
    dict(pv("pv-b", "vol-b", {"tier": "silver", "app": "diff"}, persistentVolumeReclaimPolicy="Retain"),
         metadata={"name": "pv-b", "resourceVersion": "${rv_pvb}", "labels": {"tier": "silver", "app": "diff"}},
         status={"phase": "Released"}))
put("pv: update of a name that differs from the URL: 400", PVS + "/pv-b",
    dict(pv("pv-x", "vol-b"), metadata={"name": "pv-x"}))
put("pv: update of a missing object: 404", PVS + "/nope", pv("nope", "vol-n"))
patch("pv: a patch carrying a stale resourceVersion: 409", PVS + "/pv-b",
      {"metadata": {"resourceVersion": "${rv_pvb}", "labels": {"x": "y"}}}, MERGE)
patch("pv: status patch (the spec change is ignored)", PVS + "/pv-b/status",
      {"status": {"phase": "Available", "message": "ok"}, "spec": {"storageClassName": "other"}}, MERGE)
patch("pv: main-resource patch (the status change is ignored)", PVS + "/pv-b",
      {"status": {"phase": "Failed"}, "metadata": {"labels": {"patched": "yes"}}}, MERGE)
get("pv: status subresource get", PVS + "/pv-b/status")
post("pv: create with dryRun=All", PVS + "?dryRun=All", pv("pv-dry", "vol-dry"))
get("pv: the dry-run object does not exist: 404", PVS + "/pv-dry")
delete("pv: delete with dryRun=All", PVS + "/pv-c?dryRun=All")
get("pv: still there after the dry-run delete", PVS + "/pv-c")
patch("pv: merge patch with dryRun=All", PVS + "/pv-c?dryRun=All", {"metadata": {"labels": {"d": "r"}}}, MERGE)
post("pv: invalid: a bad name, no capacity, no source: 422", PVS,
     {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "Bad_Name"}, "spec": {}})
post("pv: invalid: no accessModes, bad reclaim policy: 422", PVS,
     pv("pv-bad", "vol-bad", accessModes=[], persistentVolumeReclaimPolicy="Keep"))
post("pv: invalid: a CSI source without driver and handle: 422", PVS,
     pv("pv-bad2", "x", csi={"driver": "", "volumeHandle": ""}))
post("pv: a body that is not JSON: 400", PVS, "{bad")
post("pv: a body of the wrong kind: 400", PVS, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}})
post("pv: resourceVersion set on create: 500", PVS, dict(pv("pv-rv", "vol-rv"), metadata={"name": "pv-rv", "resourceVersion": "5"}))
post("pv: neither name nor generateName: 422", PVS, dict(pv("x", "vol-x"), metadata={}))

# ---- finalizers and deletion -----------------------------------------------------------------

patch("pv: set a finalizer (a merge patch replaces the list)", PVS + "/pv-b",
      {"metadata": {"finalizers": ["example.com/hold"]}}, MERGE)
delete("pv: delete with a finalizer: 200 with deletionTimestamp", PVS + "/pv-b")
get("pv: it stays, being deleted", PVS + "/pv-b", save={"rv_pvb2": "metadata.resourceVersion"})
delete("pv: delete again: no change", PVS + "/pv-b")
patch("pv: no new finalizer while being deleted: 422", PVS + "/pv-b",
      {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}, MERGE)
patch("pv: other metadata may still change", PVS + "/pv-b", {"metadata": {"labels": {"late": "yes"}}}, MERGE)
patch("pv: removing the last finalizer deletes it", PVS + "/pv-b",
      [{"op": "remove", "path": "/metadata/finalizers/0"}], JSONP)
get("pv: gone: 404", PVS + "/pv-b")
delete("pv: delete with a uid precondition that fails: 409", PVS + "/pv-c",
       {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "6f1b6a7e-0000-4000-8000-000000000000"}})
delete("pv: delete with a resourceVersion precondition that fails: 409", PVS + "/pv-c",
       {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": "1"}})
delete("pv: delete pv-c (no finalizers): the object", PVS + "/pv-c")
delete("pv: delete a missing one: 404", PVS + "/pv-c")

# ---- watch ------------------------------------------------------------------------------------

watch("watch pv: from the first list's resourceVersion", PVS + "?resourceVersion=${rv_pv0}")
watch("watch pv: with a labelSelector (leaving it is DELETED)", PVS + "?resourceVersion=${rv_pv0}&labelSelector=tier%3Dgold")
watch("watch pv: with a fieldSelector", PVS + "?resourceVersion=${rv_pv0}&fieldSelector=metadata.name%3Dpv-c")
watch("watch pv: resourceVersion=0 (the current objects as ADDED)", PVS + "?resourceVersion=0")
watch("watch pv: allowWatchBookmarks", PVS + "?resourceVersion=${rv_pv0}&allowWatchBookmarks=true")
watch("watch pv: an unsupported fieldSelector: 400", PVS + "?fieldSelector=spec.claimRef.name%3Dx")
watch("watch pv: as bob (allowed)", PVS + "?resourceVersion=${rv_pv0}&fieldSelector=metadata.name%3Dpv-a", user="bob")
watch("watch va: as bob (not allowed): 403", VAS + "?resourceVersion=0", user="bob")
get("list pv: resourceVersionMatch without resourceVersion: 422", PVS + "?resourceVersionMatch=NotOlderThan")
get("list pv: an unparsable resourceVersion: 400", PVS + "?resourceVersion=abc&resourceVersionMatch=Exact")

# ---- PersistentVolumeClaim -----------------------------------------------------------------------

post("pvc: create pvc-a", PVCS, pvc("pvc-a"))
post("pvc: create pvc-b (Block, with a selector)", PVCS,
     pvc("pvc-b", volumeMode="Block", selector={"matchLabels": {"tier": "gold"}}))
get("pvc: get pvc-a", PVCS + "/pvc-a", save={"rv_pvca": "metadata.resourceVersion"})
get("pvc: bob may get pvc-a (resourceNames)", PVCS + "/pvc-a", user="bob")
get("pvc: bob may not get pvc-b: 403", PVCS + "/pvc-b", user="bob")
get("pvc: list as Table", PVCS, accept=TABLE)
get("pvc: list in every namespace", CORE + "/persistentvolumeclaims")
get("pvc: fieldSelector metadata.namespace", CORE + "/persistentvolumeclaims?fieldSelector=metadata.namespace%3D" + NS)
get("pvc: an unsupported fieldSelector: 400", PVCS + "?fieldSelector=spec.volumeName%3Dx")
patch("pvc: bind it (volumeName may be set once)", PVCS + "/pvc-a", {"spec": {"volumeName": "pv-a"}}, MERGE)
patch("pvc: the spec is otherwise immutable: 422", PVCS + "/pvc-a", {"spec": {"accessModes": ["ReadWriteMany"]}}, MERGE)
patch("pvc: resize while not Bound: 422", PVCS + "/pvc-a",
      {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}, MERGE)
patch("pvc: status Bound with conditions (strategic merge)", PVCS + "/pvc-a/status",
      {"status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"},
                  "conditions": [{"type": "Resizing", "status": "True", "lastTransitionTime": T0}]}}, SMP)
patch("pvc: another condition merges by type (order as kube-apiserver keeps it)", PVCS + "/pvc-a/status",
      {"status": {"conditions": [{"type": "FileSystemResizePending", "status": "True",
                                  "lastTransitionTime": T0}]}}, SMP)
patch("pvc: an existing condition is updated in place", PVCS + "/pvc-a/status",
      {"status": {"conditions": [{"type": "Resizing", "status": "False", "lastTransitionTime": T0}]}}, SMP)
patch("pvc: $patch delete of a condition", PVCS + "/pvc-a/status",
      {"status": {"conditions": [{"type": "Resizing", "$patch": "delete"}]}}, SMP)
patch("pvc: resize once Bound, the class missing: 403 (PersistentVolumeClaimResize)", PVCS + "/pvc-a",
      {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}, MERGE)
post("sc: the class, with allowVolumeExpansion", STORAGE + "/storageclasses",
     {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"},
      "provisioner": "hostpath.csi.k8s.io", "allowVolumeExpansion": True, "volumeBindingMode": "WaitForFirstConsumer"})
patch("pvc: resize once Bound", PVCS + "/pvc-a", {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}, MERGE)
patch("pvc: shrink: 422", PVCS + "/pvc-a", {"spec": {"resources": {"requests": {"storage": "1Gi"}}}}, MERGE)
put("pvc: update with a stale resourceVersion: 409", PVCS + "/pvc-a",
    dict(pvc("pvc-a"), metadata={"name": "pvc-a", "resourceVersion": "${rv_pvca}"}))
post("pvc: invalid: no access modes, no size: 422", PVCS,
     {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "pvc-bad"}, "spec": {}})
post("pvc: invalid: a bad access mode and a negative size: 422", PVCS,
     pvc("pvc-bad", accessModes=["ReadWriteSometimes"], resources={"requests": {"storage": "-1Gi"}}))
post("pvc: in a missing namespace: 404", CORE + "/namespaces/nope/persistentvolumeclaims", pvc("pvc-x"))
post("pvc: a namespace in the body that differs: 400", PVCS,
     dict(pvc("pvc-x"), metadata={"name": "pvc-x", "namespace": "other"}))
post("lease: generateName (the random suffix is not compared)", COORD,
     {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"generateName": "gen-"}},
     check=False, save={"genname": "metadata.name"})
delete("lease: delete the generated one", COORD + "/${genname}", check=False)
patch("pvc: finalizers by strategic merge (a set)", PVCS + "/pvc-b",
      {"metadata": {"finalizers": ["example.com/a", "example.com/b"]}}, SMP)
patch("pvc: $deleteFromPrimitiveList", PVCS + "/pvc-b",
      {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/a", "kubernetes.io/pvc-protection"]}}, SMP)
delete("pvc: delete pvc-b: 200 with deletionTimestamp", PVCS + "/pvc-b")
patch("pvc: the last finalizer goes: deleted", PVCS + "/pvc-b", {"metadata": {"finalizers": []}}, MERGE)
get("pvc: gone: 404", PVCS + "/pvc-b")

# ---- VolumeAttachment ---------------------------------------------------------------------------

get("va: list before any", VAS, save={"rv_va0": "metadata.resourceVersion"})
post("va: create va-a", VAS, va("va-a", "pv-a"))
post("va: create va-b", VAS, va("va-b", "pv-b", node="node-b"))
get("va: get va-a", VAS + "/va-a", save={"rv_vaa": "metadata.resourceVersion"})
get("va: bob may get it", VAS + "/va-a", user="bob")
put("va: update without a resourceVersion: 422", VAS + "/va-a", va("va-a", "pv-a"))
put("va: update with a stale resourceVersion: 409", VAS + "/va-a",
    dict(va("va-a", "pv-a"), metadata={"name": "va-a", "resourceVersion": "1"}))
patch("va: add the attacher's finalizer", VAS + "/va-a",
      {"metadata": {"finalizers": ["external-attacher/hostpath-csi-k8s-io"]}}, MERGE)
patch("va: status attached (the spec change is ignored)", VAS + "/va-a/status",
      {"status": {"attached": True, "attachmentMetadata": {"dev": "/dev/sdb"}},
       "spec": {"nodeName": "node-z"}}, MERGE)
patch("va: main-resource patch (the status change is ignored)", VAS + "/va-a",
      {"status": {"attached": False}, "metadata": {"annotations": {"a": "b"}}}, MERGE)
patch("va: the spec is immutable: 422", VAS + "/va-a", {"spec": {"nodeName": "node-z"}}, MERGE)
patch("va: attachError", VAS + "/va-a/status",
      {"status": {"attachError": {"time": T0, "message": "rpc error: code = Internal desc = boom"}}}, MERGE)
patch("va: detachError by json patch", VAS + "/va-a/status",
      [{"op": "add", "path": "/status/detachError", "value": {"time": T0, "message": "busy"}}], JSONP)
patch("va: an attachError message over 1024 bytes: 422", VAS + "/va-a/status",
      {"status": {"attachError": {"time": T0, "message": "x" * 1100}}}, MERGE)
patch("va: status with a stale resourceVersion: 409", VAS + "/va-a/status",
      {"metadata": {"resourceVersion": "${rv_vaa}"}, "status": {"attached": False}}, MERGE)
get("va: list as Table", VAS, accept=TABLE)
delete("va: delete va-a: 200 with deletionTimestamp", VAS + "/va-a")
patch("va: the attacher removes its finalizer: deleted", VAS + "/va-a", {"metadata": {"finalizers": None}}, MERGE)
delete("va: delete with a uid precondition that fails: 409 (Kind.group)", VAS + "/va-b",
       {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "6f1b6a7e-0000-4000-8000-000000000000"}})
delete("va: delete va-b: the object", VAS + "/va-b")
watch("watch va: from the list before", VAS + "?resourceVersion=${rv_va0}")
post("va: invalid: a bad attacher, no node, no source: 422", VAS,
     {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "va-bad"},
      "spec": {"attacher": "Bad Driver", "nodeName": "", "source": {}}})
post("va: invalid: both sources: 422", VAS,
     {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "va-bad"},
      "spec": {"attacher": "a.b", "nodeName": "n",
               "source": {"persistentVolumeName": "p", "inlineVolumeSpec": {"csi": {"driver": "a.b", "volumeHandle": "h"}}}}})

# ---- Node ------------------------------------------------------------------------------------------

post("node: create node-a", NODES, {"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a"}}})
post("node: create node-b (unschedulable)", NODES, {"apiVersion": "v1", "kind": "Node",
                                                    "metadata": {"name": "node-b"}, "spec": {"unschedulable": True}})
patch("node: the registrar's annotation and topology label (strategic merge)", NODES + "/node-a",
      {"metadata": {"annotations": {"csi.volume.kubernetes.io/nodeid": "{\"hostpath.csi.k8s.io\":\"node-a\"}"},
                    "labels": {"topology.hostpath.csi/node": "node-a"}}}, SMP)
patch("node: status Ready with addresses and nodeInfo", NODES + "/node-a/status",
      {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                  "message": "kubelet is posting ready status", "lastHeartbeatTime": T0,
                                  "lastTransitionTime": T0}],
                  "addresses": [{"type": "InternalIP", "address": "10.9.0.1"},
                                {"type": "Hostname", "address": "node-a"}],
                  "nodeInfo": {"kubeletVersion": "v1.20.2", "osImage": "Debian", "kernelVersion": "6.1",
                                "containerRuntimeVersion": "containerd://1.6"},
                  "capacity": {"cpu": "2", "memory": "4Gi"}}}, SMP)
patch("node: a new condition goes first (strategic merge order)", NODES + "/node-a/status",
      {"status": {"conditions": [{"type": "DiskPressure", "status": "False", "lastHeartbeatTime": T0,
                                  "lastTransitionTime": T0}]}}, SMP)
patch("node: status in a main-resource patch is ignored", NODES + "/node-a",
      {"status": {"phase": "Running"}, "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]}}, SMP)
patch("node: the spec through /status is ignored", NODES + "/node-a/status",
      {"spec": {"unschedulable": True}, "status": {"capacity": {"cpu": "4"}}}, MERGE)
get("node: get node-a", NODES + "/node-a")
get("node: fieldSelector spec.unschedulable=true", NODES + "?fieldSelector=spec.unschedulable%3Dtrue")
get("node: labelSelector on the topology label", NODES + "?labelSelector=topology.hostpath.csi%2Fnode")
get("node: an unsupported fieldSelector: 400", NODES + "?fieldSelector=status.phase%3DRunning")
get("node: list as Table", NODES, accept=TABLE)
post("node: invalid name: 422", NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Node_A"}})
patch("node: an invalid label value: 422", NODES + "/node-a", {"metadata": {"labels": {"x": "-bad-"}}}, MERGE)

# ---- CSINode -----------------------------------------------------------------------------------------

post("csinode: create node-a", CSINODES, {
    "apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "node-a"},
    "spec": {"drivers": [{"name": "hostpath.csi.k8s.io", "nodeID": "node-a",
                          "topologyKeys": ["topology.hostpath.csi/node"]}]}})
patch("csinode: a second driver (strategic merge by name, goes first)", CSINODES + "/node-a",
      {"spec": {"drivers": [{"name": "other.csi.k8s.io", "nodeID": "n-a", "allocatable": {"count": 5}}]}}, SMP)
patch("csinode: a driver entry is immutable: 422", CSINODES + "/node-a",
      {"spec": {"drivers": [{"name": "other.csi.k8s.io", "nodeID": "changed"}]}}, SMP)
patch("csinode: remove a driver with $patch delete", CSINODES + "/node-a",
      {"spec": {"drivers": [{"name": "other.csi.k8s.io", "$patch": "delete"}]}}, SMP)
patch("csinode: json patch test of the driver name (passes)", CSINODES + "/node-a",
      [{"op": "test", "path": "/spec/drivers/0/name", "value": "hostpath.csi.k8s.io"}], JSONP)
patch("csinode: json patch test that fails: 422", CSINODES + "/node-a",
      [{"op": "test", "path": "/spec/drivers/0/nodeID", "value": "other"}], JSONP)
post("csinode: invalid: duplicate drivers, no nodeID: 422", CSINODES, {
    "apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "node-b"},
    "spec": {"drivers": [{"name": "a.csi", "nodeID": "n"}, {"name": "a.csi", "nodeID": ""}]}})
post("csinode: invalid: a bad driver name and topology key: 422", CSINODES, {
    "apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "node-b"},
    "spec": {"drivers": [{"name": "Bad Driver", "nodeID": "n", "topologyKeys": ["bad key!"]}]}})
get("csinode: list as Table", CSINODES, accept=TABLE)
get("csinode: get", CSINODES + "/node-a")

# ---- Lease (leader election) ----------------------------------------------------------------------------

post("lease: create", COORD, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                              "metadata": {"name": "external-attacher-leader-hostpath-csi-k8s-io"},
                              "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": MT0,
                                       "renewTime": MT0, "leaseTransitions": 0}},
     save={"rv_lease": "metadata.resourceVersion"})
put("lease: renew with the current resourceVersion", COORD + "/external-attacher-leader-hostpath-csi-k8s-io",
    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
     "metadata": {"name": "external-attacher-leader-hostpath-csi-k8s-io", "resourceVersion": "${rv_lease}"},
     "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": MT0, "renewTime": MT1,
              "leaseTransitions": 0}})
put("lease: a stale renew: 409", COORD + "/external-attacher-leader-hostpath-csi-k8s-io",
    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
     "metadata": {"name": "external-attacher-leader-hostpath-csi-k8s-io", "resourceVersion": "${rv_lease}"},
     "spec": {"holderIdentity": "b", "leaseDurationSeconds": 15, "acquireTime": MT0, "renewTime": MT1,
              "leaseTransitions": 1}})
post("lease: a renewTime without microseconds: 400", "/apis/coordination.k8s.io/v1/namespaces/kube-public/leases",
     {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "bad-time"},
      "spec": {"renewTime": "2024-01-01T00:00:00Z"}})
post("lease: a negative duration: 422", COORD,
     {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "bad-dur"},
      "spec": {"leaseDurationSeconds": -1}})
get("lease: list as Table", COORD, accept=TABLE)
delete("lease: delete (a Status answer)", COORD + "/external-attacher-leader-hostpath-csi-k8s-io")

# ---- Event ---------------------------------------------------------------------------------------------------

get("event: list before any", EVENTS, save={"rv_ev0": "metadata.resourceVersion"})
post("event: create (as client-go's recorder)", EVENTS, {
    "apiVersion": "v1", "kind": "Event", "metadata": {"name": "pvc-a.17a0000000000001", "namespace": NS},
    "involvedObject": {"kind": "PersistentVolumeClaim", "namespace": NS, "name": "pvc-a",
                       "uid": "6f1b6a7e-0000-4000-8000-000000000001", "apiVersion": "v1", "resourceVersion": "7"},
    "reason": "Provisioning", "message": "External provisioner is provisioning volume for claim",
    "source": {"component": "hostpath.csi.k8s.io_ext"}, "firstTimestamp": T0, "lastTimestamp": T0,
    "count": 1, "type": "Normal", "reportingComponent": "", "reportingInstance": ""})
post("event: create a minimal one", EVENTS, {
    "apiVersion": "v1", "kind": "Event", "metadata": {"name": "min.1"},
    "involvedObject": {"kind": "Node", "name": "node-a"}, "reason": "R", "type": "Warning"})
patch("event: a repeat (strategic merge of count, lastTimestamp, message)", EVENTS + "/pvc-a.17a0000000000001",
      {"count": 2, "lastTimestamp": "2024-01-01T00:01:00Z", "message": "again"}, SMP)
get("event: fieldSelector involvedObject.name and reason", EVENTS +
    "?fieldSelector=involvedObject.name%3Dpvc-a,reason%3DProvisioning")
get("event: fieldSelector involvedObject.kind=Node", EVENTS + "?fieldSelector=involvedObject.kind%3DNode")
get("event: an unsupported fieldSelector: 400", EVENTS + "?fieldSelector=message%3Dx")
get("event: list as Table", EVENTS, accept=TABLE)
get("event: the same event through events.k8s.io/v1", "/apis/events.k8s.io/v1/namespaces/" + NS +
    "/events/pvc-a.17a0000000000001")
post("event: invalid: involvedObject in another namespace: 422", EVENTS, {
    "apiVersion": "v1", "kind": "Event", "metadata": {"name": "bad.1"},
    "involvedObject": {"kind": "Pod", "namespace": "other", "name": "p"}, "reason": "R"})
post("event: invalid: no involvedObject.namespace outside default: 422",
     CORE + "/namespaces/kube-public/events", {
         "apiVersion": "v1", "kind": "Event", "metadata": {"name": "bad.2"},
         "involvedObject": {"kind": "Pod", "name": "p"}, "reason": "R"})
watch("watch event: from the list before", EVENTS + "?resourceVersion=${rv_ev0}")

# ---- Secret ------------------------------------------------------------------------------------------------

post("secret: create with stringData", SECRETS, {"apiVersion": "v1", "kind": "Secret",
                                                 "metadata": {"name": "sec-a", "labels": {"app": "diff"}},
                                                 "stringData": {"password": "s3cr3t"}, "data": {"user": "YWRtaW4="}})
get("secret: get", SECRETS + "/sec-a")
patch("secret: strategic merge of data", SECRETS + "/sec-a", {"data": {"token": "dG9r"}, "stringData": {"user": "root"}}, SMP)
get("secret: fieldSelector type=Opaque", SECRETS + "?fieldSelector=type%3DOpaque")
get("secret: an unsupported fieldSelector: 400", SECRETS + "?fieldSelector=data%3Dx")
get("secret: list as Table", SECRETS + "?labelSelector=app%3Ddiff", accept=TABLE)
patch("secret: the type is immutable: 422", SECRETS + "/sec-a", {"type": "kubernetes.io/tls"}, MERGE)
patch("secret: a finalizer (merge patch)", SECRETS + "/sec-a", {"metadata": {"finalizers": ["example.com/first"]}}, MERGE)
patch("secret: strategic merge adds a finalizer: new values first", SECRETS + "/sec-a",
      {"metadata": {"finalizers": ["example.com/second"]}}, SMP)
patch("secret: $deleteFromPrimitiveList with an addition", SECRETS + "/sec-a",
      {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/second"],
                    "finalizers": ["example.com/third"]}}, SMP)
patch("secret: the finalizers go", SECRETS + "/sec-a", {"metadata": {"finalizers": None}}, MERGE)
post("secret: an invalid data key: 422", SECRETS, {"apiVersion": "v1", "kind": "Secret",
                                                   "metadata": {"name": "sec-bad"}, "data": {"bad key": "eA=="}})
delete("secret: delete (a Status answer)", SECRETS + "/sec-a")

# ---- CustomResourceDefinitions: COSI's five (manifests/cosi/crd/) and their objects -----------------------

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
OS = "/apis/objectstorage.k8s.io/v1alpha1"
BUCKETS = OS + "/buckets"
CLAIMS = OS + "/namespaces/" + NS + "/bucketclaims"
ACCESSES = OS + "/namespaces/" + NS + "/bucketaccesses"
BCLASSES = OS + "/bucketclasses"
BACLASSES = OS + "/bucketaccessclasses"
COSI_CRDS = ["bucketclasses", "bucketclaims", "buckets", "bucketaccessclasses", "bucketaccesses"]
APPROVED = "api-approved.kubernetes.io"


def crd(plural):
    return manifest("manifests/cosi/crd/objectstorage.k8s.io_%s.yaml" % plural)


def unapproved(obj, value=None):
    obj = copy.deepcopy(obj)
    if value is None:
        del obj["metadata"]["annotations"][APPROVED]
    else:
        obj["metadata"]["annotations"][APPROVED] = value
    return obj


ABSENT = object()  # a field left out (None is sent as null)


def claim(name, **spec):
    s = {"bucketClassName": "example-cosi", "protocols": ["S3"]}
    s.update(spec)
    s = {k: v for k, v in s.items() if v is not ABSENT}
    return {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClaim", "metadata": {"name": name},
            "spec": s}


def bucket(name, **spec):
    s = {"driverName": "cosi.example.com", "bucketClassName": "example-cosi", "protocols": ["S3"],
         "bucketClaim": {"name": "example-bucket", "namespace": NS, "uid": "${uid_claim}"},
         "parameters": {"region": "us-east-1"}}
    s.update(spec)
    s = {k: v for k, v in s.items() if v is not ABSENT}
    return {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "finalizers": ["cosi.objectstorage.k8s.io/bucket-protection"]}, "spec": s}


def access(name, **spec):
    s = {"bucketClaimName": "example-bucket", "bucketAccessClassName": "example-cosi-key",
         "credentialsSecretName": name + "-credentials"}
    s.update(spec)
    return {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketAccess", "metadata": {"name": name},
            "spec": s}


post("crd: a protected group without api-approved.kubernetes.io: 422", CRDS, unapproved(crd("buckets")))
post("crd: api-approved.kubernetes.io neither a URL nor unapproved: 422", CRDS,
     unapproved(crd("buckets"), "approved by me"))
for plural in COSI_CRDS:
    post("crd: create %s.objectstorage.k8s.io" % plural, CRDS, crd(plural))
kubectl("crd: kubectl wait for the five to be Established", "wait", "--for", "condition=established",
        "--timeout=30s", *["crd/%s.objectstorage.k8s.io" % p for p in COSI_CRDS])
# kube-apiserver's API approval controller writes its condition on its own time.
kubectl("crd: kubectl wait for the approval condition", "wait", "--for",
        "condition=KubernetesAPIApprovalPolicyConformant", "--timeout=30s", "crd/bucketclaims.objectstorage.k8s.io")
get("crd: get bucketclaims.objectstorage.k8s.io (accepted names, conditions)", CRDS + "/bucketclaims.objectstorage.k8s.io")
patch("crd: removing api-approved.kubernetes.io: 422", CRDS + "/buckets.objectstorage.k8s.io",
      {"metadata": {"annotations": {APPROVED: None}}}, MERGE)
get("crd: discovery of objectstorage.k8s.io/v1alpha1", OS)

# BucketClass: root-level fields, a default before the required check, pruning.
post("bucketclass: create the example", BCLASSES, manifest("manifests/cosi/example/bucketclass.yaml"))
post("bucketclass: deletionPolicy defaulted to Retain, an unknown field pruned", BCLASSES,
     {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClass", "metadata": {"name": "retained"},
      "driverName": "cosi.example.com", "unknownField": 1})
post("bucketclass: no driverName: 422", BCLASSES,
     {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClass", "metadata": {"name": "bad"},
      "deletionPolicy": "Delete"})
# (One wrong value per request: kube-apiserver visits properties and map
# entries in Go's random map order, so the order of several is not fixed;
# the required ones come after them, in the list's order.)
post("bucketclass: a parameter that is not a string: 422", BCLASSES,
     {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClass", "metadata": {"name": "bad"},
      "driverName": "cosi.example.com", "parameters": {"n": 1}})
post("bucketclass: deletionPolicy not a string, no driverName: 422 (the required one last)", BCLASSES,
     {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClass", "metadata": {"name": "bad"},
      "deletionPolicy": 3})
post("bucketaccessclass: create the example", BACLASSES, manifest("manifests/cosi/example/bucketaccessclass.yaml"))
post("bucketaccessclass: no authenticationType, no driverName: 422", BACLASSES,
     {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketAccessClass", "metadata": {"name": "bad"}})
get("bucketclass: list", BCLASSES)

# BucketClaim: what objectstorage-controller does to it.
get("bucketclaim: list before any", CLAIMS, save={"rv_bc0": "metadata.resourceVersion"})
post("bucketclaim: create the example (a status in the body is dropped)", CLAIMS,
     dict(manifest("manifests/cosi/example/bucketclaim.yaml"), status={"bucketReady": True}),
     save={"uid_claim": "metadata.uid", "rv_claim": "metadata.resourceVersion"})
post("bucketclaim: create a second one", CLAIMS, claim("second"), save={"rv_claim2": "metadata.resourceVersion"})
post("bucketclaim: no protocols: 422", CLAIMS, claim("bad", protocols=ABSENT))
post("bucketclaim: protocols null: 422", CLAIMS, claim("bad", protocols=None))
post("bucketclaim: protocols a string: 422", CLAIMS, claim("bad", protocols="S3"))
post("bucketclaim: bucketClassName a number: 422", CLAIMS, claim("bad", bucketClassName=7))
post("bucketclaim: no spec: 201 (the spec is not required)", CLAIMS,
     {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClaim", "metadata": {"name": "nospec"}})
get("bucketclaim: get", CLAIMS + "/example-bucket")
get("bucketclaim: list", CLAIMS)
get("bucketclaim: list in every namespace", OS + "/bucketclaims")
get("bucketclaim: list as Table", CLAIMS, accept=TABLE)
get("bucketclaim: labelSelector that matches nothing", CLAIMS + "?labelSelector=app%3Dnone")
get("bucketclaim: fieldSelector metadata.name", CLAIMS + "?fieldSelector=metadata.name%3Dsecond")
get("bucketclaim: fieldSelector spec.bucketClassName: 400", CLAIMS + "?fieldSelector=spec.bucketClassName%3Dx")
patch("bucketclaim: the controller's finalizer (merge patch at the read resourceVersion)", CLAIMS + "/example-bucket",
      {"metadata": {"resourceVersion": "${rv_claim}",
                    "finalizers": ["cosi.objectstorage.k8s.io/bucketclaim-protection"]}}, MERGE,
      save={"rv_claim": "metadata.resourceVersion"})
patch("bucketclaim: a merge patch at a stale resourceVersion: 409", CLAIMS + "/second",
      {"metadata": {"resourceVersion": "${rv_bc0}", "labels": {"a": "b"}}}, MERGE)
patch("bucketclaim: a JSON patch whose resourceVersion test fails: 422", CLAIMS + "/second",
      [{"op": "test", "path": "/metadata/resourceVersion", "value": "${rv_bc0}"},
       {"op": "add", "path": "/metadata/finalizers", "value": ["x.io/y"]}], JSONP)
patch("bucketclaim: a JSON patch at the read resourceVersion", CLAIMS + "/second",
      [{"op": "test", "path": "/metadata/resourceVersion", "value": "${rv_claim2}"},
       {"op": "test", "path": "/metadata/finalizers", "value": None},
       {"op": "add", "path": "/metadata/finalizers", "value": ["cosi.objectstorage.k8s.io/bucketclaim-protection"]}],
      JSONP)
patch("bucketclaim: strategic merge patch: 415", CLAIMS + "/second", {"metadata": {"labels": {"a": "b"}}}, SMP)
patch("bucketclaim: a spec change that breaks the schema: 422", CLAIMS + "/second",
      {"spec": {"protocols": None}}, MERGE)
patch("bucketclaim: status bucketName and bucketReady (the spec change is ignored)", CLAIMS + "/example-bucket/status",
      {"metadata": {"resourceVersion": "${rv_claim}"},
       "status": {"bucketName": "bucket-${uid_claim}", "bucketReady": False}, "spec": {"protocols": ["GCP"]}},
      MERGE, save={"rv_claim": "metadata.resourceVersion"})
patch("bucketclaim: a status without bucketReady: 422", CLAIMS + "/second/status",
      {"status": {"bucketName": "b"}}, MERGE)
patch("bucketclaim: a status at a stale resourceVersion: 409", CLAIMS + "/example-bucket/status",
      {"metadata": {"resourceVersion": "${rv_bc0}"}, "status": {"bucketReady": True}}, MERGE)
patch("bucketclaim: status in a main-resource patch is ignored", CLAIMS + "/example-bucket",
      {"status": {"bucketReady": True}, "metadata": {"labels": {"app": "diff"}}}, MERGE)
put("bucketclaim: an update at a stale resourceVersion: 409", CLAIMS + "/example-bucket",
    dict(claim("example-bucket"), metadata={"name": "example-bucket", "resourceVersion": "${rv_bc0}"}))
get("bucketclaim: get after the patches", CLAIMS + "/example-bucket")

# Bucket: what objectstorage-controller creates and the sidecar completes.
post("bucket: create bucket-<claim uid> with the sidecar's finalizer (deletionPolicy defaulted)", BUCKETS,
     bucket("bucket-${uid_claim}"), save={"rv_bucket": "metadata.resourceVersion"})
post("bucket: the same again: 409 AlreadyExists", BUCKETS, bucket("bucket-${uid_claim}"))
post("bucket: no spec fields: 422", BUCKETS,
     {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "Bucket", "metadata": {"name": "bad"}, "spec": {}})
post("bucket: bucketClaim a string, no driverName: 422", BUCKETS,
     bucket("bad", bucketClaim="example-bucket", driverName=ABSENT))
post("bucket: a protocol that is a number: 422", BUCKETS, bucket("bad", protocols=["S3", 1]))
patch("bucket: the sidecar's status (bucketReady, bucketID)", BUCKETS + "/bucket-${uid_claim}/status",
      {"metadata": {"resourceVersion": "${rv_bucket}"}, "status": {"bucketReady": True, "bucketID": "bkt-0001"}},
      MERGE)
patch("bucket: the access finalizer by JSON patch", BUCKETS + "/bucket-${uid_claim}",
      [{"op": "add", "path": "/metadata/finalizers/-",
        "value": "cosi.objectstorage.k8s.io/bucketaccess-bucket-protection"}], JSONP)
patch("bucket: bucketClaim rebound by merge patch", BUCKETS + "/bucket-${uid_claim}",
      {"spec": {"bucketClaim": {"uid": None, "resourceVersion": "1"}}}, MERGE)
get("bucket: list as Table", BUCKETS, accept=TABLE)
patch("bucketclaim: ready", CLAIMS + "/example-bucket/status",
      {"status": {"bucketName": "bucket-${uid_claim}", "bucketReady": True}}, MERGE)

# BucketAccess and its credentials, as the sidecar handles them.
post("bucketaccess: create the example", ACCESSES, manifest("manifests/cosi/example/bucketaccess.yaml"),
     save={"rv_access": "metadata.resourceVersion"})
post("bucketaccess: none of the required fields: 422", ACCESSES,
     {"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketAccess", "metadata": {"name": "bad"},
      "spec": {"protocol": "S3"}})
patch("bucketaccess: the sidecar's finalizer", ACCESSES + "/example-access",
      [{"op": "test", "path": "/metadata/resourceVersion", "value": "${rv_access}"},
       {"op": "test", "path": "/metadata/finalizers", "value": None},
       {"op": "add", "path": "/metadata/finalizers", "value": ["cosi.objectstorage.k8s.io/bucketaccess-protection"]}],
      JSONP)
post("bucketaccess: the credentials Secret", SECRETS, {
    "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
    "metadata": {"name": "example-bucket-credentials", "finalizers": ["cosi.objectstorage.k8s.io/secret-protection"]},
    "stringData": {"BucketInfo": "{\"metadata\":{\"name\":\"bc-x\",\"creationTimestamp\":null}}"}})
patch("bucketaccess: status accountID and accessGranted", ACCESSES + "/example-access/status",
      {"status": {"accountID": "acct-0001", "accessGranted": True}}, MERGE)
patch("bucketaccess: accessGranted a string: 422", ACCESSES + "/example-access/status",
      {"status": {"accessGranted": "yes"}}, MERGE)
get("bucketaccess: list as Table", ACCESSES, accept=TABLE)

# Deletion: finalizers hold each object until its controller lets go.
delete("bucketaccess: delete: 200 with deletionTimestamp", ACCESSES + "/example-access")
delete("bucketaccess: the Secret: 200 with deletionTimestamp", SECRETS + "/example-bucket-credentials")
patch("bucketaccess: the Secret's finalizer goes: deleted", SECRETS + "/example-bucket-credentials",
      [{"op": "test", "path": "/metadata/finalizers/0", "value": "cosi.objectstorage.k8s.io/secret-protection"},
       {"op": "remove", "path": "/metadata/finalizers/0"}], JSONP)
patch("bucketaccess: its finalizer goes: deleted", ACCESSES + "/example-access",
      [{"op": "test", "path": "/metadata/finalizers/0", "value": "cosi.objectstorage.k8s.io/bucketaccess-protection"},
       {"op": "remove", "path": "/metadata/finalizers/0"}], JSONP)
get("bucketaccess: gone: 404", ACCESSES + "/example-access")
delete("bucketclaim: delete: 200 with deletionTimestamp", CLAIMS + "/example-bucket")
delete("bucket: delete: 200 with deletionTimestamp", BUCKETS + "/bucket-${uid_claim}")
patch("bucket: a new finalizer on an object being deleted: 422", BUCKETS + "/bucket-${uid_claim}",
      {"metadata": {"finalizers": ["cosi.objectstorage.k8s.io/bucket-protection",
                                   "cosi.objectstorage.k8s.io/bucketaccess-bucket-protection", "late.io/x"]}}, MERGE)
patch("bucket: the sidecar's finalizers go: deleted", BUCKETS + "/bucket-${uid_claim}",
      {"metadata": {"finalizers": None}}, MERGE)
patch("bucketclaim: its finalizer goes: deleted", CLAIMS + "/example-bucket",
      [{"op": "test", "path": "/metadata/finalizers/0", "value": "cosi.objectstorage.k8s.io/bucketclaim-protection"},
       {"op": "remove", "path": "/metadata/finalizers/0"}], JSONP)
delete("bucketclaim: delete with a uid precondition that fails: 409", CLAIMS + "/nospec",
       {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "6f1b6a7e-0000-4000-8000-000000000000"}})
delete("bucketclaim: delete without finalizers: the object", CLAIMS + "/nospec")
watch("watch bucketclaim: from the list before", CLAIMS + "?resourceVersion=${rv_bc0}")
kubectl("kubectl get bucketclaims", "get", "bucketclaims")
kubectl("kubectl get bucketclass example-cosi -o yaml", "get", "bucketclass", "example-cosi", "-o", "yaml")

# ---- too old resourceVersions (after both servers trimmed their history) -----------------------------------

step("compact the history", kind="compact", check=False)
watch("watch event: from before the compaction: 410", EVENTS + "?resourceVersion=${rv_ev0}")
get("list pv: Exact at a compacted resourceVersion: 410", PVS + "?resourceVersion=${rv_pv0}&resourceVersionMatch=Exact")

# ---- kubectl, as the README shows it ---------------------------------------------------------------------

# (the protection finalizers out of the way: see the exceptions)
patch("pv: drop pv-a's protection finalizer", PVS + "/pv-a", {"metadata": {"finalizers": None}}, MERGE)
patch("pvc: drop pvc-a's protection finalizer", PVCS + "/pvc-a", {"metadata": {"finalizers": None}}, MERGE)

kubectl("kubectl get pv,pvc,volumeattachments,csinodes", "get", "pv,pvc,volumeattachments,csinodes")
kubectl("kubectl get pv pv-a -o yaml", "get", "pv", "pv-a", "-o", "yaml")
kubectl("kubectl get nodes", "get", "nodes")
kubectl("kubectl get csinode node-a -o yaml", "get", "csinode", "node-a", "-o", "yaml")
kubectl("kubectl get events", "get", "events")
kubectl("kubectl get pvc pvc-a -o jsonpath", "get", "pvc", "pvc-a", "-o", "jsonpath={.status.phase} {.spec.volumeName} {.metadata.finalizers}")
