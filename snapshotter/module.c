/*
 * csi-snapshotter as a controller module: flags with external-snapshotter
 * v8's names and defaults, the controller capabilities (CREATE_DELETE_SNAPSHOT,
 * which is required, and LIST_SNAPSHOTS), then the controller
 * (controller.c) while this replica leads the lease
 * "external-snapshotter-leader-<driver>". Volume group snapshots are not
 * implemented: their flags and gate are accepted and say so.
 */
#include <errno.h>
#include <stdlib.h>

#include "sidecar/sidecar.h"
#include "snapshotter.h"

typedef struct snap_module_state {
    sidecar_flags *common;
    util_duration resync, timeout, retry_start, retry_max;
    const char *prefix, *group_prefix, *feature_gates;
    int uuid_length, group_uuid_length, workers;
    bool extra_create_metadata, node_deployment, enable_groups;
    bool groups, release_on_exit; /* gates */
    const char *node;             /* --node-deployment: $NODE_NAME */
    snap_ctrl_opts opts;
    snap_config cfg;
    kube_recorder *events;
    snap_ctrl *ctrl;
} snap_module_state;

static void *mod_new(util_flags *f, sidecar_flags *common)
{
    snap_module_state *m = util_calloc(1, sizeof(*m));
    m->common = common;
    m->resync = 15 * UTIL_MINUTE;
    m->prefix = "snapshot";
    m->uuid_length = -1;
    m->workers = 10;
    m->timeout = UTIL_MINUTE;
    m->retry_start = UTIL_SECOND;
    m->retry_max = 5 * UTIL_MINUTE;
    m->group_prefix = "groupsnapshot";
    m->group_uuid_length = -1;
    m->feature_gates = "";
    util_flags_duration(f, "resync-period", &m->resync,
                        "Resync interval of the controller. Default is 15 minutes");
    util_flags_string(f, "snapshot-name-prefix", &m->prefix,
                      "Prefix to apply to the name of a created snapshot");
    util_flags_int(f, "snapshot-name-uuid-length", &m->uuid_length,
                   "Length in characters for the generated uuid of a created snapshot. Defaults "
                   "behavior is to NOT truncate.");
    util_flags_int(f, "worker-threads", &m->workers, "Number of worker threads.");
    util_flags_duration(f, "timeout", &m->timeout,
                        "The timeout for any RPCs to the CSI driver. Default is 1 minute.");
    util_flags_bool(f, "extra-create-metadata", &m->extra_create_metadata,
                    "If set, add snapshot metadata to plugin snapshot requests as parameters.");
    util_flags_duration(f, "retry-interval-start", &m->retry_start,
                        "Initial retry interval of failed volume snapshot creation or deletion. "
                        "It doubles with each failure, up to retry-interval-max. Default is 1 "
                        "second.");
    util_flags_duration(f, "retry-interval-max", &m->retry_max,
                        "Maximum retry interval of failed volume snapshot creation or deletion. "
                        "Default is 5 minutes.");
    util_flags_bool(f, "node-deployment", &m->node_deployment,
                    "Enables deploying the sidecar controller together with a CSI driver on "
                    "nodes to manage snapshots for node-local volumes (needs $NODE_NAME).");
    util_flags_string(f, "groupsnapshot-name-prefix", &m->group_prefix,
                      "Prefix to apply to the name of a created group snapshot (accepted; volume "
                      "group snapshots are not implemented here).");
    util_flags_int(f, "groupsnapshot-name-uuid-length", &m->group_uuid_length,
                   "Length in characters for the generated uuid of a created group snapshot "
                   "(accepted; volume group snapshots are not implemented here).");
    util_flags_bool(f, "enable-volume-group-snapshots", &m->enable_groups,
                    "(deprecated: upstream replaced it with "
                    "--feature-gates=CSIVolumeGroupSnapshot=true) Accepted; volume group "
                    "snapshots are not implemented here.");
    util_flags_string(f, "feature-gates", &m->feature_gates,
                      "A set of key=value pairs that describe feature gates: "
                      "CSIVolumeGroupSnapshot=true|false (accepted; not implemented here), "
                      "ReleaseLeaderElectionOnExit=true|false.");
    return m;
}

