/*
 * The VolumeAttributesClass modify controller (upstream's
 * pkg/modifycontroller): a bound claim of this driver whose
 * spec.volumeAttributesClassName is not what status.currentVolume-
 * AttributesClassName says gets ControllerModifyVolume with the class's
 * parameters; then the PV's spec.volumeAttributesClassName and the claim's
 * status are written. modify_plan.c decides, this file does the I/O.
 *
 * It shares the resize controller's claim and PV informers (controller.c
 * passes claim events on) and has its own VolumeAttributesClass informer
 * and queue (named "<driver>-pvc" like upstream's, whose two controllers
 * have a queue each under the same name). Two sets of claim keys are kept,
 * as upstream: "uncertain" (the last call failed with a non-final error, or
 * the claim was InProgress at start-up: its target must not change until
 * the driver answers) and "slow" (the driver said INVALID_ARGUMENT for the
 * current target: retried only after --retry-interval-max).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/linkhash.h>

#include "kobj/kobj.h"
#include "modify.h"
#include "wq/wq.h"

#define WORKER_IDLE_EXIT (30 * UTIL_SECOND)

struct rsz_modify {
    rsz_ctrl_opts o;
    rsz_config cfg;
    kube_informer *pvcs, *pvs; /* borrowed from the resize controller */
    kube_informer *vacs;
    wq *q;
    bool pool;
    pthread_mutex_t mu;         /* guards the two sets */
    struct lh_table *uncertain; /* claim key -> "1" */
    struct lh_table *slow;      /* claim key -> util_duration* (monotonic time added) */
    /* Claim key -> our last status write's answer: a sync before the watch
     * shows it (a retry after the error, on a loaded machine) must not see
     * the claim without the Infeasible it just wrote and call again. */
    kube_overlay *written;
};

/* ---- the two sets ------------------------------------------------------------------------- */

static void free_entry(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free((void *)lh_entry_v(e));
}

static void set_uncertain(rsz_modify *m, const char *key, bool on)
{
    pthread_mutex_lock(&m->mu);
    lh_table_delete(m->uncertain, key);
    if (on)
        lh_table_insert(m->uncertain, util_strdup(key), util_strdup("1"));
    pthread_mutex_unlock(&m->mu);
}

static bool is_uncertain(rsz_modify *m, const char *key)
{
    pthread_mutex_lock(&m->mu);
    bool r = lh_table_lookup_entry(m->uncertain, key) != NULL;
    pthread_mutex_unlock(&m->mu);
    return r;
}

/* In the slow set and not expired (an expired entry goes). */
static bool slow_contains(rsz_modify *m, const char *key)
{
    pthread_mutex_lock(&m->mu);
    struct lh_entry *e = lh_table_lookup_entry(m->slow, key);
    bool r = false;
    if (e) {
        util_duration age = util_now_mono() - *(const util_duration *)lh_entry_v(e);
        r = age < m->o.retry_max;
        if (!r)
            lh_table_delete(m->slow, key);
    }
    pthread_mutex_unlock(&m->mu);
    return r;
}

/* Adds (keeping an older time, as upstream's slow set) or removes. */
static void slow_set(rsz_modify *m, const char *key, bool on)
{
    pthread_mutex_lock(&m->mu);
    if (!on) {
        lh_table_delete(m->slow, key);
    } else if (!lh_table_lookup_entry(m->slow, key)) {
        util_duration *at = util_calloc(1, sizeof(*at));
        *at = util_now_mono();
        lh_table_insert(m->slow, util_strdup(key), at);
    }
    pthread_mutex_unlock(&m->mu);
}

/* ---- API ---------------------------------------------------------------------------------- */

static void event(rsz_modify *m, const json_object *pvc, bool warning, const char *reason,
                  const char *msg)
{
    if (m->o.events)
        kube_event(m->o.events, pvc, warning ? "Warning" : "Normal", reason, "%s", msg);
}

