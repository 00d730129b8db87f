/*
 * The snapshotter's controller: VolumeSnapshotContents of this driver are
 * cut (CreateSnapshot), checked (ListSnapshots) and deleted (DeleteSnapshot)
 * as external-snapshotter's sidecar controller does; plan.c decides, this
 * file does the I/O.
 *
 * Informer events only queue content names on one queue
 * ("csi-snapshotter-content", upstream's name) served by up to
 * --worker-threads threads. Two caches: the contents (this driver's only)
 * and the VolumeSnapshotClasses. A content that is not ready yet is synced
 * again with the queue's backoff (--retry-interval-start .. -max), as
 * upstream requeues it. What we wrote is kept ("written") until the
 * informer shows that version or a newer one, so a sync never acts on an
 * older copy than our own last write (upstream's contentStore does the
 * same). Status writes carry the resourceVersion they were built from; a
 * conflict right after the driver answered is settled with one GET and one
 * more write, so a snapshot's handle is never dropped for a stale cache.
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
#include "snapshotter.h"
#include "wq/wq.h"

#define WORKER_IDLE_EXIT (30 * UTIL_SECOND)

static const char *const CLASS_FIELDS[] = {"s driver", "m parameters", "s deletionPolicy", NULL};
static const kube_resource SNAP_CLASS = {"snapshot.storage.k8s.io", "v1",  "volumesnapshotclasses",
                                         "VolumeSnapshotClass",     false, CLASS_FIELDS};

struct written {
    char *json; /* NULL: written, but the answer could not be read ("blind") */
    char *rv;
};

struct snap_ctrl {
    snap_ctrl_opts o;
    snap_config cfg;
    kube_informer *contents, *classes;
    char *selector; /* --node-deployment: this node's contents only */
    wq *q;
    bool pool;
    pthread_mutex_t mu;       /* guards `written` */
    struct lh_table *written; /* content name -> struct written */
};

/* ---- what we wrote ----------------------------------------------------------------------- */

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

static void remember(snap_ctrl *c, const json_object *obj)
{
    const char *rv = kobj_rv(obj), *name = kobj_name(obj);
    if (!rv || !name)
        return;
    struct written *w = util_calloc(1, sizeof(*w));
    w->json = kobj_to_text(obj, NULL);
    w->rv = util_strdup(rv);
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->written, name);
    lh_table_insert(c->written, util_strdup(name), w);
    pthread_mutex_unlock(&c->mu);
}

/* A write of `name` took effect with an unusable answer, or failed in a
 * way that does not say it did not take effect: until a GET shows the
 * content again, neither the cache nor our last answer is to be trusted (a
 * sync deciding on either could end the work as done while the server
 * holds what that write made). */
static void remember_blind(snap_ctrl *c, const char *name)
{
    if (!name)
        return;
    struct written *w = util_calloc(1, sizeof(*w));
    w->rv = util_strdup("");
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->written, name);
    lh_table_insert(c->written, util_strdup(name), w);
    pthread_mutex_unlock(&c->mu);
}

static bool is_blind(snap_ctrl *c, const char *name)
{
    pthread_mutex_lock(&c->mu);
    const struct written *w = NULL;
    bool r = lh_table_lookup_ex(c->written, name, (void **)&w) && w && !w->json;
    pthread_mutex_unlock(&c->mu);
    return r;
}

static int refetch(snap_ctrl *c, json_object **obj);

/*
 * The content to sync from: the cached copy, or what we wrote when that is
 * newer, or after a blind write a fresh GET. 0 with *out (NULL: deleted,
 * or no longer ours); < 0 when the GET failed (retry).
 */
