/*
 * resizer: csi-resizer, a drop-in for external-resizer.
 *
 * A bound claim whose spec.resources.requests.storage grew beyond its
 * status.capacity -> ControllerExpandVolume on its PV's volume -> the PV's
 * spec.capacity, then the claim's status: FileSystemResizePending when the
 * driver says the node must grow the file system too (the kubelet finishes
 * it), else the new status.capacity.
 *
 *   plan.c        the pure core: is the claim ours, does it need a resize,
 *                 which size to ask for (upstream's RecoverVolumeExpansion-
 *                 Failure rules over allocatedResources and
 *                 allocatedResourceStatuses), the ControllerExpandVolume
 *                 request, the texts of every API write and event. No I/O,
 *                 no clock (time is an argument), no global state.
 *   controller.c  the PVC and PV informers, the work queue and workers,
 *                 the driver call, the writes and the events.
 *   module.c      the controller module (common/sidecar): flags with
 *                 upstream's names and defaults, capabilities, start, stop.
 *   main.c        the standalone binary over it.
 *
 * Every object read from the API or the driver goes through common/kobj: a
 * field of the wrong JSON type reads as missing.
 */
#ifndef CSISIDECAR_RESIZER_H
#define CSISIDECAR_RESIZER_H

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

/* Claim condition types the resizer owns (MergeResizeConditionsOfPVC). */
#define RSZ_COND_RESIZING          "Resizing"
#define RSZ_COND_FS_RESIZE_PENDING "FileSystemResizePending"
#define RSZ_COND_CONTROLLER_ERROR  "ControllerResizeError"
#define RSZ_COND_NODE_ERROR        "NodeResizeError"

/* status.allocatedResourceStatuses["storage"] values. */
#define RSZ_STATUS_CONTROLLER_IN_PROGRESS "ControllerResizeInProgress"
#define RSZ_STATUS_CONTROLLER_INFEASIBLE  "ControllerResizeInfeasible"
#define RSZ_STATUS_NODE_PENDING           "NodeResizePending"
#define RSZ_STATUS_NODE_IN_PROGRESS       "NodeResizeInProgress"
#define RSZ_STATUS_NODE_INFEASIBLE        "NodeResizeInfeasible"

/* Event reasons. */
#define RSZ_EV_RESIZING  "Resizing"
#define RSZ_EV_FAILED    "VolumeResizeFailed"
#define RSZ_EV_SUCCESS   "VolumeResizeSuccessful"
#define RSZ_EV_FS_RESIZE "FileSystemResizeRequired"
#define RSZ_MSG_FS_PENDING                                                                         \
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node."
#define RSZ_MSG_FS_RESIZE "Require file system resize of volume on node"
#define RSZ_MSG_SUCCESS   "Resize volume succeeded"

/* Annotations. */
#define RSZ_ANN_RESIZER         "volume.kubernetes.io/storage-resizer"
#define RSZ_ANN_PRE_RESIZE      "volume.alpha.kubernetes.io/pre-resize-capacity"
#define RSZ_ANN_NODE_NOT_NEEDED "volume.kubernetes.io/node-expansion-not-required"

/* The leader election lock name before sanitizing: "external-resizer-<driver>". */
char *rsz_lock_name(const char *driver);

/* The resizer as a controller module (module.c; common/sidecar). */
struct sidecar_module;
extern const struct sidecar_module rsz_module;
/* The event source component: "external-resizer <driver>". */
char *rsz_component(const char *driver);

/* ---- configuration ------------------------------------------------------------------- */

