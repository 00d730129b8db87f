/*
 * What decoding into kube-apiserver's Go structs adds to an object: encoding/json
 * writes every struct field that is not `omitempty` (and every struct-typed
 * field, where omitempty has no effect) even when the client never sent it,
 * so a Node always comes back with `spec: {}` and an empty `status.nodeInfo`,
 * a core Event with `eventTime: null`, a CSINode driver with
 * `topologyKeys: null`. kube-lite stores the JSON it was sent, so it adds
 * those members itself, for the types the sidecars read and write (k8s.io/api
 * v0.32; the same members as v0.20). Also the one default that applies on
 * every write, /status included: a Node's allocatable copied from capacity.
 */
#include <stdio.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

/* One member: `path` is dotted from the object root, "[]" steps into each
 * element of a list; `zero` is the JSON of the value added when the parent
 * exists and lacks the member. Parents come before their children. */
typedef struct zero_rule {
    const char *path;
    const char *zero;
} zero_rule;

static const zero_rule node_rules[] = {
    {"spec", "{}"},
    {"spec.taints[].key", "\"\""},
    {"spec.taints[].effect", "\"\""},
    {"status", "{}"},
    {"status.conditions[].lastHeartbeatTime", "null"},
    {"status.conditions[].lastTransitionTime", "null"},
    {"status.addresses[].type", "\"\""},
    {"status.addresses[].address", "\"\""},
    {"status.daemonEndpoints", "{}"},
    {"status.daemonEndpoints.kubeletEndpoint", "{}"},
    {"status.daemonEndpoints.kubeletEndpoint.Port", "0"},
    {"status.nodeInfo", "{}"},
    {"status.nodeInfo.machineID", "\"\""},
    {"status.nodeInfo.systemUUID", "\"\""},
    {"status.nodeInfo.bootID", "\"\""},
    {"status.nodeInfo.kernelVersion", "\"\""},
    {"status.nodeInfo.osImage", "\"\""},
    {"status.nodeInfo.containerRuntimeVersion", "\"\""},
    {"status.nodeInfo.kubeletVersion", "\"\""},
    {"status.nodeInfo.kubeProxyVersion", "\"\""},
    {"status.nodeInfo.operatingSystem", "\"\""},
    {"status.nodeInfo.architecture", "\"\""},
    {"status.images[].names", "null"},
    {"status.volumesAttached[].name", "\"\""},
    {"status.volumesAttached[].devicePath", "\"\""},
};

static const zero_rule event_rules[] = {
    {"involvedObject", "{}"},
    {"source", "{}"},
    {"firstTimestamp", "null"},
    {"lastTimestamp", "null"},
    {"eventTime", "null"},
    {"series.count", "0"},
    {"series.lastObservedTime", "null"},
    {"reportingComponent", "\"\""},
    {"reportingInstance", "\"\""},
};

static const zero_rule csinode_rules[] = {
    {"spec", "{}"},
    {"spec.drivers", "null"},
    {"spec.drivers[].name", "\"\""},
    {"spec.drivers[].nodeID", "\"\""},
    {"spec.drivers[].topologyKeys", "null"},
};

static const zero_rule pvc_rules[] = {
    {"spec", "{}"},
    {"spec.resources", "{}"},
    {"status", "{}"},
    {"status.conditions[].type", "\"\""},
    {"status.conditions[].status", "\"\""},
    {"status.conditions[].lastProbeTime", "null"},
    {"status.conditions[].lastTransitionTime", "null"},
};

static const zero_rule pv_rules[] = {
    {"spec", "{}"},
    {"spec.csi.driver", "\"\""},
    {"spec.csi.volumeHandle", "\"\""},
    {"status", "{}"},
};

static const zero_rule va_rules[] = {
    {"spec", "{}"},
    {"spec.attacher", "\"\""},
    {"spec.source", "{}"},
    {"spec.nodeName", "\"\""},
    {"status", "{}"},
    {"status.attached", "false"},
    {"status.attachError.time", "null"},
    {"status.detachError.time", "null"},
};

static const zero_rule lease_rules[] = {
    {"spec", "{}"},
};

#define RULES(r) (r), sizeof(r) / sizeof((r)[0])

static const struct {
    const char *group;
    const char *kind;
    const zero_rule *rules;
    size_t n;
} by_kind[] = {
    {"", "Node", RULES(node_rules)},
    {"", "Event", RULES(event_rules)},
    {"", "PersistentVolumeClaim", RULES(pvc_rules)},
    {"", "PersistentVolume", RULES(pv_rules)},
    {"storage.k8s.io", "CSINode", RULES(csinode_rules)},
    {"storage.k8s.io", "VolumeAttachment", RULES(va_rules)},
    {"coordination.k8s.io", "Lease", RULES(lease_rules)},
};

/* Adds the member at `path` (relative to `at`) wherever its parent exists. */
static void fill_path(json_object *at, const char *path, const char *zero)
{
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    char key[128];
    bool each = len >= 2 && path[len - 2] == '[' && path[len - 1] == ']';
    size_t klen = each ? len - 2 : len;
    if (klen >= sizeof(key) || !json_object_is_type(at, json_type_object))
        return;
    memcpy(key, path, klen);
    key[klen] = '\0';
    json_object *v = NULL;
    bool has = json_object_object_get_ex(at, key, &v);
    if (!dot) {
        if (!has)
            json_object_object_add(at, key, json_tokener_parse(zero));
        return;
    }
    if (!has)
        return;
    if (!each) {
        fill_path(v, dot + 1, zero);
        return;
    }
    for (size_t i = 0; json_object_is_type(v, json_type_array) && i < kobj_len(v); i++)
        fill_path(kobj_at(v, i), dot + 1, zero);
}

void kl_go_fill(const kl_type *t, json_object *obj)
{
    if (t->custom)
        return;
    for (size_t i = 0; i < sizeof(by_kind) / sizeof(by_kind[0]); i++) {
        if (strcmp(by_kind[i].group, t->group) != 0 || strcmp(by_kind[i].kind, t->kind) != 0)
            continue;
        for (size_t j = 0; j < by_kind[i].n; j++)
            fill_path(obj, by_kind[i].rules[j].path, by_kind[i].rules[j].zero);
    }
    /* SetDefaults_NodeStatus: allocatable is capacity until the kubelet says. */
    json_object *st = kobj_obj(obj, "status");
    if (!t->group[0] && strcmp(t->kind, "Node") == 0 && kobj_obj(st, "capacity") &&
        !json_object_object_get_ex(st, "allocatable", NULL)) {
        json_object *copy = NULL;
        if (json_object_deep_copy(kobj_obj(st, "capacity"), &copy, NULL) == 0)
            json_object_object_add(st, "allocatable", copy);
    }
}