static int current(snap_ctrl *c, const char *name, json_object **out)
{
    json_object *cached = kube_informer_get(c->contents, NULL, name);
    *out = NULL;
    if (cached && is_blind(c, name)) {
        int rc = refetch(c, &cached);
        if (rc < 0) {
            json_object_put(cached);
            return rc;
        }
        remember(c, cached);
        *out = cached;
        return 0;
    }
    pthread_mutex_lock(&c->mu);
    struct lh_entry *e = lh_table_lookup_entry(c->written, name);
    if (e) {
        const struct written *w = lh_entry_v(e);
        if (cached && w->json && kobj_rv_cmp(w->rv, kobj_rv(cached)) > 0) {
            json_object *o = kobj_parse_text(w->json, strlen(w->json));
            if (o) {
                json_object_put(cached);
                cached = o;
            }
        } else {
            /* the cache caught up, or the content is gone (or no longer ours) */
            lh_table_delete(c->written, name);
        }
    }
    pthread_mutex_unlock(&c->mu);
    *out = cached;
    return 0;
}

/* ---- API ------------------------------------------------------------------------------------ */

/*
 * One patch of the content (`status`: the status subresource); the answer
 * replaces *obj and is remembered when it is a well-formed content of that
 * name (checked as the informer checks what it caches: a garbled answer
 * would decide the sync's next step; *obj then stays the copy sent from,
 * and the informer brings the truth). -EREMOTEIO with `what` and the API's
 * message; *conflict for a 409 or a failed JSON patch test (422).
 */
static int patch(snap_ctrl *c, json_object **obj, bool status, enum kube_patch_type type,
                 char *text, const char *what, bool *conflict)
{
    if (conflict)
        *conflict = false;
    if (!text)
        return util_err_set(-EINVAL, "%s: the content has no metadata to patch", what);
    char *path =
        kube_path(&KUBE_VOLUMESNAPSHOTCONTENT, NULL, kobj_name(*obj), status ? "status" : NULL);
    kube_resp r = {0};
    int rc = kube_patch(c->o.kube, path, type, text, &r);
    obs_v(5, "PATCH %s %s: %d", path, text, r.code);
    if (rc == 0 && r.body &&
        kube_object_check(&KUBE_VOLUMESNAPSHOTCONTENT, r.body, kobj_name(*obj)) == 0) {
        remember(c, r.body);
        json_object_put(*obj);
        *obj = json_object_get(r.body);
    } else if (rc == 0) {
        obs_v(2, "PATCH %s: the answer is not used: %s", path,
              r.body ? util_err_last() : "no body");
        remember_blind(c, kobj_name(*obj));
    } else if (rc < 0) {
        /* A write that failed may still have taken effect (an answer lost
         * or unreadable, an error told after the write): read it back. */
        remember_blind(c, kobj_name(*obj));
        if (conflict)
            *conflict = kube_is_conflict(&r) || r.code == 422;
        rc = util_err_set(rc, "snapshot controller failed to update %s on API server: %s: %s",
                          kobj_name(*obj) ? kobj_name(*obj) : "", what, r.message);
    }
    kube_resp_clear(&r);
    free(path);
    free(text);
    return rc;
}

/* A fresh copy from the API server replaces *obj: only a well-formed
 * content of that name, checked as the informer checks what it caches (a
 * garbled answer taken here decided the sync once, for good: hostile seed
 * 2072689225, whose annotations of the wrong type hid the being-deleted
 * one, and the deleting content kept its finalizer). */
static int refetch(snap_ctrl *c, json_object **obj)
{
    const char *name = kobj_name(*obj);
    char *path = kube_path(&KUBE_VOLUMESNAPSHOTCONTENT, NULL, name, NULL);
    kube_resp r = {0};
    int rc = kube_get_object(c->o.kube, &KUBE_VOLUMESNAPSHOTCONTENT, path, name, &r);
    free(path);
    if (rc == 0 && snap_content_decode(r.body, &(snap_content){0}) == 0) {
        json_object_put(*obj);
        *obj = json_object_get(r.body);
    } else if (rc == 0) {
        rc = util_err_set(-EIO, "error get snapshot content from api server: %s", util_err_last());
    } else {
        rc = util_err_set(rc, "error get snapshot content from api server: %s", r.message);
    }
    kube_resp_clear(&r);
    return rc;
}

/* The status write after a driver answer: once from our copy, once more
 * from a fresh one when ours was stale. */
