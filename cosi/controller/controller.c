/*
 * The controller: BucketClaims (all namespaces) -> Buckets, with the steps
 * plan.c decides.
 *
 * Informer events only queue claim keys ("namespace/name") on one common/wq
 * queue served by an elastic pool of --worker-threads workers; wq keeps one
 * key on one worker at a time and backs failures off from
 * --retry-interval-start to --retry-interval-max. A Bucket's change queues
 * its claim (spec.bucketClaim) and the claims that name it in
 * spec.existingBucketName (an index); a class's change queues the claims of
 * that class (an index), so a claim waiting for either moves on at once.
 *
 * A sync runs the plan's steps back to back, each decided on the answer of
 * the last write: a greenfield claim costs 3 writes (finalizer, Bucket,
 * status) and no GET. The answers are kept ("overlay", keyed by kind and
 * key) until the informers show the same or a newer resourceVersion, and
 * syncs read them instead of an older cached copy: a sync woken by our own
 * earlier write never repeats a create or a patch against a stale cache.
 * A 409 or a failed `test` (422) means the object moved on: the key comes
 * back after its backoff, decided again from fresher state, without an Event.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/linkhash.h>

#include "controller.h"
#include "cosi/cosi.h"
#include "kobj/kobj.h"
#include "wq/wq.h"

/* Steps one sync may run: finalizer, Bucket (+ a GET), status, and slack. */
#define MAX_STEPS       8
#define OVERLAY_MAX_AGE (5 * UTIL_MINUTE)
/* A copy of ours the cache has no object for: see fresh(). */
#define OVERLAY_ALONE_MAX_AGE (10 * UTIL_SECOND)
#define OVERLAY_SWEEP         256
#define SYNC_TIMEOUT          (5 * UTIL_MINUTE)

/* What we last wrote (or read with a GET) of an object. */
struct written {
    char *uid, *rv, *json;
    util_duration at; /* monotonic */
};

struct cctl_ctrl {
    cctl_ctrl_opts o;
    kube_informer *claims, *buckets, *classes;
    wq *q;
    bool pool;
    pthread_mutex_t mu;       /* guards overlay */
    struct lh_table *overlay; /* "c:ns/name" | "b:name" -> struct written */
};

/* ---- the overlay of our own writes --------------------------------------------------------- */

static void free_written(struct lh_entry *e)
{
    struct written *w = lh_entry_v(e);
    free(lh_entry_k(e));
    if (w) {
        free(w->uid);
        free(w->rv);
        free(w->json);
        free(w);
    }
}

static char *okey(char kind, const char *key)
{
    return util_asprintf("%c:%s", kind, key);
}

/* Called with mu held: entries whose object the informer never showed
 * again (a relist skipped it) must not pile up. */
static void sweep(cctl_ctrl *c, util_duration now)
{
    if (c->overlay->count < OVERLAY_SWEEP)
        return;
    struct lh_entry *e, *tmp;
    lh_foreach_safe(c->overlay, e, tmp)
    {
        const struct written *w = lh_entry_v(e);
        if (now - w->at > OVERLAY_MAX_AGE)
            lh_table_delete_entry(c->overlay, e);
    }
}

static void overlay_put(cctl_ctrl *c, char kind, const json_object *obj)
{
    /* An answer the informer would refuse is not trusted over its copy. */
    if (kube_object_check(kind == 'b' ? &KUBE_BUCKET : &KUBE_BUCKETCLAIM, obj, NULL) < 0) {
        obs_v(2, "not keeping a malformed answer: %s", util_err_last());
        return;
    }
    char *key = kube_key(obj);
    const char *rv = kobj_rv(obj);
    /* A version that does not compare could never be superseded. */
    if (!key || !rv || kobj_rv_cmp(rv, rv) != 0) {
        free(key);
        return;
    }
    struct written *w = util_calloc(1, sizeof(*w));
    w->uid = util_strdup(kobj_uid(obj) ? kobj_uid(obj) : "");
    w->rv = util_strdup(rv);
    w->json = kobj_to_text(obj, NULL);
    w->at = util_now_mono();
    char *k = okey(kind, key);
    free(key);
    pthread_mutex_lock(&c->mu);
    sweep(c, w->at);
    lh_table_delete(c->overlay, k);
    lh_table_insert(c->overlay, k, w);
    pthread_mutex_unlock(&c->mu);
}

static void overlay_drop(cctl_ctrl *c, char kind, const char *key)
{
    char *k = okey(kind, key);
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->overlay, k);
    pthread_mutex_unlock(&c->mu);
    free(k);
}

