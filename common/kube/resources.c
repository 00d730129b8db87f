/*
 * The API resources the sidecars touch, and the REST path of a resource
 * with its names escaped. No I/O, no state. (kube_key lives with the
 * informer, its main user.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube/kube.h"

#define CORE(res, kind, ns, fields)                                                                \
    {                                                                                              \
        "", "v1", res, kind, ns, fields                                                            \
    }
#define STORAGE(res, kind, ns, fields)                                                             \
    {                                                                                              \
        "storage.k8s.io", "v1", res, kind, ns, fields                                              \
    }

/*
 * The fields each sidecar reads, with their types in the Kubernetes API.
 * Objects that rarely change (classes, CSINodes) matter most: a corrupted
 * copy in the cache would stay there until the next list, and the claims
 * it concerns would wait for it.
 */
static const char *const PVC_FIELDS[] = {"o spec",
                                         "s spec.storageClassName",
                                         "s spec.volumeName",
                                         "l spec.accessModes",
                                         "s spec.volumeMode",
                                         "o spec.resources",
                                         "m spec.resources.requests",
                                         "o spec.dataSource",
                                         "o spec.dataSourceRef",
                                         "o spec.selector",
                                         "o status",
                                         "s status.phase",
                                         NULL};
static const char *const PV_FIELDS[] = {"o spec",
                                        "o spec.csi",
                                        "s spec.csi.driver",
                                        "s spec.csi.volumeHandle",
                                        "m spec.csi.volumeAttributes",
                                        "o spec.claimRef",
                                        "s spec.claimRef.name",
                                        "s spec.claimRef.namespace",
                                        "s spec.claimRef.uid",
                                        "s spec.persistentVolumeReclaimPolicy",
                                        "s spec.storageClassName",
                                        "m spec.capacity",
                                        "o status",
                                        "s status.phase",
                                        NULL};
static const char *const SC_FIELDS[] = {"s provisioner",
                                        "m parameters",
                                        "s reclaimPolicy",
                                        "s volumeBindingMode",
                                        "b allowVolumeExpansion",
                                        "l mountOptions",
                                        "a allowedTopologies",
                                        "a allowedTopologies[].matchLabelExpressions",
                                        "s allowedTopologies[].matchLabelExpressions[].key",
                                        "l allowedTopologies[].matchLabelExpressions[].values",
                                        NULL};
static const char *const CSINODE_FIELDS[] = {"o spec",
                                             "a spec.drivers",
                                             "s spec.drivers[].name",
                                             "s spec.drivers[].nodeID",
                                             "l spec.drivers[].topologyKeys",
                                             NULL};
static const char *const VA_FIELDS[] = {"o spec",
                                        "s spec.attacher",
                                        "s spec.nodeName",
                                        "o spec.source",
                                        "s spec.source.persistentVolumeName",
                                        "o spec.source.inlineVolumeSpec",
                                        "o status",
                                        "b status.attached",
                                        "m status.attachmentMetadata",
                                        NULL};
#define SNAP(res, kind, ns, fields)                                                                \
    {                                                                                              \
        "snapshot.storage.k8s.io", "v1", res, kind, ns, fields                                     \
    }
/* What csi-snapshotter and the provisioner read of a content (the CRD's types). */
static const char *const VSC_FIELDS[] = {"o spec",
                                         "s spec.driver",
                                         "s spec.deletionPolicy",
                                         "n spec.volumeSnapshotClassName",
                                         "o spec.source",
                                         "s spec.source.volumeHandle",
                                         "s spec.source.snapshotHandle",
                                         "o spec.volumeSnapshotRef",
                                         "n spec.volumeSnapshotRef.name",
                                         "n spec.volumeSnapshotRef.namespace",
                                         "n spec.volumeSnapshotRef.uid",
                                         "o status",
                                         "s status.snapshotHandle",
                                         "b status.readyToUse",
                                         "s status.volumeGroupSnapshotHandle",
                                         "o status.error",
                                         "s status.error.message",
                                         "t status.error.time",
                                         NULL};

/* objectstorage.k8s.io/v1alpha1 (COSI). */
#define COSI(res, kind, ns, fields)                                                                \
    {                                                                                              \
        "objectstorage.k8s.io", "v1alpha1", res, kind, ns, fields                                  \
    }
static const char *const BUCKET_FIELDS[] = {"o spec",
                                            "n spec.driverName",
                                            "n spec.bucketClassName",
                                            "o spec.bucketClaim",
                                            "n spec.bucketClaim.name",
                                            "n spec.bucketClaim.namespace",
                                            "n spec.bucketClaim.uid",
                                            "l spec.protocols",
                                            "m spec.parameters",
                                            "s spec.deletionPolicy",
                                            "s spec.existingBucketID",
                                            "o status",
                                            "b status.bucketReady",
                                            "s status.bucketID",
                                            NULL};
static const char *const BUCKETCLAIM_FIELDS[] = {
    "o spec",   "n spec.bucketClassName", "l spec.protocols",    "n spec.existingBucketName",
    "o status", "b status.bucketReady",   "n status.bucketName", NULL};
static const char *const BUCKETCLASS_FIELDS[] = {"n driverName", "s deletionPolicy", "m parameters",
                                                 NULL};
static const char *const BUCKETACCESSCLASS_FIELDS[] = {"n driverName", "s authenticationType",
                                                       "m parameters", NULL};
static const char *const BUCKETACCESS_FIELDS[] = {"o spec",
                                                  "n spec.bucketClaimName",
                                                  "s spec.protocol",
                                                  "n spec.bucketAccessClassName",
                                                  "n spec.credentialsSecretName",
                                                  "n spec.serviceAccountName",
                                                  "o status",
                                                  "s status.accountID",
                                                  "b status.accessGranted",
                                                  NULL};

