/*
 * objectstorage-sidecar: flags with upstream's names and defaults (its own
 * --driver-addr, --kubeconfig and --debug, the common sidecar ones with
 * COSI's leader election timings), start-up (connect, DriverGetInfo for
 * the name), then the controller (controller.c) while this replica leads.
 * As upstream's viper does, --kubeconfig, --driver-addr and --debug not
 * given on the command line take a non-empty KUBECONFIG, DRIVER_ADDR or
 * DEBUG. Misconfiguration exits 1 with one line saying what to fix.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cosi/sidecar/cosisidecar.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

#define PROG  "objectstorage-sidecar"
#define WHICH (SIDECAR_FLAGS_COSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP)

struct flags {
    sidecar_flags common;
    util_duration resync, timeout, retry_start, retry_max;
    int worker_threads;
    bool debug;
};

static void die(const char *msg)
{
    fprintf(stderr, PROG ": %s\n", msg);
    exit(1);
}

static void add_flags(util_flags *f, struct flags *fl)
{
    if (sidecar_flags_add(f, &fl->common, WHICH) < 0)
        die("cannot register the flags");
    /* COSI elects a leader always, with longer timings than the CSI
     * sidecars' (upstream's values). */
    fl->common.leader_election = true;
    fl->common.lease_duration = 150 * UTIL_SECOND;
    fl->common.renew_deadline = 120 * UTIL_SECOND;
    fl->common.retry_period = 60 * UTIL_SECOND;
    static const char *const changed[] = {"leader-election", "leader-election-lease-duration",
                                          "leader-election-renew-deadline",
                                          "leader-election-retry-period", NULL};
    for (size_t i = 0; changed[i]; i++)
        util_flags_redefault(f, changed[i]);
    fl->resync = 30 * UTIL_SECOND;
    fl->timeout = UTIL_MINUTE;
    fl->retry_start = 100 * UTIL_MS;
    fl->retry_max = 30 * UTIL_SECOND;
    fl->worker_threads = 10;
    /* Upstream's shorthands -d and -g, as flags of their own here. */
    util_flags_string(f, "d", &fl->common.driver_addr, "Shorthand for --driver-addr.");
    util_flags_bool(f, "debug", &fl->debug,
                    "Logs all grpc requests and responses (credentials stripped), as -v=5 "
                    "does for the gRPC calls.");
    util_flags_bool(f, "g", &fl->debug, "Shorthand for --debug.");
    util_flags_duration(f, "timeout", &fl->timeout, "Timeout of each call to the COSI driver.");
    util_flags_duration(f, "resync", &fl->resync, "Resync interval of the controller.");
    util_flags_duration(f, "retry-interval-start", &fl->retry_start,
                        "Initial retry interval of a failed Bucket or BucketAccess. It doubles "
                        "with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &fl->retry_max,
                        "Maximum retry interval of a failed Bucket or BucketAccess.");
    util_flags_int(f, "worker-threads", &fl->worker_threads,
                   "Number of worker threads per queue: Buckets and BucketAccesses each get this "
                   "many.");
}

static bool given(const util_flags *f, const char *name, const char *shorthand)
{
    return util_flags_is_set(f, name) || (shorthand && util_flags_is_set(f, shorthand));
}

/* strconv.ParseBool's spellings. */
static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True", NULL};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False", NULL};
    for (size_t i = 0; yes[i]; i++)
        if (strcmp(s, yes[i]) == 0)
            return *out = true, 0;
    for (size_t i = 0; no[i]; i++)
        if (strcmp(s, no[i]) == 0)
            return *out = false, 0;
    return -1;
}

/* A flag not on the command line takes its environment variable. */
static void env_fallbacks(const util_flags *f, struct flags *fl)
{
    const char *v;
    if (!given(f, "kubeconfig", NULL) && (v = getenv("KUBECONFIG")) && *v)
        fl->common.kubeconfig = v;
    if (!given(f, "driver-addr", "d") && (v = getenv("DRIVER_ADDR")) && *v)
        fl->common.driver_addr = v;
    if (!given(f, "debug", "g") && (v = getenv("DEBUG")) && *v && parse_bool(v, &fl->debug) < 0) {
        fprintf(stderr, PROG ": invalid value \"%s\" of DEBUG for --debug: want true or false\n",
                v);
        exit(1);
    }
}

/* --debug: the gRPC request and response logs of -v=5, which strip
 * credentials, without everything else -v=5 turns on. */
static void apply_debug(const util_flags *f, bool debug)
{
    if (!debug || obs_log_enabled(5, "common/csi/client.c"))
        return;
    if (util_flags_is_set(f, "vmodule"))
        obs_warn("--debug: --vmodule decides the gRPC logs' level; add client=5 to it for them");
    else
        obs_log_set_vmodule("client=5");
}

static const char *lock_name(void *ud, const char *driver)
{
    char *buf = ud;
    char *n = csc_lease_name(driver);
    snprintf(buf, 320, "%s", n);
    free(n);
    return buf;
}

struct run_ctx {
    csc_ctrl_opts opts;
    csc_ctrl *ctrl;
};

static void run(void *ud)
{
    struct run_ctx *r = ud;
    if (csc_ctrl_new(&r->opts, &r->ctrl) < 0)
        obs_fatal_exit("cannot start the objectstorage-sidecar: %s", util_err_last());
}

int main(int argc, char **argv)
{
    /* One malloc arena: the workers mostly wait on the API server and the
     * driver, and per-thread arenas would keep what each touched. */
    mallopt(M_ARENA_MAX, 1);
    util_flags *f = util_flags_new(PROG, SIDECAR_VERSION);
    struct flags fl = {0};
    add_flags(f, &fl);
    util_flags_parse_or_exit(f, argc, argv);
    env_fallbacks(f, &fl);
    if (sidecar_flags_check(f, &fl.common) < 0)
        die(util_err_last());
    if (fl.worker_threads < 1)
        die("--worker-threads must be greater than zero");
    if (fl.timeout <= 0)
        die("--timeout must be greater than zero");
    if (fl.retry_start <= 0 || fl.retry_max < fl.retry_start)
        die("--retry-interval-start must be greater than zero and at most --retry-interval-max");
    if (fl.resync < 0)
        die("--resync must not be negative");
    apply_debug(f, fl.debug);
    obs_info("Version: %s", SIDECAR_VERSION);

    char lock[320];
    sidecar_opts so = {.component = CSC_COMPONENT,
                       .version = SIDECAR_VERSION,
                       .which = WHICH,
                       .timeout = fl.timeout,
                       .kubeconfig_env = true,
                       .healthz = true,
                       .release_on_exit = true, /* upstream releases on cancel */
                       .lock_name = lock_name,
                       .ud = lock};
    sidecar *s = NULL;
    if (sidecar_start(&fl.common, &so, &s) < 0)
        die(util_err_last());

    struct run_ctx r = {0};
    r.opts = (csc_ctrl_opts){.driver = sidecar_driver_name(s),
                             .cosi = sidecar_csi(s),
                             .kube = sidecar_kube(s),
                             .events = sidecar_recorder(s),
                             .metrics = sidecar_metrics(s),
                             .timeout = fl.timeout,
                             .retry_start = fl.retry_start,
                             .retry_max = fl.retry_max,
                             .resync = fl.resync,
                             .workers = fl.worker_threads};
    if (sidecar_serve(s, run, &r) < 0)
        die(util_err_last());
    sidecar_wait(s);
    csc_ctrl_free(r.ctrl);
    sidecar_free(s);
    util_flags_free(f);
    return 0;
}