/* A merge patch of the claim's status (or the PV); *answer gets the result. */
static int patch(rsz_modify *m, const kube_resource *res, const json_object *obj, char *text,
                 json_object **answer)
{
    bool pvc = res == &KUBE_PVC;
    char *path = kube_path(res, kobj_namespace(obj), kobj_name(obj), pvc ? "status" : NULL);
    kube_resp r = {0};
    int rc = kube_patch(m->o.kube, path, KUBE_PATCH_MERGE, text, &r);
    obs_v(5, "PATCH %s %s: %d", path, text, r.code);
    /* Only an answer the informer would take decides the next step. */
    if (rc == 0 && r.body && kube_object_check(res, r.body, kobj_name(obj)) == 0) {
        if (pvc) {
            char *key = kube_key(r.body);
            kube_overlay_put(m->written, key, r.body);
            free(key);
        }
        if (answer)
            *answer = json_object_get(r.body);
    } else if (rc < 0)
        rc = util_err_set(rc, "%s", r.message);
    kube_resp_clear(&r);
    free(path);
    free(text);
    return rc;
}

/* Replaces *pvc by the answer of a claim status write. */
static int patch_claim(rsz_modify *m, json_object **pvc, char *text)
{
    json_object *answer = NULL;
    int rc = patch(m, &KUBE_PVC, *pvc, text, &answer);
    if (answer) {
        json_object_put(*pvc);
        *pvc = answer;
    }
    return rc;
}

static int fetch_secret(rsz_modify *m, const json_object *pv, json_object **secret)
{
    *secret = NULL;
    const char *ns, *name;
    rsz_modify_secret_ref(pv, &ns, &name);
    if (!name)
        return 0;
    char *path = kube_path(&KUBE_SECRET, ns, name, NULL);
    kube_resp r = {0};
    int rc = kube_get(m->o.kube, path, &r);
    free(path);
    if (rc == 0)
        *secret = json_object_get(r.body);
    else
        rc = util_err_set(rc, "error getting secret %s in namespace %s: %s", name, ns, r.message);
    kube_resp_clear(&r);
    return rc;
}

/* The class from the cache; missing: upstream's Warning and an error. */
static json_object *target_vac(rsz_modify *m, const json_object *pvc, const char *name)
{
    json_object *vac = kube_informer_get(m->vacs, NULL, name);
    if (!vac) {
        char *msg = util_asprintf("VAC \"%s\" does not exist.", name);
        event(m, pvc, true, RSZ_EV_MODIFY_FAILED, msg);
        free(msg);
        util_err_set(-ENOENT,
                     "get VAC with vac name %s in VACInformer cache failed: "
                     "volumeattributesclass.storage.k8s.io \"%s\" not found",
                     name, name);
    }
    return vac;
}

/* ---- the driver call ------------------------------------------------------------------------ */

/* ControllerModifyVolume; st->code 0 when the driver was not asked. */
static int call_driver(rsz_modify *m, const json_object *pvc, const json_object *pv,
                       const json_object *vac, csi_status *st)
{
    memset(st, 0, sizeof(*st));
    Csi__V1__ControllerModifyVolumeRequest *req = NULL;
    json_object *secret = NULL;
    int rc = rsz_modify_request(pv, vac, pvc, m->cfg.extra_modify_metadata, &req);
    if (rc == 0)
        rc = fetch_secret(m, pv, &secret);
    if (rc == 0 && secret)
        rc = rsz_modify_request_set_secrets(req, secret);
    json_object_put(secret);
    if (rc == 0) {
        ProtobufCMessage *resp = NULL;
        obs_v(4, "ControllerModifyVolume of %s with class %s", kobj_name(pv) ? kobj_name(pv) : "",
              kobj_name(vac) ? kobj_name(vac) : "");
        rc = csi_call(m->o.csi, "/csi.v1.Controller/ControllerModifyVolume", &req->base,
                      &csi__v1__controller_modify_volume_response__descriptor, m->o.timeout, &resp,
                      st);
        if (resp)
            protobuf_c_message_free_unpacked(resp, NULL);
        if (rc < 0) {
            char *text = csi_status_text(st);
            rc = util_err_set(rc, "%s", text);
            free(text);
        }
    }
    rsz_modify_request_free(req);
    return rc;
}

/* controllerModifyVolumeWithTarget: the call, then the writes and events.
 * `pvc_name` is a copy: every claim write replaces *pvc (freeing the old). */