typedef struct rsz_config {
    const char *driver_name;
    bool single_node_multi_writer; /* controller capability SINGLE_NODE_MULTI_WRITER */
    /* The driver has no EXPAND_VOLUME in its controller but has it in its
     * node service: upstream's trivial resizer (no ControllerExpandVolume,
     * every resize ends in node expansion). */
    bool trivial;
    bool recover;         /* feature gate RecoverVolumeExpansionFailure (upstream: GA, on) */
    bool annotate_resize; /* feature gate AnnotateFsResize (upstream: beta, on) */
    /* Which controllers run: resize (the driver expands, in the controller
     * or on the node) and modify (MODIFY_VOLUME and the VolumeAttributes-
     * Class gate). */
    bool no_resize;
    bool modify;
    bool extra_modify_metadata; /* --extra-modify-metadata */
} rsz_config;

typedef enum {
    RSZ_MODE_CONTROLLER = 0, /* ControllerExpandVolume */
    RSZ_MODE_TRIVIAL,        /* node expansion only */
    RSZ_MODE_NONE,           /* neither: upstream runs without a resize controller */
    RSZ_MODE_NO_CONTROLLER,  /* no CONTROLLER_SERVICE at all: upstream exits 1 */
} rsz_mode;

/* Upstream's choice from the driver's capabilities (plugin, controller,
 * node masks filled). */
rsz_mode rsz_mode_from_caps(const csi_caps *caps);

/* ---- claims and volumes --------------------------------------------------------------------- */

/* The PV is a CSI volume of this driver (upstream's CanSupport). */
bool rsz_pv_is_ours(const rsz_config *cfg, const json_object *pv);
/* The PV's claimRef names the claim (namespace and uid). */
bool rsz_pv_bound_to(const json_object *pv, const json_object *pvc);
/*
 * The claim is Bound to a volume and asks for more than status.capacity
 * (pvcNeedResize). A quantity that does not parse counts as missing (Go's
 * zero quantity).
 */
bool rsz_pvc_needs_resize(const json_object *pvc);
/* A FileSystemResizePending condition with status True. */
bool rsz_pvc_fs_pending(const json_object *pvc);
/* status.allocatedResourceStatuses.storage, or "". */
const char *rsz_pvc_resize_status(const json_object *pvc);
/* Does an informer update old -> new need a sync? (updatePVC) */
bool rsz_pvc_update_needs_sync(const rsz_config *cfg, const json_object *old,
                               const json_object *obj);
/* status.capacity.storage <= the PV's spec.capacity.storage and the PV
 * carries the pre-resize annotation: it can go (AnnotateFsResize). */
bool rsz_pv_drop_pre_resize(const json_object *pvc, const json_object *pv);

/* ---- the decision -------------------------------------------------------------------------- */

typedef enum {
    RSZ_NONE = 0, /* nothing to do now */
    RSZ_EXPAND,   /* mark in progress, expand to new_size */
    RSZ_DELAY,    /* infeasible before at this size: retry later (slow set) */
} rsz_step;

typedef struct rsz_plan {
    rsz_step step;
    const char *new_size; /* borrowed from the claim: spec or allocatedResources */
    int64_t new_bytes;
    /* Write allocatedResourceStatuses and fresh conditions (upstream's
     * updateStatus: false when re-expanding to the size already recorded). */
    bool update_status;
} rsz_plan;

/*
 * What a sync of a claim that needs a resize (rsz_pvc_needs_resize) does
 * with its PV: upstream's expandAndRecover when cfg->recover, else its
 * legacy pvNeedResize. `final_error`: the last expansion of this claim
 * failed finally; `slow`: the claim is in the slow-retry set. -EINVAL with
 * a message for a size that does not parse.
 */
int rsz_plan_expand(const rsz_config *cfg, const json_object *pvc, const json_object *pv,
                    bool final_error, bool slow, rsz_plan *out);

/* ---- CSI ----------------------------------------------------------------------------------- */

/*
 * ControllerExpandVolumeRequest: volume_id = spec.csi.volumeHandle,
 * capacity_range.required_bytes = bytes, volume_capability from the PV
 * (Block, or Mount with spec.csi.fsType and spec.mountOptions; the access
 * modes as one CSI mode). Secrets are added separately. -EINVAL with a
 * message for a PV without a CSI source or handle, or bad access modes.
 */
