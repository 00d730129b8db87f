/*
 * plan: the resizer's pure core. Claim + PV + driver capabilities -> what a
 * sync does (nothing, expand to which size, wait), the ControllerExpand-
 * VolumeRequest, and the texts of every API write.
 *
 * The size rules are upstream's expandAndRecover (RecoverVolumeExpansion-
 * Failure, GA and on) and, with that gate off, its legacy path. Sizes are
 * compared as numbers (util_quantity_parse) but written as the claim spells
 * them; a size from the driver is written as the API server prints a
 * BinarySI quantity.
 *
 * Writes are JSON merge patches: a claim's status patch carries the
 * resourceVersion it was built from (the API server answers 409 on a stale
 * copy) and replaces status.conditions whole, which is what upstream's
 * two-way strategic patch amounts to once the copy is current. Everything
 * is a function of its arguments: no I/O, no clock, no global state.
 */
#include "resizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "volcap/volcap.h"
#include "kobj/kobj.h"

/* ---- names -------------------------------------------------------------------------- */

char *rsz_lock_name(const char *driver)
{
    return util_asprintf("external-resizer-%s", driver ? driver : "");
}

char *rsz_component(const char *driver)
{
    return util_asprintf("external-resizer %s", driver ? driver : "");
}

rsz_mode rsz_mode_from_caps(const csi_caps *caps)
{
    if (!CSI_CAP(caps->plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE))
        return RSZ_MODE_NO_CONTROLLER;
    if (CSI_CAP(caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME))
        return RSZ_MODE_CONTROLLER;
    if (CSI_CAP(caps->node, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME))
        return RSZ_MODE_TRIVIAL;
    return RSZ_MODE_NONE;
}

/* ---- quantities ------------------------------------------------------------------------ */

/* A quantity string as Go's Value(); missing or unreadable is Go's zero. */
static int64_t qty(const char *s)
{
    int64_t v = 0;
    if (!s || util_quantity_parse(s, &v) < 0)
        return 0;
    return v;
}

static const char *storage_at(const json_object *o, const char *path)
{
    return kobj_str(kobj_path(o, path), "storage");
}

static const char *pvc_request(const json_object *pvc)
{
    return storage_at(pvc, "spec.resources.requests");
}

static const char *pvc_capacity(const json_object *pvc)
{
    return storage_at(pvc, "status.capacity");
}

static const char *pvc_allocated(const json_object *pvc)
{
    return storage_at(pvc, "status.allocatedResources");
}

static const char *pv_capacity(const json_object *pv)
{
    return storage_at(pv, "spec.capacity");
}

/* ---- claims and volumes ----------------------------------------------------------------- */

bool rsz_pv_is_ours(const rsz_config *cfg, const json_object *pv)
{
    const char *d = kobj_path_str(pv, "spec.csi.driver");
    return d && cfg->driver_name && strcmp(d, cfg->driver_name) == 0;
}

bool rsz_pv_bound_to(const json_object *pv, const json_object *pvc)
{
    json_object *ref = kobj_path(pv, "spec.claimRef");
    if (!kobj_typed(ref, json_type_object))
        return false;
    const char *ns = kobj_str(ref, "namespace"), *uid = kobj_str(ref, "uid");
    const char *pns = kobj_namespace(pvc), *puid = kobj_uid(pvc);
    /* Go compares strings: missing ones are "" on both sides. */
    return strcmp(ns ? ns : "", pns ? pns : "") == 0 &&
           strcmp(uid ? uid : "", puid ? puid : "") == 0;
}

bool rsz_pvc_needs_resize(const json_object *pvc)
{
    const char *phase = kobj_path_str(pvc, "status.phase");
    const char *vol = kobj_path_str(pvc, "spec.volumeName");
    if (!phase || strcmp(phase, "Bound") != 0 || !vol || !*vol)
        return false;
    return qty(pvc_request(pvc)) > qty(pvc_capacity(pvc));
}

bool rsz_pvc_fs_pending(const json_object *pvc)
{
    json_object *conds = kobj_path(pvc, "status.conditions");
    size_t n = kobj_len(conds);
    for (size_t i = 0; i < n; i++) {
        json_object *c = kobj_at(conds, i);
        const char *t = kobj_str(c, "type"), *s = kobj_str(c, "status");
        if (t && s && strcmp(t, RSZ_COND_FS_RESIZE_PENDING) == 0 && strcmp(s, "True") == 0)
            return true;
    }
    return false;
}

