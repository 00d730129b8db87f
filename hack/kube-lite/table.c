/*
 * Server-side printing: the meta.k8s.io Table kubectl asks for with
 * `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Each served type
 * gets the columns kube-apiserver 1.32 prints for it (its internal printers,
 * the default convertor's Name / Created At for RBAC roles, and the
 * additionalPrinterColumns of the snapshot CRDs), computed from the stored
 * JSON with type-checked reads: a field of the wrong type prints as absent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

typedef struct col {
    const char *name;
    const char *type; /* string integer boolean date number */
    const char *format;
    int priority;
    const char *desc;
} col;

typedef void (*cells_fn)(const json_object *o, int64_t now, json_object *cells);

typedef struct printer {
    const char *group;
    const char *resource;
    const col *cols;
    size_t n_cols;
    cells_fn cells;
} printer;

/* ---- cell helpers ---------------------------------------------------------------- */

static void add_str(json_object *cells, const char *s)
{
    json_object_array_add(cells, json_object_new_string(s ? s : ""));
}

static void add_str_or(json_object *cells, const char *s, const char *dflt)
{
    add_str(cells, s && *s ? s : dflt);
}

static void add_int(json_object *cells, int64_t v)
{
    json_object_array_add(cells, json_object_new_int64(v));
}

static void add_bool(json_object *cells, bool v)
{
    json_object_array_add(cells, json_object_new_boolean(v));
}

static void add_take(json_object *cells, char *s)
{
    add_str(cells, s);
    free(s);
}

static int64_t int_at(const json_object *o, const char *path)
{
    const char *dot = strrchr(path, '.');
    json_object *parent = (json_object *)o;
    char head[128];
    if (dot && (size_t)(dot - path) < sizeof(head)) {
        memcpy(head, path, (size_t)(dot - path));
        head[dot - path] = '\0';
        parent = kobj_path(o, head);
    }
    int64_t v = 0;
    if (kobj_int64(parent, dot ? dot + 1 : path, &v) < 0)
        return 0;
    return v;
}

/* RFC 3339 (whole seconds or with a fraction) to Unix seconds; -1 when
 * the text is not a timestamp. */
static int64_t parse_time(const char *s)
{
    if (!s || !*s)
        return -1;
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end)
        return -1;
    if (*end == '.')
        for (end++; *end >= '0' && *end <= '9'; end++)
            ;
    int64_t off = 0;
    if (*end == '+' || *end == '-') {
        int hh = 0, mm = 0;
        if (sscanf(end + 1, "%2d:%2d", &hh, &mm) != 2)
            return -1;
        off = (int64_t)(hh * 3600 + mm * 60) * (*end == '+' ? 1 : -1);
    } else if (*end != 'Z') {
        return -1;
    }
    return (int64_t)timegm(&tm) - off;
}

/* apimachinery's HumanDuration: coarser the older it gets. */
static char *human_duration(int64_t secs)
{
    if (secs < -1)
        return util_strdup("<invalid>");
    if (secs < 0)
        return util_strdup("0s");
    if (secs < 120)
        return util_asprintf("%llds", (long long)secs);
    int64_t mins = secs / 60, hours = secs / 3600, days = hours / 24;
    if (mins < 10)
        return secs % 60 ? util_asprintf("%lldm%llds", (long long)mins, (long long)(secs % 60))
                         : util_asprintf("%lldm", (long long)mins);
    if (mins < 180)
        return util_asprintf("%lldm", (long long)mins);
    if (hours < 8)
        return mins % 60 ? util_asprintf("%lldh%lldm", (long long)hours, (long long)(mins % 60))
                         : util_asprintf("%lldh", (long long)hours);
    if (hours < 48)
        return util_asprintf("%lldh", (long long)hours);
    if (hours < (int64_t)24 * 8)
        return hours % 24 ? util_asprintf("%lldd%lldh", (long long)days, (long long)(hours % 24))
                          : util_asprintf("%lldd", (long long)days);
    if (hours < (int64_t)24 * 365 * 2)
        return util_asprintf("%lldd", (long long)days);
    int64_t years = days / 365;
    if (hours < (int64_t)24 * 365 * 8)
        return days % 365 ? util_asprintf("%lldy%lldd", (long long)years, (long long)(days % 365))
                          : util_asprintf("%lldy", (long long)years);
    return util_asprintf("%lldy", (long long)years);
}

/* The age of a timestamp, "<unknown>" without one. */
static char *since(const char *ts, int64_t now)
{
    int64_t t = parse_time(ts);
    if (t < 0)
        return util_strdup("<unknown>");
    return human_duration(now - t);
}

char *kl_table_age(const char *ts, int64_t now)
{
    return since(ts, now);
}

static void add_age(json_object *cells, const json_object *o, int64_t now)
{
    add_take(cells, since(kobj_meta_str(o, "creationTimestamp"), now));
}

/* A dynamic string for joining. */
typedef struct sjoin {
    char *p;
    size_t len;
} sjoin;

static void sj_add(sjoin *j, const char *sep, const char *s)
{
    size_t ls = strlen(s), lsep = j->len ? strlen(sep) : 0;
    char *np = realloc(j->p, j->len + lsep + ls + 1);
    if (!np)
        abort();
    j->p = np;
    memcpy(j->p + j->len, sep, lsep);
    memcpy(j->p + j->len + lsep, s, ls);
    j->len += lsep + ls;
    j->p[j->len] = '\0';
}

static char *sj_done(sjoin *j, const char *empty)
{
    if (!j->p)
        return util_strdup(empty);
    return j->p;
}

