/*
 * plan: the snapshot-controller's decisions, one step at a time, read from
 * external-snapshotter v8's pkg/common-controller (snapshot_controller.go,
 * snapshot_controller_base.go) and pkg/utils/util.go.
 *
 * snapctl_plan_snapshot walks upstream's syncSnapshotByKey in its order and
 * stops at the first thing to write: the default class, the claim's
 * finalizer released, the deletion path, validation, the snapshot's
 * finalizers, then an unready snapshot's content (bound, or created after
 * the claim's finalizer) and status. The caller writes, puts the answer in
 * place of the object it wrote, and asks again, so a step that has been
 * done is never planned twice within a sync, and a sync cut short by a
 * crash is picked up by the next one from whatever the API holds.
 *
 * Error texts and Event reasons are upstream's; where upstream quotes an
 * error with Go's %q, so does go_quote. Not here: group snapshots, the
 * distributed-snapshotting label, metrics.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "snapctl.h"

#define CLASS_NOT_FOUND "volumesnapshotclass.snapshot.storage.k8s.io \"%s\" not found"

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* Go's %q for the texts met here: quotes, backslashes and control bytes
 * escaped. */
static char *go_quote(const char *s)
{
    util_buf b = {0};
    util_buf_put(&b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char esc[8];
        switch (*p) {
        case '"':
            util_buf_put(&b, "\\\"", 2);
            break;
        case '\\':
            util_buf_put(&b, "\\\\", 2);
            break;
        case '\n':
            util_buf_put(&b, "\\n", 2);
            break;
        case '\t':
            util_buf_put(&b, "\\t", 2);
            break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                snprintf(esc, sizeof(esc), "\\x%02x", *p);
                util_buf_put(&b, esc, strlen(esc));
            } else {
                util_buf_put(&b, (const char *)p, 1);
            }
        }
    }
    util_buf_put(&b, "\"", 1);
    return b.buf;
}

/* ---- reading -------------------------------------------------------------------------------- */

const char *snapctl_source_pvc(const json_object *snapshot)
{
    return kobj_path_str(snapshot, "spec.source.persistentVolumeClaimName");
}

const char *snapctl_source_content(const json_object *snapshot)
{
    return kobj_path_str(snapshot, "spec.source.volumeSnapshotContentName");
}

const char *snapctl_bound_content(const json_object *snapshot)
{
    const char *s = kobj_path_str(snapshot, "status.boundVolumeSnapshotContentName");
    return s && *s ? s : NULL;
}

bool snapctl_is_ready(const json_object *snapshot)
{
    return kobj_bool(kobj_obj(snapshot, "status"), "readyToUse", false);
}

char *snapctl_dynamic_content_name(const json_object *snapshot)
{
    const char *uid = kobj_uid(snapshot);
    return uid && *uid ? util_asprintf(SNAPCTL_CONTENT_PREFIX "%s", uid) : NULL;
}

char *snapctl_content_for(const json_object *snapshot)
{
    const char *bound = snapctl_bound_content(snapshot);
    if (kobj_deleting(snapshot)) {
        if (bound)
            return util_strdup(bound);
        return snapctl_source_pvc(snapshot) ? snapctl_dynamic_content_name(snapshot) : NULL;
    }
    const char *pre = snapctl_source_content(snapshot);
    if (pre)
        return *pre ? util_strdup(pre) : NULL;
    if (bound && snapctl_is_ready(snapshot))
        return util_strdup(bound);
    return snapctl_dynamic_content_name(snapshot);
}

bool snapctl_snapshot_uses_pvc(const json_object *snapshot, const char *pvc_name)
{
    const char *src = snapctl_source_pvc(snapshot);
    return src && streq(src, pvc_name) && !snapctl_is_ready(snapshot);
}

bool snapctl_pvc_restores(const json_object *pvc, const json_object *snapshot)
{
    json_object *ds = kobj_path(pvc, "spec.dataSource");
    return streq(kobj_str(ds, "name"), kobj_name(snapshot)) &&
           streq(kobj_str(ds, "kind"), "VolumeSnapshot") &&
           streq(kobj_str(ds, "apiGroup"), SNAPCTL_GROUP) &&
           streq(kobj_path_str(pvc, "status.phase"), "Pending");
}

char *snapctl_content_snapshot_key(const json_object *content)
{
    json_object *ref = kobj_path(content, "spec.volumeSnapshotRef");
    const char *ns = kobj_str(ref, "namespace"), *name = kobj_str(ref, "name");
    return ns && name && *ns && *name ? util_asprintf("%s/%s", ns, name) : NULL;
}

/* IsVolumeSnapshotRefSet: the content names this snapshot, UID included. */
static bool ref_set(const json_object *snapshot, const json_object *content)
{
    json_object *ref = kobj_path(content, "spec.volumeSnapshotRef");
    const char *uid = kobj_str(ref, "uid");
    return streq(kobj_str(ref, "name"), kobj_name(snapshot)) &&
           streq(kobj_str(ref, "namespace"), kobj_namespace(snapshot)) &&
           streq(uid ? uid : "", kobj_uid(snapshot));
}

/* ---- plan building --------------------------------------------------------------------------- */

