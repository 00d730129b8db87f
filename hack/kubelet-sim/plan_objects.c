/*
 * The object rules of kubelet-sim, as pure functions: what a pod's state
 * asks of its kubelet, the pods/status patch that makes it Running, the
 * Node the kubelet registers and the nodes/status patch it posts, the
 * node Lease, and the plugin registration's version rules.
 *
 * Patches are built as json-c trees and printed, never pasted together
 * from strings: names and values come from the API.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kubelet-sim/ksim.h"

/* ---- time ---------------------------------------------------------------------------- */

void ksim_format_time(time_t t, char out[32])
{
    util_time_rfc3339(t, out, 32);
}

void ksim_format_micro_time(const struct timespec *t, char out[40])
{
    struct tm tm;
    gmtime_r(&t->tv_sec, &tm);
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 40, "%.20s.%06dZ", base, (int)((t->tv_nsec / 1000) % 1000000));
}

static json_object *jstr(const char *s)
{
    return json_object_new_string(s ? s : "");
}

static char *to_text(json_object *o)
{
    char *t = kobj_to_text(o, NULL);
    json_object_put(o);
    return t;
}

/* ---- string lists -------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void ksim_strv_sort_unique(char **v, size_t *n)
{
    if (*n < 2)
        return;
    qsort(v, *n, sizeof(char *), cmp_str);
    size_t k = 1;
    for (size_t i = 1; i < *n; i++) {
        if (strcmp(v[i], v[k - 1]) == 0)
            free(v[i]);
        else
            v[k++] = v[i];
    }
    *n = k;
}

void ksim_strv_free(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

/* ---- pods ---------------------------------------------------------------------------- */

ksim_pod_action ksim_pod_action_of(const json_object *pod)
{
    if (kobj_deleting(pod))
        return KSIM_POD_FINISH;
    const char *phase = kobj_path_str(pod, "status.phase");
    if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
        return KSIM_POD_TEARDOWN;
    return KSIM_POD_SETUP;
}

/* The condition of `type` in status.conditions, or NULL. */
static json_object *condition(const json_object *obj, const char *type)
{
    json_object *conds = kobj_path(obj, "status.conditions");
    for (size_t i = 0; i < kobj_len(conds); i++) {
        const char *t = kobj_str(kobj_at(conds, i), "type");
        if (t && strcmp(t, type) == 0)
            return kobj_at(conds, i);
    }
    return NULL;
}

static bool condition_is(const json_object *obj, const char *type, const char *status)
{
    const char *s = kobj_str(condition(obj, type), "status");
    return s && strcmp(s, status) == 0;
}

char *ksim_pod_running_patch(const json_object *pod, time_t now)
{
    static const char *const types[] = {"PodScheduled", "Initialized", "ContainersReady", "Ready"};
    const char *phase = kobj_path_str(pod, "status.phase");
    bool running = phase && strcmp(phase, "Running") == 0;
    bool all = true;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        all = all && condition_is(pod, types[i], "True");
    if (running && all)
        return NULL;
    char ts[32];
    ksim_format_time(now, ts);
    json_object *conds = json_object_new_array();
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        /* A condition already True keeps its transition time: it is left out. */
        if (condition_is(pod, types[i], "True"))
            continue;
        json_object *c = json_object_new_object();
        json_object_object_add(c, "type", jstr(types[i]));
        json_object_object_add(c, "status", jstr("True"));
        json_object_object_add(c, "lastTransitionTime", jstr(ts));
        json_object_array_add(conds, c);
    }
    json_object *st = json_object_new_object();
    json_object_object_add(st, "phase", jstr("Running"));
    json_object_object_add(st, "conditions", conds);
    const char *started = kobj_path_str(pod, "status.startTime");
    json_object_object_add(st, "startTime", jstr(started ? started : ts));
    /* Containers "run" from now on: what kubectl's READY column reads. */
    json_object *cs = json_object_new_array();
    json_object *containers = kobj_path(pod, "spec.containers");
    for (size_t i = 0; i < kobj_len(containers); i++) {
        json_object *c = kobj_at(containers, i);
        json_object *s = json_object_new_object();
        json_object_object_add(s, "name", jstr(kobj_str(c, "name")));
        json_object_object_add(s, "image", jstr(kobj_str(c, "image")));
        json_object_object_add(s, "imageID", jstr(""));
        json_object_object_add(s, "ready", json_object_new_boolean(1));
        json_object_object_add(s, "started", json_object_new_boolean(1));
        json_object_object_add(s, "restartCount", json_object_new_int(0));
        json_object *run = json_object_new_object();
        json_object_object_add(run, "startedAt", jstr(ts));
        json_object *state = json_object_new_object();
        json_object_object_add(state, "running", run);
        json_object_object_add(s, "state", state);
        json_object_array_add(cs, s);
    }
    json_object_object_add(st, "containerStatuses", cs);
    json_object *meta = json_object_new_object();
    json_object_object_add(meta, "uid", jstr(kobj_uid(pod)));
    json_object *p = json_object_new_object();
    json_object_object_add(p, "metadata", meta);
    json_object_object_add(p, "status", st);
    return to_text(p);
}

