/*
 * The shared start-up of the sidecars: common flags with upstream's names
 * and defaults, the driver connection, the API clients, metrics, the HTTP
 * endpoint, leader election and signal handling. See sidecar.h.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cosi/cosi.h"
#include "sidecar/sidecar.h"

struct sidecar {
    sidecar_flags sf;
    sidecar_opts o;
    sigset_t signals;
    obs_registry *metrics;
    obs_metric *csi_seconds;
    _Atomic(const char *) driver_label;
    char *driver_name;
    csi_conn *csi;
    kube_config *cfg;
    kube_client *kube;
    kube_client *leader_kube;
    kube_recorder *recorder;
    struct {
        char *component;
        kube_recorder *r;
    } * recorders; /* sidecar_recorder_for: the modules' own */
    size_t n_recorders;
    obs_http *http;
    kube_leader *leader;
    void (*run)(void *ud);
    void *run_ud;
    pthread_t run_th;
    atomic_bool running;
    atomic_bool run_done; /* `run` returned: the controllers are up */
    atomic_int exit_code; /* asked by sidecar_shutdown; -1: not asked */
    unsigned caps_read;   /* SIDECAR_CAPS_* kinds in `caps` */
    csi_caps caps;
};

/* ---- flags ----------------------------------------------------------------------- */

int sidecar_flags_add(util_flags *f, sidecar_flags *sf, unsigned which)
{
    memset(sf, 0, sizeof(*sf));
    sf->csi_address = "/run/csi/socket";
    sf->driver_addr = "unix:///var/lib/cosi/cosi.sock";
    sf->kube_api_qps = 5;
    sf->kube_api_burst = 10;
    sf->lease_duration = 15 * UTIL_SECOND;
    sf->renew_deadline = 10 * UTIL_SECOND;
    sf->retry_period = 5 * UTIL_SECOND;
    sf->metrics_path = "/metrics";
    int r = 0;
    if (which & SIDECAR_FLAGS_CSI)
        r |= util_flags_string(f, "csi-address", &sf->csi_address,
                               "The gRPC endpoint for Target CSI Volume.");
    if (which & SIDECAR_FLAGS_COSI)
        r |= util_flags_string(f, "driver-addr", &sf->driver_addr,
                               "path to unix domain socket where driver is listening");
    if (which & SIDECAR_FLAGS_KUBE) {
        r |= util_flags_string(f, "kubeconfig", &sf->kubeconfig,
                               "Absolute path to the kubeconfig file. Required only when running "
                               "out of cluster.");
        r |= util_flags_double(f, "kube-api-qps", &sf->kube_api_qps,
                               "QPS to use while communicating with the kubernetes apiserver.");
        r |= util_flags_int(f, "kube-api-burst", &sf->kube_api_burst,
                            "Burst to use while communicating with the kubernetes apiserver.");
    }
    if (which & SIDECAR_FLAGS_MASTER)
        r |= util_flags_string(f, "master", &sf->master,
                               "Master URL to build a client config from. Either this or "
                               "kubeconfig needs to be set if the provisioner is being run out of "
                               "cluster.");
    if (which & SIDECAR_FLAGS_LEADER) {
        r |= util_flags_bool(f, "leader-election", &sf->leader_election, "Enable leader election.");
        r |= util_flags_string(f, "leader-election-namespace", &sf->leader_election_namespace,
                               "Namespace where the leader election resource lives. Defaults to "
                               "the pod namespace if not set.");
        r |= util_flags_duration(f, "leader-election-lease-duration", &sf->lease_duration,
                                 "Duration, in seconds, that non-leader candidates will wait to "
                                 "force acquire leadership.");
        r |= util_flags_duration(f, "leader-election-renew-deadline", &sf->renew_deadline,
                                 "Duration, in seconds, that the acting leader will retry "
                                 "refreshing leadership before giving up.");
        r |= util_flags_duration(f, "leader-election-retry-period", &sf->retry_period,
                                 "Duration, in seconds, the LeaderElector clients should wait "
                                 "between tries of actions.");
        r |= util_flags_string(f, "leader-election-labels", &sf->leader_election_labels,
                               "List of labels to add to lease when given replica becomes leader. "
                               "Formatted as a comma seperated list of key:value labels.");
    }
    if (which & SIDECAR_FLAGS_HTTP) {
        r |= util_flags_string(f, "http-endpoint", &sf->http_endpoint,
                               "The TCP network address where the HTTP server for diagnostics, "
                               "including metrics and leader election health check, will listen "
                               "(example: `:8080`). The default is empty string, which means the "
                               "server is disabled.");
        r |= util_flags_string(f, "metrics-address", &sf->metrics_address,
                               "(deprecated) The TCP network address where the prometheus metrics "
                               "endpoint will listen (example: `:8080`). The default is empty "
                               "string, which means metrics endpoint is disabled. Only one of "
                               "`--metrics-address` and `--http-endpoint` can be set.");
        r |= util_flags_string(f, "metrics-path", &sf->metrics_path,
                               "The HTTP path where prometheus metrics will be exposed. Default is "
                               "`/metrics`.");
    }
    r |= util_flags_bool(f, "automaxprocs", &sf->automaxprocs,
                         "Accepted for compatibility; no effect here (there is no Go runtime to "
                         "size).");
    r |= obs_log_add_flags(f);
    return r ? -EINVAL : 0;
}

