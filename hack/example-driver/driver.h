/*
 * example-csi-driver: a hostpath-style CSI driver built on common/csi's
 * server helpers. It is the test double of every sidecar test, so it is
 * strict: every answer follows the CSI spec's idempotency rules and error
 * tables, and a sidecar bug cannot hide behind a lenient driver.
 *
 * Modules (one header for all of them):
 *   main.c       flags, start-up, signals
 *   service.c    the one dispatcher every call goes through (counters,
 *                faults, capability gates, persistence before replying),
 *                Identity, and the validation helpers handlers share
 *   controller.c Controller service
 *   node.c       Node service
 *   state.c      the in-memory model, state.json / status.json, group commit
 * Fault injection (flags and <state-dir>/faults.json) and durable files
 * come from common/drvkit.
 */
#ifndef EXAMPLE_DRIVER_H
#define EXAMPLE_DRIVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "csi/csi.h"
#include "drvkit/drvkit.h"

/* ---- methods ----------------------------------------------------------- */

/* Every RPC of the Identity, Controller and Node services, in one list so
 * that counters, faults and capability gates share one index. */
#define DRV_METHODS(X)                                                                             \
    X(GetPluginInfo)                                                                               \
    X(GetPluginCapabilities)                                                                       \
    X(Probe)                                                                                       \
    X(CreateVolume)                                                                                \
    X(DeleteVolume)                                                                                \
    X(ControllerPublishVolume)                                                                     \
    X(ControllerUnpublishVolume)                                                                   \
    X(ValidateVolumeCapabilities)                                                                  \
    X(ListVolumes)                                                                                 \
    X(GetCapacity)                                                                                 \
    X(ControllerGetCapabilities)                                                                   \
    X(CreateSnapshot)                                                                              \
    X(DeleteSnapshot)                                                                              \
    X(ListSnapshots)                                                                               \
    X(GetSnapshot)                                                                                 \
    X(ControllerExpandVolume)                                                                      \
    X(ControllerGetVolume)                                                                         \
    X(ControllerModifyVolume)                                                                      \
    X(NodeStageVolume)                                                                             \
    X(NodeUnstageVolume)                                                                           \
    X(NodePublishVolume)                                                                           \
    X(NodeUnpublishVolume)                                                                         \
    X(NodeGetVolumeStats)                                                                          \
    X(NodeExpandVolume)                                                                            \
    X(NodeGetCapabilities)                                                                         \
    X(NodeGetInfo)

typedef enum {
#define DRV_M_ENUM(name) DRV_M_##name,
    DRV_METHODS(DRV_M_ENUM)
#undef DRV_M_ENUM
        DRV_N_METHODS
} drv_method;

/* "CreateVolume"...; the short name, as in counters and fault specs. */
const char *drv_method_name(drv_method m);
/* -1 when `name` is not one of DRV_METHODS. */
int drv_method_from_name(const char *name);

/* ---- small value types --------------------------------------------------- */

typedef struct drv_kv {
    char *key;
    char *value;
} drv_kv;

/* A string map kept as a list (they are tiny: parameters, segments). */
typedef struct drv_kvs {
    drv_kv *items;
    size_t n;
} drv_kvs;

void drv_kvs_add(drv_kvs *k, const char *key, const char *value);
const char *drv_kvs_get(const drv_kvs *k, const char *key);
/* Same keys with the same values, in any order. */
bool drv_kvs_equal(const drv_kvs *a, const drv_kvs *b);
void drv_kvs_copy(drv_kvs *dst, const drv_kvs *src);
void drv_kvs_free(drv_kvs *k);
/* Sets key to value, replacing an entry of the same key. */
void drv_kvs_set(drv_kvs *k, const char *key, const char *value);

enum { DRV_ACCESS_NONE = 0, DRV_ACCESS_BLOCK = 1, DRV_ACCESS_MOUNT = 2 };

/* A VolumeCapability as stored. Mount flags may be sensitive, so only a
 * hash of them is kept (enough to tell a compatible republish). */
typedef struct drv_cap {
    int access_type; /* DRV_ACCESS_* */
    int mode;        /* Csi__V1__VolumeCapability__AccessMode__Mode */
    char *fs_type;   /* "" when unset; never NULL once filled */
    uint64_t flags_hash;
} drv_cap;

void drv_cap_copy(drv_cap *dst, const drv_cap *src);
void drv_cap_free(drv_cap *c);
bool drv_cap_equal(const drv_cap *a, const drv_cap *b);

/* ---- the model -------------------------------------------------------------- */

enum { DRV_SRC_NONE = 0, DRV_SRC_SNAPSHOT = 1, DRV_SRC_VOLUME = 2 };

/* ControllerPublishVolume bookkeeping: one entry per node. */
typedef struct drv_pub {
    char *node_id;
    bool readonly;
    drv_cap cap;
} drv_pub;

/* NodePublishVolume bookkeeping (this node): one entry per target path. */
typedef struct drv_npub {
    char *target_path;
    bool readonly;
    drv_cap cap;
} drv_npub;