static int mod_configure(void *state, const util_flags *f, sidecar_opts *so)
{
    (void)f;
    snap_module_state *m = state;
    const sidecar_gate gates[] = {{"CSIVolumeGroupSnapshot", &m->groups},
                                  {"ReleaseLeaderElectionOnExit", &m->release_on_exit},
                                  {NULL, NULL}};
    if (sidecar_gates_parse(m->feature_gates, gates) < 0)
        return -EINVAL;
    if (m->node_deployment && m->common->leader_election)
        return util_err_set(-EINVAL,
                            "Leader election cannot happen when node-deployment is set to true");
    if (m->node_deployment) {
        m->node = getenv("NODE_NAME");
        if (!m->node || !*m->node)
            return util_err_set(-EINVAL, "The NODE_NAME environment variable must be set when "
                                         "using --enable-node-deployment.");
    }
    if (m->workers < 1)
        return util_err_set(-EINVAL, "--worker-threads must be greater than zero");
    if (!m->prefix || !*m->prefix)
        return util_err_set(-EINVAL, "Snapshot name prefix cannot be of length 0");
    if (m->enable_groups)
        obs_warn("--enable-volume-group-snapshots is deprecated (upstream: "
                 "--feature-gates=CSIVolumeGroupSnapshot=true); volume group snapshots are not "
                 "implemented by this csi-snapshotter");
    if (m->groups)
        obs_warn("CSIVolumeGroupSnapshot: volume group snapshots are not implemented by this "
                 "csi-snapshotter; VolumeGroupSnapshotContents are left alone");
    so->timeout = m->timeout;
    so->exit_on_csi_loss = true;
    so->probe = true;
    so->release_on_exit = m->release_on_exit;
    return 0;
}

static int mod_prepare(void *state, sidecar *s)
{
    snap_module_state *m = state;
    csi_caps caps = {0};
    csi_status st;
    if (sidecar_caps(s, SIDECAR_CAPS_CONTROLLER, &caps, &st) < 0)
        return util_err_set(-EIO,
                            "error determining if driver supports create/delete snapshot "
                            "operations: %s",
                            st.message);
    if (!CSI_CAP(caps.controller,
                 CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_SNAPSHOT))
        return util_err_set(-ENOTSUP, "CSI driver %s does not support ControllerCreateSnapshot",
                            sidecar_driver_name(s));
    m->cfg = (snap_config){
        .driver_name = sidecar_driver_name(s),
        .prefix = m->prefix,
        .uuid_length = m->uuid_length,
        .extra_create_metadata = m->extra_create_metadata,
        .list_snapshots = CSI_CAP(
            caps.controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_SNAPSHOTS),
        .node = m->node};
    obs_v(2,
          "Start NewCSISnapshotSideCarController with snapshotter [%s] csiTimeout [%lld ms] "
          "csiAddress [%s] snapshotNamePrefix [%s] snapshotNameUUIDLength [%d]",
          m->cfg.driver_name, (long long)(m->timeout / (UTIL_SECOND / 1000)),
          m->common->csi_address, m->prefix, m->uuid_length);
    char *component = snap_component(m->cfg.driver_name);
    m->events = kube_recorder_new(sidecar_kube(s), component, NULL);
    free(component);
    m->opts = (snap_ctrl_opts){
        .csi = sidecar_csi(s),
        .kube = sidecar_kube(s),
        .events = m->events,
        .metrics = sidecar_metrics(s),
        .timeout = m->timeout,
        .retry_start = m->retry_start,
        .retry_max = m->retry_max,
        .resync = m->resync,
        .workers = m->workers,
    };
    return 0;
}

static int mod_start(void *state)
{
    snap_module_state *m = state;
    return snap_ctrl_start(&m->opts, &m->cfg, &m->ctrl);
}

static int mod_stop(void *state)
{
    snap_module_state *m = state;
    snap_ctrl_stop(m->ctrl);
    m->ctrl = NULL;
    return 0;
}

static void mod_free(void *state)
{
    snap_module_state *m = state;
    kube_recorder_free(m->events, 2 * UTIL_SECOND);
    free(m);
}

const sidecar_module snap_module = {
    .name = "snapshotter",
    .prog = "csi-snapshotter",
    .title = "the snapshotter",
    .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP,
    .malloc_arenas = 1,
    .new = mod_new,
    .configure = mod_configure,
    .lock_name = snap_lock_name,
    .prepare = mod_prepare,
    .start = mod_start,
    .stop = mod_stop,
    .free = mod_free,
};