/* ---- node expansion ------------------------------------------------------------------ */

static bool str_is(const char *a, const char *b)
{
    return a && strcmp(a, b) == 0;
}

/* The storage quantity of the map at `path` in bytes (0 when missing or
 * unreadable, as Go's zero quantity), its text in *text. */
static int64_t storage_bytes(const json_object *o, const char *path, const char **text)
{
    const char *s = kobj_str(kobj_path(o, path), "storage");
    int64_t v = 0;
    if (text)
        *text = s;
    if (!s || util_quantity_parse(s, &v) < 0)
        return 0;
    return v;
}

static const char *resize_status(const json_object *pvc)
{
    return kobj_str(kobj_path(pvc, "status.allocatedResourceStatuses"), "storage");
}

void ksim_resize_plan(const json_object *pvc, const json_object *pv, bool readonly,
                      ksim_resize *out)
{
    memset(out, 0, sizeof(*out));
    const char *status = resize_status(pvc);
    out->recover = (status && *status) || kobj_path(pvc, "status.allocatedResources") != NULL;
    int64_t want = storage_bytes(pv, "spec.capacity", &out->new_size);
    int64_t have = storage_bytes(pvc, "status.capacity", NULL);
    /* As the kubelet: the node grows what the controller made bigger than
     * the claim reports, and never a read-only volume. */
    if (readonly || want <= have)
        return;
    if (out->recover) {
        if (str_is(status, KSIM_STATUS_NODE_PENDING))
            out->step = KSIM_RESIZE_MARK;
        else if (str_is(status, KSIM_STATUS_NODE_IN_PROGRESS))
            out->step = KSIM_RESIZE_EXPAND;
    } else if (condition_is(pvc, KSIM_COND_FS_RESIZE_PENDING, "True")) {
        /* Without the statuses, the resizer's condition says its part is
         * done (the PV is written before it): never race its writes. */
        out->step = KSIM_RESIZE_EXPAND;
    }
    if (out->step != KSIM_RESIZE_NONE)
        out->new_bytes = want;
}

/* {metadata: {resourceVersion} (when guarded), status: {}}. */
static json_object *claim_status_patch(const json_object *pvc, bool guard, json_object **status)
{
    json_object *p = json_object_new_object();
    const char *rv = kobj_rv(pvc);
    if (guard && rv) {
        json_object *meta = json_object_new_object();
        json_object_object_add(meta, "resourceVersion", jstr(rv));
        json_object_object_add(p, "metadata", meta);
    }
    *status = json_object_new_object();
    json_object_object_add(p, "status", *status);
    return p;
}

static json_object *storage_map(json_object *v)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "storage", v);
    return m;
}

char *ksim_resize_in_progress_patch(const json_object *pvc)
{
    json_object *st = NULL;
    json_object *p = claim_status_patch(pvc, true, &st);
    json_object_object_add(st, "allocatedResourceStatuses",
                           storage_map(jstr(KSIM_STATUS_NODE_IN_PROGRESS)));
    return to_text(p);
}

static bool resize_condition(const char *t)
{
    return str_is(t, "Resizing") || str_is(t, KSIM_COND_FS_RESIZE_PENDING) ||
           str_is(t, "ControllerResizeError") || str_is(t, KSIM_COND_NODE_RESIZE_ERROR);
}

