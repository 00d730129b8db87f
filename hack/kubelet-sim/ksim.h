/*
 * kubelet-sim: the parts of a kubelet that storage depends on, for machines
 * and tests without one. One process plays the kubelet of one node:
 *
 *   plugins.c  plugin registration: the plugins_registry directory, GetInfo,
 *              NodeGetInfo, the Node annotation and CSINode entry; which
 *              driver answers at which endpoint
 *   node.c     the Node: registration at start, status (conditions,
 *              capacity, volumesInUse) through nodes/status, the Lease
 *              heartbeat in kube-node-lease
 *   volumes.c  the volume manager: the pods bound to this node, their CSI
 *              volumes staged and published, the pods made Running, and
 *              torn down again when they terminate or vanish
 *   records.c  what the volume manager has done, as records on disk
 *              (vol_data.json beside each staging and target path) read
 *              back at start, so a restart forgets nothing
 *   plan.c     the pure rules all of these follow (names, paths, the volumes
 *              a pod needs, the next step for a volume, patches, requests),
 *              unit-tested in tests/unit/test_kubelet_sim_plan.c
 *
 * Everything public here has the ksim_ prefix: the folder's library is
 * linked into every test binary beside the other programs' libraries.
 */
#ifndef KUBELET_SIM_KSIM_H
#define KUBELET_SIM_KSIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <json-c/json.h>

#include "csi/csi.h"
#include "kube/kube.h"

#define KSIM_CMAD_ANNOTATION "volumes.kubernetes.io/controller-managed-attach-detach"
#define KSIM_LEASE_NAMESPACE "kube-node-lease"
#define KSIM_KUBELET_VERSION "v1.20.0-kubelet-sim"
#define KSIM_NOT_CSI         1 /* a pod volume that is none of kubelet-sim's business */

/* ---- small maps (sorted by key) ------------------------------------------------------ */

typedef struct ksim_kv {
    char *key;
    char *value;
} ksim_kv;

typedef struct ksim_map {
    ksim_kv *kv;
    size_t n;
} ksim_map;

/* Sets (replaces) key; the map stays sorted. */
void ksim_map_set(ksim_map *m, const char *key, const char *value);
const char *ksim_map_get(const ksim_map *m, const char *key);
void ksim_map_clear(ksim_map *m);
/* Adds every member of the JSON object `obj` (NULL: none); a value that is
 * no string is -EINVAL naming `what`. */
int ksim_map_add_json(ksim_map *m, const json_object *obj, const char *what);
/* The data of a Secret, base64-decoded; -EINVAL naming the key (never the
 * value) when an entry is not base64 text. */
int ksim_secret_data(const json_object *secret, ksim_map *out);

/* ---- names and paths ----------------------------------------------------------------- */

void ksim_sha256_hex(const char *s, char out[65]);
/* "kubernetes.io/csi/<driver>^<handle>": the kubelet's unique volume name,
 * the entry of Node status.volumesInUse. */
char *ksim_unique_name(const char *driver, const char *handle);
/* "csi-" + hex sha256 of handle + driver + node: a VolumeAttachment's name. */
char *ksim_va_name(const char *handle, const char *driver, const char *node);
/* "csi-" + hex sha256 of pod uid + volume name: an inline volume's handle. */
char *ksim_ephemeral_handle(const char *pod_uid, const char *vol_name);
/* A name usable as one path segment: not empty, no '/', not "." or "..". */
bool ksim_safe_segment(const char *s);

/* ---- the volumes of a pod ------------------------------------------------------------ */

typedef enum ksim_vol_kind { KSIM_VOL_PVC, KSIM_VOL_INLINE } ksim_vol_kind;

/* A pod volume that may be a CSI volume: a claim or an inline csi source. */
typedef struct ksim_podvol {
    char *name;
    ksim_vol_kind kind;
    char *claim;      /* KSIM_VOL_PVC */
    bool readonly;    /* the pod volume's readOnly */
    json_object *csi; /* KSIM_VOL_INLINE: the csi source (a reference) */
} ksim_podvol;

/* The claim and csi volumes of spec.volumes, in order; other kinds are
 * left out. -EINVAL (naming the volume) for one without a name or claim. */
int ksim_pod_volumes(const json_object *pod, ksim_podvol **out, size_t *n);
void ksim_podvols_free(ksim_podvol *v, size_t n);