const char *rsz_pvc_resize_status(const json_object *pvc)
{
    const char *s = storage_at(pvc, "status.allocatedResourceStatuses");
    return s ? s : "";
}

static bool str_eq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

bool rsz_pvc_update_needs_sync(const rsz_config *cfg, const json_object *old,
                               const json_object *obj)
{
    if (!old)
        return true;
    int64_t new_req = qty(pvc_request(obj)), old_req = qty(pvc_request(old));
    bool req_changed = new_req > old_req;
    bool status_changed = false;
    if (cfg->recover) {
        /* With recovery a user may also shrink the request back. */
        status_changed = !str_eq(rsz_pvc_resize_status(obj), rsz_pvc_resize_status(old));
        req_changed = req_changed || new_req != old_req;
    }
    if (req_changed ||
        !str_eq(kobj_annotation(obj, RSZ_ANN_RESIZER), kobj_annotation(old, RSZ_ANN_RESIZER)))
        return true;
    /* Other edits (labels, annotations) are not ours; a resync (same
     * version), a grown status.capacity (node expansion finished) or a new
     * resize status are. */
    if (str_eq(kobj_rv(obj), kobj_rv(old)))
        return true;
    return qty(pvc_capacity(obj)) > qty(pvc_capacity(old)) || status_changed;
}

bool rsz_pv_drop_pre_resize(const json_object *pvc, const json_object *pv)
{
    return kobj_annotation(pv, RSZ_ANN_PRE_RESIZE) != NULL &&
           qty(pvc_capacity(pvc)) >= qty(pv_capacity(pv));
}

/* ---- the decision -------------------------------------------------------------------------- */

/* NULL (a field missing or of another type in the API's answer) is
 * nothing. */