static int modify_with(rsz_modify *m, const char *key, json_object **pvc, const json_object *pv,
                       const json_object *vac, const char *pvc_name)
{
    const char *vac_name = kobj_name(vac) ? kobj_name(vac) : "";
    csi_status st;
    int rc = call_driver(m, *pvc, pv, vac, &st);
    if (rc == 0) {
        /* markControllerModifyVolumeCompleted: the PV first, then the claim. */
        char *target = util_strdup(rsz_pvc_modify_target(*pvc));
        rc = patch(m, &KUBE_PV, pv, rsz_patch_pv_vac(target), NULL);
        if (rc < 0)
            rc = util_err_set(rc,
                              "update pv.Spec.VolumeAttributesClassName for PVC \"%s\" failed, "
                              "errored with: %s",
                              pvc_name, util_err_last());
        else if ((rc = patch_claim(m, pvc, rsz_patch_modify_done(*pvc, target))) < 0)
            rc = util_err_set(rc,
                              "mark PVC \"%s\" as ModifyVolumeCompleted failed, errored with: %s",
                              pvc_name, util_err_last());
        free(target);
        if (rc < 0)
            return util_err_set(rc,
                                "modify volume failed to mark pvc %s modify volume completed: %s",
                                pvc_name, util_err_last());
        char *msg = util_asprintf("external resizer modified volume %s with vac %s successfully",
                                  pvc_name, vac_name);
        event(m, *pvc, false, RSZ_EV_MODIFY_SUCCESS, msg);
        free(msg);
        return 0;
    }
    if (st.code == CSI_OK) /* not the driver's answer */
        return util_err_set(rc, "cannot get error status from modify volume err: %s",
                            util_err_last());
    char *err = util_strdup(util_err_last());
    char *msg;
    const char *status = RSZ_MOD_IN_PROGRESS;
    if (!rsz_error_final(st.code)) {
        set_uncertain(m, key, true);
        msg = util_asprintf("%s. Still modifying to VAC %s", err, vac_name);
    } else {
        status = rsz_modify_failed_status(st.code);
        set_uncertain(m, key, false);
        msg = util_strdup(err);
    }
    int mrc =
        patch_claim(m, pvc, rsz_patch_modify_status(*pvc, status, st.code, st.message, time(NULL)));
    if (mrc < 0) {
        rc = util_err_set(mrc, "mark PVC \"%s\" as modify volume failed, errored with: %s",
                          pvc_name, util_err_last());
    } else {
        const char *now = rsz_pvc_modify_status(*pvc);
        if (now && strcmp(now, RSZ_MOD_INFEASIBLE) == 0)
            slow_set(m, key, true);
        event(m, *pvc, true, RSZ_EV_MODIFY_FAILED, msg);
        rc = util_err_set(rc, "%s", err);
    }
    free(msg);
    free(err);
    return rc;
}

/* ---- sync ---------------------------------------------------------------------------------- */

/* validateVACAndModifyVolumeWithTarget: Pending without the class, else
 * InProgress, the VolumeModify event and the call. */
static int start(rsz_modify *m, const char *key, json_object **pvc, const json_object *pv,
                 const char *target, const char *pvc_name)
{
    json_object *vac = target_vac(m, *pvc, target);
    if (!vac) {
        /* Pending until the class exists; the claim is not retried here. */
        int rc = patch_claim(m, pvc,
                             rsz_patch_modify_status(*pvc, RSZ_MOD_PENDING, 0, NULL, time(NULL)));
        return rc < 0
                   ? util_err_set(rc, "mark PVC \"%s\" as modify volume failed, errored with: %s",
                                  pvc_name, util_err_last())
                   : 0;
    }
    int rc = patch_claim(m, pvc,
                         rsz_patch_modify_status(*pvc, RSZ_MOD_IN_PROGRESS, 0, NULL, time(NULL)));
    if (rc < 0) {
        rc = util_err_set(rc, "mark PVC \"%s\" as modify volume failed, errored with: %s", pvc_name,
                          util_err_last());
    } else {
        char *msg = util_asprintf("external resizer is modifying volume %s with vac %s", pvc_name,
                                  kobj_name(vac) ? kobj_name(vac) : "");
        event(m, *pvc, false, RSZ_EV_MODIFY, msg);
        free(msg);
        rc = modify_with(m, key, pvc, pv, vac, pvc_name);
    }
    json_object_put(vac);
    return rc;
}