void sidecar_flags_cosi_leader(util_flags *f, sidecar_flags *sf)
{
    sf->leader_election = true;
    sf->lease_duration = 150 * UTIL_SECOND;
    sf->renew_deadline = 120 * UTIL_SECOND;
    sf->retry_period = 60 * UTIL_SECOND;
    static const char *const changed[] = {"leader-election", "leader-election-lease-duration",
                                          "leader-election-renew-deadline",
                                          "leader-election-retry-period"};
    for (size_t i = 0; i < sizeof(changed) / sizeof(changed[0]); i++)
        util_flags_redefault(f, changed[i]);
}

int sidecar_gates_parse(const char *text, const sidecar_gate *gates)
{
    char *copy = util_strdup(text ? text : "");
    int rc = 0;
    for (char *save = NULL, *kv = strtok_r(copy, ",", &save); kv && rc == 0;
         kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            rc = util_err_set(-EINVAL, "--feature-gates: expected key=true|false");
            break;
        }
        *eq = '\0';
        bool on = strcmp(eq + 1, "true") == 0;
        if (!on && strcmp(eq + 1, "false") != 0) {
            rc = util_err_set(-EINVAL, "--feature-gates: values must be true or false");
            break;
        }
        const sidecar_gate *g = gates;
        while (g && g->name && strcmp(g->name, kv) != 0)
            g++;
        if (!g || !g->name)
            rc = util_err_set(-EINVAL, "--feature-gates: unrecognized feature gate: %s", kv);
        else if (g->value)
            *g->value = on;
    }
    free(copy);
    return rc;
}

int sidecar_flags_check(const util_flags *f, const sidecar_flags *sf)
{
    (void)f;
    int r = obs_log_apply();
    if (r < 0)
        return r;
    if (sf->http_endpoint && *sf->http_endpoint && sf->metrics_address && *sf->metrics_address)
        return util_err_set(-EINVAL,
                            "only one of `--metrics-address` and `--http-endpoint` can be set.");
    if (sf->leader_election) {
        if (sf->lease_duration <= sf->renew_deadline)
            return util_err_set(-EINVAL, "--leader-election-lease-duration must be greater than "
                                         "--leader-election-renew-deadline");
        /* client-go: renewDeadline > JitterFactor (1.2) * retryPeriod */
        if ((double)sf->renew_deadline <= 1.2 * (double)sf->retry_period)
            return util_err_set(-EINVAL, "--leader-election-renew-deadline must be greater than "
                                         "1.2 x --leader-election-retry-period");
    }
    if (sf->kube_api_burst < 0)
        return util_err_set(-EINVAL, "--kube-api-burst must not be negative");
    return 0;
}

/* ---- CSI metrics ---------------------------------------------------------------------- */

void sidecar_csi_hook(void *ud, const char *method, const char *code_name, util_duration took)
{
    sidecar *s = ud;
    if (!s->csi_seconds)
        return;
    const char *driver = atomic_load(&s->driver_label);
    int code = CSI_UNKNOWN;
    csi_code_from_name(code_name, &code);
    const char *v[] = {driver ? driver : "unknown-driver", method, csi_code_go_name(code)};
    obs_histogram_observe(s->csi_seconds, v, (double)took / (double)UTIL_SECOND);
}

/* ---- start ------------------------------------------------------------------------- */

static void healthz_ok(void *ud, int *code, char **body, const char **ctype)
{
    (void)ud;
    *code = 200;
    *body = util_strdup("ok");
    *ctype = "text/plain; charset=utf-8";
}