/* An informer event: our copy is superseded once the cache holds its
 * resourceVersion or a newer one, another incarnation, or nothing. */
static void overlay_seen(cctl_ctrl *c, char kind, const json_object *obj, bool deleted)
{
    char *key = kube_key(obj);
    if (!key)
        return;
    char *k = okey(kind, key);
    free(key);
    pthread_mutex_lock(&c->mu);
    struct written *w = NULL;
    if (lh_table_lookup_ex(c->overlay, k, (void **)&w) && w) {
        const char *uid = kobj_uid(obj);
        if (deleted || !uid || strcmp(uid, w->uid) != 0 || kobj_rv_cmp(kobj_rv(obj), w->rv) >= 0)
            lh_table_delete(c->overlay, k);
    }
    pthread_mutex_unlock(&c->mu);
    free(k);
}

/*
 * The freshest copy of an object: our copy when it is newer than `cached`
 * (released then) or when the cache has none yet (a Bucket we just made),
 * else `cached`.
 */
static json_object *fresh(cctl_ctrl *c, char kind, const char *key, json_object *cached)
{
    char *k = okey(kind, key), *text = NULL;
    util_duration now = util_now_mono();
    pthread_mutex_lock(&c->mu);
    struct written *w = NULL;
    if (lh_table_lookup_ex(c->overlay, k, (void **)&w) && w) {
        bool expired = now - w->at >= OVERLAY_MAX_AGE, use = false;
        const char *uid = kobj_uid(cached);
        if (!cached) {
            /* The informer shows our write within moments; a copy it never
             * showed may be of an object gone meanwhile (its deletion came
             * before we cached it): trusted briefly only, then a GET decides
             * (the claims' resync comes back to it). */
            expired = now - w->at >= OVERLAY_ALONE_MAX_AGE;
            use = !expired;
        } else if (uid && strcmp(uid, w->uid) == 0) {
            /* At the same version ours is the later answer (a GET that
             * confirmed a decision): it wins until the informer shows that
             * version again. Versions that do not compare are trusted for
             * a while only. */
            int cmp = kobj_rv_cmp(w->rv, kobj_rv(cached));
            use = cmp >= 0 || (cmp == -2 && !expired);
        }
        if (use)
            text = util_strdup(w->json);
        else if (expired)
            lh_table_delete(c->overlay, k);
    }
    pthread_mutex_unlock(&c->mu);
    free(k);
    if (!text)
        return cached;
    json_object *o = kobj_parse_text(text, strlen(text));
    free(text);
    if (!o)
        return cached;
    json_object_put(cached);
    return o;
}

/* ---- reads --------------------------------------------------------------------------------- */

static json_object *get_claim(cctl_ctrl *c, const char *ns, const char *name, const char *key)
{
    json_object *claim = kube_informer_get(c->claims, ns, name);
    /* A claim gone from the cache is gone: our copy does not revive it. */
    return claim ? fresh(c, 'c', key, claim) : NULL;
}

static json_object *get_bucket(cctl_ctrl *c, const char *name)
{
    return name ? fresh(c, 'b', name, kube_informer_get(c->buckets, NULL, name)) : NULL;
}

/* ---- writes -------------------------------------------------------------------------------- */

enum outcome {
    DONE = 0, /* written; the answer is in the overlay */
    GONE,     /* 404 */
    STALE,    /* 409 or a failed test (422): decide again later */
    EXISTS,   /* a create's 409 AlreadyExists */
    FAILED,   /* any other error, message in r->message */
};

static enum outcome api_write(cctl_ctrl *c, char kind, const char *method, const char *path,
                              enum kube_patch_type type, const char *text, kube_resp *r)
{
    int rc;
    if (strcmp(method, "PATCH") == 0)
        rc = kube_patch(c->o.kube, path, type, text, r);
    else if (strcmp(method, "DELETE") == 0)
        rc = kube_delete(c->o.kube, path, text, r);
    else
        rc = kube_request(c->o.kube, method, path, "application/json", text, r);
    if (rc == 0) {
        /* A DELETE ends the sync; its answer (the object marked, or a
         * Status) is not kept: only the informer tells when it is gone, and
         * an older copy of ours must not stand in for it either. */
        if (strcmp(method, "DELETE") != 0 && r->body && kobj_rv(r->body) && kobj_meta(r->body))
            overlay_put(c, kind, r->body);
        return DONE;
    }
    if (kube_is_not_found(r))
        return GONE;
    if (kube_is_already_exists(r))
        return EXISTS;
    if (kube_is_conflict(r) || r->code == 422)
        return STALE;
    return FAILED;
}

