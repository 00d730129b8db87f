/*
 * cosisidecar: objectstorage-sidecar, a drop-in for COSI's sidecar.
 *
 * A Bucket of this driver -> DriverCreateBucket -> status.bucketID, and a
 * Bucket being deleted -> DriverDeleteBucket (deletionPolicy Delete) ->
 * finalizers removed; a BucketAccess of this driver's class ->
 * DriverGrantBucketAccess -> a Secret holding the BucketInfo JSON ->
 * status.accountID, and back with DriverRevokeBucketAccess.
 *
 *   plan.c          what both syncs share: names (lease, account), driver
 *                   ownership (Go's EqualFold), the guarded merge patches,
 *                   resourceVersion order, error and not-found texts.
 *   plan_bucket.c   the Bucket decision and its driver requests.
 *   plan_access.c   the BucketAccess decision, its driver requests, the
 *                   BucketInfo JSON (Go's json.Marshal, byte for byte) and
 *                   the Secret that carries it.
 *   controller.c    informers, the two work queues, the syncs' I/O.
 *   module.c        the controller module (common/sidecar): flags with
 *                   upstream's names and defaults, start, stop.
 *   main.c          the standalone binary over it.
 *
 * The plan files are pure: no I/O, no clock, no global state. Every object
 * is read through common/kobj, so a field of the wrong JSON type reads as
 * missing, and every patch carries metadata.resourceVersion of the object
 * it was decided on (a 409 sends the key back to the queue).
 *
 * Credentials: the BucketInfo text and the Secret built from it are never
 * logged, at any verbosity; nothing here logs at all.
 */
#ifndef CSISIDECAR_COSI_SIDECAR_H
#define CSISIDECAR_COSI_SIDECAR_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "cosi/cosi.h"
#include "kube/kube.h"
#include "obs/obs.h"
#include "util/util.h"

/* ---- names ---------------------------------------------------------------------------- */

/* Events' source component (upstream's sidecar identity). */
#define CSC_COMPONENT "cosi"
/* What the lease name is built from: <driver> + CSC_LOCK_SUFFIX. */
#define CSC_LOCK_SUFFIX "/cosi"

/* sanitize(driver + "/cosi"): "cosi.example.com" -> "cosi-example-com-cosi". */
char *csc_lease_name(const char *driver);

/*
 * Go's strings.EqualFold, for comparing a name against our driver name:
 * exact when either side is ASCII (our name always is, DriverGetInfo
 * checks it). Beyond ASCII letters' case, two runes fold to ASCII ones:
 * KELVIN SIGN (U+212A) is 'k' and LATIN SMALL LETTER LONG S (U+017F) is 's'.
 */
bool csc_equal_fold(const char *a, const char *b);

/* ---- texts ------------------------------------------------------------------------------ */

/* "<prefix>: rpc error: code = <Go name> desc = <message>", as upstream
 * wraps a gRPC error; prefix NULL: without it. Caller frees. */
char *csc_rpc_error(const char *prefix, const csi_status *st);
/* `<resource>.<group> "<name>" not found`, the API server's words. */
char *csc_not_found(const kube_resource *res, const char *name);

/* An Event to record (type Warning, as upstream records them all). */
typedef struct csc_event {
    const char *reason; /* COSI_REASON_*; NULL: none */
    char *message;      /* malloc'ed */
} csc_event;

/* ---- guarded merge patches ------------------------------------------------------------ */

/*
 * Every text below is a JSON merge patch that sets metadata.resourceVersion
 * to the one of the object passed in, so it applies only to that version
 * (409 otherwise). They return 0 with *out NULL when the object already
 * says what the patch would write, and -EINVAL when the object has no
 * resourceVersion (nothing to guard with). Caller frees *out.
 */

/* metadata.finalizers with `fin` appended; `params` (may be NULL) also
 * sets spec.parameters to that object of strings (a brownfield Bucket
 * takes its class's parameters with the finalizer, in one write). */
int csc_patch_add_finalizer(const json_object *obj, const char *fin, const json_object *params,
                            char **out);
/* Step (1) of a grant, in one write: bucketaccess-protection and the id of
 * the bucket about to be granted on, as the annotation COSI_ANN_BUCKET_ID
 * (*out NULL when both are there). */
int csc_patch_access_intent(const json_object *access, const char *bucket_id, char **out);
/* metadata.finalizers without any of `fins` (NULL-ended); the list left
 * (null when nothing is) keeps every other item as it was. */
int csc_patch_remove_finalizers(const json_object *obj, const char *const *fins, char **out);
/* Bucket status {bucketReady: true, bucketID}. */
int csc_patch_bucket_ready(const json_object *bucket, const char *bucket_id, char **out);
/* BucketClaim status {bucketReady: true, bucketName}. */
int csc_patch_claim_ready(const json_object *claim, const char *bucket_name, char **out);
/* BucketAccess status {accountID, accessGranted: true}. */
int csc_patch_access_granted(const json_object *access, const char *account_id, char **out);

/* ---- driver requests ------------------------------------------------------------------- */

