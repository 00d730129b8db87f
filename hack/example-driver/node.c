/*
 * Node service: stage / publish bookkeeping for this node, with the target
 * directories made and removed for real (mkdir -p / rmdir) and, with
 * --mount, the volume bind-mounted there (data.c), plus NodeGetInfo,
 * NodeGetCapabilities, volume stats and node expansion.
 *
 * Ordering the CO must keep is checked rather than assumed: staging needs
 * a ControllerPublish to this node (when the driver attaches at all), and
 * publishing needs the volume staged at the given path (when it stages).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "obs/obs.h"

/* Finds `key` in a request's map field (any entry type with key/value). */
#define CTX_GET(entries, n, k, out)                                                                \
    do {                                                                                           \
        (out) = NULL;                                                                              \
        for (size_t i_ = 0; i_ < (n); i_++)                                                        \
            if (strcmp((entries)[i_]->key, (k)) == 0) {                                            \
                (out) = (entries)[i_]->value;                                                      \
                break;                                                                             \
            }                                                                                      \
    } while (0)

/*
 * With PUBLISH_UNPUBLISH_VOLUME the node side must come after a successful
 * ControllerPublishVolume to this node, carrying its publish_context.
 * Returns 0 or answers the error itself.
 */
static int check_attached(const drv *d, const drv_volume *v, const char *device_path,
                          csi_reply *reply)
{
    if (!DRV_CTRL_CAP(d, PUBLISH_UNPUBLISH_VOLUME))
        return 0;
    if (!drv_volume_pub(v, d->cfg->node_id)) {
        csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                        "volume %s is not ControllerPublished to node %s", v->id, d->cfg->node_id);
        return -1;
    }
    char *want = drv_device_path(v);
    bool ok = device_path && strcmp(device_path, want) == 0;
    free(want);
    if (!ok) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                        "publish_context must be the one ControllerPublishVolume returned");
        return -1;
    }
    return 0;
}

static const char *check_path(const char *path, const char *what)
{
    if (!path || !*path)
        return what;
    return path[0] == '/' ? NULL : "paths must be absolute";
}

/* ---- mounts (--mount) ---------------------------------------------------------------- */

/* A mount volume's folder at its staging path (a block volume is mounted
 * at its targets only). Nothing without --mount. */
static int mount_staged(const drv *d, const drv_volume *v, const char *staging)
{
    if (!d->cfg->mount || v->access_type != DRV_ACCESS_MOUNT)
        return 0;
    return drv_bind_mount(v->path, staging, false);
}

/* The volume at a target: the staged folder (or the volume's folder when
 * the driver does not stage), a block volume's backing file. */
static int mount_target(const drv *d, const drv_volume *v, const char *target, bool readonly)
{
    if (!d->cfg->mount)
        return 0;
    char *src = NULL;
    int rc = 0;
    if (v->access_type == DRV_ACCESS_MOUNT)
        src = util_strdup(DRV_NODE_CAP(d, STAGE_UNSTAGE_VOLUME) && v->staged_path ? v->staged_path
                                                                                  : v->path);
    else
        rc = drv_block_file(v, &src);
    if (rc == 0)
        rc = drv_bind_mount(src, target, readonly);
    free(src);
    return rc;
}

/* ---- NodeStageVolume / NodeUnstageVolume ------------------------------------------- */

/* The volume a NodeStage or NodePublish names; with --backend-dir as the
 * controller process holds it now (it may have been published since). */
static drv_volume *node_volume(drv *d, drv_model *m, const char *id)
{
    if (d->cfg->backend_dir)
        return drv_store_import(d->store, m, d->cfg->backend_dir, id);
    return drv_model_volume(m, id);
}