static void event(cctl_ctrl *c, const json_object *claim, const char *reason, const char *msg)
{
    if (c->o.events)
        kube_event(c->o.events, claim, "Warning", reason, "%s", msg);
}

/* ---- sync ---------------------------------------------------------------------------------- */

struct sync {
    cctl_ctrl *c;
    const char *key, *ns, *name;
    json_object *claim, *bucket;
};

/*
 * The GET behind a decision the cache alone must not make: 1 when the
 * Bucket is gone, or (with `unless_owned`) found but not the claim's; 0
 * when found (now in the overlay, to plan again from); < 0 on error, a
 * malformed answer included.
 */
static int confirm(struct sync *s, const char *bucket, bool unless_owned)
{
    char *path = kube_path(&KUBE_BUCKET, NULL, bucket, NULL);
    kube_resp r = {0};
    int rc = kube_get(s->c->o.kube, path, &r);
    free(path);
    bool gone = rc < 0 && kube_is_not_found(&r);
    if (rc == 0 && kube_object_check(&KUBE_BUCKET, r.body, bucket) < 0)
        rc = util_err_set(-EIO, "reading Bucket %s: %s", bucket, util_err_last());
    else if (gone || (rc == 0 && unless_owned && !cctl_bucket_owned(r.body, s->claim)))
        rc = 1;
    else if (rc == 0)
        overlay_put(s->c, 'b', r.body);
    else
        rc = util_err_set(rc, "reading Bucket %s: %s", bucket, r.message);
    kube_resp_clear(&r);
    return rc;
}

/* Runs one planned step: 0 to plan again, 1 when the sync is done, < 0 to
 * retry after the backoff. */
static int run_step(struct sync *s, const cctl_plan *p)
{
    cctl_ctrl *c = s->c;
    char *path = NULL;
    char kind = 'c';
    const char *method = "PATCH", *what = "";
    enum kube_patch_type type = KUBE_PATCH_JSON;
    const char *reason = COSI_REASON_FAILED_CREATE_BUCKET;
    switch (p->step) {
    case CCTL_NONE:
        return 1;
    case CCTL_FAIL:
        obs_v(3, "BucketClaim %s: %s", s->key, p->message);
        event(c, s->claim, p->reason, p->message);
        return util_err_set(-EAGAIN, "%s", p->message);
    case CCTL_ADD_FINALIZER:
        path = kube_path(&KUBE_BUCKETCLAIM, s->ns, s->name, NULL);
        what = "finalizer added";
        break;
    case CCTL_REMOVE_FINALIZER:
        if (p->confirm) {
            int rc = confirm(s, p->bucket, true);
            if (rc <= 0)
                return rc;
        }
        path = kube_path(&KUBE_BUCKETCLAIM, s->ns, s->name, NULL);
        what = "finalizer removed";
        reason = COSI_REASON_FAILED_DELETE_BUCKET;
        break;
    case CCTL_SET_STATUS:
        path = kube_path(&KUBE_BUCKETCLAIM, s->ns, s->name, "status");
        type = KUBE_PATCH_MERGE;
        what = "status set";
        break;
    case CCTL_CREATE_BUCKET:
        path = kube_path(&KUBE_BUCKET, NULL, NULL, NULL);
        kind = 'b';
        method = "POST";
        what = "Bucket created";
        break;
    case CCTL_BIND_BUCKET:
        path = kube_path(&KUBE_BUCKET, NULL, p->bucket, NULL);
        kind = 'b';
        type = KUBE_PATCH_MERGE;
        what = "Bucket bound";
        break;
    case CCTL_DELETE_BUCKET:
        path = kube_path(&KUBE_BUCKET, NULL, p->bucket, NULL);
        kind = 'b';
        method = "DELETE";
        what = "Bucket deletion requested";
        reason = COSI_REASON_FAILED_DELETE_BUCKET;
        break;
    }
    /* The Bucket's text holds the class parameters: not for the log. */
    if (p->step != CCTL_CREATE_BUCKET)
        obs_v(5, "BucketClaim %s: %s %s %s", s->key, method, path, p->text ? p->text : "");
    kube_resp r = {0};
    enum outcome out = api_write(c, kind, method, path, type, p->text, &r);
    free(path);
    int rc = 0;
    switch (out) {
    case DONE:
        obs_v(2, "BucketClaim %s: %s (Bucket %s)", s->key, what, p->bucket ? p->bucket : "");
        if (p->step == CCTL_DELETE_BUCKET)
            overlay_drop(c, 'b', p->bucket);
        /* After these the rest is the sidecar's or the API server's. */
        rc = p->step == CCTL_DELETE_BUCKET || p->step == CCTL_REMOVE_FINALIZER;
        break;
    case EXISTS:
        /* Ours from an earlier try, or another's: the next plan tells. */
        rc = p->step == CCTL_CREATE_BUCKET ? confirm(s, p->bucket, false)
                                           : util_err_set(-EEXIST, "%s: %s", what, r.message);
        if (rc > 0)
            rc = util_err_set(-EAGAIN, "Bucket %s: exists, then gone", p->bucket);
        break;
    case GONE:
        if (p->step == CCTL_CREATE_BUCKET) {
            /* No collection to create in: the CRD is missing. */
            obs_warn("BucketClaim %s: %s failed: %s", s->key, what, r.message);
            event(c, s->claim, reason, r.message);
            rc = util_err_set(-ENOENT, "%s", r.message);
            break;
        }
        /* The claim or the Bucket went away: its delete event requeues. */
        rc = p->step == CCTL_BIND_BUCKET ? -EAGAIN : 1;
        break;
    case STALE:
        obs_v(4, "BucketClaim %s: %s: %s; deciding again", s->key, what, r.message);
        overlay_drop(c, kind, kind == 'b' ? p->bucket : s->key);
        rc = util_err_set(-EAGAIN, "%s", r.message);
        break;
    case FAILED:
        obs_warn("BucketClaim %s: %s failed: %s", s->key, what, r.message);
        event(c, s->claim, reason, r.message);
        rc = util_err_set(-EIO, "%s", r.message);
        break;
    }
    kube_resp_clear(&r);
    return rc;
}

