/*
 * fuzz_cosi_ctrl_plan: objectstorage-controller's pure core fed arbitrary
 * JSON as the objects it reads: {"claim": BucketClaim, "class": BucketClass,
 * "bucket": Bucket, "rv": [a, b]}. Any member may be missing or of any type.
 * Every text it builds must be JSON that parses back.
 */
#include "cosi/controller/controller.h"

#include <stdlib.h>

#include "cosi/cosi.h"
#include "kobj/kobj.h"

#include "fuzz.h"

/* A built text is JSON (or NULL). */
static void must_parse(char *text)
{
    if (text == NULL)
        return;
    json_object *o = kobj_parse_text(text, strlen(text));
    if (o == NULL)
        abort();
    json_object_put(o);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* What the binaries decide on comes through kobj's reader (which
     * refuses, say, invalid UTF-8), not json-c's. */
    json_object *in = kobj_parse_text((const char *)data, size);
    if (in == NULL)
        return 0;
    const json_object *claim = kobj_get(in, "claim");
    const json_object *cls = kobj_get(in, "class");
    const json_object *bucket = kobj_get(in, "bucket");

    (void)cctl_class_name(claim);
    (void)cctl_existing_name(claim);
    free(cctl_bucket_name(claim));
    (void)cctl_bucket_bound_to(bucket, claim);
    free(cctl_bucket_claim_key(bucket));
    (void)cctl_bucket_binding_current(bucket, claim);

    cctl_plan p;
    if (cctl_plan_next(claim, cls, bucket, &p) == 0) {
        if (p.step == CCTL_FAIL && (p.reason == NULL || p.message == NULL))
            abort();
        if (p.step != CCTL_NONE && p.step != CCTL_FAIL && p.step != CCTL_DELETE_BUCKET &&
            p.step != CCTL_REMOVE_FINALIZER && p.text == NULL)
            abort();
        cctl_plan_clear(&p);
    }
    must_parse(cctl_patch_add_finalizer(claim));
    must_parse(cctl_patch_remove_finalizer(claim));
    must_parse(cctl_bucket_object(claim, cls));
    must_parse(cctl_patch_status(claim, "bucket-x", true));
    must_parse(cctl_patch_bind(bucket, claim));
    must_parse(cctl_delete_options(bucket));
    free(cctl_msg_not_found("bucketclasses.objectstorage.k8s.io", cctl_class_name(claim)));
    free(cosi_lease_name(kobj_str(in, "lease")));

    const json_object *rv = kobj_arr(in, "rv");
    (void)kobj_rv_cmp(kobj_str_at(rv, 0), kobj_str_at(rv, 1));
    json_object_put(in);
    return 0;
}