static void stage_locked(drv *d, drv_model *m, const Csi__V1__NodeStageVolumeRequest *req,
                         const drv_cap *cap, csi_reply *reply)
{
    drv_volume *v = node_volume(d, m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
        return;
    }
    if (cap->access_type != v->access_type) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume %s is a %s volume", v->id,
                        drv_access_name(v->access_type));
        return;
    }
    const char *dev;
    CTX_GET(req->publish_context, req->n_publish_context, "devicePath", dev);
    if (check_attached(d, v, dev, reply) < 0)
        return;
    Csi__V1__NodeStageVolumeResponse ok = CSI__V1__NODE_STAGE_VOLUME_RESPONSE__INIT;
    if (v->staged_path) {
        if (strcmp(v->staged_path, req->staging_target_path) != 0)
            csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                            "volume %s is already staged at %s; one staging path per volume", v->id,
                            v->staged_path);
        else if (!drv_cap_equal(&v->staged_cap, cap))
            csi_reply_error(reply, CSI_ALREADY_EXISTS,
                            "volume %s is staged at %s with another capability", v->id,
                            v->staged_path);
        else if (mount_staged(d, v, v->staged_path) < 0)
            /* Asked again after the mount went (a node restart): mended. */
            csi_reply_error(reply, CSI_INTERNAL, "%s", util_err_last());
        else
            csi_reply_ok(reply, &ok.base);
        return;
    }
    int r = drvkit_mkdir_p(req->staging_target_path, 0750);
    if (r < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "cannot create %s: %s", req->staging_target_path,
                        strerror(-r));
        return;
    }
    if (mount_staged(d, v, req->staging_target_path) < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "%s", util_err_last());
        return;
    }
    v->staged_path = util_strdup(req->staging_target_path);
    drv_cap_copy(&v->staged_cap, cap);
    drv_store_changed(d->store, v);
    obs_v(2, "staged volume %s at %s", v->id, v->staged_path);
    csi_reply_ok(reply, &ok.base);
}

void drv_node_stage(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__NodeStageVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    const char *why = check_path(req->staging_target_path, "staging_target_path is required");
    if (!why)
        why = drv_cap_check(req->volume_capability, DRV_NODE_CAP(d, SINGLE_NODE_MULTI_WRITER));
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s", why);
        return;
    }
    drv_cap cap;
    drv_cap_from_pb(&cap, req->volume_capability);
    drv_model *m = drv_store_lock(d->store);
    stage_locked(d, m, req, &cap, reply);
    drv_store_unlock(d->store);
    drv_cap_free(&cap);
}

void drv_node_unstage(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__NodeUnstageVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    const char *why = check_path(req->staging_target_path, "staging_target_path is required");
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s", why);
        return;
    }
    Csi__V1__NodeUnstageVolumeResponse ok = CSI__V1__NODE_UNSTAGE_VOLUME_RESPONSE__INIT;
    drv_model *m = drv_store_lock(d->store);
    drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
    } else if (!v->staged_path || strcmp(v->staged_path, req->staging_target_path) != 0) {
        csi_reply_ok(reply, &ok.base); /* not staged there: nothing to undo */
    } else if (v->n_npubs) {
        csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                        "volume %s is still published at %s; NodeUnpublishVolume first", v->id,
                        v->npubs[0].target_path);
    } else if (d->cfg->mount && drv_unmount(v->staged_path) < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "%s", util_err_last());
    } else {
        /* The CO made the staging directory; it stays. */
        obs_v(2, "unstaged volume %s from %s", v->id, v->staged_path);
        free(v->staged_path);
        v->staged_path = NULL;
        drv_cap_free(&v->staged_cap);
        memset(&v->staged_cap, 0, sizeof(v->staged_cap));
        drv_store_changed(d->store, v);
        csi_reply_ok(reply, &ok.base);
    }
    drv_store_unlock(d->store);
}

/* ---- NodePublishVolume / NodeUnpublishVolume ---------------------------------------- */

/* Two workloads on this node at once is beyond these modes (spec table for
 * a second NodePublishVolume with another target path). */
static bool single_writer(int mode)
{
    return mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER ||
           mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER;
}

/* Makes what a workload would see at `path`: a directory for a mount
 * volume, a file standing in for the device of a block volume. */
static int make_target(const char *path, int access_type)
{
    if (access_type == DRV_ACCESS_MOUNT)
        return drvkit_mkdir_p(path, 0750);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0)
        return -errno;
    close(fd);
    return 0;
}

