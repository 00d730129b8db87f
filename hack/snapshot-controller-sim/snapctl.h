/*
 * snapctl: snapshot-controller-sim, a stand-in for the cluster-side
 * snapshot-controller of kubernetes-csi/external-snapshotter (v8,
 * pkg/common-controller), which neither kube-lite nor the real control
 * plane of hack/kubernetes/ runs, as neither runs a kubelet.
 *
 * VolumeSnapshot -> VolumeSnapshotContent: a snapshot of a claim gets its
 * class (the default class of the volume's driver when it names none), the
 * pvc-as-source-protection finalizer on the claim while it is being cut, a
 * content "snapcontent-<snapshot UID>" for the csi-snapshotter sidecar to
 * cut, and the content's status copied back. A snapshot naming a
 * pre-provisioned content binds it. A snapshot being deleted marks its
 * content with the volumesnapshot-being-deleted annotation and, with the
 * Delete policy, deletes it; the sidecar then deletes the driver's snapshot
 * and lifts the content's finalizer, which this controller adds.
 *
 *   plan.c        the pure core: from a snapshot and what it refers to (class,
 *                 classes, claim, volume, content), the next step and the exact
 *                 text of its write, the Events and the status error texts
 *                 (upstream's words). Also the content's own sync. No I/O, no
 *                 clock (time is an argument), no global state.
 *   controller.c  the informers (snapshots, contents, classes, claims,
 *                 volumes), two work queues with their workers, the writes.
 *   main.c        flags (upstream's snapshot-controller names), start-up.
 *
 * One write per step, each decided on the answer of the previous one, in an
 * order that is safe after a crash between any two: finalizers (the intent)
 * before the content, the content before the status. Writes upstream makes
 * as updates are merge patches carrying the resourceVersion they were
 * decided on, so a stale decision fails (409) and is made again.
 */
#ifndef CSISIDECAR_SNAPCTL_H
#define CSISIDECAR_SNAPCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <json-c/json.h>

#include "kube/kube.h"
#include "obs/obs.h"
#include "util/util.h"

/* ---- names (upstream's, pkg/utils/util.go) ----------------------------------------------- */

#define SNAPCTL_GROUP           "snapshot.storage.k8s.io"
#define SNAPCTL_API_VERSION     SNAPCTL_GROUP "/v1"
#define SNAPCTL_FIN_CONTENT     "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
#define SNAPCTL_FIN_BOUND       "snapshot.storage.kubernetes.io/volumesnapshot-bound-protection"
#define SNAPCTL_FIN_AS_SOURCE   "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection"
#define SNAPCTL_FIN_PVC         "snapshot.storage.kubernetes.io/pvc-as-source-protection"
#define SNAPCTL_ANN_DEFAULT     "snapshot.storage.kubernetes.io/is-default-class"
#define SNAPCTL_ANN_BEING_DEL   "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
#define SNAPCTL_ANN_SECRET_NAME "snapshot.storage.kubernetes.io/deletion-secret-name"
#define SNAPCTL_ANN_SECRET_NS   "snapshot.storage.kubernetes.io/deletion-secret-namespace"
#define SNAPCTL_PARAM_SECRET    "csi.storage.k8s.io/snapshotter-secret-name"
#define SNAPCTL_PARAM_SECRET_NS "csi.storage.k8s.io/snapshotter-secret-namespace"
#define SNAPCTL_CONTENT_PREFIX  "snapcontent-"
#define SNAPCTL_COMPONENT       "snapshot-controller"
#define SNAPCTL_LOCK_NAME       "snapshot-controller-leader"
#define SNAPCTL_QUEUE_SNAPSHOTS "snapshot-controller-snapshot"
#define SNAPCTL_QUEUE_CONTENTS  "snapshot-controller-content"

/* ---- reading objects --------------------------------------------------------------------- */

/* spec.source.persistentVolumeClaimName / volumeSnapshotContentName, or NULL. */
const char *snapctl_source_pvc(const json_object *snapshot);
const char *snapctl_source_content(const json_object *snapshot);
/* status.boundVolumeSnapshotContentName when non-empty, else NULL. */
const char *snapctl_bound_content(const json_object *snapshot);
/* status.readyToUse is true. */
bool snapctl_is_ready(const json_object *snapshot);
/* "snapcontent-<UID>" (caller frees), NULL without a UID. */
char *snapctl_dynamic_content_name(const json_object *snapshot);
/*
 * The content a sync of `snapshot` looks at (caller frees), NULL when none
 * can be named: being deleted, the bound one else the dynamic name; a
 * pre-provisioned snapshot, its source; a ready bound one, the bound one;
 * else the dynamic name.
 */
char *snapctl_content_for(const json_object *snapshot);
/* upstream's isPVCBeingUsed for one snapshot: it takes a snapshot of the
 * claim `pvc_name` and is not ready yet. */
bool snapctl_snapshot_uses_pvc(const json_object *snapshot, const char *pvc_name);
/* upstream's isVolumeBeingCreatedFromSnapshot for one claim: it is Pending
 * and its dataSource is this VolumeSnapshot. */
