/*
 * The controller: informers on VolumeSnapshots, VolumeSnapshotContents,
 * VolumeSnapshotClasses, PersistentVolumeClaims and PersistentVolumes; two
 * work queues as upstream's (snapshots by "namespace/name", contents by
 * name), each served by a pool of --worker-threads workers with per-key
 * backoff from --retry-interval-start to --retry-interval-max.
 *
 * Event handlers only queue keys, as upstream's: a snapshot's or content's
 * change queues itself; a deleted snapshot queues its bound content and a
 * deleted content its snapshot. A content whose snapshot's status lags
 * behind queues the snapshot from its own sync (upstream's syncContent).
 *
 * A snapshot's sync runs plan.c's steps back to back, each on the answer of
 * the last write (objects it wrote replace the cached copies for the rest of
 * the sync): a dynamic snapshot costs class (default only), claim finalizer,
 * snapshot finalizer, content, status. A 409 or 422 means the object moved
 * on: the key comes back after its backoff, decided again from the cache.
 * Classes, claims and volumes are read from the caches (upstream reads the
 * volume with a GET; its informer is as fresh for this).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "snapctl.h"
#include "wq/wq.h"

#define MAX_STEPS    10
#define SYNC_TIMEOUT (5 * UTIL_MINUTE)

/* What the syncs read of snapshots and classes, checked as Go's typed
 * decoder would (a wrong type makes the informer list again). */
static const char *const VS_FIELDS[] = {"o spec",
                                        "o spec.source",
                                        "n spec.source.persistentVolumeClaimName",
                                        "n spec.source.volumeSnapshotContentName",
                                        "n spec.volumeSnapshotClassName",
                                        "o status",
                                        "n status.boundVolumeSnapshotContentName",
                                        "b status.readyToUse",
                                        "o status.error",
                                        "s status.error.message",
                                        NULL};
static const kube_resource SNAPCTL_VS = {SNAPCTL_GROUP,    "v1", "volumesnapshots",
                                         "VolumeSnapshot", true, VS_FIELDS};
static const char *const CLASS_FIELDS[] = {"s driver", "m parameters", "s deletionPolicy", NULL};
static const kube_resource SNAPCTL_CLASS = {SNAPCTL_GROUP,         "v1",  "volumesnapshotclasses",
                                            "VolumeSnapshotClass", false, CLASS_FIELDS};

struct snapctl_ctrl {
    snapctl_ctrl_opts o;
    kube_informer *snaps, *contents, *classes, *pvcs, *pvs;
    wq *sq, *cq;
    bool spool, cpool;
};

static void event(snapctl_ctrl *c, const json_object *obj, const snapctl_event *ev)
{
    if (ev->type && c->o.events && obj)
        kube_event(c->o.events, obj, ev->type, ev->reason, "%s", ev->message);
}

/* ---- the snapshot's sync ------------------------------------------------------------------------
 */

struct sync {
    snapctl_ctrl *c;
    const char *key, *ns, *name;
    json_object *snap, *pvc, *content, *classes;
    bool content_deleted;
};

struct scan {
    const json_object *self;
    const char *pvc;
    bool hit;
};

static void other_uses_pvc(void *ud, json_object *snap)
{
    struct scan *s = ud;
    if (!s->hit && strcmp(kobj_name(snap) ? kobj_name(snap) : "", kobj_name(s->self)) != 0)
        s->hit = snapctl_snapshot_uses_pvc(snap, s->pvc);
}

static void restores_self(void *ud, json_object *pvc)
{
    struct scan *s = ud;
    if (!s->hit)
        s->hit = snapctl_pvc_restores(pvc, s->self);
}

static void collect(void *ud, json_object *obj)
{
    json_object_array_add(ud, json_object_get(obj));
}

/* The content the plan looks at now: our answer while it is the one
 * named, else the cache's. */
static void refresh_content(struct sync *s)
{
    char *want = snapctl_content_for(s->snap);
    if (s->content && want && strcmp(kobj_name(s->content), want) == 0) {
        free(want);
        return;
    }
    json_object_put(s->content);
    s->content = want ? kube_informer_get(s->c->contents, NULL, want) : NULL;
    s->content_deleted = false;
    free(want);
}

enum outcome { DONE, GONE, EXISTS, STALE, FAILED };