/* "RWO,ROX,RWX,RWOP" in that fixed order, duplicates dropped. */
static char *access_modes(const json_object *modes)
{
    static const char *const names[][2] = {{"ReadWriteOnce", "RWO"},
                                           {"ReadOnlyMany", "ROX"},
                                           {"ReadWriteMany", "RWX"},
                                           {"ReadWriteOncePod", "RWOP"}};
    sjoin j = {0};
    for (size_t k = 0; k < 4; k++)
        for (size_t i = 0; i < kobj_len(modes); i++) {
            const char *m = kobj_str_at(modes, i);
            if (m && strcmp(m, names[k][0]) == 0) {
                sj_add(&j, ",", names[k][1]);
                break;
            }
        }
    return sj_done(&j, "");
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "k=v,k2=v2" in key order, `empty` for none (labels.FormatLabels). */
static char *format_map(const json_object *m, const char *empty)
{
    size_t n = kobj_typed(m, json_type_object) ? (size_t)json_object_object_length(m) : 0;
    if (!n)
        return util_strdup(empty);
    char **kv = util_calloc(n, sizeof(char *));
    size_t k = 0;
    json_object_object_foreach((json_object *)m, key, val)
    {
        if (k < n && json_object_is_type(val, json_type_string))
            kv[k++] = util_asprintf("%s=%s", key, json_object_get_string(val));
    }
    qsort(kv, k, sizeof(char *), cmp_str);
    sjoin j = {0};
    for (size_t i = 0; i < k; i++) {
        sj_add(&j, ",", kv[i]);
        free(kv[i]);
    }
    free(kv);
    return sj_done(&j, empty);
}

/* metav1.LabelSelector as a selector string ("app=x,tier in (a,b)"). */
static char *format_selector(const json_object *sel)
{
    if (!kobj_typed(sel, json_type_object))
        return util_strdup("<none>");
    char *labels = format_map(kobj_obj(sel, "matchLabels"), "");
    sjoin j = {0};
    if (*labels)
        sj_add(&j, ",", labels);
    free(labels);
    json_object *exprs = kobj_arr(sel, "matchExpressions");
    for (size_t i = 0; i < kobj_len(exprs); i++) {
        json_object *e = kobj_at(exprs, i);
        const char *key = kobj_str(e, "key"), *op = kobj_str(e, "operator");
        if (!key || !op)
            continue;
        char *term = NULL;
        if (strcmp(op, "Exists") == 0) {
            term = util_strdup(key);
        } else if (strcmp(op, "DoesNotExist") == 0) {
            term = util_asprintf("!%s", key);
        } else {
            sjoin vals = {0};
            json_object *vs = kobj_arr(e, "values");
            for (size_t v = 0; v < kobj_len(vs); v++)
                if (kobj_str_at(vs, v))
                    sj_add(&vals, ",", kobj_str_at(vs, v));
            char *list = sj_done(&vals, "");
            term = util_asprintf("%s %s (%s)", key, strcmp(op, "In") == 0 ? "in" : "notin", list);
            free(list);
        }
        sj_add(&j, ",", term);
        free(term);
    }
    return sj_done(&j, "");
}

/* Names or images of a pod template's containers, comma-joined. */
static char *containers(const json_object *podspec, const char *field)
{
    json_object *cs = kobj_arr(podspec, "containers");
    sjoin j = {0};
    for (size_t i = 0; i < kobj_len(cs); i++) {
        const char *v = kobj_str(kobj_at(cs, i), field);
        sj_add(&j, ",", v ? v : "");
    }
    return sj_done(&j, "");
}

static void add_template_cells(json_object *cells, const json_object *o, bool selector)
{
    json_object *ps = kobj_path(o, "spec.template.spec");
    add_take(cells, containers(ps, "name"));
    add_take(cells, containers(ps, "image"));
    if (selector)
        add_take(cells, format_selector(kobj_path(o, "spec.selector")));
}

/* ---- column sets ----------------------------------------------------------------- */

#define NAME_COL                                                                                   \
    {                                                                                              \
        "Name", "string", "name", 0, "Name of the object, unique in its namespace."                \
    }
#define AGE_COL                                                                                    \
    {                                                                                              \
        "Age", "string", "", 0, "Time since the object was created."                               \
    }
#define COLS(c) (c), sizeof(c) / sizeof((c)[0])

static const col pvc_cols[] = {
    NAME_COL,
    {"Status", "string", "", 0, "Phase of the claim."},
    {"Volume", "string", "", 0, "The volume bound to the claim."},
    {"Capacity", "string", "", 0, "Capacity of the bound volume."},
    {"Access Modes", "string", "", 0, "Access modes of the bound volume."},
    {"StorageClass", "string", "", 0, "StorageClass of the claim."},
    {"VolumeAttributesClass", "string", "", 0, "VolumeAttributesClass in effect."},
    AGE_COL,
    {"VolumeMode", "string", "", 1, "Filesystem or Block."},
};

static const col pv_cols[] = {
    NAME_COL,
    {"Capacity", "string", "", 0, "Size of the volume."},
    {"Access Modes", "string", "", 0, "How the volume can be mounted."},
    {"Reclaim Policy", "string", "", 0, "What happens when the claim is released."},
    {"Status", "string", "", 0, "Phase of the volume."},
    {"Claim", "string", "", 0, "The claim bound to the volume."},
    {"StorageClass", "string", "", 0, "StorageClass of the volume."},
    {"VolumeAttributesClass", "string", "", 0, "VolumeAttributesClass of the volume."},
    {"Reason", "string", "", 0, "Why the volume is in its phase."},
    AGE_COL,
    {"VolumeMode", "string", "", 1, "Filesystem or Block."},
};

static const col sc_cols[] = {
    NAME_COL,
    {"Provisioner", "string", "", 0, "Driver that provisions volumes of the class."},
    {"ReclaimPolicy", "string", "", 0, "Reclaim policy of provisioned volumes."},
    {"VolumeBindingMode", "string", "", 0, "When volumes are bound and provisioned."},
    {"AllowVolumeExpansion", "string", "", 0, "Whether claims may grow."},
    AGE_COL,
};

static const col vac_cols[] = {
    NAME_COL,
    {"DriverName", "string", "", 0, "CSI driver the class belongs to."},
    AGE_COL,
};

static const col va_cols[] = {
    NAME_COL,
    {"Attacher", "string", "name", 0, "Driver that attaches the volume."},
    {"PV", "string", "", 0, "The persistent volume to attach."},
    {"Node", "string", "", 0, "The node to attach to."},
    {"Attached", "boolean", "", 0, "Whether the attach succeeded."},
    AGE_COL,
};

static const col csinode_cols[] = {
    NAME_COL,
    {"Drivers", "integer", "", 0, "Number of CSI drivers registered on the node."},
    AGE_COL,
};

static const col csidriver_cols[] = {
    NAME_COL,
    {"AttachRequired", "boolean", "", 0, "Whether volumes need an attach operation."},
    {"PodInfoOnMount", "boolean", "", 0, "Whether pod information is passed on mount."},
    {"StorageCapacity", "boolean", "", 0, "Whether capacity is considered in scheduling."},
    {"TokenRequests", "string", "", 0, "Audiences of service account tokens passed on mount."},
    {"RequiresRepublish", "boolean", "", 0, "Whether NodePublishVolume is called periodically."},
    {"Modes", "string", "", 0, "Volume lifecycle modes supported."},
    AGE_COL,
};

static const col capacity_cols[] = {
    NAME_COL,
    {"StorageClassName", "string", "", 0, "StorageClass the capacity is for."},
    {"Capacity", "string", "", 0, "Capacity reported by the driver."},
};

static const col node_cols[] = {
    NAME_COL,
    {"Status", "string", "", 0, "The status of the node."},
    {"Roles", "string", "", 0, "The roles of the node."},
    AGE_COL,
    {"Version", "string", "", 0, "Kubelet version."},
    {"Internal-IP", "string", "", 1, "Internal address."},
    {"External-IP", "string", "", 1, "External address."},
    {"OS-Image", "string", "", 1, "Operating system image."},
    {"Kernel-Version", "string", "", 1, "Kernel version."},
    {"Container-Runtime", "string", "", 1, "Container runtime version."},
};

static const col pod_cols[] = {
    NAME_COL,
    {"Ready", "string", "", 0, "Ready containers of all containers."},
    {"Status", "string", "", 0, "Aggregate status of the pod."},
    {"Restarts", "string", "", 0, "Container restarts."},
    AGE_COL,
    {"IP", "string", "", 1, "Pod IP."},
    {"Node", "string", "", 1, "Node the pod runs on."},
    {"Nominated Node", "string", "", 1, "Node nominated by preemption."},
    {"Readiness Gates", "string", "", 1, "Readiness gates met."},
};

static const col ns_cols[] = {
    NAME_COL,
    {"Status", "string", "", 0, "The status of the namespace."},
    AGE_COL,
};

static const col secret_cols[] = {
    NAME_COL,
    {"Type", "string", "", 0, "Type of the secret."},
    {"Data", "string", "", 0, "Number of data entries."},
    AGE_COL,
};

static const col sa_cols[] = {
    NAME_COL,
    {"Secrets", "string", "", 0, "Number of referenced secrets."},
    AGE_COL,
};

static const col cm_cols[] = {
    NAME_COL,
    {"Data", "string", "", 0, "Number of data entries."},
    AGE_COL,
};

static const col event_cols[] = {
    {"Last Seen", "string", "", 0, "Time since the event was last seen."},
    {"Type", "string", "", 0, "Normal or Warning."},
    {"Reason", "string", "", 0, "Short reason of the event."},
    {"Object", "string", "", 0, "The object the event is about."},
    {"Subobject", "string", "", 1, "Field path inside the object."},
    {"Source", "string", "", 1, "Component that reported the event."},
    {"Message", "string", "", 0, "Description of the event."},
    {"First Seen", "string", "", 1, "Time since the event was first seen."},
    {"Count", "string", "", 1, "How often the event occurred."},
    {"Name", "string", "name", 1, "Name of the event."},
};

static const col lease_cols[] = {
    NAME_COL,
    {"Holder", "string", "", 0, "Current holder of the lease."},
    AGE_COL,
};

static const col role_cols[] = {
    NAME_COL,
    {"Created At", "date", "", 0, "Time the object was created."},
};

static const col binding_cols[] = {
    NAME_COL,
    {"Role", "string", "", 0, "The role granted."},
    AGE_COL,
    {"Users", "string", "", 1, "Users bound."},
    {"Groups", "string", "", 1, "Groups bound."},
    {"ServiceAccounts", "string", "", 1, "Service accounts bound."},
};

static const col deploy_cols[] = {
    NAME_COL,
    {"Ready", "string", "", 0, "Ready pods of the desired number."},
    {"Up-to-date", "string", "", 0, "Pods with the current template."},
    {"Available", "string", "", 0, "Available pods."},
    AGE_COL,
    {"Containers", "string", "", 1, "Names of each container in the template."},
    {"Images", "string", "", 1, "Images referenced by each container in the template."},
    {"Selector", "string", "", 1, "Label selector of the pods."},
};

static const col ds_cols[] = {
    NAME_COL,
    {"Desired", "integer", "", 0, "Nodes that should run the pod."},
    {"Current", "integer", "", 0, "Nodes running the pod."},
    {"Ready", "integer", "", 0, "Nodes with the pod ready."},
    {"Up-to-date", "integer", "", 0, "Nodes running the current template."},
    {"Available", "integer", "", 0, "Nodes with the pod available."},
    {"Node Selector", "string", "", 0, "Node selector of the pod template."},
    AGE_COL,
    {"Containers", "string", "", 1, "Names of each container in the template."},
    {"Images", "string", "", 1, "Images referenced by each container in the template."},
    {"Selector", "string", "", 1, "Label selector of the pods."},
};

static const col sts_cols[] = {
    NAME_COL,
    {"Ready", "string", "", 0, "Ready pods of the desired number."},
    AGE_COL,
    {"Containers", "string", "", 1, "Names of each container in the template."},
    {"Images", "string", "", 1, "Images referenced by each container in the template."},
};

static const col rs_cols[] = {
    NAME_COL,
    {"Desired", "integer", "", 0, "Desired number of pods."},
    {"Current", "integer", "", 0, "Current number of pods."},
    {"Ready", "integer", "", 0, "Ready pods."},
    AGE_COL,
    {"Containers", "string", "", 1, "Names of each container in the template."},
    {"Images", "string", "", 1, "Images referenced by each container in the template."},
    {"Selector", "string", "", 1, "Label selector of the pods."},
};

/* The snapshot CRDs' additionalPrinterColumns (Age is a date column there). */
static const col vs_cols[] = {
    NAME_COL,
    {"ReadyToUse", "boolean", "", 0, "Whether the snapshot can be restored."},
    {"SourcePVC", "string", "", 0, "Claim the snapshot is taken from."},
    {"SourceSnapshotContent", "string", "", 0, "Pre-provisioned content."},
    {"RestoreSize", "string", "", 0, "Minimum size of a restored volume."},
    {"SnapshotClass", "string", "", 0, "VolumeSnapshotClass of the snapshot."},
    {"SnapshotContent", "string", "", 0, "Bound VolumeSnapshotContent."},
    {"CreationTime", "date", "", 0, "When the snapshot was cut."},
    {"Age", "date", "", 0, "Time since the object was created."},
};

static const col vsc_cols[] = {
    NAME_COL,
    {"ReadyToUse", "boolean", "", 0, "Whether the snapshot can be restored."},
    {"RestoreSize", "integer", "", 0, "Minimum size of a restored volume in bytes."},
    {"DeletionPolicy", "string", "", 0, "What happens to the snapshot on deletion."},
    {"Driver", "string", "", 0, "CSI driver of the snapshot."},
    {"VolumeSnapshotClass", "string", "", 0, "VolumeSnapshotClass of the snapshot."},
    {"VolumeSnapshot", "string", "", 0, "VolumeSnapshot bound to the content."},
    {"VolumeSnapshotNamespace", "string", "", 0, "Namespace of that VolumeSnapshot."},
    {"Age", "date", "", 0, "Time since the object was created."},
};

static const col vsclass_cols[] = {
    NAME_COL,
    {"Driver", "string", "", 0, "CSI driver of the class."},
    {"DeletionPolicy", "string", "", 0, "What happens to snapshots on deletion."},
    {"Age", "date", "", 0, "Time since the object was created."},
};

static const col default_cols[] = {NAME_COL, AGE_COL};

/* ---- cells per type ---------------------------------------------------------------- */

static const char *name_of(const json_object *o)
{
    const char *n = kobj_name(o);
    return n ? n : "";
}

static const char *class_of(const json_object *o)
{
    const char *beta = kobj_annotation(o, "volume.beta.kubernetes.io/storage-class");
    return beta ? beta : kobj_path_str(o, "spec.storageClassName");
}

static void pvc_cells(const json_object *o, int64_t now, json_object *c)
{
    const char *phase = kobj_path_str(o, "status.phase");
    const char *vol = kobj_path_str(o, "spec.volumeName");
    add_str(c, name_of(o));
    add_str(c, kobj_deleting(o) ? "Terminating" : phase);
    add_str(c, vol);
    add_str(c, vol && *vol ? kobj_path_str(o, "status.capacity.storage") : "");
    add_take(c, vol && *vol ? access_modes(kobj_path(o, "status.accessModes")) : util_strdup(""));
    add_str(c, class_of(o));
    add_str_or(c, kobj_path_str(o, "status.currentVolumeAttributesClassName"), "<unset>");
    add_age(c, o, now);
    add_str_or(c, kobj_path_str(o, "spec.volumeMode"), "<unset>");
}

static void pv_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_str(c, kobj_path_str(o, "spec.capacity.storage"));
    add_take(c, access_modes(kobj_path(o, "spec.accessModes")));
    add_str(c, kobj_path_str(o, "spec.persistentVolumeReclaimPolicy"));
    add_str(c, kobj_deleting(o) ? "Terminating" : kobj_path_str(o, "status.phase"));
    json_object *ref = kobj_path(o, "spec.claimRef");
    if (kobj_typed(ref, json_type_object))
        add_take(c, util_asprintf("%s/%s",
                                  kobj_str(ref, "namespace") ? kobj_str(ref, "namespace") : "",
                                  kobj_str(ref, "name") ? kobj_str(ref, "name") : ""));
    else
        add_str(c, "");
    add_str(c, class_of(o));
    add_str_or(c, kobj_path_str(o, "spec.volumeAttributesClassName"), "<unset>");
    add_str(c, kobj_path_str(o, "status.reason"));
    add_age(c, o, now);
    add_str_or(c, kobj_path_str(o, "spec.volumeMode"), "<unset>");
}

