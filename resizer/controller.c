/*
 * The resizer's controller: claims bound to a PV of this driver that ask for
 * more storage are expanded with ControllerExpandVolume (or, for a driver
 * that expands on the node only, handed to the kubelet at once), then the PV
 * and the claim's status are written as upstream's external-resizer does.
 *
 * Informer events only queue claim keys ("ns/name") on one queue
 * ("<driver>-pvc", upstream's name) served by up to --workers threads. The
 * PV cache holds this driver's volumes only, the claim cache bound claims
 * only. A resize costs three API writes: the claim's status (in progress,
 * with allocatedResources), the PV's capacity, the claim's status again
 * (node expansion pending, or done). Each answer is kept ("overlay") until
 * the informer shows that version or a newer one, so the next sync never
 * reads an older copy than the one we wrote (upstream updates its informer
 * store for the same reason); a claim write carries the resourceVersion it
 * was built from, so a stale copy costs a 409 and a retry, never lost data.
 *
 * Upstream's RecoverVolumeExpansionFailure bookkeeping lives here too: the
 * claims whose last expansion failed finally, and the "slow set" of claims
 * the driver called infeasible, retried at --retry-interval-max only while
 * the size asked stays the same.
 *
 * With --handle-volume-inuse-error (upstream's default) a pod informer
 * tells which claims unfinished pods use. Its cache is the whole store: it
 * keeps only unfinished pods with claim volumes, cut down to their names and
 * claim names (rsz_pod_slim), with an index "claim" -> pods. A claim whose
 * last ControllerExpandVolume answered FAILED_PRECONDITION (the driver
 * expands offline only) is not sent to the driver again while the index
 * names a pod for it; the claim's backoff retries find out when it is free,
 * as upstream's do.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/linkhash.h>

#include "kobj/kobj.h"
#include "modify.h"
#include "resizer.h"
#include "wq/wq.h"

#define WORKER_IDLE_EXIT (30 * UTIL_SECOND)

/* What we last wrote of an object, until the informer catches up. */
struct rsz_ctrl {
    rsz_ctrl_opts o;
    rsz_config cfg;
    kube_informer *pvcs, *pvs;
    kube_informer *pods; /* NULL without --handle-volume-inuse-error */
    rsz_modify *modify;  /* NULL without the modify controller */
    wq *q;
    bool pool;
    pthread_mutex_t mu;     /* guards the three tables */
    kube_overlay *overlay;  /* "pvc:ns/name" or "pv:name": our writes' answers */
    struct lh_table *slow;  /* claim key -> util_duration* (monotonic time added) */
    struct lh_table *final; /* claim keys whose last expansion failed finally */
    struct lh_table *inuse; /* claim UIDs whose last expansion answered "in use" */
};

/* ---- tables ------------------------------------------------------------------------------- */

static void free_entry(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free((void *)lh_entry_v(e));
}

/* Puts (value != NULL, ownership taken) or removes `key`; caller holds mu. */
static void table_set(struct lh_table *t, const char *key, void *value)
{
    lh_table_delete(t, key);
    if (value)
        lh_table_insert(t, util_strdup(key), value);
}

static void set_final(rsz_ctrl *c, const char *key, bool on)
{
    pthread_mutex_lock(&c->mu);
    table_set(c->final, key, on ? util_strdup("1") : NULL);
    pthread_mutex_unlock(&c->mu);
}