const char *snapctl_step_name(snapctl_step s)
{
    static const char *const names[] = {
        [SNAPCTL_NONE] = "none",
        [SNAPCTL_FAIL] = "fail",
        [SNAPCTL_SET_ERROR] = "set-error",
        [SNAPCTL_SET_CLASS] = "set-class",
        [SNAPCTL_SET_SNAPSHOT_FINALIZERS] = "set-snapshot-finalizers",
        [SNAPCTL_SET_PVC_FINALIZERS] = "set-pvc-finalizers",
        [SNAPCTL_CREATE_CONTENT] = "create-content",
        [SNAPCTL_BIND_CONTENT] = "bind-content",
        [SNAPCTL_SET_STATUS] = "set-status",
        [SNAPCTL_MARK_CONTENT] = "mark-content",
        [SNAPCTL_DELETE_CONTENT] = "delete-content",
        [SNAPCTL_ADD_CONTENT_FINALIZER] = "add-content-finalizer",
    };
    return (unsigned)s < sizeof(names) / sizeof(names[0]) && names[s] ? names[s] : "unknown";
}

void snapctl_plan_clear(snapctl_plan *p)
{
    if (!p)
        return;
    free(p->target);
    free(p->text);
    for (int i = 0; i < 2; i++)
        free(p->event[i].message);
    memset(p, 0, sizeof(*p));
}

static void event(snapctl_plan *p, const char *type, const char *reason, char *message)
{
    int i = p->event[0].type ? 1 : 0;
    free(p->event[i].message);
    p->event[i] = (snapctl_event){.type = type, .reason = reason, .message = message};
}

static char *text_of(json_object *o)
{
    char *t = kobj_to_text(o, NULL);
    json_object_put(o);
    return t;
}

/* {"metadata":{"resourceVersion":rv}} to build a guarded merge patch on. */
static json_object *guarded(const json_object *obj)
{
    json_object *p = json_object_new_object(), *md = json_object_new_object();
    kobj_set_str(md, "resourceVersion", kobj_rv(obj));
    kobj_set(p, "metadata", md);
    return p;
}

/* The finalizer list of `obj` with `add` appended (when missing) and the
 * `drop` ones left out; NULL when that is the list it has. */
static json_object *finalizers_with(const json_object *obj, const char *const *add, size_t n_add,
                                    const char *const *drop, size_t n_drop)
{
    json_object *fins = kobj_path(obj, "metadata.finalizers"), *out = json_object_new_array();
    bool changed = false;
    for (size_t i = 0; i < kobj_len(fins); i++) {
        const char *f = kobj_str_at(fins, i);
        bool gone = false;
        for (size_t j = 0; f && j < n_drop; j++)
            gone |= strcmp(f, drop[j]) == 0;
        if (gone)
            changed = true;
        else if (f)
            json_object_array_add(out, json_object_new_string(f));
    }
    for (size_t j = 0; j < n_add; j++)
        if (!kobj_has_finalizer(obj, add[j])) {
            json_object_array_add(out, json_object_new_string(add[j]));
            changed = true;
        }
    if (!changed) {
        json_object_put(out);
        return NULL;
    }
    return out;
}

/* A merge patch of metadata.finalizers under the object's resourceVersion
 * (upstream updates the object); false when nothing changes. */
static bool finalizer_patch(snapctl_plan *p, snapctl_step step, const json_object *obj,
                            const char *const *add, size_t n_add, const char *const *drop,
                            size_t n_drop)
{
    json_object *list = finalizers_with(obj, add, n_add, drop, n_drop);
    if (!list)
        return false;
    if (!kobj_rv(obj)) {
        /* No version to guard the write with: never written unguarded. */
        json_object_put(list);
        p->step = SNAPCTL_FAIL;
        p->last = p->fail = true;
        return true;
    }
    json_object *patch = guarded(obj);
    kobj_set(kobj_obj(patch, "metadata"), "finalizers", list);
    p->step = step;
    p->text = text_of(patch);
    return true;
}

/*
 * updateSnapshotErrorStatusWithEvent: status.error {time, message} (and
 * readyToUse false when `unready`) with a Warning Event; nothing at all when
 * the same message is recorded. `fail`: the sync returns an error after it.
 */
static void set_error(const snapctl_in *in, snapctl_plan *p, const char *reason, bool unready,
                      bool fail, char *message)
{
    p->last = true;
    p->fail = fail;
    if (streq(kobj_path_str(in->snapshot, "status.error.message"), message)) {
        /* Kept for the log line of the retry; no Event (its type is unset). */
        p->step = fail ? SNAPCTL_FAIL : SNAPCTL_NONE;
        p->event[0].message = message;
        return;
    }
    char when[32];
    util_time_rfc3339(in->now, when, sizeof(when));
    json_object *patch = guarded(in->snapshot), *st = json_object_new_object();
    json_object *err = json_object_new_object();
    kobj_set_str(err, "time", when);
    kobj_set_str(err, "message", message);
    kobj_set(st, "error", err);
    if (unready)
        kobj_set(st, "readyToUse", json_object_new_boolean(false));
    kobj_set(patch, "status", st);
    p->step = SNAPCTL_SET_ERROR;
    p->text = text_of(patch);
    event(p, "Warning", reason, message);
}

