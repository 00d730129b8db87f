/*
 * The sidecar's controller: Buckets of this driver are created and deleted
 * in the driver, BucketAccesses of this driver's classes are granted and
 * revoked, each grant leaving a Secret with the BucketInfo.
 *
 * Informers cache Buckets, BucketClaims, BucketAccesses (all namespaces)
 * and BucketAccessClasses; Secrets are only ever read, made and deleted by
 * name. Events only queue keys; a Bucket queue (key: name) and a
 * BucketAccess queue (key: namespace/name) each run --worker-threads
 * workers, and a sync reads the caches, asks plan_*.c what to do and does
 * it. Indexes: accesses by "<namespace>/<claim>" and by class, Buckets by
 * their claim's "<namespace>/<name>", so a claim or Bucket becoming ready
 * requeues the accesses waiting on it, a class appearing requeues its
 * accesses, and an access deleted requeues its Bucket when that one is
 * being deleted (it waits for its accesses).
 *
 * Every patch is a merge patch guarded by the resourceVersion it was
 * decided on; a 409 sends the key back quietly. After a write of a Bucket
 * or an access, its uid -> resourceVersion is remembered until the cache
 * shows that version: a sync that meanwhile reads an older copy waits for
 * the watch instead of repeating a driver call on stale state.
 *
 * Credentials: the grant's answer, the BucketInfo and the Secret are held
 * only as long as the sync needs them and never logged; the answer's
 * values and our BucketInfo text are wiped before they are freed (the
 * copies json-c and the kube client make are not). kube's client logs no
 * bodies, and answers nobody reads (a Secret's) are not even parsed.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/linkhash.h>

#include "cosi/sidecar/cosisidecar.h"
#include "kobj/kobj.h"
#include "wq/wq.h"

/* A sync that read a copy older than our last write looks again after this
 * (the watch event of that write queues it sooner). */
#define STALE_RETRY (500 * UTIL_MS)

struct csc_ctrl {
    csc_ctrl_opts o;
    kube_informer *buckets, *claims, *accesses, *classes;
    wq *bq, *aq;
    pthread_mutex_t mu;
    struct lh_table *written; /* uid -> resourceVersion of our last write */
};

/* ---- our writes vs the cache ------------------------------------------------------------ */

static void free_entry(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free(lh_entry_v(e));
}

static void written_put(csc_ctrl *c, const json_object *answer)
{
    const char *uid = kobj_uid(answer), *rv = kobj_rv(answer);
    if (!uid || !rv)
        return;
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->written, uid);
    lh_table_insert(c->written, util_strdup(uid), util_strdup(rv));
    pthread_mutex_unlock(&c->mu);
}

/* The cache shows `obj`: forget our write once it is there (or gone). */
static void written_seen(csc_ctrl *c, const json_object *obj, bool deleted)
{
    const char *uid = kobj_uid(obj);
    if (!uid)
        return;
    pthread_mutex_lock(&c->mu);
    const char *rv = NULL;
    if (lh_table_lookup_ex(c->written, uid, (void **)&rv) &&
        (deleted || kobj_rv_cmp(kobj_rv(obj), rv) != -1))
        lh_table_delete(c->written, uid);
    pthread_mutex_unlock(&c->mu);
}

/* Is this cached copy older than what we last wrote? */
static bool stale(csc_ctrl *c, const json_object *obj)
{
    written_seen(c, obj, false);
    const char *uid = kobj_uid(obj);
    pthread_mutex_lock(&c->mu);
    bool r = uid && lh_table_lookup_entry(c->written, uid) != NULL;
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* ---- API helpers --------------------------------------------------------------------------- */

/*
 * A merge patch `text` (freed here) of res/ns/name[/sub]: 0 with *answer
 * (may be NULL) on success; -EAGAIN on 409 (decided on a stale copy: the
 * key goes back quietly); -ENOENT on 404; else the error with
 * util_err_last() naming it.
 */
static int patch(csc_ctrl *c, const kube_resource *res, const char *ns, const char *name,
                 const char *sub, char *text, json_object **answer)
{
    if (answer)
        *answer = NULL;
    char *path = kube_path(res, ns, name, sub);
    bool track = res == &KUBE_BUCKET || res == &KUBE_BUCKETACCESS;
    /* An answer nobody reads is not even parsed (a Secret's holds its data). */
    kube_resp r = {.skip_body = !track && !answer};
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_MERGE, text, &r);
    free(text);
    if (rc == 0) {
        /* An answer the informer would refuse is neither remembered nor
         * handed on: a later step would decide on its broken fields (the
         * account named by its uid, the claim by its bucketClaim). The
         * caller goes on with its own copy; a guarded write then meets a
         * 409 and the key comes back. */
        bool usable = r.body && kube_object_check(res, r.body, name) == 0;
        if (usable && track)
            written_put(c, r.body);
        if (usable && answer)
            *answer = json_object_get(r.body);
    } else if (kube_is_conflict(&r)) {
        obs_v(4, "%s %s%s%s: changed meanwhile, again later", res->kind, ns ? ns : "",
              ns ? "/" : "", name);
        rc = -EAGAIN;
    } else if (kube_is_not_found(&r)) {
        rc = util_err_set(-ENOENT, "%s", r.message);
    } else {
        rc = util_err_set(rc, "%s", r.message);
    }
    kube_resp_clear(&r);
    free(path);
    return rc;
}