static void healthz_leader(void *ud, int *code, char **body, const char **ctype)
{
    sidecar *s = ud;
    bool ok = kube_leader_healthy(s->leader, 20 * UTIL_SECOND);
    *code = ok ? 200 : 500;
    *body = util_strdup(ok ? "ok" : "leader election lease has not been renewed in time");
    *ctype = "text/plain; charset=utf-8";
}

/* A COSI driver: the same connection (loss exits as for CSI when asked),
 * its name from DriverGetInfo, which also shows it is up. */
static int start_cosi(sidecar *s, const sidecar_flags *sf, const sidecar_opts *opts)
{
    csi_conn_opts co = {.on_call = sidecar_csi_hook,
                        .on_call_ud = s,
                        .max_log_len = opts->max_log_len,
                        .on_loss = opts->exit_on_csi_loss ? csi_loss_exit : NULL};
    int r = csi_conn_new(sf->driver_addr, &co, &s->csi);
    if (r < 0)
        return r;
    csi_status st;
    Cosi__V1alpha1__DriverGetInfoResponse *info = NULL;
    r = cosi_driver_get_info(s->csi, opts->timeout, &info, &st);
    if (r < 0)
        return util_err_set(r, "error getting COSI driver info: %s: %s", csi_code_name(st.code),
                            st.message);
    s->driver_name = util_strdup(info->name);
    cosi__v1alpha1__driver_get_info_response__free_unpacked(info, NULL);
    atomic_store(&s->driver_label, s->driver_name);
    obs_info("Detected COSI driver %s", s->driver_name);
    return 0;
}

static kube_recorder *recorder_new(sidecar *s, const char *component)
{
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    return kube_recorder_new(s->kube, component, host);
}