static enum outcome write_api(snapctl_ctrl *c, const char *method, const char *path,
                              enum kube_patch_type type, const char *text, kube_resp *r)
{
    int rc;
    if (strcmp(method, "POST") == 0)
        rc = kube_request(c->o.kube, "POST", path, "application/json", text, r);
    else if (strcmp(method, "DELETE") == 0)
        rc = kube_delete(c->o.kube, path, NULL, r);
    else
        rc = kube_patch(c->o.kube, path, type, text, r);
    if (rc == 0)
        return DONE;
    if (kube_is_not_found(r))
        return GONE;
    if (kube_is_already_exists(r))
        return EXISTS;
    if (kube_is_conflict(r) || r->code == 422)
        return STALE;
    return FAILED;
}

/* Takes the answer's body in place of *slot. */
static void take_body(json_object **slot, kube_resp *r)
{
    if (r->body && kobj_name(r->body)) {
        json_object_put(*slot);
        *slot = json_object_get(r->body);
    }
}

/* One step: 0 to go on deciding, 1 done, < 0 retry with backoff. */
static int run_step(struct sync *s, const snapctl_plan *p)
{
    snapctl_ctrl *c = s->c;
    char *path = NULL;
    const char *method = "PATCH";
    enum kube_patch_type type = KUBE_PATCH_MERGE;
    json_object **slot = &s->snap;
    switch (p->step) {
    case SNAPCTL_NONE:
    case SNAPCTL_FAIL:
        for (int i = 0; i < 2; i++)
            event(c, s->snap, &p->event[i]);
        if (p->fail)
            return util_err_set(-EAGAIN, "%s",
                                p->event[0].message ? p->event[0].message : "not yet");
        return 1;
    case SNAPCTL_SET_ERROR:
    case SNAPCTL_SET_STATUS:
        path = kube_path(&SNAPCTL_VS, s->ns, s->name, "status");
        break;
    case SNAPCTL_SET_CLASS:
    case SNAPCTL_SET_SNAPSHOT_FINALIZERS:
        path = kube_path(&SNAPCTL_VS, s->ns, s->name, NULL);
        break;
    case SNAPCTL_SET_PVC_FINALIZERS:
        path = kube_path(&KUBE_PVC, s->ns, p->target, NULL);
        slot = &s->pvc;
        break;
    case SNAPCTL_CREATE_CONTENT:
        path = kube_path(&KUBE_VOLUMESNAPSHOTCONTENT, NULL, NULL, NULL);
        method = "POST";
        slot = &s->content;
        break;
    case SNAPCTL_BIND_CONTENT:
    case SNAPCTL_MARK_CONTENT:
        path = kube_path(&KUBE_VOLUMESNAPSHOTCONTENT, NULL, p->target, NULL);
        slot = &s->content;
        break;
    case SNAPCTL_DELETE_CONTENT:
        path = kube_path(&KUBE_VOLUMESNAPSHOTCONTENT, NULL, p->target, NULL);
        method = "DELETE";
        slot = NULL;
        break;
    case SNAPCTL_ADD_CONTENT_FINALIZER:
        return util_err_set(-EINVAL, "not a snapshot step");
    }
    /* A new content may name a Secret; the name is no secret, its data
     * never passes here. */
    obs_v(5, "VolumeSnapshot %s: %s %s %s", s->key, method, path, p->text ? p->text : "");
    kube_resp r = {0};
    enum outcome out = write_api(c, method, path, type, p->text, &r);
    int rc = 0;
    switch (out) {
    case DONE:
        obs_v(2, "VolumeSnapshot %s: %s%s%s", s->key, snapctl_step_name(p->step),
              p->target ? " " : "", p->target ? p->target : "");
        if (slot)
            take_body(slot, &r);
        else
            s->content_deleted = true;
        break;
    case EXISTS:
        if (p->step == SNAPCTL_CREATE_CONTENT) {
            /* Ours from an earlier try (upstream reuses it): read it. */
            kube_resp g = {0};
            char *gp = kube_path(&KUBE_VOLUMESNAPSHOTCONTENT, NULL, p->target, NULL);
            if (kube_get(c->o.kube, gp, &g) == 0)
                take_body(&s->content, &g);
            else
                rc = util_err_set(-EAGAIN, "content %s: %s", p->target, g.message);
            free(gp);
            kube_resp_clear(&g);
            obs_v(3, "VolumeSnapshot %s: content %s already exists, reusing", s->key, p->target);
            break;
        }
        rc = util_err_set(-EEXIST, "%s: %s", snapctl_step_name(p->step), r.message);
        break;
    case GONE:
        if (p->step == SNAPCTL_DELETE_CONTENT || p->step == SNAPCTL_MARK_CONTENT) {
            /* The content went meanwhile: nothing left to mark or delete. */
            json_object_put(s->content);
            s->content = NULL;
            s->content_deleted = true;
            break;
        }
        rc = util_err_set(-EAGAIN, "%s: %s", snapctl_step_name(p->step), r.message);
        break;
    case STALE:
        obs_v(4, "VolumeSnapshot %s: %s: %s; deciding again", s->key, snapctl_step_name(p->step),
              r.message);
        rc = util_err_set(-EAGAIN, "%s", r.message);
        break;
    case FAILED:
        obs_warn("VolumeSnapshot %s: %s failed: %s", s->key, snapctl_step_name(p->step), r.message);
        if (p->step == SNAPCTL_CREATE_CONTENT) {
            snapctl_event ev = {"Warning", "CreateSnapshotContentFailed", NULL};
            ev.message =
                util_asprintf("Error creating volume snapshot content object for snapshot %s: %s.",
                              s->key, r.message);
            event(c, s->snap, &ev);
            free(ev.message);
        } else if (p->step == SNAPCTL_DELETE_CONTENT) {
            snapctl_event ev = {"Warning", "SnapshotContentObjectDeleteError",
                                (char *)"Failed to delete snapshot content API object"};
            event(c, s->snap, &ev);
        }
        rc = util_err_set(-EIO, "%s", r.message);
        break;
    }
    kube_resp_clear(&r);
    free(path);
    if (rc < 0)
        return rc;
    for (int i = 0; i < 2; i++)
        event(c, s->snap, &p->event[i]);
    if (p->last)
        return p->fail ? util_err_set(-EAGAIN, "%s",
                                      p->event[0].message ? p->event[0].message : "failed")
                       : 1;
    return 0;
}