static bool is_default_class(const json_object *o)
{
    const char *a = kobj_annotation(o, "storageclass.kubernetes.io/is-default-class");
    const char *b = kobj_annotation(o, "storageclass.beta.kubernetes.io/is-default-class");
    return (a && strcmp(a, "true") == 0) || (b && strcmp(b, "true") == 0);
}

static void sc_cells(const json_object *o, int64_t now, json_object *c)
{
    if (is_default_class(o))
        add_take(c, util_asprintf("%s (default)", name_of(o)));
    else
        add_str(c, name_of(o));
    add_str(c, kobj_str(o, "provisioner"));
    add_str_or(c, kobj_str(o, "reclaimPolicy"), "Delete");
    add_str_or(c, kobj_str(o, "volumeBindingMode"), "Immediate");
    add_bool(c, kobj_bool(o, "allowVolumeExpansion", false));
    add_age(c, o, now);
}

static void vac_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_str(c, kobj_str(o, "driverName"));
    add_age(c, o, now);
}

static void va_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_str(c, kobj_path_str(o, "spec.attacher"));
    add_str(c, kobj_path_str(o, "spec.source.persistentVolumeName"));
    add_str(c, kobj_path_str(o, "spec.nodeName"));
    add_bool(c, kobj_bool(kobj_obj(o, "status"), "attached", false));
    add_age(c, o, now);
}