/* The string members of the object `params` (others are skipped) as the
 * entries of a protobuf map field whose entry message is `d` (fields key
 * and value): the array for the field (NULL when empty), *n entries. */
void *csc_map_entries(const json_object *params, const ProtobufCMessageDescriptor *d, size_t *n);
/* Frees a request built here (every member is malloc'ed); NULL allowed. */
void csc_request_free(ProtobufCMessage *req);

/* ---- Buckets (plan_bucket.c) ----------------------------------------------------------- */

/* spec.bucketClaim of a Bucket. */
typedef struct csc_ref {
    const char *ns, *name, *uid; /* uid may be NULL */
} csc_ref;

/* Is the Bucket's spec.driverName ours (EqualFold)? */
bool csc_bucket_is_ours(const char *driver, const json_object *bucket);
/* spec.bucketClaim with a namespace and a name: true and *ref filled
 * (pointers into `bucket`); false otherwise. */
bool csc_bucket_claim_ref(const json_object *bucket, csc_ref *ref);
/* Is `claim` the one `ref` names? Namespace and name, and the uid when the
 * reference has one (a claim of the same name made later is another). */
bool csc_claim_matches(const json_object *claim, const csc_ref *ref);
/* status.bucketReady of a Bucket or a BucketClaim. */
bool csc_ready(const json_object *obj);
/* status.bucketID, or NULL when missing or empty. */
const char *csc_bucket_id(const json_object *bucket);

typedef enum {
    CSC_BUCKET_SKIP = 0,  /* not ours, or nothing to do */
    CSC_BUCKET_REFUSE,    /* an Event, then a retry with backoff */
    CSC_BUCKET_CLAIM,     /* ready: only the claim's status may need its patch */
    CSC_BUCKET_PROVISION, /* the steps below, in order */
    CSC_BUCKET_DELETE,    /* being deleted with a finalizer of ours */
} csc_bucket_action;

/*
 * What a sync of one Bucket does. Pointers are into the Bucket (borrowed).
 *
 * PROVISION: (1) add_finalizer: bucket-protection (with the class's
 * parameters when class_params); (2) existing_id, or DriverCreateBucket
 * when NULL; (3) Bucket status; (4) the claim's status.
 *
 * DELETE: (1) delete_accesses: the claim's BucketAccesses are deleted and
 * waited for (bucketaccess-bucket-protection); (2) delete_in_driver:
 * DriverDeleteBucket of bucket_id (NULL: learn it with an idempotent
 * DriverCreateBucket first); release_claim: the claim's finalizer goes;
 * (3) one patch removing our finalizers from the Bucket.
 */
typedef struct csc_bucket_plan {
    csc_bucket_action action;
    csc_event event; /* REFUSE */
    bool add_finalizer;
    bool class_params;
    const char *existing_id;
    bool delete_accesses;
    bool delete_in_driver;
    const char *bucket_id;
    bool release_claim;
} csc_bucket_plan;

/* Decides; 0 always for a Bucket that is a JSON object, -EINVAL for
 * anything else. Clear the plan after use. */
int csc_bucket_plan_make(const char *driver, const json_object *bucket, csc_bucket_plan *out);
void csc_bucket_plan_clear(csc_bucket_plan *p);

/* DriverCreateBucketRequest {name: metadata.name, parameters:
 * spec.parameters}; -EINVAL without a name. */
int csc_create_bucket_request(const json_object *bucket,
                              Cosi__V1alpha1__DriverCreateBucketRequest **out);
/* DriverDeleteBucketRequest {bucket_id, delete_context: spec.parameters}. */
int csc_delete_bucket_request(const json_object *bucket, const char *bucket_id,
                              Cosi__V1alpha1__DriverDeleteBucketRequest **out);

/* ---- BucketAccesses (plan_access.c) ------------------------------------------------------ */

/* spec.bucketAccessClassName, spec.bucketClaimName, spec.credentialsSecretName
 * (NULL when missing or empty). */
const char *csc_access_class_name(const json_object *access);
const char *csc_access_claim_name(const json_object *access);
const char *csc_access_secret_name(const json_object *access);
/* The annotation on a BucketAccess naming the bucket its grant was made
 * on, written before the driver is asked (ours: upstream keeps no such
 * record and cannot revoke once the Bucket is gone). */
#define COSI_ANN_BUCKET_ID "cosi.objectstorage.k8s.io/bucket-id"
/* That annotation's value, or NULL when missing or empty. */
const char *csc_access_recorded_bucket_id(const json_object *access);
/* status.bucketName of a BucketClaim, or NULL when missing or empty. */
const char *csc_claim_bucket_name(const json_object *claim);
/* Is the BucketAccessClass's driverName ours (EqualFold)? */
bool csc_class_is_ours(const char *driver, const json_object *access_class);
/* "ba-" + metadata.uid (the account name sent to the driver); NULL
 * without a uid. Caller frees. */
char *csc_account_name(const json_object *access);

typedef enum {
    CSC_ACCESS_SKIP = 0, /* not ours, granted already, or nothing left to do */
    CSC_ACCESS_REFUSE,   /* an Event, then a retry with backoff */
    CSC_ACCESS_GRANT,
    CSC_ACCESS_REVOKE,
} csc_access_action;

