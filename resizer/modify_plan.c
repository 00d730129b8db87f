/*
 * modify_plan: the pure core of the VolumeAttributesClass modify controller
 * (upstream's pkg/modifycontroller: modify_volume.go, modify_status.go).
 * Claim + the controller's memory of it (uncertain, slow) -> what a sync
 * does; the ControllerModifyVolumeRequest; the texts of every API write.
 *
 * Claim status writes are JSON merge patches. The conditions list is
 * written whole, which is what upstream's strategic patch of a fresh copy
 * amounts to; the InProgress/Pending/Infeasible write carries the
 * resourceVersion it was built from (upstream's addResourceVersionCheck),
 * the completion and roll-back writes do not, as upstream's. No I/O, no
 * clock, no global state.
 */
#include "resizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"

static bool same(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

const char *rsz_pvc_vac(const json_object *pvc)
{
    return or_empty(kobj_path_str(pvc, "spec.volumeAttributesClassName"));
}

const char *rsz_pvc_current_vac(const json_object *pvc)
{
    return or_empty(kobj_path_str(pvc, "status.currentVolumeAttributesClassName"));
}

const char *rsz_pvc_modify_status(const json_object *pvc)
{
    json_object *st = kobj_path(pvc, "status.modifyVolumeStatus");
    if (!kobj_typed(st, json_type_object))
        return NULL;
    return or_empty(kobj_str(st, "status"));
}

const char *rsz_pvc_modify_target(const json_object *pvc)
{
    return or_empty(
        kobj_path_str(pvc, "status.modifyVolumeStatus.targetVolumeAttributesClassName"));
}

static bool bound(const json_object *pvc)
{
    return same(kobj_path_str(pvc, "status.phase"), "Bound");
}

bool rsz_modify_update_needs_sync(const json_object *old, const json_object *obj)
{
    if (!old)
        return true;
    return (!same(rsz_pvc_vac(old), rsz_pvc_vac(obj)) || !rsz_pvc_modify_status(obj)) && bound(obj);
}

void rsz_modify_plan(const json_object *pvc, bool uncertain, bool slow, rsz_mod_plan *out)
{
    *out = (rsz_mod_plan){RSZ_MOD_NONE, NULL, false, false};
    const char *spec = rsz_pvc_vac(pvc);
    const char *status = rsz_pvc_modify_status(pvc);
    bool has_spec = kobj_path_str(pvc, "spec.volumeAttributesClassName") != NULL;
    /* delayModificationIfRecentlyInfeasible: only while the target stays. */
    if (!status || !has_spec || !same(rsz_pvc_modify_target(pvc), spec)) {
        out->slow_forget = true;
    } else {
        out->slow_mark = same(status, RSZ_MOD_INFEASIBLE);
        if (slow) {
            out->step = RSZ_MOD_DELAY;
            return;
        }
    }
    if (!status && same(spec, rsz_pvc_current_vac(pvc)))
        return; /* already there */
    bool in_progress = status && same(status, RSZ_MOD_IN_PROGRESS);
    if (!*spec && !in_progress) {
        /* The user cleared the target: stay where we are; only a
         * ModifyingVolume condition left behind is withdrawn. */
        json_object *conds = kobj_path(pvc, "status.conditions");
        for (size_t i = 0; i < kobj_len(conds); i++)
            if (same(kobj_str(kobj_at(conds, i), "type"), RSZ_COND_MODIFYING))
                out->step = RSZ_MOD_ROLLBACK;
        return;
    }
    if ((in_progress && uncertain) || !*spec) {
        /* An uncertain call is finished with its own target first. */
        out->step = RSZ_MOD_CONTINUE;
        out->target = rsz_pvc_modify_target(pvc);
        return;
    }
    out->step = RSZ_MOD_START;
    out->target = spec;
}

const char *rsz_modify_failed_status(int code)
{
    return code == CSI_INVALID_ARGUMENT ? RSZ_MOD_INFEASIBLE : RSZ_MOD_IN_PROGRESS;
}

/* ---- CSI ----------------------------------------------------------------------------------- */

/* Sets key k (replacing a value of the same key); the array has room. */
static void put_param(Csi__V1__ControllerModifyVolumeRequest *req, const char *k, const char *v)
{
    for (size_t i = 0; i < req->n_mutable_parameters; i++) {
        if (strcmp(req->mutable_parameters[i]->key, k) == 0) {
            free(req->mutable_parameters[i]->value);
            req->mutable_parameters[i]->value = util_strdup(v);
            return;
        }
    }
    Csi__V1__ControllerModifyVolumeRequest__MutableParametersEntry *e = util_calloc(1, sizeof(*e));
    csi__v1__controller_modify_volume_request__mutable_parameters_entry__init(e);
    e->key = util_strdup(k);
    e->value = util_strdup(v);
    req->mutable_parameters[req->n_mutable_parameters++] = e;
}

int rsz_modify_request(const json_object *pv, const json_object *vac, const json_object *pvc,
                       bool extra, Csi__V1__ControllerModifyVolumeRequest **out)
{
    *out = NULL;
    const char *name = or_empty(kobj_name(pv));
    json_object *csi = kobj_path(pv, "spec.csi");
    if (!kobj_typed(csi, json_type_object))
        return util_err_set(-EINVAL,
                            "volume %s is not a CSI volumes, modify volume feature only supports "
                            "CSI volumes",
                            name);
    const char *handle = kobj_str(csi, "volumeHandle");
    if (!handle || !*handle)
        return util_err_set(-EINVAL, "empty volume handle");
    Csi__V1__ControllerModifyVolumeRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__controller_modify_volume_request__init(req);
    req->volume_id = util_strdup(handle);
    json_object *params = kobj_obj(vac, "parameters");
    size_t n = params ? (size_t)json_object_object_length(params) : 0;
    req->mutable_parameters = util_calloc(n + 3, sizeof(void *));
    if (params) {
        json_object_object_foreach(params, k, v)
        {
            put_param(req, k, kobj_typed(v, json_type_string) ? json_object_get_string(v) : "");
        }
    }
    if (extra) {
        put_param(req, RSZ_PARAM_PVC_NAME, or_empty(kobj_name(pvc)));
        put_param(req, RSZ_PARAM_PVC_NS, or_empty(kobj_namespace(pvc)));
        put_param(req, RSZ_PARAM_PV_NAME, name);
    }
    *out = req;
    return 0;
}

void rsz_modify_request_free(Csi__V1__ControllerModifyVolumeRequest *req)
{
    if (req)
        protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rsz_modify_secret_ref(const json_object *pv, const char **ns, const char **name)
{
    const char *n = kobj_annotation(pv, RSZ_ANN_MODIFY_SECRET_NAME);
    const char *s = kobj_annotation(pv, RSZ_ANN_MODIFY_SECRET_NS);
    if (n && *n && s && *s) {
        *ns = s;
        *name = n;
        return;
    }
    json_object *ref = kobj_obj(kobj_path(pv, "spec.csi"), "controllerExpandSecretRef");
    /* Upstream reads a present ref as it is, even with empty fields. */
    *ns = ref ? or_empty(kobj_str(ref, "namespace")) : NULL;
    *name = ref ? or_empty(kobj_str(ref, "name")) : NULL;
}

int rsz_modify_request_set_secrets(Csi__V1__ControllerModifyVolumeRequest *req,
                                   const json_object *secret)
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
        Csi__V1__ControllerModifyVolumeRequest__SecretsEntry *e = util_calloc(1, sizeof(*e));
        csi__v1__controller_modify_volume_request__secrets_entry__init(e);
        e->key = util_strdup(k);
        e->value = dec;
        req->secrets[req->n_secrets++] = e;
    }
    return 0;
}