static void csinode_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_int(c, (int64_t)kobj_len(kobj_path(o, "spec.drivers")));
    add_age(c, o, now);
}

static void csidriver_cells(const json_object *o, int64_t now, json_object *c)
{
    json_object *spec = kobj_obj(o, "spec");
    add_str(c, name_of(o));
    add_bool(c, kobj_bool(spec, "attachRequired", true));
    add_bool(c, kobj_bool(spec, "podInfoOnMount", false));
    add_bool(c, kobj_bool(spec, "storageCapacity", false));
    json_object *tr = kobj_arr(spec, "tokenRequests");
    sjoin j = {0};
    for (size_t i = 0; i < kobj_len(tr); i++) {
        const char *aud = kobj_str(kobj_at(tr, i), "audience");
        sj_add(&j, ",", aud ? aud : "");
    }
    add_take(c, sj_done(&j, "<unset>"));
    add_bool(c, kobj_bool(spec, "requiresRepublish", false));
    json_object *modes = kobj_arr(spec, "volumeLifecycleModes");
    sjoin m = {0};
    for (size_t i = 0; i < kobj_len(modes); i++)
        if (kobj_str_at(modes, i))
            sj_add(&m, ",", kobj_str_at(modes, i));
    add_take(c, sj_done(&m, "<none>"));
    add_age(c, o, now);
}

