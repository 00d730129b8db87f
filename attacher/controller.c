/*
 * The attacher's controller: VolumeAttachments (VAs) of this driver are
 * attached with ControllerPublishVolume and, once deleted, detached with
 * ControllerUnpublishVolume; PVs keep our finalizer while a VA uses them.
 *
 * Informer events only queue keys. Attaches and detaches have queues of
 * their own (csi-attacher-va, csi-attacher-va-detach), each with
 * --worker-threads workers, so a burst of one never starves the other
 * (external-attacher#761); PVs have csi-attacher-pv. A VA key is routed by
 * its state when queued, and sync_va decides again from the state it
 * reads, so a key in the "wrong" queue still does the right thing. A small
 * in-flight set keeps one VA on one worker at a time across both queues: a
 * key busy in the other queue comes back after a short delay.
 *
 * API writes: first attach of a PV 3 (PV finalizer, VA finalizer + node-id
 * annotation in one JSON patch, status), later attaches 2, a detach of a VA
 * being deleted 1 (the finalizer removal lets the API server delete it, so
 * the status reset is skipped). Every object we write comes back in the
 * answer; that copy is kept ("overlay", by uid) until the informer shows
 * the same or a newer resourceVersion, and syncs read it instead of an
 * older cached copy. A stale cache therefore never causes a repeated
 * publish, patch or ControllerUnpublish (upstream #587). A VA whose detach
 * completed stays marked until its delete event.
 *
 * Drivers without ControllerPublish get the trivial handler: VAs of the
 * driver are marked attached; no finalizer, no CSI call, no detach.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/linkhash.h>

#include "internal.h"
#include "kobj/kobj.h"

#define BUSY_RETRY      (50 * UTIL_MS)
#define OVERLAY_MAX_AGE (5 * UTIL_MINUTE)

/* What we last wrote of an object, until the informer catches up. */
struct written {
    char *json;       /* the API server's answer; NULL for a tombstone */
    char *rv;         /* its resourceVersion */
    bool detached;    /* a VA whose detach completed: skip until deleted */
    util_duration at; /* monotonic time of the write */
};

struct att_ctrl {
    att_ctrl_opts o;
    att_config cfg;
    char *fin;
    kube_informer *vas, *pvs, *csinodes, *nodes;
    att_queue *attach_q, *detach_q, *pv_q;
    pthread_mutex_t mu;       /* guards the three tables below */
    struct lh_table *busy;    /* VA names on a worker now */
    struct lh_table *overlay; /* uid -> struct written */
    struct lh_table *forced;  /* VA names the reconcile wants synced */
    pthread_t *threads;
    int n_threads;
    att_reconciler *reconciler;
};

/* ---- tables ------------------------------------------------------------------------ */

static void free_key(struct lh_entry *e)
{
    free(lh_entry_k(e));
}

static void free_written(struct lh_entry *e)
{
    struct written *w = lh_entry_v(e);
    free(lh_entry_k(e));
    if (w) {
        free(w->json);
        free(w->rv);
        free(w);
    }
}

static bool set_has(att_ctrl *c, struct lh_table *t, const char *key)
{
    pthread_mutex_lock(&c->mu);
    bool r = key && lh_table_lookup_entry(t, key) != NULL;
    pthread_mutex_unlock(&c->mu);
    return r;
}

static void set_put(att_ctrl *c, struct lh_table *t, const char *key, bool on)
{
    if (!key)
        return;
    pthread_mutex_lock(&c->mu);
    bool has = lh_table_lookup_entry(t, key) != NULL;
    if (on && !has)
        lh_table_insert(t, util_strdup(key), NULL);
    else if (!on && has)
        lh_table_delete(t, key);
    pthread_mutex_unlock(&c->mu);
}

/* ---- the overlay of our own writes ----------------------------------------------------- */

/* Keeps the answer `obj` of a write (an object with metadata.uid). */
static void overlay_put(att_ctrl *c, const kube_resource *res, const json_object *obj,
                        bool detached)
{
    const char *uid = kobj_uid(obj), *rv = kobj_rv(obj);
    if (!uid)
        return;
    /* An answer the informer would refuse is not a copy to sync from:
     * the next event or list brings the object as it is. */
    if (kube_object_check(res, obj, NULL) < 0) {
        obs_v(2, "the answer of a write is not used: %s", util_err_last());
        return;
    }
    struct written *w = util_calloc(1, sizeof(*w));
    w->json = kobj_to_text(obj, NULL);
    w->rv = util_strdup(rv ? rv : "");
    w->detached = detached;
    w->at = util_now_mono();
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->overlay, uid);
    lh_table_insert(c->overlay, util_strdup(uid), w);
    pthread_mutex_unlock(&c->mu);
}