static void fail(snapctl_plan *p, const char *reason, char *message)
{
    p->step = SNAPCTL_FAIL;
    p->last = p->fail = true;
    if (reason)
        event(p, "Warning", reason, message);
    else
        free(message);
}

/* ---- the claim and its volume ------------------------------------------------------------------
 */

/*
 * getVolumeFromVolumeSnapshot: the claim Bound, its volume bound back to
 * it. NULL with *err (upstream's text) otherwise.
 */
static const json_object *volume_of(const snapctl_in *in, char **err)
{
    const char *name = snapctl_source_pvc(in->snapshot);
    if (!name || !*name) {
        *err = name ? util_asprintf("the PVC name is not specified in snapshot %s/%s",
                                    kobj_namespace(in->snapshot), kobj_name(in->snapshot))
                    : util_strdup("the snapshot source PVC name is not specified");
        return NULL;
    }
    if (!in->pvc) {
        char *nf = util_asprintf("persistentvolumeclaim \"%s\" not found", name);
        char *q = go_quote(nf);
        *err = util_asprintf("failed to retrieve PVC %s from the lister: %s", name, q);
        free(q);
        free(nf);
        return NULL;
    }
    if (!streq(kobj_path_str(in->pvc, "status.phase"), "Bound")) {
        *err = util_asprintf(
            "the PVC %s is not yet bound to a PV, will not attempt to take a snapshot", name);
        return NULL;
    }
    const char *pv_name = kobj_path_str(in->pvc, "spec.volumeName");
    if (!in->pv) {
        char *nf = util_asprintf("persistentvolumes \"%s\" not found", pv_name ? pv_name : "");
        char *q = go_quote(nf);
        *err = util_asprintf("failed to retrieve PV %s from the API server: %s",
                             pv_name ? pv_name : "", q);
        free(q);
        free(nf);
        return NULL;
    }
    json_object *ref = kobj_path(in->pv, "spec.claimRef");
    const char *ref_uid = kobj_str(ref, "uid");
    if (!ref || !streq(kobj_str(ref, "name"), kobj_name(in->pvc)) ||
        !streq(kobj_str(ref, "namespace"), kobj_namespace(in->pvc)) ||
        (ref_uid && *ref_uid && !streq(ref_uid, kobj_uid(in->pvc)))) {
        *err = util_strdup("claim in dataSource not bound or invalid");
        return NULL;
    }
    return in->pv;
}

/* SetDefaultSnapshotClass's choice: the one class of the volume's driver
 * with the default annotation "true". */
static const json_object *default_class(const snapctl_in *in, char **err)
{
    const json_object *pv = volume_of(in, err);
    if (!pv)
        return NULL;
    const char *driver = kobj_path_str(pv, "spec.csi.driver");
    if (!kobj_path(pv, "spec.csi")) {
        *err = util_asprintf("snapshotting non-CSI volumes is not supported, snapshot:%s/%s",
                             kobj_namespace(in->snapshot), kobj_name(in->snapshot));
        return NULL;
    }
    const json_object *found = NULL;
    size_t n = 0;
    for (size_t i = 0; i < kobj_len(in->classes); i++) {
        json_object *c = kobj_at(in->classes, i);
        if (streq(kobj_annotation(c, SNAPCTL_ANN_DEFAULT), "true") &&
            streq(kobj_str(c, "driver"), driver ? driver : "")) {
            found = c;
            n++;
        }
    }
    if (n == 0)
        *err = util_strdup("cannot find default snapshot class");
    else if (n > 1)
        *err = util_asprintf("%zu default snapshot classes were found", n);
    return n == 1 ? found : NULL;
}

/* ---- secrets -----------------------------------------------------------------------------------
 */

static bool label_ok(const char *s, size_t n)
{
    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && !(c == '-' && i > 0 && i + 1 < n))
            return false;
    }
    return true;
}

static bool subdomain_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    for (const char *p = s;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (!label_ok(p, len))
            return false;
        if (!dot)
            return true;
        p = dot + 1;
    }
}

/* Present as a key whatever its value, as Go's `_, ok := params[k]`. */
static bool param(const json_object *params, const char *key, const char **value)
{
    json_object *v = NULL;
    if (!kobj_typed(params, json_type_object) || !json_object_object_get_ex(params, key, &v))
        return false;
    *value = kobj_typed(v, json_type_string) ? json_object_get_string(v) : "";
    return true;
}

/*
 * GetSecretReference(SnapshotterSecretParams, ...). Upstream expands the
 * ${volumesnapshotcontent.name}, ${volumesnapshot.namespace} and (name only)
 * ${volumesnapshot.name} templates with Go's os.Expand. The project's
 * expanders are private to provisioner/ and snapshotter/ (with other
 * tokens), and a third is not to be written here: a "$" is refused with a
 * message saying so, until common/ offers one.
 */