int rsz_expand_request(const rsz_config *cfg, const json_object *pv, int64_t bytes,
                       Csi__V1__ControllerExpandVolumeRequest **out);
void rsz_request_free(Csi__V1__ControllerExpandVolumeRequest *req);
/* spec.csi.controllerExpandSecretRef: 0 with both NULL when there is none;
 * -EINVAL when it lacks a name or namespace. */
int rsz_secret_ref(const json_object *pv, const char **ns, const char **name);
/* Copies a Secret's `data` (base64 values) into the request's secrets;
 * -EINVAL for a value that is not base64. */
int rsz_request_set_secrets(Csi__V1__ControllerExpandVolumeRequest *req, const json_object *secret);

/* Final: the operation is certainly not going on in the driver (every code
 * but CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED and
 * ABORTED). code 0: not a driver answer, never final. */
bool rsz_error_final(int code);
/* Infeasible: INVALID_ARGUMENT, OUT_OF_RANGE, NOT_FOUND. */
bool rsz_error_infeasible(int code);

/* ---- volumes in use (--handle-volume-inuse-error) ------------------------------------------ */

/* The driver expands this volume offline only: FAILED_PRECONDITION
 * (upstream's inUseError; the CSI spec's ControllerExpandVolume table). */
bool rsz_error_inuse(int code);
/* A pod in phase Succeeded or Failed uses no claim (isPodTerminated). */
bool rsz_pod_finished(const json_object *pod);
/* An unfinished pod with at least one persistentVolumeClaim volume: the
 * only pods the in-use index keeps. */
bool rsz_pod_uses_claims(const json_object *pod);
/* Calls add(ctx, "<pod namespace>/<claimName>") once per claim an
 * unfinished pod's volumes name (a kube_index_fn). */
void rsz_pod_claim_keys(const json_object *pod, void (*add)(void *ctx, const char *key), void *ctx);
/* Cuts a pod down to what the index reads: metadata name, namespace, uid,
 * resourceVersion and the claim names of spec.volumes. In place. */
void rsz_pod_slim(json_object *pod);
/* The expansion waits: the driver's last answer for this claim was an
 * in-use error and some unfinished pod still uses the claim. */
bool rsz_inuse_blocks(bool inuse_error, size_t pods_using);
/* Upstream's Warning text when it waits: "Unable to expand <ns>/<name>
 * because CSI driver <driver> only supports offline expansion and volume is
 * currently in-use". */
char *rsz_inuse_text(const json_object *pvc, const char *driver);

/* ---- API writes (JSON merge patches, caller frees) --------------------------------------------
 */

/*
 * Upstream's MergeResizeConditionsOfPVC over the claim's status.conditions:
 * conditions of other types stay; resize conditions of `type_` are replaced
 * by the new one, others dropped unless `keep_old`; the new one (type_ NULL:
 * none) is appended when no old one had its type. A new reference.
 */
json_object *rsz_merge_conditions(const json_object *pvc, const char *type_, const char *message,
                                  time_t now, bool keep_old);

/* Marks the claim as being resized: Resizing condition; with recover,
 * allocatedResources = new_size and (update_status) the status
 * ControllerResizeInProgress, the node-expansion-not-required annotation
 * dropped. Guarded by the claim's resourceVersion. */
char *rsz_patch_in_progress(const rsz_config *cfg, const json_object *pvc, const char *new_size,
                            bool update_status, time_t now);
/* FileSystemResizePending (+ NodeResizePending with recover). Guarded. */
char *rsz_patch_node_pending(const rsz_config *cfg, const json_object *pvc, time_t now);
/* Done: status.capacity = size, resize conditions dropped; with recover
 * the storage status removed and the node-expansion-not-required
 * annotation set. Guarded. */
char *rsz_patch_finished(const rsz_config *cfg, const json_object *pvc, const char *size,
                         time_t now);