/* Marks a VA detached when the API answered without the object (404). */
static void overlay_tombstone(att_ctrl *c, const json_object *va)
{
    const char *uid = kobj_uid(va);
    if (!uid)
        return;
    struct written *w = util_calloc(1, sizeof(*w));
    w->rv = util_strdup("");
    w->detached = true;
    w->at = util_now_mono();
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->overlay, uid);
    lh_table_insert(c->overlay, util_strdup(uid), w);
    pthread_mutex_unlock(&c->mu);
}

/* An informer event about `obj`: our write is superseded once the cache
 * holds its resourceVersion or a newer one. A detached VA stays marked
 * until it is deleted. */
static void overlay_seen(att_ctrl *c, const json_object *obj, bool deleted)
{
    const char *uid = kobj_uid(obj);
    if (!uid)
        return;
    pthread_mutex_lock(&c->mu);
    struct written *w = NULL;
    if (lh_table_lookup_ex(c->overlay, uid, (void **)&w) && w) {
        int cmp = kobj_rv_cmp(kobj_rv(obj), w->rv);
        if (deleted || (!w->detached && cmp >= 0))
            lh_table_delete(c->overlay, uid);
    }
    pthread_mutex_unlock(&c->mu);
}

/*
 * The freshest copy of a cached object: our last write's answer when it is
 * newer than `cached` (which is released then), else `cached`. *detached
 * (may be NULL) tells a VA whose detach completed.
 */
static json_object *fresh(att_ctrl *c, json_object *cached, bool *detached)
{
    if (detached)
        *detached = false;
    const char *uid = kobj_uid(cached);
    if (!uid)
        return cached;
    char *text = NULL;
    pthread_mutex_lock(&c->mu);
    struct written *w = NULL;
    if (lh_table_lookup_ex(c->overlay, uid, (void **)&w) && w) {
        int cmp = kobj_rv_cmp(w->rv, kobj_rv(cached));
        bool newer = cmp > 0 || (cmp == -2 && util_now_mono() - w->at < OVERLAY_MAX_AGE);
        if (detached)
            *detached = w->detached;
        if (newer && w->json)
            text = util_strdup(w->json);
    }
    pthread_mutex_unlock(&c->mu);
    if (!text)
        return cached;
    json_object *o = kobj_parse_text(text, strlen(text));
    free(text);
    if (!o)
        return cached;
    json_object_put(cached);
    return o;
}

/* ---- API helpers --------------------------------------------------------------------- */

static char *va_path(const char *name, const char *sub)
{
    return kube_path(&KUBE_VOLUMEATTACHMENT, NULL, name, sub);
}

/* A merge patch of the VA's status; the answer goes to the overlay.
 * -ENOENT when the VA is gone. */
static int patch_status(att_ctrl *c, const char *name, char *patch)
{
    char *path = va_path(name, "status");
    kube_resp r = {0};
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_MERGE, patch, &r);
    if (rc == 0 && r.body)
        overlay_put(c, &KUBE_VOLUMEATTACHMENT, r.body, false);
    else if (rc < 0)
        rc = util_err_set(kube_is_not_found(&r) ? -ENOENT : rc, "status of VolumeAttachment %s: %s",
                          name, r.message);
    kube_resp_clear(&r);
    free(path);
    free(patch);
    return rc;
}

static void save_error(att_ctrl *c, const char *name, bool attach, const char *msg, int code)
{
    char *patch = attach ? att_status_attach_error(msg, code, time(NULL))
                         : att_status_detach_error(msg, time(NULL));
    if (patch_status(c, name, patch) < 0)
        obs_warn("saving the %s error of VolumeAttachment %s: %s", attach ? "attach" : "detach",
                 name, util_err_last());
}

/*
 * A JSON patch built from `obj` by `build`; when its `test` finds the cache
 * was stale (422), the live object is read and the patch built once more.
 * The answer goes to the overlay. *gone is set on 404.
 */
typedef int (*patch_builder)(att_ctrl *c, const json_object *obj, const void *arg, char **patch);