int snapctl_secret_ref(const json_object *cls, char **ns, char **name)
{
    *ns = *name = NULL;
    const json_object *params = kobj_obj(cls, "parameters");
    const char *tn = NULL, *tns = NULL;
    bool has_n = param(params, SNAPCTL_PARAM_SECRET, &tn);
    bool has_ns = param(params, SNAPCTL_PARAM_SECRET_NS, &tns);
    const char *pre = "failed to get name and namespace template from params: ";
    if (has_n != has_ns)
        return util_err_set(-EINVAL,
                            "%seither name and namespace for Snapshotter secrets specified, Both "
                            "must be specified",
                            pre);
    if (!has_n)
        return 0;
    if (!*tn || !*tns)
        return util_err_set(-EINVAL,
                            "%sSnapshotter secrets specified in parameters but value of either "
                            "namespace or name is empty",
                            pre);
    if (strchr(tns, '$') || strchr(tn, '$'))
        return util_err_set(-EINVAL,
                            "secret templates (%s, %s) are not expanded by snapshot-controller-sim",
                            tns, tn);
    if (!label_ok(tns, strlen(tns))) {
        char *q = go_quote(tns);
        int rc = util_err_set(-EINVAL, "%s is not a valid namespace name", q);
        free(q);
        return rc;
    }
    if (!subdomain_ok(tn)) {
        char *q = go_quote(tn);
        int rc = util_err_set(-EINVAL, "%s is not a valid secret name", q);
        free(q);
        return rc;
    }
    *ns = util_strdup(tns);
    *name = util_strdup(tn);
    return 0;
}

/* ---- the content -------------------------------------------------------------------------------
 */

/* The content createSnapshotContent posts. */
static char *content_object(const snapctl_config *cfg, const snapctl_in *in, const char *name,
                            const json_object *cls, const json_object *pv, const char *sec_ns,
                            const char *sec_name)
{
    const json_object *s = in->snapshot;
    json_object *o = json_object_new_object(), *md = json_object_new_object();
    json_object *spec = json_object_new_object(), *ref = json_object_new_object();
    json_object *src = json_object_new_object();
    kobj_set_str(o, "apiVersion", SNAPCTL_API_VERSION);
    kobj_set_str(o, "kind", "VolumeSnapshotContent");
    kobj_set_str(md, "name", name);
    kobj_set(o, "metadata", md);
    if (sec_name) {
        kobj_set_annotation(o, SNAPCTL_ANN_SECRET_NAME, sec_name);
        kobj_set_annotation(o, SNAPCTL_ANN_SECRET_NS, sec_ns);
    }
    kobj_set_str(ref, "kind", "VolumeSnapshot");
    kobj_set_str(ref, "namespace", kobj_namespace(s));
    kobj_set_str(ref, "name", kobj_name(s));
    kobj_set_str(ref, "uid", kobj_uid(s));
    kobj_set_str(ref, "apiVersion", SNAPCTL_API_VERSION);
    kobj_set_str(ref, "resourceVersion", kobj_rv(s));
    kobj_set(spec, "volumeSnapshotRef", ref);
    kobj_set_str(src, "volumeHandle", kobj_path_str(pv, "spec.csi.volumeHandle"));
    kobj_set(spec, "source", src);
    kobj_set_str(spec, "volumeSnapshotClassName", kobj_name(cls));
    if (kobj_str(cls, "deletionPolicy"))
        kobj_set_str(spec, "deletionPolicy", kobj_str(cls, "deletionPolicy"));
    if (kobj_str(cls, "driver"))
        kobj_set_str(spec, "driver", kobj_str(cls, "driver"));
    const char *mode = kobj_path_str(pv, "spec.volumeMode");
    if (cfg->prevent_volume_mode_conversion && mode)
        kobj_set_str(spec, "sourceVolumeMode", mode);
    kobj_set(o, "spec", spec);
    return text_of(o);
}

/* The content's status as the snapshot's (updateSnapshotStatus). */
typedef struct content_status {
    bool has_time, has_size;
    int64_t created_ns, size;
    bool ready;
    json_object *error; /* borrowed */
} content_status;

static void read_content_status(const json_object *content, content_status *cs)
{
    json_object *st = kobj_obj(content, "status");
    memset(cs, 0, sizeof(*cs));
    cs->has_time = kobj_int64(st, "creationTime", &cs->created_ns) == 0;
    cs->has_size = kobj_int64(st, "restoreSize", &cs->size) == 0;
    cs->ready = kobj_bool(st, "readyToUse", false);
    cs->error = kobj_obj(st, "error");
}

static bool quantity_zero(json_object *q)
{
    int64_t v = 0;
    const char *s = kobj_typed(q, json_type_string) ? json_object_get_string(q) : NULL;
    if (s)
        return util_quantity_parse(s, &v) == 0 && v == 0;
    return kobj_typed(q, json_type_int) && json_object_get_int64(q) == 0;
}

static bool same_json(json_object *a, json_object *b)
{
    char *ta = a ? kobj_to_text(a, NULL) : NULL, *tb = b ? kobj_to_text(b, NULL) : NULL;
    bool same = (!ta && !tb) || (ta && tb && strcmp(ta, tb) == 0);
    free(ta);
    free(tb);
    return same;
}

