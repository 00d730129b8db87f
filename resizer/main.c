/*
 * csi-resizer: flags with external-resizer's names and defaults, start-up
 * (connect, driver name, capabilities: ControllerExpandVolume, or the
 * trivial resizer for a driver that expands on the node only), then the
 * controller (controller.c) while this replica leads the lease
 * "external-resizer-<sanitized driver>". Misconfiguration exits 1 with one
 * line saying what to fix. A driver with MODIFY_VOLUME also gets the
 * VolumeAttributesClass modify controller (modify.c) while the gate
 * VolumeAttributesClass is on: by default when the API server serves
 * storage.k8s.io/v1 VolumeAttributesClass, as upstream probes.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "resizer.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

struct flags {
    sidecar_flags common;
    util_duration resync, timeout, retry_start, retry_max;
    int workers;
    bool extra_modify_metadata, handle_inuse;
    const char *feature_gates;
};

struct gates {
    bool annotate_fs_resize, recover, release_on_exit, vac;
};

static void die(const char *msg)
{
    fprintf(stderr, "csi-resizer: %s\n", msg);
    exit(1);
}

static void add_flags(util_flags *f, struct flags *fl)
{
    sidecar_flags_add(f, &fl->common,
                      SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER |
                          SIDECAR_FLAGS_HTTP);
    fl->resync = 10 * UTIL_MINUTE;
    fl->workers = 10;
    fl->timeout = 10 * UTIL_SECOND;
    fl->retry_start = UTIL_SECOND;
    fl->retry_max = 5 * UTIL_MINUTE;
    fl->handle_inuse = true;
    fl->feature_gates = "";
    util_flags_string(f, "master", &fl->common.master,
                      "Master URL to build a client config from. Either this or kubeconfig needs "
                      "to be set if the provisioner is being run out of cluster.");
    util_flags_duration(f, "resync-period", &fl->resync, "Resync period for cache");
    util_flags_int(f, "workers", &fl->workers, "Concurrency to process multiple resize requests");
    util_flags_bool(f, "extra-modify-metadata", &fl->extra_modify_metadata,
                    "If set, add pv/pvc metadata to plugin modify requests as parameters.");
    util_flags_duration(f, "timeout", &fl->timeout, "Timeout for waiting for CSI driver socket.");
    util_flags_duration(f, "retry-interval-start", &fl->retry_start,
                        "Initial retry interval of failed volume resize. It exponentially "
                        "increases with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &fl->retry_max,
                        "Maximum retry interval of failed volume resize.");
    util_flags_bool(f, "handle-volume-inuse-error", &fl->handle_inuse,
                    "Flag to turn on/off capability to handle volume in use error in resizer "
                    "controller. Defaults to true if not set.");
    util_flags_string(f, "feature-gates", &fl->feature_gates,
                      "A set of key=value pairs that describe feature gates: "
                      "AnnotateFsResize=true|false, RecoverVolumeExpansionFailure=true|false, "
                      "ReleaseLeaderElectionOnExit=true|false, VolumeAttributesClass=true|false.");
}

/* The gate named in --feature-gates at all (upstream's ExplicitlySet). */
static bool gate_named(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (strncmp(p, name, n) == 0 && (p[n] == '=' || p[n] == ' '))
            return true;
        p = strchr(p, ',');
    }
    return false;
}

/* Does the API server serve storage.k8s.io/v1 VolumeAttributesClass?
 * (upstream's IsVolumeAttributesClassV1Enabled: 404 is no). */
static int vac_v1_served(kube_client *kc, bool *served)
{
    *served = false;
    kube_resp r = {0};
    int rc = kube_get(kc, "/apis/storage.k8s.io/v1", &r);
    if (rc < 0 && kube_is_not_found(&r))
        rc = 0;
    else if (rc < 0)
        rc = util_err_set(rc, "%s", r.message);
    /* kobj reads a field of the wrong type as missing. */
    json_object *res = kobj_arr(r.body, "resources");
    for (size_t i = 0; rc == 0 && i < kobj_len(res); i++) {
        const char *kind = kobj_str(kobj_at(res, i), "kind");
        if (kind && strcmp(kind, "VolumeAttributesClass") == 0)
            *served = true;
    }
    kube_resp_clear(&r);
    return rc;
}

static const char *lock_name(void *ud, const char *driver)
{
    char *buf = ud;
    char *n = rsz_lock_name(driver);
    snprintf(buf, 320, "%s", n);
    free(n);
    return buf;
}

struct run_ctx {
    rsz_ctrl_opts opts;
    rsz_config cfg;
    bool probe_vac; /* the gate was not named: follow the API's discovery */
    rsz_ctrl *ctrl;
};

/* The discovery request runs here, on the serving thread, so that SIGTERM
 * while the API server does not answer ends the process at once
 * (sidecar_wait). */
static void run(void *ud)
{
    struct run_ctx *r = ud;
    if (r->probe_vac) {
        bool served = false;
        if (vac_v1_served(r->opts.kube, &served) < 0)
            obs_error("Failed to check VolumeAttributesClass V1 API availability: %s",
                      util_err_last());
        else if (served)
            obs_info("VolumeAttributesClass v1 API is available");
        else {
            obs_info("Disabling VolumeAttributesClass feature gate because the "
                     "VolumeAttributesClass v1 API is not available");
            r->cfg.modify = false;
        }
    }
    if (rsz_ctrl_start(&r->opts, &r->cfg, &r->ctrl) < 0)
        obs_fatal_exit("cannot start the resizer: %s", util_err_last());
}