static bool has_final(rsz_ctrl *c, const char *key)
{
    pthread_mutex_lock(&c->mu);
    bool r = lh_table_lookup_entry(c->final, key) != NULL;
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* In the slow set and not expired: *left is what remains of the period. */
static bool slow_contains(rsz_ctrl *c, const char *key, util_duration *left)
{
    pthread_mutex_lock(&c->mu);
    struct lh_entry *e = lh_table_lookup_entry(c->slow, key);
    bool r = false;
    if (e) {
        util_duration age = util_now_mono() - *(const util_duration *)lh_entry_v(e);
        if (age < c->o.retry_max) {
            r = true;
            *left = c->o.retry_max - age;
        } else {
            lh_table_delete(c->slow, key);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return r;
}

static void slow_add(rsz_ctrl *c, const char *key)
{
    pthread_mutex_lock(&c->mu);
    if (!lh_table_lookup_entry(c->slow, key)) {
        util_duration *at = util_calloc(1, sizeof(*at));
        *at = util_now_mono();
        lh_table_insert(c->slow, util_strdup(key), at);
    }
    pthread_mutex_unlock(&c->mu);
}

static void slow_remove(rsz_ctrl *c, const char *key)
{
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->slow, key);
    pthread_mutex_unlock(&c->mu);
}

/* ---- the overlay --------------------------------------------------------------------------- */

static char *overlay_key(const char *kind, const json_object *obj)
{
    const char *ns = kobj_namespace(obj), *name = kobj_name(obj);
    return ns && *ns ? util_asprintf("%s:%s/%s", kind, ns, name ? name : "")
                     : util_asprintf("%s:%s", kind, name ? name : "");
}

static void overlay_put(rsz_ctrl *c, const char *kind, const json_object *obj)
{
    char *k = overlay_key(kind, obj);
    kube_overlay_put(c->overlay, k, obj);
    free(k);
}

/* The fresher of the cached copy and what we wrote (NULL stays NULL). */
static json_object *fresh(rsz_ctrl *c, const char *kind, json_object *cached)
{
    if (!cached)
        return NULL;
    char *k = overlay_key(kind, cached);
    json_object *use = kube_overlay_fresh(c->overlay, k, cached);
    free(k);
    return use;
}

/* ---- volumes in use ------------------------------------------------------------------------ */

#define POD_INDEX "claim"

static void set_inuse(rsz_ctrl *c, const json_object *pvc, bool on)
{
    const char *uid = kobj_uid(pvc);
    pthread_mutex_lock(&c->mu);
    table_set(c->inuse, uid ? uid : "", on ? util_strdup("1") : NULL);
    pthread_mutex_unlock(&c->mu);
}

static bool has_inuse(rsz_ctrl *c, const json_object *pvc)
{
    const char *uid = kobj_uid(pvc);
    pthread_mutex_lock(&c->mu);
    bool r = lh_table_lookup_entry(c->inuse, uid ? uid : "") != NULL;
    pthread_mutex_unlock(&c->mu);
    return r;
}

static void count_pod(void *ud, json_object *pod)
{
    (void)pod;
    (*(size_t *)ud)++;
}

/* Unfinished pods that use the claim (0 without the pod informer). */
static size_t pods_using(rsz_ctrl *c, const json_object *pvc)
{
    size_t n = 0;
    if (!c->pods)
        return 0;
    char *key = kube_key(pvc);
    kube_informer_by_index(c->pods, POD_INDEX, key, count_pod, &n);
    free(key);
    return n;
}

static void forget_claim(rsz_ctrl *c, const json_object *pvc)
{
    char *key = kube_key(pvc);
    char *k = overlay_key("pvc", pvc);
    const char *uid = kobj_uid(pvc);
    kube_overlay_forget(c->overlay, k);
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->slow, key);
    lh_table_delete(c->final, key);
    lh_table_delete(c->inuse, uid ? uid : "");
    pthread_mutex_unlock(&c->mu);
    wq_forget(c->q, key);
    free(k);
    free(key);
}

/* ---- API writes ------------------------------------------------------------------------------ */

/*
 * A merge patch; the answer goes to the overlay and, when `answer`, to the
 * caller. -EREMOTEIO (conflict: *conflict) with `what` and the API's message.
 */
static int patch(rsz_ctrl *c, const char *kind, const json_object *obj, bool status, char *text,
                 const char *what, bool *conflict, json_object **answer)
{
    if (conflict)
        *conflict = false;
    const kube_resource *res = strcmp(kind, "pvc") == 0 ? &KUBE_PVC : &KUBE_PV;
    char *path = kube_path(res, kobj_namespace(obj), kobj_name(obj), status ? "status" : NULL);
    kube_resp r = {0};
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_MERGE, text, &r);
    if (rc == 0 && r.body && kube_object_check(res, r.body, kobj_name(obj)) == 0) {
        overlay_put(c, kind, r.body);
        if (answer)
            *answer = json_object_get(r.body);
    } else if (rc == 0) {
        /* An answer the informer would refuse is not a copy to sync from. */
        obs_v(2, "PATCH %s: the answer is not used: %s", path,
              r.body ? util_err_last() : "no body");
    } else {
        if (conflict)
            *conflict = kube_is_conflict(&r);
        rc = util_err_set(rc, "%s: %s", what, r.message);
    }
    obs_v(5, "PATCH %s %s: %d", path, text, r.code);
    kube_resp_clear(&r);
    free(path);
    free(text);
    return rc;
}

