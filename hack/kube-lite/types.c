/*
 * The served resources: one row per type, as kube-apiserver 1.32 serves
 * them (scope, status subresource, short names, field selectors, the lists
 * strategic merge patch merges by key, and whether DELETE answers with the
 * deleted object).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kube-lite/kl.h"

static const char *const pod_fields[] = {"spec.nodeName",
                                         "spec.restartPolicy",
                                         "spec.schedulerName",
                                         "spec.serviceAccountName",
                                         "spec.hostNetwork",
                                         "status.phase",
                                         "status.podIP",
                                         "status.podIPs",
                                         "status.nominatedNodeName",
                                         "spec.host",
                                         NULL};
static const char *const node_fields[] = {"spec.unschedulable", NULL};
static const char *const namespace_fields[] = {"status.phase", NULL};
static const char *const secret_fields[] = {"type", NULL};
static const char *const event_fields[] = {"involvedObject.kind",
                                           "involvedObject.namespace",
                                           "involvedObject.name",
                                           "involvedObject.uid",
                                           "involvedObject.apiVersion",
                                           "involvedObject.resourceVersion",
                                           "involvedObject.fieldPath",
                                           "reason",
                                           "reportingComponent",
                                           "source",
                                           "type",
                                           NULL};

/* Every built-in type merges these metadata lists. */
#define META_KEYS                                                                                  \
    {"metadata.finalizers", NULL, false},                                                          \
    {                                                                                              \
        "metadata.ownerReferences", "uid", false                                                   \
    }

static const kl_merge_key meta_keys[] = {META_KEYS};
static const kl_merge_key pvc_keys[] = {META_KEYS, {"status.conditions", "type", false}};
static const kl_merge_key pod_keys[] = {
    META_KEYS,
    {"spec.containers", "name", false},
    {"spec.containers[].env", "name", false},
    {"spec.containers[].ports", "containerPort", false},
    {"spec.containers[].volumeMounts", "mountPath", false},
    {"spec.containers[].volumeDevices", "devicePath", false},
    {"spec.initContainers", "name", false},
    {"spec.initContainers[].env", "name", false},
    {"spec.initContainers[].ports", "containerPort", false},
    {"spec.initContainers[].volumeMounts", "mountPath", false},
    {"spec.initContainers[].volumeDevices", "devicePath", false},
    {"spec.ephemeralContainers", "name", false},
    {"spec.volumes", "name", true},
    {"spec.imagePullSecrets", "name", false},
    {"spec.hostAliases", "ip", false},
    {"spec.topologySpreadConstraints", "topologyKey", false},
    {"spec.schedulingGates", "name", false},
    {"spec.resourceClaims", "name", true},
    {"status.conditions", "type", false},
    {"status.podIPs", "ip", false},
    {"status.hostIPs", "ip", false},
};
static const kl_merge_key node_keys[] = {
    META_KEYS,
    {"spec.podCIDRs", NULL, false},
    {"status.conditions", "type", false},
    {"status.addresses", "type", false},
};
static const kl_merge_key namespace_keys[] = {META_KEYS, {"status.conditions", "type", false}};
static const kl_merge_key sa_keys[] = {META_KEYS, {"secrets", "name", false}};
static const kl_merge_key csinode_keys[] = {META_KEYS, {"spec.drivers", "name", false}};
/* apps/v1: the pod template's lists merge as a Pod's do, plus the status
 * conditions by type. */
#define TEMPLATE_KEYS                                                                              \
    {"spec.template.spec.containers", "name", false},                                              \
        {"spec.template.spec.containers[].env", "name", false},                                    \
        {"spec.template.spec.containers[].ports", "containerPort", false},                         \
        {"spec.template.spec.containers[].volumeMounts", "mountPath", false},                      \
        {"spec.template.spec.containers[].volumeDevices", "devicePath", false},                    \
        {"spec.template.spec.initContainers", "name", false},                                      \
        {"spec.template.spec.initContainers[].env", "name", false},                                \
        {"spec.template.spec.initContainers[].ports", "containerPort", false},                     \
        {"spec.template.spec.initContainers[].volumeMounts", "mountPath", false},                  \
        {"spec.template.spec.initContainers[].volumeDevices", "devicePath", false},                \
        {"spec.template.spec.volumes", "name", true},                                              \
        {"spec.template.spec.imagePullSecrets", "name", false},                                    \
        {"spec.template.spec.hostAliases", "ip", false},                                           \
        {"spec.template.spec.topologySpreadConstraints", "topologyKey", false},                    \
        {"spec.template.spec.schedulingGates", "name", false},                                     \
        {"spec.template.spec.resourceClaims", "name", true},                                       \
    {                                                                                              \
        "status.conditions", "type", false                                                         \
    }
