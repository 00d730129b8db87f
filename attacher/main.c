/*
 * csi-attacher: flags with external-attacher's names and defaults, start-up
 * (connect, probe, driver name, capabilities: the trivial handler when the
 * driver has no ControllerPublish), then the controller (controller.c)
 * while this replica leads. Misconfiguration exits 1 with one line saying
 * what to fix.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attacher.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

struct flags {
    sidecar_flags common;
    util_duration resync, timeout, retry_start, retry_max, reconcile_sync;
    int worker_threads, max_entries, max_grpc_log_length;
    const char *default_fstype;
    const char *feature_gates;
    bool detach_deleted_nodes;
};

static void die(const char *msg)
{
    fprintf(stderr, "csi-attacher: %s\n", msg);
    exit(1);
}

static void add_flags(util_flags *f, struct flags *fl)
{
    sidecar_flags_add(f, &fl->common,
                      SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER |
                          SIDECAR_FLAGS_HTTP);
    fl->resync = 10 * UTIL_MINUTE;
    fl->timeout = 15 * UTIL_SECOND;
    fl->retry_start = UTIL_SECOND;
    fl->retry_max = 5 * UTIL_MINUTE;
    fl->reconcile_sync = UTIL_MINUTE;
    fl->worker_threads = 10;
    fl->max_entries = 0;
    fl->max_grpc_log_length = -1;
    fl->default_fstype = "";
    fl->feature_gates = "";
    fl->detach_deleted_nodes = true;
    util_flags_duration(f, "resync", &fl->resync, "Resync interval of the controller.");
    util_flags_duration(f, "timeout", &fl->timeout,
                        "Timeout for waiting for attaching or detaching the volume.");
    util_flags_duration(f, "retry-interval-start", &fl->retry_start,
                        "Initial retry interval of failed create volume or deletion. It doubles "
                        "with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &fl->retry_max,
                        "Maximum retry interval of failed create volume or deletion.");
    util_flags_int(f, "worker-threads", &fl->worker_threads,
                   "Number of worker threads per queue: attaches, detaches and PersistentVolumes "
                   "each get this many.");
    util_flags_int(f, "max-entries", &fl->max_entries,
                   "Max entries per each page in volume lister call, 0 means no limit.");
    util_flags_string(f, "default-fstype", &fl->default_fstype,
                      "The default filesystem type of the volume to publish. Defaults to empty "
                      "string");
    util_flags_duration(f, "reconcile-sync", &fl->reconcile_sync,
                        "Resync interval of the VolumeAttachment reconciler.");
    util_flags_int(f, "max-grpc-log-length", &fl->max_grpc_log_length,
                   "The maximum amount of characters logged for every grpc responses. Defaults "
                   "to no limit (0 or less: no limit)");
    util_flags_string(f, "feature-gates", &fl->feature_gates,
                      "A set of key=value pairs that describe feature gates: "
                      "MutableCSINodeAllocatableCount=true|false, "
                      "ReleaseLeaderElectionOnExit=true|false.");
    util_flags_bool(f, "detach-deleted-nodes", &fl->detach_deleted_nodes,
                    "When ControllerUnpublishVolume answers NOT_FOUND and the VolumeAttachment's "
                    "Node no longer exists, treat the volume as detached (not in upstream).");
}

static const char *lock_name(void *ud, const char *driver)
{
    char *buf = ud;
    char *n = att_lock_name(driver);
    snprintf(buf, 320, "%s", n);
    free(n);
    return buf;
}

struct run_ctx {
    att_ctrl_opts opts;
    att_config cfg;
    att_ctrl *ctrl;
};

static void run(void *ud)
{
    struct run_ctx *r = ud;
    if (att_ctrl_start(&r->opts, &r->cfg, &r->ctrl) < 0)
        obs_fatal_exit("cannot start the attacher: %s", util_err_last());
}

int main(int argc, char **argv)
{
    /* glibc gives each busy thread its own arena, up to 8 per core, and
     * each keeps what it touched: with 3 x --worker-threads workers that is
     * most of the private memory. One arena serves a controller whose
     * threads mostly wait on the API server and the driver. */
    mallopt(M_ARENA_MAX, 1);
    util_flags *f = util_flags_new("csi-attacher", SIDECAR_VERSION);
    struct flags fl = {0};
    add_flags(f, &fl);
    util_flags_parse_or_exit(f, argc, argv);
    if (sidecar_flags_check(f, &fl.common) < 0)
        die(util_err_last());
    if (fl.worker_threads < 1)
        die("--worker-threads must be greater than zero");
    if (fl.max_entries < 0)
        die("--max-entries must not be negative");
    /* Upstream's gates; only ReleaseLeaderElectionOnExit changes anything here. */
    bool release = false;
    const sidecar_gate gates[] = {{"ReleaseLeaderElectionOnExit", &release},
                                  {"MutableCSINodeAllocatableCount", NULL},
                                  {NULL, NULL}};
    if (sidecar_gates_parse(fl.feature_gates, gates) < 0)
        die(util_err_last());
    obs_info("Version: %s", SIDECAR_VERSION);

    char lock[320];
    sidecar_opts so = {
        .component = "csi-attacher",
        .version = SIDECAR_VERSION,
        .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP,
        .timeout = fl.timeout,
        .exit_on_csi_loss = true,
        .probe = true,
        .release_on_exit = release,
        .max_log_len = fl.max_grpc_log_length > 0 ? (size_t)fl.max_grpc_log_length : 0,
        .lock_name = lock_name,
        .ud = lock};
    sidecar *s = NULL;
    if (sidecar_start(&fl.common, &so, &s) < 0)
        die(util_err_last());

    csi_caps caps = {0};
    csi_status st;
    Csi__V1__GetPluginCapabilitiesResponse *pc = NULL;
    if (csi_get_plugin_capabilities(sidecar_csi(s), fl.timeout, &pc, &st) < 0) {
        fprintf(stderr, "csi-attacher: failed to get plugin capabilities: %s\n", st.message);
        return 1;
    }
    csi_caps_from_plugin(&caps, pc);
    csi__v1__get_plugin_capabilities_response__free_unpacked(pc, NULL);
    /* Upstream asks for controller capabilities only from a controller. */
    if (CSI_CAP(caps.plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE)) {
        Csi__V1__ControllerGetCapabilitiesResponse *cc = NULL;
        if (csi_controller_get_capabilities(sidecar_csi(s), fl.timeout, &cc, &st) < 0) {
            fprintf(stderr, "csi-attacher: failed to get controller capabilities: %s\n",
                    st.message);
            return 1;
        }
        csi_caps_from_controller(&caps, cc);
        csi__v1__controller_get_capabilities_response__free_unpacked(cc, NULL);
    }

    struct run_ctx r = {0};
    r.cfg.driver_name = sidecar_driver_name(s);
    r.cfg.default_fstype = fl.default_fstype;
    att_config_set_caps(&r.cfg, &caps);
    bool trivial = !att_caps_publish(&caps);
    bool list = att_caps_list_published(&caps);
    if (trivial)
        obs_info("CSI driver does not support ControllerPublishUnpublish, using trivial handler");
    else if (!list)
        obs_info("CSI driver does not support ListVolumes with published nodes: the "
                 "VolumeAttachment reconcile is off");
    r.opts = (att_ctrl_opts){
        .csi = sidecar_csi(s),
        .kube = sidecar_kube(s),
        .metrics = sidecar_metrics(s),
        .timeout = fl.timeout,
        .retry_start = fl.retry_start,
        .retry_max = fl.retry_max,
        .resync = fl.resync,
        .reconcile = fl.reconcile_sync,
        .max_entries = fl.max_entries,
        .workers = fl.worker_threads,
        .trivial = trivial,
        .list_published = list,
        .detach_deleted_nodes = fl.detach_deleted_nodes,
    };
    if (sidecar_serve(s, run, &r) < 0)
        die(util_err_last());
    sidecar_wait(s);
    att_ctrl_stop(r.ctrl);
    sidecar_free(s);
    util_flags_free(f);
    return 0;
}