/* Records a Warning Event and logs it; returns `rc` for the sync. */
static int fail(csc_ctrl *c, const json_object *obj, const char *reason, int rc, const char *fmt,
                ...) UTIL_ATTR_PRINTF(5, 6);
static int fail(csc_ctrl *c, const json_object *obj, const char *reason, int rc, const char *fmt,
                ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    const char *m = msg ? msg : reason;
    obs_v(2, "%s %s%s%s: %s: %s", kobj_str(obj, "kind") ? kobj_str(obj, "kind") : "object",
          kobj_namespace(obj) ? kobj_namespace(obj) : "", kobj_namespace(obj) ? "/" : "",
          kobj_name(obj) ? kobj_name(obj) : "", reason, m);
    if (c->o.events)
        kube_event(c->o.events, obj, "Warning", reason, "%s", m);
    free(msg);
    return rc < 0 ? rc : -EAGAIN;
}

/* A patch's failure: 409 goes back quietly, anything else is an Event. */
static int patch_failed(csc_ctrl *c, const json_object *obj, const char *reason, int rc,
                        const char *what)
{
    if (rc == -EAGAIN)
        return rc;
    return fail(c, obj, reason, rc, "%s: %s", what, util_err_last());
}

static char *key_of(const char *ns, const char *name)
{
    return util_asprintf("%s/%s", ns ? ns : "", name ? name : "");
}

/* ---- the driver ------------------------------------------------------------------------------ */

/* DriverCreateBucket for `bucket`: 0 with *id, or the gRPC error in *st. */
static int create_in_driver(csc_ctrl *c, const json_object *bucket, char **id, csi_status *st)
{
    *id = NULL;
    Cosi__V1alpha1__DriverCreateBucketRequest *req = NULL;
    int rc = csc_create_bucket_request(bucket, &req);
    if (rc < 0)
        return csi_status_set(st, CSI_INVALID_ARGUMENT, "%s", util_err_last());
    Cosi__V1alpha1__DriverCreateBucketResponse *resp = NULL;
    rc = cosi_create_bucket(c->o.cosi, req, c->o.timeout, &resp, st);
    csc_request_free(&req->base);
    if (rc == 0 && resp) {
        *id = util_strdup(resp->bucket_id);
        cosi__v1alpha1__driver_create_bucket_response__free_unpacked(resp, NULL);
    }
    return rc;
}

/* Frees a grant's answer with its credentials wiped first. */
static void grant_free(Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp)
{
    if (!resp)
        return;
    for (size_t i = 0; i < resp->n_credentials; i++) {
        const Cosi__V1alpha1__CredentialDetails *d =
            resp->credentials[i] ? resp->credentials[i]->value : NULL;
        for (size_t k = 0; d && k < d->n_secrets; k++)
            if (d->secrets[k] && d->secrets[k]->value)
                explicit_bzero(d->secrets[k]->value, strlen(d->secrets[k]->value));
    }
    cosi__v1alpha1__driver_grant_bucket_access_response__free_unpacked(resp, NULL);
}

/* DriverGrantBucketAccess; the answer holds credentials: grant_free it soon. */
static int grant_in_driver(csc_ctrl *c, const json_object *access, const json_object *cls,
                           const char *bucket_id,
                           Cosi__V1alpha1__DriverGrantBucketAccessResponse **resp, csi_status *st)
{
    *resp = NULL;
    Cosi__V1alpha1__DriverGrantBucketAccessRequest *req = NULL;
    if (csc_grant_request(access, cls, bucket_id, &req) < 0)
        return csi_status_set(st, CSI_INVALID_ARGUMENT, "%s", util_err_last());
    int rc = cosi_grant_bucket_access(c->o.cosi, req, c->o.timeout, resp, st);
    csc_request_free(&req->base);
    if (rc == 0 && !*resp)
        rc = csi_status_set(st, CSI_INTERNAL, "DriverGrantBucketAccess returned no answer");
    return rc;
}

/* ---- Buckets -------------------------------------------------------------------------------- */

/* Makes the claim of a ready Bucket say so (one status patch, only when
 * it does not yet). */
static int claim_ready(csc_ctrl *c, const json_object *bucket)
{
    csc_ref ref;
    if (!csc_bucket_claim_ref(bucket, &ref))
        return 0;
    json_object *claim = kube_informer_get(c->claims, ref.ns, ref.name);
    char *text = NULL;
    int rc = 0;
    if (claim && csc_claim_matches(claim, &ref))
        rc = csc_patch_claim_ready(claim, kobj_name(bucket), &text);
    if (rc == 0 && text) {
        rc = patch(c, &KUBE_BUCKETCLAIM, ref.ns, ref.name, "status", text, NULL);
        if (rc == 0)
            obs_v(2, "BucketClaim %s/%s: bucket %s ready", ref.ns, ref.name, kobj_name(bucket));
        else if (rc == -ENOENT)
            rc = 0; /* the claim is gone: nothing to tell */
        else
            rc = patch_failed(c, bucket, COSI_REASON_FAILED_CREATE_BUCKET, rc,
                              "failed to update the BucketClaim's status");
    }
    json_object_put(claim);
    return rc;
}

