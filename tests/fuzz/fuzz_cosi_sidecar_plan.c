/*
 * fuzz_cosi_sidecar_plan: objectstorage-sidecar's pure core fed arbitrary
 * JSON as the objects it reads and the driver's grant answer:
 * {"bucket": Bucket, "claim": BucketClaim, "class": BucketAccessClass,
 *  "access": BucketAccess, "secret": Secret, "driver": name,
 *  "grant": {"account_id": s, "credentials": {proto: {key: value}}},
 *  "expiry": an Azure expiryTs}. Any member may be missing or of any type.
 * Every JSON text it builds (patches, BucketInfo, Secret) must parse back.
 */
#include "cosi/sidecar/cosisidecar.h"

#include <stdlib.h>

#include "kobj/kobj.h"

#include "fuzz.h"

static void must_parse(int r, char *text)
{
    if (r == 0 && text != NULL) {
        json_object *o = kobj_parse_text(text, strlen(text));
        if (o == NULL)
            abort();
        json_object_put(o);
    }
    free(text);
}

/* The grant answer from JSON: string values only, as protobuf would carry. */
static Cosi__V1alpha1__DriverGrantBucketAccessResponse *grant_of(const json_object *g)
{
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp = calloc(1, sizeof(*resp));
    if (resp == NULL)
        abort();
    cosi__v1alpha1__driver_grant_bucket_access_response__init(resp);
    const char *acct = kobj_str(g, "account_id");
    resp->account_id = strdup(acct ? acct : "");
    json_object *creds = kobj_obj(g, "credentials");
    size_t n = creds ? (size_t)json_object_object_length(creds) : 0;
    resp->credentials = n ? calloc(n, sizeof(void *)) : NULL;
    if (n > 0 && resp->credentials == NULL)
        abort();
    if (resp->credentials != NULL) {
        json_object_object_foreach(creds, proto, vals)
        {
            Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry *e =
                calloc(1, sizeof(*e));
            Cosi__V1alpha1__CredentialDetails *d = calloc(1, sizeof(*d));
            if (e == NULL || d == NULL)
                abort();
            cosi__v1alpha1__driver_grant_bucket_access_response__credentials_entry__init(e);
            cosi__v1alpha1__credential_details__init(d);
            e->key = strdup(proto);
            e->value = d;
            d->secrets = csc_map_entries(
                kobj_typed(vals, json_type_object),
                &cosi__v1alpha1__credential_details__secrets_entry__descriptor, &d->n_secrets);
            resp->credentials[resp->n_credentials++] = e;
        }
    }
    return resp;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* What the binaries decide on comes through kobj's reader (which
     * refuses, say, invalid UTF-8), not json-c's. */
    json_object *in = kobj_parse_text((const char *)data, size);
    if (in == NULL)
        return 0;
    const char *driver = kobj_str(in, "driver");
    if (driver == NULL)
        driver = "cosi.example.com";
    const json_object *bucket = kobj_get(in, "bucket");
    const json_object *claim = kobj_get(in, "claim");
    const json_object *cls = kobj_get(in, "class");
    const json_object *access = kobj_get(in, "access");

    csc_bucket_plan bp;
    if (csc_bucket_plan_make(driver, bucket, &bp) == 0)
        csc_bucket_plan_clear(&bp);
    csc_access_plan ap;
    if (csc_access_plan_make(driver, access, cls, claim, bucket, &ap) == 0)
        csc_access_plan_clear(&ap);

    char *out = NULL;
    static const char *const fins[] = {COSI_FINALIZER_BUCKET, COSI_FINALIZER_BA_BUCKET, NULL};
    must_parse(csc_patch_add_finalizer(bucket, COSI_FINALIZER_BUCKET, kobj_obj(in, "params"), &out),
               out);
    out = NULL;
    must_parse(csc_patch_remove_finalizers(bucket, fins, &out), out);
    out = NULL;
    must_parse(csc_patch_bucket_ready(bucket, "bkt-1", &out), out);
    out = NULL;
    must_parse(csc_patch_claim_ready(claim, "bucket-1", &out), out);
    out = NULL;
    must_parse(csc_patch_access_granted(access, "acct-1", &out), out);
    out = NULL;
    must_parse(csc_patch_access_intent(access, "bkt-1", &out), out);

    Cosi__V1alpha1__DriverCreateBucketRequest *cr = NULL;
    if (csc_create_bucket_request(bucket, &cr) == 0)
        csc_request_free(&cr->base);
    Cosi__V1alpha1__DriverGrantBucketAccessRequest *gr = NULL;
    if (csc_grant_request(access, cls, "bkt-1", &gr) == 0)
        csc_request_free(&gr->base);

    Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp = grant_of(kobj_get(in, "grant"));
    csc_event ev = {0};
    (void)csc_grant_check(access, resp, &ev);
    free(ev.message);
    char *info = NULL;
    if (csc_bucket_info(access, cls, csc_claim_bucket_name(claim), resp, &info) == 0) {
        must_parse(0, util_strdup(info));
        json_object *secret = NULL;
        if (csc_secret_object(access, info, &secret) == 0)
            json_object_put(secret);
    }
    free(info);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    (void)csc_secret_is_ours(kobj_get(in, "secret"));

    char expiry[CSC_EXPIRY_MAX];
    const char *ts = kobj_str(in, "expiry");
    if (csc_azure_expiry(ts ? ts : "", expiry) == 0 && expiry[0] != '"')
        abort();
    free(csc_lease_name(driver));
    json_object_put(in);
    return 0;
}
