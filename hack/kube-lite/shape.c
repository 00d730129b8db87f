/*
 * Request bodies' JSON types, checked before anything reads them.
 *
 * kube-apiserver decodes a body into the Go struct of its kind, so a value
 * of the wrong JSON type (a string for a list, a number for a name) is a
 * 400 before any rule runs. kube-lite keeps objects as JSON trees, so the
 * same check is a table here: each row names a dotted path ("[]" steps into
 * every element of a list, "{}" into every value of a map), the JSON type
 * the Go field decodes from and the Go type for the message. JSON null is
 * always accepted (it decodes to the zero value). Paths whose parent has the
 * wrong type are reported by the parent's row, which comes first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

enum { S_OBJ, S_ARR, S_STR, S_INT, S_BOOL, S_QTY /* a string or a number */ };

typedef struct shape_row {
    const char *group;    /* NULL: every type */
    const char *resource; /* NULL: every resource of the group */
    const char *path;
    int type;
    const char *go;
} shape_row;

#define ALL        NULL, NULL
#define CORE(r)    "", r
#define STORAGE(r) "storage.k8s.io", r
#define RBAC_ALL   "rbac.authorization.k8s.io", NULL
#define APPS       "apps", NULL

static const shape_row rows[] = {
    {ALL, "metadata", S_OBJ, "v1.ObjectMeta"},
    {ALL, "metadata.name", S_STR, "string"},
    {ALL, "metadata.generateName", S_STR, "string"},
    {ALL, "metadata.namespace", S_STR, "string"},
    {ALL, "metadata.uid", S_STR, "types.UID"},
    {ALL, "metadata.resourceVersion", S_STR, "string"},
    {ALL, "metadata.generation", S_INT, "int64"},
    {ALL, "metadata.creationTimestamp", S_STR, "v1.Time"},
    {ALL, "metadata.deletionTimestamp", S_STR, "v1.Time"},
    {ALL, "metadata.deletionGracePeriodSeconds", S_INT, "int64"},
    {ALL, "metadata.labels", S_OBJ, "map[string]string"},
    {ALL, "metadata.labels{}", S_STR, "string"},
    {ALL, "metadata.annotations", S_OBJ, "map[string]string"},
    {ALL, "metadata.annotations{}", S_STR, "string"},
    {ALL, "metadata.finalizers", S_ARR, "[]string"},
    {ALL, "metadata.finalizers[]", S_STR, "string"},
    {ALL, "metadata.ownerReferences", S_ARR, "[]v1.OwnerReference"},
    {ALL, "metadata.ownerReferences[]", S_OBJ, "v1.OwnerReference"},
    {ALL, "metadata.ownerReferences[].apiVersion", S_STR, "string"},
    {ALL, "metadata.ownerReferences[].kind", S_STR, "string"},
    {ALL, "metadata.ownerReferences[].name", S_STR, "string"},
    {ALL, "metadata.ownerReferences[].uid", S_STR, "types.UID"},
    {ALL, "metadata.ownerReferences[].controller", S_BOOL, "bool"},
    {ALL, "metadata.ownerReferences[].blockOwnerDeletion", S_BOOL, "bool"},
    {ALL, "metadata.managedFields", S_ARR, "[]v1.ManagedFieldsEntry"},
    {ALL, "kind", S_STR, "string"},
    {ALL, "apiVersion", S_STR, "string"},

    {CORE("persistentvolumeclaims"), "spec", S_OBJ, "v1.PersistentVolumeClaimSpec"},
    {CORE("persistentvolumeclaims"), "spec.accessModes", S_ARR, "[]v1.PersistentVolumeAccessMode"},
    {CORE("persistentvolumeclaims"), "spec.accessModes[]", S_STR, "v1.PersistentVolumeAccessMode"},
    {CORE("persistentvolumeclaims"), "spec.resources", S_OBJ, "v1.VolumeResourceRequirements"},
    {CORE("persistentvolumeclaims"), "spec.resources.requests", S_OBJ, "v1.ResourceList"},
    {CORE("persistentvolumeclaims"), "spec.resources.requests{}", S_QTY, "resource.Quantity"},
    {CORE("persistentvolumeclaims"), "spec.volumeName", S_STR, "string"},
    {CORE("persistentvolumeclaims"), "spec.storageClassName", S_STR, "string"},
    {CORE("persistentvolumeclaims"), "spec.volumeMode", S_STR, "v1.PersistentVolumeMode"},
    {CORE("persistentvolumeclaims"), "spec.selector", S_OBJ, "v1.LabelSelector"},
    {CORE("persistentvolumeclaims"), "spec.dataSource", S_OBJ, "v1.TypedLocalObjectReference"},
    {CORE("persistentvolumeclaims"), "spec.dataSourceRef", S_OBJ, "v1.TypedObjectReference"},
    {CORE("persistentvolumeclaims"), "spec.volumeAttributesClassName", S_STR, "string"},
    {CORE("persistentvolumeclaims"), "status", S_OBJ, "v1.PersistentVolumeClaimStatus"},
    {CORE("persistentvolumeclaims"), "status.currentVolumeAttributesClassName", S_STR, "string"},
    {CORE("persistentvolumeclaims"), "status.modifyVolumeStatus", S_OBJ, "v1.ModifyVolumeStatus"},
    {CORE("persistentvolumeclaims"), "status.modifyVolumeStatus.targetVolumeAttributesClassName",
     S_STR, "string"},
    {CORE("persistentvolumeclaims"), "status.modifyVolumeStatus.status", S_STR,
     "v1.PersistentVolumeClaimModifyVolumeStatus"},
    {CORE("persistentvolumeclaims"), "status.phase", S_STR, "v1.PersistentVolumeClaimPhase"},
    {CORE("persistentvolumeclaims"), "status.accessModes", S_ARR,
     "[]v1.PersistentVolumeAccessMode"},
    {CORE("persistentvolumeclaims"), "status.capacity", S_OBJ, "v1.ResourceList"},
    {CORE("persistentvolumeclaims"), "status.conditions", S_ARR,
     "[]v1.PersistentVolumeClaimCondition"},
    {CORE("persistentvolumeclaims"), "status.conditions[]", S_OBJ,
     "v1.PersistentVolumeClaimCondition"},

    {CORE("persistentvolumes"), "spec", S_OBJ, "v1.PersistentVolumeSpec"},
    {CORE("persistentvolumes"), "spec.capacity", S_OBJ, "v1.ResourceList"},
    {CORE("persistentvolumes"), "spec.capacity{}", S_QTY, "resource.Quantity"},
    {CORE("persistentvolumes"), "spec.accessModes", S_ARR, "[]v1.PersistentVolumeAccessMode"},
    {CORE("persistentvolumes"), "spec.accessModes[]", S_STR, "v1.PersistentVolumeAccessMode"},
    {CORE("persistentvolumes"), "spec.volumeAttributesClassName", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.claimRef", S_OBJ, "v1.ObjectReference"},
    {CORE("persistentvolumes"), "spec.claimRef.name", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.claimRef.namespace", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.claimRef.uid", S_STR, "types.UID"},
    {CORE("persistentvolumes"), "spec.csi", S_OBJ, "v1.CSIPersistentVolumeSource"},
    {CORE("persistentvolumes"), "spec.csi.driver", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.csi.volumeHandle", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.csi.fsType", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.csi.readOnly", S_BOOL, "bool"},
    {CORE("persistentvolumes"), "spec.csi.volumeAttributes", S_OBJ, "map[string]string"},
    {CORE("persistentvolumes"), "spec.csi.volumeAttributes{}", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.persistentVolumeReclaimPolicy", S_STR,
     "v1.PersistentVolumeReclaimPolicy"},
    {CORE("persistentvolumes"), "spec.storageClassName", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.volumeMode", S_STR, "v1.PersistentVolumeMode"},
    {CORE("persistentvolumes"), "spec.mountOptions", S_ARR, "[]string"},
    {CORE("persistentvolumes"), "spec.mountOptions[]", S_STR, "string"},
    {CORE("persistentvolumes"), "spec.nodeAffinity", S_OBJ, "v1.VolumeNodeAffinity"},
    {CORE("persistentvolumes"), "status", S_OBJ, "v1.PersistentVolumeStatus"},
    {CORE("persistentvolumes"), "status.phase", S_STR, "v1.PersistentVolumePhase"},

    {CORE("pods"), "spec", S_OBJ, "v1.PodSpec"},
    {CORE("pods"), "spec.nodeName", S_STR, "string"},
    {CORE("pods"), "spec.containers", S_ARR, "[]v1.Container"},
    {CORE("pods"), "spec.containers[]", S_OBJ, "v1.Container"},
    {CORE("pods"), "spec.containers[].name", S_STR, "string"},
    {CORE("pods"), "spec.containers[].image", S_STR, "string"},
    {CORE("pods"), "spec.volumes", S_ARR, "[]v1.Volume"},
    {CORE("pods"), "spec.volumes[]", S_OBJ, "v1.Volume"},
    {CORE("pods"), "spec.volumes[].name", S_STR, "string"},
    {CORE("pods"), "spec.volumes[].persistentVolumeClaim", S_OBJ,
     "v1.PersistentVolumeClaimVolumeSource"},
    {CORE("pods"), "spec.volumes[].persistentVolumeClaim.claimName", S_STR, "string"},
    {CORE("pods"), "status", S_OBJ, "v1.PodStatus"},
    {CORE("pods"), "status.phase", S_STR, "v1.PodPhase"},

    {CORE("nodes"), "spec", S_OBJ, "v1.NodeSpec"},
    {CORE("nodes"), "spec.unschedulable", S_BOOL, "bool"},
    {CORE("nodes"), "status", S_OBJ, "v1.NodeStatus"},
    {CORE("nodes"), "status.conditions", S_ARR, "[]v1.NodeCondition"},
    {CORE("nodes"), "status.conditions[]", S_OBJ, "v1.NodeCondition"},
    {CORE("nodes"), "status.addresses", S_ARR, "[]v1.NodeAddress"},
    {CORE("nodes"), "status.addresses[]", S_OBJ, "v1.NodeAddress"},

    {CORE("namespaces"), "spec", S_OBJ, "v1.NamespaceSpec"},
    {CORE("namespaces"), "spec.finalizers", S_ARR, "[]v1.FinalizerName"},
    {CORE("namespaces"), "spec.finalizers[]", S_STR, "v1.FinalizerName"},
    {CORE("namespaces"), "status", S_OBJ, "v1.NamespaceStatus"},
    {CORE("namespaces"), "status.phase", S_STR, "v1.NamespacePhase"},

    {CORE("secrets"), "data", S_OBJ, "map[string][]uint8"},
    {CORE("secrets"), "data{}", S_STR, "[]uint8"},
    {CORE("secrets"), "stringData", S_OBJ, "map[string]string"},
    {CORE("secrets"), "stringData{}", S_STR, "string"},
    {CORE("secrets"), "type", S_STR, "v1.SecretType"},
    {CORE("secrets"), "immutable", S_BOOL, "bool"},
    {CORE("configmaps"), "data", S_OBJ, "map[string]string"},
    {CORE("configmaps"), "data{}", S_STR, "string"},
    {CORE("configmaps"), "binaryData", S_OBJ, "map[string][]uint8"},
    {CORE("configmaps"), "binaryData{}", S_STR, "[]uint8"},
    {CORE("configmaps"), "immutable", S_BOOL, "bool"},
    {CORE("serviceaccounts"), "secrets", S_ARR, "[]v1.ObjectReference"},
    {CORE("serviceaccounts"), "secrets[]", S_OBJ, "v1.ObjectReference"},
    {CORE("serviceaccounts"), "imagePullSecrets", S_ARR, "[]v1.LocalObjectReference"},
    {CORE("serviceaccounts"), "imagePullSecrets[]", S_OBJ, "v1.LocalObjectReference"},
    {CORE("serviceaccounts"), "automountServiceAccountToken", S_BOOL, "bool"},

    {CORE("events"), "involvedObject", S_OBJ, "v1.ObjectReference"},
    {CORE("events"), "involvedObject.kind", S_STR, "string"},
    {CORE("events"), "involvedObject.name", S_STR, "string"},
    {CORE("events"), "involvedObject.namespace", S_STR, "string"},
    {CORE("events"), "involvedObject.uid", S_STR, "types.UID"},
    {CORE("events"), "reason", S_STR, "string"},
    {CORE("events"), "message", S_STR, "string"},
    {CORE("events"), "type", S_STR, "string"},
    {CORE("events"), "count", S_INT, "int32"},
    {CORE("events"), "source", S_OBJ, "v1.EventSource"},
    {"events.k8s.io", "events", "regarding", S_OBJ, "v1.ObjectReference"},
    {"events.k8s.io", "events", "note", S_STR, "string"},
    {"events.k8s.io", "events", "reason", S_STR, "string"},
    {"events.k8s.io", "events", "type", S_STR, "string"},
    {"events.k8s.io", "events", "deprecatedCount", S_INT, "int32"},
    {"events.k8s.io", "events", "series", S_OBJ, "v1.EventSeries"},

    {STORAGE("storageclasses"), "provisioner", S_STR, "string"},
    {STORAGE("storageclasses"), "parameters", S_OBJ, "map[string]string"},
    {STORAGE("storageclasses"), "parameters{}", S_STR, "string"},
    {STORAGE("storageclasses"), "reclaimPolicy", S_STR, "v1.PersistentVolumeReclaimPolicy"},
    {STORAGE("storageclasses"), "volumeBindingMode", S_STR, "v1.VolumeBindingMode"},
    {STORAGE("storageclasses"), "allowVolumeExpansion", S_BOOL, "bool"},
    {STORAGE("storageclasses"), "mountOptions", S_ARR, "[]string"},
    {STORAGE("storageclasses"), "mountOptions[]", S_STR, "string"},
    {STORAGE("storageclasses"), "allowedTopologies", S_ARR, "[]v1.TopologySelectorTerm"},
    {STORAGE("volumeattachments"), "spec", S_OBJ, "v1.VolumeAttachmentSpec"},
    {STORAGE("volumeattachments"), "spec.attacher", S_STR, "string"},
    {STORAGE("volumeattachments"), "spec.nodeName", S_STR, "string"},
    {STORAGE("volumeattachments"), "spec.source", S_OBJ, "v1.VolumeAttachmentSource"},
    {STORAGE("volumeattachments"), "spec.source.persistentVolumeName", S_STR, "string"},
    {STORAGE("volumeattachments"), "status", S_OBJ, "v1.VolumeAttachmentStatus"},
    {STORAGE("volumeattachments"), "status.attached", S_BOOL, "bool"},
    {STORAGE("volumeattachments"), "status.attachmentMetadata", S_OBJ, "map[string]string"},
    {STORAGE("volumeattachments"), "status.attachmentMetadata{}", S_STR, "string"},
    {STORAGE("volumeattachments"), "status.attachError", S_OBJ, "v1.VolumeError"},
    {STORAGE("volumeattachments"), "status.attachError.message", S_STR, "string"},
    {STORAGE("volumeattachments"), "status.detachError", S_OBJ, "v1.VolumeError"},
    {STORAGE("volumeattachments"), "status.detachError.message", S_STR, "string"},
    {STORAGE("csinodes"), "spec", S_OBJ, "v1.CSINodeSpec"},
    {STORAGE("csinodes"), "spec.drivers", S_ARR, "[]v1.CSINodeDriver"},
    {STORAGE("csinodes"), "spec.drivers[]", S_OBJ, "v1.CSINodeDriver"},
    {STORAGE("csinodes"), "spec.drivers[].name", S_STR, "string"},
    {STORAGE("csinodes"), "spec.drivers[].nodeID", S_STR, "string"},
    {STORAGE("csinodes"), "spec.drivers[].topologyKeys", S_ARR, "[]string"},
    {STORAGE("csinodes"), "spec.drivers[].topologyKeys[]", S_STR, "string"},
    {STORAGE("csinodes"), "spec.drivers[].allocatable", S_OBJ, "v1.VolumeNodeResources"},
    {STORAGE("csinodes"), "spec.drivers[].allocatable.count", S_INT, "int32"},
    {STORAGE("csidrivers"), "spec", S_OBJ, "v1.CSIDriverSpec"},
    {STORAGE("csidrivers"), "spec.attachRequired", S_BOOL, "bool"},
    {STORAGE("csidrivers"), "spec.podInfoOnMount", S_BOOL, "bool"},
    {STORAGE("csidrivers"), "spec.storageCapacity", S_BOOL, "bool"},
    {STORAGE("csidrivers"), "spec.requiresRepublish", S_BOOL, "bool"},
    {STORAGE("csidrivers"), "spec.volumeLifecycleModes", S_ARR, "[]v1.VolumeLifecycleMode"},
    {STORAGE("csidrivers"), "spec.volumeLifecycleModes[]", S_STR, "v1.VolumeLifecycleMode"},
    {STORAGE("csidrivers"), "spec.tokenRequests", S_ARR, "[]v1.TokenRequest"},
    {STORAGE("csidrivers"), "spec.tokenRequests[]", S_OBJ, "v1.TokenRequest"},
    {STORAGE("csidrivers"), "spec.fsGroupPolicy", S_STR, "v1.FSGroupPolicy"},
    {STORAGE("csistoragecapacities"), "storageClassName", S_STR, "string"},
    {STORAGE("csistoragecapacities"), "nodeTopology", S_OBJ, "v1.LabelSelector"},
    {STORAGE("csistoragecapacities"), "capacity", S_QTY, "resource.Quantity"},
    {STORAGE("csistoragecapacities"), "maximumVolumeSize", S_QTY, "resource.Quantity"},
    {STORAGE("volumeattributesclasses"), "driverName", S_STR, "string"},
    {STORAGE("volumeattributesclasses"), "parameters", S_OBJ, "map[string]string"},
    {STORAGE("volumeattributesclasses"), "parameters{}", S_STR, "string"},

    {"coordination.k8s.io", "leases", "spec", S_OBJ, "v1.LeaseSpec"},
    {"coordination.k8s.io", "leases", "spec.holderIdentity", S_STR, "string"},
    {"coordination.k8s.io", "leases", "spec.leaseDurationSeconds", S_INT, "int32"},
    {"coordination.k8s.io", "leases", "spec.leaseTransitions", S_INT, "int32"},
    {"coordination.k8s.io", "leases", "spec.acquireTime", S_STR, "v1.MicroTime"},
    {"coordination.k8s.io", "leases", "spec.renewTime", S_STR, "v1.MicroTime"},

    {RBAC_ALL, "rules", S_ARR, "[]v1.PolicyRule"},
    {RBAC_ALL, "rules[]", S_OBJ, "v1.PolicyRule"},
    {RBAC_ALL, "rules[].verbs", S_ARR, "[]string"},
    {RBAC_ALL, "rules[].verbs[]", S_STR, "string"},
    {RBAC_ALL, "rules[].apiGroups", S_ARR, "[]string"},
    {RBAC_ALL, "rules[].apiGroups[]", S_STR, "string"},
    {RBAC_ALL, "rules[].resources", S_ARR, "[]string"},
    {RBAC_ALL, "rules[].resources[]", S_STR, "string"},
    {RBAC_ALL, "rules[].resourceNames", S_ARR, "[]string"},
    {RBAC_ALL, "rules[].resourceNames[]", S_STR, "string"},
    {RBAC_ALL, "rules[].nonResourceURLs", S_ARR, "[]string"},
    {RBAC_ALL, "rules[].nonResourceURLs[]", S_STR, "string"},
    {RBAC_ALL, "aggregationRule", S_OBJ, "v1.AggregationRule"},
    {RBAC_ALL, "subjects", S_ARR, "[]v1.Subject"},
    {RBAC_ALL, "subjects[]", S_OBJ, "v1.Subject"},
    {RBAC_ALL, "subjects[].kind", S_STR, "string"},
    {RBAC_ALL, "subjects[].apiGroup", S_STR, "string"},
    {RBAC_ALL, "subjects[].name", S_STR, "string"},
    {RBAC_ALL, "subjects[].namespace", S_STR, "string"},
    {RBAC_ALL, "roleRef", S_OBJ, "v1.RoleRef"},
    {RBAC_ALL, "roleRef.apiGroup", S_STR, "string"},
    {RBAC_ALL, "roleRef.kind", S_STR, "string"},
    {RBAC_ALL, "roleRef.name", S_STR, "string"},

    {APPS, "spec", S_OBJ, "v1.DeploymentSpec"},
    {APPS, "spec.replicas", S_INT, "int32"},
    {APPS, "spec.selector", S_OBJ, "v1.LabelSelector"},
    {APPS, "spec.template", S_OBJ, "v1.PodTemplateSpec"},
    {APPS, "spec.template.metadata", S_OBJ, "v1.ObjectMeta"},
    {APPS, "spec.template.spec", S_OBJ, "v1.PodSpec"},
    {APPS, "spec.template.spec.containers", S_ARR, "[]v1.Container"},
    {APPS, "spec.template.spec.containers[]", S_OBJ, "v1.Container"},
    {APPS, "spec.template.spec.containers[].name", S_STR, "string"},
    {APPS, "spec.template.spec.containers[].image", S_STR, "string"},
    {APPS, "status", S_OBJ, "v1.DeploymentStatus"},

    {"snapshot.storage.k8s.io", NULL, "spec", S_OBJ, "object"},
    {"snapshot.storage.k8s.io", NULL, "status", S_OBJ, "object"},
};

static const char *json_name(const json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_boolean:
        return "bool";
    case json_type_int:
    case json_type_double:
        return "number";
    case json_type_string:
        return "string";
    case json_type_array:
        return "array";
    case json_type_object:
        return "object";
    default:
        return "null";
    }
}

static bool type_ok(const json_object *v, int want)
{
    switch (want) {
    case S_OBJ:
        return json_object_is_type(v, json_type_object);
    case S_ARR:
        return json_object_is_type(v, json_type_array);
    case S_STR:
        return json_object_is_type(v, json_type_string);
    case S_BOOL:
        return json_object_is_type(v, json_type_boolean);
    case S_INT: {
        if (json_object_is_type(v, json_type_int))
            return true;
        double d = json_object_is_type(v, json_type_double) ? json_object_get_double(v) : 0.5;
        return d > -9.2e18 && d < 9.2e18 && d == (double)(long long)d;
    }
    case S_QTY:
    default:
        return json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_int) ||
               json_object_is_type(v, json_type_double);
    }
}

/* Walks `path` below `v` (`where` is the path so far, for the message). */
static int walk(const json_object *v, const char *path, const shape_row *r, const kl_type *t,
                const char *where)
{
    if (!v) /* absent or JSON null: the zero value */
        return 0;
    if (!*path) {
        if (type_ok(v, r->type))
            return 0;
        return util_err_set(-EINVAL,
                            "json: cannot unmarshal %s into Go struct field %s.%s of type %s",
                            json_name(v), t->kind, where, r->go);
    }
    if (!json_object_is_type(v, json_type_object))
        return 0; /* the parent's own row reports it */
    size_t len = strcspn(path, ".");
    const char *next = path[len] == '.' ? path + len + 1 : path + len;
    char seg[96];
    if (len >= sizeof(seg))
        return 0;
    memcpy(seg, path, len);
    seg[len] = '\0';
    bool each_item = len > 2 && strcmp(seg + len - 2, "[]") == 0;
    bool each_value = len > 2 && strcmp(seg + len - 2, "{}") == 0;
    if (each_item || each_value)
        seg[len - 2] = '\0';
    json_object *child = kobj_get(v, seg);
    char *here = *where ? util_asprintf("%s.%s", where, seg) : util_strdup(seg);
    int rc = 0;
    if (each_item && json_object_is_type(child, json_type_array)) {
        for (size_t i = 0; rc == 0 && i < json_object_array_length(child); i++)
            rc = walk(json_object_array_get_idx(child, i), next, r, t, here);
    } else if (each_value && json_object_is_type(child, json_type_object)) {
        json_object_object_foreach(child, key, val)
        {
            (void)key;
            if (rc == 0)
                rc = walk(val, next, r, t, here);
        }
    } else if (!each_item && !each_value) {
        rc = walk(child, next, r, t, here);
    }
    free(here);
    return rc;
}

int kl_check_shape(const kl_type *t, const json_object *obj)
{
    if (!json_object_is_type(obj, json_type_object))
        return util_err_set(-EINVAL, "json: cannot unmarshal %s into Go value of type v1.%s",
                            json_name(obj), t->kind);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const shape_row *r = &rows[i];
        if ((r->group && strcmp(r->group, t->group) != 0) ||
            (r->resource && strcmp(r->resource, t->resource) != 0))
            continue;
        int rc = walk(obj, r->path, r, t, "");
        if (rc < 0)
            return rc;
    }
    return 0;
}