static const kl_merge_key apps_keys[] = {META_KEYS, TEMPLATE_KEYS};

#define KEYS(k) (k), sizeof(k) / sizeof((k)[0])

/* group, version, resource, kind, list kind, singular, short names, namespaced,
 * status, return_deleted, custom, fields, merge keys, generation */
static const kl_type types[] = {
    {"",
     "v1",
     "namespaces",
     "Namespace",
     "NamespaceList",
     "namespace",
     {"ns"},
     false,
     true,
     false,
     false,
     namespace_fields,
     KEYS(namespace_keys),
     false},
    {"",
     "v1",
     "nodes",
     "Node",
     "NodeList",
     "node",
     {"no"},
     false,
     true,
     false,
     false,
     node_fields,
     KEYS(node_keys),
     false},
    {"",
     "v1",
     "persistentvolumes",
     "PersistentVolume",
     "PersistentVolumeList",
     "persistentvolume",
     {"pv"},
     false,
     true,
     true,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"",
     "v1",
     "persistentvolumeclaims",
     "PersistentVolumeClaim",
     "PersistentVolumeClaimList",
     "persistentvolumeclaim",
     {"pvc"},
     true,
     true,
     true,
     false,
     NULL,
     KEYS(pvc_keys),
     false},
    {"",
     "v1",
     "pods",
     "Pod",
     "PodList",
     "pod",
     {"po"},
     true,
     true,
     true,
     false,
     pod_fields,
     KEYS(pod_keys),
     false},
    {"",
     "v1",
     "secrets",
     "Secret",
     "SecretList",
     "secret",
     {NULL},
     true,
     false,
     false,
     false,
     secret_fields,
     KEYS(meta_keys),
     false},
    {"",
     "v1",
     "configmaps",
     "ConfigMap",
     "ConfigMapList",
     "configmap",
     {"cm"},
     true,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"",
     "v1",
     "events",
     "Event",
     "EventList",
     "event",
     {"ev"},
     true,
     false,
     false,
     false,
     event_fields,
     KEYS(meta_keys),
     false},
    {"",
     "v1",
     "serviceaccounts",
     "ServiceAccount",
     "ServiceAccountList",
     "serviceaccount",
     {"sa"},
     true,
     false,
     true,
     false,
     NULL,
     KEYS(sa_keys),
     false},
    {"storage.k8s.io",
     "v1",
     "storageclasses",
     "StorageClass",
     "StorageClassList",
     "storageclass",
     {"sc"},
     false,
     false,
     true,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"storage.k8s.io",
     "v1",
     "volumeattachments",
     "VolumeAttachment",
     "VolumeAttachmentList",
     "volumeattachment",
     {NULL},
     false,
     true,
     true,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"storage.k8s.io",
     "v1",
     "csinodes",
     "CSINode",
     "CSINodeList",
     "csinode",
     {NULL},
     false,
     false,
     true,
     false,
     NULL,
     KEYS(csinode_keys),
     false},
    {"storage.k8s.io",
     "v1",
     "csidrivers",
     "CSIDriver",
     "CSIDriverList",
     "csidriver",
     {NULL},
     false,
     false,
     true,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"storage.k8s.io",
     "v1",
     "csistoragecapacities",
     "CSIStorageCapacity",
     "CSIStorageCapacityList",
     "csistoragecapacity",
     {NULL},
     true,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"storage.k8s.io",
     "v1",
     "volumeattributesclasses",
     "VolumeAttributesClass",
     "VolumeAttributesClassList",
     "volumeattributesclass",
     {"vac"},
     false,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"coordination.k8s.io",
     "v1",
     "leases",
     "Lease",
     "LeaseList",
     "lease",
     {NULL},
     true,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"events.k8s.io",
     "v1",
     "events",
     "Event",
     "EventList",
     "event",
     {"ev"},
     true,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"snapshot.storage.k8s.io",
     "v1",
     "volumesnapshots",
     "VolumeSnapshot",
     "VolumeSnapshotList",
     "volumesnapshot",
     {"vs"},
     true,
     true,
     false,
     true,
     NULL,
     NULL,
     0,
     false},
    {"snapshot.storage.k8s.io",
     "v1",
     "volumesnapshotcontents",
     "VolumeSnapshotContent",
     "VolumeSnapshotContentList",
     "volumesnapshotcontent",
     {"vsc", "vscs"},
     false,
     true,
     false,
     true,
     NULL,
     NULL,
     0,
     false},
    {"snapshot.storage.k8s.io",
     "v1",
     "volumesnapshotclasses",
     "VolumeSnapshotClass",
     "VolumeSnapshotClassList",
     "volumesnapshotclass",
     {"vsclass", "vsclasses"},
     false,
     false,
     false,
     true,
     NULL,
     NULL,
     0,
     false},
    {"apiextensions.k8s.io",
     "v1",
     "customresourcedefinitions",
     "CustomResourceDefinition",
     "CustomResourceDefinitionList",
     "customresourcedefinition",
     {"crd", "crds"},
     false,
     true,
     true,
     false,
     NULL,
     KEYS(meta_keys),
     true},
    {"apps",
     "v1",
     "deployments",
     "Deployment",
     "DeploymentList",
     "deployment",
     {"deploy"},
     true,
     true,
     false,
     false,
     NULL,
     KEYS(apps_keys),
     true},
    {"apps",
     "v1",
     "daemonsets",
     "DaemonSet",
     "DaemonSetList",
     "daemonset",
     {"ds"},
     true,
     true,
     false,
     false,
     NULL,
     KEYS(apps_keys),
     true},
    {"apps",
     "v1",
     "statefulsets",
     "StatefulSet",
     "StatefulSetList",
     "statefulset",
     {"sts"},
     true,
     true,
     false,
     false,
     NULL,
     KEYS(apps_keys),
     true},
    {"apps",
     "v1",
     "replicasets",
     "ReplicaSet",
     "ReplicaSetList",
     "replicaset",
     {"rs"},
     true,
     true,
     false,
     false,
     NULL,
     KEYS(apps_keys),
     true},
    {"rbac.authorization.k8s.io",
     "v1",
     "roles",
     "Role",
     "RoleList",
     "role",
     {NULL},
     true,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"rbac.authorization.k8s.io",
     "v1",
     "rolebindings",
     "RoleBinding",
     "RoleBindingList",
     "rolebinding",
     {NULL},
     true,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"rbac.authorization.k8s.io",
     "v1",
     "clusterroles",
     "ClusterRole",
     "ClusterRoleList",
     "clusterrole",
     {NULL},
     false,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
    {"rbac.authorization.k8s.io",
     "v1",
     "clusterrolebindings",
     "ClusterRoleBinding",
     "ClusterRoleBindingList",
     "clusterrolebinding",
     {NULL},
     false,
     false,
     false,
     false,
     NULL,
     KEYS(meta_keys),
     false},
};

#define N_TYPES (sizeof(types) / sizeof(types[0]))

/* Derived strings, built once (pthread_once) and read-only afterwards. */
static char qualified[N_TYPES][96];
static char api_version[N_TYPES][64];
static pthread_once_t derived_once = PTHREAD_ONCE_INIT;

static void build_derived(void)
{
    for (size_t i = 0; i < N_TYPES; i++) {
        const kl_type *t = &types[i];
        if (t->group[0]) {
            snprintf(qualified[i], sizeof(qualified[i]), "%s.%s", t->resource, t->group);
            snprintf(api_version[i], sizeof(api_version[i]), "%s/%s", t->group, t->version);
        } else {
            snprintf(qualified[i], sizeof(qualified[i]), "%s", t->resource);
            snprintf(api_version[i], sizeof(api_version[i]), "%s", t->version);
        }
    }
}

const kl_type *kl_types(size_t *n)
{
    *n = N_TYPES;
    return types;
}

const kl_type *kl_type_find(const char *group, const char *version, const char *resource)
{
    for (size_t i = 0; i < N_TYPES; i++)
        if (strcmp(types[i].group, group) == 0 && strcmp(types[i].version, version) == 0 &&
            strcmp(types[i].resource, resource) == 0)
            return &types[i];
    return NULL;
}

const kl_type *kl_type_by_kind(const char *group, const char *kind)
{
    for (size_t i = 0; i < N_TYPES; i++)
        if (strcmp(types[i].group, group) == 0 && strcmp(types[i].kind, kind) == 0)
            return &types[i];
    return NULL;
}

/* True for a row of the table above; false for a type a CRD serves (crd.c). */
static bool is_builtin(const kl_type *t)
{
    uintptr_t p = (uintptr_t)t, lo = (uintptr_t)types;
    return p >= lo && p < lo + sizeof(types);
}

const char *kl_type_qualified(const kl_type *t)
{
    if (!is_builtin(t))
        return kl_crd_type_qualified(t);
    pthread_once(&derived_once, build_derived);
    return qualified[t - types];
}

const char *kl_type_api_version(const kl_type *t)
{
    if (!is_builtin(t))
        return kl_crd_type_api_version(t);
    pthread_once(&derived_once, build_derived);
    return api_version[t - types];
}
