/*
 * The Bucket decision: what one sync of a Bucket does, and the driver
 * requests it sends. Pure: no I/O, no clock, no global state.
 *
 * Order of the checks (ownership first, so another driver's Bucket costs
 * nothing, not even an Event): not ours -> skip; being deleted -> the
 * deletion steps while one of our finalizers is on it; no class name ->
 * refuse; ready -> only the claim's status; else provision.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cosi/sidecar/cosisidecar.h"
#include "kobj/kobj.h"

/* A string field, NULL when missing, of another type or empty. */
static const char *nonempty(const json_object *o, const char *key)
{
    const char *s = kobj_str(o, key);
    return s && *s ? s : NULL;
}

bool csc_bucket_is_ours(const char *driver, const json_object *bucket)
{
    const char *d = kobj_str(kobj_obj(bucket, "spec"), "driverName");
    return d && driver && csc_equal_fold(d, driver);
}

bool csc_bucket_claim_ref(const json_object *bucket, csc_ref *ref)
{
    memset(ref, 0, sizeof(*ref));
    json_object *r = kobj_obj(kobj_obj(bucket, "spec"), "bucketClaim");
    ref->ns = nonempty(r, "namespace");
    ref->name = nonempty(r, "name");
    ref->uid = nonempty(r, "uid");
    return ref->ns && ref->name;
}

bool csc_claim_matches(const json_object *claim, const csc_ref *ref)
{
    const char *ns = kobj_namespace(claim), *name = kobj_name(claim), *uid = kobj_uid(claim);
    if (!ref->ns || !ref->name || !ns || !name)
        return false;
    if (strcmp(ns, ref->ns) != 0 || strcmp(name, ref->name) != 0)
        return false;
    return !ref->uid || (uid && strcmp(uid, ref->uid) == 0);
}

bool csc_ready(const json_object *obj)
{
    return kobj_bool(kobj_obj(obj, "status"), "bucketReady", false);
}

const char *csc_bucket_id(const json_object *bucket)
{
    return nonempty(kobj_obj(bucket, "status"), "bucketID");
}

static void plan_delete(const json_object *bucket, csc_bucket_plan *p)
{
    json_object *spec = kobj_obj(bucket, "spec");
    bool ba = kobj_has_finalizer(bucket, COSI_FINALIZER_BA_BUCKET);
    bool ours = kobj_has_finalizer(bucket, COSI_FINALIZER_BUCKET);
    if (!ba && !ours)
        return; /* nothing of ours holds it */
    p->action = CSC_BUCKET_DELETE;
    p->delete_accesses = ba;
    if (!ours)
        return;
    /* Upstream calls the driver for "Delete" only, spelled exactly so. */
    const char *policy = kobj_str(spec, "deletionPolicy");
    p->delete_in_driver = policy && strcmp(policy, "Delete") == 0;
    p->bucket_id = csc_bucket_id(bucket);
    if (!p->bucket_id)
        p->bucket_id = nonempty(spec, "existingBucketID");
    p->release_claim = true;
}

int csc_bucket_plan_make(const char *driver, const json_object *bucket, csc_bucket_plan *out)
{
    memset(out, 0, sizeof(*out));
    if (!kobj_typed(bucket, json_type_object))
        return util_err_set(-EINVAL, "a Bucket must be a JSON object");
    if (!csc_bucket_is_ours(driver, bucket))
        return 0;
    if (kobj_deleting(bucket)) {
        plan_delete(bucket, out);
        return 0;
    }
    json_object *spec = kobj_obj(bucket, "spec");
    if (!nonempty(spec, "bucketClassName")) {
        out->action = CSC_BUCKET_REFUSE;
        out->event.reason = COSI_REASON_FAILED_CREATE_BUCKET;
        out->event.message = util_asprintf("BucketClassName not defined for Bucket %s",
                                           kobj_name(bucket) ? kobj_name(bucket) : "");
        return 0;
    }
    if (csc_ready(bucket)) {
        out->action = CSC_BUCKET_CLAIM;
        return 0;
    }
    out->action = CSC_BUCKET_PROVISION;
    out->add_finalizer = !kobj_has_finalizer(bucket, COSI_FINALIZER_BUCKET);
    out->existing_id = nonempty(spec, "existingBucketID");
    /* As upstream: a brownfield Bucket without parameters takes the
     * class's, written with the finalizer. */
    out->class_params = out->add_finalizer && out->existing_id && !kobj_obj(spec, "parameters");
    return 0;
}

void csc_bucket_plan_clear(csc_bucket_plan *p)
{
    if (!p)
        return;
    free(p->event.message);
    memset(p, 0, sizeof(*p));
}

/* ---- requests ------------------------------------------------------------------------------ */

int csc_create_bucket_request(const json_object *bucket,
                              Cosi__V1alpha1__DriverCreateBucketRequest **out)
{
    *out = NULL;
    const char *name = kobj_name(bucket);
    if (!name || !*name)
        return util_err_set(-EINVAL, "the Bucket has no name");
    Cosi__V1alpha1__DriverCreateBucketRequest *r = util_calloc(1, sizeof(*r));
    cosi__v1alpha1__driver_create_bucket_request__init(r);
    r->name = util_strdup(name);
    r->parameters =
        csc_map_entries(kobj_obj(kobj_obj(bucket, "spec"), "parameters"),
                        &cosi__v1alpha1__driver_create_bucket_request__parameters_entry__descriptor,
                        &r->n_parameters);
    *out = r;
    return 0;
}

int csc_delete_bucket_request(const json_object *bucket, const char *bucket_id,
                              Cosi__V1alpha1__DriverDeleteBucketRequest **out)
{
    *out = NULL;
    if (!bucket_id || !*bucket_id)
        return util_err_set(-EINVAL, "Bucket %s: no bucket id to delete",
                            kobj_name(bucket) ? kobj_name(bucket) : "");
    Cosi__V1alpha1__DriverDeleteBucketRequest *r = util_calloc(1, sizeof(*r));
    cosi__v1alpha1__driver_delete_bucket_request__init(r);
    r->bucket_id = util_strdup(bucket_id);
    r->delete_context = csc_map_entries(
        kobj_obj(kobj_obj(bucket, "spec"), "parameters"),
        &cosi__v1alpha1__driver_delete_bucket_request__delete_context_entry__descriptor,
        &r->n_delete_context);
    *out = r;
    return 0;
}