static void capacity_cells(const json_object *o, int64_t now, json_object *c)
{
    (void)now;
    add_str(c, name_of(o));
    add_str(c, kobj_str(o, "storageClassName"));
    add_str_or(c, kobj_str(o, "capacity"), "<unset>");
}

static const char *node_address(const json_object *o, const char *type)
{
    json_object *as = kobj_path(o, "status.addresses");
    for (size_t i = 0; i < kobj_len(as); i++) {
        const char *t = kobj_str(kobj_at(as, i), "type");
        if (t && strcmp(t, type) == 0)
            return kobj_str(kobj_at(as, i), "address");
    }
    return NULL;
}

static void node_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    const char *ready = NULL;
    json_object *conds = kobj_path(o, "status.conditions");
    for (size_t i = 0; i < kobj_len(conds); i++) {
        const char *t = kobj_str(kobj_at(conds, i), "type");
        if (t && strcmp(t, "Ready") == 0)
            ready = kobj_str(kobj_at(conds, i), "status");
    }
    const char *st = !ready ? "Unknown" : strcmp(ready, "True") == 0 ? "Ready" : "NotReady";
    if (kobj_bool(kobj_obj(o, "spec"), "unschedulable", false))
        add_take(c, util_asprintf("%s,SchedulingDisabled", st));
    else
        add_str(c, st);
    /* Roles: node-role.kubernetes.io/<role> keys and the kubernetes.io/role value. */
    json_object *labels = kobj_obj(kobj_meta(o), "labels");
    size_t n = labels ? (size_t)json_object_object_length(labels) : 0;
    const char **roles = util_calloc(n + 1, sizeof(char *));
    size_t k = 0;
    if (labels) {
        json_object_object_foreach(labels, key, val)
        {
            if (k < n && util_has_prefix(key, "node-role.kubernetes.io/") &&
                key[strlen("node-role.kubernetes.io/")])
                roles[k++] = key + strlen("node-role.kubernetes.io/");
            else if (k < n && strcmp(key, "kubernetes.io/role") == 0 &&
                     json_object_is_type(val, json_type_string) &&
                     json_object_get_string_len(val) > 0)
                roles[k++] = json_object_get_string(val);
        }
    }
    qsort(roles, k, sizeof(char *), cmp_str);
    sjoin j = {0};
    for (size_t i = 0; i < k; i++)
        if (i == 0 || strcmp(roles[i], roles[i - 1]) != 0)
            sj_add(&j, ",", roles[i]);
    free(roles);
    add_take(c, sj_done(&j, "<none>"));
    add_age(c, o, now);
    json_object *info = kobj_path(o, "status.nodeInfo");
    add_str(c, kobj_str(info, "kubeletVersion"));
    add_str_or(c, node_address(o, "InternalIP"), "<none>");
    add_str_or(c, node_address(o, "ExternalIP"), "<none>");
    add_str_or(c, kobj_str(info, "osImage"), "<unknown>");
    add_str_or(c, kobj_str(info, "kernelVersion"), "<unknown>");
    add_str_or(c, kobj_str(info, "containerRuntimeVersion"), "<unknown>");
}

static void pod_cells(const json_object *o, int64_t now, json_object *c)
{
    json_object *spec = kobj_obj(o, "spec"), *status = kobj_obj(o, "status");
    size_t total = kobj_len(kobj_arr(spec, "containers"));
    json_object *cs = kobj_arr(status, "containerStatuses");
    int64_t ready = 0, restarts = 0;
    const char *reason = kobj_str(status, "reason");
    if (!reason || !*reason)
        reason = kobj_str(status, "phase");
    for (size_t i = 0; i < kobj_len(cs); i++) {
        json_object *s = kobj_at(cs, i);
        int64_t r = 0;
        if (kobj_int64(s, "restartCount", &r) == 0)
            restarts += r;
        if (kobj_bool(s, "ready", false))
            ready++;
        const char *w = kobj_path_str(s, "state.waiting.reason");
        if (w && *w)
            reason = w;
    }
    if (kobj_deleting(o))
        reason = "Terminating";
    add_str(c, name_of(o));
    add_take(c, util_asprintf("%lld/%zu", (long long)ready, total));
    add_str(c, reason);
    add_take(c, util_asprintf("%lld", (long long)restarts));
    add_age(c, o, now);
    add_str_or(c, kobj_str(status, "podIP"), "<none>");
    add_str_or(c, kobj_str(spec, "nodeName"), "<none>");
    add_str_or(c, kobj_str(status, "nominatedNodeName"), "<none>");
    size_t gates = kobj_len(kobj_arr(spec, "readinessGates"));
    if (gates)
        add_take(c, util_asprintf("0/%zu", gates));
    else
        add_str(c, "<none>");
}

static void ns_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_str(c, kobj_path_str(o, "status.phase"));
    add_age(c, o, now);
}

static size_t map_len(const json_object *m)
{
    return kobj_typed(m, json_type_object) ? (size_t)json_object_object_length(m) : 0;
}

static void secret_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_str(c, kobj_str(o, "type"));
    add_int(c, (int64_t)map_len(kobj_obj(o, "data")));
    add_age(c, o, now);
}

static void sa_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_int(c, (int64_t)kobj_len(kobj_arr(o, "secrets")));
    add_age(c, o, now);
}

static void cm_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_int(c, (int64_t)(map_len(kobj_obj(o, "data")) + map_len(kobj_obj(o, "binaryData"))));
    add_age(c, o, now);
}

/* core/v1 and events.k8s.io/v1 events: the latter's fields are read under
 * their new names (regarding, note, deprecated*), as both share storage. */
