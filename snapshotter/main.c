/*
 * csi-snapshotter: flags with external-snapshotter v8's names and defaults,
 * start-up (connect, probe until ready, driver name, the controller
 * capabilities CREATE_DELETE_SNAPSHOT, which is required, and
 * LIST_SNAPSHOTS), then the controller (controller.c) while this replica
 * leads the lease "external-snapshotter-leader-<driver>". Misconfiguration
 * exits 1 with one line saying what to fix. Volume group snapshots are not
 * implemented: their flags and gate are accepted and say so.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sidecar/sidecar.h"
#include "snapshotter.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

#define WHICH (SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP)

struct flags {
    sidecar_flags common;
    util_duration resync, timeout, retry_start, retry_max;
    const char *prefix, *group_prefix, *feature_gates;
    int uuid_length, group_uuid_length, workers;
    bool extra_create_metadata, node_deployment, enable_groups;
};

struct gates {
    bool groups, release_on_exit;
};

static void die(const char *msg)
{
    fprintf(stderr, "csi-snapshotter: %s\n", msg);
    exit(1);
}

static void add_flags(util_flags *f, struct flags *fl)
{
    sidecar_flags_add(f, &fl->common, WHICH);
    fl->resync = 15 * UTIL_MINUTE;
    fl->prefix = "snapshot";
    fl->uuid_length = -1;
    fl->workers = 10;
    fl->timeout = UTIL_MINUTE;
    fl->retry_start = UTIL_SECOND;
    fl->retry_max = 5 * UTIL_MINUTE;
    fl->group_prefix = "groupsnapshot";
    fl->group_uuid_length = -1;
    fl->feature_gates = "";
    util_flags_duration(f, "resync-period", &fl->resync,
                        "Resync interval of the controller. Default is 15 minutes");
    util_flags_string(f, "snapshot-name-prefix", &fl->prefix,
                      "Prefix to apply to the name of a created snapshot");
    util_flags_int(f, "snapshot-name-uuid-length", &fl->uuid_length,
                   "Length in characters for the generated uuid of a created snapshot. Defaults "
                   "behavior is to NOT truncate.");
    util_flags_int(f, "worker-threads", &fl->workers, "Number of worker threads.");
    util_flags_duration(f, "timeout", &fl->timeout,
                        "The timeout for any RPCs to the CSI driver. Default is 1 minute.");
    util_flags_bool(f, "extra-create-metadata", &fl->extra_create_metadata,
                    "If set, add snapshot metadata to plugin snapshot requests as parameters.");
    util_flags_duration(f, "retry-interval-start", &fl->retry_start,
                        "Initial retry interval of failed volume snapshot creation or deletion. "
                        "It doubles with each failure, up to retry-interval-max. Default is 1 "
                        "second.");
    util_flags_duration(f, "retry-interval-max", &fl->retry_max,
                        "Maximum retry interval of failed volume snapshot creation or deletion. "
                        "Default is 5 minutes.");
    util_flags_bool(f, "node-deployment", &fl->node_deployment,
                    "Enables deploying the sidecar controller together with a CSI driver on "
                    "nodes to manage snapshots for node-local volumes (needs $NODE_NAME).");
    util_flags_string(f, "groupsnapshot-name-prefix", &fl->group_prefix,
                      "Prefix to apply to the name of a created group snapshot (accepted; volume "
                      "group snapshots are not implemented here).");
    util_flags_int(f, "groupsnapshot-name-uuid-length", &fl->group_uuid_length,
                   "Length in characters for the generated uuid of a created group snapshot "
                   "(accepted; volume group snapshots are not implemented here).");
    util_flags_bool(f, "enable-volume-group-snapshots", &fl->enable_groups,
                    "(deprecated: upstream replaced it with "
                    "--feature-gates=CSIVolumeGroupSnapshot=true) Accepted; volume group "
                    "snapshots are not implemented here.");
    util_flags_string(f, "feature-gates", &fl->feature_gates,
                      "A set of key=value pairs that describe feature gates: "
                      "CSIVolumeGroupSnapshot=true|false (accepted; not implemented here), "
                      "ReleaseLeaderElectionOnExit=true|false.");
}

static const char *lock_name(void *ud, const char *driver)
{
    char *buf = ud;
    char *n = snap_lock_name(driver);
    snprintf(buf, 320, "%s", n);
    free(n);
    return buf;
}

struct run_ctx {
    snap_ctrl_opts opts;
    snap_config cfg;
    const char *node; /* --node-deployment */
    snap_ctrl *ctrl;
};

static void run(void *ud)
{
    struct run_ctx *r = ud;
    if (snap_ctrl_start(&r->opts, &r->cfg, &r->ctrl) < 0)
        obs_fatal_exit("cannot start the snapshotter: %s", util_err_last());
}