/* The Secret of the PV's controllerExpandSecretRef, read every time as
 * upstream does; *secret NULL when the PV has none. */
static int fetch_secret(rsz_ctrl *c, const json_object *pv, json_object **secret)
{
    *secret = NULL;
    const char *ns, *name;
    int rc = rsz_secret_ref(pv, &ns, &name);
    if (rc < 0 || !name)
        return rc;
    char *path = kube_path(&KUBE_SECRET, ns, name, NULL);
    kube_resp r = {0};
    rc = kube_get(c->o.kube, path, &r);
    free(path);
    if (rc == 0)
        *secret = json_object_get(r.body);
    else
        rc = util_err_set(rc, "error getting secret %s in namespace %s: %s", name, ns, r.message);
    kube_resp_clear(&r);
    return rc;
}

/* ---- the driver call ------------------------------------------------------------------------ */

struct result {
    char *size; /* the new size as the API prints it */
    bool fs;    /* node expansion required */
    int code;   /* the driver's gRPC code on failure; 0 when it was not asked */
    char *err;  /* failure text */
};

static void result_clear(struct result *res)
{
    free(res->size);
    free(res->err);
}

static int resize(rsz_ctrl *c, const json_object *pv, const rsz_plan *plan, struct result *res)
{
    *res = (struct result){0};
    if (c->cfg.trivial) {
        /* Node expansion only: nothing for the controller to do but hand it on. */
        res->size = util_strdup(plan->new_size);
        res->fs = true;
        return 0;
    }
    Csi__V1__ControllerExpandVolumeRequest *req = NULL;
    json_object *secret = NULL;
    int rc = rsz_expand_request(&c->cfg, pv, plan->new_bytes, &req);
    if (rc == 0)
        rc = fetch_secret(c, pv, &secret);
    if (rc == 0 && secret)
        rc = rsz_request_set_secrets(req, secret);
    json_object_put(secret);
    if (rc < 0) {
        res->err = util_strdup(util_err_last());
        rsz_request_free(req);
        return rc;
    }
    Csi__V1__ControllerExpandVolumeResponse *resp = NULL;
    csi_status st;
    obs_v(4, "ControllerExpandVolume of %s to %lld bytes", kobj_name(pv) ? kobj_name(pv) : "",
          (long long)plan->new_bytes);
    rc = csi_controller_expand_volume(c->o.csi, req, c->o.timeout, &resp, &st);
    rsz_request_free(req);
    if (rc < 0) {
        res->code = st.code;
        res->err = csi_status_text(&st);
        return rc;
    }
    char q[UTIL_QUANTITY_MAX];
    util_quantity_format(resp->capacity_bytes, q, sizeof(q));
    res->size = util_strdup(q);
    res->fs = resp->node_expansion_required;
    csi__v1__controller_expand_volume_response__free_unpacked(resp, NULL);
    return 0;
}

/* ---- sync ------------------------------------------------------------------------------------ */

static void event(rsz_ctrl *c, const json_object *pvc, bool warning, const char *reason,
                  const char *msg)
{
    if (c->o.events)
        kube_event(c->o.events, pvc, warning ? "Warning" : "Normal", reason, "%s", msg);
}

/* Records a final failure on the claim (recovery bookkeeping). */
static void record_failure(rsz_ctrl *c, const char *key, json_object **pvc,
                           const struct result *res)
{
    if (!rsz_error_final(res->code)) {
        slow_remove(c, key);
        set_final(c, key, false);
        return;
    }
    set_final(c, key, true);
    bool infeasible = rsz_error_infeasible(res->code);
    if (!infeasible)
        slow_remove(c, key);
    char *text = rsz_patch_failed(*pvc, res->err, infeasible, time(NULL));
    json_object *answer = NULL;
    if (patch(c, "pvc", *pvc, true, text, "mark PVC as controller expansion failed", NULL,
              &answer) < 0)
        obs_warn("resizing %s failed in controller with %s but failed to update the PVC: %s", key,
                 res->err, util_err_last());
    if (answer) {
        json_object_put(*pvc);
        *pvc = answer;
    }
}