/* A CSI volume of a pod, as the kubelet's CSI plugin reads it. */
typedef struct ksim_vol {
    char *name;      /* the pod's volume name */
    char *spec_name; /* the PV name, or the volume name of an inline volume */
    ksim_vol_kind kind;
    char *driver;
    char *handle;
    char *unique; /* ksim_unique_name */
    bool block;
    char *fs_type; /* NULL: none given */
    char **mount_flags;
    size_t n_mount_flags;
    char *access_mode; /* the PV's first access mode; ReadWriteOnce for inline */
    bool readonly;
    ksim_map attrs; /* volumeAttributes */
    char *stage_secret_ns, *stage_secret_name;
    char *pub_secret_ns, *pub_secret_name;
    /* PVC volumes: the claim (in the pod's namespace), the PV's
     * nodeExpandSecretRef, and whether the claim asked this node to grow
     * the volume when it was read (ksim_resize_plan; acted on after a
     * fresh read) */
    char *claim;
    char *expand_secret_ns, *expand_secret_name;
    bool resize;
} ksim_vol;

void ksim_vol_clear(ksim_vol *v);
/*
 * The volume behind a claim: 0 with *out, KSIM_NOT_CSI when the PV has no
 * csi source, -EAGAIN (message says what to wait for) while the claim is
 * not bound to `pv` or `pv` is NULL, -EINVAL when the PV is malformed or
 * bound to another claim.
 */
int ksim_vol_from_claim(const ksim_podvol *pvol, const json_object *pvc, const json_object *pv,
                        ksim_vol *out);
/* An inline csi volume of `pod`: its handle is ksim_ephemeral_handle. */
int ksim_vol_inline(const json_object *pod, const ksim_podvol *pvol, ksim_vol *out);

/* What a CSIDriver object (NULL: none) says, with the API's defaults. */
typedef struct ksim_driver_info {
    bool attach_required;   /* attachRequired, default true */
    bool pod_info_on_mount; /* podInfoOnMount, default false */
    bool persistent;        /* volumeLifecycleModes has Persistent (default) */
    bool ephemeral;         /* ... has Ephemeral */
} ksim_driver_info;
void ksim_driver_info_of(const json_object *csidriver, ksim_driver_info *out);

/* staging_target_path: <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount,
 * for a block volume <root>/plugins/kubernetes.io/csi/volumeDevices/staging/<pv>.
 * -EINVAL when a segment is unsafe. */
int ksim_staging_path(const char *root, const ksim_vol *v, char **out);
/* target_path: <root>/pods/<uid>/volumes/kubernetes.io~csi/<spec name>/mount,
 * for a block volume <root>/plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid>. */
int ksim_target_path(const char *root, const char *pod_uid, const ksim_vol *v, char **out);
/* Where the records live: <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>
 * and <root>/pods/<uid>/volumes/kubernetes.io~csi/<spec name>. */
int ksim_stage_dir(const char *root, const char *driver, const char *handle, char **out);
int ksim_pub_dir(const char *root, const char *pod_uid, const char *spec_name, char **out);

/* The kubelet's mapping of an access mode to CSI (single-node-multi-writer
 * when the driver's node service has SINGLE_NODE_MULTI_WRITER). */
int ksim_access_mode(const char *mode, bool snmw, Csi__V1__VolumeCapability__AccessMode__Mode *out);
/* NodePublish's volume_context: the volume attributes, plus the pod's
 * identity when the driver wants podInfoOnMount. */
void ksim_publish_volume_context(const ksim_vol *v, const json_object *pod,
                                 const ksim_driver_info *di, ksim_map *out);

/* The requests (free with ksim_request_free); NULL maps send none. */
int ksim_stage_request(const ksim_vol *v, const char *staging, const ksim_map *pub_ctx,
                       const ksim_map *secrets, bool snmw, Csi__V1__NodeStageVolumeRequest **out);
int ksim_publish_request(const ksim_vol *v, const char *staging, const char *target,
                         const ksim_map *pub_ctx, const ksim_map *secrets, const ksim_map *vol_ctx,
                         bool snmw, Csi__V1__NodePublishVolumeRequest **out);
/* NodeExpandVolumeRequest as the kubelet's CSI plugin sends it: volume_path
 * (the target path), staging_target_path when staged (NULL: none),
 * capacity_range.required_bytes = bytes, the volume's capability. */
int ksim_expand_request(const ksim_vol *v, const char *volume_path, const char *staging,
                        int64_t bytes, const ksim_map *secrets, bool snmw,
                        Csi__V1__NodeExpandVolumeRequest **out);