char *ksim_resize_finished_patch(const json_object *pvc, const char *size)
{
    json_object *st = NULL;
    json_object *p = claim_status_patch(pvc, true, &st);
    json_object_object_add(st, "capacity", storage_map(jstr(size)));
    /* Every resize condition goes; the others stay. A merge patch replaces
     * the list whole, so it is written only when something went. */
    json_object *conds = kobj_path(pvc, "status.conditions");
    json_object *kept = json_object_new_array();
    size_t n = kobj_len(conds);
    for (size_t i = 0; i < n; i++) {
        json_object *c = kobj_at(conds, i);
        if (!resize_condition(kobj_str(c, "type")))
            json_object_array_add(kept, json_object_get(c));
    }
    if (json_object_array_length(kept) == n) {
        json_object_put(kept);
    } else if (json_object_array_length(kept) == 0) {
        json_object_put(kept);
        json_object_object_add(st, "conditions", NULL);
    } else {
        json_object_object_add(st, "conditions", kept);
    }
    json_object *statuses = kobj_path(pvc, "status.allocatedResourceStatuses");
    if (kobj_get(statuses, "storage")) {
        if (kobj_typed(statuses, json_type_object) &&
            json_object_object_length((json_object *)statuses) == 1)
            json_object_object_add(st, "allocatedResourceStatuses", NULL);
        else
            json_object_object_add(st, "allocatedResourceStatuses", storage_map(NULL));
    }
    return to_text(p);
}

char *ksim_resize_failed_patch(const json_object *pvc, int code, const char *err, time_t now)
{
    switch (code) {
    case CSI_OK: /* no answer from the driver */
    case CSI_CANCELLED:
    case CSI_DEADLINE_EXCEEDED:
    case CSI_UNAVAILABLE:
    case CSI_RESOURCE_EXHAUSTED:
    case CSI_ABORTED:
        return NULL; /* not final: the operation may go on in the driver */
    default:
        break;
    }
    bool infeasible =
        code == CSI_INVALID_ARGUMENT || code == CSI_OUT_OF_RANGE || code == CSI_NOT_FOUND;
    json_object *st = NULL;
    json_object *p = claim_status_patch(pvc, false, &st);
    char ts[32];
    ksim_format_time(now, ts);
    char *msg = util_asprintf("failed to expand pvc with %s", err ? err : "");
    /* The error condition replaces one of its type; everything else stays
     * (keepOldResizeConditions). */
    json_object *conds = kobj_path(pvc, "status.conditions");
    json_object *out = json_object_new_array();
    for (size_t i = 0; i < kobj_len(conds); i++) {
        json_object *c = kobj_at(conds, i);
        if (!str_is(kobj_str(c, "type"), KSIM_COND_NODE_RESIZE_ERROR))
            json_object_array_add(out, json_object_get(c));
    }
    json_object *c = json_object_new_object();
    json_object_object_add(c, "type", jstr(KSIM_COND_NODE_RESIZE_ERROR));
    json_object_object_add(c, "status", jstr("True"));
    json_object_object_add(c, "lastTransitionTime", jstr(ts));
    json_object_object_add(c, "message", jstr(msg));
    json_object_array_add(out, c);
    free(msg);
    json_object_object_add(st, "conditions", out);
    if (infeasible)
        json_object_object_add(st, "allocatedResourceStatuses",
                               storage_map(jstr(KSIM_STATUS_NODE_INFEASIBLE)));
    return to_text(p);
}

char *ksim_pod_delete_options(const char *uid)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "apiVersion", jstr("v1"));
    json_object_object_add(o, "kind", jstr("DeleteOptions"));
    json_object_object_add(o, "gracePeriodSeconds", json_object_new_int(0));
    json_object *pre = json_object_new_object();
    json_object_object_add(pre, "uid", jstr(uid));
    json_object_object_add(o, "preconditions", pre);
    return to_text(o);
}

/* ---- the Node
 * ------------------------------------------------------------------------------------ */

json_object *ksim_node_object(const char *name)
{
    json_object *n = json_object_new_object();
    json_object_object_add(n, "apiVersion", jstr("v1"));
    json_object_object_add(n, "kind", jstr("Node"));
    json_object_object_add(n, "metadata", json_object_new_object());
    kobj_set_str(kobj_meta(n), "name", name);
    kobj_set_label(n, "kubernetes.io/hostname", name);
    kobj_set_annotation(n, KSIM_CMAD_ANNOTATION, "true");
    return n;
}

