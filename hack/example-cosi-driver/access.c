/*
 * DriverGrantBucketAccess and DriverRevokeBucketAccess.
 *
 * A grant is keyed by (bucket, BucketAccess name): its account_id is derived
 * from both (SHA-256), so a retried grant finds the account the first one
 * made and answers the same credentials. Key grants get fresh random
 * credentials from getrandom; IAM grants get the account and only the
 * protocol's non-secret details. Credentials are keyed as upstream's
 * sidecar (v0.2) reads them: "s3" with accessKeyID, accessSecretKey,
 * endpoint, region; "azure" with accessToken, expiryTs.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cosid.h"
#include "kobj/kobj.h"
#include "obs/obs.h"

#define AUTH_KEY COSI__V1ALPHA1__AUTHENTICATION_TYPE__Key
#define AUTH_IAM COSI__V1ALPHA1__AUTHENTICATION_TYPE__IAM

static const char BASE32[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
static const char BASE64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void put(json_object *o, const char *key, const char *value)
{
    json_object_object_add(o, key, json_object_new_string(value));
}

static void put_owned(json_object *o, const char *key, char *value)
{
    put(o, key, value);
    free(value);
}

static const char *param(const json_object *params, const char *key, const char *dflt)
{
    const char *v = kobj_str(params, key);
    return v && *v ? v : dflt;
}

/* The protocol's key in `credentials` ("s3", "azure", "gcs") and its
 * values for a new grant on `bucket`. */
static json_object *new_credentials(const json_object *bucket, int auth)
{
    const json_object *params = kobj_obj(bucket, "parameters");
    const char *proto = kobj_str(bucket, "protocol");
    json_object *vals = json_object_new_object();
    if (proto && strcmp(proto, "azure") == 0) {
        if (auth == AUTH_KEY) {
            put_owned(vals, "accessToken", cosid_random_text(BASE64, 64));
            /* A year from now, in the layout upstream's sidecar parses
             * ("2006-01-02 15:04:05.999999999 -0700 MST"). */
            time_t t = time(NULL) + (time_t)365 * 24 * 3600;
            struct tm tm;
            char ts[64];
            gmtime_r(&t, &tm);
            strftime(ts, sizeof(ts), "%Y-%m-%d %H:%M:%S +0000 UTC", &tm);
            put(vals, "expiryTs", ts);
        } else {
            put(vals, "storageAccount", param(params, "storageAccount", "cosiexample"));
        }
    } else if (proto && strcmp(proto, "gcs") == 0) {
        put(vals, "projectID", param(params, "projectID", "cosi-example"));
        put(vals, "serviceAccount", param(params, "serviceAccount", "cosi-example-sa"));
        if (auth == AUTH_KEY) {
            put_owned(vals, "privateKeyName", util_asprintf("key-%s", kobj_str(bucket, "id")));
            put_owned(vals, "privateKey", cosid_random_text(BASE64, 64));
        }
    } else {
        const char *region = param(params, "region", "us-east-1");
        char *endpoint = util_asprintf("https://s3.%s.example.com", region);
        put(vals, "endpoint", param(params, "endpoint", endpoint));
        put(vals, "region", region);
        free(endpoint);
        if (auth == AUTH_KEY) {
            char *rnd = cosid_random_text(BASE32, 18);
            put_owned(vals, "accessKeyID", util_asprintf("AK%s", rnd));
            free(rnd);
            put_owned(vals, "accessSecretKey", cosid_random_text(BASE64, 40));
        }
    }
    json_object *creds = json_object_new_object();
    json_object_object_add(creds,
                           proto && strcmp(proto, "azure") == 0 ? "azure"
                           : proto && strcmp(proto, "gcs") == 0 ? "gcs"
                                                                : "s3",
                           vals);
    return creds;
}

static char *account_id(const char *bucket_id, const char *name)
{
    char *key = util_asprintf("%s\n%s", bucket_id, name);
    char *hex = cosid_sha256_hex(key, strlen(key));
    char *id = util_asprintf("acct-%.20s", hex);
    free(hex);
    free(key);
    return id;
}