/* Plugin, controller and (when the controller cannot expand) node capabilities. */
static int read_caps(sidecar *s, util_duration timeout, csi_caps *caps)
{
    csi_status st;
    Csi__V1__GetPluginCapabilitiesResponse *pc = NULL;
    if (csi_get_plugin_capabilities(sidecar_csi(s), timeout, &pc, &st) < 0)
        return util_err_set(-EIO, "failed to check if plugin supports controller service: %s",
                            st.message);
    csi_caps_from_plugin(caps, pc);
    csi__v1__get_plugin_capabilities_response__free_unpacked(pc, NULL);
    if (!CSI_CAP(caps->plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE))
        return 0;
    Csi__V1__ControllerGetCapabilitiesResponse *cc = NULL;
    if (csi_controller_get_capabilities(sidecar_csi(s), timeout, &cc, &st) < 0)
        return util_err_set(-EIO, "failed to check if plugin supports controller resize: %s",
                            st.message);
    csi_caps_from_controller(caps, cc);
    csi__v1__controller_get_capabilities_response__free_unpacked(cc, NULL);
    if (CSI_CAP(caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME))
        return 0;
    Csi__V1__NodeGetCapabilitiesResponse *nc = NULL;
    if (csi_node_get_capabilities(sidecar_csi(s), timeout, &nc, &st) < 0)
        return util_err_set(-EIO, "failed to check if plugin supports node resize: %s", st.message);
    csi_caps_from_node(caps, nc);
    csi__v1__node_get_capabilities_response__free_unpacked(nc, NULL);
    return 0;
}

int main(int argc, char **argv)
{
    /* One malloc arena: the workers mostly wait on the API server and the driver. */
    mallopt(M_ARENA_MAX, 1);
    util_flags *f = util_flags_new("csi-resizer", SIDECAR_VERSION);
    struct flags fl = {0};
    add_flags(f, &fl);
    util_flags_parse_or_exit(f, argc, argv);
    if (sidecar_flags_check(f, &fl.common) < 0)
        die(util_err_last());
    if (fl.workers < 1)
        die("--workers must be greater than zero");
    /* Upstream's gates with their defaults. */
    struct gates g = {.annotate_fs_resize = true, .recover = true, .vac = true};
    const sidecar_gate gates[] = {{"AnnotateFsResize", &g.annotate_fs_resize},
                                  {"RecoverVolumeExpansionFailure", &g.recover},
                                  {"ReleaseLeaderElectionOnExit", &g.release_on_exit},
                                  {"VolumeAttributesClass", &g.vac},
                                  {NULL, NULL}};
    if (sidecar_gates_parse(fl.feature_gates, gates) < 0)
        die(util_err_last());
    obs_info("Version: %s", SIDECAR_VERSION);

    char lock[320];
    sidecar_opts so = {.component = "csi-resizer",
                       .version = SIDECAR_VERSION,
                       .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER |
                                SIDECAR_FLAGS_HTTP,
                       .timeout = fl.timeout,
                       .exit_on_csi_loss = true,
                       .probe = false, /* upstream does not probe */
                       .release_on_exit = g.release_on_exit,
                       .lock_name = lock_name,
                       .ud = lock};
    sidecar *s = NULL;
    if (sidecar_start(&fl.common, &so, &s) < 0)
        die(util_err_last());

    csi_caps caps = {0};
    if (read_caps(s, fl.timeout, &caps) < 0)
        die(util_err_last());
    rsz_mode mode = rsz_mode_from_caps(&caps);
    bool modify =
        CSI_CAP(caps.controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__MODIFY_VOLUME);
    if (mode == RSZ_MODE_NO_CONTROLLER)
        die("Failed to create CSI resizer: CSI driver does not support controller service");
    if (mode == RSZ_MODE_NONE && !modify)
        die("CSI driver does not support resize nor modify");
    if (mode == RSZ_MODE_NONE)
        obs_info("Resize not supported: CSI driver neither supports controller resize nor node "
                 "resize");
    if (mode == RSZ_MODE_TRIVIAL)
        obs_info("The CSI driver supports node resize only, using trivial resizer to handle "
                 "resize requests");
    if (!modify)
        obs_info("Modify not supported: CSI driver does not support controller modify");
    /* With the gate not named, run() asks the API whether it serves
     * VolumeAttributesClass, as upstream does at start. */
    struct run_ctx r = {.probe_vac =
                            g.vac && !gate_named(fl.feature_gates, "VolumeAttributesClass")};
    r.cfg = (rsz_config){
        .driver_name = sidecar_driver_name(s),
        .single_node_multi_writer =
            CSI_CAP(caps.controller,
                    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER),
        .trivial = mode == RSZ_MODE_TRIVIAL,
        .recover = g.recover,
        .annotate_resize = g.annotate_fs_resize,
        .no_resize = mode == RSZ_MODE_NONE,
        .modify = modify && g.vac,
        .extra_modify_metadata = fl.extra_modify_metadata,
    };
    char *component = rsz_component(r.cfg.driver_name);
    kube_recorder *rec = kube_recorder_new(sidecar_kube(s), component, NULL);
    free(component);
    r.opts = (rsz_ctrl_opts){
        .csi = sidecar_csi(s),
        .kube = sidecar_kube(s),
        .events = rec,
        .metrics = sidecar_metrics(s),
        .timeout = fl.timeout,
        .retry_start = fl.retry_start,
        .retry_max = fl.retry_max,
        .resync = fl.resync,
        .workers = fl.workers,
        .handle_inuse = fl.handle_inuse,
    };
    if (sidecar_serve(s, run, &r) < 0)
        die(util_err_last());
    sidecar_wait(s);
    rsz_ctrl_stop(r.ctrl);
    kube_recorder_free(rec, 2 * UTIL_SECOND);
    sidecar_free(s);
    util_flags_free(f);
    return 0;
}