void ksim_request_free(void *req);

/* ---- the next step for one volume ---------------------------------------------------- */

typedef struct ksim_facts {
    bool teardown;          /* the pod terminates or is gone */
    bool driver_registered; /* the driver is registered on this node */
    bool attach_required;
    bool in_use_reported; /* the unique name is in Node status.volumesInUse */
    bool attached;        /* its VolumeAttachment says attached */
    bool stage_cap;       /* the driver has STAGE_UNSTAGE_VOLUME */
    bool staged;          /* NodeStage succeeded (and was not undone) */
    bool published;       /* NodePublish for this pod succeeded */
    bool has_pub_record;  /* a publication for this pod is recorded (maybe half done) */
    bool has_stage_record;
    bool other_users; /* another pod on this node has the volume published or recorded */
    bool resize;      /* the claim asks this node to grow the volume (ksim_resize_plan) */
    bool expand_cap;  /* the driver has EXPAND_VOLUME in its node service */
} ksim_facts;

typedef enum ksim_step {
    KSIM_WAIT_DRIVER,
    KSIM_REPORT_IN_USE,
    KSIM_WAIT_ATTACH,
    KSIM_STAGE,
    KSIM_PUBLISH,
    KSIM_EXPAND, /* published, and the claim waits for NodeExpandVolume */
    KSIM_READY,
    KSIM_UNPUBLISH,
    KSIM_UNSTAGE,
    KSIM_GONE,
} ksim_step;

ksim_step ksim_next_step(const ksim_facts *f);
const char *ksim_step_name(ksim_step s);

/* ---- node expansion (plan_objects.c) ------------------------------------------------- */

#define KSIM_COND_FS_RESIZE_PENDING  "FileSystemResizePending"
#define KSIM_COND_NODE_RESIZE_ERROR  "NodeResizeError"
#define KSIM_STATUS_NODE_PENDING     "NodeResizePending"
#define KSIM_STATUS_NODE_IN_PROGRESS "NodeResizeInProgress"
#define KSIM_STATUS_NODE_INFEASIBLE  "NodeResizeInfeasible"

typedef enum ksim_resize_step {
    KSIM_RESIZE_NONE,   /* nothing for the node to grow */
    KSIM_RESIZE_MARK,   /* NodeResizePending: mark NodeResizeInProgress, then expand */
    KSIM_RESIZE_EXPAND, /* NodeExpandVolume, then the claim's resize finished */
} ksim_resize_step;

typedef struct ksim_resize {
    ksim_resize_step step;
    const char *new_size; /* the PV's spec.capacity.storage (borrowed) */
    int64_t new_bytes;
    /* The claim carries allocatedResources or allocatedResourceStatuses:
     * a resizer with RecoverVolumeExpansionFailure, whose statuses rule. */
    bool recover;
} ksim_resize;

/*
 * Does the node grow the volume of a mounted claim (the kubelet's node
 * expander)? Only when the PV's spec.capacity is above the claim's
 * status.capacity and the volume is not read-only; then, with the
 * recovery statuses, when allocatedResourceStatuses.storage is
 * NodeResizePending (MARK) or NodeResizeInProgress (EXPAND), and without
 * them (a 1.20 API server drops them) when the FileSystemResizePending
 * condition is True (EXPAND).
 */
void ksim_resize_plan(const json_object *pvc, const json_object *pv, bool readonly,
                      ksim_resize *out);
/* MarkNodeExpansionInProgress: allocatedResourceStatuses.storage =
 * NodeResizeInProgress. Merge patches of claims/status guarded by the
 * claim's resourceVersion. */
char *ksim_resize_in_progress_patch(const json_object *pvc);
/* MarkFSResizeFinished: status.capacity.storage = size, every resize
 * condition dropped, the storage entry of allocatedResourceStatuses
 * removed (the map with it when it was the only one). Guarded. */
char *ksim_resize_finished_patch(const json_object *pvc, const char *size);
/* After NodeExpandVolume failed with gRPC `code` on the recovery path:
 * NULL when the failure is not final (the driver may still be at it);
 * else a NodeResizeError condition "failed to expand pvc with <err>" and,
 * for INVALID_ARGUMENT, OUT_OF_RANGE and NOT_FOUND, NodeResizeInfeasible.
 * Not guarded, as the kubelet's. */
