/*
 * snapshot-controller-sim: upstream snapshot-controller's flags
 * (cmd/snapshot-controller/main.go: --kubeconfig, --resync-period,
 * --worker-threads, --kube-api-qps/-burst, --leader-election*,
 * --http-endpoint, --metrics-path, --retry-interval-start/-max, and the
 * ones accepted without effect here) through common/sidecar, then the
 * controller (controller.c) while this replica leads. SIGTERM/SIGINT exit
 * 0; misconfiguration exits 1 with one line saying what to fix.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sidecar/sidecar.h"
#include "snapctl.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

#define PROG "snapshot-controller-sim"

struct flags {
    sidecar_flags common;
    util_duration resync, retry_start, retry_max, retry_crd_max;
    int worker_threads;
    bool distributed, prevent_mode_conversion;
    const char *feature_gates;
};

static void die(const char *msg)
{
    fprintf(stderr, PROG ": %s\n", msg);
    exit(1);
}

static void add_flags(util_flags *f, struct flags *fl)
{
    unsigned which = SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP;
    if (sidecar_flags_add(f, &fl->common, which) < 0)
        die("cannot register the common flags");
    fl->resync = 15 * UTIL_MINUTE;
    fl->retry_start = UTIL_SECOND;
    fl->retry_max = 5 * UTIL_MINUTE;
    fl->retry_crd_max = 30 * UTIL_SECOND;
    fl->worker_threads = 10;
    fl->prevent_mode_conversion = true;
    fl->feature_gates = "";
    util_flags_duration(f, "resync-period", &fl->resync, "Resync interval of the controller.");
    util_flags_int(f, "worker-threads", &fl->worker_threads, "Number of worker threads.");
    util_flags_duration(f, "retry-interval-start", &fl->retry_start,
                        "Initial retry interval of failed volume snapshot creation or deletion. "
                        "It doubles with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &fl->retry_max,
                        "Maximum retry interval of failed volume snapshot creation or deletion.");
    util_flags_bool(f, "prevent-volume-mode-conversion", &fl->prevent_mode_conversion,
                    "Prevents an unauthorised user from modifying the volume mode when creating "
                    "a PVC from an existing VolumeSnapshot (new contents get "
                    "spec.sourceVolumeMode).");
    util_flags_bool(f, "enable-distributed-snapshotting", &fl->distributed,
                    "Accepted for compatibility; no effect here (contents get no managed-by "
                    "label).");
    util_flags_duration(f, "retry-crd-interval-max", &fl->retry_crd_max,
                        "Accepted for compatibility; the informers retry until the CRDs "
                        "appear.");
    util_flags_string(f, "feature-gates", &fl->feature_gates,
                      "key=value pairs: CSIVolumeGroupSnapshot (accepted; not implemented "
                      "here), ReleaseLeaderElectionOnExit.");
}

static const char *lock_name(void *ud, const char *driver)
{
    (void)ud;
    (void)driver;
    return SNAPCTL_LOCK_NAME;
}

struct run_ctx {
    snapctl_ctrl_opts opts;
    snapctl_ctrl *ctrl;
};

static void run(void *ud)
{
    struct run_ctx *r = ud;
    if (snapctl_ctrl_start(&r->opts, &r->ctrl) < 0)
        obs_fatal_exit("cannot start the controller: %s", util_err_last());
}

int main(int argc, char **argv)
{
    util_flags *f = util_flags_new(PROG, SIDECAR_VERSION);
    struct flags fl = {0};
    add_flags(f, &fl);
    util_flags_parse_or_exit(f, argc, argv);
    if (sidecar_flags_check(f, &fl.common) < 0)
        die(util_err_last());
    if (fl.worker_threads < 1)
        die("--worker-threads must be greater than zero");
    if (fl.retry_start <= 0)
        die("--retry-interval-start must be greater than zero");
    if (fl.retry_max < fl.retry_start)
        die("--retry-interval-max must not be less than --retry-interval-start");
    if (fl.resync < 0)
        die("--resync-period must not be negative");
    bool group_snapshots = false, release_on_exit = false;
    const sidecar_gate gates[] = {{"CSIVolumeGroupSnapshot", &group_snapshots},
                                  {"ReleaseLeaderElectionOnExit", &release_on_exit},
                                  {NULL, NULL}};
    if (sidecar_gates_parse(fl.feature_gates, gates) < 0)
        die(util_err_last());
    if (group_snapshots)
        obs_warn("CSIVolumeGroupSnapshot: volume group snapshots are not implemented here");
    obs_info("Version: %s", SIDECAR_VERSION);

    sidecar_opts so = {.component = SNAPCTL_COMPONENT,
                       .version = SIDECAR_VERSION,
                       .which = SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP,
                       .healthz = true,
                       .release_on_exit = release_on_exit,
                       .lock_name = lock_name};
    sidecar *s = NULL;
    if (sidecar_start(&fl.common, &so, &s) < 0)
        die(util_err_last());
    struct run_ctx r = {
        .opts = {.kube = sidecar_kube(s),
                 .events = sidecar_recorder(s),
                 .metrics = sidecar_metrics(s),
                 .retry_start = fl.retry_start,
                 .retry_max = fl.retry_max,
                 .resync = fl.resync,
                 .workers = fl.worker_threads,
                 .cfg = {.prevent_volume_mode_conversion = fl.prevent_mode_conversion}}};
    if (sidecar_serve(s, run, &r) < 0)
        die(util_err_last());
    sidecar_wait(s);
    snapctl_ctrl_free(r.ctrl);
    sidecar_free(s);
    util_flags_free(f);
    return 0;
}