static int json_patch(att_ctrl *c, const kube_resource *res, const char *path,
                      const json_object *obj, patch_builder build, const void *arg, bool *gone,
                      json_object **answer)
{
    if (gone)
        *gone = false;
    char *patch = NULL;
    int rc = build(c, obj, arg, &patch);
    if (rc < 0 || !patch)
        return rc;
    kube_resp r = {0};
    rc = kube_patch(c->o.kube, path, KUBE_PATCH_JSON, patch, &r);
    free(patch);
    patch = NULL;
    if (rc < 0 && r.code == 422) {
        kube_resp_clear(&r);
        /* Only a well-formed copy may decide the patch again: finalizers
         * of the wrong type would read as "nothing to remove". */
        rc = kube_get_object(c->o.kube, res, path, kobj_name(obj), &r);
        if (rc == 0) {
            json_object *live = json_object_get(r.body);
            kube_resp_clear(&r);
            rc = build(c, live, arg, &patch);
            json_object_put(live);
            if (rc < 0 || !patch)
                return rc;
            rc = kube_patch(c->o.kube, path, KUBE_PATCH_JSON, patch, &r);
            free(patch);
        }
    }
    if (rc == 0 && r.body) {
        overlay_put(c, res, r.body, false);
        if (answer)
            *answer = json_object_get(r.body);
    }
    if (rc < 0 && kube_is_not_found(&r) && gone) {
        *gone = true;
        rc = 0;
    } else if (rc < 0) {
        rc = util_err_set(rc, "patching %s: %s", path, r.message);
    }
    kube_resp_clear(&r);
    return rc;
}

static int build_add_pv_finalizer(att_ctrl *c, const json_object *pv, const void *arg, char **patch)
{
    (void)arg;
    *patch = NULL;
    if (kobj_has_finalizer(pv, c->fin))
        return 0;
    *patch = kobj_patch_add_finalizer(pv, c->fin, false);
    return *patch ? 0
                  : util_err_set(-EINVAL, "PersistentVolume %s: malformed metadata",
                                 kobj_name(pv) ? kobj_name(pv) : "");
}

static int build_remove_finalizer(att_ctrl *c, const json_object *obj, const void *arg,
                                  char **patch)
{
    (void)arg;
    *patch = kobj_patch_remove_finalizer(obj, c->fin); /* NULL: not there, done */
    return 0;
}

/* The node id for the VA's node; `va` given on detach (its annotation is a
 * fallback there). */
static int node_id_for(att_ctrl *c, const json_object *va, bool detach, char **out)
{
    const char *node = att_va_node(va);
    json_object *csinode = node && c->csinodes ? kube_informer_get(c->csinodes, NULL, node) : NULL;
    json_object *n = node && c->nodes ? kube_informer_get(c->nodes, NULL, node) : NULL;
    int rc = att_node_id(c->cfg.driver_name, node, csinode, n, detach ? va : NULL, out, NULL);
    json_object_put(csinode);
    json_object_put(n);
    return rc;
}

/* The data of the PV's controllerPublishSecretRef, fetched every time as
 * upstream does; *secret NULL when the PV has none. */
static int fetch_secret(att_ctrl *c, const json_object *pv, json_object **secret)
{
    *secret = NULL;
    const char *ns, *name;
    int rc = att_secret_ref(pv, &ns, &name);
    if (rc < 0 || !name)
        return rc;
    char *path = kube_path(&KUBE_SECRET, ns, name, NULL);
    kube_resp r = {0};
    rc = kube_get(c->o.kube, path, &r);
    free(path);
    if (rc == 0)
        *secret = json_object_get(r.body);
    else
        rc = util_err_set(rc, "failed to get secret %s/%s: %s", ns, name, r.message);
    kube_resp_clear(&r);
    return rc;
}

/* The PV named by the VA: the cache (freshest copy), else the API. */
static int get_pv(att_ctrl *c, const char *name, json_object **pv)
{
    *pv = kube_informer_get(c->pvs, NULL, name);
    if (*pv) {
        *pv = fresh(c, *pv, NULL);
        return 0;
    }
    char *path = kube_path(&KUBE_PV, NULL, name, NULL);
    kube_resp r = {0};
    int rc = kube_get(c->o.kube, path, &r);
    free(path);
    if (rc == 0 && r.body)
        *pv = json_object_get(r.body);
    else
        rc =
            util_err_set(-ENOENT, "PersistentVolume %s not found%s%s", name,
                         kube_is_not_found(&r) ? "" : ": ", kube_is_not_found(&r) ? "" : r.message);
    kube_resp_clear(&r);
    return rc;
}

/* ---- attach ---------------------------------------------------------------------------- */

/* `arg` is the node id. */
static int build_va_meta(att_ctrl *c, const json_object *va, const void *arg, char **patch)
{
    return att_patch_va_meta(va, c->fin, arg, patch);
}