char *ksim_node_cmad_patch(const json_object *node)
{
    const char *v = kobj_annotation(node, KSIM_CMAD_ANNOTATION);
    if (v && strcmp(v, "true") == 0)
        return NULL;
    json_object *ann = json_object_new_object();
    json_object_object_add(ann, KSIM_CMAD_ANNOTATION, jstr("true"));
    json_object *meta = json_object_new_object();
    json_object_object_add(meta, "annotations", ann);
    json_object *p = json_object_new_object();
    json_object_object_add(p, "metadata", meta);
    return to_text(p);
}

static void add_quantity(json_object *m, const char *name, int64_t v, bool binary)
{
    char buf[UTIL_QUANTITY_MAX];
    if (binary)
        util_quantity_format(v, buf, sizeof(buf));
    else
        snprintf(buf, sizeof(buf), "%lld", (long long)v);
    json_object_object_add(m, name, jstr(buf));
}

static json_object *resources(const ksim_node_info *ni)
{
    json_object *m = json_object_new_object();
    add_quantity(m, "cpu", ni->cpus, false);
    add_quantity(m, "memory", ni->memory_bytes, true);
    add_quantity(m, "pods", ni->max_pods, false);
    if (ni->ephemeral_bytes > 0)
        add_quantity(m, "ephemeral-storage", ni->ephemeral_bytes, true);
    return m;
}