/* The class's parameters for a brownfield Bucket without any (read once,
 * by name: the sidecar keeps no BucketClass cache for this rare case). */
static int class_parameters(csc_ctrl *c, const json_object *bucket, json_object **params)
{
    *params = NULL;
    const char *cls = kobj_str(kobj_obj(bucket, "spec"), "bucketClassName");
    char *path = kube_path(&KUBE_BUCKETCLASS, NULL, cls, NULL);
    kube_resp r = {0};
    int rc = kube_get_object(c->o.kube, &KUBE_BUCKETCLASS, path, cls, &r);
    free(path);
    if (rc == 0)
        *params = json_object_get(kobj_obj(r.body, "parameters"));
    else if (kube_is_not_found(&r)) {
        char *nf = csc_not_found(&KUBE_BUCKETCLASS, cls);
        rc = fail(c, bucket, COSI_REASON_FAILED_CREATE_BUCKET, -ENOENT, "%s", nf);
        free(nf);
    } else {
        rc = fail(c, bucket, COSI_REASON_FAILED_CREATE_BUCKET, rc, "%s", r.message);
    }
    kube_resp_clear(&r);
    return rc;
}

static int provision(csc_ctrl *c, const json_object *bucket, const csc_bucket_plan *p)
{
    const char *name = kobj_name(bucket);
    json_object *cur = json_object_get((json_object *)bucket), *answer = NULL;
    char *id = NULL, *text = NULL;
    int rc = 0;
    if (p->add_finalizer) {
        /* (1) our intent on record before the driver is asked (a Bucket the
         * controller made carries it from birth). */
        json_object *params = NULL;
        if (p->class_params && (rc = class_parameters(c, bucket, &params)) < 0)
            goto out;
        rc = csc_patch_add_finalizer(cur, COSI_FINALIZER_BUCKET, params, &text);
        json_object_put(params);
        if (rc == 0 && text)
            rc = patch(c, &KUBE_BUCKET, NULL, name, NULL, text, &answer);
        if (rc < 0) {
            rc = rc == -ENOENT ? 0
                               : patch_failed(c, bucket, COSI_REASON_FAILED_CREATE_BUCKET, rc,
                                              "failed to update bucket finalizers");
            goto out;
        }
        if (answer) {
            json_object_put(cur);
            cur = answer;
        }
    }
    /* (2) the bucket's id: given, or from the driver (idempotent by name). */
    if (p->existing_id) {
        id = util_strdup(p->existing_id);
    } else {
        csi_status st = {0};
        obs_v(4, "DriverCreateBucket %s", name);
        if ((rc = create_in_driver(c, cur, &id, &st)) < 0) {
            char *msg = csc_rpc_error("failed to create bucket", &st);
            rc = fail(c, bucket, COSI_REASON_FAILED_CREATE_BUCKET, rc, "%s", msg);
            free(msg);
            goto out;
        }
    }
    /* (3) the Bucket's status, then (4) its claim's. */
    text = NULL;
    rc = csc_patch_bucket_ready(cur, id, &text);
    if (rc == 0 && text) {
        answer = NULL;
        rc = patch(c, &KUBE_BUCKET, NULL, name, "status", text, &answer);
        if (answer) {
            json_object_put(cur);
            cur = answer;
        }
    }
    if (rc < 0) {
        rc = rc == -ENOENT ? 0
                           : patch_failed(c, bucket, COSI_REASON_FAILED_CREATE_BUCKET, rc,
                                          "failed to update bucket status");
        goto out;
    }
    obs_v(2, "Bucket %s ready: bucketID %s", name, id);
    rc = claim_ready(c, cur);
out:
    free(id);
    json_object_put(cur);
    return rc;
}

struct drain {
    csc_ctrl *c;
    size_t left;
};

/* One of the accesses of a Bucket being deleted: asked to go, counted
 * until its revoke finished and it left the cache. */
static void drain_access(void *ud, json_object *access)
{
    struct drain *d = ud;
    d->left++;
    if (kobj_deleting(access))
        return;
    char *path = kube_path(&KUBE_BUCKETACCESS, kobj_namespace(access), kobj_name(access), NULL);
    kube_resp r = {.skip_body = true};
    if (kube_delete(d->c->o.kube, path, NULL, &r) == 0)
        obs_v(2, "BucketAccess %s/%s deleted: its Bucket is being deleted", kobj_namespace(access),
              kobj_name(access));
    else if (!kube_is_not_found(&r))
        obs_warn("deleting BucketAccess %s/%s: %s", kobj_namespace(access), kobj_name(access),
                 r.message);
    kube_resp_clear(&r);
    free(path);
}