static bool is(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* Upstream's expandAndRecover, up to the call. */
static const char *recover_size(const rsz_config *cfg, const json_object *pvc, int64_t pv_size,
                                bool final_error, bool *none)
{
    const char *spec = pvc_request(pvc);
    const char *alloc = pvc_allocated(pvc);
    const char *st = rsz_pvc_resize_status(pvc);
    *none = false;
    if (pv_size < qty(spec)) {
        /* Some control-plane expansion is due, but one already under way
         * (recorded in allocatedResources) finishes first. */
        if (is(st, RSZ_STATUS_NODE_INFEASIBLE))
            return alloc ? alloc : spec;
        if (is(st, RSZ_STATUS_NODE_PENDING) || is(st, RSZ_STATUS_NODE_IN_PROGRESS)) {
            const char *n = alloc ? alloc : spec;
            *none = pv_size >= qty(n);
            return n;
        }
        if (is(st, RSZ_STATUS_CONTROLLER_IN_PROGRESS))
            return final_error || !alloc ? spec : alloc;
        return spec;
    }
    /* The PV is already as large as asked. */
    if (is(st, RSZ_STATUS_NODE_IN_PROGRESS) || is(st, RSZ_STATUS_NODE_PENDING)) {
        *none = true;
        return spec;
    }
    if (is(st, RSZ_STATUS_NODE_INFEASIBLE))
        return !cfg->trivial && alloc ? alloc : spec;
    if (is(st, RSZ_STATUS_CONTROLLER_IN_PROGRESS) || is(st, RSZ_STATUS_CONTROLLER_INFEASIBLE))
        return alloc ? alloc : spec;
    if (!*st && alloc)
        return alloc;
    /* An API server without allocatedResourceStatuses (before 1.28 or with
     * the gate off): a pending node expansion is left to the kubelet. */
    *none = rsz_pvc_fs_pending(pvc);
    return spec;
}

int rsz_plan_expand(const rsz_config *cfg, const json_object *pvc, const json_object *pv,
                    bool final_error, bool slow, rsz_plan *out)
{
    *out = (rsz_plan){RSZ_NONE, NULL, 0, true};
    if (!rsz_pv_is_ours(cfg, pv) || !rsz_pv_bound_to(pv, pvc))
        return 0;
    int64_t pv_size = qty(pv_capacity(pv));
    const char *size;
    bool none = false;
    if (cfg->recover) {
        size = recover_size(cfg, pvc, pv_size, final_error, &none);
    } else {
        size = pvc_request(pvc);
        none = pv_size >= qty(size) && rsz_pvc_fs_pending(pvc);
    }
    if (none)
        return 0;
    int64_t bytes = 0;
    if (!size || util_quantity_parse(size, &bytes) < 0)
        return util_err_set(-EINVAL, "PersistentVolumeClaim %s/%s: size %s is not a quantity",
                            kobj_namespace(pvc) ? kobj_namespace(pvc) : "",
                            kobj_name(pvc) ? kobj_name(pvc) : "", size ? size : "(none)");
    out->new_size = size;
    out->new_bytes = bytes;
    const char *alloc = cfg->recover ? pvc_allocated(pvc) : NULL;
    if (alloc && qty(alloc) == bytes) {
        /* The same size as the last attempt: no status change to write,
         * and after an infeasible answer only at the slow pace. */
        if (slow) {
            out->step = RSZ_DELAY;
            return 0;
        }
        out->update_status = false;
    }
    out->step = RSZ_EXPAND;
    return 0;
}

/* ---- CSI ----------------------------------------------------------------------------------- */

int rsz_expand_request(const rsz_config *cfg, const json_object *pv, int64_t bytes,
                       Csi__V1__ControllerExpandVolumeRequest **out)
{
    *out = NULL;
    const char *name = kobj_name(pv) ? kobj_name(pv) : "";
    json_object *csi = kobj_path(pv, "spec.csi");
    if (!kobj_typed(csi, json_type_object))
        return util_err_set(-EINVAL, "volume %s is not migrated to CSI", name);
    const char *handle = kobj_str(csi, "volumeHandle");
    if (!handle || !*handle)
        return util_err_set(-EINVAL, "empty volume handle");
    /* The capability the attacher publishes with (upstream's
     * GetVolumeCapabilities is the same rule), without a default fsType. */
    Csi__V1__VolumeCapability *cap = NULL;
    if (volcap_of_pv(pv, cfg->single_node_multi_writer, NULL, &cap) < 0)
        return util_err_set(-EINVAL, "failed to get capabilities of volume %s with %s", name,
                            util_err_last());
    Csi__V1__ControllerExpandVolumeRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__controller_expand_volume_request__init(req);
    req->volume_id = util_strdup(handle);
    req->capacity_range = util_calloc(1, sizeof(*req->capacity_range));
    csi__v1__capacity_range__init(req->capacity_range);
    req->capacity_range->required_bytes = bytes;
    req->volume_capability = cap;
    *out = req;
    return 0;
}

void rsz_request_free(Csi__V1__ControllerExpandVolumeRequest *req)
{
    if (req)
        protobuf_c_message_free_unpacked(&req->base, NULL);
}

int rsz_secret_ref(const json_object *pv, const char **ns, const char **name)
{
    *ns = *name = NULL;
    json_object *ref = kobj_obj(kobj_path(pv, "spec.csi"), "controllerExpandSecretRef");
    if (!ref)
        return 0;
    const char *n = kobj_str(ref, "name"), *s = kobj_str(ref, "namespace");
    if (!n || !*n || !s || !*s)
        return util_err_set(-EINVAL,
                            "PersistentVolume %s: controllerExpandSecretRef needs a name and a "
                            "namespace",
                            kobj_name(pv) ? kobj_name(pv) : "");
    *ns = s;
    *name = n;
    return 0;
}

int rsz_request_set_secrets(Csi__V1__ControllerExpandVolumeRequest *req, const json_object *secret)
{
    json_object *data = kobj_obj(secret, "data");
    size_t n = data ? (size_t)json_object_object_length(data) : 0;
    if (!n)
        return 0;
    req->secrets = util_calloc(n, sizeof(void *));
    json_object_object_foreach(data, k, v)
    {
        const char *text = kobj_typed(v, json_type_string) ? json_object_get_string(v) : "";
        char *dec = NULL;
        if (util_base64_decode(text, &dec) < 0)
            return util_err_set(-EINVAL, "secret data for key \"%s\" is not base64 text", k);
        Csi__V1__ControllerExpandVolumeRequest__SecretsEntry *e = util_calloc(1, sizeof(*e));
        csi__v1__controller_expand_volume_request__secrets_entry__init(e);
        e->key = util_strdup(k);
        e->value = dec;
        req->secrets[req->n_secrets++] = e;
    }
    return 0;
}

bool rsz_error_final(int code)
{
    switch (code) {
    case CSI_OK: /* no answer from the driver: the state is unknown */
    case CSI_CANCELLED:
    case CSI_DEADLINE_EXCEEDED:
    case CSI_UNAVAILABLE:
    case CSI_RESOURCE_EXHAUSTED:
    case CSI_ABORTED:
        return false;
    default:
        return true;
    }
}

bool rsz_error_infeasible(int code)
{
    return code == CSI_INVALID_ARGUMENT || code == CSI_OUT_OF_RANGE || code == CSI_NOT_FOUND;
}

/* ---- volumes in use -------------------------------------------------------------------- */

bool rsz_error_inuse(int code)
{
    return code == CSI_FAILED_PRECONDITION;
}

bool rsz_pod_finished(const json_object *pod)
{
    const char *phase = kobj_path_str(pod, "status.phase");
    return phase && (is(phase, "Succeeded") || is(phase, "Failed"));
}

/* spec.volumes[i].persistentVolumeClaim.claimName, or NULL. */
static const char *volume_claim(const json_object *vols, size_t i)
{
    const char *n = kobj_path_str(kobj_at(vols, i), "persistentVolumeClaim.claimName");
    return n && *n ? n : NULL;
}

bool rsz_pod_uses_claims(const json_object *pod)
{
    if (rsz_pod_finished(pod))
        return false;
    json_object *vols = kobj_path(pod, "spec.volumes");
    size_t n = kobj_len(vols);
    for (size_t i = 0; i < n; i++)
        if (volume_claim(vols, i))
            return true;
    return false;
}

void rsz_pod_claim_keys(const json_object *pod, void (*add)(void *ctx, const char *key), void *ctx)
{
    if (rsz_pod_finished(pod))
        return;
    const char *ns = kobj_namespace(pod);
    json_object *vols = kobj_path(pod, "spec.volumes");
    size_t n = kobj_len(vols);
    for (size_t i = 0; i < n; i++) {
        const char *claim = volume_claim(vols, i);
        bool seen = false;
        for (size_t j = 0; claim && j < i && !seen; j++)
            seen = str_eq(volume_claim(vols, j), claim);
        if (!claim || seen)
            continue;
        char *key = util_asprintf("%s/%s", ns ? ns : "", claim);
        add(ctx, key);
        free(key);
    }
}

void rsz_pod_slim(json_object *pod)
{
    json_object *md = kobj_obj(pod, "metadata");
    json_object *keep_md = json_object_new_object();
    static const char *const meta_keys[] = {"name", "namespace", "uid", "resourceVersion"};
    for (size_t i = 0; i < sizeof(meta_keys) / sizeof(meta_keys[0]); i++) {
        json_object *v = kobj_get(md, meta_keys[i]);
        if (v)
            json_object_object_add(keep_md, meta_keys[i], json_object_get(v));
    }
    json_object *vols = kobj_path(pod, "spec.volumes");
    json_object *keep_vols = json_object_new_array();
    size_t n = kobj_len(vols);
    for (size_t i = 0; i < n; i++) {
        const char *claim = volume_claim(vols, i);
        if (!claim)
            continue;
        json_object *src = json_object_new_object(), *vol = json_object_new_object();
        json_object_object_add(src, "claimName", json_object_new_string(claim));
        json_object_object_add(vol, "persistentVolumeClaim", src);
        json_object_array_add(keep_vols, vol);
    }
    json_object *spec = json_object_new_object();
    json_object_object_add(spec, "volumes", keep_vols);
    /* Drop everything else: the claim names are all the index reads. */
    while (json_object_object_length(pod) > 0) {
        const char *k = NULL;
        json_object_object_foreach(pod, key, val)
        {
            (void)val;
            k = key;
            break;
        }
        json_object_object_del(pod, k);
    }
    json_object_object_add(pod, "metadata", keep_md);
    json_object_object_add(pod, "spec", spec);
}

bool rsz_inuse_blocks(bool inuse_error, size_t pods_using)
{
    return inuse_error && pods_using > 0;
}

char *rsz_inuse_text(const json_object *pvc, const char *driver)
{
    const char *ns = kobj_namespace(pvc), *name = kobj_name(pvc);
    return util_asprintf("Unable to expand %s/%s because CSI driver %s only supports offline "
                         "expansion and volume is currently in-use",
                         ns ? ns : "", name ? name : "", driver ? driver : "");
}

/* ---- API writes --------------------------------------------------------------------------------
 */

static bool resize_type(const char *t)
{
    return t && (is(t, RSZ_COND_RESIZING) || is(t, RSZ_COND_FS_RESIZE_PENDING) ||
                 is(t, RSZ_COND_CONTROLLER_ERROR) || is(t, RSZ_COND_NODE_ERROR));
}

static json_object *condition(const char *type_, const char *message, time_t now)
{
    char when[32];
    util_time_rfc3339(now, when, sizeof(when));
    json_object *c = json_object_new_object();
    json_object_object_add(c, "type", json_object_new_string(type_));
    json_object_object_add(c, "status", json_object_new_string("True"));
    json_object_object_add(c, "lastProbeTime", NULL);
    json_object_object_add(c, "lastTransitionTime", json_object_new_string(when));
    if (message && *message)
        json_object_object_add(c, "message", json_object_new_string(message));
    return c;
}

json_object *rsz_merge_conditions(const json_object *pvc, const char *type_, const char *message,
                                  time_t now, bool keep_old)
{
    json_object *old = kobj_path(pvc, "status.conditions");
    json_object *out = json_object_new_array();
    bool placed = false;
    size_t n = kobj_len(old);
    for (size_t i = 0; i < n; i++) {
        json_object *c = kobj_at(old, i);
        if (!kobj_typed(c, json_type_object))
            continue;
        const char *t = kobj_str(c, "type");
        bool same = type_ && is(t, type_);
        if (same && !placed) {
            /* A resize condition of the type being set: replaced in place. */
            json_object_array_add(out, condition(type_, message, now));
            placed = true;
        } else if (!resize_type(t) || (keep_old && !same)) {
            /* Others' conditions always stay; other resize ones on request. */
            json_object_array_add(out, json_object_get(c));
        }
    }
    if (type_ && !placed)
        json_object_array_add(out, condition(type_, message, now));
    return out;
}

/* The claim patch's skeleton: metadata (with the guard when `rv`) and status. */
static json_object *claim_patch(const json_object *pvc, bool guard, json_object **meta,
                                json_object **status)
{
    json_object *root = json_object_new_object();
    *meta = json_object_new_object();
    *status = json_object_new_object();
    const char *rv = kobj_rv(pvc);
    if (guard && rv)
        json_object_object_add(*meta, "resourceVersion", json_object_new_string(rv));
    json_object_object_add(root, "metadata", *meta);
    json_object_object_add(root, "status", *status);
    return root;
}

/* status.conditions = merged, or null when the merge emptied a list that
 * existed (an absent list stays absent). */
static void put_conditions(json_object *status, const json_object *pvc, json_object *merged)
{
    if (json_object_array_length(merged) > 0)
        json_object_object_add(status, "conditions", merged);
    else {
        if (kobj_len(kobj_path(pvc, "status.conditions")) > 0)
            json_object_object_add(status, "conditions", NULL);
        json_object_put(merged);
    }
}

static void put_storage(json_object *parent, const char *key, json_object *val)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "storage", val);
    json_object_object_add(parent, key, m);
}