const kube_resource KUBE_PVC =
    CORE("persistentvolumeclaims", "PersistentVolumeClaim", true, PVC_FIELDS);
const kube_resource KUBE_PV = CORE("persistentvolumes", "PersistentVolume", false, PV_FIELDS);
const kube_resource KUBE_NODE = CORE("nodes", "Node", false, NULL);
const kube_resource KUBE_POD = CORE("pods", "Pod", true, NULL);
const kube_resource KUBE_SECRET = CORE("secrets", "Secret", true, NULL);
const kube_resource KUBE_EVENT = CORE("events", "Event", true, NULL);
const kube_resource KUBE_NAMESPACE = CORE("namespaces", "Namespace", false, NULL);
const kube_resource KUBE_STORAGECLASS = STORAGE("storageclasses", "StorageClass", false, SC_FIELDS);
const kube_resource KUBE_CSINODE = STORAGE("csinodes", "CSINode", false, CSINODE_FIELDS);
const kube_resource KUBE_CSIDRIVER = STORAGE("csidrivers", "CSIDriver", false, NULL);
const kube_resource KUBE_VOLUMEATTACHMENT =
    STORAGE("volumeattachments", "VolumeAttachment", false, VA_FIELDS);
const kube_resource KUBE_CSISTORAGECAPACITY =
    STORAGE("csistoragecapacities", "CSIStorageCapacity", true, NULL);
const kube_resource KUBE_VOLUMEATTRIBUTESCLASS =
    STORAGE("volumeattributesclasses", "VolumeAttributesClass", false, NULL);
const kube_resource KUBE_LEASE = {"coordination.k8s.io", "v1", "leases", "Lease", true, NULL};
const kube_resource KUBE_BUCKET = COSI("buckets", "Bucket", false, BUCKET_FIELDS);
const kube_resource KUBE_BUCKETCLAIM =
    COSI("bucketclaims", "BucketClaim", true, BUCKETCLAIM_FIELDS);
const kube_resource KUBE_BUCKETCLASS =
    COSI("bucketclasses", "BucketClass", false, BUCKETCLASS_FIELDS);
const kube_resource KUBE_BUCKETACCESS =
    COSI("bucketaccesses", "BucketAccess", true, BUCKETACCESS_FIELDS);
const kube_resource KUBE_BUCKETACCESSCLASS =
    COSI("bucketaccessclasses", "BucketAccessClass", false, BUCKETACCESSCLASS_FIELDS);
const kube_resource KUBE_VOLUMESNAPSHOT = SNAP("volumesnapshots", "VolumeSnapshot", true, NULL);
const kube_resource KUBE_VOLUMESNAPSHOTCONTENT =
    SNAP("volumesnapshotcontents", "VolumeSnapshotContent", false, VSC_FIELDS);

/* Appends one path segment at p, percent-escaping everything outside RFC
 * 3986's unreserved set: a name can never inject "/", "?" or "%" into the
 * path. Returns the end; the caller sized the buffer for 3 bytes per byte. */
static char *put_segment(char *p, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    *p++ = '/';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
            *c == '-' || *c == '.' || *c == '_' || *c == '~') {
            *p++ = (char)*c;
        } else {
            *p++ = '%';
            *p++ = hex[*c >> 4];
            *p++ = hex[*c & 15];
        }
    }
    return p;
}

/* Copies s with its terminator and returns where the next text goes. */
static char *put_text(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n + 1);
    return p + n;
}

/* Built in one buffer sized up front: this runs for every request. */
char *kube_path(const kube_resource *r, const char *ns, const char *name, const char *sub)
{
    bool in_ns = r->namespaced && ns && *ns;
    size_t cap = sizeof("/apis///namespaces///") + strlen(r->group) + strlen(r->version) +
                 strlen(r->resource) + (in_ns ? 3 * strlen(ns) + 1 : 0) +
                 (name ? 3 * strlen(name) + 1 : 0) + (sub ? strlen(sub) + 1 : 0);
    char *buf = malloc(cap);
    if (!buf)
        abort();
    char *p = buf;
    if (r->group[0]) {
        p = put_text(p, "/apis/");
        p = put_text(p, r->group);
        *p++ = '/';
    } else {
        p = put_text(p, "/api/");
    }
    p = put_text(p, r->version);
    if (in_ns) {
        p = put_text(p, "/namespaces");
        p = put_segment(p, ns);
    }
    *p++ = '/';
    p = put_text(p, r->resource);
    if (name)
        p = put_segment(p, name);
    /* A subresource is a fixed word of ours ("status"), not user input. */
    if (sub) {
        *p++ = '/';
        p = put_text(p, sub);
    }
    /* put_text left the terminator; a segment may end the path instead. */
    *p = '\0';
    return buf;
}

/* Metadata every object carries, whatever its kind. */
static const char *const META_FIELDS[] = {"o metadata",
                                          "n metadata.namespace",
                                          "n metadata.uid",
                                          "s metadata.resourceVersion",
                                          "m metadata.labels",
                                          "m metadata.annotations",
                                          "l metadata.finalizers",
                                          "t metadata.deletionTimestamp",
                                          NULL};

int kube_object_check(const kube_resource *r, const json_object *obj, const char *name)
{
    const char *got = kobj_name(obj);
    if (!got)
        return util_err_set(-EBADMSG, "%s: not an object with a metadata.name", r->resource);
    if (name && strcmp(got, name) != 0)
        return util_err_set(-EBADMSG, "%s %s: the answer names another object", r->resource, name);
    if (kobj_check(obj, META_FIELDS) < 0 || kobj_check(obj, r->fields) < 0)
        return util_err_set(-EBADMSG, "%s %s: %s", r->resource, got, util_err_last());
    return 0;
}
