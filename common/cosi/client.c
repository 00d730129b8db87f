/*
 * Typed wrappers over csi_call for the COSI RPCs, with the checks a
 * sidecar makes on a driver's answers before it acts on them.
 */
#include <errno.h>
#include <string.h>

#include "cosi/cosi.h"

#define CALL(c, method, req, resp_type, timeout, resp, st)                                         \
    csi_call((c), (method), (const ProtobufCMessage *)(req), &resp_type##__descriptor, (timeout),  \
             (ProtobufCMessage **)(resp), (st))

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool cosi_driver_name_valid(const char *name)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len > 63 || !is_alnum(name[0]) || !is_alnum(name[len - 1]))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!is_alnum(name[i]) && name[i] != '-' && name[i] != '.')
            return false;
    return true;
}

int cosi_driver_get_info(csi_conn *c, util_duration timeout,
                         Cosi__V1alpha1__DriverGetInfoResponse **resp, csi_status *st)
{
    Cosi__V1alpha1__DriverGetInfoRequest req = COSI__V1ALPHA1__DRIVER_GET_INFO_REQUEST__INIT;
    int r = CALL(c, "/cosi.v1alpha1.Identity/DriverGetInfo", &req,
                 cosi__v1alpha1__driver_get_info_response, timeout, resp, st);
    if (r < 0)
        return r;
    const char *name = (*resp)->name;
    if (!name || !*name)
        r = csi_status_set(st, CSI_INTERNAL, "driver name is empty");
    else if (!cosi_driver_name_valid(name))
        /* The name ends up as a Lease name and in Bucket objects: refuse it
         * here rather than fail later at the API server. */
        r = csi_status_set(st, CSI_INTERNAL,
                           "driver name \"%.64s\" is not valid: want at most 63 alphanumerics, "
                           "'-' and '.', beginning and ending alphanumeric",
                           name);
    if (r < 0) {
        cosi__v1alpha1__driver_get_info_response__free_unpacked(*resp, NULL);
        *resp = NULL;
    }
    return r;
}

int cosi_create_bucket(csi_conn *c, const Cosi__V1alpha1__DriverCreateBucketRequest *req,
                       util_duration timeout, Cosi__V1alpha1__DriverCreateBucketResponse **resp,
                       csi_status *st)
{
    int r = CALL(c, "/cosi.v1alpha1.Provisioner/DriverCreateBucket", req,
                 cosi__v1alpha1__driver_create_bucket_response, timeout, resp, st);
    if (r == 0 && (!(*resp)->bucket_id || !(*resp)->bucket_id[0])) {
        cosi__v1alpha1__driver_create_bucket_response__free_unpacked(*resp, NULL);
        *resp = NULL;
        return csi_status_set(st, CSI_INTERNAL, "DriverCreateBucket returned an empty bucket_id");
    }
    return r;
}

int cosi_delete_bucket(csi_conn *c, const Cosi__V1alpha1__DriverDeleteBucketRequest *req,
                       util_duration timeout, csi_status *st)
{
    Cosi__V1alpha1__DriverDeleteBucketResponse *resp = NULL;
    int r = CALL(c, "/cosi.v1alpha1.Provisioner/DriverDeleteBucket", req,
                 cosi__v1alpha1__driver_delete_bucket_response, timeout, &resp, st);
    if (resp)
        cosi__v1alpha1__driver_delete_bucket_response__free_unpacked(resp, NULL);
    return r;
}

int cosi_grant_bucket_access(csi_conn *c, const Cosi__V1alpha1__DriverGrantBucketAccessRequest *req,
                             util_duration timeout,
                             Cosi__V1alpha1__DriverGrantBucketAccessResponse **resp, csi_status *st)
{
    int r = CALL(c, "/cosi.v1alpha1.Provisioner/DriverGrantBucketAccess", req,
                 cosi__v1alpha1__driver_grant_bucket_access_response, timeout, resp, st);
    if (r == 0 && (!(*resp)->account_id || !(*resp)->account_id[0])) {
        cosi__v1alpha1__driver_grant_bucket_access_response__free_unpacked(*resp, NULL);
        *resp = NULL;
        return csi_status_set(st, CSI_INTERNAL,
                              "DriverGrantBucketAccess returned an empty account_id");
    }
    return r;
}

int cosi_revoke_bucket_access(csi_conn *c,
                              const Cosi__V1alpha1__DriverRevokeBucketAccessRequest *req,
                              util_duration timeout, csi_status *st)
{
    Cosi__V1alpha1__DriverRevokeBucketAccessResponse *resp = NULL;
    int r = CALL(c, "/cosi.v1alpha1.Provisioner/DriverRevokeBucketAccess", req,
                 cosi__v1alpha1__driver_revoke_bucket_access_response, timeout, &resp, st);
    if (resp)
        cosi__v1alpha1__driver_revoke_bucket_access_response__free_unpacked(resp, NULL);
    return r;
}

const char *cosi_credential(const Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp,
                            const char *protocol, const char *key)
{
    for (size_t i = 0; resp && i < resp->n_credentials; i++) {
        const Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry *e =
            resp->credentials[i];
        if (!e->key || strcmp(e->key, protocol) != 0 || !e->value)
            continue;
        for (size_t k = 0; k < e->value->n_secrets; k++)
            if (e->value->secrets[k]->key && strcmp(e->value->secrets[k]->key, key) == 0)
                return e->value->secrets[k]->value;
    }
    return NULL;
}
