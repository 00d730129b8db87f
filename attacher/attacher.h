/*
 * attacher: csi-attacher, a drop-in for external-attacher.
 *
 * VolumeAttachment (VA) -> ControllerPublishVolume -> status.attached, and a
 * VA being deleted -> ControllerUnpublishVolume -> finalizer removed.
 *
 *   plan.c        the pure core: names, node-id resolution, the CSI requests
 *                 built from VA + PV + node id + capabilities, the API patch
 *                 texts, error messages cut to the API's limit. No I/O, no
 *                 clock (time is an argument), no global state.
 *   queue.c       a work queue pair with backlog visibility (depth, oldest
 *                 waiting item's age, slow-item log lines).
 *   controller.c  the informers, the attach/detach/PV workers and the
 *                 trivial handler for drivers without ControllerPublish.
 *   reconcile.c   the ListVolumes reconcile (--reconcile-sync).
 *   module.c      the controller module (common/sidecar): flags with
 *                 upstream's names and defaults, capabilities, start, stop.
 *   main.c        the standalone binary over it.
 *
 * Every object read from the API or the driver is type-checked through
 * common/kobj: a field of the wrong JSON type reads as missing.
 */
#ifndef CSISIDECAR_ATTACHER_H
#define CSISIDECAR_ATTACHER_H

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

/* The node id used for an attach, kept on the VA as the detach fallback. */
#define ATT_ANN_VA_NODE_ID "csi.alpha.kubernetes.io/node-id"
/* The seed design's Node annotation: a JSON map driver name -> node id. */
#define ATT_ANN_NODE_IDS "csi.volume.kubernetes.io/nodeid"
/* The API server's limit on status.{attach,detach}Error.message, in bytes. */
#define ATT_MESSAGE_MAX 1024
/* What a cut message ends with, so a reader knows text is missing. */
#define ATT_TRUNCATED_MARKER "... [truncated]"

/* "external-attacher/" + the driver name sanitized as upstream ([^a-zA-Z0-9-]
 * -> '-', a trailing '-' gets an 'X'). Caller frees. */
char *att_finalizer(const char *driver);
/* The leader election lock name before sanitizing: "external-attacher-leader-<driver>". */
char *att_lock_name(const char *driver);

/* The attacher as a controller module (module.c; common/sidecar). */
struct sidecar_module;
extern const struct sidecar_module att_module;

/* ---- configuration ------------------------------------------------------------------- */

typedef struct att_config {
    const char *driver_name;
    const char *default_fstype;    /* --default-fstype; "" or NULL: none */
    bool publish_readonly;         /* PUBLISH_READONLY */
    bool single_node_multi_writer; /* SINGLE_NODE_MULTI_WRITER */
} att_config;

/* Fills the capability-derived fields of `cfg`. */
void att_config_set_caps(att_config *cfg, const csi_caps *caps);
/* Does the driver need ControllerPublish at all? (Else: the trivial handler.) */
bool att_caps_publish(const csi_caps *caps);
/* Can the ListVolumes reconcile run? (LIST_VOLUMES + LIST_VOLUMES_PUBLISHED_NODES) */
bool att_caps_list_published(const csi_caps *caps);

/* ---- VolumeAttachments ------------------------------------------------------------------ */

/* spec.attacher names this driver. */
bool att_va_is_ours(const att_config *cfg, const json_object *va);
/* spec.nodeName, or NULL. */
const char *att_va_node(const json_object *va);
/* spec.source.persistentVolumeName, or NULL. */
const char *att_va_pv(const json_object *va);

typedef enum {
    ATT_SKIP = 0, /* nothing to do (not ours, attached, or detached already) */
    ATT_ATTACH,
    ATT_DETACH,
} att_action;

/*
 * What a sync of `va` does: not ours -> SKIP; being deleted -> DETACH while
 * our finalizer is on it (or `forced`, the reconcile saw it published);
 * otherwise ATTACH unless status.attached is true and not `forced`.
 */
att_action att_va_action(const att_config *cfg, const json_object *va, const char *finalizer,
                         bool forced);

/*
 * The PV a VA attaches: -EINVAL (message in util_err_last) when the source
 * names both a PV and an inline volume, or neither. Inline volumes (CSI
 * migration) are not supported: -ENOTSUP.
 */
int att_va_source(const json_object *va, const char **pv_name);

/* ---- node ids ---------------------------------------------------------------------- */

typedef enum {
    ATT_NODE_ID_NONE = 0,
    ATT_NODE_ID_CSINODE,         /* CSINode spec.drivers[name=driver].nodeID */
    ATT_NODE_ID_NODE_ANNOTATION, /* Node annotation csi.volume.kubernetes.io/nodeid */
    ATT_NODE_ID_VA_ANNOTATION,   /* VA annotation csi.alpha.kubernetes.io/node-id (detach) */
} att_node_id_source;

/*
 * The node id of `driver` on the VA's node: the CSINode's entry, else the
 * Node's annotation (a JSON object driver -> id), else, only when `va` is
 * given (detach), the VA's node-id annotation. Any of the objects may be
 * NULL (not found). 0 with *out malloc'ed; -ENOENT with a message naming
 * what is missing.
 */