/* ---- API writes ------------------------------------------------------------------------------ */

static json_object *modify_condition(const char *type_, const char *reason, const char *message,
                                     const char *when)
{
    json_object *c = json_object_new_object();
    json_object_object_add(c, "type", json_object_new_string(type_));
    json_object_object_add(c, "status", json_object_new_string("True"));
    json_object_object_add(c, "lastProbeTime", json_object_new_string(when));
    json_object_object_add(c, "lastTransitionTime", json_object_new_string(when));
    if (reason && *reason)
        json_object_object_add(c, "reason", json_object_new_string(reason));
    if (message && *message)
        json_object_object_add(c, "message", json_object_new_string(message));
    return c;
}

/*
 * Upstream's MergePVCConditions: old conditions of other types stay in
 * place; one of a new condition's type is replaced by it (keeping its
 * lastTransitionTime when reason and status did not change); new types are
 * appended in order. Takes `fresh` (an array).
 */
static json_object *merge_conditions(const json_object *pvc, json_object *fresh)
{
    json_object *old = kobj_path(pvc, "status.conditions");
    json_object *out = json_object_new_array();
    size_t nf = json_object_array_length(fresh);
    bool *used = util_calloc(nf ? nf : 1, sizeof(bool));
    for (size_t i = 0; i < kobj_len(old); i++) {
        json_object *o = kobj_at(old, i);
        if (!kobj_typed(o, json_type_object))
            continue;
        size_t j = 0;
        while (j < nf &&
               !same(kobj_str(o, "type"), kobj_str(json_object_array_get_idx(fresh, j), "type")))
            j++;
        if (j == nf || used[j]) {
            json_object_array_add(out, json_object_get(o));
            continue;
        }
        json_object *c = json_object_get(json_object_array_get_idx(fresh, j));
        used[j] = true;
        if (same(kobj_str(c, "reason"), kobj_str(o, "reason")) &&
            same(kobj_str(c, "status"), kobj_str(o, "status"))) {
            const char *ltt = kobj_str(o, "lastTransitionTime");
            if (ltt)
                json_object_object_add(c, "lastTransitionTime", json_object_new_string(ltt));
            else
                json_object_object_del(c, "lastTransitionTime");
        }
        json_object_array_add(out, c);
    }
    for (size_t j = 0; j < nf; j++)
        if (!used[j])
            json_object_array_add(out, json_object_get(json_object_array_get_idx(fresh, j)));
    free(used);
    json_object_put(fresh);
    return out;
}