static int sync_claim(void *ud, const char *key)
{
    struct sync s = {.c = ud, .key = key};
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = util_asprintf("%.*s", (int)(slash - key), key);
    s.ns = ns;
    s.name = slash + 1;
    int rc = 0;
    for (int i = 0; rc == 0; i++) {
        if (i == MAX_STEPS) {
            rc = util_err_set(-EAGAIN, "no end after %d steps", MAX_STEPS);
            break;
        }
        json_object_put(s.claim);
        json_object_put(s.bucket);
        s.bucket = NULL;
        s.claim = get_claim(s.c, s.ns, s.name, key);
        if (!s.claim)
            break;
        char *bname = cctl_bucket_name(s.claim);
        s.bucket = get_bucket(s.c, bname);
        free(bname);
        const char *cname = cctl_class_name(s.claim);
        json_object *cls = cname ? kube_informer_get(s.c->classes, NULL, cname) : NULL;
        cctl_plan p;
        rc = cctl_plan_next(s.claim, cls, s.bucket, &p);
        json_object_put(cls);
        if (rc < 0) {
            /* Nothing a retry can mend: the claim's next update requeues it. */
            obs_warn("BucketClaim %s: %s", key, util_err_last());
            rc = 0;
            break;
        }
        rc = run_step(&s, &p);
        cctl_plan_clear(&p);
    }
    json_object_put(s.claim);
    json_object_put(s.bucket);
    free(ns);
    if (rc < 0)
        obs_v(4, "BucketClaim %s: retrying after backoff: %s", key, util_err_last());
    return rc < 0 ? rc : 0;
}

/* ---- events -------------------------------------------------------------------------------- */

static void queue(cctl_ctrl *c, const json_object *claim)
{
    char *key = kube_key(claim);
    if (key)
        wq_add(c->q, key);
    free(key);
}

static void queue_each(void *ud, json_object *claim)
{
    queue(ud, claim);
}

static void claim_added(void *ud, json_object *claim)
{
    overlay_seen(ud, 'c', claim, false);
    queue(ud, claim);
}

static void claim_updated(void *ud, json_object *old, json_object *claim)
{
    (void)old;
    claim_added(ud, claim);
}

static void claim_deleted(void *ud, json_object *claim)
{
    overlay_seen(ud, 'c', claim, true);
}

/* A Bucket's claim, and the claims waiting to bind it by name. */
static void bucket_changed(cctl_ctrl *c, const json_object *bucket, bool deleted)
{
    overlay_seen(c, 'b', bucket, deleted);
    char *key = cctl_bucket_claim_key(bucket);
    if (key)
        wq_add(c->q, key);
    free(key);
    const char *name = kobj_name(bucket);
    if (name)
        kube_informer_by_index(c->claims, "existing", name, queue_each, c);
}

static void bucket_added(void *ud, json_object *bucket)
{
    bucket_changed(ud, bucket, false);
}

