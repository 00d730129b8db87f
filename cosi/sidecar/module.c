/*
 * objectstorage-sidecar as a controller module: flags with upstream's names
 * and defaults (its own --driver-addr, --kubeconfig and --debug, the common
 * sidecar ones with COSI's leader election timings), DriverGetInfo for the
 * name (common/sidecar), then the controller (controller.c) while this
 * replica leads. As upstream's viper does, --kubeconfig, --driver-addr and
 * --debug not given on the command line take a non-empty KUBECONFIG,
 * DRIVER_ADDR or DEBUG.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cosi/sidecar/cosisidecar.h"
#include "sidecar/sidecar.h"

typedef struct csc_module_state {
    sidecar_flags *common;
    util_duration resync, timeout, retry_start, retry_max;
    int worker_threads;
    bool debug;
    csc_ctrl_opts opts;
    csc_ctrl *ctrl;
} csc_module_state;

static void *mod_new(util_flags *f, sidecar_flags *common)
{
    csc_module_state *m = util_calloc(1, sizeof(*m));
    m->common = common;
    sidecar_flags_cosi_leader(f, common);
    m->resync = 30 * UTIL_SECOND;
    m->timeout = UTIL_MINUTE;
    m->retry_start = 100 * UTIL_MS;
    m->retry_max = 30 * UTIL_SECOND;
    m->worker_threads = 10;
    /* Upstream's shorthands -d and -g, as flags of their own here. */
    util_flags_string(f, "d", &common->driver_addr, "Shorthand for --driver-addr.");
    util_flags_bool(f, "debug", &m->debug,
                    "Logs all grpc requests and responses (credentials stripped), as -v=5 "
                    "does for the gRPC calls.");
    util_flags_bool(f, "g", &m->debug, "Shorthand for --debug.");
    util_flags_duration(f, "timeout", &m->timeout, "Timeout of each call to the COSI driver.");
    util_flags_duration(f, "resync", &m->resync, "Resync interval of the controller.");
    util_flags_duration(f, "retry-interval-start", &m->retry_start,
                        "Initial retry interval of a failed Bucket or BucketAccess. It doubles "
                        "with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &m->retry_max,
                        "Maximum retry interval of a failed Bucket or BucketAccess.");
    util_flags_int(f, "worker-threads", &m->worker_threads,
                   "Number of worker threads per queue: Buckets and BucketAccesses each get this "
                   "many.");
    return m;
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
static int env_fallbacks(const util_flags *f, csc_module_state *m)
{
    const char *v;
    if (!given(f, "kubeconfig", NULL) && (v = getenv("KUBECONFIG")) && *v)
        m->common->kubeconfig = v;
    if (!given(f, "driver-addr", "d") && (v = getenv("DRIVER_ADDR")) && *v)
        m->common->driver_addr = v;
    if (!given(f, "debug", "g") && (v = getenv("DEBUG")) && *v && parse_bool(v, &m->debug) < 0) {
        return util_err_set(-EINVAL,
                            "invalid value \"%s\" of DEBUG for --debug: want true or false", v);
    }
    return 0;
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

static int mod_configure(void *state, const util_flags *f, sidecar_opts *so)
{
    csc_module_state *m = state;
    if (env_fallbacks(f, m) < 0)
        return -EINVAL;
    if (m->worker_threads < 1)
        return util_err_set(-EINVAL, "--worker-threads must be greater than zero");
    if (m->timeout <= 0)
        return util_err_set(-EINVAL, "--timeout must be greater than zero");
    if (m->retry_start <= 0 || m->retry_max < m->retry_start)
        return util_err_set(-EINVAL, "--retry-interval-start must be greater than zero and at "
                                     "most --retry-interval-max");
    if (m->resync < 0)
        return util_err_set(-EINVAL, "--resync must not be negative");
    apply_debug(f, m->debug);
    so->component = CSC_COMPONENT;
    so->timeout = m->timeout;
    so->kubeconfig_env = true;
    so->healthz = true;
    so->release_on_exit = true; /* upstream releases on cancel */
    return 0;
}

static int mod_prepare(void *state, sidecar *s)
{
    csc_module_state *m = state;
    m->opts = (csc_ctrl_opts){.driver = sidecar_driver_name(s),
                              .cosi = sidecar_csi(s),
                              .kube = sidecar_kube(s),
                              .events = sidecar_recorder(s),
                              .metrics = sidecar_metrics(s),
                              .timeout = m->timeout,
                              .retry_start = m->retry_start,
                              .retry_max = m->retry_max,
                              .resync = m->resync,
                              .workers = m->worker_threads};
    return 0;
}

static int mod_start(void *state)
{
    csc_module_state *m = state;
    return csc_ctrl_new(&m->opts, &m->ctrl);
}

static int mod_stop(void *state)
{
    csc_module_state *m = state;
    csc_ctrl_free(m->ctrl);
    m->ctrl = NULL;
    return 0;
}

static void mod_free(void *state)
{
    free(state);
}

const sidecar_module csc_module = {
    .name = "objectstorage-sidecar",
    .prog = "objectstorage-sidecar",
    .title = "the objectstorage-sidecar",
    .which = SIDECAR_FLAGS_COSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP,
    /* The workers mostly wait on the API server and the driver, and
     * per-thread arenas would keep what each touched. */
    .malloc_arenas = 1,
    .new = mod_new,
    .configure = mod_configure,
    .lock_name = csc_lease_name,
    .prepare = mod_prepare,
    .start = mod_start,
    .stop = mod_stop,
    .free = mod_free,
};