int sidecar_start(const sidecar_flags *sf, const sidecar_opts *opts, sidecar **out)
{
    *out = NULL;
    sidecar *s = util_calloc(1, sizeof(*s));
    s->sf = *sf;
    s->o = *opts;
    /* Before any thread exists, so every thread inherits the mask. */
    sigemptyset(&s->signals);
    sigaddset(&s->signals, SIGTERM);
    sigaddset(&s->signals, SIGINT);
    sigaddset(&s->signals, SIGUSR1); /* sidecar_shutdown */
    atomic_init(&s->exit_code, -1);
    pthread_sigmask(SIG_BLOCK, &s->signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    s->metrics = obs_registry_new();
    static const char *const labels[] = {"driver_name", "method_name", "grpc_status_code", NULL};
    static const double buckets[] = {.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600};
    s->csi_seconds = obs_histogram_new(s->metrics, "csi_sidecar_operations_seconds",
                                       "Time spent in CSI operations, by driver, gRPC method and "
                                       "result code, in seconds.",
                                       labels, buckets, sizeof(buckets) / sizeof(buckets[0]));
    int r = 0;
    if (opts->which & SIDECAR_FLAGS_CSI) {
        csi_conn_opts co = {.on_call = sidecar_csi_hook,
                            .on_call_ud = s,
                            .max_log_len = opts->max_log_len,
                            .on_loss = opts->exit_on_csi_loss ? csi_loss_exit : NULL};
        r = csi_conn_new(sf->csi_address, &co, &s->csi);
        if (r < 0)
            goto fail;
        csi_status st;
        if (opts->probe) {
            r = csi_probe_until_ready(s->csi, opts->timeout, 0, &st);
            if (r < 0) {
                r = util_err_set(r, "error waiting for CSI driver to be ready: %s: %s",
                                 csi_code_name(st.code), st.message);
                goto fail;
            }
        }
        Csi__V1__GetPluginInfoResponse *info = NULL;
        r = csi_get_plugin_info(s->csi, opts->timeout, &info, &st);
        if (r < 0) {
            r = util_err_set(r, "error getting CSI driver name: %s: %s", csi_code_name(st.code),
                             st.message);
            goto fail;
        }
        s->driver_name = util_strdup(info->name);
        csi__v1__get_plugin_info_response__free_unpacked(info, NULL);
        atomic_store(&s->driver_label, s->driver_name);
        obs_info("Detected CSI driver %s", s->driver_name);
    }
    if (opts->which & SIDECAR_FLAGS_COSI) {
        r = start_cosi(s, sf, opts);
        if (r < 0)
            goto fail;
    }
    if (opts->which & SIDECAR_FLAGS_KUBE) {
        r = kube_config_load(sf->kubeconfig, sf->master, opts->kubeconfig_env, &s->cfg);
        if (r < 0)
            goto fail;
        char *ua = util_asprintf("%s/%s", opts->component, opts->version);
        kube_client_opts ko = {.qps = sf->kube_api_qps,
                               .burst = sf->kube_api_burst,
                               .user_agent = ua,
                               .metrics = s->metrics};
        r = kube_client_new(s->cfg, &ko, &s->kube);
        if (r == 0 && sf->leader_election) {
            /* Its own client: throttling elsewhere never starves the lease. */
            kube_client_opts lo = {.qps = 5, .burst = 10, .user_agent = ua};
            r = kube_client_new(s->cfg, &lo, &s->leader_kube);
        }
        free(ua);
        if (r < 0)
            goto fail;
        s->recorder = recorder_new(s, opts->component);
    }
    const char *addr =
        sf->http_endpoint && *sf->http_endpoint ? sf->http_endpoint : sf->metrics_address;
    if ((opts->which & SIDECAR_FLAGS_HTTP) && addr && *addr) {
        bool deprecated = !(sf->http_endpoint && *sf->http_endpoint);
        r = obs_http_new(deprecated ? "metrics-address" : "http-endpoint", addr, s->metrics,
                         sf->metrics_path, &s->http);
        if (r < 0)
            goto fail;
        if (opts->healthz)
            obs_http_handle(s->http, "/healthz", healthz_ok, s);
        /* Upstream registers the lease check only with --http-endpoint. */
        if (sf->leader_election && !deprecated)
            obs_http_handle(s->http, "/healthz/leader-election", healthz_leader, s);
    }
    *out = s;
    return 0;
fail:
    sidecar_free(s);
    return r;
}

/* ---- serving ----------------------------------------------------------------------- */

static void *run_main(void *arg)
{
    sidecar *s = arg;
    util_thread_name("controller");
    s->run(s->run_ud);
    atomic_store(&s->run_done, true);
    return NULL;
}

static void start_run(sidecar *s)
{
    if (atomic_exchange(&s->running, true))
        return;
    if (pthread_create(&s->run_th, NULL, run_main, s) != 0)
        obs_fatal_exit("cannot start the controllers' thread");
}

static void started_leading(void *ud)
{
    start_run(ud);
}

static void stopped_leading(void *ud)
{
    (void)ud;
    obs_fatal_exit("Stopped leading");
}

int sidecar_http_port(sidecar *s)
{
    return s->http ? obs_http_port(s->http) : 0;
}

int sidecar_http_handle(sidecar *s, const char *path, obs_http_fn fn, void *ud)
{
    if (!s->http)
        return 0;
    return obs_http_handle(s->http, path, fn, ud);
}

int sidecar_serve(sidecar *s, void (*run)(void *ud), void *ud)
{
    s->run = run;
    s->run_ud = ud;
    if (s->http) {
        int r = obs_http_start(s->http);
        if (r < 0)
            return r;
    }
    if (!s->sf.leader_election) {
        start_run(s);
        return 0;
    }
    const char *lock = s->o.lock_name ? s->o.lock_name(s->o.ud, s->driver_name) : s->o.component;
    kube_leader_opts lo = {.lock_name = lock,
                           .ns = s->sf.leader_election_namespace,
                           .lease_duration = s->sf.lease_duration,
                           .renew_deadline = s->sf.renew_deadline,
                           .retry_period = s->sf.retry_period,
                           .labels = s->sf.leader_election_labels,
                           .release_on_stop = s->o.release_on_exit,
                           .metrics = s->metrics,
                           .events = s->recorder,
                           .on_started_leading = started_leading,
                           .on_stopped_leading = stopped_leading,
                           .ud = s};
    return kube_leader_start(s->leader_kube, &lo, &s->leader);
}

int sidecar_wait(sidecar *s)
{
    int sig = 0;
    sigwait(&s->signals, &sig);
    int code = atomic_load(&s->exit_code);
    if (sig != SIGUSR1)
        obs_info("received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    if (code < 0 || sig != SIGUSR1)
        code = 0;
    /* Still starting (waiting minutes for a cache to sync from a slow API
     * server, say): nothing is ours to finish or hand over yet, and waiting
     * for the start would keep a pod in Terminating; upstream's sidecars die
     * at once here too. */
    /* Not leading yet (a lease request may hang on a silent API server
     * for its whole timeout) is the same: nothing to hand over. */
    if (!atomic_load(&s->run_done)) {
        obs_info("%s: exiting now",
                 atomic_load(&s->running) ? "the controllers are still starting" : "not leading");
        _exit(code);
    }
    return code;
}

void sidecar_shutdown(sidecar *s, int code)
{
    int none = -1;
    if (atomic_compare_exchange_strong(&s->exit_code, &none, code))
        kill(getpid(), SIGUSR1);
}

csi_conn *sidecar_csi(sidecar *s)
{
    return s->csi;
}

const char *sidecar_driver_name(sidecar *s)
{
    return s->driver_name;
}

kube_client *sidecar_kube(sidecar *s)
{
    return s->kube;
}

kube_config *sidecar_kube_config(sidecar *s)
{
    return s->cfg;
}

obs_registry *sidecar_metrics(sidecar *s)
{
    return s->metrics;
}

kube_recorder *sidecar_recorder(sidecar *s)
{
    return s->recorder;
}

kube_recorder *sidecar_recorder_for(sidecar *s, const char *component)
{
    if (!s->kube)
        return NULL;
    if (strcmp(component, s->o.component) == 0)
        return s->recorder;
    for (size_t i = 0; i < s->n_recorders; i++)
        if (strcmp(s->recorders[i].component, component) == 0)
            return s->recorders[i].r;
    s->recorders = realloc(s->recorders, (s->n_recorders + 1) * sizeof(*s->recorders));
    if (!s->recorders)
        abort();
    s->recorders[s->n_recorders].component = util_strdup(component);
    s->recorders[s->n_recorders].r = recorder_new(s, component);
    return s->recorders[s->n_recorders++].r;
}

int sidecar_caps(sidecar *s, unsigned which, csi_caps *caps, csi_status *st)
{
    *caps = (csi_caps){0};
    memset(st, 0, sizeof(*st));
    unsigned want = which & ~s->caps_read;
    if (want & SIDECAR_CAPS_PLUGIN) {
        Csi__V1__GetPluginCapabilitiesResponse *pc = NULL;
        if (csi_get_plugin_capabilities(s->csi, s->o.timeout, &pc, st) < 0)
            return -EIO;
        csi_caps_from_plugin(&s->caps, pc);
        csi__v1__get_plugin_capabilities_response__free_unpacked(pc, NULL);
        s->caps_read |= SIDECAR_CAPS_PLUGIN;
    }
    if (want & SIDECAR_CAPS_CONTROLLER) {
        Csi__V1__ControllerGetCapabilitiesResponse *cc = NULL;
        if (csi_controller_get_capabilities(s->csi, s->o.timeout, &cc, st) < 0)
            return -EIO;
        csi_caps_from_controller(&s->caps, cc);
        csi__v1__controller_get_capabilities_response__free_unpacked(cc, NULL);
        s->caps_read |= SIDECAR_CAPS_CONTROLLER;
    }
    if (want & SIDECAR_CAPS_NODE) {
        Csi__V1__NodeGetCapabilitiesResponse *nc = NULL;
        if (csi_node_get_capabilities(s->csi, s->o.timeout, &nc, st) < 0)
            return -EIO;
        csi_caps_from_node(&s->caps, nc);
        csi__v1__node_get_capabilities_response__free_unpacked(nc, NULL);
        s->caps_read |= SIDECAR_CAPS_NODE;
    }
    if (which & SIDECAR_CAPS_PLUGIN) {
        caps->plugin = s->caps.plugin;
        caps->expansion = s->caps.expansion;
    }
    if (which & SIDECAR_CAPS_CONTROLLER)
        caps->controller = s->caps.controller;
    if (which & SIDECAR_CAPS_NODE)
        caps->node = s->caps.node;
    return 0;
}

void sidecar_free(sidecar *s)
{
    if (!s)
        return;
    if (atomic_load(&s->running))
        pthread_join(s->run_th, NULL);
    kube_leader_stop(s->leader);
    obs_http_free(s->http);
    kube_recorder_free(s->recorder, 2 * UTIL_SECOND);
    for (size_t i = 0; i < s->n_recorders; i++) {
        kube_recorder_free(s->recorders[i].r, 2 * UTIL_SECOND);
        free(s->recorders[i].component);
    }
    free(s->recorders);
    kube_client_free(s->leader_kube);
    kube_client_free(s->kube);
    kube_config_free(s->cfg);
    csi_conn_free(s->csi);
    obs_registry_free(s->metrics);
    free(s->driver_name);
    free(s);
}