static int expand(rsz_ctrl *c, const char *key, json_object **pvc, json_object *pv,
                  const rsz_plan *plan)
{
    const char *pv_name = kobj_name(pv) ? kobj_name(pv) : "";
    json_object *answer = NULL;
    bool conflict = false;
    int rc =
        patch(c, "pvc", *pvc, true,
              rsz_patch_in_progress(&c->cfg, *pvc, plan->new_size, plan->update_status, time(NULL)),
              "marking pvc as resizing failed", &conflict, &answer);
    if (rc < 0)
        return rc;
    /* The capacity recorded before: what the PV annotation keeps. */
    const char *old_cap = kobj_str(kobj_path(*pvc, "status.capacity"), "storage");
    char *pre = util_strdup(old_cap ? old_cap : "0");
    if (answer) {
        json_object_put(*pvc);
        *pvc = answer;
    }
    if (rsz_inuse_blocks(has_inuse(c, *pvc), pods_using(c, *pvc))) {
        /* Offline expansion only, and a pod still uses the volume: no
         * driver call until the backoff finds the claim free. */
        char *text = rsz_inuse_text(*pvc, c->cfg.driver_name);
        event(c, *pvc, true, RSZ_EV_FAILED, text);
        rc = util_err_set(-EBUSY, "%s", text);
        free(text);
        free(pre);
        return rc;
    }
    char *msg = util_asprintf("External resizer is resizing volume %s", pv_name);
    event(c, *pvc, false, RSZ_EV_RESIZING, msg);
    free(msg);

    struct result res;
    /* Forgotten before each call; the answer records it again if so. */
    set_inuse(c, *pvc, false);
    rc = resize(c, pv, plan, &res);
    if (rc < 0) {
        if (rsz_error_inuse(res.code))
            set_inuse(c, *pvc, true);
        if (c->cfg.recover)
            record_failure(c, key, pvc, &res);
        char *text = rsz_failed_text(pv_name, c->cfg.driver_name, res.err);
        event(c, *pvc, true, RSZ_EV_FAILED, text);
        rc = util_err_set(rc, "%s", text);
        free(text);
        result_clear(&res);
        free(pre);
        return rc;
    }
    set_final(c, key, false);
    slow_remove(c, key);

    const char *what = "updating the PV's capacity";
    rc = patch(c, "pv", pv, false,
               rsz_patch_pv_capacity(pv, res.size, c->cfg.annotate_resize && res.fs ? pre : NULL),
               what, &conflict, NULL);
    free(pre);
    if (rc == 0 && res.fs) {
        what = "mark PVC as node expansion required";
        rc = patch(c, "pvc", *pvc, true, rsz_patch_node_pending(&c->cfg, *pvc, time(NULL)), what,
                   &conflict, NULL);
        if (rc == 0)
            event(c, *pvc, false, RSZ_EV_FS_RESIZE, RSZ_MSG_FS_RESIZE);
    } else if (rc == 0) {
        what = "mark PVC as resize finished";
        rc = patch(c, "pvc", *pvc, true, rsz_patch_finished(&c->cfg, *pvc, res.size, time(NULL)),
                   what, &conflict, NULL);
        if (rc == 0)
            event(c, *pvc, false, RSZ_EV_SUCCESS, RSZ_MSG_SUCCESS);
    }
    /* Upstream's legacy path keeps conflicts quiet (they are retried). */
    if (rc < 0 && (c->cfg.recover || !conflict)) {
        char *text = util_strdup(util_err_last());
        event(c, *pvc, true, RSZ_EV_FAILED, text);
        util_err_set(rc, "%s", text);
        free(text);
    }
    result_clear(&res);
    return rc;
}