/* Answers a grant from its stored entry; the messages point into it. */
static void reply_grant(csi_reply *reply, const json_object *grant)
{
    Cosi__V1alpha1__DriverGrantBucketAccessResponse r =
        COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_RESPONSE__INIT;
    r.account_id = (char *)kobj_str(grant, "account_id");
    json_object *creds = kobj_obj(grant, "credentials");
    size_t n = creds ? (size_t)json_object_object_length(creds) : 0, i = 0;
    Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry *ents =
        util_calloc(n ? n : 1, sizeof(*ents));
    Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry **entp =
        util_calloc(n ? n : 1, sizeof(void *));
    Cosi__V1alpha1__CredentialDetails *details = util_calloc(n ? n : 1, sizeof(*details));
    Cosi__V1alpha1__CredentialDetails__SecretsEntry **ses = util_calloc(n ? n : 1, sizeof(void *));
    if (creds) {
        json_object_object_foreach(creds, proto, vals)
        {
            cosi__v1alpha1__driver_grant_bucket_access_response__credentials_entry__init(&ents[i]);
            cosi__v1alpha1__credential_details__init(&details[i]);
            size_t m = (size_t)json_object_object_length(vals), k = 0;
            Cosi__V1alpha1__CredentialDetails__SecretsEntry *se =
                util_calloc(m ? m : 1, sizeof(*se));
            ses[i] = se;
            details[i].secrets = util_calloc(m ? m : 1, sizeof(void *));
            json_object_object_foreach(vals, key, val)
            {
                cosi__v1alpha1__credential_details__secrets_entry__init(&se[k]);
                se[k].key = key;
                se[k].value = (char *)json_object_get_string(val);
                details[i].secrets[k] = &se[k];
                k++;
            }
            details[i].n_secrets = k;
            ents[i].key = proto;
            ents[i].value = &details[i];
            entp[i] = &ents[i];
            i++;
        }
    }
    r.credentials = entp;
    r.n_credentials = i;
    csi_reply_ok(reply, &r.base);
    for (size_t k = 0; k < i; k++) {
        free(ses[k]);
        free(details[k].secrets);
    }
    free(ses);
    free(details);
    free(entp);
    free(ents);
}

static json_object *find_grant(json_object *grants, const char *key, const char *value)
{
    for (size_t i = 0; i < kobj_len(grants); i++) {
        const char *v = kobj_str(kobj_at(grants, i), key);
        if (v && strcmp(v, value) == 0)
            return kobj_at(grants, i);
    }
    return NULL;
}

void cosid_grant_access(cosid *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Cosi__V1alpha1__DriverGrantBucketAccessRequest *req =
        (const Cosi__V1alpha1__DriverGrantBucketAccessRequest *)msg;
    const char *why = NULL;
    if (!req->bucket_id || !*req->bucket_id)
        why = "bucket_id is required";
    else if (cosid_name_check(req->name))
        why = "name is required and holds no control character";
    else if (req->authentication_type != AUTH_KEY && req->authentication_type != AUTH_IAM)
        why = "authentication_type must be Key or IAM";
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s", why);
        return;
    }
    const char *auth = req->authentication_type == AUTH_KEY ? "Key" : "IAM";
    json_object *params =
        cosid_map_to_json((ProtobufCMessage *const *)req->parameters, req->n_parameters);
    json_object *buckets = cosid_store_lock(d->store);
    json_object *b = cosid_bucket_by_id(buckets, req->bucket_id);
    json_object *grants = kobj_arr(b, "grants");
    json_object *g = grants ? find_grant(grants, "name", req->name) : NULL;
    if (!b || !grants) {
        csi_reply_error(reply, CSI_NOT_FOUND, "bucket %s does not exist", req->bucket_id);
    } else if (g && (!kobj_str(g, "authentication_type") ||
                     strcmp(kobj_str(g, "authentication_type"), auth) != 0 ||
                     !cosid_json_map_equal(kobj_obj(g, "parameters"), params))) {
        csi_reply_error(reply, CSI_ALREADY_EXISTS,
                        "access %s to bucket %s exists with another authentication type or "
                        "parameters",
                        req->name, req->bucket_id);
    } else if (g) {
        reply_grant(reply, g);
    } else {
        char *acct = account_id(req->bucket_id, req->name);
        g = json_object_new_object();
        put(g, "account_id", acct);
        put(g, "name", req->name);
        put(g, "authentication_type", auth);
        json_object_object_add(g, "parameters", json_object_get(params));
        json_object_object_add(g, "credentials", new_credentials(b, req->authentication_type));
        json_object_array_add(grants, g);
        cosid_store_changed(d->store);
        obs_info("access %s to bucket %s granted (%s) as %s", req->name, req->bucket_id, auth,
                 acct);
        reply_grant(reply, g);
        free(acct);
    }
    cosid_store_unlock(d->store);
    json_object_put(params);
}

void cosid_revoke_access(cosid *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Cosi__V1alpha1__DriverRevokeBucketAccessRequest *req =
        (const Cosi__V1alpha1__DriverRevokeBucketAccessRequest *)msg;
    if (!req->bucket_id || !*req->bucket_id || !req->account_id || !*req->account_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "bucket_id and account_id are required");
        return;
    }
    json_object *buckets = cosid_store_lock(d->store);
    json_object *grants = kobj_arr(cosid_bucket_by_id(buckets, req->bucket_id), "grants");
    for (size_t i = 0; i < kobj_len(grants); i++) {
        const char *a = kobj_str(kobj_at(grants, i), "account_id");
        if (!a || strcmp(a, req->account_id) != 0)
            continue;
        json_object_array_del_idx(grants, i, 1);
        cosid_store_changed(d->store);
        obs_info("access %s to bucket %s revoked", req->account_id, req->bucket_id);
        break;
    }
    cosid_store_unlock(d->store);
    Cosi__V1alpha1__DriverRevokeBucketAccessResponse r =
        COSI__V1ALPHA1__DRIVER_REVOKE_BUCKET_ACCESS_RESPONSE__INIT;
    csi_reply_ok(reply, &r.base);
}