/* Everything before the CSI call; errors are stored in attachError. */
static int prepare_attach(att_ctrl *c, const json_object *va,
                          Csi__V1__ControllerPublishVolumeRequest **req)
{
    const char *name = kobj_name(va), *pv_name = NULL;
    int rc = att_va_source(va, &pv_name);
    if (rc < 0)
        return rc;
    json_object *pv = NULL;
    rc = get_pv(c, pv_name, &pv);
    if (rc < 0)
        return rc;
    char *node_id = NULL;
    json_object *secret = NULL;
    if (kobj_deleting(pv)) {
        rc = util_err_set(-EINVAL, "PersistentVolume %s is marked for deletion", pv_name);
        goto out;
    }
    /* 1: the PV keeps our finalizer while it is attached anywhere. */
    char *pv_path = kube_path(&KUBE_PV, NULL, pv_name, NULL);
    bool gone = false;
    rc = json_patch(c, &KUBE_PV, pv_path, pv, build_add_pv_finalizer, NULL, &gone, NULL);
    free(pv_path);
    if (rc == 0 && gone)
        rc = util_err_set(-ENOENT, "PersistentVolume %s not found", pv_name);
    if (rc < 0)
        goto out;
    rc = node_id_for(c, va, false, &node_id);
    if (rc < 0)
        goto out;
    rc = att_publish_request(&c->cfg, pv, node_id, req);
    if (rc == 0)
        rc = fetch_secret(c, pv, &secret);
    if (rc == 0 && secret)
        rc = att_publish_set_secrets(*req, secret);
    if (rc < 0)
        goto out;
    /* 2: our finalizer and the node id on the VA, in one write, before the
     * driver is asked: a crash after the call leaves a VA we will detach. */
    char *path = va_path(name, NULL);
    rc = json_patch(c, &KUBE_VOLUMEATTACHMENT, path, va, build_va_meta, node_id, &gone, NULL);
    free(path);
    if (rc == 0 && gone)
        rc = util_err_set(-ENOENT, "VolumeAttachment %s not found", name);
out:
    if (rc < 0) {
        att_request_free(*req ? &(*req)->base : NULL);
        *req = NULL;
    }
    json_object_put(secret);
    json_object_put(pv);
    free(node_id);
    return rc;
}

static int attach(att_ctrl *c, const json_object *va)
{
    const char *name = kobj_name(va);
    Csi__V1__ControllerPublishVolumeRequest *req = NULL;
    int rc = prepare_attach(c, va, &req);
    if (rc < 0 || !req) {
        obs_v(2, "attaching VolumeAttachment %s: %s", name, util_err_last());
        char *msg = util_strdup(util_err_last());
        save_error(c, name, true, msg, 0);
        free(msg);
        return rc < 0 ? rc : -EINVAL;
    }
    obs_v(4, "ControllerPublishVolume %s of VolumeAttachment %s", req->volume_id, name);
    Csi__V1__ControllerPublishVolumeResponse *resp = NULL;
    csi_status st = {0};
    rc = csi_controller_publish_volume(c->o.csi, req, c->o.timeout, &resp, &st);
    att_request_free(&req->base);
    if (rc < 0) {
        char *msg = csi_status_text(&st);
        obs_v(2, "attaching VolumeAttachment %s: %s", name, msg);
        save_error(c, name, true, msg, st.code);
        free(msg);
        return rc;
    }
    /* 3: the status, unless it says so already (a forced or repeated sync). */
    if (att_status_is_current(va, resp)) {
        csi__v1__controller_publish_volume_response__free_unpacked(resp, NULL);
        obs_v(4, "VolumeAttachment %s: status already current", name);
        return 0;
    }
    rc = patch_status(c, name, att_status_attached(resp));
    csi__v1__controller_publish_volume_response__free_unpacked(resp, NULL);
    if (rc < 0)
        obs_warn("%s", util_err_last());
    else
        obs_v(2, "VolumeAttachment %s attached", name);
    return rc;
}

/* ---- detach ---------------------------------------------------------------------------- */

/* Is the Node gone from the API (404 to a GET, not a cached absence)? */
static bool node_gone(att_ctrl *c, const char *node)
{
    if (!node)
        return false;
    char *path = kube_path(&KUBE_NODE, NULL, node, NULL);
    kube_resp r = {0};
    int rc = kube_get(c->o.kube, path, &r);
    bool gone = rc < 0 && kube_is_not_found(&r);
    kube_resp_clear(&r);
    free(path);
    return gone;
}