static int delete_bucket(csc_ctrl *c, const json_object *bucket, const csc_bucket_plan *p)
{
    const char *name = kobj_name(bucket);
    csc_ref ref;
    bool has_ref = csc_bucket_claim_ref(bucket, &ref);
    int rc = 0;
    /* (1) accesses first, so that each is revoked before its bucket goes. */
    if (p->delete_accesses && has_ref) {
        struct drain d = {c, 0};
        char *key = key_of(ref.ns, ref.name);
        kube_informer_by_index(c->accesses, "claim", key, drain_access, &d);
        free(key);
        if (d.left > 0) {
            obs_v(2, "Bucket %s: waiting for %zu BucketAccess(es) to be revoked", name, d.left);
            return -EAGAIN;
        }
    }
    /* (2) the driver's bucket, then the claim's finalizer. */
    if (p->delete_in_driver) {
        csi_status st = {0};
        char *id = p->bucket_id ? util_strdup(p->bucket_id) : NULL;
        if (!id)
            obs_v(4, "DriverCreateBucket %s, to learn the id of the bucket to delete", name);
        if (!id && (rc = create_in_driver(c, bucket, &id, &st)) < 0) {
            char *msg = csc_rpc_error("failed to learn the bucket's id", &st);
            rc = fail(c, bucket, COSI_REASON_FAILED_DELETE_BUCKET, rc, "%s", msg);
            free(msg);
            return rc;
        }
        Cosi__V1alpha1__DriverDeleteBucketRequest *req = NULL;
        rc = csc_delete_bucket_request(bucket, id, &req);
        if (rc == 0) {
            obs_v(4, "DriverDeleteBucket %s of Bucket %s", id, name);
            rc = cosi_delete_bucket(c->o.cosi, req, c->o.timeout, &st);
            csc_request_free(&req->base);
        } else {
            csi_status_set(&st, CSI_INVALID_ARGUMENT, "%s", util_err_last());
        }
        if (rc < 0 && st.code != CSI_NOT_FOUND) {
            char *msg = csc_rpc_error("failed to delete bucket", &st);
            rc = fail(c, bucket, COSI_REASON_FAILED_DELETE_BUCKET, rc, "%s", msg);
            free(msg);
            free(id);
            return rc;
        }
        obs_v(2, "Bucket %s: bucket %s deleted in the driver", name, id);
        free(id);
    }
    if (p->release_claim && has_ref) {
        json_object *claim = kube_informer_get(c->claims, ref.ns, ref.name);
        static const char *const fins[] = {COSI_FINALIZER_CLAIM, NULL};
        char *text = NULL;
        if (claim && csc_claim_matches(claim, &ref))
            rc = csc_patch_remove_finalizers(claim, fins, &text);
        if (rc == 0 && text)
            rc = patch(c, &KUBE_BUCKETCLAIM, ref.ns, ref.name, NULL, text, NULL);
        json_object_put(claim);
        if (rc == -ENOENT)
            rc = 0;
        if (rc < 0)
            return patch_failed(c, bucket, COSI_REASON_FAILED_DELETE_BUCKET, rc,
                                "failed to remove the BucketClaim's finalizer");
    }
    /* (3) our finalizers, in one write. */
    static const char *const ours[] = {COSI_FINALIZER_BA_BUCKET, COSI_FINALIZER_BUCKET, NULL};
    char *text = NULL;
    rc = csc_patch_remove_finalizers(bucket, ours, &text);
    if (rc == 0 && text)
        rc = patch(c, &KUBE_BUCKET, NULL, name, NULL, text, NULL);
    if (rc == -ENOENT)
        rc = 0;
    if (rc < 0)
        return patch_failed(c, bucket, COSI_REASON_FAILED_DELETE_BUCKET, rc,
                            "failed to remove the Bucket's finalizers");
    obs_v(2, "Bucket %s: deletion done", name);
    return 0;
}

static int sync_bucket(void *ud, const char *name)
{
    csc_ctrl *c = ud;
    json_object *bucket = kube_informer_get(c->buckets, NULL, name);
    if (!bucket)
        return 0;
    if (stale(c, bucket)) {
        json_object_put(bucket);
        return 1;
    }
    csc_bucket_plan p;
    int rc = csc_bucket_plan_make(c->o.driver, bucket, &p);
    if (rc == 0) {
        switch (p.action) {
        case CSC_BUCKET_SKIP:
            break;
        case CSC_BUCKET_REFUSE:
            rc = fail(c, bucket, p.event.reason, -EINVAL, "%s", p.event.message);
            break;
        case CSC_BUCKET_CLAIM:
            rc = claim_ready(c, bucket);
            break;
        case CSC_BUCKET_PROVISION:
            rc = provision(c, bucket, &p);
            break;
        case CSC_BUCKET_DELETE:
            rc = delete_bucket(c, bucket, &p);
            break;
        }
    }
    csc_bucket_plan_clear(&p);
    json_object_put(bucket);
    return rc;
}

/* ---- BucketAccesses ------------------------------------------------------------------------- */