static int sync_snapshot(void *ud, const char *key)
{
    struct sync s = {.c = ud, .key = key};
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = util_asprintf("%.*s", (int)(slash - key), key);
    s.ns = ns;
    s.name = slash + 1;
    s.snap = kube_informer_get(s.c->snaps, ns, s.name);
    int rc = 0;
    if (s.snap && snapctl_source_pvc(s.snap))
        s.pvc = kube_informer_get(s.c->pvcs, ns, snapctl_source_pvc(s.snap));
    for (int i = 0; s.snap && rc == 0; i++) {
        if (i == MAX_STEPS) {
            rc = util_err_set(-EAGAIN, "no end after %d steps", MAX_STEPS);
            break;
        }
        /* Read again each step: a write's answer replaced s.snap. */
        const char *pvc_name = snapctl_source_pvc(s.snap);
        refresh_content(&s);
        const char *cname = kobj_path_str(s.snap, "spec.volumeSnapshotClassName");
        json_object *cls = cname ? kube_informer_get(s.c->classes, NULL, cname) : NULL;
        if (!cname && !s.classes) {
            s.classes = json_object_new_array();
            kube_informer_each(s.c->classes, collect, s.classes);
        }
        const char *vol = kobj_path_str(s.pvc, "spec.volumeName");
        json_object *pv = vol && *vol ? kube_informer_get(s.c->pvs, NULL, vol) : NULL;
        struct scan used = {.self = s.snap, .pvc = pvc_name};
        if (pvc_name)
            kube_informer_by_index(s.c->snaps, "ns", ns, other_uses_pvc, &used);
        struct scan restoring = {.self = s.snap};
        if (kobj_deleting(s.snap))
            kube_informer_by_index(s.c->pvcs, "ns", ns, restores_self, &restoring);
        snapctl_in in = {.snapshot = s.snap,
                         .cls = cls,
                         .classes = s.classes,
                         .pvc = s.pvc,
                         .pv = pv,
                         .content = s.content,
                         .content_deleted = s.content_deleted,
                         .pvc_used_by_others = used.hit,
                         .restoring = restoring.hit,
                         .now = time(NULL)};
        snapctl_plan p;
        rc = snapctl_plan_snapshot(&s.c->o.cfg, &in, &p);
        if (rc < 0) {
            /* Nothing a retry mends: its next update queues it again. */
            obs_warn("VolumeSnapshot %s: %s", key, util_err_last());
            rc = 1;
        } else {
            obs_v(4, "VolumeSnapshot %s: step %s", key, snapctl_step_name(p.step));
            rc = run_step(&s, &p);
        }
        snapctl_plan_clear(&p);
        json_object_put(cls);
        json_object_put(pv);
    }
    if (rc < 0)
        obs_v(3, "VolumeSnapshot %s: retrying after backoff: %s", key, util_err_last());
    json_object_put(s.snap);
    json_object_put(s.pvc);
    json_object_put(s.content);
    json_object_put(s.classes);
    free(ns);
    return rc < 0 ? rc : 0;
}

