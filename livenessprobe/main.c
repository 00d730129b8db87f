/*
 * livenessprobe: flags with upstream's names and defaults, then, on a
 * thread of its own, the start (wait for the driver however long it takes,
 * GetPluginInfo for its name, open the HTTP port) while the main thread
 * waits for SIGTERM/SIGINT: a sidecar still waiting for its driver must stop
 * at once when the pod goes away. SIGTERM stops the servers (a probe under
 * way finishes) and exits 0.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "livenessprobe/livenessprobe.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

typedef struct app {
    const lp_flags *fl;
    const lp_config *cfg;
    lp_metrics metrics;
    lp_probe probe; /* owns the driver connection */
    char *driver;
    obs_http *http;
    obs_http *metrics_http; /* --metrics-address */
    char *start_err;        /* set when the start failed */
    atomic_bool start_done;
} app;

static void die(const char *msg)
{
    fprintf(stderr, "livenessprobe: %s\n", msg);
    exit(1);
}

static int start(app *a)
{
    /* No bound, as upstream: until the driver answers, the port stays
     * closed and the kubelet's probes fail with "connection refused". */
    csi_conn_opts co = {.connect_timeout = -1};
    int r = csi_conn_new(a->fl->csi_address, &co, &a->probe.csi);
    if (r < 0)
        return r;
    obs_info("Calling CSI driver to discover driver name");
    Csi__V1__GetPluginInfoResponse *info = NULL;
    csi_status st;
    util_duration t0 = util_now_mono();
    r = csi_get_plugin_info(a->probe.csi, 0, &info, &st);
    /* The name is not known yet: upstream counts this call as unknown-driver. */
    lp_metrics_observe(&a->metrics, NULL, "/csi.v1.Identity/GetPluginInfo", st.code,
                       util_now_mono() - t0);
    if (r < 0) {
        char *text = csi_status_text(&st);
        r = util_err_set(r, "Failed to get CSI driver name: %s", text);
        free(text);
        return r;
    }
    a->driver = util_strdup(info->name);
    csi__v1__get_plugin_info_response__free_unpacked(info, NULL);
    obs_info("CSI driver name: %s", a->driver);
    a->probe.driver = a->driver;
    if (a->metrics_http) {
        r = obs_http_start(a->metrics_http);
        if (r < 0)
            return r;
        obs_info("Separate metrics ServeMux listening on %s (port %d)", a->cfg->metrics_addr,
                 obs_http_port(a->metrics_http));
    }
    r = obs_http_start(a->http);
    if (r < 0)
        return r;
    obs_info("ServeMux listening on %s (port %d)", a->cfg->http_addr, obs_http_port(a->http));
    return 0;
}

static void *start_main(void *arg)
{
    app *a = arg;
    util_thread_name("start");
    if (start(a) < 0)
        a->start_err = util_strdup(util_err_last());
    atomic_store(&a->start_done, true);
    /* Wakes main's sigwait (SIGUSR1 is blocked in every thread). */
    kill(getpid(), SIGUSR1);
    return NULL;
}

int main(int argc, char **argv)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double start_time = (double)now.tv_sec + (double)now.tv_nsec / 1e9;

    /* Before any thread exists, so every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    util_flags *f = util_flags_new("livenessprobe", SIDECAR_VERSION);
    lp_flags fl;
    lp_flags_add(f, &fl);
    util_flags_parse_or_exit(f, argc, argv);
    lp_config cfg;
    if (obs_log_apply() < 0 || lp_flags_check(&fl, &cfg) < 0)
        die(util_err_last());

    app a = {.fl = &fl, .cfg = &cfg};
    a.probe = (lp_probe){.endpoint = fl.csi_address,
                         .socket_path = cfg.socket_path,
                         .timeout = fl.probe_timeout,
                         .metrics = &a.metrics};
    obs_registry *reg = obs_registry_new();
    /* The servers are made (addresses parsed and resolved) before the
     * driver is waited for, so a wrong address fails now, not after it. */
    if (lp_metrics_register(reg, start_time, &a.metrics) < 0 ||
        obs_http_new(cfg.http_flag, cfg.http_addr, reg, cfg.metrics_path, &a.http) < 0 ||
        obs_http_handle(a.http, "/healthz", lp_healthz, &a.probe) < 0 ||
        (cfg.metrics_addr && obs_http_new("metrics-address", cfg.metrics_addr, reg, fl.metrics_path,
                                          &a.metrics_http) < 0))
        die(util_err_last());
    obs_info("Version: %s", SIDECAR_VERSION);

    pthread_t th;
    if (pthread_create(&th, NULL, start_main, &a) != 0)
        die("cannot start a thread");
    bool joined = false;
    for (;;) {
        int sig = 0;
        sigwait(&sigs, &sig);
        if (sig != SIGUSR1)
            obs_info("received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        if (sig != SIGUSR1 && !atomic_load(&a.start_done)) {
            /* Still waiting for the driver: nothing to finish, and the
             * wait cannot be interrupted. */
            _exit(0);
        }
        if (!joined) {
            pthread_join(th, NULL);
            joined = true;
            if (a.start_err)
                die(a.start_err);
        }
        if (sig != SIGUSR1)
            break;
    }

    /* The HTTP threads first: a probe under way still uses the connection. */
    obs_http_free(a.http);
    obs_http_free(a.metrics_http);
    lp_probe_clear(&a.probe);
    obs_registry_free(reg);
    free(a.driver);
    lp_config_clear(&cfg);
    util_flags_free(f);
    return 0;
}