/* The Secret of a grant: made once; one that exists is left as it is. */
static int make_secret(csc_ctrl *c, const json_object *access, const json_object *cls,
                       const char *bucket_name,
                       const Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp)
{
    char *info = NULL;
    json_object *secret = NULL;
    int rc = csc_bucket_info(access, cls, bucket_name, resp, &info);
    if (rc == 0)
        rc = csc_secret_object(access, info, &secret);
    if (info) {
        explicit_bzero(info, strlen(info));
        free(info);
    }
    if (rc < 0)
        return fail(c, access, COSI_REASON_FAILED_GRANT_ACCESS, rc, "%s", util_err_last());
    char *path = kube_path(&KUBE_SECRET, kobj_namespace(access), NULL, NULL);
    kube_resp r = {.skip_body = true};
    rc = kube_create(c->o.kube, path, secret, &r);
    json_object_put(secret);
    free(path);
    if (rc == 0)
        obs_v(2, "BucketAccess %s/%s: Secret %s made", kobj_namespace(access), kobj_name(access),
              csc_access_secret_name(access));
    else if (kube_is_already_exists(&r))
        rc = 0; /* made before (or by someone else): left alone, as upstream */
    else
        rc = fail(c, access, COSI_REASON_FAILED_GRANT_ACCESS, rc,
                  "failed to create minted secret: %s", r.message);
    kube_resp_clear(&r);
    return rc;
}

static int grant(csc_ctrl *c, const json_object *access, const json_object *cls,
                 const json_object *bucket, const csc_access_plan *p)
{
    const char *ns = kobj_namespace(access), *name = kobj_name(access);
    json_object *cur = json_object_get((json_object *)access), *answer = NULL;
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp = NULL;
    char *text = NULL;
    int rc = 0;
    /* (1) our intent on record before the driver is asked. */
    if (p->record) {
        rc = csc_patch_access_intent(cur, p->bucket_id, &text);
        if (rc == 0 && text)
            rc = patch(c, &KUBE_BUCKETACCESS, ns, name, NULL, text, &answer);
        if (rc < 0) {
            rc = rc == -ENOENT ? 0
                               : patch_failed(c, access, COSI_REASON_FAILED_GRANT_ACCESS, rc,
                                              "failed to update finalizer on BucketAccess");
            goto out;
        }
        if (answer) {
            json_object_put(cur);
            cur = answer;
        }
    }
    /* (2) the grant (idempotent by account name). */
    csi_status st = {0};
    obs_v(4, "DriverGrantBucketAccess of BucketAccess %s/%s on bucket %s", ns, name, p->bucket_id);
    if ((rc = grant_in_driver(c, cur, cls, p->bucket_id, &resp, &st)) < 0 || !resp) {
        char *msg = csc_rpc_error("failed to grant bucket access", &st);
        rc = fail(c, access, COSI_REASON_FAILED_GRANT_ACCESS, rc, "%s", msg);
        free(msg);
        goto out;
    }
    csc_event ev;
    if ((rc = csc_grant_check(cur, resp, &ev)) < 0) {
        rc = fail(c, access, ev.reason, rc, "%s", ev.message);
        free(ev.message);
        goto out;
    }
    /* (3) the Secret, (4) the Bucket waits for its accesses, (5) status. */
    if ((rc = make_secret(c, cur, cls, p->bucket_name, resp)) < 0)
        goto out;
    text = NULL;
    rc = csc_patch_add_finalizer(bucket, COSI_FINALIZER_BA_BUCKET, NULL, &text);
    if (rc == 0 && text)
        rc = patch(c, &KUBE_BUCKET, NULL, kobj_name(bucket), NULL, text, NULL);
    if (rc < 0) {
        rc = patch_failed(c, access, COSI_REASON_FAILED_GRANT_ACCESS, rc,
                          "failed to update bucket finalizers");
        goto out;
    }
    text = NULL;
    rc = csc_patch_access_granted(cur, resp->account_id, &text);
    if (rc == 0 && text)
        rc = patch(c, &KUBE_BUCKETACCESS, ns, name, "status", text, NULL);
    if (rc < 0) {
        rc = rc == -ENOENT ? 0
                           : patch_failed(c, access, COSI_REASON_FAILED_GRANT_ACCESS, rc,
                                          "failed to update Status on BucketAccess");
        goto out;
    }
    obs_v(2, "BucketAccess %s/%s granted: account %s", ns, name, resp->account_id);
out:
    grant_free(resp);
    json_object_put(cur);
    return rc;
}

/* Deletes the access's Secret when we made it: DELETE first (a crash after
 * it leaves a Secret still marked ours), then our finalizer. */
/*
 * The Secret of `name` as the API server has it now, if it carries our
 * finalizer (*out NULL when it is gone or not ours). A broken answer may
 * hide our finalizer: it is an error to retry, never "not ours".
 */
static int get_our_secret(csc_ctrl *c, const char *path, const char *name, json_object **out)
{
    *out = NULL;
    kube_resp r = {0};
    int rc = kube_get(c->o.kube, path, &r);
    if (rc == 0 && kube_object_check(&KUBE_SECRET, r.body, name) < 0)
        rc = util_err_set(-EIO, "failed to get Secret %s: %s", name, util_err_last());
    else if (rc == 0 && csc_secret_is_ours(r.body))
        *out = json_object_get(r.body);
    else if (rc < 0 && kube_is_not_found(&r))
        rc = 0;
    else if (rc < 0)
        rc = util_err_set(rc, "failed to get Secret %s: %s", name, r.message);
    kube_resp_clear(&r);
    return rc;
}