static int modify(rsz_modify *m, const char *key, json_object **pvc, const json_object *pv)
{
    rsz_mod_plan plan;
    rsz_modify_plan(*pvc, is_uncertain(m, key), slow_contains(m, key), &plan);
    if (plan.slow_forget)
        slow_set(m, key, false);
    if (plan.slow_mark)
        slow_set(m, key, true);
    switch (plan.step) {
    case RSZ_MOD_NONE:
        return 0;
    case RSZ_MOD_DELAY:
        return util_err_set(-EAGAIN,
                            "skipping volume modification for pvc %s, because modification "
                            "previously failed with infeasible error",
                            key);
    case RSZ_MOD_ROLLBACK: {
        obs_v(4, "stop reconcile for rolled back PVC %s", key);
        event(m, *pvc, false, RSZ_EV_MODIFY_CANCELLED, "Cancelled modify.");
        int rc = patch_claim(m, pvc, rsz_patch_modify_rolled_back(*pvc));
        return rc < 0 ? util_err_set(rc, "mark PVC \"%s\" as rolled back failed: %s",
                                     kobj_name(*pvc) ? kobj_name(*pvc) : "", util_err_last())
                      : 0;
    }
    case RSZ_MOD_CONTINUE: {
        json_object *vac = target_vac(m, *pvc, plan.target);
        if (!vac)
            return -ENOENT;
        char *name = util_strdup(kobj_name(*pvc) ? kobj_name(*pvc) : "");
        int rc = modify_with(m, key, pvc, pv, vac, name);
        free(name);
        json_object_put(vac);
        return rc;
    }
    case RSZ_MOD_START:
        break;
    }
    char *name = util_strdup(kobj_name(*pvc) ? kobj_name(*pvc) : "");
    int rc = start(m, key, pvc, pv, plan.target, name);
    free(name);
    return rc;
}

static int sync_claim(rsz_modify *m, const char *key)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = strndup(key, (size_t)(slash - key));
    json_object *pvc =
        kube_overlay_fresh(m->written, key, kube_informer_get(m->pvcs, ns, slash + 1));
    free(ns);
    if (!pvc) {
        kube_overlay_forget(m->written, key);
        return 0; /* deleted */
    }
    int rc = 0;
    json_object *pv = NULL;
    const char *vol = kobj_path_str(pvc, "spec.volumeName");
    if (!vol || !*vol)
        goto out;
    pv = kube_informer_get(m->pvs, NULL, vol);
    if (!pv) {
        /* The cache holds this driver's PVs only: one GET tells another
         * driver's PV (nothing to do) from one not seen yet (retry); an
         * answer that is not a well-formed PV proves nothing. */
        char *path = kube_path(&KUBE_PV, NULL, vol, NULL);
        kube_resp r = {0};
        bool foreign = kube_get(m->o.kube, path, &r) == 0 &&
                       kube_object_check(&KUBE_PV, r.body, vol) == 0 &&
                       !rsz_pv_is_ours(&m->cfg, r.body);
        kube_resp_clear(&r);
        free(path);
        if (!foreign)
            rc = util_err_set(-ENOENT, "Get PV \"%s\" of pvc \"%s\" in PVInformer cache failed",
                              vol, key);
        goto out;
    }
    const char *phase = kobj_path_str(pvc, "status.phase");
    if (phase && strcmp(phase, "Bound") == 0)
        rc = modify(m, key, &pvc, pv);
out:
    if (rc < 0)
        obs_error("Error syncing PVC %s (modify): %s", key, util_err_last());
    json_object_put(pv);
    json_object_put(pvc);
    return rc;
}

static int claim_work(void *ud, const char *key)
{
    return sync_claim(ud, key);
}

/* ---- claim events (from controller.c) ------------------------------------------------------- */

static void queue_claim(rsz_modify *m, const json_object *pvc)
{
    char *key = kube_key(pvc);
    wq_add(m->q, key);
    free(key);
}

void rsz_modify_pvc_added(rsz_modify *m, const json_object *pvc)
{
    if (m)
        queue_claim(m, pvc);
}