typedef struct drv_volume {
    char *id;
    char *name;
    char *path; /* <state-dir>/volumes/<id>, the "storage" */
    int64_t capacity;
    int access_type; /* DRV_ACCESS_* it was created for */
    int src_type;    /* DRV_SRC_* */
    char *src_id;    /* NULL when src_type is DRV_SRC_NONE */
    drv_kvs params;
    drv_kvs mutable_params; /* CreateVolume's, then ControllerModifyVolume's */
    drv_kvs topology;       /* n == 0: no accessible_topology */
    drv_pub *pubs;
    size_t n_pubs;
    char *staged_path; /* NULL: not staged on this node */
    drv_cap staged_cap;
    drv_npub *npubs;
    size_t n_npubs;
    char *json; /* state.c's cached JSON of this volume; NULL: stale */
    size_t json_len;
} drv_volume;

typedef struct drv_snapshot {
    char *id;
    char *name;
    char *source_volume_id;
    int64_t size;
    int64_t created_ns; /* CLOCK_REALTIME */
} drv_snapshot;

/* Volumes and snapshots in creation order (list pagination relies on it). */
typedef struct drv_model {
    drv_volume **vols;
    size_t n_vols, cap_vols;
    drv_snapshot **snaps;
    size_t n_snaps, cap_snaps;
    int64_t used; /* sum of volume capacities */
} drv_model;

drv_volume *drv_model_volume(const drv_model *m, const char *id);
drv_volume *drv_model_volume_by_name(const drv_model *m, const char *name);
drv_snapshot *drv_model_snapshot(const drv_model *m, const char *id);
drv_snapshot *drv_model_snapshot_by_name(const drv_model *m, const char *name);
/* Takes ownership; accounts the capacity. */
void drv_model_add_volume(drv_model *m, drv_volume *v);
void drv_model_add_snapshot(drv_model *m, drv_snapshot *s);
/* Unlinks and frees. */
void drv_model_remove_volume(drv_model *m, drv_volume *v);
void drv_model_remove_snapshot(drv_model *m, drv_snapshot *s);
/* A fresh random id "<prefix>-<16 hex>" used by no volume or snapshot. */
char *drv_model_new_id(const drv_model *m, const char *prefix);
void drv_volume_free(drv_volume *v);
void drv_snapshot_free(drv_snapshot *s);
/* The controller publication of `v` on `node_id`, or NULL. */
drv_pub *drv_volume_pub(const drv_volume *v, const char *node_id);
drv_npub *drv_volume_npub(const drv_volume *v, const char *target_path);

/* ---- the store: model + persistence ------------------------------------------ */

/*
 * One mutex guards the model. Every call ends with drv_store_commit(), which
 * returns once state.json holds every mutation made so far (temp file,
 * fsync, rename) and status.json every call counted so far. Concurrent
 * callers share one write (group commit), so a reply is never sent for a
 * state that a crash could still lose.
 */
typedef struct drv_store drv_store;

/* Loads <state_dir>/state.json when present (a damaged file is an error:
 * silently starting empty would lose volumes), creates volumes/, and writes
 * a first status.json. `sync` false skips fsync (benchmarks only). */
int drv_store_new(const char *state_dir, bool sync, drv_store **out);
void drv_store_free(drv_store *s);
drv_model *drv_store_lock(drv_store *s);
void drv_store_unlock(drv_store *s);
/* Marks the model changed; call with the lock held after every mutation.
 * `v` is the volume whose fields changed (its cached JSON is dropped);
 * NULL when only volumes or snapshots were added or removed. */
void drv_store_changed(drv_store *s, drv_volume *v);
/*
 * With the store locked: the volume `id` brought up to date with the driver
 * process whose state directory is `backend_dir` (its state.json), so that a
 * node process stages and publishes what the controller process created and
 * published, as the node of a networked backend would. A volume the backend
 * holds is added when missing; its storage path and controller publications
 * become the backend's. Returns this model's volume (NULL: neither holds it).
 */
drv_volume *drv_store_import(drv_store *s, drv_model *m, const char *backend_dir, const char *id);
void drv_store_count_call(drv_store *s, drv_method m);
/* Waits for durability as described above. A state that cannot be written
 * ends the process (fail-stop keeps what callers were told true). */
void drv_store_commit(drv_store *s);
const char *drv_store_dir(const drv_store *s);

/* ---- faults ---------------------------------------------------------------- */
/* Fault injection is common/drvkit's (shared with the COSI example driver),
 * over this driver's method names. */

/* The short names of DRV_METHODS, indexed by drv_method. */
const char *const *drv_method_names(void);

/* ---- configuration and context -------------------------------------------------- */

typedef struct drv_config {
    const char *endpoint;
    const char *driver_name;
    const char *node_id;
    const char *state_dir;
    int64_t capacity;
    drv_kvs topology; /* this node's segments */
    int64_t max_volumes_per_node;
    char **known_nodes; /* node ids besides node_id */
    size_t n_known_nodes;
    uint64_t controller_caps; /* bit per ControllerServiceCapability.RPC.Type */
    uint64_t plugin_caps;     /* bit per PluginCapability.Service.Type */
    int expansion;            /* PluginCapability.VolumeExpansion.Type, 0: none */
    uint64_t node_caps;       /* bit per NodeServiceCapability.RPC.Type */
    bool sync;
    bool unpublish_missing_ok;
    const char *publish_secret; /* "key=value" or NULL */
    const char *backend_dir;    /* --backend-dir; NULL: none */
    bool mount;                 /* --mount: NodeStage/NodePublish bind-mount for real */
} drv_config;

