/*
 * csi-resizer as a controller module: flags with external-resizer's names
 * and defaults, the capabilities (ControllerExpandVolume, or the trivial
 * resizer for a driver that expands on the node only), then the controller
 * (controller.c) while this replica leads the lease
 * "external-resizer-<sanitized driver>". A driver with MODIFY_VOLUME also
 * gets the VolumeAttributesClass modify controller (modify.c) while the
 * gate VolumeAttributesClass is on: by default when the API server serves
 * storage.k8s.io/v1 VolumeAttributesClass, as upstream probes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "resizer.h"
#include "sidecar/sidecar.h"

typedef struct rsz_module_state {
    sidecar_flags *common;
    util_duration resync, timeout, retry_start, retry_max;
    int workers;
    bool extra_modify_metadata, handle_inuse;
    const char *feature_gates;
    bool annotate_fs_resize, recover, release_on_exit, vac;
    bool probe_vac; /* the gate was not named: follow the API's discovery */
    rsz_ctrl_opts opts;
    rsz_config cfg;
    kube_recorder *events;
    rsz_ctrl *ctrl;
} rsz_module_state;

static void *mod_new(util_flags *f, sidecar_flags *common)
{
    rsz_module_state *m = util_calloc(1, sizeof(*m));
    m->common = common;
    m->resync = 10 * UTIL_MINUTE;
    m->workers = 10;
    m->timeout = 10 * UTIL_SECOND;
    m->retry_start = UTIL_SECOND;
    m->retry_max = 5 * UTIL_MINUTE;
    m->handle_inuse = true;
    m->feature_gates = "";
    util_flags_duration(f, "resync-period", &m->resync, "Resync period for cache");
    util_flags_int(f, "workers", &m->workers, "Concurrency to process multiple resize requests");
    util_flags_bool(f, "extra-modify-metadata", &m->extra_modify_metadata,
                    "If set, add pv/pvc metadata to plugin modify requests as parameters.");
    util_flags_duration(f, "timeout", &m->timeout, "Timeout for waiting for CSI driver socket.");
    util_flags_duration(f, "retry-interval-start", &m->retry_start,
                        "Initial retry interval of failed volume resize. It exponentially "
                        "increases with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &m->retry_max,
                        "Maximum retry interval of failed volume resize.");
    util_flags_bool(f, "handle-volume-inuse-error", &m->handle_inuse,
                    "Flag to turn on/off capability to handle volume in use error in resizer "
                    "controller. Defaults to true if not set.");
    util_flags_string(f, "feature-gates", &m->feature_gates,
                      "A set of key=value pairs that describe feature gates: "
                      "AnnotateFsResize=true|false, RecoverVolumeExpansionFailure=true|false, "
                      "ReleaseLeaderElectionOnExit=true|false, VolumeAttributesClass=true|false.");
    return m;
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

static int mod_configure(void *state, const util_flags *f, sidecar_opts *so)
{
    (void)f;
    rsz_module_state *m = state;
    if (m->workers < 1)
        return util_err_set(-EINVAL, "--workers must be greater than zero");
    /* Upstream's gates with their defaults. */
    m->annotate_fs_resize = m->recover = m->vac = true;
    const sidecar_gate gates[] = {{"AnnotateFsResize", &m->annotate_fs_resize},
                                  {"RecoverVolumeExpansionFailure", &m->recover},
                                  {"ReleaseLeaderElectionOnExit", &m->release_on_exit},
                                  {"VolumeAttributesClass", &m->vac},
                                  {NULL, NULL}};
    if (sidecar_gates_parse(m->feature_gates, gates) < 0)
        return -EINVAL;
    /* With the gate not named, start() asks the API whether it serves
     * VolumeAttributesClass, as upstream does at start. */
    m->probe_vac = m->vac && !gate_named(m->feature_gates, "VolumeAttributesClass");
    so->timeout = m->timeout;
    so->exit_on_csi_loss = true;
    so->probe = false; /* upstream does not probe */
    so->release_on_exit = m->release_on_exit;
    return 0;
}

/* Plugin, controller and (when the controller cannot expand) node capabilities. */
static int read_caps(sidecar *s, csi_caps *caps)
{
    csi_status st;
    if (sidecar_caps(s, SIDECAR_CAPS_PLUGIN, caps, &st) < 0)
        return util_err_set(-EIO, "failed to check if plugin supports controller service: %s",
                            st.message);
    if (!CSI_CAP(caps->plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE))
        return 0;
    if (sidecar_caps(s, SIDECAR_CAPS_PLUGIN | SIDECAR_CAPS_CONTROLLER, caps, &st) < 0)
        return util_err_set(-EIO, "failed to check if plugin supports controller resize: %s",
                            st.message);
    if (CSI_CAP(caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME))
        return 0;
    if (sidecar_caps(s, SIDECAR_CAPS_PLUGIN | SIDECAR_CAPS_CONTROLLER | SIDECAR_CAPS_NODE, caps,
                     &st) < 0)
        return util_err_set(-EIO, "failed to check if plugin supports node resize: %s", st.message);
    return 0;
}

static int mod_prepare(void *state, sidecar *s)
{
    rsz_module_state *m = state;
    csi_caps caps = {0};
    if (read_caps(s, &caps) < 0)
        return -EIO;
    rsz_mode mode = rsz_mode_from_caps(&caps);
    bool modify =
        CSI_CAP(caps.controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__MODIFY_VOLUME);
    if (mode == RSZ_MODE_NO_CONTROLLER)
        return util_err_set(-ENOTSUP, "Failed to create CSI resizer: CSI driver does not support "
                                      "controller service");
    if (mode == RSZ_MODE_NONE && !modify)
        return util_err_set(-ENOTSUP, "CSI driver does not support resize nor modify");
    if (mode == RSZ_MODE_NONE)
        obs_info("Resize not supported: CSI driver neither supports controller resize nor node "
                 "resize");
    if (mode == RSZ_MODE_TRIVIAL)
        obs_info("The CSI driver supports node resize only, using trivial resizer to handle "
                 "resize requests");
    if (!modify)
        obs_info("Modify not supported: CSI driver does not support controller modify");
    m->cfg = (rsz_config){
        .driver_name = sidecar_driver_name(s),
        .single_node_multi_writer =
            CSI_CAP(caps.controller,
                    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER),
        .trivial = mode == RSZ_MODE_TRIVIAL,
        .recover = m->recover,
        .annotate_resize = m->annotate_fs_resize,
        .no_resize = mode == RSZ_MODE_NONE,
        .modify = modify && m->vac,
        .extra_modify_metadata = m->extra_modify_metadata,
    };
    char *component = rsz_component(m->cfg.driver_name);
    m->events = kube_recorder_new(sidecar_kube(s), component, NULL);
    free(component);
    m->opts = (rsz_ctrl_opts){
        .csi = sidecar_csi(s),
        .kube = sidecar_kube(s),
        .events = m->events,
        .metrics = sidecar_metrics(s),
        .timeout = m->timeout,
        .retry_start = m->retry_start,
        .retry_max = m->retry_max,
        .resync = m->resync,
        .workers = m->workers,
        .handle_inuse = m->handle_inuse,
    };
    return 0;
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

/* The discovery request runs here, on the controllers' thread, so that
 * SIGTERM while the API server does not answer ends the process at once
 * (sidecar_wait). */
static int mod_start(void *state)
{
    rsz_module_state *m = state;
    if (m->probe_vac) {
        bool served = false;
        if (vac_v1_served(m->opts.kube, &served) < 0)
            obs_error("Failed to check VolumeAttributesClass V1 API availability: %s",
                      util_err_last());
        else if (served)
            obs_info("VolumeAttributesClass v1 API is available");
        else {
            obs_info("Disabling VolumeAttributesClass feature gate because the "
                     "VolumeAttributesClass v1 API is not available");
            m->cfg.modify = false;
        }
    }
    return rsz_ctrl_start(&m->opts, &m->cfg, &m->ctrl);
}

static int mod_stop(void *state)
{
    rsz_module_state *m = state;
    rsz_ctrl_stop(m->ctrl);
    m->ctrl = NULL;
    return 0;
}

static void mod_free(void *state)
{
    rsz_module_state *m = state;
    kube_recorder_free(m->events, 2 * UTIL_SECOND);
    free(m);
}

const sidecar_module rsz_module = {
    .name = "resizer",
    .prog = "csi-resizer",
    .title = "the resizer",
    .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_MASTER | SIDECAR_FLAGS_LEADER |
             SIDECAR_FLAGS_HTTP,
    /* The workers mostly wait on the API server and the driver. */
    .malloc_arenas = 1,
    .new = mod_new,
    .configure = mod_configure,
    .lock_name = rsz_lock_name,
    .prepare = mod_prepare,
    .start = mod_start,
    .stop = mod_stop,
    .free = mod_free,
};