static int unpublish(att_ctrl *c, const json_object *va)
{
    const char *pv_name = NULL;
    int rc = att_va_source(va, &pv_name);
    if (rc < 0)
        return rc;
    json_object *pv = NULL, *secret = NULL;
    char *node_id = NULL;
    Csi__V1__ControllerUnpublishVolumeRequest *req = NULL;
    rc = get_pv(c, pv_name, &pv);
    if (rc == 0)
        rc = node_id_for(c, va, true, &node_id);
    if (rc == 0)
        rc = att_unpublish_request(pv, node_id, &req);
    if (rc == 0)
        rc = fetch_secret(c, pv, &secret);
    if (rc == 0 && secret)
        rc = att_unpublish_set_secrets(req, secret);
    json_object_put(secret);
    json_object_put(pv);
    free(node_id);
    if (rc < 0 || !req) {
        att_request_free(req ? &req->base : NULL);
        return rc < 0 ? rc : -EINVAL;
    }
    obs_v(4, "ControllerUnpublishVolume %s of VolumeAttachment %s", req->volume_id, kobj_name(va));
    csi_status st = {0};
    rc = csi_controller_unpublish_volume(c->o.csi, req, c->o.timeout, &st);
    att_request_free(&req->base);
    if (rc == 0)
        return 0;
    /* Beyond upstream: a Node that no longer exists cannot have the volume
     * attached; the driver's NOT_FOUND then means the detach is done. */
    if (st.code == CSI_NOT_FOUND && c->o.detach_deleted_nodes && node_gone(c, att_va_node(va))) {
        obs_info("VolumeAttachment %s: node %s is deleted and the driver answers NOT_FOUND: "
                 "treating the volume as detached",
                 kobj_name(va), att_va_node(va));
        return 0;
    }
    char *msg = csi_status_text(&st);
    rc = util_err_set(-EREMOTEIO, "%s", msg);
    free(msg);
    return rc;
}

static int detach(att_ctrl *c, const json_object *va)
{
    const char *name = kobj_name(va);
    int rc = unpublish(c, va);
    if (rc < 0) {
        char *msg = util_strdup(util_err_last());
        obs_v(2, "detaching VolumeAttachment %s: %s", name, msg);
        save_error(c, name, false, msg, 0);
        free(msg);
        return rc;
    }
    /* The finalizer goes with test+remove on its exact entry; when it was
     * the last one, the API server deletes the VA and a status reset
     * would only answer 404. When others keep the VA, its status says
     * detached first: a failure of either write leaves our finalizer, so
     * the retry detaches again (the other order left a VA that kept
     * status.attached true for good once the status write failed). */
    bool last = att_va_last_finalizer(va, c->fin);
    bool reset = false;
    if (!last) {
        rc = patch_status(c, name, att_status_detached());
        if (rc == -ENOENT)
            return 0; /* deleted meanwhile: nothing left to do */
        if (rc < 0) {
            obs_warn("%s", util_err_last());
            return rc;
        }
        reset = true;
    }
    char *path = va_path(name, NULL);
    bool gone = false;
    json_object *answer = NULL;
    rc = json_patch(c, &KUBE_VOLUMEATTACHMENT, path, va, build_remove_finalizer, NULL, &gone,
                    &answer);
    free(path);
    if (rc < 0) {
        obs_warn("%s", util_err_last());
        return rc;
    }
    if (answer && kube_object_check(&KUBE_VOLUMEATTACHMENT, answer, name) == 0) {
        /* When the removal deletes the VA, the API server answers with the
         * last stored state (our finalizer still in it): "last" means no
         * finalizer but ours is left. */
        json_object *fl = kobj_arr(kobj_meta(answer), "finalizers");
        size_t others = kobj_len(fl) - (kobj_has_finalizer(answer, c->fin) ? 1 : 0);
        last = others == 0;
        overlay_put(c, &KUBE_VOLUMEATTACHMENT, answer, true);
    } else {
        /* No answer to read (or a garbled one): the status is reset
         * below unless it was already; a VA gone answers 404. */
        last = false;
        overlay_tombstone(c, va);
    }
    json_object_put(answer);
    obs_v(2, "VolumeAttachment %s detached", name);
    if (gone || last || reset)
        return 0;
    rc = patch_status(c, name, att_status_detached());
    if (rc == -ENOENT)
        rc = 0; /* deleted meanwhile: nothing left to reset */
    return rc;
}

/* ---- syncs --------------------------------------------------------------------------------- */