/*
 * updateSnapshotStatus: what of the content's status the snapshot lacks, as
 * a merge patch of its status (NONE when nothing changes), with the
 * SnapshotCreated and SnapshotReady Events when they turn true.
 */
static void set_status(const snapctl_in *in, const json_object *content, snapctl_plan *p)
{
    const json_object *s = in->snapshot;
    json_object *old = kobj_obj(s, "status");
    content_status cs;
    read_content_status(content, &cs);
    json_object *st = json_object_new_object();
    bool changed = false, created_now = false, ready_now = false;
    char when[32] = "";
    if (cs.has_time) {
        time_t t = (time_t)(cs.created_ns / 1000000000);
        if (cs.created_ns < 0 && cs.created_ns % 1000000000)
            t--;
        util_time_rfc3339(t, when, sizeof(when));
    }
    char size[UTIL_QUANTITY_MAX] = "";
    if (cs.has_size)
        util_quantity_format(cs.size, size, sizeof(size));
    if (!old) {
        kobj_set_str(st, "boundVolumeSnapshotContentName", kobj_name(content));
        kobj_set(st, "readyToUse", json_object_new_boolean(cs.ready));
        if (*when)
            kobj_set_str(st, "creationTime", when);
        if (*size)
            kobj_set_str(st, "restoreSize", size);
        if (cs.error)
            kobj_set(st, "error", json_object_get(cs.error));
        changed = true;
        created_now = *when;
        ready_now = cs.ready;
    } else {
        json_object *err = kobj_obj(old, "error");
        if (!snapctl_bound_content(s) && !kobj_str(old, "boundVolumeSnapshotContentName")) {
            kobj_set_str(st, "boundVolumeSnapshotContentName", kobj_name(content));
            changed = true;
        }
        if (!kobj_get(old, "creationTime") && *when) {
            kobj_set_str(st, "creationTime", when);
            changed = created_now = true;
        }
        json_object *r = kobj_typed(kobj_get(old, "readyToUse"), json_type_boolean);
        if (!r || json_object_get_boolean(r) != cs.ready) {
            kobj_set(st, "readyToUse", json_object_new_boolean(cs.ready));
            changed = true;
            ready_now = cs.ready;
            if (cs.ready)
                err = NULL;
        }
        json_object *q = kobj_get(old, "restoreSize");
        if ((!q && cs.has_size) || (q && quantity_zero(q) && cs.has_size && cs.size > 0)) {
            kobj_set_str(st, "restoreSize", size);
            changed = true;
        }
        /* The snapshot's error follows the content's: set, replaced or
         * cleared (a readyToUse turning true cleared it above). */
        if (!same_json(err, cs.error) || (!err && kobj_obj(old, "error"))) {
            kobj_set(st, "error", cs.error ? json_object_get(cs.error) : NULL);
            changed = true;
        }
    }
    if (!changed) {
        json_object_put(st);
        p->step = SNAPCTL_NONE;
        p->last = true;
        return;
    }
    json_object *patch = guarded(s);
    kobj_set(patch, "status", st);
    p->step = SNAPCTL_SET_STATUS;
    p->text = text_of(patch);
    const char *ns = kobj_namespace(s), *name = kobj_name(s);
    if (created_now && !kobj_get(old, "creationTime"))
        event(
            p, "Normal", "SnapshotCreated",
            util_asprintf("Snapshot %s/%s was successfully created by the CSI driver.", ns, name));
    if (ready_now && !snapctl_is_ready(s))
        event(p, "Normal", "SnapshotReady",
              util_asprintf("Snapshot %s/%s is ready to use.", ns, name));
}

/* createSnapshotContent after the claim's finalizer: the inputs, then the
 * object. false with *err (upstream's text) when it cannot be made. */
static bool create_content(const snapctl_config *cfg, const snapctl_in *in, snapctl_plan *p,
                           char **err)
{
    const json_object *s = in->snapshot;
    const char *cname = kobj_path_str(s, "spec.volumeSnapshotClassName");
    char *inner = NULL;
    const json_object *pv = NULL;
    if (!cname) {
        inner = util_asprintf("failed to take snapshot %s without a snapshot class", kobj_name(s));
    } else if (!in->cls) {
        inner = util_asprintf(CLASS_NOT_FOUND, cname);
    } else if ((pv = volume_of(in, &inner)) != NULL) {
        char *sec_ns = NULL, *sec_name = NULL;
        if (snapctl_secret_ref(in->cls, &sec_ns, &sec_name) < 0) {
            inner = util_strdup(util_err_last());
        } else if (!kobj_path(pv, "spec.csi")) {
            *err = util_asprintf("cannot find CSI PersistentVolumeSource for volume %s",
                                 kobj_name(pv));
        } else {
            char *name = snapctl_dynamic_content_name(s);
            p->step = SNAPCTL_CREATE_CONTENT;
            p->target = name;
            p->text = content_object(cfg, in, name, in->cls, pv, sec_ns, sec_name);
            event(p, "Normal", "CreatingSnapshot",
                  util_asprintf("Waiting for a snapshot %s/%s to be created by the CSI driver.",
                                kobj_namespace(s), kobj_name(s)));
        }
        free(sec_ns);
        free(sec_name);
    }
    if (inner) {
        char *q = go_quote(inner);
        *err = util_asprintf("failed to get input parameters to create snapshot %s: %s",
                             kobj_name(s), q);
        free(q);
        free(inner);
    }
    return p->step == SNAPCTL_CREATE_CONTENT;
}