static int release_secret(csc_ctrl *c, const char *ns, const char *name)
{
    char *path = kube_path(&KUBE_SECRET, ns, name, NULL);
    json_object *secret = NULL;
    int rc = get_our_secret(c, path, name, &secret);
    if (rc == 0 && secret && !kobj_deleting(secret)) {
        kube_resp r = {0};
        rc = kube_delete(c->o.kube, path, NULL, &r);
        json_object_put(secret);
        secret = NULL;
        const char *kind = rc == 0 ? kobj_str(r.body, "kind") : NULL;
        if (rc == 0 && kind && strcmp(kind, "Secret") == 0 &&
            kube_object_check(&KUBE_SECRET, r.body, name) == 0 && kobj_deleting(r.body)) {
            /* Held by our finalizer, the Secret comes back in the answer. */
            secret = json_object_get(r.body);
        } else if (rc == 0) {
            /* Any other answer (a Status, or one that does not read): only
             * the server's copy tells whether it is gone. */
            rc = get_our_secret(c, path, name, &secret);
            if (rc == 0 && secret && !kobj_deleting(secret))
                rc = util_err_set(-EIO, "failed to delete Secret %s: it is still there", name);
        } else if (kube_is_not_found(&r)) {
            rc = 0;
        } else {
            rc = util_err_set(rc, "failed to delete Secret %s: %s", name, r.message);
        }
        kube_resp_clear(&r);
    }
    if (rc < 0) {
        json_object_put(secret);
        secret = NULL;
    }
    free(path);
    if (secret) {
        static const char *const fins[] = {COSI_FINALIZER_SECRET, NULL};
        char *text = NULL;
        rc = csc_patch_remove_finalizers(secret, fins, &text);
        if (rc == 0 && text)
            rc = patch(c, &KUBE_SECRET, ns, name, NULL, text, NULL);
        if (rc == -ENOENT)
            rc = 0;
        else if (rc < 0 && rc != -EAGAIN)
            rc = util_err_set(rc, "failed to remove the finalizer of Secret %s: %s", name,
                              util_err_last());
        json_object_put(secret);
    }
    if (rc == 0)
        obs_v(2, "Secret %s/%s deleted", ns, name);
    return rc;
}

static int revoke(csc_ctrl *c, const json_object *access, const json_object *cls,
                  const csc_access_plan *p)
{
    const char *ns = kobj_namespace(access), *name = kobj_name(access);
    char *account = p->account_id ? util_strdup(p->account_id) : NULL;
    csi_status st = {0};
    int rc = 0;
    if (p->regrant) {
        /* A grant may have run without its answer stored: the same grant
         * again names the account. */
        Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp = NULL;
        rc = grant_in_driver(c, access, cls, p->bucket_id, &resp, &st);
        if (rc < 0 && st.code == CSI_NOT_FOUND) {
            /* The driver has no such bucket: no grant can be left on it. */
            obs_v(2, "BucketAccess %s/%s: bucket %s is gone in the driver: nothing to revoke", ns,
                  name, p->bucket_id);
        } else if (rc < 0 || !resp) {
            char *msg = csc_rpc_error("failed to revoke access: cannot learn the account", &st);
            rc = fail(c, access, COSI_REASON_FAILED_REVOKE_ACCESS, rc, "%s", msg);
            free(msg);
            return rc;
        } else {
            account = util_strdup(resp->account_id);
        }
        grant_free(resp);
    }
    if (p->bucket_id && account) {
        Cosi__V1alpha1__DriverRevokeBucketAccessRequest *req = NULL;
        rc = csc_revoke_request(p->bucket_id, account, &req);
        if (rc == 0) {
            obs_v(4, "DriverRevokeBucketAccess %s on bucket %s", account, p->bucket_id);
            rc = cosi_revoke_bucket_access(c->o.cosi, req, c->o.timeout, &st);
            csc_request_free(&req->base);
        }
        if (rc < 0 && st.code != CSI_NOT_FOUND) {
            char *msg = csc_rpc_error("failed to revoke access", &st);
            rc = fail(c, access, COSI_REASON_FAILED_REVOKE_ACCESS, rc, "%s", msg);
            free(msg);
            free(account);
            return rc;
        }
        obs_v(2, "BucketAccess %s/%s: account %s revoked", ns, name, account);
    }
    free(account);
    const char *secret = csc_access_secret_name(access);
    if (secret && (rc = release_secret(c, ns, secret)) < 0)
        return rc == -EAGAIN
                   ? rc
                   : fail(c, access, COSI_REASON_FAILED_REVOKE_ACCESS, rc, "%s", util_err_last());
    static const char *const fins[] = {COSI_FINALIZER_ACCESS, NULL};
    char *text = NULL;
    rc = csc_patch_remove_finalizers(access, fins, &text);
    if (rc == 0 && text)
        rc = patch(c, &KUBE_BUCKETACCESS, ns, name, NULL, text, NULL);
    if (rc == -ENOENT)
        rc = 0;
    if (rc < 0)
        return patch_failed(c, access, COSI_REASON_FAILED_REVOKE_ACCESS, rc,
                            "failed to remove the BucketAccess's finalizer");
    return 0;
}