/* CREATE_DELETE_SNAPSHOT (required) and LIST_SNAPSHOTS. */
static int read_caps(sidecar *s, util_duration timeout, bool *list)
{
    csi_status st;
    Csi__V1__ControllerGetCapabilitiesResponse *cc = NULL;
    if (csi_controller_get_capabilities(sidecar_csi(s), timeout, &cc, &st) < 0)
        return util_err_set(-EIO,
                            "error determining if driver supports create/delete snapshot "
                            "operations: %s",
                            st.message);
    csi_caps caps = {0};
    csi_caps_from_controller(&caps, cc);
    csi__v1__controller_get_capabilities_response__free_unpacked(cc, NULL);
    if (!CSI_CAP(caps.controller,
                 CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_SNAPSHOT))
        return util_err_set(-ENOTSUP, "CSI driver %s does not support ControllerCreateSnapshot",
                            sidecar_driver_name(s));
    *list =
        CSI_CAP(caps.controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_SNAPSHOTS);
    return 0;
}

int main(int argc, char **argv)
{
    mallopt(M_ARENA_MAX, 1);
    util_flags *f = util_flags_new("csi-snapshotter", SIDECAR_VERSION);
    struct flags fl = {0};
    add_flags(f, &fl);
    util_flags_parse_or_exit(f, argc, argv);
    if (sidecar_flags_check(f, &fl.common) < 0)
        die(util_err_last());
    struct gates g = {0};
    const sidecar_gate gates[] = {{"CSIVolumeGroupSnapshot", &g.groups},
                                  {"ReleaseLeaderElectionOnExit", &g.release_on_exit},
                                  {NULL, NULL}};
    if (sidecar_gates_parse(fl.feature_gates, gates) < 0)
        die(util_err_last());
    obs_info("Version: %s", SIDECAR_VERSION);
    if (fl.node_deployment && fl.common.leader_election)
        die("Leader election cannot happen when node-deployment is set to true");
    const char *node = NULL;
    if (fl.node_deployment) {
        node = getenv("NODE_NAME");
        if (!node || !*node)
            die("The NODE_NAME environment variable must be set when using "
                "--enable-node-deployment.");
    }
    if (fl.workers < 1)
        die("--worker-threads must be greater than zero");
    if (fl.enable_groups)
        obs_warn("--enable-volume-group-snapshots is deprecated (upstream: "
                 "--feature-gates=CSIVolumeGroupSnapshot=true); volume group snapshots are not "
                 "implemented by this csi-snapshotter");
    if (g.groups)
        obs_warn("CSIVolumeGroupSnapshot: volume group snapshots are not implemented by this "
                 "csi-snapshotter; VolumeGroupSnapshotContents are left alone");

    char lock[320];
    sidecar_opts so = {.component = "csi-snapshotter",
                       .version = SIDECAR_VERSION,
                       .which = WHICH,
                       .timeout = fl.timeout,
                       .exit_on_csi_loss = true,
                       .probe = true,
                       .release_on_exit = g.release_on_exit,
                       .lock_name = lock_name,
                       .ud = lock};
    sidecar *s = NULL;
    if (sidecar_start(&fl.common, &so, &s) < 0)
        die(util_err_last());
    bool list = false;
    if (read_caps(s, fl.timeout, &list) < 0)
        die(util_err_last());
    if (!fl.prefix || !*fl.prefix)
        die("Snapshot name prefix cannot be of length 0");

    struct run_ctx r = {.node = node};
    r.cfg = (snap_config){.driver_name = sidecar_driver_name(s),
                          .prefix = fl.prefix,
                          .uuid_length = fl.uuid_length,
                          .extra_create_metadata = fl.extra_create_metadata,
                          .list_snapshots = list,
                          .node = node};
    obs_v(2,
          "Start NewCSISnapshotSideCarController with snapshotter [%s] csiTimeout [%lld ms] "
          "csiAddress [%s] snapshotNamePrefix [%s] snapshotNameUUIDLength [%d]",
          r.cfg.driver_name, (long long)(fl.timeout / (UTIL_SECOND / 1000)), fl.common.csi_address,
          fl.prefix, fl.uuid_length);
    char *component = snap_component(r.cfg.driver_name);
    kube_recorder *rec = kube_recorder_new(sidecar_kube(s), component, NULL);
    free(component);
    r.opts = (snap_ctrl_opts){
        .csi = sidecar_csi(s),
        .kube = sidecar_kube(s),
        .events = rec,
        .metrics = sidecar_metrics(s),
        .timeout = fl.timeout,
        .retry_start = fl.retry_start,
        .retry_max = fl.retry_max,
        .resync = fl.resync,
        .workers = fl.workers,
    };
    if (sidecar_serve(s, run, &r) < 0)
        die(util_err_last());
    sidecar_wait(s);
    snap_ctrl_stop(r.ctrl);
    kube_recorder_free(rec, 2 * UTIL_SECOND);
    sidecar_free(s);
    util_flags_free(f);
    return 0;
}