static void event_cells(const json_object *o, int64_t now, json_object *c)
{
    bool v1 = kobj_obj(o, "regarding") || kobj_str(o, "note") || !kobj_obj(o, "involvedObject");
    json_object *inv = kobj_obj(o, v1 ? "regarding" : "involvedObject");
    const char *first = kobj_str(o, v1 ? "deprecatedFirstTimestamp" : "firstTimestamp");
    const char *last = kobj_str(o, v1 ? "deprecatedLastTimestamp" : "lastTimestamp");
    char *first_s = first ? since(first, now) : since(kobj_str(o, "eventTime"), now);
    char *last_s = last ? since(last, now) : util_strdup(first_s);
    int64_t count = 0;
    kobj_int64(o, v1 ? "deprecatedCount" : "count", &count);
    json_object *series = kobj_obj(o, "series");
    if (series) {
        free(last_s);
        last_s = since(kobj_str(series, "lastObservedTime"), now);
        kobj_int64(series, "count", &count);
    } else if (count == 0) {
        count = 1;
    }
    add_take(c, last_s);
    add_str(c, kobj_str(o, "type"));
    add_str(c, kobj_str(o, "reason"));
    const char *kind = kobj_str(inv, "kind"), *name = kobj_str(inv, "name");
    char *lkind = util_strdup(kind ? kind : "");
    for (char *p = lkind; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    if (name && *name)
        add_take(c, util_asprintf("%s/%s", lkind, name));
    else
        add_str(c, lkind);
    free(lkind);
    add_str(c, kobj_str(inv, "fieldPath"));
    json_object *src = kobj_obj(o, v1 ? "deprecatedSource" : "source");
    const char *comp = kobj_str(src, "component"), *host = kobj_str(src, "host");
    const char *rc = kobj_str(o, "reportingController"), *ri = kobj_str(o, "reportingInstance");
    if (comp && *comp)
        add_take(c, host && *host ? util_asprintf("%s, %s", comp, host) : util_strdup(comp));
    else if (rc && *rc)
        add_take(c, ri && *ri ? util_asprintf("%s, %s", rc, ri) : util_strdup(rc));
    else
        add_str(c, "");
    const char *msg = kobj_str(o, v1 ? "note" : "message");
    char *trimmed = util_strdup(msg ? msg : "");
    size_t len = strlen(trimmed);
    while (len && (trimmed[len - 1] == ' ' || trimmed[len - 1] == '\n' || trimmed[len - 1] == '\t'))
        trimmed[--len] = '\0';
    size_t lead = strspn(trimmed, " \n\t");
    add_str(c, trimmed + lead);
    free(trimmed);
    add_take(c, first_s);
    add_int(c, count);
    add_str(c, name_of(o));
}

static void lease_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_str(c, kobj_path_str(o, "spec.holderIdentity"));
    add_age(c, o, now);
}

static void role_cells(const json_object *o, int64_t now, json_object *c)
{
    (void)now;
    add_str(c, name_of(o));
    int64_t t = parse_time(kobj_meta_str(o, "creationTimestamp"));
    char buf[UTIL_TIME_RFC3339_LEN] = "";
    if (t >= 0)
        util_time_rfc3339((time_t)t, buf, sizeof(buf));
    add_str(c, buf);
}

static void binding_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    json_object *ref = kobj_obj(o, "roleRef");
    add_take(c, util_asprintf("%s/%s", kobj_str(ref, "kind") ? kobj_str(ref, "kind") : "",
                              kobj_str(ref, "name") ? kobj_str(ref, "name") : ""));
    add_age(c, o, now);
    sjoin users = {0}, groups = {0}, sas = {0};
    json_object *subs = kobj_arr(o, "subjects");
    for (size_t i = 0; i < kobj_len(subs); i++) {
        json_object *s = kobj_at(subs, i);
        const char *kind = kobj_str(s, "kind"), *name = kobj_str(s, "name");
        if (!kind || !name)
            continue;
        if (strcmp(kind, "User") == 0) {
            sj_add(&users, ", ", name);
        } else if (strcmp(kind, "Group") == 0) {
            sj_add(&groups, ", ", name);
        } else if (strcmp(kind, "ServiceAccount") == 0) {
            const char *ns = kobj_str(s, "namespace");
            char *sa = util_asprintf("%s/%s", ns ? ns : "", name);
            sj_add(&sas, ", ", sa);
            free(sa);
        }
    }
    add_take(c, sj_done(&users, ""));
    add_take(c, sj_done(&groups, ""));
    add_take(c, sj_done(&sas, ""));
}

static int64_t replicas(const json_object *o)
{
    int64_t r = 1; /* the apps/v1 default */
    kobj_int64(kobj_obj(o, "spec"), "replicas", &r);
    return r;
}

static void deploy_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_take(c, util_asprintf("%lld/%lld", (long long)int_at(o, "status.readyReplicas"),
                              (long long)replicas(o)));
    add_int(c, int_at(o, "status.updatedReplicas"));
    add_int(c, int_at(o, "status.availableReplicas"));
    add_age(c, o, now);
    add_template_cells(c, o, true);
}

static void ds_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_int(c, int_at(o, "status.desiredNumberScheduled"));
    add_int(c, int_at(o, "status.currentNumberScheduled"));
    add_int(c, int_at(o, "status.numberReady"));
    add_int(c, int_at(o, "status.updatedNumberScheduled"));
    add_int(c, int_at(o, "status.numberAvailable"));
    add_take(c, format_map(kobj_path(o, "spec.template.spec.nodeSelector"), "<none>"));
    add_age(c, o, now);
    add_template_cells(c, o, true);
}

static void sts_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_take(c, util_asprintf("%lld/%lld", (long long)int_at(o, "status.readyReplicas"),
                              (long long)replicas(o)));
    add_age(c, o, now);
    add_template_cells(c, o, false);
}

static void rs_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_int(c, replicas(o));
    add_int(c, int_at(o, "status.replicas"));
    add_int(c, int_at(o, "status.readyReplicas"));
    add_age(c, o, now);
    add_template_cells(c, o, true);
}

/* CRD columns: the value at the path as stored, null when absent (kubectl
 * prints <none>); date columns as an age. */