static int sync_claim(rsz_ctrl *c, const char *key)
{
    char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = strndup(key, (size_t)(slash - key));
    json_object *pvc = fresh(c, "pvc", kube_informer_get(c->pvcs, ns, slash + 1));
    free(ns);
    if (!pvc)
        return 0; /* deleted */
    int rc = 0;
    json_object *pv = NULL;
    const char *vol = kobj_path_str(pvc, "spec.volumeName");
    if (!vol || !*vol)
        goto out;
    pv = fresh(c, "pv", kube_informer_get(c->pvs, NULL, vol));
    if (!pv) {
        /* The cache holds this driver's PVs only: a PV missing there is
         * another driver's (nothing to do) or not seen yet (retry, as
         * upstream does). One GET tells them apart; an answer that is not
         * a well-formed PV proves nothing (retry). */
        char *path = kube_path(&KUBE_PV, NULL, vol, NULL);
        kube_resp r = {0};
        bool foreign = kube_get(c->o.kube, path, &r) == 0 &&
                       kube_object_check(&KUBE_PV, r.body, vol) == 0 &&
                       !rsz_pv_is_ours(&c->cfg, r.body);
        kube_resp_clear(&r);
        free(path);
        if (!foreign)
            rc = util_err_set(-ENOENT, "PV %s bound to pvc %s not found", vol, key);
        goto out;
    }
    if (c->cfg.annotate_resize && rsz_pv_drop_pre_resize(pvc, pv)) {
        rc = patch(c, "pv", pv, false, rsz_patch_pv_drop_pre_resize(),
                   "failed removing the pre-resize-capacity annotation", NULL, NULL);
        if (rc < 0)
            goto out;
    }
    if (!rsz_pvc_needs_resize(pvc))
        goto out;
    util_duration left = 0;
    bool slow = c->cfg.recover && slow_contains(c, key, &left);
    if (c->cfg.recover && strcmp(rsz_pvc_resize_status(pvc), RSZ_STATUS_CONTROLLER_INFEASIBLE) == 0)
        slow_add(c, key);
    rsz_plan plan;
    rc = rsz_plan_expand(&c->cfg, pvc, pv, has_final(c, key), slow, &plan);
    if (rc < 0 || plan.step == RSZ_NONE)
        goto out;
    if (plan.step == RSZ_DELAY) {
        obs_v(4,
              "skipping volume expansion for pvc %s, because expansion previously failed "
              "with infeasible error",
              key);
        wq_add_after(c->q, key, left);
        goto out;
    }
    rc = expand(c, key, &pvc, pv, &plan);
out:
    if (rc < 0)
        obs_error("Error syncing PVC %s: %s", key, util_err_last());
    json_object_put(pv);
    json_object_put(pvc);
    return rc;
}

static int claim_work(void *ud, const char *key)
{
    return sync_claim(ud, key);
}

/* ---- informers ------------------------------------------------------------------------------- */

static void queue_claim(rsz_ctrl *c, const json_object *pvc)
{
    char *key = kube_key(pvc);
    wq_add(c->q, key);
    free(key);
}

static void pvc_added(void *ud, json_object *pvc)
{
    rsz_ctrl *c = ud;
    if (!c->cfg.no_resize)
        queue_claim(c, pvc);
    rsz_modify_pvc_added(c->modify, pvc);
}

static void pvc_updated(void *ud, json_object *old, json_object *pvc)
{
    rsz_ctrl *c = ud;
    if (!c->cfg.no_resize && rsz_pvc_update_needs_sync(&c->cfg, old, pvc))
        queue_claim(c, pvc);
    rsz_modify_pvc_updated(c->modify, old, pvc);
}

static void pvc_deleted(void *ud, json_object *pvc)
{
    rsz_ctrl *c = ud;
    forget_claim(c, pvc);
    rsz_modify_pvc_deleted(c->modify, pvc);
}

static bool keep_pvc(void *ud, const json_object *pvc)
{
    (void)ud;
    const char *v = kobj_path_str(pvc, "spec.volumeName");
    return v && *v;
}

static bool keep_pv(void *ud, const json_object *pv)
{
    const rsz_ctrl *c = ud;
    return rsz_pv_is_ours(&c->cfg, pv);
}

static void slim(void *ud, json_object *obj)
{
    (void)ud;
    json_object *md = kobj_obj(obj, "metadata");
    kobj_del(md, "managedFields");
    kobj_del(kobj_obj(md, "annotations"), "kubectl.kubernetes.io/last-applied-configuration");
}

static void slim_pv(void *ud, json_object *obj)
{
    slim(ud, obj);
    kobj_del(obj, "status");
}

static void slim_pod(void *ud, json_object *pod)
{
    (void)ud;
    rsz_pod_slim(pod);
}

static bool keep_pod(void *ud, const json_object *pod)
{
    (void)ud;
    return rsz_pod_uses_claims(pod);
}

static int informer(rsz_ctrl *c, const kube_resource *res, void (*tr)(void *, json_object *),
                    bool (*keep)(void *, const json_object *), kube_handlers h, kube_informer **out)
{
    kube_informer_opts o = {.res = res,
                            .transform = tr,
                            .transform_ud = c,
                            .keep = keep,
                            .resync = c->o.resync,
                            .handlers = h};
    return kube_informer_new(c->o.kube, &o, out);
}