static int sync_va(att_ctrl *c, const char *key)
{
    json_object *va = kube_informer_get(c->vas, NULL, key);
    if (!va)
        return 0;
    bool detached = false;
    va = fresh(c, va, &detached);
    int rc = 0;
    if (c->o.trivial) {
        if (att_va_is_ours(&c->cfg, va) && !kobj_deleting(va) &&
            !kobj_bool(kobj_obj(va, "status"), "attached", false)) {
            rc = patch_status(c, key, att_status_attached_plain());
            if (rc < 0)
                obs_warn("%s", util_err_last());
        }
        json_object_put(va);
        return rc;
    }
    bool forced = set_has(c, c->forced, key);
    switch (detached ? ATT_SKIP : att_va_action(&c->cfg, va, c->fin, forced)) {
    case ATT_ATTACH:
        rc = attach(c, va);
        break;
    case ATT_DETACH:
        rc = detach(c, va);
        break;
    case ATT_SKIP:
        break;
    }
    if (rc == 0 && forced)
        set_put(c, c->forced, key, false);
    json_object_put(va);
    return rc;
}

static void count_va(void *ud, json_object *va)
{
    (void)va;
    (*(size_t *)ud)++;
}

static int sync_pv(att_ctrl *c, const char *name)
{
    json_object *pv = kube_informer_get(c->pvs, NULL, name);
    if (!pv)
        return 0;
    pv = fresh(c, pv, NULL);
    int rc = 0;
    if (kobj_deleting(pv) && kobj_has_finalizer(pv, c->fin)) {
        size_t users = 0;
        kube_informer_by_index(c->vas, "pv", name, count_va, &users);
        if (users == 0) {
            char *path = kube_path(&KUBE_PV, NULL, name, NULL);
            /* A PV already gone needs nothing more (its delete event is on its way). */
            bool gone = false;
            rc = json_patch(c, &KUBE_PV, path, pv, build_remove_finalizer, NULL, &gone, NULL);
            free(path);
            if (rc < 0)
                obs_warn("%s", util_err_last());
            else if (!gone)
                obs_v(2, "PersistentVolume %s: finalizer %s removed", name, c->fin);
        }
    }
    json_object_put(pv);
    return rc;
}

/* ---- events ------------------------------------------------------------------------------- */

static void queue_va(att_ctrl *c, const json_object *va)
{
    const char *name = kobj_name(va);
    if (!name)
        return;
    att_queue_add(kobj_deleting(va) && c->detach_q ? c->detach_q : c->attach_q, name);
}

static void va_added(void *ud, json_object *va)
{
    att_ctrl *c = ud;
    overlay_seen(c, va, false);
    queue_va(c, va);
}

/* A copy without what an error write changes. */
static json_object *without_errors(const json_object *va)
{
    json_object *o = NULL;
    if (json_object_deep_copy((json_object *)va, &o, NULL) != 0)
        return NULL;
    kobj_del(kobj_obj(o, "metadata"), "resourceVersion");
    kobj_del(kobj_obj(o, "metadata"), "managedFields");
    kobj_del(kobj_obj(o, "status"), "attachError");
    kobj_del(kobj_obj(o, "status"), "detachError");
    return o;
}

/* Upstream skips updates that only change attachError/detachError: our own
 * error writes must not undo the backoff of the failing key. */
static bool only_errors_changed(const json_object *old, const json_object *obj)
{
    const char *a = kobj_rv(old), *b = kobj_rv(obj);
    if (!a || !b || strcmp(a, b) == 0)
        return false; /* a resync: queue */
    json_object *x = without_errors(old), *y = without_errors(obj);
    bool same = x && y && json_object_equal(x, y);
    json_object_put(x);
    json_object_put(y);
    return same;
}

static void va_updated(void *ud, json_object *old, json_object *va)
{
    att_ctrl *c = ud;
    overlay_seen(c, va, false);
    if (old != va && only_errors_changed(old, va))
        return;
    queue_va(c, va);
}

static void va_deleted(void *ud, json_object *va)
{
    att_ctrl *c = ud;
    overlay_seen(c, va, true);
    set_put(c, c->forced, kobj_name(va), false);
    const char *pv = att_va_pv(va);
    if (pv && c->pv_q)
        att_queue_add(c->pv_q, pv);
}

static void pv_changed(void *ud, json_object *pv)
{
    att_ctrl *c = ud;
    overlay_seen(c, pv, false);
    if (kobj_deleting(pv) && kobj_has_finalizer(pv, c->fin) && kobj_name(pv))
        att_queue_add(c->pv_q, kobj_name(pv));
}

static void pv_updated(void *ud, json_object *old, json_object *pv)
{
    (void)old;
    pv_changed(ud, pv);
}

static void pv_deleted(void *ud, json_object *pv)
{
    overlay_seen(ud, pv, true);
}

/* ---- caches: only what the syncs read ------------------------------------------------------ */

static bool keep_va(void *ud, const json_object *va)
{
    const att_ctrl *c = ud;
    return att_va_is_ours(&c->cfg, va);
}