static int write_status(snap_ctrl *c, json_object **obj, const snap_result *res)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    for (int attempt = 0;; attempt++) {
        char *text = snap_patch_status(*obj, res, now_ns);
        if (!text)
            return 0;
        bool conflict = false;
        int rc = patch(c, obj, true, KUBE_PATCH_MERGE, text, "status", &conflict);
        if (rc == 0 || !conflict || attempt > 0)
            return rc;
        if (refetch(c, obj) < 0)
            return rc;
    }
}

/* The Secret ns/name (both set), or NULL with no error when name is NULL. */
static int fetch_secret(snap_ctrl *c, const char *ns, const char *name, json_object **secret)
{
    *secret = NULL;
    if (!name)
        return 0;
    char *path = kube_path(&KUBE_SECRET, ns, name, NULL);
    kube_resp r = {0};
    int rc = kube_get(c->o.kube, path, &r);
    free(path);
    if (rc == 0)
        *secret = json_object_get(r.body);
    else
        rc = util_err_set(rc, "error getting secret %s in namespace %s: %s", name, ns, r.message);
    kube_resp_clear(&r);
    return rc;
}

/* The deletion-secret annotations' Secret (Create and Delete). */
static int content_secret(snap_ctrl *c, const json_object *obj, json_object **secret)
{
    const char *ns, *name;
    int rc = snap_secret_ref(obj, &ns, &name);
    if (rc == 0)
        rc = fetch_secret(c, ns, name, secret);
    if (rc < 0 && name) {
        obs_error("Failed to get credentials for snapshot %s: %s", kobj_name(obj), util_err_last());
        rc = util_err_set(rc, "cannot get credentials for snapshot content \"%s\"", kobj_name(obj));
    }
    return rc;
}

static void event(snap_ctrl *c, const json_object *obj, const char *reason, const char *msg)
{
    if (c->o.events)
        kube_event(c->o.events, obj, "Warning", reason, "%s", msg);
}

/* Upstream's updateContentErrorStatusWithEvent. */
static void record_error(snap_ctrl *c, json_object **obj, const char *reason, const char *msg)
{
    char *text = snap_patch_error(*obj, msg, time(NULL));
    if (!text) {
        obs_v(4, "the same error is already set on %s", kobj_name(*obj));
        return;
    }
    if (patch(c, obj, true, KUBE_PATCH_MERGE, text, "error status", NULL) < 0)
        obs_v(4, "updating VolumeSnapshotContent[%s] error status failed %s", kobj_name(*obj),
              util_err_last());
    event(c, *obj, reason, msg);
}

/* ---- the steps ------------------------------------------------------------------------------- */

/* The class named by the content, or an error in upstream's words. */
static int need_class(snap_ctrl *c, const snap_content *d, json_object **cls)
{
    *cls = NULL;
    if (!d->class_name)
        return 0;
    *cls = kube_informer_get(c->classes, NULL, d->class_name);
    if (!*cls)
        return util_err_set(-ENOENT, "volumesnapshotclass.snapshot.storage.k8s.io \"%s\" not found",
                            d->class_name);
    return 0;
}

static int drop_creating(snap_ctrl *c, json_object **obj)
{
    if (!kobj_annotation(*obj, SNAP_ANN_BEING_CREATED))
        return 0;
    return patch(c, obj, false, KUBE_PATCH_JSON, snap_patch_drop_creating(),
                 "failed to remove VolumeSnapshotBeingCreated annotation", NULL);
}

