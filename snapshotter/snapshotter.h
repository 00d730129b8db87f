/*
 * snapshotter: csi-snapshotter, a drop-in for external-snapshotter's sidecar
 * (the csi-snapshotter container, not the cluster-wide snapshot-controller).
 *
 * A VolumeSnapshotContent of this driver whose spec.source.volumeHandle is
 * set (dynamic) -> CreateSnapshot named after its VolumeSnapshot's UID ->
 * status {snapshotHandle, readyToUse, restoreSize, creationTime}; one whose
 * spec.source.snapshotHandle is set (pre-provisioned) -> ListSnapshots by id
 * -> the same status. The snapshot-controller marks a content for deletion
 * with the volumesnapshot-being-deleted annotation; then, with deletionPolicy
 * Delete, DeleteSnapshot, the status cleared, and the content's finalizer
 * removed. The volumesnapshot-being-created annotation is set before
 * CreateSnapshot and removed once the driver answered (or failed finally),
 * so the snapshot-controller never lets a content go while a snapshot may
 * be being cut.
 *
 *   plan.c        the pure core: the content decoded and checked, which step
 *                 a sync takes, the CSI requests, the texts of every API
 *                 write. No I/O, no clock (time is an argument).
 *   controller.c  the content and class informers, the queue and workers,
 *                 the driver calls, the writes and the events.
 *   module.c      the controller module (common/sidecar): flags with
 *                 upstream's names and defaults, capabilities, start, stop.
 *   main.c        the standalone binary over it.
 *
 * Volume group snapshots are not implemented (upstream's CSIVolumeGroupSnapshot
 * gate is accepted and said so); members of a group snapshot are left alone.
 */
#ifndef CSISIDECAR_SNAPSHOTTER_H
#define CSISIDECAR_SNAPSHOTTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <json-c/json.h>

#include "csi/csi.h"
#include "kube/kube.h"
#include "obs/obs.h"
#include "util/util.h"

/* ---- names (upstream's) ---------------------------------------------------------------- */

#define SNAP_FINALIZER         "snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection"
#define SNAP_ANN_BEING_CREATED "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
#define SNAP_ANN_BEING_DELETED "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
#define SNAP_ANN_SECRET_NAME   "snapshot.storage.kubernetes.io/deletion-secret-name"
#define SNAP_ANN_SECRET_NS     "snapshot.storage.kubernetes.io/deletion-secret-namespace"
#define SNAP_ANN_GROUP_HANDLE  "groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle"
/* The label --node-deployment selects contents by (value: the node name). */
#define SNAP_LABEL_MANAGED_BY "snapshot.storage.kubernetes.io/managed-by"

#define SNAP_PARAM_PREFIX        "csi.storage.k8s.io/"
#define SNAP_PARAM_SNAPSHOT_NAME SNAP_PARAM_PREFIX "volumesnapshot/name"
#define SNAP_PARAM_SNAPSHOT_NS   SNAP_PARAM_PREFIX "volumesnapshot/namespace"
#define SNAP_PARAM_CONTENT_NAME  SNAP_PARAM_PREFIX "volumesnapshotcontent/name"
#define SNAP_PARAM_LIST_NAME     SNAP_PARAM_PREFIX "snapshotter-list-secret-name"
#define SNAP_PARAM_LIST_NS       SNAP_PARAM_PREFIX "snapshotter-list-secret-namespace"

/* Event reasons. */
#define SNAP_EV_CREATE_FAILED "SnapshotCreationFailed"
#define SNAP_EV_CHECK_FAILED  "SnapshotContentCheckandUpdateFailed"
#define SNAP_EV_DELETE_ERROR  "SnapshotDeleteError"

/* The leader election lock name before sanitizing:
 * "external-snapshotter-leader-<driver with / as ->". */
char *snap_lock_name(const char *driver);

/* The snapshotter as a controller module (module.c; common/sidecar). */
struct sidecar_module;
extern const struct sidecar_module snap_module;
/* The event source component: "csi-snapshotter <driver>". */
char *snap_component(const char *driver);

/* ---- configuration ------------------------------------------------------------------- */

typedef struct snap_config {
    const char *driver_name;
    const char *prefix;         /* --snapshot-name-prefix */
    int uuid_length;            /* --snapshot-name-uuid-length; -1: the whole UID */
    bool extra_create_metadata; /* --extra-create-metadata */
    bool list_snapshots;        /* controller capability LIST_SNAPSHOTS */
    const char *node;           /* --node-deployment: $NODE_NAME, else NULL */
} snap_config;

/* ---- the content ------------------------------------------------------------------------ */

/* What a sync reads of a VolumeSnapshotContent; strings borrowed from it. */
typedef struct snap_content {
    const char *name, *driver, *policy, *class_name;
    const char *volume_handle, *snapshot_handle; /* spec.source: one of them */
    const char *ref_name, *ref_ns, *ref_uid;     /* spec.volumeSnapshotRef */
    bool deleting;                               /* metadata.deletionTimestamp */
    bool has_finalizer, being_created, being_deleted, group_member;
    bool has_status; /* status is an object */
    const char *status_handle, *group_handle, *error_message;
    bool ready; /* status.readyToUse true */
} snap_content;

/* Reads `obj` (a VolumeSnapshotContent) into *out: -EINVAL with a message
 * when it is no object, breaks a field rule of KUBE_VOLUMESNAPSHOTCONTENT
 * (Go's typed decoder), has a non-integer creationTime or restoreSize, or
 * has no name. */
int snap_content_decode(const json_object *obj, snap_content *out);