int att_node_id(const char *driver, const char *node_name, const json_object *csinode,
                const json_object *node, const json_object *va, char **out,
                att_node_id_source *src);

/* ---- CSI requests ------------------------------------------------------------------ */

/*
 * ControllerPublishVolumeRequest for `pv` on `node_id`: volume_id =
 * spec.csi.volumeHandle, one capability (Block for volumeMode Block, else
 * Mount with fsType or the default and spec.mountOptions), readonly =
 * spec.csi.readOnly only with PUBLISH_READONLY, volume_context =
 * spec.csi.volumeAttributes. Secrets are added separately. -EINVAL with a
 * message for a PV without a CSI source or handle, or bad access modes.
 * Free with att_request_free.
 */
int att_publish_request(const att_config *cfg, const json_object *pv, const char *node_id,
                        Csi__V1__ControllerPublishVolumeRequest **out);
int att_unpublish_request(const json_object *pv, const char *node_id,
                          Csi__V1__ControllerUnpublishVolumeRequest **out);
/* Frees a request built here (publish or unpublish), NULL allowed. */
void att_request_free(ProtobufCMessage *req);

/* spec.csi.controllerPublishSecretRef: 0 with both NULL when there is none;
 * -EINVAL when it lacks a name or namespace. */
int att_secret_ref(const json_object *pv, const char **ns, const char **name);
/* Copies a Secret's `data` (base64 values) into the request's secrets;
 * -EINVAL for a value that is not base64. */
int att_publish_set_secrets(Csi__V1__ControllerPublishVolumeRequest *req,
                            const json_object *secret);
int att_unpublish_set_secrets(Csi__V1__ControllerUnpublishVolumeRequest *req,
                              const json_object *secret);

/* ---- API writes ---------------------------------------------------------------------- */

/*
 * `msg` made fit for status.*Error.message: at most ATT_MESSAGE_MAX bytes,
 * bytes that are not UTF-8 replaced by '?', and a longer text cut at a
 * character boundary with ATT_TRUNCATED_MARKER appended. Caller frees.
 */
char *att_message_fit(const char *msg);

/* Merge patches for the status subresource (caller frees). */
char *att_status_attached(const Csi__V1__ControllerPublishVolumeResponse *resp);
char *att_status_attached_plain(void); /* the trivial handler: attached=true only */
/* Does the VA's status say already what a publish answering `resp` would
 * write (attached, no attachError, the same metadata)? Then a re-sync
 * (reconcile, resync) writes nothing. */
bool att_status_is_current(const json_object *va,
                           const Csi__V1__ControllerPublishVolumeResponse *resp);
/* `code` > 0 (a gRPC code) is stored as errorCode, as upstream does with
 * its default-on gate MutableCSINodeAllocatableCount; 0: none (an error
 * before the driver was asked). */
char *att_status_attach_error(const char *msg, int code, time_t now);
char *att_status_detach_error(const char *msg, time_t now);
char *att_status_detached(void);

/*
 * The JSON patch putting our finalizer and the node-id annotation on a VA
 * in one write, each guarded by a `test` of the state it was built from so
 * a stale copy fails (422) instead of overwriting: 0 with *out NULL when
 * both are in place already; -EINVAL when the VA's metadata is malformed.
 */
int att_patch_va_meta(const json_object *va, const char *finalizer, const char *node_id,
                      char **out);

/* Does the JSON-patch removal of `finalizer` leave no finalizer, so the API
 * server deletes the VA being deleted? */
bool att_va_last_finalizer(const json_object *va, const char *finalizer);

/* For the reconcile: is `node_id` one of the published node ids? */
bool att_published_on(const char *const *nodes, size_t n, const char *node_id);

/* ---- the controller --------------------------------------------------------------------- */

typedef struct att_ctrl att_ctrl;

typedef struct att_ctrl_opts {
    csi_conn *csi;
    kube_client *kube;
    obs_registry *metrics;
    util_duration timeout;     /* per CSI call (--timeout) */
    util_duration retry_start; /* --retry-interval-start */
    util_duration retry_max;   /* --retry-interval-max */
    util_duration resync;      /* --resync */
    util_duration reconcile;   /* --reconcile-sync; 0: off */
    int max_entries;           /* --max-entries */
    int workers;               /* --worker-threads */
    bool trivial;              /* no ControllerPublish: mark VAs attached */
    bool list_published;       /* LIST_VOLUMES + LIST_VOLUMES_PUBLISHED_NODES */
    bool detach_deleted_nodes; /* NOT_FOUND + Node gone -> detached */
    util_duration slow_wait;   /* log items that waited longer; 0: 30 s */
} att_ctrl_opts;

/* Starts informers (waits for their first lists) and workers. */
int att_ctrl_start(const att_ctrl_opts *opts, const att_config *cfg, att_ctrl **out);
void att_ctrl_stop(att_ctrl *c);

#endif