static int sync_access(void *ud, const char *key)
{
    csc_ctrl *c = ud;
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = strndup(key, (size_t)(slash - key));
    json_object *access = kube_informer_get(c->accesses, ns, slash + 1);
    free(ns);
    if (!access)
        return 0;
    if (stale(c, access)) {
        json_object_put(access);
        return 1;
    }
    const char *cn = csc_access_class_name(access), *claim_name = csc_access_claim_name(access);
    json_object *cls = cn ? kube_informer_get(c->classes, NULL, cn) : NULL;
    json_object *claim =
        claim_name ? kube_informer_get(c->claims, kobj_namespace(access), claim_name) : NULL;
    const char *bn = csc_claim_bucket_name(claim);
    json_object *bucket = bn ? kube_informer_get(c->buckets, NULL, bn) : NULL;
    csc_access_plan p;
    int rc = csc_access_plan_make(c->o.driver, access, cls, claim, bucket, &p);
    if (rc == 0) {
        switch (p.action) {
        case CSC_ACCESS_SKIP:
            break;
        case CSC_ACCESS_REFUSE:
            rc = fail(c, access, p.event.reason, -EINVAL, "%s", p.event.message);
            break;
        case CSC_ACCESS_GRANT:
            rc = grant(c, access, cls, bucket, &p);
            break;
        case CSC_ACCESS_REVOKE:
            rc = revoke(c, access, cls, &p);
            break;
        }
    }
    csc_access_plan_clear(&p);
    json_object_put(bucket);
    json_object_put(claim);
    json_object_put(cls);
    json_object_put(access);
    return rc;
}

/* ---- informer events --------------------------------------------------------------------------
 */

static void queue_access(void *ud, json_object *access)
{
    csc_ctrl *c = ud;
    char *key = key_of(kobj_namespace(access), kobj_name(access));
    wq_add(c->aq, key);
    free(key);
}

static void queue_bucket(void *ud, json_object *bucket)
{
    csc_ctrl *c = ud;
    if (kobj_name(bucket))
        wq_add(c->bq, kobj_name(bucket));
}

static void queue_bucket_if_deleting(void *ud, json_object *bucket)
{
    if (kobj_deleting(bucket))
        queue_bucket(ud, bucket);
}

/* The accesses of claim ns/name, which may have waited for it. */
static void queue_claim_accesses(csc_ctrl *c, const char *ns, const char *name)
{
    char *key = key_of(ns, name);
    kube_informer_by_index(c->accesses, "claim", key, queue_access, c);
    free(key);
}

static void bucket_changed(csc_ctrl *c, const json_object *old, json_object *bucket)
{
    written_seen(c, bucket, false);
    queue_bucket(c, bucket);
    bool was = old && csc_ready(old) && csc_bucket_id(old);
    csc_ref ref;
    if (!was && csc_ready(bucket) && csc_bucket_id(bucket) && csc_bucket_claim_ref(bucket, &ref))
        queue_claim_accesses(c, ref.ns, ref.name);
}

static void bucket_added(void *ud, json_object *bucket)
{
    bucket_changed(ud, NULL, bucket);
}

static void bucket_updated(void *ud, json_object *old, json_object *bucket)
{
    bucket_changed(ud, old, bucket);
}

static void bucket_deleted(void *ud, json_object *bucket)
{
    written_seen(ud, bucket, true);
}

static void claim_changed(csc_ctrl *c, const json_object *old, json_object *claim)
{
    const char *ns = kobj_namespace(claim), *name = kobj_name(claim);
    char *key = key_of(ns, name);
    /* A ready Bucket may wait to mark this claim. */
    kube_informer_by_index(c->buckets, "claim", key, queue_bucket, c);
    free(key);
    bool was = old && csc_ready(old) && csc_claim_bucket_name(old);
    if (!was && csc_ready(claim) && csc_claim_bucket_name(claim))
        queue_claim_accesses(c, ns, name);
}

static void claim_added(void *ud, json_object *claim)
{
    claim_changed(ud, NULL, claim);
}

static void claim_updated(void *ud, json_object *old, json_object *claim)
{
    claim_changed(ud, old, claim);
}

static void access_added(void *ud, json_object *access)
{
    written_seen(ud, access, false);
    queue_access(ud, access);
}

static void access_updated(void *ud, json_object *old, json_object *access)
{
    (void)old;
    access_added(ud, access);
}

static void access_deleted(void *ud, json_object *access)
{
    csc_ctrl *c = ud;
    written_seen(c, access, true);
    const char *claim = csc_access_claim_name(access);
    if (!claim)
        return;
    char *key = key_of(kobj_namespace(access), claim);
    kube_informer_by_index(c->buckets, "claim", key, queue_bucket_if_deleting, c);
    free(key);
}

static void class_changed(void *ud, json_object *cls)
{
    csc_ctrl *c = ud;
    if (kobj_name(cls))
        kube_informer_by_index(c->accesses, "class", kobj_name(cls), queue_access, c);
}