int rsz_ctrl_start(const rsz_ctrl_opts *opts, const rsz_config *cfg, rsz_ctrl **out)
{
    *out = NULL;
    rsz_ctrl *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    c->cfg = *cfg;
    pthread_mutex_init(&c->mu, NULL);
    c->overlay = kube_overlay_new();
    c->slow = lh_kchar_table_new(16, free_entry);
    c->final = lh_kchar_table_new(16, free_entry);
    c->inuse = lh_kchar_table_new(16, free_entry);
    char *qname = util_asprintf("%s-pvc", cfg->driver_name ? cfg->driver_name : "");
    c->q = wq_new(&(wq_opts){.name = qname,
                             .base_delay = opts->retry_start,
                             .max_delay = opts->retry_max,
                             .metrics = opts->metrics});
    free(qname);
    int rc = informer(c, &KUBE_PV, slim_pv, keep_pv, (kube_handlers){0}, &c->pvs);
    if (rc == 0)
        rc = informer(c, &KUBE_PVC, slim, keep_pvc,
                      (kube_handlers){pvc_added, pvc_updated, pvc_deleted, c, false}, &c->pvcs);
    /* Before the claim informer starts: its events reach the modify queue. */
    if (rc == 0 && cfg->modify)
        rc = rsz_modify_new(opts, cfg, c->pvcs, c->pvs, &c->modify);
    if (rc == 0 && opts->handle_inuse && !cfg->no_resize) {
        /* No handlers: the cache and its index are the in-use store. */
        kube_informer_opts po = {
            .res = &KUBE_POD, .transform = slim_pod, .transform_ud = c, .keep = keep_pod};
        rc = kube_informer_new(c->o.kube, &po, &c->pods);
        if (rc == 0)
            rc = kube_informer_add_index(c->pods, POD_INDEX, rsz_pod_claim_keys);
        if (rc == 0)
            rc = kube_informer_start(c->pods);
    }
    if (rc == 0)
        rc = kube_informer_start(c->pvs);
    if (rc == 0)
        rc = kube_informer_start(c->pvcs);
    if (rc == 0)
        rc = kube_informer_wait_for_sync(c->pvs, 5 * UTIL_MINUTE);
    if (rc == 0)
        rc = kube_informer_wait_for_sync(c->pvcs, 5 * UTIL_MINUTE);
    if (rc == 0 && c->pods)
        rc = kube_informer_wait_for_sync(c->pods, 5 * UTIL_MINUTE);
    int n = opts->workers > 0 ? opts->workers : 1;
    /* --workers is a maximum: idle, no thread is kept (each would keep its
     * stack and malloc cache); a burst grows the pool. */
    wq_pool_opts po = {.max_workers = n,
                       .min_workers = 0,
                       .idle_exit = WORKER_IDLE_EXIT,
                       .slow_delay = opts->retry_max,
                       .sync = claim_work,
                       .ud = c};
    if (rc == 0 && !cfg->no_resize) {
        rc = wq_pool_start(c->q, &po);
        c->pool = rc == 0;
    }
    if (rc == 0 && c->modify)
        rc = rsz_modify_start(c->modify);
    if (rc < 0) {
        util_err_set(rc, "starting the resizer failed: %s", util_err_last());
        rsz_ctrl_stop(c);
        return rc;
    }
    malloc_trim(0);
    obs_info("Starting external resizer %s: up to %d workers%s%s", cfg->driver_name, n,
             cfg->no_resize ? " (modify only)"
             : cfg->trivial ? " (node expansion only)"
                            : "",
             c->pods ? ", volumes in use tracked" : "");
    *out = c;
    return 0;
}

void rsz_ctrl_stop(rsz_ctrl *c)
{
    if (!c)
        return;
    kube_informer_stop(c->pvcs);
    kube_informer_stop(c->pvs);
    kube_informer_stop(c->pods);
    rsz_modify_free(c->modify);
    wq_shutdown(c->q, false);
    if (c->pool)
        wq_pool_join(c->q);
    kube_informer_free(c->pvcs);
    kube_informer_free(c->pvs);
    kube_informer_free(c->pods);
    wq_free(c->q);
    kube_overlay_free(c->overlay);
    lh_table_free(c->slow);
    lh_table_free(c->final);
    lh_table_free(c->inuse);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