/* Upstream's createSnapshotWrapper; *ready: the driver says so. */
static int create_wrapper(snap_ctrl *c, json_object **obj, const snap_content *d, bool *ready)
{
    const char *name = d->name;
    json_object *cls = NULL, *secret = NULL;
    Csi__V1__CreateSnapshotRequest *req = NULL;
    int rc = need_class(c, d, &cls);
    if (rc == 0 && !cls)
        rc = util_err_set(-EINVAL, "failed to take snapshot %s without a snapshot class", name);
    if (rc == 0)
        rc = content_secret(c, *obj, &secret);
    if (rc < 0) {
        rc = util_err_set(rc,
                          "failed to get input parameters to create snapshot for content %s: "
                          "\"%s\"",
                          name, util_err_last());
        goto out;
    }
    /* The request before the annotation (upstream sets the annotation
     * first): a request that cannot be made never reaches the driver, and
     * an annotation set for it would hold the content's deletion for ever. */
    rc = snap_create_request(&c->cfg, *obj, cls, &req);
    if (rc == 0 && secret)
        rc = snap_create_set_secrets(req, secret);
    if (rc < 0)
        goto out;
    if (!kobj_annotation(*obj, SNAP_ANN_BEING_CREATED)) {
        rc = patch(c, obj, false, KUBE_PATCH_JSON, snap_patch_set_creating(*obj),
                   "failed to add VolumeSnapshotBeingCreated annotation", NULL);
        if (rc < 0)
            goto out;
    }
    Csi__V1__CreateSnapshotResponse *resp = NULL;
    csi_status st;
    obs_info("createSnapshotWrapper: Creating snapshot for content %s through the plugin ...",
             name);
    rc = csi_create_snapshot(c->o.csi, req, c->o.timeout, &resp, &st);
    if (rc < 0) {
        char *err = csi_status_text(&st);
        obs_info("createSnapshotWrapper: CreateSnapshot for content %s returned error: %s", name,
                 err);
        if (snap_error_final(st.code) && drop_creating(c, obj) < 0) {
            rc = util_err_set(rc,
                              "failed to remove VolumeSnapshotBeingCreated annotation from "
                              "the content %s: %s",
                              name, util_err_last());
        } else {
            rc = util_err_set(rc, "failed to take snapshot of the volume %s: \"%s\"",
                              d->volume_handle ? d->volume_handle : "", err);
        }
        free(err);
        goto out;
    }
    snap_result res;
    snap_result_from_csi(resp->snapshot, &res);
    obs_v(5, "Created snapshot: driver %s, snapshotId %s, size %lld, readyToUse %d",
          c->cfg.driver_name, res.handle ? res.handle : "", (long long)res.size, res.ready);
    *ready = res.ready;
    rc = write_status(c, obj, &res);
    csi__v1__create_snapshot_response__free_unpacked(resp, NULL);
    if (rc < 0) {
        rc = util_err_set(rc, "error updating status for volume snapshot content %s: %s", name,
                          util_err_last());
        goto out;
    }
    rc = drop_creating(c, obj);
out:
    snap_create_request_free(req);
    json_object_put(secret);
    json_object_put(cls);
    return rc;
}

/* ListSnapshots by id (upstream's GetSnapshotStatus). */
static int snapshot_status(snap_ctrl *c, const char *id, const json_object *secret,
                           snap_result *res, Csi__V1__ListSnapshotsResponse **keep)
{
    *res = (snap_result){0};
    *keep = NULL;
    if (!c->cfg.list_snapshots) {
        res->ready = true; /* upstream: no ListSnapshots, taken as ready */
        return 0;
    }
    Csi__V1__ListSnapshotsRequest req = CSI__V1__LIST_SNAPSHOTS_REQUEST__INIT;
    req.snapshot_id = (char *)id;
    int rc = secret ? snap_list_set_secrets(&req, secret) : 0;
    csi_status st = {0};
    if (rc == 0)
        rc = csi_call(c->o.csi, "/csi.v1.Controller/ListSnapshots", &req.base,
                      &csi__v1__list_snapshots_response__descriptor, c->o.timeout,
                      (ProtobufCMessage **)keep, &st);
    for (size_t i = 0; i < req.n_secrets; i++) {
        explicit_bzero(req.secrets[i]->value, strlen(req.secrets[i]->value));
        free(req.secrets[i]->key);
        free(req.secrets[i]->value);
        free(req.secrets[i]);
    }
    free(req.secrets);
    if (rc < 0 && st.code) {
        char *err = csi_status_text(&st);
        rc = util_err_set(rc, "%s", err);
        free(err);
    }
    if (rc < 0)
        return rc;
    if ((*keep)->n_entries == 0 || !(*keep)->entries[0]->snapshot)
        return util_err_set(-ENOENT, "can not find snapshot for snapshotID %s", id);
    snap_result_from_csi((*keep)->entries[0]->snapshot, res);
    res->handle = NULL; /* the caller knows the id */
    return 0;
}

