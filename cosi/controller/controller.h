/*
 * cctl: objectstorage-controller, a drop-in for COSI's controller-manager.
 *
 * BucketClaim -> Bucket: a claim of a BucketClass gets a Bucket named
 * "bucket-" + its UID (greenfield), a claim naming an existing Bucket binds
 * it (brownfield); a claim being deleted takes its Bucket with it. The
 * driver is never called here: the objectstorage-sidecar next to the driver
 * turns Buckets into buckets.
 *
 *   plan.c        the pure core: from the claim, its class and its Bucket,
 *                 the next step and the exact text of its write (guarded
 *                 patches, the Bucket to create), the Event messages and the
 *                 lease name. No I/O, no clock, no global state.
 *   controller.c  the informers (claims in all namespaces, Buckets, classes),
 *                 the work queue and its workers, the writes.
 *   module.c      the controller module (common/sidecar): flags (upstream's
 *                 plus the common sidecar ones), start, stop.
 *   main.c        the standalone binary over it.
 *
 * One step per write, in an order that is safe after a crash between any two:
 * the claim's finalizer first (the intent), then the Bucket (created or
 * bound), then the claim's status. Every patch carries the resourceVersion
 * of the object it was decided on, so a stale decision fails (409/422) and
 * is made again from fresher state instead of overwriting.
 *
 * Every object is read through common/kobj: a field of the wrong JSON type
 * reads as missing.
 */
#ifndef CSISIDECAR_COSI_CONTROLLER_H
#define CSISIDECAR_COSI_CONTROLLER_H

#include <stdbool.h>

#include <json-c/json.h>

#include "kube/kube.h"
#include "obs/obs.h"
#include "util/util.h"

/* ---- names (upstream's) ----------------------------------------------------------------- */

/* Event source component and the leader lock before sanitizing. */
#define CCTL_COMPONENT "cosi-controller-manager"
#define CCTL_LOCK_NAME "leader-lock/cosi-controller-manager"

/* What the Event of a claim with no bucketClassName says (upstream's words). */
#define CCTL_MSG_NO_CLASS "cannot find bucket class with the name specified in the bucket claim"

/* ---- reading a claim ----------------------------------------------------------------------- */

/* spec.bucketClassName, or NULL when missing or empty. */
const char *cctl_class_name(const json_object *claim);
/* spec.existingBucketName, or NULL when missing or empty. */
const char *cctl_existing_name(const json_object *claim);

/*
 * The Bucket a sync of `claim` looks at (caller frees), NULL when there is
 * none to name (no UID, or one too long for a 253-byte name). Not being deleted:
 * spec.existingBucketName, else "bucket-" + UID. Being deleted: status.bucketName first (what it
 * was bound to), then the same.
 */
char *cctl_bucket_name(const json_object *claim);

/* The Bucket's spec.bucketClaim.uid equals the claim's UID. */
bool cctl_bucket_bound_to(const json_object *bucket, const json_object *claim);

/* The claim (being deleted) owns this Bucket: bound to its UID, or, with
 * no claim UID on the Bucket, found by status.bucketName or the generated
 * name rather than by spec.existingBucketName alone. */
bool cctl_bucket_owned(const json_object *bucket, const json_object *claim);

/* "namespace/name" of the Bucket's spec.bucketClaim (the work queue key of
 * its claim), NULL when either is missing. Caller frees. */
char *cctl_bucket_claim_key(const json_object *bucket);

/* ---- the decision ---------------------------------------------------------------------------- */

typedef enum {
    CCTL_NONE = 0,         /* done, or waiting for the sidecar or a Bucket's deletion */
    CCTL_FAIL,             /* no write: an Event (reason, message), retry with backoff */
    CCTL_ADD_FINALIZER,    /* JSON patch of the claim */
    CCTL_CREATE_BUCKET,    /* POST the Bucket text */
    CCTL_BIND_BUCKET,      /* merge patch of the brownfield Bucket */
    CCTL_SET_STATUS,       /* merge patch of the claim's status subresource */
    CCTL_DELETE_BUCKET,    /* DELETE the Bucket (404 is fine) */
    CCTL_REMOVE_FINALIZER, /* JSON patch of the claim */
} cctl_step;

