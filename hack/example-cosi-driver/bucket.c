/*
 * DriverCreateBucket and DriverDeleteBucket. A bucket is a folder
 * <state-dir>/buckets/<bucket_id> and an entry in the model; its protocol
 * and the protocol's details come from the request's parameters (README).
 */
#include <stdlib.h>
#include <string.h>

#include "cosid.h"
#include "kobj/kobj.h"
#include "obs/obs.h"

/* The bucket_info of a bucket, over strings the bucket entry owns. */
typedef struct proto_msg {
    Cosi__V1alpha1__Protocol p;
    Cosi__V1alpha1__S3 s3;
    Cosi__V1alpha1__AzureBlob az;
    Cosi__V1alpha1__GCS gcs;
    char *key_name;
} proto_msg;

static const char *param(const json_object *params, const char *key, const char *dflt)
{
    const char *v = kobj_str(params, key);
    return v && *v ? v : dflt;
}

/* NULL, or why the parameters are not usable (INVALID_ARGUMENT). */
static const char *check_params(const json_object *params)
{
    const char *proto = param(params, "protocol", "s3");
    if (strcmp(proto, "s3") != 0 && strcmp(proto, "azure") != 0 && strcmp(proto, "gcs") != 0)
        return "parameter protocol: want s3, azure or gcs";
    const char *sig = param(params, "signatureVersion", "S3V4");
    if (strcmp(sig, "S3V4") != 0 && strcmp(sig, "S3V2") != 0)
        return "parameter signatureVersion: want S3V4 or S3V2";
    return NULL;
}

static void proto_fill(proto_msg *m, const json_object *bucket)
{
    const json_object *params = kobj_obj(bucket, "parameters");
    const char *proto = kobj_str(bucket, "protocol");
    cosi__v1alpha1__protocol__init(&m->p);
    cosi__v1alpha1__s3__init(&m->s3);
    cosi__v1alpha1__azure_blob__init(&m->az);
    cosi__v1alpha1__gcs__init(&m->gcs);
    m->key_name = NULL;
    if (proto && strcmp(proto, "azure") == 0) {
        m->az.storage_account = (char *)param(params, "storageAccount", "cosiexample");
        m->p.type_case = COSI__V1ALPHA1__PROTOCOL__TYPE_AZURE_BLOB;
        m->p.azureblob = &m->az;
    } else if (proto && strcmp(proto, "gcs") == 0) {
        m->key_name = util_asprintf("key-%s", kobj_str(bucket, "id"));
        m->gcs.private_key_name = m->key_name;
        m->gcs.project_id = (char *)param(params, "projectID", "cosi-example");
        m->gcs.service_account = (char *)param(params, "serviceAccount", "cosi-example-sa");
        m->p.type_case = COSI__V1ALPHA1__PROTOCOL__TYPE_GCS;
        m->p.gcs = &m->gcs;
    } else {
        m->s3.region = (char *)param(params, "region", "us-east-1");
        m->s3.signature_version = strcmp(param(params, "signatureVersion", "S3V4"), "S3V2") == 0
                                      ? COSI__V1ALPHA1__S3_SIGNATURE_VERSION__S3V2
                                      : COSI__V1ALPHA1__S3_SIGNATURE_VERSION__S3V4;
        m->p.type_case = COSI__V1ALPHA1__PROTOCOL__TYPE_S3;
        m->p.s3 = &m->s3;
    }
}

static void reply_bucket(csi_reply *reply, const json_object *bucket)
{
    proto_msg pm;
    proto_fill(&pm, bucket);
    Cosi__V1alpha1__DriverCreateBucketResponse r =
        COSI__V1ALPHA1__DRIVER_CREATE_BUCKET_RESPONSE__INIT;
    r.bucket_id = (char *)kobj_str(bucket, "id");
    r.bucket_info = &pm.p;
    csi_reply_ok(reply, &r.base);
    free(pm.key_name);
}

void cosid_create_bucket(cosid *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Cosi__V1alpha1__DriverCreateBucketRequest *req =
        (const Cosi__V1alpha1__DriverCreateBucketRequest *)msg;
    const char *why = cosid_name_check(req->name);
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "bucket name %s", why);
        return;
    }
    json_object *params =
        cosid_map_to_json((ProtobufCMessage *const *)req->parameters, req->n_parameters);
    why = check_params(params);
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s", why);
        json_object_put(params);
        return;
    }
    json_object *buckets = cosid_store_lock(d->store);
    json_object *b = cosid_bucket_by_name(buckets, req->name);
    if (b) {
        if (cosid_json_map_equal(kobj_obj(b, "parameters"), params))
            reply_bucket(reply, b);
        else
            csi_reply_error(reply, CSI_ALREADY_EXISTS,
                            "bucket %s exists with other parameters (id %s)", req->name,
                            kobj_str(b, "id"));
        cosid_store_unlock(d->store);
        json_object_put(params);
        return;
    }
    char *id = NULL;
    do {
        free(id);
        id = cosid_random_id("bkt");
    } while (cosid_bucket_by_id(buckets, id));
    char *path = util_asprintf("%s/buckets/%s", cosid_store_dir(d->store), id);
    int r = drvkit_mkdir_p(path, 0755);
    if (r < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "cannot create %s: %s", path, strerror(-r));
        json_object_put(params);
    } else {
        b = json_object_new_object();
        json_object_object_add(b, "id", json_object_new_string(id));
        json_object_object_add(b, "name", json_object_new_string(req->name));
        json_object_object_add(b, "protocol",
                               json_object_new_string(param(params, "protocol", "s3")));
        json_object_object_add(b, "parameters", params);
        json_object_object_add(b, "path", json_object_new_string(path));
        json_object_object_add(b, "grants", json_object_new_array());
        json_object_array_add(buckets, b);
        cosid_store_changed(d->store);
        obs_info("bucket %s created as %s", req->name, id);
        reply_bucket(reply, b);
    }
    cosid_store_unlock(d->store);
    free(path);
    free(id);
}

void cosid_delete_bucket(cosid *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Cosi__V1alpha1__DriverDeleteBucketRequest *req =
        (const Cosi__V1alpha1__DriverDeleteBucketRequest *)msg;
    if (!req->bucket_id || !*req->bucket_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "bucket_id is required");
        return;
    }
    json_object *buckets = cosid_store_lock(d->store);
    for (size_t i = 0; i < kobj_len(buckets); i++) {
        json_object *b = kobj_at(buckets, i);
        const char *id = kobj_str(b, "id");
        if (!id || strcmp(id, req->bucket_id) != 0)
            continue;
        /* Grants go with the bucket, as upstream's sample driver does: the
         * sidecar deletes the BucketAccesses and then the bucket without
         * waiting for their revocations (a later revoke answers OK). */
        int r = drvkit_remove_tree(kobj_str(b, "path"));
        if (r < 0) {
            csi_reply_error(reply, CSI_INTERNAL, "%s", util_err_last());
            cosid_store_unlock(d->store);
            return;
        }
        obs_info("bucket %s (%s) deleted with %zu grants", kobj_str(b, "name"), req->bucket_id,
                 kobj_len(kobj_arr(b, "grants")));
        json_object_array_del_idx(buckets, i, 1);
        cosid_store_changed(d->store);
        break;
    }
    cosid_store_unlock(d->store);
    Cosi__V1alpha1__DriverDeleteBucketResponse r =
        COSI__V1ALPHA1__DRIVER_DELETE_BUCKET_RESPONSE__INIT;
    csi_reply_ok(reply, &r.base);
}