char *ksim_node_status_patch(const ksim_node_info *ni, const json_object *node, char *const *in_use,
                             size_t n_in_use, time_t now)
{
    static const struct {
        const char *type, *status, *reason, *message;
    } conds[] = {
        {"MemoryPressure", "False", "KubeletHasSufficientMemory",
         "kubelet has sufficient memory available"},
        {"DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
        {"PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
        {"Ready", "True", "KubeletReady", "kubelet is posting ready status"},
    };
    char ts[32];
    ksim_format_time(now, ts);
    json_object *list = json_object_new_array();
    for (size_t i = 0; i < sizeof(conds) / sizeof(conds[0]); i++) {
        json_object *old = condition(node, conds[i].type);
        const char *since = kobj_str(old, "lastTransitionTime");
        if (!condition_is(node, conds[i].type, conds[i].status) || !since)
            since = ts;
        json_object *c = json_object_new_object();
        json_object_object_add(c, "type", jstr(conds[i].type));
        json_object_object_add(c, "status", jstr(conds[i].status));
        json_object_object_add(c, "reason", jstr(conds[i].reason));
        json_object_object_add(c, "message", jstr(conds[i].message));
        json_object_object_add(c, "lastHeartbeatTime", jstr(ts));
        json_object_object_add(c, "lastTransitionTime", jstr(since));
        json_object_array_add(list, c);
    }
    json_object *st = json_object_new_object();
    json_object_object_add(st, "conditions", list);
    json_object_object_add(st, "capacity", resources(ni));
    json_object_object_add(st, "allocatable", resources(ni));
    json_object *addr = json_object_new_object();
    json_object_object_add(addr, "type", jstr("Hostname"));
    json_object_object_add(addr, "address", jstr(ni->name));
    json_object *addrs = json_object_new_array();
    json_object_array_add(addrs, addr);
    json_object_object_add(st, "addresses", addrs);
    json_object *info = json_object_new_object();
    static const char *const empty[] = {"machineID",       "systemUUID", "bootID",
                                        "kernelVersion",   "osImage",    "containerRuntimeVersion",
                                        "kubeProxyVersion"};
    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++)
        json_object_object_add(info, empty[i], jstr(""));
    json_object_object_add(info, "kubeletVersion", jstr(KSIM_KUBELET_VERSION));
    json_object_object_add(info, "operatingSystem", jstr(ni->os));
    json_object_object_add(info, "architecture", jstr(ni->arch));
    json_object_object_add(st, "nodeInfo", info);
    json_object *vols = NULL;
    if (n_in_use) {
        vols = json_object_new_array();
        for (size_t i = 0; i < n_in_use; i++)
            json_object_array_add(vols, jstr(in_use[i]));
    }
    /* null deletes the list: an empty one is what the kubelet leaves out. */
    json_object_object_add(st, "volumesInUse", vols);
    json_object *p = json_object_new_object();
    json_object_object_add(p, "status", st);
    return to_text(p);
}

/* ---- the Lease
 * -------------------------------------------------------------------------------------- */

static json_object *owner_refs(const char *node, const char *uid)
{
    json_object *ref = json_object_new_object();
    json_object_object_add(ref, "apiVersion", jstr("v1"));
    json_object_object_add(ref, "kind", jstr("Node"));
    json_object_object_add(ref, "name", jstr(node));
    json_object_object_add(ref, "uid", jstr(uid));
    json_object *refs = json_object_new_array();
    json_object_array_add(refs, ref);
    return refs;
}

static json_object *lease_spec(const char *node, int duration_s, const struct timespec *now)
{
    char ts[40];
    ksim_format_micro_time(now, ts);
    json_object *spec = json_object_new_object();
    json_object_object_add(spec, "holderIdentity", jstr(node));
    json_object_object_add(spec, "leaseDurationSeconds", json_object_new_int(duration_s));
    json_object_object_add(spec, "renewTime", jstr(ts));
    return spec;
}

json_object *ksim_lease_object(const char *node, const char *node_uid, int duration_s,
                               const struct timespec *now)
{
    json_object *meta = json_object_new_object();
    json_object_object_add(meta, "name", jstr(node));
    json_object_object_add(meta, "namespace", jstr(KSIM_LEASE_NAMESPACE));
    if (node_uid && *node_uid)
        json_object_object_add(meta, "ownerReferences", owner_refs(node, node_uid));
    json_object *l = json_object_new_object();
    json_object_object_add(l, "apiVersion", jstr("coordination.k8s.io/v1"));
    json_object_object_add(l, "kind", jstr("Lease"));
    json_object_object_add(l, "metadata", meta);
    json_object_object_add(l, "spec", lease_spec(node, duration_s, now));
    return l;
}

char *ksim_lease_renew_patch(const json_object *lease, const char *node, const char *node_uid,
                             int duration_s, const struct timespec *now)
{
    json_object *p = json_object_new_object();
    json_object_object_add(p, "spec", lease_spec(node, duration_s, now));
    if (node_uid && *node_uid && kobj_len(kobj_path(lease, "metadata.ownerReferences")) == 0) {
        json_object *meta = json_object_new_object();
        json_object_object_add(meta, "ownerReferences", owner_refs(node, node_uid));
        json_object_object_add(p, "metadata", meta);
    }
    return to_text(p);
}

/* ---- plugin registration versions
 * ------------------------------------------------------------------------ */

int ksim_parse_version(const char *s, long out[KSIM_VERSION_PARTS])
{
    memset(out, 0, sizeof(long) * KSIM_VERSION_PARTS);
    if (!s)
        return -1;
    if (*s == 'v')
        s++;
    int n = 0;
    for (;;) {
        if (*s < '0' || *s > '9' || n == KSIM_VERSION_PARTS)
            return -1;
        char *end = NULL;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno)
            return -1;
        out[n++] = v;
        s = end;
        if (*s != '.')
            break;
        s++;
    }
    if (n < 2 || (*s && *s != '-' && *s != '+'))
        return -1;
    return 0;
}

int ksim_version_cmp(const long a[KSIM_VERSION_PARTS], const long b[KSIM_VERSION_PARTS])
{
    for (int i = 0; i < KSIM_VERSION_PARTS; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

int ksim_highest_version(char *const *versions, size_t n, long out[KSIM_VERSION_PARTS])
{
    memset(out, 0, sizeof(long) * KSIM_VERSION_PARTS);
    if (n == 0)
        return util_err_set(-EINVAL, "CSI driver reporting empty array for supported versions");
    bool found = false;
    for (size_t i = 0; i < n; i++) {
        long v[KSIM_VERSION_PARTS];
        if (ksim_parse_version(versions[i], v) < 0 || v[0] > 1)
            continue;
        if (!found || ksim_version_cmp(out, v) < 0)
            memcpy(out, v, sizeof(v));
        found = true;
    }
    if (!found)
        return util_err_set(-EINVAL,
                            "could not find a highest supported version from the %zu "
                            "version(s) reported by this driver",
                            n);
    if (out[0] != 1)
        return util_err_set(-EINVAL,
                            "highest supported version reported by driver is %ld.%ld.%ld, must "
                            "be v1.x",
                            out[0], out[1], out[2]);
    return 0;
}