void rsz_modify_pvc_updated(rsz_modify *m, const json_object *old, const json_object *pvc)
{
    if (!m || !rsz_modify_update_needs_sync(old, pvc))
        return;
    /* Upstream looks the PV up first and drops the event when it is not
     * cached: here the cache holds only this driver's PVs. */
    const char *vol = kobj_path_str(pvc, "spec.volumeName");
    if (vol && kube_informer_has(m->pvs, NULL, vol))
        queue_claim(m, pvc);
}

void rsz_modify_pvc_deleted(rsz_modify *m, const json_object *pvc)
{
    if (!m)
        return;
    char *key = kube_key(pvc);
    set_uncertain(m, key, false);
    slow_set(m, key, false);
    kube_overlay_forget(m->written, key);
    wq_forget(m->q, key);
    free(key);
}

/* ---- start and stop ------------------------------------------------------------------------- */

static void slim_vac(void *ud, json_object *vac)
{
    (void)ud;
    json_object *md = kobj_obj(vac, "metadata");
    kobj_del(md, "managedFields");
    kobj_del(md, "annotations");
    kobj_del(md, "labels");
}

int rsz_modify_new(const rsz_ctrl_opts *opts, const rsz_config *cfg, kube_informer *pvcs,
                   kube_informer *pvs, rsz_modify **out)
{
    rsz_modify *m = util_calloc(1, sizeof(*m));
    m->o = *opts;
    m->cfg = *cfg;
    m->pvcs = pvcs;
    m->pvs = pvs;
    pthread_mutex_init(&m->mu, NULL);
    m->uncertain = lh_kchar_table_new(16, free_entry);
    m->slow = lh_kchar_table_new(16, free_entry);
    m->written = kube_overlay_new();
    char *qname = util_asprintf("%s-pvc", cfg->driver_name ? cfg->driver_name : "");
    m->q = wq_new(&(wq_opts){.name = qname,
                             .base_delay = opts->retry_start,
                             .max_delay = opts->retry_max,
                             .metrics = opts->metrics});
    free(qname);
    kube_informer_opts vo = {.res = &KUBE_VOLUMEATTRIBUTESCLASS,
                             .transform = slim_vac,
                             .transform_ud = m,
                             .resync = opts->resync};
    int rc = kube_informer_new(opts->kube, &vo, &m->vacs);
    if (rc == 0)
        rc = kube_informer_start(m->vacs);
    if (rc < 0) {
        rsz_modify_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* initUncertainPVCs: claims InProgress at start-up keep their target. */
static void init_uncertain(void *ud, json_object *pvc)
{
    rsz_modify *m = ud;
    const char *st = rsz_pvc_modify_status(pvc);
    if (st && strcmp(st, RSZ_MOD_IN_PROGRESS) == 0) {
        char *key = kube_key(pvc);
        set_uncertain(m, key, true);
        free(key);
    }
}

int rsz_modify_start(rsz_modify *m)
{
    int rc = kube_informer_wait_for_sync(m->vacs, 5 * UTIL_MINUTE);
    if (rc < 0)
        return util_err_set(rc, "the VolumeAttributesClass cache did not sync");
    kube_informer_each(m->pvcs, init_uncertain, m);
    int n = m->o.workers > 0 ? m->o.workers : 1;
    wq_pool_opts po = {.max_workers = n,
                       .min_workers = 0,
                       .idle_exit = WORKER_IDLE_EXIT,
                       .slow_delay = m->o.retry_max,
                       .sync = claim_work,
                       .ud = m};
    rc = wq_pool_start(m->q, &po);
    m->pool = rc == 0;
    if (rc == 0)
        obs_info("Starting external resizer for modify volume %s", m->cfg.driver_name);
    return rc;
}

void rsz_modify_free(rsz_modify *m)
{
    if (!m)
        return;
    kube_informer_stop(m->vacs);
    wq_shutdown(m->q, false);
    if (m->pool)
        wq_pool_join(m->q);
    kube_informer_free(m->vacs);
    wq_free(m->q);
    lh_table_free(m->uncertain);
    lh_table_free(m->slow);
    kube_overlay_free(m->written);
    pthread_mutex_destroy(&m->mu);
    free(m);
}
