/*
 * The API resources the sidecars touch, and the REST path of a resource
 * with its names escaped. No I/O, no state. (kube_key lives with the
 * informer, its main user.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"

#define CORE(res, kind, ns)                                                                        \
    {                                                                                              \
        "", "v1", res, kind, ns                                                                    \
    }
#define STORAGE(res, kind, ns)                                                                     \
    {                                                                                              \
        "storage.k8s.io", "v1", res, kind, ns                                                      \
    }
#define SNAP(res, kind, ns)                                                                        \
    {                                                                                              \
        "snapshot.storage.k8s.io", "v1", res, kind, ns                                             \
    }

const kube_resource KUBE_PVC = CORE("persistentvolumeclaims", "PersistentVolumeClaim", true);
const kube_resource KUBE_PV = CORE("persistentvolumes", "PersistentVolume", false);
const kube_resource KUBE_NODE = CORE("nodes", "Node", false);
const kube_resource KUBE_POD = CORE("pods", "Pod", true);
const kube_resource KUBE_SECRET = CORE("secrets", "Secret", true);
const kube_resource KUBE_EVENT = CORE("events", "Event", true);
const kube_resource KUBE_NAMESPACE = CORE("namespaces", "Namespace", false);
const kube_resource KUBE_STORAGECLASS = STORAGE("storageclasses", "StorageClass", false);
const kube_resource KUBE_CSINODE = STORAGE("csinodes", "CSINode", false);
const kube_resource KUBE_CSIDRIVER = STORAGE("csidrivers", "CSIDriver", false);
const kube_resource KUBE_VOLUMEATTACHMENT = STORAGE("volumeattachments", "VolumeAttachment", false);
const kube_resource KUBE_CSISTORAGECAPACITY =
    STORAGE("csistoragecapacities", "CSIStorageCapacity", true);
const kube_resource KUBE_VOLUMEATTRIBUTESCLASS =
    STORAGE("volumeattributesclasses", "VolumeAttributesClass", false);
const kube_resource KUBE_LEASE = {"coordination.k8s.io", "v1", "leases", "Lease", true};
const kube_resource KUBE_VOLUMESNAPSHOT = SNAP("volumesnapshots", "VolumeSnapshot", true);
const kube_resource KUBE_VOLUMESNAPSHOTCONTENT =
    SNAP("volumesnapshotcontents", "VolumeSnapshotContent", false);

/* Appends one path segment, percent-escaping everything outside RFC 3986's
 * unreserved set: a name can never inject "/", "?" or "%" into the path. */
static void put_segment(FILE *f, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    fputc('/', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            fputc(*p, f);
        } else {
            fputc('%', f);
            fputc(hex[*p >> 4], f);
            fputc(hex[*p & 15], f);
        }
    }
}

char *kube_path(const kube_resource *r, const char *ns, const char *name, const char *sub)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        abort();
    if (r->group[0])
        fprintf(f, "/apis/%s/%s", r->group, r->version);
    else
        fprintf(f, "/api/%s", r->version);
    if (r->namespaced && ns && *ns) {
        fputs("/namespaces", f);
        put_segment(f, ns);
    }
    fprintf(f, "/%s", r->resource);
    if (name)
        put_segment(f, name);
    /* A subresource is a fixed word of ours ("status"), not user input. */
    if (sub)
        fprintf(f, "/%s", sub);
    if (fclose(f) != 0 || !buf)
        abort();
    return buf;
}