static void bucket_updated(void *ud, json_object *old, json_object *bucket)
{
    (void)old;
    bucket_changed(ud, bucket, false);
}

static void bucket_deleted(void *ud, json_object *bucket)
{
    bucket_changed(ud, bucket, true);
}

static void class_changed(void *ud, json_object *cls)
{
    cctl_ctrl *c = ud;
    const char *name = kobj_name(cls);
    if (name)
        kube_informer_by_index(c->claims, "class", name, queue_each, c);
}

static void class_updated(void *ud, json_object *old, json_object *cls)
{
    (void)old;
    class_changed(ud, cls);
}

static void by_class(const json_object *claim, void (*add)(void *ctx, const char *key), void *ctx)
{
    const char *n = cctl_class_name(claim);
    if (n)
        add(ctx, n);
}

static void by_existing(const json_object *claim, void (*add)(void *ctx, const char *key),
                        void *ctx)
{
    const char *n = cctl_existing_name(claim);
    if (n)
        add(ctx, n);
}

/* Only what the plan reads is worth its memory in the cache. */
static void slim(void *ud, json_object *obj)
{
    (void)ud;
    json_object *md = kobj_obj(obj, "metadata");
    kobj_del(md, "managedFields");
    kobj_del(kobj_obj(md, "annotations"), "kubectl.kubernetes.io/last-applied-configuration");
}

/* ---- life ---------------------------------------------------------------------------------- */

static int informer(cctl_ctrl *c, const kube_resource *res, util_duration resync, kube_handlers h,
                    kube_informer **out)
{
    kube_informer_opts o = {
        .res = res, .transform = slim, .transform_ud = c, .resync = resync, .handlers = h};
    return kube_informer_new(c->o.kube, &o, out);
}

int cctl_ctrl_start(const cctl_ctrl_opts *opts, cctl_ctrl **out)
{
    *out = NULL;
    cctl_ctrl *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    pthread_mutex_init(&c->mu, NULL);
    c->overlay = lh_kchar_table_new(64, free_written);
    wq_opts qo = {.name = "bucketclaims",
                  .base_delay = opts->retry_start,
                  .max_delay = opts->retry_max,
                  .metrics = opts->metrics};
    c->q = wq_new(&qo);
    int rc =
        informer(c, &KUBE_BUCKETCLAIM, opts->resync,
                 (kube_handlers){claim_added, claim_updated, claim_deleted, c, true}, &c->claims);
    if (rc == 0)
        rc = kube_informer_add_index(c->claims, "class", by_class);
    if (rc == 0)
        rc = kube_informer_add_index(c->claims, "existing", by_existing);
    if (rc == 0)
        rc = informer(c, &KUBE_BUCKET, 0,
                      (kube_handlers){bucket_added, bucket_updated, bucket_deleted, c, true},
                      &c->buckets);
    if (rc == 0)
        rc = informer(c, &KUBE_BUCKETCLASS, 0,
                      (kube_handlers){class_changed, class_updated, NULL, c, true}, &c->classes);
    kube_informer *all[] = {c->classes, c->buckets, c->claims};
    for (size_t i = 0; rc == 0 && i < 3; i++)
        rc = kube_informer_start(all[i]);
    for (size_t i = 0; rc == 0 && i < 3; i++)
        rc = kube_informer_wait_for_sync(all[i], SYNC_TIMEOUT);
    wq_pool_opts po = {.max_workers = opts->workers > 0 ? opts->workers : 1,
                       .slow_delay = UTIL_SECOND,
                       .sync = sync_claim,
                       .ud = c};
    if (rc == 0)
        rc = wq_pool_start(c->q, &po);
    c->pool = rc == 0;
    if (rc < 0) {
        cctl_ctrl_stop(c);
        return rc;
    }
    obs_info("objectstorage-controller started: %d workers, %zu BucketClaims, %zu Buckets, %zu "
             "BucketClasses cached",
             po.max_workers, kube_informer_count(c->claims), kube_informer_count(c->buckets),
             kube_informer_count(c->classes));
    *out = c;
    return 0;
}

void cctl_ctrl_stop(cctl_ctrl *c)
{
    if (!c)
        return;
    kube_informer *all[] = {c->claims, c->buckets, c->classes};
    for (size_t i = 0; i < 3; i++)
        kube_informer_stop(all[i]);
    wq_shutdown(c->q, false);
    if (c->pool)
        wq_pool_join(c->q);
    for (size_t i = 0; i < 3; i++)
        kube_informer_free(all[i]);
    wq_free(c->q);
    lh_table_free(c->overlay);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
