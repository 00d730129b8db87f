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

/* ---- the objectstorage.k8s.io/v1alpha1 API's names (upstream v0.2.2's) ---- */

/* On a BucketClaim while its Bucket exists (controller adds, sidecar removes). */
#define COSI_FINALIZER_CLAIM "cosi.objectstorage.k8s.io/bucketclaim-protection"
/* On a Bucket while the driver's bucket may exist (sidecar). */
#define COSI_FINALIZER_BUCKET "cosi.objectstorage.k8s.io/bucket-protection"
/* On a Bucket while BucketAccesses to it may exist (sidecar). */
#define COSI_FINALIZER_BA_BUCKET "cosi.objectstorage.k8s.io/bucketaccess-bucket-protection"
/* On a BucketAccess while access may be granted (sidecar). */
#define COSI_FINALIZER_ACCESS "cosi.objectstorage.k8s.io/bucketaccess-protection"
/* On the credentials Secret the sidecar wrote. */
#define COSI_FINALIZER_SECRET "cosi.objectstorage.k8s.io/secret-protection"

/* Event reasons. */
#define COSI_REASON_FAILED_CREATE_BUCKET "FailedCreateBucket"
#define COSI_REASON_FAILED_DELETE_BUCKET "FailedDeleteBucket"
#define COSI_REASON_WAITING_FOR_BUCKET   "WaitingForBucket"
#define COSI_REASON_FAILED_GRANT_ACCESS  "FailedGrantAccess"
#define COSI_REASON_FAILED_REVOKE_ACCESS "FailedRevokeAccess"

/* Generated names: "bucket-" + claim UID, "ba-" + access UID (the account
 * name sent to the driver), "bc-" + access UID (BucketInfo's name). */
#define COSI_BUCKET_PREFIX     "bucket-"
#define COSI_ACCOUNT_PREFIX    "ba-"
#define COSI_BUCKETINFO_PREFIX "bc-"
/* The key of the credentials Secret's one entry. */
#define COSI_SECRET_KEY "BucketInfo"

/* Upstream's lease-name rule (Go's regexp over runes): every rune outside
 * [a-zA-Z0-9-], and every invalid byte, becomes one '-'; letters go lower
 * case; a name ending in '-' gets an 'X'; NULL reads as "". Caller
 * frees. */
char *cosi_lease_name(const char *s);

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