static void add_path(json_object *c, const json_object *o, const char *path)
{
    json_object *v = kobj_path(o, path);
    if (v &&
        (json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_int) ||
         json_object_is_type(v, json_type_boolean) || json_object_is_type(v, json_type_double)))
        json_object_array_add(c, json_object_get(v));
    else
        json_object_array_add(c, NULL);
}

static void add_date(json_object *c, const char *ts, int64_t now)
{
    if (ts)
        add_take(c, since(ts, now));
    else
        json_object_array_add(c, NULL);
}

static void vs_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_path(c, o, "status.readyToUse");
    add_path(c, o, "spec.source.persistentVolumeClaimName");
    add_path(c, o, "spec.source.volumeSnapshotContentName");
    add_path(c, o, "status.restoreSize");
    add_path(c, o, "spec.volumeSnapshotClassName");
    add_path(c, o, "status.boundVolumeSnapshotContentName");
    add_date(c, kobj_path_str(o, "status.creationTime"), now);
    add_date(c, kobj_meta_str(o, "creationTimestamp"), now);
}

static void vsc_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_path(c, o, "status.readyToUse");
    add_path(c, o, "status.restoreSize");
    add_path(c, o, "spec.deletionPolicy");
    add_path(c, o, "spec.driver");
    add_path(c, o, "spec.volumeSnapshotClassName");
    add_path(c, o, "spec.volumeSnapshotRef.name");
    add_path(c, o, "spec.volumeSnapshotRef.namespace");
    add_date(c, kobj_meta_str(o, "creationTimestamp"), now);
}

static void vsclass_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_path(c, o, "driver");
    add_path(c, o, "deletionPolicy");
    add_date(c, kobj_meta_str(o, "creationTimestamp"), now);
}

static void default_cells(const json_object *o, int64_t now, json_object *c)
{
    add_str(c, name_of(o));
    add_age(c, o, now);
}

static const printer printers[] = {
    {"", "persistentvolumeclaims", COLS(pvc_cols), pvc_cells},
    {"", "persistentvolumes", COLS(pv_cols), pv_cells},
    {"", "nodes", COLS(node_cols), node_cells},
    {"", "pods", COLS(pod_cols), pod_cells},
    {"", "namespaces", COLS(ns_cols), ns_cells},
    {"", "secrets", COLS(secret_cols), secret_cells},
    {"", "serviceaccounts", COLS(sa_cols), sa_cells},
    {"", "configmaps", COLS(cm_cols), cm_cells},
    {"", "events", COLS(event_cols), event_cells},
    {"events.k8s.io", "events", COLS(event_cols), event_cells},
    {"storage.k8s.io", "storageclasses", COLS(sc_cols), sc_cells},
    {"storage.k8s.io", "volumeattributesclasses", COLS(vac_cols), vac_cells},
    {"storage.k8s.io", "volumeattachments", COLS(va_cols), va_cells},
    {"storage.k8s.io", "csinodes", COLS(csinode_cols), csinode_cells},
    {"storage.k8s.io", "csidrivers", COLS(csidriver_cols), csidriver_cells},
    {"storage.k8s.io", "csistoragecapacities", COLS(capacity_cols), capacity_cells},
    {"coordination.k8s.io", "leases", COLS(lease_cols), lease_cells},
    {"rbac.authorization.k8s.io", "roles", COLS(role_cols), role_cells},
    {"rbac.authorization.k8s.io", "clusterroles", COLS(role_cols), role_cells},
    {"rbac.authorization.k8s.io", "rolebindings", COLS(binding_cols), binding_cells},
    {"rbac.authorization.k8s.io", "clusterrolebindings", COLS(binding_cols), binding_cells},
    {"apps", "deployments", COLS(deploy_cols), deploy_cells},
    {"apps", "daemonsets", COLS(ds_cols), ds_cells},
    {"apps", "statefulsets", COLS(sts_cols), sts_cells},
    {"apps", "replicasets", COLS(rs_cols), rs_cells},
    {"snapshot.storage.k8s.io", "volumesnapshots", COLS(vs_cols), vs_cells},
    {"snapshot.storage.k8s.io", "volumesnapshotcontents", COLS(vsc_cols), vsc_cells},
    {"snapshot.storage.k8s.io", "volumesnapshotclasses", COLS(vsclass_cols), vsclass_cells},
};

static const printer default_printer = {"", "", COLS(default_cols), default_cells};

/* ---- custom resources: the CRD version's additionalPrinterColumns ------------------- */

static json_object *col_def(const char *name, const char *type, const char *format,
                            const char *desc, int priority)
{
    json_object *d = json_object_new_object();
    json_object_object_add(d, "name", json_object_new_string(name));
    json_object_object_add(d, "type", json_object_new_string(type));
    json_object_object_add(d, "format", json_object_new_string(format));
    json_object_object_add(d, "description", json_object_new_string(desc));
    json_object_object_add(d, "priority", json_object_new_int(priority));
    return d;
}

static void cr_defs(const kl_type *t, json_object *defs)
{
    json_object_array_add(defs, col_def("Name", "string", "name",
                                        "Name must be unique within a namespace. Is required when "
                                        "creating resources, although some resources may allow a "
                                        "client to request the generation of an appropriate name "
                                        "automatically. Name is primarily intended for creation "
                                        "idempotence and configuration definition. Cannot be "
                                        "updated. More info: "
                                        "http://kubernetes.io/docs/user-guide/identifiers#names",
                                        0));
    json_object *cols = kl_crd_columns(t);
    for (size_t i = 0; i < kobj_len(cols); i++) {
        json_object *c = kobj_at(cols, i);
        const char *path = kobj_str(c, "jsonPath");
        const char *desc = kobj_str(c, "description");
        char *dflt = util_asprintf("Custom resource definition column (in JSONPath format): %s",
                                   path ? path : "");
        int64_t prio = 0;
        kobj_int64(c, "priority", &prio);
        const char *name = kobj_str(c, "name"), *type = kobj_str(c, "type");
        const char *format = kobj_str(c, "format");
        json_object_array_add(defs, col_def(name ? name : "", type ? type : "string",
                                            format ? format : "", desc && *desc ? desc : dflt,
                                            (int)prio));
        free(dflt);
    }
}

/* The cell of one column, as the apiextensions table convertor: nothing for
 * a missing value, the printed value for string columns, a typed JSON value
 * otherwise, an age for dates. */