/* Upstream's checkandUpdateContentStatusOperation for a handle we know. */
static int check_status(snap_ctrl *c, json_object **obj, const snap_content *d, bool *ready)
{
    json_object *cls = NULL, *secret = NULL;
    char *sns = NULL, *sname = NULL;
    int rc = need_class(c, d, &cls);
    if (rc < 0) {
        rc = util_err_set(rc, "failed to get snapshot class %s for snapshot content %s: %s",
                          d->class_name, d->name, util_err_last());
        goto out;
    }
    if (cls) {
        rc = snap_list_secret_ref(cls, d->name, &sns, &sname);
        if (rc < 0) {
            rc = util_err_set(rc, "failed to get secret reference for snapshot content %s: %s",
                              d->name, util_err_last());
            goto out;
        }
        rc = fetch_secret(c, sns, sname, &secret);
        if (rc < 0) {
            rc = util_err_set(rc, "failed to get credentials for snapshot content %s: %s", d->name,
                              util_err_last());
            goto out;
        }
    }
    if (d->group_handle && d->status_handle) {
        json_object_put(secret);
        secret = NULL;
        rc = content_secret(c, *obj, &secret);
        if (rc < 0)
            goto out;
    }
    const char *id = d->status_handle ? d->status_handle : d->snapshot_handle;
    snap_result res;
    Csi__V1__ListSnapshotsResponse *resp = NULL;
    rc = snapshot_status(c, id, secret, &res, &resp);
    if (rc < 0) {
        rc = util_err_set(rc, "failed to list snapshot for content %s: \"%s\"", d->name,
                          util_err_last());
        goto out;
    }
    res.handle = d->snapshot_handle ? d->snapshot_handle : d->status_handle;
    *ready = res.ready;
    rc = write_status(c, obj, &res);
    if (resp)
        csi__v1__list_snapshots_response__free_unpacked(resp, NULL);
out:
    free(sns);
    free(sname);
    json_object_put(secret);
    json_object_put(cls);
    return rc;
}

/* The finalizer as `decided` (the copy the sync decided on) shows it; the
 * patch tests the entry it removes, so an older copy is safe. */
static int remove_finalizer(snap_ctrl *c, json_object **obj, const json_object *decided)
{
    char *text = kobj_patch_remove_finalizer(decided, SNAP_FINALIZER);
    if (!text)
        return 0;
    int rc = patch(c, obj, false, KUBE_PATCH_JSON, text, "remove finalizer", NULL);
    if (rc == 0)
        obs_v(5, "Removed protection finalizer from volume snapshot content %s", kobj_name(*obj));
    return rc;
}

/* Upstream's deleteCSISnapshotOperation, then the finalizer. */
static int delete_snapshot(snap_ctrl *c, json_object **obj, const snap_content *d)
{
    json_object *secret = NULL;
    int rc = content_secret(c, *obj, &secret);
    if (rc < 0) {
        event(c, *obj, SNAP_EV_DELETE_ERROR, "Failed to get snapshot credentials");
        return util_err_set(rc,
                            "failed to get input parameters to delete snapshot for content %s: "
                            "\"%s\"",
                            d->name, util_err_last());
    }
    Csi__V1__DeleteSnapshotRequest req = CSI__V1__DELETE_SNAPSHOT_REQUEST__INIT;
    req.snapshot_id = (char *)(d->status_handle ? d->status_handle : d->snapshot_handle);
    if (secret)
        rc = snap_delete_set_secrets(&req, secret);
    json_object_put(secret);
    csi_status st = {0};
    if (rc == 0) {
        obs_v(4, "DeleteSnapshot %s of content %s", req.snapshot_id, d->name);
        rc = csi_delete_snapshot(c->o.csi, &req, c->o.timeout, &st);
    }
    for (size_t i = 0; i < req.n_secrets; i++) {
        explicit_bzero(req.secrets[i]->value, strlen(req.secrets[i]->value));
        free(req.secrets[i]->key);
        free(req.secrets[i]->value);
        free(req.secrets[i]);
    }
    free(req.secrets);
    if (rc < 0) {
        char *err = st.code ? csi_status_text(&st) : util_strdup(util_err_last());
        event(c, *obj, SNAP_EV_DELETE_ERROR, "Failed to delete snapshot");
        rc = util_err_set(rc,
                          "failed to delete snapshot \"%s\", err: failed to delete snapshot "
                          "content %s: \"%s\"",
                          d->name, d->name, err);
        free(err);
        return rc;
    }
    /* The finalizer goes as the copy this sync decided on shows it, not as
     * the status write's answer does: an answer garbled on the way (a
     * finalizer entry of another type) would end the deletion here as done,
     * and the status-only change that follows wakes no sync. */
    json_object *decided = json_object_get(*obj);
    rc = patch(c, obj, true, KUBE_PATCH_MERGE, snap_patch_clear_status(*obj), "clear status", NULL);
    if (rc < 0) {
        event(c, *obj, SNAP_EV_DELETE_ERROR, "Failed to clear content status");
        json_object_put(decided);
        return rc;
    }
    rc = remove_finalizer(c, obj, decided);
    json_object_put(decided);
    return rc;
}

