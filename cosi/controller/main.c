/*
 * objectstorage-controller: upstream's flags (--kubeconfig, klog's) plus the
 * common sidecar ones, COSI's leader election defaults (on, 150s/120s/60s),
 * start-up through common/sidecar, then the controller (controller.c) while
 * this replica leads. Misconfiguration exits 1 with one line saying what to
 * fix.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "controller.h"
#include "cosi/cosi.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

#define PROG "objectstorage-controller"

struct flags {
    sidecar_flags common;
    util_duration resync, retry_start, retry_max;
    int worker_threads;
};

static void die(const char *msg)
{
    fprintf(stderr, PROG ": %s\n", msg);
    exit(1);
}

/* klog's flags that upstream's binary takes and that mean nothing here
 * (logs go to stderr, unbuffered): accepted so its manifests still start. */
static void add_klog_legacy(util_flags *f)
{
    static const struct {
        const char *name;
        bool value;
    } legacy[] = {
        {"logtostderr", false},  {"alsologtostderr", false},  {"stderrthreshold", true},
        {"log_dir", true},       {"log_file", true},          {"log_file_max_size", true},
        {"skip_headers", false}, {"skip_log_headers", false}, {"add_dir_header", false},
        {"one_output", false},   {"log_backtrace_at", true},
    };
    for (size_t i = 0; i < sizeof(legacy) / sizeof(legacy[0]); i++)
        util_flags_deprecated(f, legacy[i].name, legacy[i].value,
                              "klog flag, accepted for compatibility; no effect here.");
}

static void add_flags(util_flags *f, struct flags *fl)
{
    if (sidecar_flags_add(f, &fl->common,
                          SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP) < 0)
        die("cannot register the common flags");
    /* COSI elects always, with long terms (upstream's controller runtime). */
    fl->common.leader_election = true;
    fl->common.lease_duration = 150 * UTIL_SECOND;
    fl->common.renew_deadline = 120 * UTIL_SECOND;
    fl->common.retry_period = 60 * UTIL_SECOND;
    static const char *const changed[] = {"leader-election", "leader-election-lease-duration",
                                          "leader-election-renew-deadline",
                                          "leader-election-retry-period"};
    for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++)
        util_flags_redefault(f, changed[i]);
    fl->resync = 30 * UTIL_SECOND;
    fl->retry_start = 100 * UTIL_MS;
    fl->retry_max = 30 * UTIL_SECOND;
    fl->worker_threads = 10;
    util_flags_duration(f, "resync", &fl->resync,
                        "Resync interval of the BucketClaim informer (every claim is looked at "
                        "again this often).");
    util_flags_duration(f, "retry-interval-start", &fl->retry_start,
                        "Initial retry interval of a failed BucketClaim. It doubles with each "
                        "failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &fl->retry_max,
                        "Maximum retry interval of a failed BucketClaim.");
    util_flags_int(f, "worker-threads", &fl->worker_threads,
                   "Number of BucketClaims processed at once.");
    add_klog_legacy(f);
}

static const char *lock_name(void *ud, const char *driver)
{
    (void)driver;
    return ud;
}

struct run_ctx {
    cctl_ctrl_opts opts;
    cctl_ctrl *ctrl;
};

static void run(void *ud)
{
    struct run_ctx *r = ud;
    if (cctl_ctrl_start(&r->opts, &r->ctrl) < 0)
        obs_fatal_exit("cannot start the controller: %s", util_err_last());
}

int main(int argc, char **argv)
{
    /* The workers mostly wait on the API server: one malloc arena serves
     * them, instead of one per busy thread, each keeping what it touched. */
    mallopt(M_ARENA_MAX, 1);
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
        die("--resync must not be negative");
    obs_info("Version: %s", SIDECAR_VERSION);

    char *lock = cosi_lease_name(CCTL_LOCK_NAME);
    /* $KUBECONFIG is read when --kubeconfig is unset or empty, as upstream
     * (viper's env binding, then its own fallback) does. */
    sidecar_opts so = {.component = CCTL_COMPONENT,
                       .version = SIDECAR_VERSION,
                       .which = SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP,
                       .kubeconfig_env = true,
                       .healthz = true,
                       .release_on_exit = true,
                       .lock_name = lock_name,
                       .ud = lock};
    sidecar *s = NULL;
    if (sidecar_start(&fl.common, &so, &s) < 0)
        die(util_err_last());

    struct run_ctx r = {.opts = {.kube = sidecar_kube(s),
                                 .events = sidecar_recorder(s),
                                 .metrics = sidecar_metrics(s),
                                 .retry_start = fl.retry_start,
                                 .retry_max = fl.retry_max,
                                 .resync = fl.resync,
                                 .workers = fl.worker_threads}};
    if (sidecar_serve(s, run, &r) < 0)
        die(util_err_last());
    sidecar_wait(s);
    cctl_ctrl_stop(r.ctrl);
    sidecar_free(s);
    free(lock);
    util_flags_free(f);
    return 0;
}