static void publish_locked(drv *d, drv_model *m, const Csi__V1__NodePublishVolumeRequest *req,
                           const drv_cap *cap, csi_reply *reply)
{
    drv_volume *v = node_volume(d, m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
        return;
    }
    if (cap->access_type != v->access_type) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume %s is a %s volume", v->id,
                        drv_access_name(v->access_type));
        return;
    }
    if (DRV_NODE_CAP(d, STAGE_UNSTAGE_VOLUME)) {
        const char *st = req->staging_target_path;
        if (!st || !*st) {
            csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                            "staging_target_path is required: this driver stages volumes");
            return;
        }
        if (!v->staged_path || strcmp(v->staged_path, st) != 0) {
            csi_reply_error(reply, CSI_FAILED_PRECONDITION, "volume %s is not staged at %s", v->id,
                            st);
            return;
        }
    } else {
        const char *dev;
        CTX_GET(req->publish_context, req->n_publish_context, "devicePath", dev);
        if (check_attached(d, v, dev, reply) < 0)
            return;
    }
    Csi__V1__NodePublishVolumeResponse ok = CSI__V1__NODE_PUBLISH_VOLUME_RESPONSE__INIT;
    bool ro = req->readonly;
    const drv_npub *same = drv_volume_npub(v, req->target_path);
    if (same) {
        if (same->readonly != ro || !drv_cap_equal(&same->cap, cap))
            csi_reply_error(reply, CSI_ALREADY_EXISTS,
                            "volume %s is published at %s with another capability or readonly "
                            "flag",
                            v->id, req->target_path);
        else if (mount_target(d, v, req->target_path, ro) < 0)
            csi_reply_error(reply, CSI_INTERNAL, "%s", util_err_last());
        else
            csi_reply_ok(reply, &ok.base);
        return;
    }
    for (size_t i = 0; i < v->n_npubs; i++) {
        if (single_writer(cap->mode) || single_writer(v->npubs[i].cap.mode)) {
            csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                            "volume %s is already published at %s and its access mode allows "
                            "one workload",
                            v->id, v->npubs[i].target_path);
            return;
        }
    }
    int r = make_target(req->target_path, v->access_type);
    if (r < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "cannot create %s: %s", req->target_path,
                        strerror(-r));
        return;
    }
    if (mount_target(d, v, req->target_path, ro) < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "%s", util_err_last());
        return;
    }
    drv_npub *np = realloc(v->npubs, (v->n_npubs + 1) * sizeof(*np));
    if (!np)
        abort();
    v->npubs = np;
    drv_npub *p = &v->npubs[v->n_npubs++];
    p->target_path = util_strdup(req->target_path);
    p->readonly = ro;
    drv_cap_copy(&p->cap, cap);
    drv_store_changed(d->store, v);
    obs_v(2, "published volume %s at %s", v->id, p->target_path);
    csi_reply_ok(reply, &ok.base);
}

void drv_node_publish(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__NodePublishVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    const char *why = check_path(req->target_path, "target_path is required");
    if (!why && req->staging_target_path && *req->staging_target_path)
        why = check_path(req->staging_target_path, "");
    if (!why)
        why = drv_cap_check(req->volume_capability, DRV_NODE_CAP(d, SINGLE_NODE_MULTI_WRITER));
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s", why);
        return;
    }
    drv_cap cap;
    drv_cap_from_pb(&cap, req->volume_capability);
    drv_model *m = drv_store_lock(d->store);
    publish_locked(d, m, req, &cap, reply);
    drv_store_unlock(d->store);
    drv_cap_free(&cap);
}

static void unpublish_locked(drv *d, drv_model *m, const Csi__V1__NodeUnpublishVolumeRequest *req,
                             csi_reply *reply)
{
    drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
        return;
    }
    Csi__V1__NodeUnpublishVolumeResponse ok = CSI__V1__NODE_UNPUBLISH_VOLUME_RESPONSE__INIT;
    for (size_t i = 0; i < v->n_npubs; i++) {
        drv_npub *p = &v->npubs[i];
        if (strcmp(p->target_path, req->target_path) != 0)
            continue;
        if (d->cfg->mount && drv_unmount(p->target_path) < 0) {
            csi_reply_error(reply, CSI_INTERNAL, "%s", util_err_last());
            return;
        }
        /* The spec: the SP deletes what it created at target_path. */
        if (remove(p->target_path) < 0 && errno != ENOENT) {
            csi_reply_error(reply, CSI_INTERNAL, "cannot remove %s: %m", p->target_path);
            return;
        }
        obs_v(2, "unpublished volume %s from %s", v->id, p->target_path);
        free(p->target_path);
        drv_cap_free(&p->cap);
        memmove(p, p + 1, (v->n_npubs - i - 1) * sizeof(*p));
        v->n_npubs--;
        drv_store_changed(d->store, v);
        break;
    }
    csi_reply_ok(reply, &ok.base); /* not published there: nothing to undo */
}

void drv_node_unpublish(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__NodeUnpublishVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    const char *why = check_path(req->target_path, "target_path is required");
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s", why);
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    unpublish_locked(d, m, req, reply);
    drv_store_unlock(d->store);
}

/* ---- stats, expansion, info ----------------------------------------------------------- */