static void class_updated(void *ud, json_object *old, json_object *cls)
{
    (void)old;
    class_changed(ud, cls);
}

/* ---- caches and indexes -------------------------------------------------------------------- */

static void slim(void *ud, json_object *obj)
{
    (void)ud;
    json_object *md = kobj_meta(obj);
    kobj_del(md, "managedFields");
    kobj_del(kobj_obj(md, "annotations"), "kubectl.kubernetes.io/last-applied-configuration");
}

static void access_by_claim(const json_object *access, void (*add)(void *, const char *), void *ctx)
{
    const char *claim = csc_access_claim_name(access);
    if (!claim)
        return;
    char *key = key_of(kobj_namespace(access), claim);
    add(ctx, key);
    free(key);
}

static void access_by_class(const json_object *access, void (*add)(void *, const char *), void *ctx)
{
    const char *cls = csc_access_class_name(access);
    if (cls)
        add(ctx, cls);
}

static void bucket_by_claim(const json_object *bucket, void (*add)(void *, const char *), void *ctx)
{
    csc_ref ref;
    if (!csc_bucket_claim_ref(bucket, &ref))
        return;
    char *key = key_of(ref.ns, ref.name);
    add(ctx, key);
    free(key);
}

static int informer(csc_ctrl *c, const kube_resource *res, kube_handlers h, kube_informer **out)
{
    kube_informer_opts o = {
        .res = res, .transform = slim, .transform_ud = c, .resync = c->o.resync, .handlers = h};
    return kube_informer_new(c->o.kube, &o, out);
}

int csc_ctrl_new(const csc_ctrl_opts *opts, csc_ctrl **out)
{
    *out = NULL;
    csc_ctrl *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    pthread_mutex_init(&c->mu, NULL);
    c->written = lh_kchar_table_new(64, free_entry);
    wq_opts qo = {
        .base_delay = opts->retry_start, .max_delay = opts->retry_max, .metrics = opts->metrics};
    qo.name = "cosi-buckets";
    c->bq = wq_new(&qo);
    qo.name = "cosi-bucketaccesses";
    c->aq = wq_new(&qo);
    int rc = informer(c, &KUBE_BUCKET,
                      (kube_handlers){bucket_added, bucket_updated, bucket_deleted, c, false},
                      &c->buckets);
    if (rc == 0)
        rc = informer(c, &KUBE_BUCKETCLAIM,
                      (kube_handlers){claim_added, claim_updated, NULL, c, false}, &c->claims);
    if (rc == 0)
        rc = informer(c, &KUBE_BUCKETACCESS,
                      (kube_handlers){access_added, access_updated, access_deleted, c, true},
                      &c->accesses);
    if (rc == 0)
        rc = informer(c, &KUBE_BUCKETACCESSCLASS,
                      (kube_handlers){class_changed, class_updated, NULL, c, true}, &c->classes);
    if (rc == 0)
        rc = kube_informer_add_index(c->accesses, "claim", access_by_claim);
    if (rc == 0)
        rc = kube_informer_add_index(c->accesses, "class", access_by_class);
    if (rc == 0)
        rc = kube_informer_add_index(c->buckets, "claim", bucket_by_claim);
    /* Classes and claims first: the first syncs of accesses and Buckets
     * then find what they refer to. */
    kube_informer *all[] = {c->classes, c->claims, c->buckets, c->accesses};
    for (size_t i = 0; rc == 0 && i < 4; i++)
        rc = kube_informer_start(all[i]);
    for (size_t i = 0; rc == 0 && i < 4; i++)
        rc = kube_informer_wait_for_sync(all[i], 5 * UTIL_MINUTE);
    int n = opts->workers > 0 ? opts->workers : 1;
    wq_pool_opts po = {.max_workers = n, .slow_delay = STALE_RETRY, .ud = c};
    po.sync = sync_bucket;
    if (rc == 0)
        rc = wq_pool_start(c->bq, &po);
    po.sync = sync_access;
    if (rc == 0)
        rc = wq_pool_start(c->aq, &po);
    if (rc < 0) {
        if (!util_err_last()[0])
            util_err_set(rc, "cannot start the informers or workers");
        csc_ctrl_free(c);
        return rc;
    }
    malloc_trim(0);
    obs_info("objectstorage-sidecar for driver %s started: %d Bucket and %d BucketAccess workers",
             opts->driver, n, n);
    *out = c;
    return 0;
}

void csc_ctrl_free(csc_ctrl *c)
{
    if (!c)
        return;
    kube_informer *all[] = {c->accesses, c->buckets, c->claims, c->classes};
    for (size_t i = 0; i < 4; i++)
        if (all[i])
            kube_informer_stop(all[i]);
    wq *qs[] = {c->bq, c->aq};
    for (size_t i = 0; i < 2; i++) {
        wq_shutdown(qs[i], false);
        wq_pool_join(qs[i]);
    }
    for (size_t i = 0; i < 4; i++)
        kube_informer_free(all[i]);
    for (size_t i = 0; i < 2; i++)
        wq_free(qs[i]);
    lh_table_free(c->written);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