/*
 * What a sync of one BucketAccess does. Pointers are into the objects
 * passed in (borrowed).
 *
 * GRANT: (1) record: bucketaccess-protection and the bucket id on the
 * access (csc_patch_access_intent; a revoke needs the id, and the Bucket
 * may be gone by then, or missing from a cache for a while); (2) the grant on
 * bucket_id; (3) the Secret; (4) bucketaccess-bucket-protection on the
 * Bucket; (5) the access's status.
 *
 * REVOKE: when bucket_id (the one recorded at the grant, else the
 * Bucket's) is set, the revoke of account_id, learnt first
 * with a grant again when regrant (a grant may have run, its answer was
 * not stored); then the Secret if we made it; then our finalizer goes.
 */
typedef struct csc_access_plan {
    csc_access_action action;
    csc_event event; /* REFUSE */
    bool record;
    const char *bucket_id;
    const char *bucket_name;
    const char *account_id;
    bool regrant;
} csc_access_plan;

/*
 * Decides from the access, its class, its claim (access namespace,
 * spec.bucketClaimName) and the claim's Bucket (status.bucketName); any of
 * the last three may be NULL (not found). -EINVAL when `access` is no
 * JSON object. Clear the plan after use.
 */
int csc_access_plan_make(const char *driver, const json_object *access,
                         const json_object *access_class, const json_object *claim,
                         const json_object *bucket, csc_access_plan *out);
void csc_access_plan_clear(csc_access_plan *p);

/* DriverGrantBucketAccessRequest {bucket_id, name "ba-"+uid,
 * authentication_type Key/IAM (else unknown, as upstream),
 * parameters: the class's}; -EINVAL without a uid or bucket id. */
int csc_grant_request(const json_object *access, const json_object *access_class,
                      const char *bucket_id, Cosi__V1alpha1__DriverGrantBucketAccessRequest **out);
int csc_revoke_request(const char *bucket_id, const char *account_id,
                       Cosi__V1alpha1__DriverRevokeBucketAccessRequest **out);

/* Upstream's check of a grant's answer: exactly one credentials entry.
 * 0, or -EINVAL with the Event to record. */
int csc_grant_check(const json_object *access,
                    const Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp, csc_event *ev);

/*
 * The BucketInfo JSON exactly as Go's json.Marshal writes upstream's
 * cosiapi.BucketInfo: metadata {name "bc-"+uid, creationTimestamp null},
 * spec {bucketName, authenticationType (the class's, as written),
 * secretS3 (from credentials "s3", missing keys ""), secretAzure (from
 * "azure" when there is no "s3"; expiryTimeStamp per csc_azure_expiry),
 * protocols [spec.protocol]}. Go's escaping (<, >, & and U+2028/U+2029 as
 * \u escapes, invalid UTF-8 as \ufffd). Never log it. Caller frees (and
 * should wipe) *out.
 */
int csc_bucket_info(const json_object *access, const json_object *access_class,
                    const char *bucket_name,
                    const Cosi__V1alpha1__DriverGrantBucketAccessResponse *resp, char **out);

/*
 * An Azure expiryTs as upstream reads it: Go's time.Parse with layout
 * "2006-01-02 15:04:05.999999999 -0700 MST", written as metav1.Time
 * writes it (RFC 3339, UTC, whole seconds, quoted). 0 with out = the
 * quoted text, or -EINVAL with out = "null" (no parse, or the zero time).
 * `out` holds at least CSC_EXPIRY_MAX bytes.
 */
#define CSC_EXPIRY_MAX 64
int csc_azure_expiry(const char *ts, char *out);

/* The Secret {name: spec.credentialsSecretName, namespace, finalizers
 * [secret-protection]}, type Opaque, stringData {BucketInfo: info}.
 * Never log it. */
int csc_secret_object(const json_object *access, const char *info, json_object **out);
/* Did we make this Secret (it carries secret-protection)? */
bool csc_secret_is_ours(const json_object *secret);

/* ---- the controller (controller.c) ------------------------------------------------------ */

typedef struct csc_ctrl csc_ctrl;

typedef struct csc_ctrl_opts {
    const char *driver; /* the driver's name (DriverGetInfo) */
    csi_conn *cosi;
    kube_client *kube;
    kube_recorder *events;
    obs_registry *metrics;
    util_duration timeout;     /* per COSI call (--timeout) */
    util_duration retry_start; /* --retry-interval-start */
    util_duration retry_max;   /* --retry-interval-max */
    util_duration resync;      /* --resync */
    int workers;               /* --worker-threads, per queue */
} csc_ctrl_opts;

/* Starts the informers (waits for their first lists) and the workers. */
int csc_ctrl_new(const csc_ctrl_opts *opts, csc_ctrl **out);
/* Stops and frees; NULL allowed. */
void csc_ctrl_free(csc_ctrl *c);

/* The sidecar as a controller module (module.c; common/sidecar). */
struct sidecar_module;
extern const struct sidecar_module csc_module;

#endif
