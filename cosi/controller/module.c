/*
 * objectstorage-controller as a controller module: upstream's flags
 * (--kubeconfig, klog's) plus the common sidecar ones, COSI's leader
 * election defaults (on, 150s/120s/60s), then the controller
 * (controller.c) while this replica leads.
 */
#include <errno.h>
#include <stdlib.h>

#include "controller.h"
#include "cosi/cosi.h"
#include "sidecar/sidecar.h"

typedef struct cctl_module_state {
    util_duration resync, retry_start, retry_max;
    int worker_threads;
    cctl_ctrl_opts opts;
    cctl_ctrl *ctrl;
} cctl_module_state;

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

static void *mod_new(util_flags *f, sidecar_flags *common)
{
    cctl_module_state *m = util_calloc(1, sizeof(*m));
    sidecar_flags_cosi_leader(f, common);
    m->resync = 30 * UTIL_SECOND;
    m->retry_start = 100 * UTIL_MS;
    m->retry_max = 30 * UTIL_SECOND;
    m->worker_threads = 10;
    util_flags_duration(f, "resync", &m->resync,
                        "Resync interval of the BucketClaim informer (every claim is looked at "
                        "again this often).");
    util_flags_duration(f, "retry-interval-start", &m->retry_start,
                        "Initial retry interval of a failed BucketClaim. It doubles with each "
                        "failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &m->retry_max,
                        "Maximum retry interval of a failed BucketClaim.");
    util_flags_int(f, "worker-threads", &m->worker_threads,
                   "Number of BucketClaims processed at once.");
    add_klog_legacy(f);
    return m;
}

static int mod_configure(void *state, const util_flags *f, sidecar_opts *so)
{
    (void)f;
    cctl_module_state *m = state;
    if (m->worker_threads < 1)
        return util_err_set(-EINVAL, "--worker-threads must be greater than zero");
    if (m->retry_start <= 0)
        return util_err_set(-EINVAL, "--retry-interval-start must be greater than zero");
    if (m->retry_max < m->retry_start)
        return util_err_set(-EINVAL,
                            "--retry-interval-max must not be less than --retry-interval-start");
    if (m->resync < 0)
        return util_err_set(-EINVAL, "--resync must not be negative");
    so->component = CCTL_COMPONENT;
    /* $KUBECONFIG is read when --kubeconfig is unset or empty, as upstream
     * (viper's env binding, then its own fallback) does. */
    so->kubeconfig_env = true;
    so->healthz = true;
    so->release_on_exit = true;
    return 0;
}

/* One lease for the cluster, whatever the drivers. */
static char *lock_name(const char *driver)
{
    (void)driver;
    return cosi_lease_name(CCTL_LOCK_NAME);
}

static int mod_prepare(void *state, sidecar *s)
{
    cctl_module_state *m = state;
    m->opts = (cctl_ctrl_opts){.kube = sidecar_kube(s),
                               .events = sidecar_recorder(s),
                               .metrics = sidecar_metrics(s),
                               .retry_start = m->retry_start,
                               .retry_max = m->retry_max,
                               .resync = m->resync,
                               .workers = m->worker_threads};
    return 0;
}

static int mod_start(void *state)
{
    cctl_module_state *m = state;
    return cctl_ctrl_start(&m->opts, &m->ctrl);
}

static int mod_stop(void *state)
{
    cctl_module_state *m = state;
    cctl_ctrl_stop(m->ctrl);
    m->ctrl = NULL;
    return 0;
}

static void mod_free(void *state)
{
    free(state);
}

const sidecar_module cctl_module = {
    .name = "objectstorage-controller",
    .prog = "objectstorage-controller",
    .title = "the controller",
    .which = SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP,
    /* The workers mostly wait on the API server: one malloc arena serves
     * them, instead of one per busy thread, each keeping what it touched. */
    .malloc_arenas = 1,
    .new = mod_new,
    .configure = mod_configure,
    .lock_name = lock_name,
    .prepare = mod_prepare,
    .start = mod_start,
    .stop = mod_stop,
    .free = mod_free,
};