/* ---- the snapshot's sync ------------------------------------------------------------------------
 */

static bool pvc_finalizer_release(const snapctl_in *in, snapctl_plan *p, bool skip_self)
{
    if (!snapctl_source_pvc(in->snapshot) || !in->pvc ||
        !kobj_has_finalizer(in->pvc, SNAPCTL_FIN_PVC))
        return false;
    bool used = in->pvc_used_by_others ||
                (!skip_self && snapctl_snapshot_uses_pvc(in->snapshot, kobj_name(in->pvc)));
    if (used)
        return false;
    static const char *const drop[] = {SNAPCTL_FIN_PVC};
    if (!finalizer_patch(p, SNAPCTL_SET_PVC_FINALIZERS, in->pvc, NULL, 0, drop, 1))
        return false;
    p->target = util_strdup(kobj_name(in->pvc));
    return true;
}

/* processSnapshotWithDeletionTimestamp and what it calls. */
static void plan_deleting(const snapctl_in *in, snapctl_plan *p)
{
    const json_object *s = in->snapshot, *content = in->content;
    char *want = snapctl_content_for(s);
    if (content && (!streq(kobj_name(content), want) || !ref_set(s, content)))
        content = NULL;
    free(want);
    bool delete_content = content && streq(kobj_path_str(content, "spec.deletionPolicy"), "Delete");
    if (!kobj_has_finalizer(s, SNAPCTL_FIN_AS_SOURCE) &&
        !kobj_has_finalizer(s, SNAPCTL_FIN_BOUND)) {
        p->last = true;
        return;
    }
    if (content && in->restoring) {
        fail(p, "SnapshotDeletePending", util_strdup("Snapshot is being used to restore a PVC"));
        return;
    }
    if (content && !kobj_annotation(content, SNAPCTL_ANN_BEING_DEL)) {
        json_object *patch = json_object_new_object();
        kobj_set_annotation(patch, SNAPCTL_ANN_BEING_DEL, "yes");
        p->step = SNAPCTL_MARK_CONTENT;
        p->target = util_strdup(kobj_name(content));
        p->text = text_of(patch);
        return;
    }
    /* Upstream deletes on every pass; once ours went through (or another's:
     * a deletionTimestamp) there is nothing more to ask. */
    if (delete_content && !in->content_deleted && !kobj_deleting(content)) {
        p->step = SNAPCTL_DELETE_CONTENT;
        p->target = util_strdup(kobj_name(content));
        return;
    }
    if (pvc_finalizer_release(in, p, true))
        return;
    static const char *const both[] = {SNAPCTL_FIN_AS_SOURCE, SNAPCTL_FIN_BOUND};
    if (!finalizer_patch(p, SNAPCTL_SET_SNAPSHOT_FINALIZERS, s, NULL, 0, both,
                         delete_content ? 1 : 2))
        p->step = SNAPCTL_NONE;
    p->last = true;
}

/* getPreprovisionedContentFromStore / getDynamicallyProvisionedContentFromStore:
 * the content, NULL when missing; false (with the error planned) when it
 * cannot be this snapshot's. */
static bool content_checked(const snapctl_in *in, snapctl_plan *p, const json_object **out)
{
    const json_object *s = in->snapshot, *c = in->content;
    const char *pre = snapctl_source_content(s);
    *out = NULL;
    if (pre && !*pre) {
        fail(p, NULL, NULL);
        return false;
    }
    char *want = pre ? util_strdup(pre) : snapctl_dynamic_content_name(s);
    if (!c || !streq(kobj_name(c), want)) {
        free(want);
        return true;
    }
    json_object *ref = kobj_path(c, "spec.volumeSnapshotRef");
    const char *uid = kobj_str(ref, "uid");
    bool misbound = !streq(kobj_str(ref, "name"), kobj_name(s)) ||
                    !streq(kobj_str(ref, "namespace"), kobj_namespace(s));
    if (pre) {
        misbound |= uid && *uid && !streq(uid, kobj_uid(s));
        if (!kobj_path_str(c, "spec.source.snapshotHandle")) {
            free(want);
            set_error(in, p, "SnapshotContentMismatch", true, true,
                      util_strdup("VolumeSnapshotContent is dynamically provisioned while "
                                  "expecting a pre-provisioned one"));
            return false;
        }
    } else {
        misbound |= !streq(uid ? uid : "", kobj_uid(s));
        if (!kobj_path_str(c, "spec.source.volumeHandle")) {
            set_error(in, p, "SnapshotContentMismatch", true, true,
                      util_asprintf("VolumeSnapshotContent %s is pre-provisioned while expecting "
                                    "a dynamically provisioned one",
                                    want));
            free(want);
            return false;
        }
    }
    if (misbound) {
        set_error(
            in, p, "SnapshotContentMisbound", true, true,
            util_asprintf("VolumeSnapshotContent [%s] is bound to a different snapshot", want));
        free(want);
        return false;
    }
    free(want);
    *out = c;
    return true;
}

