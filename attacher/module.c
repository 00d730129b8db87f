/*
 * csi-attacher as a controller module: flags with external-attacher's
 * names and defaults, the capabilities (the trivial handler when the driver
 * has no ControllerPublish), then the controller (controller.c) while this
 * replica leads.
 */
#include <errno.h>
#include <stdlib.h>

#include "attacher.h"
#include "sidecar/sidecar.h"

typedef struct att_module_state {
    sidecar_flags *common;
    util_duration resync, timeout, retry_start, retry_max, reconcile_sync;
    int worker_threads, max_entries, max_grpc_log_length;
    const char *default_fstype;
    const char *feature_gates;
    bool detach_deleted_nodes;
    bool release_on_exit;
    att_ctrl_opts opts;
    att_config cfg;
    att_ctrl *ctrl;
} att_module_state;

static void *mod_new(util_flags *f, sidecar_flags *common)
{
    att_module_state *m = util_calloc(1, sizeof(*m));
    m->common = common;
    m->resync = 10 * UTIL_MINUTE;
    m->timeout = 15 * UTIL_SECOND;
    m->retry_start = UTIL_SECOND;
    m->retry_max = 5 * UTIL_MINUTE;
    m->reconcile_sync = UTIL_MINUTE;
    m->worker_threads = 10;
    m->max_grpc_log_length = -1;
    m->default_fstype = "";
    m->feature_gates = "";
    m->detach_deleted_nodes = true;
    util_flags_duration(f, "resync", &m->resync, "Resync interval of the controller.");
    util_flags_duration(f, "timeout", &m->timeout,
                        "Timeout for waiting for attaching or detaching the volume.");
    util_flags_duration(f, "retry-interval-start", &m->retry_start,
                        "Initial retry interval of failed create volume or deletion. It doubles "
                        "with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &m->retry_max,
                        "Maximum retry interval of failed create volume or deletion.");
    util_flags_int(f, "worker-threads", &m->worker_threads,
                   "Number of worker threads per queue: attaches, detaches and PersistentVolumes "
                   "each get this many.");
    util_flags_int(f, "max-entries", &m->max_entries,
                   "Max entries per each page in volume lister call, 0 means no limit.");
    util_flags_string(f, "default-fstype", &m->default_fstype,
                      "The default filesystem type of the volume to publish. Defaults to empty "
                      "string");
    util_flags_duration(f, "reconcile-sync", &m->reconcile_sync,
                        "Resync interval of the VolumeAttachment reconciler.");
    util_flags_int(f, "max-grpc-log-length", &m->max_grpc_log_length,
                   "The maximum amount of characters logged for every grpc responses. Defaults "
                   "to no limit (0 or less: no limit)");
    util_flags_string(f, "feature-gates", &m->feature_gates,
                      "A set of key=value pairs that describe feature gates: "
                      "MutableCSINodeAllocatableCount=true|false, "
                      "ReleaseLeaderElectionOnExit=true|false.");
    util_flags_bool(f, "detach-deleted-nodes", &m->detach_deleted_nodes,
                    "When ControllerUnpublishVolume answers NOT_FOUND and the VolumeAttachment's "
                    "Node no longer exists, treat the volume as detached (not in upstream).");
    return m;
}

static int mod_configure(void *state, const util_flags *f, sidecar_opts *so)
{
    (void)f;
    att_module_state *m = state;
    if (m->worker_threads < 1)
        return util_err_set(-EINVAL, "--worker-threads must be greater than zero");
    if (m->max_entries < 0)
        return util_err_set(-EINVAL, "--max-entries must not be negative");
    /* Upstream's gates; only ReleaseLeaderElectionOnExit changes anything here. */
    const sidecar_gate gates[] = {{"ReleaseLeaderElectionOnExit", &m->release_on_exit},
                                  {"MutableCSINodeAllocatableCount", NULL},
                                  {NULL, NULL}};
    if (sidecar_gates_parse(m->feature_gates, gates) < 0)
        return -EINVAL;
    so->timeout = m->timeout;
    so->exit_on_csi_loss = true;
    so->probe = true;
    so->release_on_exit = m->release_on_exit;
    so->max_log_len = m->max_grpc_log_length > 0 ? (size_t)m->max_grpc_log_length : 0;
    return 0;
}

static int mod_prepare(void *state, sidecar *s)
{
    att_module_state *m = state;
    csi_caps caps = {0};
    csi_status st;
    if (sidecar_caps(s, SIDECAR_CAPS_PLUGIN, &caps, &st) < 0)
        return util_err_set(-EIO, "failed to get plugin capabilities: %s", st.message);
    /* Upstream asks for controller capabilities only from a controller. */
    if (CSI_CAP(caps.plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE) &&
        sidecar_caps(s, SIDECAR_CAPS_PLUGIN | SIDECAR_CAPS_CONTROLLER, &caps, &st) < 0)
        return util_err_set(-EIO, "failed to get controller capabilities: %s", st.message);
    m->cfg.driver_name = sidecar_driver_name(s);
    m->cfg.default_fstype = m->default_fstype;
    att_config_set_caps(&m->cfg, &caps);
    bool trivial = !att_caps_publish(&caps);
    bool list = att_caps_list_published(&caps);
    if (trivial)
        obs_info("CSI driver does not support ControllerPublishUnpublish, using trivial handler");
    else if (!list)
        obs_info("CSI driver does not support ListVolumes with published nodes: the "
                 "VolumeAttachment reconcile is off");
    m->opts = (att_ctrl_opts){
        .csi = sidecar_csi(s),
        .kube = sidecar_kube(s),
        .metrics = sidecar_metrics(s),
        .timeout = m->timeout,
        .retry_start = m->retry_start,
        .retry_max = m->retry_max,
        .resync = m->resync,
        .reconcile = m->reconcile_sync,
        .max_entries = m->max_entries,
        .workers = m->worker_threads,
        .trivial = trivial,
        .list_published = list,
        .detach_deleted_nodes = m->detach_deleted_nodes,
    };
    return 0;
}

static int mod_start(void *state)
{
    att_module_state *m = state;
    return att_ctrl_start(&m->opts, &m->cfg, &m->ctrl);
}

static int mod_stop(void *state)
{
    att_module_state *m = state;
    att_ctrl_stop(m->ctrl);
    m->ctrl = NULL;
    return 0;
}

static void mod_free(void *state)
{
    free(state);
}

const sidecar_module att_module = {
    .name = "attacher",
    .prog = "csi-attacher",
    .title = "the attacher",
    .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP,
    /* 3 x --worker-threads workers that mostly wait on the API server and
     * the driver: per-thread arenas would be most of the private memory. */
    .malloc_arenas = 1,
    .new = mod_new,
    .configure = mod_configure,
    .lock_name = att_lock_name,
    .prepare = mod_prepare,
    .start = mod_start,
    .stop = mod_stop,
    .free = mod_free,
};