char *ksim_resize_failed_patch(const json_object *pvc, int code, const char *err, time_t now);

/* ---- pods ---------------------------------------------------------------------------- */

typedef enum ksim_pod_action {
    KSIM_POD_SETUP,    /* its volumes are set up; Running once they are */
    KSIM_POD_TEARDOWN, /* terminal phase: volumes torn down, the pod stays */
    KSIM_POD_FINISH,   /* deletionTimestamp: volumes torn down, then the pod deleted */
} ksim_pod_action;

ksim_pod_action ksim_pod_action_of(const json_object *pod);
/* The strategic merge patch of pods/status that makes `pod` Running and
 * Ready (metadata.uid in it: it fails on a pod recreated under the same
 * name); NULL when it already is. */
char *ksim_pod_running_patch(const json_object *pod, time_t now);
/* DeleteOptions: grace period 0, precondition on the uid. */
char *ksim_pod_delete_options(const char *uid);

/* ---- the Node and its Lease ---------------------------------------------------------- */

typedef struct ksim_node_info {
    const char *name;
    int64_t cpus;
    int64_t memory_bytes;
    int64_t ephemeral_bytes; /* 0: not reported */
    int64_t max_pods;
    const char *os;
    const char *arch;
} ksim_node_info;

/* The Node kubelet-sim registers: hostname label, controller-managed
 * attach-detach annotation. */
json_object *ksim_node_object(const char *name);
/* The merge patch that sets the annotation on `node`; NULL when set. */
char *ksim_node_cmad_patch(const json_object *node);
/*
 * The strategic merge patch of nodes/status: the four conditions the
 * kubelet posts (Ready True, the pressures False), each keeping the
 * transition time `node` (as read, may be NULL) has when its status is
 * unchanged; capacity, allocatable, the hostname address, nodeInfo, and
 * volumesInUse (sorted; null when empty).
 */
char *ksim_node_status_patch(const ksim_node_info *ni, const json_object *node, char *const *in_use,
                             size_t n_in_use, time_t now);
/* The Lease of a node in kube-node-lease, owned by the Node when its uid
 * is known. */
json_object *ksim_lease_object(const char *node, const char *node_uid, int duration_s,
                               const struct timespec *now);
/* The merge patch that renews `lease`: holder, duration, renewTime, and
 * the ownerReference when it lacks one and node_uid is known. */
char *ksim_lease_renew_patch(const json_object *lease, const char *node, const char *node_uid,
                             int duration_s, const struct timespec *now);

void ksim_format_time(time_t t, char out[32]);                       /* RFC 3339, seconds */
void ksim_format_micro_time(const struct timespec *t, char out[40]); /* MicroTime */

/* Sorts strings and drops repeats (freeing them). */
void ksim_strv_sort_unique(char **v, size_t *n);
void ksim_strv_free(char **v, size_t n);

/* ---- plugin registration rules ------------------------------------------------------- */

#define KSIM_VERSION_PARTS 3
/* "1.0.0", "v1.2", "1.3.0-rc1": 0 and the parts, or -1. */
int ksim_parse_version(const char *s, long out[KSIM_VERSION_PARTS]);
int ksim_version_cmp(const long a[KSIM_VERSION_PARTS], const long b[KSIM_VERSION_PARTS]);
/* The highest 1.x of the list (2.x and later ignored, as the kubelet);
 * -EINVAL with the kubelet's message otherwise. */
int ksim_highest_version(char *const *versions, size_t n, long out[KSIM_VERSION_PARTS]);

/* ---- records (records.c)
 * -------------------------------------------------------------------------- */

/* A publication: a volume NodePublished (or being published) for a pod. */
typedef struct ksim_pub {
    char *pod_uid, *pod_ns, *pod_name;
    char *vol_name;  /* the pod's volume name */
    char *spec_name; /* PV or inline volume name */
    char *driver, *handle, *unique;
    char *target;
    char *staging; /* NULL: published without staging */
    bool attach;   /* the volume needed attaching: it counts in volumesInUse */
    bool done;     /* NodePublish answered OK in this process's life */
    /* NodeUnpublish answered OK; the record stays until the volume is
     * unstaged too, so a crash in between still finds it */
    bool unpublished;
    struct ksim_pub *next;
} ksim_pub;

/* A volume NodeStaged (or being staged) on this node. */
typedef struct ksim_stage {
    char *driver, *handle, *unique, *spec_name;
    char *staging;
    bool attach;
    bool done;
    struct ksim_stage *next;
} ksim_stage;