/* A final failure: ControllerResizeError "failed to expand pvc with
 * <err>", and ControllerResizeInfeasible when `infeasible`. Not guarded, as
 * upstream (the failure must be recorded even on a slightly stale copy). */
char *rsz_patch_failed(const json_object *pvc, const char *err, bool infeasible, time_t now);
/* The PV's spec.capacity.storage = size and, when `pre_resize` (may be
 * NULL) and the PV has no such annotation yet, the pre-resize-capacity
 * annotation. Unguarded, as upstream's. */
char *rsz_patch_pv_capacity(const json_object *pv, const char *size, const char *pre_resize);
/* Drops the pre-resize-capacity annotation. */
char *rsz_patch_pv_drop_pre_resize(void);

/* ---- texts -------------------------------------------------------------------------------- */
/* A driver's error text is csi_status_text's, times util_time_rfc3339's. */

/* "resize volume \"<pv>\" by resizer \"<driver>\" failed: <err>". */
char *rsz_failed_text(const char *pv, const char *driver, const char *err);

/* ---- VolumeAttributesClass modify (modify_plan.c) ----------------------------------------------
 * Upstream's pkg/modifycontroller: a bound claim whose
 * spec.volumeAttributesClassName differs from its
 * status.currentVolumeAttributesClassName -> ControllerModifyVolume with the
 * class's parameters -> the PV's spec.volumeAttributesClassName and the
 * claim's status (modifyVolumeStatus, conditions). */

/* status.modifyVolumeStatus.status values. */
#define RSZ_MOD_PENDING     "Pending"
#define RSZ_MOD_IN_PROGRESS "InProgress"
#define RSZ_MOD_INFEASIBLE  "Infeasible"
/* Condition types. */
#define RSZ_COND_MODIFYING    "ModifyingVolume"
#define RSZ_COND_MODIFY_ERROR "ModifyVolumeError"
/* Event reasons. */
#define RSZ_EV_MODIFY           "VolumeModify"
#define RSZ_EV_MODIFY_FAILED    "VolumeModifyFailed"
#define RSZ_EV_MODIFY_SUCCESS   "VolumeModifySuccessful"
#define RSZ_EV_MODIFY_CANCELLED "VolumeModifyCanceled"
/* The PV annotations the provisioner sets for a modify secret. */
#define RSZ_ANN_MODIFY_SECRET_NAME "volume.kubernetes.io/controller-modify-secret-name"
#define RSZ_ANN_MODIFY_SECRET_NS   "volume.kubernetes.io/controller-modify-secret-namespace"
/* --extra-modify-metadata keys. */
#define RSZ_PARAM_PVC_NAME "csi.storage.k8s.io/pvc/name"
#define RSZ_PARAM_PVC_NS   "csi.storage.k8s.io/pvc/namespace"
#define RSZ_PARAM_PV_NAME  "csi.storage.k8s.io/pv/name"

/* spec.volumeAttributesClassName, status.currentVolumeAttributesClassName,
 * status.modifyVolumeStatus.status and .targetVolumeAttributesClassName;
 * "" when missing (Go's ptr.Deref). The status: NULL when there is no
 * modifyVolumeStatus at all. */
const char *rsz_pvc_vac(const json_object *pvc);
const char *rsz_pvc_current_vac(const json_object *pvc);
const char *rsz_pvc_modify_status(const json_object *pvc);
const char *rsz_pvc_modify_target(const json_object *pvc);

/* Does an informer update old -> new need a modify sync? (updatePVC: the
 * class changed or no modify is recorded, and the claim is Bound.) */
bool rsz_modify_update_needs_sync(const json_object *old, const json_object *obj);

typedef enum {
    RSZ_MOD_NONE = 0, /* nothing to do */
    RSZ_MOD_DELAY,    /* infeasible before with this target: wait (slow set) */
    RSZ_MOD_ROLLBACK, /* spec class cleared: drop ModifyingVolume, event */
    RSZ_MOD_CONTINUE, /* call the driver again with the recorded target */
    RSZ_MOD_START,    /* a new target: check the class, mark InProgress, call */
} rsz_mod_step;