/* metadata.annotations[key] = value (NULL: removed) when that changes it. */
static void put_annotation(json_object *meta, const json_object *obj, const char *key,
                           const char *value)
{
    bool has = kobj_annotation(obj, key) != NULL;
    if (value ? has : !has)
        return;
    json_object *a = json_object_new_object();
    json_object_object_add(a, key, value ? json_object_new_string(value) : NULL);
    json_object_object_add(meta, "annotations", a);
}

static char *finish(json_object *root, json_object *meta)
{
    if (json_object_object_length(meta) == 0)
        json_object_object_del(root, "metadata");
    char *s = kobj_to_text(root, NULL);
    json_object_put(root);
    return s;
}

char *rsz_patch_in_progress(const rsz_config *cfg, const json_object *pvc, const char *new_size,
                            bool update_status, time_t now)
{
    json_object *meta, *status;
    json_object *root = claim_patch(pvc, true, &meta, &status);
    bool keep_old = cfg->recover && !update_status;
    put_conditions(status, pvc, rsz_merge_conditions(pvc, RSZ_COND_RESIZING, NULL, now, keep_old));
    if (cfg->recover) {
        put_annotation(meta, pvc, RSZ_ANN_NODE_NOT_NEEDED, NULL);
        if (update_status)
            put_storage(status, "allocatedResourceStatuses",
                        json_object_new_string(RSZ_STATUS_CONTROLLER_IN_PROGRESS));
        put_storage(status, "allocatedResources", json_object_new_string(new_size ? new_size : ""));
    }
    return finish(root, meta);
}