/* ---- sync ------------------------------------------------------------------------------------ */

static int sync_content(snap_ctrl *c, const char *name)
{
    json_object *obj = NULL;
    int rc = current(c, name, &obj);
    if (rc < 0) {
        obs_error("VolumeSnapshotContent %s: %s", name, util_err_last());
        return rc;
    }
    if (!obj) {
        wq_forget(c->q, name);
        return 0; /* deleted, or no longer ours */
    }
    snap_content d;
    rc = snap_content_decode(obj, &d);
    if (rc < 0) {
        /* The informer takes no such copy, so it was a write's answer:
         * forgotten, and the key retried (its next sync reads the cache; a
         * status write wakes no update of its own to retry it). */
        obs_error("VolumeSnapshotContent %s cannot be read: %s", name, util_err_last());
        pthread_mutex_lock(&c->mu);
        lh_table_delete(c->written, name);
        pthread_mutex_unlock(&c->mu);
        json_object_put(obj);
        return rc;
    }
    json_object *cls = d.class_name ? kube_informer_get(c->classes, NULL, d.class_name) : NULL;
    bool ours = snap_content_is_ours(&c->cfg, &d, cls);
    json_object_put(cls);
    if (!ours) {
        json_object_put(obj);
        return 0;
    }
    snap_step step = snap_plan(&d);
    obs_v(5, "synchronizing VolumeSnapshotContent[%s]: %s", name, snap_step_name(step));
    /* The steps replace `cur` with each write's answer; `d` keeps borrowing
     * from `obj`, which stays alive until the end. */
    json_object *cur = json_object_get(obj);
    bool ready = true;
    switch (step) {
    case SNAP_NONE:
        break;
    case SNAP_DELETE:
        rc = delete_snapshot(c, &cur, &d);
        break;
    case SNAP_REMOVE_FINALIZER:
        rc = remove_finalizer(c, &cur, obj);
        break;
    case SNAP_DROP_CREATING:
        rc = drop_creating(c, &cur);
        break;
    case SNAP_CREATE:
        ready = false;
        rc = create_wrapper(c, &cur, &d, &ready);
        if (rc < 0) {
            char *msg = util_asprintf("Failed to create snapshot: %s", util_err_last());
            record_error(c, &cur, SNAP_EV_CREATE_FAILED, msg);
            util_err_set(rc, "%s", msg);
            free(msg);
        }
        break;
    case SNAP_CHECK:
        ready = false;
        rc = check_status(c, &cur, &d, &ready);
        if (rc < 0) {
            char *msg =
                util_asprintf("Failed to check and update snapshot content: %s", util_err_last());
            record_error(c, &cur, SNAP_EV_CHECK_FAILED, msg);
            util_err_set(rc, "%s", msg);
            free(msg);
        }
        break;
    }
    if (rc < 0)
        obs_error("could not sync content \"%s\": %s", name, util_err_last());
    else if (!ready)
        rc = -EAGAIN; /* not ready yet: again after the backoff, as upstream requeues */
    json_object_put(cur);
    json_object_put(obj);
    return rc;
}

static int content_work(void *ud, const char *key)
{
    return sync_content(ud, key);
}

/* ---- informers ------------------------------------------------------------------------------- */