typedef struct rsz_mod_plan {
    rsz_mod_step step;
    const char *target; /* the class to modify to (borrowed from the claim) */
    bool slow_forget;   /* take the claim out of the slow set */
    bool slow_mark;     /* put it in (status Infeasible) */
} rsz_mod_plan;

/*
 * Upstream's modify() and delayModificationIfRecentlyInfeasible up to the
 * driver call. `uncertain`: the last call for this claim failed with a
 * non-final error (or the claim was InProgress at start-up); `slow`: the
 * claim is in the slow set and not expired.
 */
void rsz_modify_plan(const json_object *pvc, bool uncertain, bool slow, rsz_mod_plan *out);

/* The modifyVolumeStatus after a failed call: Infeasible for
 * INVALID_ARGUMENT only, else InProgress. */
const char *rsz_modify_failed_status(int code);

/* ControllerModifyVolumeRequest: volume_id = spec.csi.volumeHandle,
 * mutable_parameters = the class's parameters (+ the claim's and PV's names
 * with `extra`). -EINVAL with upstream's message for a PV without a CSI
 * source or handle. Free with rsz_modify_request_free. */
int rsz_modify_request(const json_object *pv, const json_object *vac, const json_object *pvc,
                       bool extra, Csi__V1__ControllerModifyVolumeRequest **out);
void rsz_modify_request_free(Csi__V1__ControllerModifyVolumeRequest *req);
/* The modify secret: the PV's controller-modify-secret annotations when both
 * are set, else spec.csi.controllerExpandSecretRef; both NULL for none. */
void rsz_modify_secret_ref(const json_object *pv, const char **ns, const char **name);
/* Copies a Secret's `data` into the request; -EINVAL for non-base64. */
int rsz_modify_request_set_secrets(Csi__V1__ControllerModifyVolumeRequest *req,
                                   const json_object *secret);

/*
 * markControllerModifyVolumeStatus: status.modifyVolumeStatus.status =
 * `status`; unless Pending, the conditions ModifyingVolume and (after a
 * failure: `err_code` != 0) ModifyVolumeError merged in as upstream's
 * MergePVCConditions. Without an error the target becomes the spec's class.
 * Guarded by the claim's resourceVersion.
 */
char *rsz_patch_modify_status(const json_object *pvc, const char *status, int err_code,
                              const char *err_msg, time_t now);
/* Done: modifyVolumeStatus removed, currentVolumeAttributesClassName =
 * `target`, both modify conditions dropped. Unguarded, as upstream. */
char *rsz_patch_modify_done(const json_object *pvc, const char *target);
/* Rolled back: the ModifyingVolume condition dropped. Unguarded. */
char *rsz_patch_modify_rolled_back(const json_object *pvc);
/* The PV's spec.volumeAttributesClassName = target. */
char *rsz_patch_pv_vac(const char *target);

/* ---- the controller ------------------------------------------------------------------------- */

typedef struct rsz_ctrl rsz_ctrl;

typedef struct rsz_ctrl_opts {
    csi_conn *csi;
    kube_client *kube;
    kube_recorder *events;
    obs_registry *metrics;
    util_duration timeout;     /* per CSI call (--timeout) */
    util_duration retry_start; /* --retry-interval-start */
    util_duration retry_max;   /* --retry-interval-max; also the slow-retry period */
    util_duration resync;      /* --resync-period */
    int workers;               /* --workers */
    bool handle_inuse;         /* --handle-volume-inuse-error: the pod informer */
} rsz_ctrl_opts;

/* Starts informers (waits for their first lists) and workers. */
int rsz_ctrl_start(const rsz_ctrl_opts *opts, const rsz_config *cfg, rsz_ctrl **out);
void rsz_ctrl_stop(rsz_ctrl *c);

#endif