/* ---- the content's sync
 * -------------------------------------------------------------------------- */

static int sync_content(void *ud, const char *key)
{
    snapctl_ctrl *c = ud;
    json_object *content = kube_informer_get(c->contents, NULL, key);
    if (!content)
        return 0;
    char *skey = snapctl_content_snapshot_key(content);
    json_object *snap = NULL;
    if (skey) {
        char *slash = strchr(skey, '/');
        *slash = '\0';
        snap = kube_informer_get(c->snaps, skey, slash + 1);
        *slash = '/';
    }
    snapctl_plan p;
    int rc = snapctl_plan_content(content, snap, &p);
    if (rc < 0) {
        obs_warn("VolumeSnapshotContent %s: %s", key, util_err_last());
        rc = 0;
        goto out;
    }
    if (p.enqueue_snapshot && skey)
        wq_add(c->sq, skey);
    if (p.step == SNAPCTL_FAIL) {
        event(c, content, &p.event[0]);
        rc = util_err_set(-EINVAL, "%s", p.event[0].message);
        goto out;
    }
    if (p.step == SNAPCTL_ADD_CONTENT_FINALIZER || p.step == SNAPCTL_MARK_CONTENT) {
        char *path = kube_path(&KUBE_VOLUMESNAPSHOTCONTENT, NULL, key, NULL);
        enum kube_patch_type type =
            p.step == SNAPCTL_MARK_CONTENT ? KUBE_PATCH_MERGE : KUBE_PATCH_JSON;
        kube_resp r = {0};
        obs_v(5, "VolumeSnapshotContent %s: PATCH %s %s", key, path, p.text);
        enum outcome out = write_api(c, "PATCH", path, type, p.text, &r);
        if (out == DONE)
            obs_v(2, "VolumeSnapshotContent %s: %s", key, snapctl_step_name(p.step));
        else if (out != GONE)
            rc = util_err_set(-EAGAIN, "%s: %s", snapctl_step_name(p.step), r.message);
        kube_resp_clear(&r);
        free(path);
    }
out:
    snapctl_plan_clear(&p);
    json_object_put(snap);
    json_object_put(content);
    free(skey);
    return rc;
}

/* ---- events
 * -------------------------------------------------------------------------------------- */

static void queue_key(wq *q, const json_object *obj)
{
    char *key = kube_key(obj);
    if (key)
        wq_add(q, key);
    free(key);
}

static void snap_added(void *ud, json_object *obj)
{
    queue_key(((snapctl_ctrl *)ud)->sq, obj);
}

static void snap_updated(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    snap_added(ud, obj);
}

/* deleteSnapshot: its bound content may now go. */
static void snap_deleted(void *ud, json_object *obj)
{
    const char *bound = snapctl_bound_content(obj);
    if (bound)
        wq_add(((snapctl_ctrl *)ud)->cq, bound);
}

static void content_added(void *ud, json_object *obj)
{
    queue_key(((snapctl_ctrl *)ud)->cq, obj);
}

static void content_updated(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    content_added(ud, obj);
}

/* deleteContent: its snapshot may now lose the bound finalizer. */
static void content_deleted(void *ud, json_object *obj)
{
    char *key = snapctl_content_snapshot_key(obj);
    if (key)
        wq_add(((snapctl_ctrl *)ud)->sq, key);
    free(key);
}

static void by_namespace(const json_object *obj, void (*add)(void *ctx, const char *key), void *ctx)
{
    const char *ns = kobj_namespace(obj);
    if (ns)
        add(ctx, ns);
}