static void queue_content(snap_ctrl *c, const json_object *obj)
{
    const char *name = kobj_name(obj);
    if (name)
        wq_add(c->q, name);
}

static void content_added(void *ud, json_object *obj)
{
    queue_content(ud, obj);
}

static void content_updated(void *ud, json_object *old, json_object *obj)
{
    if (snap_update_needs_sync(old, obj))
        queue_content(ud, obj);
}

static void content_deleted(void *ud, json_object *obj)
{
    snap_ctrl *c = ud;
    const char *name = kobj_name(obj);
    if (!name)
        return;
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->written, name);
    pthread_mutex_unlock(&c->mu);
    wq_forget(c->q, name);
}

/* The cache keeps this driver's contents with a source only. */
static bool keep_content(void *ud, const json_object *obj)
{
    const snap_ctrl *c = ud;
    snap_content d;
    return snap_content_decode(obj, &d) == 0 && snap_content_is_ours(&c->cfg, &d, NULL);
}

static void slim(void *ud, json_object *obj)
{
    (void)ud;
    json_object *md = kobj_obj(obj, "metadata");
    kobj_del(md, "managedFields");
    kobj_del(kobj_obj(md, "annotations"), "kubectl.kubernetes.io/last-applied-configuration");
}

int snap_ctrl_start(const snap_ctrl_opts *opts, const snap_config *cfg, snap_ctrl **out)
{
    *out = NULL;
    snap_ctrl *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    c->cfg = *cfg;
    pthread_mutex_init(&c->mu, NULL);
    c->written = lh_kchar_table_new(64, free_written);
    c->q = wq_new(&(wq_opts){.name = "csi-snapshotter-content",
                             .base_delay = opts->retry_start,
                             .max_delay = opts->retry_max,
                             .metrics = opts->metrics});
    kube_informer_opts co = {.res = &SNAP_CLASS, .transform = slim, .resync = opts->resync};
    int rc = kube_informer_new(c->o.kube, &co, &c->classes);
    if (cfg->node)
        c->selector = util_asprintf("%s=%s", SNAP_LABEL_MANAGED_BY, cfg->node);
    kube_informer_opts vo = {
        .res = &KUBE_VOLUMESNAPSHOTCONTENT,
        .label_selector = c->selector,
        .transform = slim,
        .transform_ud = c,
        .keep = keep_content,
        .resync = opts->resync,
        .handlers = (kube_handlers){content_added, content_updated, content_deleted, c, false}};
    if (rc == 0)
        rc = kube_informer_new(c->o.kube, &vo, &c->contents);
    if (rc == 0)
        rc = kube_informer_start(c->classes);
    if (rc == 0)
        rc = kube_informer_start(c->contents);
    if (rc == 0)
        rc = kube_informer_wait_for_sync(c->classes, 5 * UTIL_MINUTE);
    if (rc == 0)
        rc = kube_informer_wait_for_sync(c->contents, 5 * UTIL_MINUTE);
    int n = opts->workers > 0 ? opts->workers : 1;
    wq_pool_opts po = {.max_workers = n,
                       .min_workers = 0,
                       .idle_exit = WORKER_IDLE_EXIT,
                       .slow_delay = opts->retry_max,
                       .sync = content_work,
                       .ud = c};
    if (rc == 0) {
        rc = wq_pool_start(c->q, &po);
        c->pool = rc == 0;
    }
    if (rc < 0) {
        util_err_set(rc, "starting the snapshotter failed: %s", util_err_last());
        snap_ctrl_stop(c);
        return rc;
    }
    malloc_trim(0);
    obs_info("Starting CSI snapshotter %s: up to %d workers", cfg->driver_name, n);
    *out = c;
    return 0;
}

void snap_ctrl_stop(snap_ctrl *c)
{
    if (!c)
        return;
    kube_informer_stop(c->contents);
    kube_informer_stop(c->classes);
    wq_shutdown(c->q, false);
    if (c->pool)
        wq_pool_join(c->q);
    kube_informer_free(c->contents);
    kube_informer_free(c->classes);
    wq_free(c->q);
    lh_table_free(c->written);
    free(c->selector);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