static void cr_cell(json_object *cells, const json_object *o, const json_object *c, int64_t now)
{
    const char *path = kobj_str(c, "jsonPath");
    const char *type = kobj_str(c, "type");
    json_object *v = path && path[0] == '.' ? kobj_path(o, path + 1) : NULL;
    if (!v || json_object_is_type(v, json_type_null)) {
        json_object_array_add(cells, NULL);
        return;
    }
    json_type jt = json_object_get_type(v);
    if (type && strcmp(type, "date") == 0) {
        if (jt == json_type_string)
            add_take(cells, since(json_object_get_string(v), now));
        else
            json_object_array_add(cells, NULL);
    } else if (!type || strcmp(type, "string") == 0) {
        if (jt == json_type_string)
            add_str(cells, json_object_get_string(v));
        else
            add_str(cells, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    } else if ((strcmp(type, "integer") == 0 && jt == json_type_int) ||
               (strcmp(type, "number") == 0 && (jt == json_type_int || jt == json_type_double)) ||
               (strcmp(type, "boolean") == 0 && jt == json_type_boolean)) {
        json_object_array_add(cells, json_object_get(v));
    } else {
        json_object_array_add(cells, NULL);
    }
}

static void cr_cells(const kl_type *t, const json_object *o, int64_t now, json_object *cells)
{
    add_str(cells, name_of(o));
    json_object *cols = kl_crd_columns(t);
    for (size_t i = 0; i < kobj_len(cols); i++)
        cr_cell(cells, o, kobj_at(cols, i), now);
}

static const printer *printer_for(const kl_type *t)
{
    for (size_t i = 0; i < sizeof(printers) / sizeof(printers[0]); i++)
        if (strcmp(printers[i].group, t->group) == 0 &&
            strcmp(printers[i].resource, t->resource) == 0)
            return &printers[i];
    return &default_printer;
}

/* ---- public --------------------------------------------------------------------------- */

int kl_table_accept(const char *accept)
{
    if (!accept)
        return 0;
    /* Media types in the client's order of preference; the first one kube-lite
     * can produce wins (a Table, or plain JSON which ends the search). */
    const char *p = accept;
    while (*p) {
        size_t len = strcspn(p, ",");
        char *mt = util_calloc(len + 1, 1);
        memcpy(mt, p, len);
        int found = -1;
        bool json = strstr(mt, "application/json") != NULL || strstr(mt, "*/*") != NULL;
        if (json && strstr(mt, "as=Table") && strstr(mt, "g=meta.k8s.io")) {
            if (strstr(mt, "v=v1beta1"))
                found = KL_TABLE_V1BETA1;
            else if (strstr(mt, "v=v1"))
                found = KL_TABLE_V1;
        } else if (json && !strstr(mt, "as=")) {
            found = 0;
        }
        free(mt);
        if (found >= 0)
            return found;
        p += len;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return 0;
}

int kl_table_include(const char *include_object)
{
    if (!include_object || !*include_object || strcmp(include_object, "Metadata") == 0)
        return KL_INCLUDE_METADATA;
    if (strcmp(include_object, "None") == 0)
        return KL_INCLUDE_NONE;
    if (strcmp(include_object, "Object") == 0)
        return KL_INCLUDE_OBJECT;
    return -1;
}

json_object *kl_table_new(const kl_type *t, int version, bool columns)
{
    const printer *p = printer_for(t);
    json_object *tab = json_object_new_object();
    json_object_object_add(tab, "kind", json_object_new_string("Table"));
    json_object_object_add(tab, "apiVersion",
                           json_object_new_string(version == KL_TABLE_V1BETA1
                                                      ? "meta.k8s.io/v1beta1"
                                                      : "meta.k8s.io/v1"));
    json_object_object_add(tab, "metadata", json_object_new_object());
    json_object *defs = json_object_new_array();
    if (columns && kl_type_is_crd(t))
        cr_defs(t, defs);
    for (size_t i = 0; columns && !kl_type_is_crd(t) && i < p->n_cols; i++) {
        json_object *d = json_object_new_object();
        json_object_object_add(d, "name", json_object_new_string(p->cols[i].name));
        json_object_object_add(d, "type", json_object_new_string(p->cols[i].type));
        json_object_object_add(d, "format", json_object_new_string(p->cols[i].format));
        json_object_object_add(d, "description", json_object_new_string(p->cols[i].desc));
        json_object_object_add(d, "priority", json_object_new_int(p->cols[i].priority));
        json_object_array_add(defs, d);
    }
    json_object_object_add(tab, "columnDefinitions", defs);
    json_object_object_add(tab, "rows", json_object_new_array());
    return tab;
}

void kl_table_add_row(json_object *table, const kl_type *t, const json_object *obj, int version,
                      int include, int64_t now)
{
    const printer *p = printer_for(t);
    json_object *rows = kobj_arr(table, "rows");
    if (!rows)
        return;
    json_object *row = json_object_new_object();
    json_object *cells = json_object_new_array();
    if (kl_type_is_crd(t))
        cr_cells(t, obj, now, cells);
    else
        p->cells(obj, now, cells);
    json_object_object_add(row, "cells", cells);
    if (include == KL_INCLUDE_OBJECT) {
        json_object *copy = NULL;
        if (json_object_deep_copy((json_object *)obj, &copy, NULL) == 0)
            json_object_object_add(row, "object", copy);
    } else if (include == KL_INCLUDE_METADATA) {
        json_object *pom = json_object_new_object();
        json_object_object_add(pom, "kind", json_object_new_string("PartialObjectMetadata"));
        json_object_object_add(pom, "apiVersion",
                               json_object_new_string(version == KL_TABLE_V1BETA1
                                                          ? "meta.k8s.io/v1beta1"
                                                          : "meta.k8s.io/v1"));
        json_object *src = kobj_meta(obj), *meta = NULL;
        if (!src || json_object_deep_copy(src, &meta, NULL) != 0 || !meta)
            meta = json_object_new_object();
        kobj_del(meta, "managedFields");
        json_object_object_add(pom, "metadata", meta);
        json_object_object_add(row, "object", pom);
    }
    json_object_array_add(rows, row);
}