static bool keep_pv(void *ud, const json_object *pv)
{
    const att_ctrl *c = ud;
    const char *d = kobj_path_str(pv, "spec.csi.driver");
    return d && strcmp(d, c->cfg.driver_name) == 0;
}

static void slim_meta(void *ud, json_object *obj)
{
    (void)ud;
    json_object *md = kobj_obj(obj, "metadata");
    kobj_del(md, "managedFields");
    kobj_del(kobj_obj(md, "annotations"), "kubectl.kubernetes.io/last-applied-configuration");
}

static void slim_pv(void *ud, json_object *obj)
{
    slim_meta(ud, obj);
    kobj_del(obj, "status");
    kobj_del(kobj_obj(obj, "metadata"), "annotations");
    kobj_del(kobj_obj(obj, "metadata"), "labels");
}

/* Nodes: the name and the node-id annotation are all that is read. */
static void slim_node(void *ud, json_object *obj)
{
    (void)ud;
    json_object *md = kobj_obj(obj, "metadata");
    const char *ids = kobj_annotation(obj, ATT_ANN_NODE_IDS);
    json_object *keep = ids ? json_object_new_string(ids) : NULL;
    kobj_del(obj, "spec");
    kobj_del(obj, "status");
    kobj_del(md, "managedFields");
    kobj_del(md, "labels");
    kobj_del(md, "annotations");
    if (keep)
        kobj_set_annotation(obj, ATT_ANN_NODE_IDS, json_object_get_string(keep));
    json_object_put(keep);
}

static void va_by_pv(const json_object *obj, void (*add)(void *ctx, const char *key), void *ctx)
{
    const char *pv = att_va_pv(obj);
    if (pv)
        add(ctx, pv);
}

/* ---- workers ------------------------------------------------------------------------------- */

struct worker {
    att_ctrl *c;
    att_queue *q;
    bool va; /* VA keys: one worker at a time across both VA queues */
};

static void *work(void *arg)
{
    struct worker *w = arg;
    att_ctrl *c = w->c;
    char *key = NULL;
    util_thread_name("w:attach");
    while (att_queue_get(w->q, &key) == 0) {
        if (w->va) {
            pthread_mutex_lock(&c->mu);
            bool busy = lh_table_lookup_entry(c->busy, key) != NULL;
            if (!busy)
                lh_table_insert(c->busy, util_strdup(key), NULL);
            pthread_mutex_unlock(&c->mu);
            if (busy) {
                att_queue_add_after(w->q, key, BUSY_RETRY);
                att_queue_done(w->q, key);
                free(key);
                continue;
            }
        }
        int rc = w->va ? sync_va(c, key) : sync_pv(c, key);
        if (w->va)
            set_put(c, c->busy, key, false);
        if (rc == 0)
            att_queue_forget(w->q, key);
        else
            att_queue_add_rate_limited(w->q, key);
        att_queue_done(w->q, key);
        free(key);
    }
    free(w);
    return NULL;
}

static int informer(att_ctrl *c, const kube_resource *res, void (*slim)(void *, json_object *),
                    bool (*keep)(void *, const json_object *), kube_handlers h, kube_informer **out)
{
    kube_informer_opts o = {.res = res,
                            .transform = slim,
                            .transform_ud = c,
                            .keep = keep,
                            .resync = c->o.resync,
                            .handlers = h};
    return kube_informer_new(c->o.kube, &o, out);
}

static void start_workers(att_ctrl *c, att_queue *q, bool va, int n)
{
    for (int i = 0; i < n; i++) {
        struct worker *w = util_calloc(1, sizeof(*w));
        *w = (struct worker){c, q, va};
        if (pthread_create(&c->threads[c->n_threads], NULL, work, w) != 0) {
            free(w);
            return;
        }
        c->n_threads++;
    }
}

