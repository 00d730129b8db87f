/*
 * cosi: the COSI (Container Object Storage Interface, cosi.v1alpha1) client.
 *
 * A COSI driver is reached exactly as a CSI one: a csi_conn on its unix
 * socket (connect with backoff, fail-fast calls, loss detection), and every
 * call goes through csi_call, so the -v=5 request and response logs are
 * csi_msg_to_text's, with credentials stripped. This module only adds the
 * typed calls and the checks a sidecar makes on the answers.
 *
 * Errors: as csi.h. 0, or -EREMOTEIO with the gRPC code and message in
 * csi_status (a driver answer that breaks the contract, such as an empty
 * driver name, comes back as INTERNAL the same way).
 */
#ifndef CSISIDECAR_COSI_H
#define CSISIDECAR_COSI_H

#include <stdbool.h>

#include "cosi.pb-c.h"
#include "csi/csi.h"

/* The driver name rule of DriverGetInfoResponse: 1..63 characters,
 * alphanumerics, '-' and '.', beginning and ending alphanumeric. */
bool cosi_driver_name_valid(const char *name);

/* The response is the caller's to free with the matching
 * __free_unpacked(resp, NULL). */
int cosi_driver_get_info(csi_conn *c, util_duration timeout,
                         Cosi__V1alpha1__DriverGetInfoResponse **resp, csi_status *st);
/* An answer without bucket_id is INTERNAL (the sidecar cannot name the
 * bucket later). */
int cosi_create_bucket(csi_conn *c, const Cosi__V1alpha1__DriverCreateBucketRequest *req,
                       util_duration timeout, Cosi__V1alpha1__DriverCreateBucketResponse **resp,
                       csi_status *st);
int cosi_delete_bucket(csi_conn *c, const Cosi__V1alpha1__DriverDeleteBucketRequest *req,
                       util_duration timeout, csi_status *st);
/* An answer without account_id is INTERNAL (access could never be revoked). */
int cosi_grant_bucket_access(csi_conn *c, const Cosi__V1alpha1__DriverGrantBucketAccessRequest *req,
                             util_duration timeout,
                             Cosi__V1alpha1__DriverGrantBucketAccessResponse **resp,
                             csi_status *st);
int cosi_revoke_bucket_access(csi_conn *c,
                              const Cosi__V1alpha1__DriverRevokeBucketAccessRequest *req,
                              util_duration timeout, csi_status *st);

/* The value of `key` in the credentials of `protocol` ("s3", "azure"), or
 * NULL. For callers that turn a grant into a Secret; never log it. */
const char *cosi_credential(const Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp,
                            const char *protocol, const char *key);

#endif