/* Is `path` where `v` is staged or published on this node? */
static bool volume_at(const drv_volume *v, const char *path)
{
    return (v->staged_path && strcmp(v->staged_path, path) == 0) || drv_volume_npub(v, path);
}

void drv_node_get_volume_stats(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__NodeGetVolumeStatsRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    if (!req->volume_path || !*req->volume_path) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_path is required");
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    const drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
    } else if (!volume_at(v, req->volume_path)) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s is not staged or published at %s", v->id,
                        req->volume_path);
    } else {
        /* Nothing is ever written to these volumes: all of it is free. */
        Csi__V1__VolumeUsage u = CSI__V1__VOLUME_USAGE__INIT;
        u.unit = CSI__V1__VOLUME_USAGE__UNIT__BYTES;
        u.total = v->capacity;
        u.available = v->capacity;
        u.used = 0;
        Csi__V1__VolumeUsage *up = &u;
        Csi__V1__VolumeCondition cond = CSI__V1__VOLUME_CONDITION__INIT;
        cond.message = "volume is healthy";
        Csi__V1__NodeGetVolumeStatsResponse r = CSI__V1__NODE_GET_VOLUME_STATS_RESPONSE__INIT;
        r.n_usage = 1;
        r.usage = &up;
        if (DRV_NODE_CAP(d, VOLUME_CONDITION))
            r.volume_condition = &cond;
        csi_reply_ok(reply, &r.base);
    }
    drv_store_unlock(d->store);
}

void drv_node_expand(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__NodeExpandVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    if (!req->volume_path || !*req->volume_path) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_path is required");
        return;
    }
    const Csi__V1__CapacityRange *cr = req->capacity_range;
    if (cr && (cr->required_bytes < 0 || cr->limit_bytes < 0 ||
               (cr->limit_bytes && cr->limit_bytes < cr->required_bytes))) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "capacity_range is invalid");
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    /* With --backend-dir, at the size the controller gave it by now. */
    const drv_volume *v = node_volume(d, m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
    } else if (!volume_at(v, req->volume_path)) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s is not staged or published at %s", v->id,
                        req->volume_path);
    } else if (cr && cr->required_bytes > v->capacity) {
        /* The node can only grow the file system to what the controller
         * made room for. */
        csi_reply_error(reply, CSI_OUT_OF_RANGE,
                        "volume %s has %lld bytes; ControllerExpandVolume first", v->id,
                        (long long)v->capacity);
    } else {
        Csi__V1__NodeExpandVolumeResponse r = CSI__V1__NODE_EXPAND_VOLUME_RESPONSE__INIT;
        r.capacity_bytes = v->capacity;
        csi_reply_ok(reply, &r.base);
    }
    drv_store_unlock(d->store);
}

void drv_node_get_capabilities(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    (void)msg;
    enum { MAX = 64 };
    Csi__V1__NodeServiceCapability caps[MAX];
    Csi__V1__NodeServiceCapability__RPC rpc[MAX];
    Csi__V1__NodeServiceCapability *ptrs[MAX];
    size_t n = 0;
    for (int t = 1; t < MAX; t++) {
        if (!CSI_CAP(d->cfg->node_caps, t))
            continue;
        csi__v1__node_service_capability__rpc__init(&rpc[n]);
        rpc[n].type = t;
        csi__v1__node_service_capability__init(&caps[n]);
        caps[n].type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
        caps[n].rpc = &rpc[n];
        ptrs[n] = &caps[n];
        n++;
    }
    Csi__V1__NodeGetCapabilitiesResponse r = CSI__V1__NODE_GET_CAPABILITIES_RESPONSE__INIT;
    r.n_capabilities = n;
    r.capabilities = ptrs;
    csi_reply_ok(reply, &r.base);
}

void drv_node_get_info(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    (void)msg;
    drv_topo_msg t;
    drv_topo_msg_fill(&t, &d->cfg->topology);
    Csi__V1__NodeGetInfoResponse r = CSI__V1__NODE_GET_INFO_RESPONSE__INIT;
    r.node_id = (char *)d->cfg->node_id;
    r.max_volumes_per_node = d->cfg->max_volumes_per_node;
    /* Topology only with the capability, as the spec demands. */
    if (d->cfg->topology.n && DRV_PLUGIN_CAP(d, VOLUME_ACCESSIBILITY_CONSTRAINTS))
        r.accessible_topology = &t.topo;
    csi_reply_ok(reply, &r.base);
    drv_topo_msg_done(&t);
}