typedef struct cctl_plan {
    cctl_step step;
    char *bucket;       /* the Bucket the step is about, or NULL */
    char *text;         /* the patch or object text of a write */
    const char *reason; /* CCTL_FAIL: the Event reason (COSI_REASON_*) */
    char *message;      /* CCTL_FAIL: the Event message */
    /* CCTL_REMOVE_FINALIZER with a Bucket name: the cache showed no
     * Bucket of this claim there, but a copy may be old or corrupted. The
     * claim goes only once a GET answers 404 or a Bucket that
     * cctl_bucket_owned says is not the claim's. */
    bool confirm;
} cctl_plan;

/*
 * The next step for `claim`, given its class (NULL: not found) and the
 * Bucket cctl_bucket_name names (NULL: not found):
 *
 * - being deleted with our finalizer: a Bucket bound to the claim (or with
 *   no claim UID, when status.bucketName or the generated name led to it)
 *   is deleted unless already being deleted (then NONE); no Bucket, or one
 *   that is not the claim's, and the finalizer goes.
 * - status.bucketReady: NONE.
 * - brownfield: Bucket missing, bound to another claim or being deleted:
 *   FAIL; else finalizer, bind (when spec.bucketClaim or spec.protocols
 *   differ), status {bucketName, bucketReady: true}.
 * - greenfield: no class name or (no Bucket yet and) no class: FAIL; the
 *   Bucket bound to another claim: FAIL; being deleted: NONE (made again
 *   once gone); else finalizer, create, status {bucketName, bucketReady:
 *   false} while status.bucketName is unset.
 *
 * 0 with *out filled (free with cctl_plan_clear), or -EINVAL with a message
 * when the claim lacks what a write needs (metadata, UID, resourceVersion).
 */
int cctl_plan_next(const json_object *claim, const json_object *cls, const json_object *bucket,
                   cctl_plan *out);
void cctl_plan_clear(cctl_plan *p);

/* ---- the texts (malloc'ed; NULL when the input lacks what they need) --------------------------
 */

/* JSON patch: test metadata.resourceVersion, add the claim finalizer. */
char *cctl_patch_add_finalizer(const json_object *claim);
/* JSON patch: test metadata.resourceVersion, test the finalizer's entry,
 * remove it. NULL also when the claim lacks the finalizer. */
char *cctl_patch_remove_finalizer(const json_object *claim);
/* The greenfield Bucket: "bucket-" + UID, the bucket-protection finalizer,
 * spec {driverName, bucketClassName, bucketClaim {name, namespace, uid},
 * protocols (the claim's, [] when none), parameters (the class's string
 * values, left out when none), deletionPolicy (the class's, left out when
 * missing so the CRD's default applies)}. */
char *cctl_bucket_object(const json_object *claim, const json_object *cls);
/* Merge patch of a claim's status: {bucketName, bucketReady} under the
 * claim's resourceVersion. */
char *cctl_patch_status(const json_object *claim, const char *bucket, bool ready);
/* Whether the Bucket's spec.bucketClaim {name, namespace, uid} and
 * spec.protocols already are the claim's. */
bool cctl_bucket_binding_current(const json_object *bucket, const json_object *claim);
/* Merge patch binding a brownfield Bucket to the claim: spec.bucketClaim
 * {name, namespace, uid} and spec.protocols, under the Bucket's
 * resourceVersion. */
char *cctl_patch_bind(const json_object *bucket, const json_object *claim);

/* DeleteOptions for the Bucket: preconditions {uid, resourceVersion}, so a
 * Bucket that changed (rebound, recreated) since the decision stays. */
char *cctl_delete_options(const json_object *bucket);

/* `<resource> "<name>" not found`, as the API server words it (name quoted
 * as Go's %q does for printable text). */
char *cctl_msg_not_found(const char *resource, const char *name);

/* ---- the controller -----------------------------------------------------------------------------
 */

typedef struct cctl_ctrl cctl_ctrl;

typedef struct cctl_ctrl_opts {
    kube_client *kube;
    kube_recorder *events;     /* may be NULL */
    obs_registry *metrics;     /* may be NULL */
    util_duration retry_start; /* --retry-interval-start */
    util_duration retry_max;   /* --retry-interval-max */
    util_duration resync;      /* --resync (claims) */
    int workers;               /* --worker-threads */
} cctl_ctrl_opts;

/* Starts the informers (waits for their first lists) and the workers. */
int cctl_ctrl_start(const cctl_ctrl_opts *opts, cctl_ctrl **out);
void cctl_ctrl_stop(cctl_ctrl *c);

/* The controller as a module (module.c; common/sidecar). */
struct sidecar_module;
extern const struct sidecar_module cctl_module;

#endif