char *rsz_patch_node_pending(const rsz_config *cfg, const json_object *pvc, time_t now)
{
    json_object *meta, *status;
    json_object *root = claim_patch(pvc, true, &meta, &status);
    put_conditions(status, pvc,
                   rsz_merge_conditions(pvc, RSZ_COND_FS_RESIZE_PENDING, RSZ_MSG_FS_PENDING, now,
                                        cfg->recover));
    if (cfg->recover) {
        put_annotation(meta, pvc, RSZ_ANN_NODE_NOT_NEEDED, NULL);
        put_storage(status, "allocatedResourceStatuses",
                    json_object_new_string(RSZ_STATUS_NODE_PENDING));
    }
    return finish(root, meta);
}

char *rsz_patch_finished(const rsz_config *cfg, const json_object *pvc, const char *size,
                         time_t now)
{
    json_object *meta, *status;
    json_object *root = claim_patch(pvc, true, &meta, &status);
    put_storage(status, "capacity", json_object_new_string(size ? size : ""));
    put_conditions(status, pvc, rsz_merge_conditions(pvc, NULL, NULL, now, false));
    if (cfg->recover) {
        if (*rsz_pvc_resize_status(pvc))
            put_storage(status, "allocatedResourceStatuses", NULL);
        /* So that the kubelet does not grow the volume again. */
        put_annotation(meta, pvc, RSZ_ANN_NODE_NOT_NEEDED, "true");
    }
    return finish(root, meta);
}