/* The claim's conditions without the types `a` and `b` (b may be NULL). */
static json_object *without(const json_object *pvc, const char *a, const char *b)
{
    json_object *old = kobj_path(pvc, "status.conditions");
    json_object *out = json_object_new_array();
    for (size_t i = 0; i < kobj_len(old); i++) {
        json_object *o = kobj_at(old, i);
        const char *t = kobj_str(o, "type");
        if (same(t, a) || (b && same(t, b)))
            continue;
        json_object_array_add(out, json_object_get(o));
    }
    return out;
}

static char *status_patch(const json_object *pvc, bool guard, json_object *status)
{
    json_object *root = json_object_new_object();
    const char *rv = kobj_rv(pvc);
    if (guard && rv) {
        json_object *meta = json_object_new_object();
        json_object_object_add(meta, "resourceVersion", json_object_new_string(rv));
        json_object_object_add(root, "metadata", meta);
    }
    json_object_object_add(root, "status", status);
    char *s = kobj_to_text(root, NULL);
    json_object_put(root);
    return s;
}

/* status.conditions = list, or null when that empties a list that existed. */
static void put_conds(json_object *status, const json_object *pvc, json_object *list)
{
    if (json_object_array_length(list) > 0) {
        json_object_object_add(status, "conditions", list);
        return;
    }
    if (kobj_len(kobj_path(pvc, "status.conditions")) > 0)
        json_object_object_add(status, "conditions", NULL);
    json_object_put(list);
}

char *rsz_patch_modify_status(const json_object *pvc, const char *status, int err_code,
                              const char *err_msg, time_t now)
{
    json_object *st = json_object_new_object();
    json_object *mvs = json_object_new_object();
    json_object_object_add(mvs, "status", json_object_new_string(status));
    const char *target = rsz_pvc_modify_target(pvc);
    if (!same(status, RSZ_MOD_PENDING)) {
        char when[32];
        util_time_rfc3339(now, when, sizeof(when));
        json_object *fresh = json_object_new_array();
        char *msg;
        if (!err_code) {
            target = rsz_pvc_vac(pvc);
            json_object_object_add(mvs, "targetVolumeAttributesClassName",
                                   json_object_new_string(target));
            msg = util_asprintf("Modifying volume to \"%s\" is in progress.", target);
        } else if (rsz_error_final(err_code)) {
            msg = util_asprintf("Modifying volume to \"%s\" failed. Waiting for retry.", target);
        } else {
            msg = util_asprintf("Modifying volume to \"%s\" is still in progress.", target);
        }
        json_object_array_add(fresh, modify_condition(RSZ_COND_MODIFYING, NULL, msg, when));
        free(msg);
        if (err_code)
            json_object_array_add(
                fresh,
                modify_condition(RSZ_COND_MODIFY_ERROR, csi_code_go_name(err_code), err_msg, when));
        put_conds(st, pvc, merge_conditions(pvc, fresh));
    }
    json_object_object_add(st, "modifyVolumeStatus", mvs);
    return status_patch(pvc, true, st);
}

char *rsz_patch_modify_done(const json_object *pvc, const char *target)
{
    json_object *st = json_object_new_object();
    json_object_object_add(st, "modifyVolumeStatus", NULL);
    json_object_object_add(st, "currentVolumeAttributesClassName",
                           json_object_new_string(or_empty(target)));
    put_conds(st, pvc, without(pvc, RSZ_COND_MODIFY_ERROR, RSZ_COND_MODIFYING));
    return status_patch(pvc, false, st);
}

char *rsz_patch_modify_rolled_back(const json_object *pvc)
{
    json_object *st = json_object_new_object();
    put_conds(st, pvc, without(pvc, RSZ_COND_MODIFYING, NULL));
    return status_patch(pvc, false, st);
}

char *rsz_patch_pv_vac(const char *target)
{
    json_object *root = json_object_new_object(), *spec = json_object_new_object();
    json_object_object_add(spec, "volumeAttributesClassName",
                           json_object_new_string(or_empty(target)));
    json_object_object_add(root, "spec", spec);
    char *s = kobj_to_text(root, NULL);
    json_object_put(root);
    return s;
}