/* syncUnreadySnapshot. */
static void plan_unready(const snapctl_config *cfg, const snapctl_in *in, const json_object *c,
                         snapctl_plan *p)
{
    const json_object *s = in->snapshot;
    const char *ns = kobj_namespace(s), *name = kobj_name(s);
    if (snapctl_source_content(s)) {
        if (!c) {
            set_error(in, p, "SnapshotContentMissing", true, true,
                      util_strdup("VolumeSnapshotContent is missing"));
            return;
        }
        json_object *ref = kobj_path(c, "spec.volumeSnapshotRef");
        const char *uid = kobj_str(ref, "uid");
        const char *cls = kobj_path_str(s, "spec.volumeSnapshotClassName");
        if (!(uid && *uid && kobj_path_str(c, "spec.volumeSnapshotClassName"))) {
            /* checkandBindSnapshotContent: the UID, and the class when the
             * snapshot names one. */
            json_object *patch = guarded(c), *spec = json_object_new_object();
            json_object *r = json_object_new_object();
            kobj_set_str(r, "uid", kobj_uid(s));
            kobj_set(spec, "volumeSnapshotRef", r);
            if (cls)
                kobj_set_str(spec, "volumeSnapshotClassName", cls);
            kobj_set(patch, "spec", spec);
            bool same = streq(uid, kobj_uid(s)) &&
                        (!cls || streq(kobj_path_str(c, "spec.volumeSnapshotClassName"), cls));
            if (!same && !kobj_rv(c)) {
                json_object_put(patch);
                {
                    fail(p, NULL, NULL);
                    return;
                }
            }
            if (!same) {
                p->step = SNAPCTL_BIND_CONTENT;
                p->target = util_strdup(kobj_name(c));
                p->text = text_of(patch);
                return;
            }
            json_object_put(patch);
        }
        {
            set_status(in, c, p);
            return;
        }
    }
    if (c) {
        if (kobj_path_str(c, "spec.source.snapshotHandle")) {
            set_error(
                in, p, "SnapshotHandleSet", true, true,
                util_asprintf("Snapshot handle should not be set in content %s/%s for dynamic "
                              "provisioning",
                              ns, name));
            return;
        }
        {
            set_status(in, c, p);
            return;
        }
    }
    /* ensurePVCFinalizer, then the content. */
    char *err = NULL;
    if (!in->pvc) {
        err = util_asprintf("snapshot controller failed to update %s on API server: cannot get "
                            "claim from snapshot",
                            name);
    } else if (!kobj_has_finalizer(in->pvc, SNAPCTL_FIN_PVC)) {
        if (kobj_deleting(in->pvc)) {
            err = util_asprintf("snapshot controller failed to update %s on API server: cannot "
                                "add finalizer on claim because it is being deleted",
                                kobj_name(in->pvc));
        } else {
            static const char *const add[] = {SNAPCTL_FIN_PVC};
            finalizer_patch(p, SNAPCTL_SET_PVC_FINALIZERS, in->pvc, add, 1, NULL, 0);
            p->target = util_strdup(kobj_name(in->pvc));
            return;
        }
    } else if (create_content(cfg, in, p, &err)) {
        return;
    }
    char *msg = util_asprintf("Failed to create snapshot content with error %s", err);
    free(err);
    set_error(in, p, "SnapshotContentCreationFailed", true, true, msg);
}