void ksim_pub_free(ksim_pub *p);
void ksim_stage_free(ksim_stage *s);
/* The record texts (vol_data.json) and back; from_json is -EINVAL for a
 * record missing a field it needs. */
char *ksim_pub_to_json(const ksim_pub *p, const char *node);
char *ksim_stage_to_json(const ksim_stage *s, const char *node);
int ksim_pub_from_json(const json_object *o, ksim_pub **out);
int ksim_stage_from_json(const json_object *o, ksim_stage **out);

/* Writes a record (temp file + rename) into its directory, made as needed;
 * removes it and the directories that become empty. */
int ksim_record_put_pub(const char *root, const char *node, const ksim_pub *p);
int ksim_record_put_stage(const char *root, const char *node, const ksim_stage *s);
void ksim_record_drop_pub(const char *root, const ksim_pub *p);
void ksim_record_drop_stage(const char *root, const ksim_stage *s);
/* Every record of `node` under root, as the lists (done false: the driver
 * is asked again). */
int ksim_records_load(const char *root, const char *node, ksim_pub **pubs, ksim_stage **stages);
int ksim_mkdir_p(const char *path, mode_t mode);

/* ---- the modules
 * ------------------------------------------------------------------------------------ */

typedef struct ksim_plugins ksim_plugins;
typedef struct ksim_node ksim_node;
typedef struct ksim_volumes ksim_volumes;

/* plugins.c */
int ksim_plugins_new(kube_client *kube, const char *node, const char *dir, ksim_plugins **out);
/* Called after every registration and deregistration (from a worker). */
void ksim_plugins_on_change(ksim_plugins *p, void (*fn)(void *ud), void *ud);
/* Starts the workers, the inotify watch and the first scan. */
int ksim_plugins_start(ksim_plugins *p);
/* The inotify descriptor for the caller's poll loop, and its handler. */
int ksim_plugins_fd(const ksim_plugins *p);
void ksim_plugins_readable(ksim_plugins *p);
/* The endpoint a registered driver answers at (malloc'ed); -ENOENT. */
int ksim_plugins_endpoint(ksim_plugins *p, const char *driver, char **endpoint);
/* Stops the workers (no more registrations, no more calls of on_change);
 * the registered drivers stay known until ksim_plugins_free. */
void ksim_plugins_stop(ksim_plugins *p);
void ksim_plugins_free(ksim_plugins *p);

/* node.c */
typedef struct ksim_node_opts {
    ksim_node_info info;
    bool register_node;
    int lease_duration_s;
    util_duration report_every; /* the Ready heartbeat */
} ksim_node_opts;
int ksim_node_new(kube_client *kube, const ksim_node_opts *o, ksim_node **out);
/* The source of volumesInUse: fills a sorted list the caller frees. */
void ksim_node_in_use_source(ksim_node *nd, void (*fn)(void *ud, char ***v, size_t *n), void *ud);
/* Creates the Node and CSINode when missing, sets the annotation. */
int ksim_node_register(ksim_node *nd);
/* The heartbeat thread: status now and every report_every, the Lease
 * every lease_duration / 4. */
int ksim_node_start(ksim_node *nd);
/* Writes the status when the in-use set differs from the one last
 * written: 0 once the API holds the current set. */
int ksim_node_sync_in_use(ksim_node *nd);
/* Stops the heartbeat thread; ksim_node_sync_in_use still works. */
void ksim_node_stop(ksim_node *nd);
void ksim_node_free(ksim_node *nd);

/* volumes.c */
typedef struct ksim_volumes_opts {
    const char *node;
    const char *root;
    int workers;
    /* Every pod is looked at again this often (the kubelet's
     * --sync-frequency): how a mounted claim's resize is noticed. 0: never. */
    util_duration sync_frequency;
} ksim_volumes_opts;
/* Reads the records under root (the actual state a restart left). */
int ksim_volumes_new(kube_client *kube, ksim_plugins *plugins, ksim_node *nd,
                     const ksim_volumes_opts *o, ksim_volumes **out);
/* ksim_node_in_use_source's callback. */
void ksim_volumes_in_use(void *ud, char ***v, size_t *n);
/* Every pod is looked at again (a driver came or went). */
void ksim_volumes_kick(void *ud);
int ksim_volumes_start(ksim_volumes *vm);
void ksim_volumes_free(ksim_volumes *vm);

#endif