typedef struct drv {
    const drv_config *cfg;
    drv_store *store;
    drvkit_faults *faults;
    atomic_bool stopping; /* injected delays end early when set */
} drv;

/* ---- data (data.c) ------------------------------------------------------------ */

/* A block volume's data, in its folder. */
#define DRV_BLOCK_FILE "block"

/* Copies the folder src (files with their holes, folders, symlinks) to
 * dst, replacing it once whole. 0 or a negative errno (util_err_last). */
int drv_copy_tree(const char *src, const char *dst);
/* rm -rf; a missing path is fine. */
int drv_remove_tree(const char *path);
/* Is something mounted at path in this process's mount namespace? */
int drv_mounted_at(const char *path, bool *mounted);
/* Bind-mounts src at dst (read-only when asked) unless something is
 * mounted there already. The error names the missing privilege. */
int drv_bind_mount(const char *src, const char *dst, bool readonly);
/* Unmounts whatever is mounted at path; nothing mounted is fine. */
int drv_unmount(const char *path);
/* <state-dir>/snapshots/<id>: the snapshot's copy of its volume's data. */
char *drv_snapshot_dir(const drv *d, const char *id);
/* The backing file of a block volume, made or grown to its size. */
int drv_block_file(const drv_volume *v, char **out);

#define DRV_CTRL_CAP(d, t)                                                                         \
    CSI_CAP((d)->cfg->controller_caps, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__##t)
#define DRV_NODE_CAP(d, t)                                                                         \
    CSI_CAP((d)->cfg->node_caps, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__##t)
#define DRV_PLUGIN_CAP(d, t)                                                                       \
    CSI_CAP((d)->cfg->plugin_caps, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__##t)

/* The csi_handler_fn of every route: `ud` is the drv. */
void drv_dispatch(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply);

/* ---- handlers (controller.c, node.c) ------------------------------------------ */

/* Handlers run with nothing locked; they take the store lock themselves,
 * answer with csi_reply_ok/error (which packs at once) and may unlock
 * right after. The dispatcher commits before the reply leaves. */
typedef void (*drv_handler)(drv *d, const ProtobufCMessage *req, csi_reply *reply);

void drv_create_volume(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_delete_volume(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_controller_publish(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_controller_unpublish(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_validate_volume_capabilities(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_list_volumes(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_get_capacity(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_controller_get_capabilities(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_create_snapshot(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_delete_snapshot(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_list_snapshots(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_controller_expand(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_controller_get_volume(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_controller_modify(drv *d, const ProtobufCMessage *req, csi_reply *reply);

void drv_node_stage(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_node_unstage(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_node_publish(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_node_unpublish(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_node_get_volume_stats(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_node_expand(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_node_get_capabilities(drv *d, const ProtobufCMessage *req, csi_reply *reply);
void drv_node_get_info(drv *d, const ProtobufCMessage *req, csi_reply *reply);

/* ---- shared helpers (service.c) ------------------------------------------------ */

/*
 * Checks one VolumeCapability of a request: access type and a known access
 * mode are required; the SINGLE_NODE_{SINGLE,MULTI}_WRITER modes only when
 * `multi_writer_ok`. Returns NULL or a static reason for INVALID_ARGUMENT.
 */
const char *drv_cap_check(const Csi__V1__VolumeCapability *c, bool multi_writer_ok);
/* Fills `out` (caller frees with drv_cap_free) from a checked capability. */
void drv_cap_from_pb(drv_cap *out, const Csi__V1__VolumeCapability *c);
/* Only one node may use the volume at a time. */
bool drv_mode_single_node(int mode);
const char *drv_mode_name(int mode);
int drv_mode_from_name(const char *name); /* 0 when unknown */
const char *drv_access_name(int access_type);
int drv_access_from_name(const char *name);
/* Names the CSI spec bans (control characters) or over 128 bytes. */
const char *drv_name_check(const char *name);
/* Is `node_id` this node or one of --known-nodes? */
bool drv_node_known(const drv *d, const char *node_id);
/* Parses "key=value,key=value" (empty: none). -EINVAL with util_err. */
int drv_kvs_parse(const char *text, drv_kvs *out);
/* A Topology message over a drv_kvs (pointers into it). */
typedef struct drv_topo_msg {
    Csi__V1__Topology topo;
    Csi__V1__Topology__SegmentsEntry *seg;
    Csi__V1__Topology__SegmentsEntry **segp;
} drv_topo_msg;
void drv_topo_msg_fill(drv_topo_msg *t, const drv_kvs *k);
void drv_topo_msg_done(drv_topo_msg *t);
void drv_kvs_from_topology(drv_kvs *out, const Csi__V1__Topology *t);
/* The publish_context this driver hands out for a volume. */
char *drv_device_path(const drv_volume *v);

#endif