int snapctl_plan_snapshot(const snapctl_config *cfg, const snapctl_in *in, snapctl_plan *out)
{
    memset(out, 0, sizeof(*out));
    const json_object *s = in->snapshot;
    if (!kobj_meta(s) || !kobj_name(s) || !kobj_namespace(s) || !kobj_uid(s) || !kobj_rv(s))
        return util_err_set(-EINVAL, "the snapshot lacks a name, namespace, uid or "
                                     "resourceVersion");
    bool deleting = kobj_deleting(s);
    const char *pvc = snapctl_source_pvc(s), *pre = snapctl_source_content(s);

    /* checkAndUpdateSnapshotClass */
    const char *cname = kobj_path_str(s, "spec.volumeSnapshotClassName");
    if (cname && !in->cls) {
        char *msg =
            util_asprintf("Failed to get snapshot class with error " CLASS_NOT_FOUND, cname);
        /* Being deleted, a missing class does not hold the deletion up. */
        if (!deleting || !streq(kobj_path_str(s, "status.error.message"), msg)) {
            set_error(in, out, "GetSnapshotClassFailed", false, !deleting, msg);
            if (deleting)
                out->last = false;
            return 0;
        }
        free(msg);
    } else if (!cname && pvc && !pre) {
        char *err = NULL;
        const json_object *def = default_class(in, &err);
        if (!def) {
            set_error(in, out, "SetDefaultSnapshotClassFailed", false, true,
                      util_asprintf("Failed to set default snapshot class with error %s", err));
            free(err);
            return 0;
        }
        json_object *patch = guarded(s), *spec = json_object_new_object();
        kobj_set_str(spec, "volumeSnapshotClassName", kobj_name(def));
        kobj_set(patch, "spec", spec);
        out->step = SNAPCTL_SET_CLASS;
        out->text = text_of(patch);
        return 0;
    }

    /* syncSnapshot */
    if (pvc_finalizer_release(in, out, false))
        return 0;
    if (deleting) {
        plan_deleting(in, out);
        return 0;
    }
    if (!pvc == !pre) {
        set_error(in, out, "SnapshotValidationError", true, true,
                  util_strdup("Exactly one of PersistentVolumeClaimName and "
                              "VolumeSnapshotContentName should be specified"));
        return 0;
    }
    const json_object *c = NULL;
    if (!content_checked(in, out, &c))
        return 0;
    /* checkandAddSnapshotFinalizers: the bound finalizer only for a bound
     * snapshot whose content deletes the driver's snapshot. */
    const char *add[2];
    size_t n = 0;
    add[n++] = SNAPCTL_FIN_AS_SOURCE;
    if (c && snapctl_bound_content(s) && streq(kobj_path_str(c, "spec.deletionPolicy"), "Delete"))
        add[n++] = SNAPCTL_FIN_BOUND;
    if (finalizer_patch(out, SNAPCTL_SET_SNAPSHOT_FINALIZERS, s, add, n, NULL, 0))
        return 0;
    if (!snapctl_is_ready(s) || !snapctl_bound_content(s)) {
        plan_unready(cfg, in, c, out);
        return 0;
    }
    /* syncReadySnapshot */
    out->last = true;
    if (!c)
        set_error(in, out, "SnapshotContentMissing", true, false,
                  util_strdup("VolumeSnapshotContent is missing"));
    else if (!ref_set(s, c))
        set_error(in, out, "SnapshotMisbound", true, false,
                  util_strdup("VolumeSnapshotContent is not bound to the VolumeSnapshot "
                              "correctly"));
    return 0;
}

/* ---- the content's sync -------------------------------------------------------------------------
 */

bool snapctl_status_stale(const json_object *snapshot, const json_object *content)
{
    json_object *ss = kobj_obj(snapshot, "status"), *cs = kobj_obj(content, "status");
    if (!ss)
        return cs != NULL;
    if (!cs)
        return false;
    if (!kobj_str(ss, "boundVolumeSnapshotContentName"))
        return true;
    if (!kobj_get(ss, "creationTime") && kobj_get(cs, "creationTime"))
        return true;
    json_object *sr = kobj_typed(kobj_get(ss, "readyToUse"), json_type_boolean);
    json_object *cr = kobj_typed(kobj_get(cs, "readyToUse"), json_type_boolean);
    if (!sr && cr)
        return true;
    if (sr && cr && json_object_get_boolean(sr) != json_object_get_boolean(cr))
        return true;
    json_object *sq = kobj_get(ss, "restoreSize");
    int64_t size = 0;
    bool has_size = kobj_int64(cs, "restoreSize", &size) == 0;
    if (!sq && has_size)
        return true;
    return sq && quantity_zero(sq) && has_size && size > 0;
}

int snapctl_plan_content(const json_object *content, const json_object *snapshot, snapctl_plan *out)
{
    memset(out, 0, sizeof(*out));
    out->last = true;
    if (!kobj_meta(content) || !kobj_name(content))
        return util_err_set(-EINVAL, "the content has no name");
    bool vh = kobj_path(content, "spec.source.volumeHandle") != NULL;
    bool sh = kobj_path(content, "spec.source.snapshotHandle") != NULL;
    if (vh == sh) {
        out->step = SNAPCTL_FAIL;
        out->fail = true;
        event(out, "Warning", "ContentValidationError",
              util_strdup("Exactly one of VolumeHandle and SnapshotHandle should be specified"));
        return 0;
    }
    const char *uid = kobj_path_str(content, "spec.volumeSnapshotRef.uid");
    if (!uid || !*uid)
        return 0;
    if (!kobj_deleting(content) && !kobj_has_finalizer(content, SNAPCTL_FIN_CONTENT)) {
        out->text = kobj_patch_add_finalizer(content, SNAPCTL_FIN_CONTENT, false);
        if (!out->text)
            return util_err_set(-EINVAL, "content %s has malformed finalizers", kobj_name(content));
        out->step = SNAPCTL_ADD_CONTENT_FINALIZER;
        return 0;
    }
    if (!snapshot || !streq(kobj_uid(snapshot), uid))
        return 0;
    out->enqueue_snapshot = snapctl_status_stale(snapshot, content);
    if (kobj_deleting(snapshot) &&
        (kobj_has_finalizer(snapshot, SNAPCTL_FIN_AS_SOURCE) ||
         kobj_has_finalizer(snapshot, SNAPCTL_FIN_BOUND)) &&
        !kobj_annotation(content, SNAPCTL_ANN_BEING_DEL)) {
        json_object *patch = json_object_new_object();
        kobj_set_annotation(patch, SNAPCTL_ANN_BEING_DEL, "yes");
        out->step = SNAPCTL_MARK_CONTENT;
        out->target = util_strdup(kobj_name(content));
        out->text = text_of(patch);
    }
    return 0;
}