/* Upstream's isDriverMatch: a source is set, spec.driver is ours, and the
 * class (NULL: not known) names our driver. */
bool snap_content_is_ours(const snap_config *cfg, const snap_content *c, const json_object *cls);

/* Upstream's ShouldEnqueueContentChange: a resync (same resourceVersion),
 * readyToUse turned true, or a change beyond status, finalizers,
 * managedFields and the being-created annotation. */
bool snap_update_needs_sync(const json_object *old, const json_object *obj);

/* ---- the decision -------------------------------------------------------------------------- */

typedef enum {
    SNAP_NONE = 0,         /* nothing to do */
    SNAP_DELETE,           /* DeleteSnapshot, clear the status, remove the finalizer */
    SNAP_REMOVE_FINALIZER, /* the content goes; no snapshot to delete */
    SNAP_CREATE,           /* CreateSnapshot (again, until ready) */
    SNAP_CHECK,            /* ListSnapshots by the handle (pre-provisioned) */
    SNAP_DROP_CREATING,    /* ready: remove the being-created annotation */
} snap_step;

const char *snap_step_name(snap_step s);

/* Upstream's syncContent over a decoded content of this driver. */
snap_step snap_plan(const snap_content *c);

/* ---- CSI ----------------------------------------------------------------------------------- */

/* "<prefix>-<uid>", or the UID without dashes cut to uuid_length;
 * -EINVAL for an empty UID or a length beyond it. */
int snap_name(const snap_config *cfg, const char *uid, char **out);

/*
 * CreateSnapshotRequest of a dynamic content with its class (NULL: none):
 * name, source_volume_id, parameters = the class's minus the
 * csi.storage.k8s.io/ secret keys (another key with that prefix is an
 * error, as upstream) plus, with extra_create_metadata, the snapshot's name
 * and namespace and the content's name. Secrets are added separately.
 * -EINVAL with upstream's message otherwise.
 */
int snap_create_request(const snap_config *cfg, const json_object *content, const json_object *cls,
                        Csi__V1__CreateSnapshotRequest **out);
void snap_create_request_free(Csi__V1__CreateSnapshotRequest *req);

/* The deletion-secret annotations of the content (used for Create and
 * Delete): both NULL when absent; -EINVAL when one is empty. */
int snap_secret_ref(const json_object *content, const char **ns, const char **name);
/* The class's snapshotter-list-secret pair with ${volumesnapshotcontent.name}
 * expanded: both NULL when the class has neither; -EINVAL for half a pair,
 * an unknown token or a result that is not a valid name. Caller frees. */
int snap_list_secret_ref(const json_object *cls, const char *content_name, char **ns, char **name);

/* A Secret's data (base64 values) as a request's secrets map: -EINVAL for
 * a value that is not base64. */
int snap_create_set_secrets(Csi__V1__CreateSnapshotRequest *req, const json_object *secret);
int snap_delete_set_secrets(Csi__V1__DeleteSnapshotRequest *req, const json_object *secret);
int snap_list_set_secrets(Csi__V1__ListSnapshotsRequest *req, const json_object *secret);

/* Final: CreateSnapshot certainly is not going on in the driver (every
 * code but CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED,
 * ABORTED); code 0, no driver answer, is never final. */
bool snap_error_final(int code);

/* ---- API writes (caller frees) ---------------------------------------------------------- */

/* What the driver said of a snapshot. */
typedef struct snap_result {
    const char *handle;
    bool ready;
    int64_t created_ns; /* 0: unknown, `now` is used */
    int64_t size;       /* 0: unknown, not written */
    const char *group_handle;
} snap_result;

/* Fills *r from a CSI Snapshot (borrowed strings). */
void snap_result_from_csi(const Csi__V1__Snapshot *s, snap_result *r);

/*
 * Upstream's updateSnapshotContentStatus as a merge patch of the status
 * subresource guarded by the content's resourceVersion: a missing status
 * gets every field; an existing one keeps what it has and gains the
 * handle, creationTime, restoreSize (> 0) and group handle it lacks,
 * readyToUse when it differs (and loses its error when that turns true).
 * NULL when nothing changes. `now_ns` stands in for an unknown time.
 */
char *snap_patch_status(const json_object *content, const snap_result *r, int64_t now_ns);
/* status.error {time, message} and readyToUse false, guarded; NULL when the
 * same message is recorded already (upstream then also sends no event). */
char *snap_patch_error(const json_object *content, const char *message, time_t now);
/* Clears snapshotHandle, readyToUse, creationTime and restoreSize (after
 * DeleteSnapshot), guarded. */
char *snap_patch_clear_status(const json_object *content);
/* JSON patches: the being-created annotation "yes" (guarded), and its removal. */
char *snap_patch_set_creating(const json_object *content);
char *snap_patch_drop_creating(void);

/* ---- the controller ------------------------------------------------------------------------- */

typedef struct snap_ctrl snap_ctrl;

typedef struct snap_ctrl_opts {
    csi_conn *csi;
    kube_client *kube;
    kube_recorder *events;
    obs_registry *metrics;
    util_duration timeout;     /* per CSI call (--timeout) */
    util_duration retry_start; /* --retry-interval-start */
    util_duration retry_max;   /* --retry-interval-max */
    util_duration resync;      /* --resync-period */
    int workers;               /* --worker-threads */
} snap_ctrl_opts;

/* Starts informers (waits for their first lists) and workers. */
int snap_ctrl_start(const snap_ctrl_opts *opts, const snap_config *cfg, snap_ctrl **out);
void snap_ctrl_stop(snap_ctrl *c);

#endif
