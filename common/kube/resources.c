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
 * Upper case where the API server never writes a null (an omitempty field,
 * a struct, a string): a null there is a lie that reads as "absent" (a
 * StorageClass whose provisioner read null made every claim of it look
 * someone else's, for good: classes do not change). Lower case where Go
 * writes null for an empty field (a CSINode's drivers and topologyKeys).
 * "O x[]": every item of a list of objects is one (hostile seed 1416338706:
 * the first CSINode event had drivers[0] of another type, the provisioner
 * cached a CSINode without the driver, for good, and provisioned nothing).
 * Objects that rarely change (classes, CSINodes) matter most: a corrupted
 * copy in the cache would stay there until the next list, and the claims
 * it concerns would wait for it.
 */
static const char *const PVC_FIELDS[] = {"O spec",
                                         "S spec.storageClassName",
                                         "S spec.volumeName",
                                         "L spec.accessModes",
                                         "S spec.volumeMode",
                                         "O spec.resources",
                                         "M spec.resources.requests",
                                         "r spec.resources.requests.storage",
                                         "O spec.dataSource",
                                         "O spec.dataSourceRef",
                                         "O spec.selector",
                                         "O status",
                                         "S status.phase",
                                         "M status.capacity",
                                         "M status.allocatedResources",
                                         "M status.allocatedResourceStatuses",
                                         "A status.conditions",
                                         "O status.conditions[]",
                                         "S status.conditions[].type",
                                         "S status.conditions[].status",
                                         NULL};
static const char *const PV_FIELDS[] = {"O spec",
                                        "O spec.csi",
                                        "S spec.csi.driver",
                                        "S spec.csi.volumeHandle",
                                        "M spec.csi.volumeAttributes",
                                        "O spec.claimRef",
                                        "S spec.claimRef.name",
                                        "S spec.claimRef.namespace",
                                        "S spec.claimRef.uid",
                                        "S spec.persistentVolumeReclaimPolicy",
                                        "S spec.storageClassName",
                                        "M spec.capacity",
                                        "O status",
                                        "S status.phase",
                                        NULL};
static const char *const SC_FIELDS[] = {"r provisioner",
                                        "M parameters",
                                        "S reclaimPolicy",
                                        "S volumeBindingMode",
                                        "B allowVolumeExpansion",
                                        "L mountOptions",
                                        "A allowedTopologies",
                                        "O allowedTopologies[]",
                                        "a allowedTopologies[].matchLabelExpressions",
                                        "O allowedTopologies[].matchLabelExpressions[]",
                                        "s allowedTopologies[].matchLabelExpressions[].key",
                                        "l allowedTopologies[].matchLabelExpressions[].values",
                                        NULL};
static const char *const CSINODE_FIELDS[] = {"O spec",
                                             "a spec.drivers",
                                             "O spec.drivers[]",
                                             "S spec.drivers[].name",
                                             "S spec.drivers[].nodeID",
                                             "l spec.drivers[].topologyKeys",
                                             NULL};
/* What csi-resizer's in-use cache and kubelet-sim decide on: a pod whose
 * volumes read as none would leave the in-use cache until it changes. */
static const char *const POD_FIELDS[] = {"O spec",
                                         "S spec.nodeName",
                                         "A spec.volumes",
                                         "O spec.volumes[]",
                                         "S spec.volumes[].name",
                                         "O spec.volumes[].persistentVolumeClaim",
                                         "S spec.volumes[].persistentVolumeClaim.claimName",
                                         "O status",
                                         "S status.phase",
                                         NULL};
static const char *const VA_FIELDS[] = {"O spec",
                                        "S spec.attacher",
                                        "S spec.nodeName",
                                        "O spec.source",
                                        "S spec.source.persistentVolumeName",
                                        "O spec.source.inlineVolumeSpec",
                                        "O status",
                                        "B status.attached",
                                        "M status.attachmentMetadata",
                                        NULL};
#define SNAP(res, kind, ns, fields)                                                                \
    {                                                                                              \
        "snapshot.storage.k8s.io", "v1", res, kind, ns, fields                                     \
    }
/* What csi-snapshotter and the provisioner read of a content (the CRD's
 * types). A CRD's fields are not nullable unless its schema says so, and
 * the API server prunes their nulls: upper case, a null is a lie. */
static const char *const VSC_FIELDS[] = {"O spec",
                                         "S spec.driver",
                                         "S spec.deletionPolicy",
                                         "N spec.volumeSnapshotClassName",
                                         "O spec.source",
                                         "S spec.source.volumeHandle",
                                         "S spec.source.snapshotHandle",
                                         "O spec.volumeSnapshotRef",
                                         "N spec.volumeSnapshotRef.name",
                                         "N spec.volumeSnapshotRef.namespace",
                                         "N spec.volumeSnapshotRef.uid",
                                         "O status",
                                         "S status.snapshotHandle",
                                         "B status.readyToUse",
                                         "I status.creationTime",
                                         "I status.restoreSize",
                                         "S status.volumeGroupSnapshotHandle",
                                         "O status.error",
                                         "S status.error.message",
                                         "T status.error.time",
                                         NULL};

/* objectstorage.k8s.io/v1alpha1 (COSI). */
#define COSI(res, kind, ns, fields)                                                                \
    {                                                                                              \
        "objectstorage.k8s.io", "v1alpha1", res, kind, ns, fields                                  \
    }
static const char *const BUCKET_FIELDS[] = {"O spec",
                                            "N spec.driverName",
                                            "N spec.bucketClassName",
                                            "O spec.bucketClaim",
                                            "N spec.bucketClaim.name",
                                            "N spec.bucketClaim.namespace",
                                            "N spec.bucketClaim.uid",
                                            "L spec.protocols",
                                            "M spec.parameters",
                                            "S spec.deletionPolicy",
                                            "S spec.existingBucketID",
                                            "O status",
                                            "B status.bucketReady",
                                            "S status.bucketID",
                                            NULL};
static const char *const BUCKETCLAIM_FIELDS[] = {
    "O spec",   "N spec.bucketClassName", "L spec.protocols",    "N spec.existingBucketName",
    "O status", "B status.bucketReady",   "N status.bucketName", NULL};
static const char *const BUCKETCLASS_FIELDS[] = {"N driverName", "S deletionPolicy", "M parameters",
                                                 NULL};
static const char *const BUCKETACCESSCLASS_FIELDS[] = {"N driverName", "S authenticationType",
                                                       "M parameters", NULL};
static const char *const BUCKETACCESS_FIELDS[] = {"O spec",
                                                  "N spec.bucketClaimName",
                                                  "S spec.protocol",
                                                  "N spec.bucketAccessClassName",
                                                  "N spec.credentialsSecretName",
                                                  "N spec.serviceAccountName",
                                                  "O status",
                                                  "S status.accountID",
                                                  "B status.accessGranted",
                                                  NULL};

const kube_resource KUBE_PVC =
    CORE("persistentvolumeclaims", "PersistentVolumeClaim", true, PVC_FIELDS);
const kube_resource KUBE_PV = CORE("persistentvolumes", "PersistentVolume", false, PV_FIELDS);
const kube_resource KUBE_NODE = CORE("nodes", "Node", false, NULL);
const kube_resource KUBE_POD = CORE("pods", "Pod", true, POD_FIELDS);
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
                                          "L metadata.finalizers",
                                          "t metadata.deletionTimestamp",
                                          NULL};

int kube_object_check(const kube_resource *r, const json_object *obj, const char *name)
{
    const char *got = kobj_name(obj);
    if (!got || !*got)
        return util_err_set(-EBADMSG, "%s: not an object with a metadata.name", r->resource);
    if (name && strcmp(got, name) != 0)
        return util_err_set(-EBADMSG, "%s %s: the answer names another object", r->resource, name);
    if (kobj_check(obj, META_FIELDS) < 0 || kobj_check(obj, r->fields) < 0)
        return util_err_set(-EBADMSG, "%s %s: %s", r->resource, got, util_err_last());
    /* An API server gives every object a UID; one without (a null there)
     * would read as an object that owns nothing, and csi-snapshotter's or
     * the COSI controller's "not ours, let it go" decisions rest on that. */
    const char *uid = kobj_uid(obj);
    if (!uid || !*uid)
        return util_err_set(-EBADMSG, "%s %s: no metadata.uid", r->resource, got);
    /* The name (kobj_name: at most 253 bytes) and the namespace are the
     * object's key in every cache: an identity no API server can store
     * would file the object under a key of its own, so that a DELETED event
     * or a list item with it leaves the real object's copy behind (or takes
     * it away). */
    const char *ns = kobj_namespace(obj);
    bool has_ns = ns && *ns;
    if (r->namespaced && !has_ns)
        return util_err_set(-EBADMSG, "%s %s: no metadata.namespace on a namespaced object",
                            r->resource, got);
    if (!r->namespaced && has_ns)
        return util_err_set(-EBADMSG, "%s %s: a metadata.namespace on a cluster-scoped object",
                            r->resource, got);
    return 0;
}