char *rsz_patch_failed(const json_object *pvc, const char *err, bool infeasible, time_t now)
{
    json_object *meta, *status;
    json_object *root = claim_patch(pvc, false, &meta, &status);
    char *msg = util_asprintf("failed to expand pvc with %s", err ? err : "");
    put_conditions(status, pvc,
                   rsz_merge_conditions(pvc, RSZ_COND_CONTROLLER_ERROR, msg, now, true));
    free(msg);
    if (infeasible)
        put_storage(status, "allocatedResourceStatuses",
                    json_object_new_string(RSZ_STATUS_CONTROLLER_INFEASIBLE));
    return finish(root, meta);
}

char *rsz_patch_pv_capacity(const json_object *pv, const char *size, const char *pre_resize)
{
    json_object *root = json_object_new_object();
    json_object *meta = json_object_new_object();
    json_object_object_add(root, "metadata", meta);
    if (pre_resize && !kobj_annotation(pv, RSZ_ANN_PRE_RESIZE))
        put_annotation(meta, pv, RSZ_ANN_PRE_RESIZE, pre_resize);
    json_object *spec = json_object_new_object();
    put_storage(spec, "capacity", json_object_new_string(size ? size : ""));
    json_object_object_add(root, "spec", spec);
    return finish(root, meta);
}

char *rsz_patch_pv_drop_pre_resize(void)
{
    return util_asprintf("{\"metadata\":{\"annotations\":{\"%s\":null}}}", RSZ_ANN_PRE_RESIZE);
}

char *rsz_failed_text(const char *pv, const char *driver, const char *err)
{
    return util_asprintf("resize volume \"%s\" by resizer \"%s\" failed: %s", pv ? pv : "",
                         driver ? driver : "", err ? err : "");
}