static void slim(void *ud, json_object *obj)
{
    (void)ud;
    json_object *md = kobj_obj(obj, "metadata");
    kobj_del(md, "managedFields");
    kobj_del(kobj_obj(md, "annotations"), "kubectl.kubernetes.io/last-applied-configuration");
}

/* ---- life
 * ------------------------------------------------------------------------------------------ */

static int informer(snapctl_ctrl *c, const kube_resource *res, util_duration resync,
                    kube_handlers h, kube_informer **out)
{
    kube_informer_opts o = {
        .res = res, .transform = slim, .transform_ud = c, .resync = resync, .handlers = h};
    return kube_informer_new(c->o.kube, &o, out);
}

int snapctl_ctrl_start(const snapctl_ctrl_opts *opts, snapctl_ctrl **out)
{
    *out = NULL;
    snapctl_ctrl *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    wq_opts so = {.name = SNAPCTL_QUEUE_SNAPSHOTS,
                  .base_delay = opts->retry_start,
                  .max_delay = opts->retry_max,
                  .metrics = opts->metrics};
    wq_opts co = so;
    co.name = SNAPCTL_QUEUE_CONTENTS;
    c->sq = wq_new(&so);
    c->cq = wq_new(&co);
    int rc = informer(c, &SNAPCTL_VS, opts->resync,
                      (kube_handlers){snap_added, snap_updated, snap_deleted, c, true}, &c->snaps);
    if (rc == 0)
        rc = kube_informer_add_index(c->snaps, "ns", by_namespace);
    if (rc == 0)
        rc = informer(c, &KUBE_VOLUMESNAPSHOTCONTENT, opts->resync,
                      (kube_handlers){content_added, content_updated, content_deleted, c, true},
                      &c->contents);
    if (rc == 0)
        rc = informer(c, &SNAPCTL_CLASS, 0, (kube_handlers){0}, &c->classes);
    if (rc == 0)
        rc = informer(c, &KUBE_PVC, 0, (kube_handlers){0}, &c->pvcs);
    if (rc == 0)
        rc = kube_informer_add_index(c->pvcs, "ns", by_namespace);
    if (rc == 0)
        rc = informer(c, &KUBE_PV, 0, (kube_handlers){0}, &c->pvs);
    kube_informer *all[] = {c->classes, c->pvs, c->pvcs, c->contents, c->snaps};
    for (size_t i = 0; rc == 0 && i < 5; i++)
        rc = kube_informer_start(all[i]);
    for (size_t i = 0; rc == 0 && i < 5; i++)
        rc = kube_informer_wait_for_sync(all[i], SYNC_TIMEOUT);
    int workers = opts->workers > 0 ? opts->workers : 1;
    wq_pool_opts sp = {
        .max_workers = workers, .slow_delay = UTIL_SECOND, .sync = sync_snapshot, .ud = c};
    wq_pool_opts cp = sp;
    cp.sync = sync_content;
    if (rc == 0)
        rc = wq_pool_start(c->sq, &sp);
    c->spool = rc == 0;
    if (rc == 0)
        rc = wq_pool_start(c->cq, &cp);
    c->cpool = rc == 0;
    if (rc < 0) {
        snapctl_ctrl_free(c);
        return rc;
    }
    obs_info("Starting snapshot controller: %d workers, %zu VolumeSnapshots, %zu "
             "VolumeSnapshotContents, %zu VolumeSnapshotClasses cached",
             workers, kube_informer_count(c->snaps), kube_informer_count(c->contents),
             kube_informer_count(c->classes));
    *out = c;
    return 0;
}

void snapctl_ctrl_free(snapctl_ctrl *c)
{
    if (!c)
        return;
    kube_informer *all[] = {c->snaps, c->contents, c->classes, c->pvcs, c->pvs};
    for (size_t i = 0; i < 5; i++)
        kube_informer_stop(all[i]);
    wq_shutdown(c->sq, false);
    wq_shutdown(c->cq, false);
    if (c->spool)
        wq_pool_join(c->sq);
    if (c->cpool)
        wq_pool_join(c->cq);
    for (size_t i = 0; i < 5; i++)
        kube_informer_free(all[i]);
    wq_free(c->sq);
    wq_free(c->cq);
    free(c);
}