bool snapctl_pvc_restores(const json_object *pvc, const json_object *snapshot);
/* "ns/name" of the content's spec.volumeSnapshotRef (caller frees), or NULL. */
char *snapctl_content_snapshot_key(const json_object *content);

/* ---- the decision -----------------------------------------------------------------------------
 */

typedef enum {
    SNAPCTL_NONE = 0,                /* done, or waiting for the sidecar */
    SNAPCTL_FAIL,                    /* no write; retry with backoff */
    SNAPCTL_SET_ERROR,               /* merge patch of the snapshot's status: error */
    SNAPCTL_SET_CLASS,               /* merge patch: spec.volumeSnapshotClassName (default) */
    SNAPCTL_SET_SNAPSHOT_FINALIZERS, /* merge patch: the snapshot's finalizer list */
    SNAPCTL_SET_PVC_FINALIZERS,      /* merge patch: the claim's finalizer list */
    SNAPCTL_CREATE_CONTENT,          /* POST the content (409 AlreadyExists is fine) */
    SNAPCTL_BIND_CONTENT,            /* merge patch: the content's ref UID and class */
    SNAPCTL_SET_STATUS,              /* merge patch of the snapshot's status from the content */
    SNAPCTL_MARK_CONTENT,            /* merge patch: the being-deleted annotation */
    SNAPCTL_DELETE_CONTENT,          /* DELETE the content (404 is fine) */
    SNAPCTL_ADD_CONTENT_FINALIZER,   /* JSON patch of the content (its own sync) */
} snapctl_step;

const char *snapctl_step_name(snapctl_step s);

typedef struct snapctl_event {
    const char *type;   /* "Normal" / "Warning"; NULL: no event */
    const char *reason; /* upstream's */
    char *message;
} snapctl_event;

typedef struct snapctl_plan {
    snapctl_step step;
    char *target;           /* the content or claim written, or NULL (the snapshot) */
    char *text;             /* the patch or object text */
    snapctl_event event[2]; /* Events about the snapshot (the content in its own sync) */
    /* The sync ends after this step: with an error (retry with backoff)
     * when set, else done. Otherwise the next step is decided on the
     * write's answer. */
    bool last, fail;
    /* The content sync: the snapshot needs its status copied (queue it). */
    bool enqueue_snapshot;
} snapctl_plan;

typedef struct snapctl_config {
    bool prevent_volume_mode_conversion; /* spec.sourceVolumeMode on new contents */
} snapctl_config;

/* What a snapshot's sync reads besides the snapshot; objects borrowed,
 * NULL when not found. */
typedef struct snapctl_in {
    const json_object *snapshot;
    const json_object *cls;     /* spec.volumeSnapshotClassName's class */
    const json_object *classes; /* an array of every class (default class) */
    const json_object *pvc;     /* spec.source.persistentVolumeClaimName's claim */
    const json_object *pv;      /* the claim's spec.volumeName */
    const json_object *content; /* snapctl_content_for's */
    bool content_deleted;       /* our DELETE of `content` went through already */
    bool pvc_used_by_others;    /* another unready snapshot of the claim */
    bool restoring;             /* a Pending claim is being restored from it */
    time_t now;
} snapctl_in;

/*
 * Upstream's syncSnapshotByKey (checkAndUpdateSnapshotClass, then
 * syncSnapshot) as one step. 0 with *out filled (snapctl_plan_clear), or
 * -EINVAL with a message when the snapshot lacks what any write needs
 * (metadata, name, namespace, UID, resourceVersion).
 */
int snapctl_plan_snapshot(const snapctl_config *cfg, const snapctl_in *in, snapctl_plan *out);
/* Upstream's syncContent: `snapshot` is the cached one its reference names
 * (NULL: none). */
int snapctl_plan_content(const json_object *content, const json_object *snapshot,
                         snapctl_plan *out);
void snapctl_plan_clear(snapctl_plan *p);

/* upstream's needsUpdateSnapshotStatus. */
bool snapctl_status_stale(const json_object *snapshot, const json_object *content);

/* The secret upstream names in the deletion-secret annotations: from the
 * class's snapshotter-secret-name/-namespace parameters. 0 with both NULL
 * when the class names none; -EINVAL with upstream's message. Templates
 * (a "$" in either) are refused here: see plan.c. Caller frees. */
int snapctl_secret_ref(const json_object *cls, char **ns, char **name);

/* ---- the controller -----------------------------------------------------------------------------
 */

typedef struct snapctl_ctrl snapctl_ctrl;

typedef struct snapctl_ctrl_opts {
    kube_client *kube;
    kube_recorder *events; /* may be NULL */
    obs_registry *metrics; /* may be NULL */
    util_duration retry_start, retry_max, resync;
    int workers;
    snapctl_config cfg;
} snapctl_ctrl_opts;

/* Starts the informers (waits for their first lists) and the workers. */
int snapctl_ctrl_start(const snapctl_ctrl_opts *opts, snapctl_ctrl **out);
/* Stops the workers and informers and frees (NULL: no-op). */
void snapctl_ctrl_free(snapctl_ctrl *c);

#endif