int att_ctrl_start(const att_ctrl_opts *opts, const att_config *cfg, att_ctrl **out)
{
    *out = NULL;
    att_ctrl *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    c->cfg = *cfg;
    c->fin = att_finalizer(cfg->driver_name);
    pthread_mutex_init(&c->mu, NULL);
    c->busy = lh_kchar_table_new(64, free_key);
    c->overlay = lh_kchar_table_new(64, free_written);
    c->forced = lh_kchar_table_new(16, free_key);
    util_duration slow = opts->slow_wait;
    c->attach_q =
        att_queue_new("csi-attacher-va", opts->retry_start, opts->retry_max, opts->metrics, slow);
    if (!opts->trivial) {
        c->detach_q = att_queue_new("csi-attacher-va-detach", opts->retry_start, opts->retry_max,
                                    opts->metrics, slow);
        c->pv_q = att_queue_new("csi-attacher-pv", opts->retry_start, opts->retry_max,
                                opts->metrics, slow);
    }
    int rc = informer(c, &KUBE_VOLUMEATTACHMENT, slim_meta, keep_va,
                      (kube_handlers){va_added, va_updated, va_deleted, c, false}, &c->vas);
    if (rc == 0 && !opts->trivial) {
        rc = kube_informer_add_index(c->vas, "pv", va_by_pv);
        if (rc == 0)
            rc = informer(c, &KUBE_PV, slim_pv, keep_pv,
                          (kube_handlers){pv_changed, pv_updated, pv_deleted, c, true}, &c->pvs);
        if (rc == 0)
            rc = informer(c, &KUBE_CSINODE, slim_meta, NULL, (kube_handlers){0}, &c->csinodes);
        if (rc == 0)
            rc = informer(c, &KUBE_NODE, slim_node, NULL, (kube_handlers){0}, &c->nodes);
    }
    kube_informer *all[] = {c->nodes, c->csinodes, c->pvs, c->vas};
    for (size_t i = 0; rc == 0 && i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            rc = kube_informer_start(all[i]);
    for (size_t i = 0; rc == 0 && i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            rc = kube_informer_wait_for_sync(all[i], 5 * UTIL_MINUTE);
    if (rc < 0) {
        att_ctrl_stop(c);
        return rc;
    }
    int n = opts->workers > 0 ? opts->workers : 1;
    c->threads = util_calloc((size_t)n * 3, sizeof(pthread_t));
    start_workers(c, c->attach_q, true, n);
    if (!opts->trivial) {
        start_workers(c, c->detach_q, true, n);
        start_workers(c, c->pv_q, false, n);
        if (opts->list_published && opts->reconcile > 0)
            att_reconciler_start(c, opts->csi, opts->reconcile, opts->max_entries, opts->timeout,
                                 &c->reconciler);
    }
    malloc_trim(0);
    if (opts->trivial)
        obs_info("attacher started (trivial handler: the driver has no ControllerPublish): %d "
                 "workers",
                 n);
    else
        obs_info("attacher started: %d attach, %d detach and %d PV workers", n, n, n);
    *out = c;
    return 0;
}

void att_ctrl_stop(att_ctrl *c)
{
    if (!c)
        return;
    att_reconciler_stop(c->reconciler);
    kube_informer *all[] = {c->vas, c->pvs, c->csinodes, c->nodes};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        kube_informer_stop(all[i]);
    att_queue *qs[] = {c->attach_q, c->detach_q, c->pv_q};
    for (size_t i = 0; i < 3; i++)
        if (qs[i])
            att_queue_shutdown(qs[i]);
    for (int i = 0; i < c->n_threads; i++)
        pthread_join(c->threads[i], NULL);
    free(c->threads);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        kube_informer_free(all[i]);
    for (size_t i = 0; i < 3; i++)
        att_queue_free(qs[i]);
    lh_table_free(c->busy);
    lh_table_free(c->overlay);
    lh_table_free(c->forced);
    pthread_mutex_destroy(&c->mu);
    free(c->fin);
    free(c);
}

/* ---- for the reconcile ---------------------------------------------------------------------- */

struct each_ctx {
    att_ctrl *c;
    void (*fn)(void *ud, json_object *va);
    void *ud;
};

static void each_fresh(void *ud, json_object *va)
{
    struct each_ctx *e = ud;
    bool detached = false;
    json_object *f = fresh(e->c, json_object_get(va), &detached);
    if (!detached)
        e->fn(e->ud, f);
    json_object_put(f);
}

void att_ctrl_each_va(att_ctrl *c, void (*fn)(void *ud, json_object *va), void *ud)
{
    struct each_ctx e = {c, fn, ud};
    kube_informer_each(c->vas, each_fresh, &e);
}

char *att_ctrl_node_id(att_ctrl *c, const json_object *va)
{
    char *id = NULL;
    if (node_id_for(c, va, true, &id) < 0)
        return NULL;
    return id;
}

char *att_ctrl_volume_handle(att_ctrl *c, const json_object *va)
{
    const char *pv_name = att_va_pv(va);
    json_object *pv = pv_name ? kube_informer_get(c->pvs, NULL, pv_name) : NULL;
    const char *h = kobj_path_str(pv, "spec.csi.volumeHandle");
    char *r = h ? util_strdup(h) : NULL;
    json_object_put(pv);
    return r;
}

void att_ctrl_force(att_ctrl *c, const json_object *va)
{
    set_put(c, c->forced, kobj_name(va), true);
    queue_va(c, va);
}
