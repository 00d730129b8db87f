/*
 * csi-node-driver-registrar: flags with node-driver-registrar's names and
 * defaults, the driver connection (common/sidecar), then kubelet mode (the
 * registration socket) or direct mode (the registrar writes the Node and
 * CSINode itself), /healthz, and an orderly stop on SIGTERM (socket
 * removed, exit 0) or on the kubelet's NotifyRegistrationStatus(false)
 * (exit 1, so the container restarts and registers again).
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registrar/registrar.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

/* The kubelet's NodeGetInfo bound (direct mode makes the kubelet's call). */
#define NODE_GET_INFO_TIMEOUT (2 * UTIL_MINUTE)

static void die(const char *msg)
{
    fprintf(stderr, "csi-node-driver-registrar: %s\n", msg);
    exit(1);
}

/* NotifyRegistrationStatus(false): wake main's sigwait; main stops in
 * order and exits 1. SIGUSR1 is blocked in every thread. */
static void rejected(void *ud, const char *error)
{
    (void)error;
    atomic_int *exit_code = ud;
    atomic_store(exit_code, 1);
    kill(getpid(), SIGUSR1);
}

static int wait_signal(const sigset_t *set)
{
    int sig = 0;
    sigwait(set, &sig);
    if (sig != SIGUSR1)
        obs_info("received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    return sig;
}

int main(int argc, char **argv)
{
    /* Before any thread exists, so every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    util_flags *f = util_flags_new("csi-node-driver-registrar", SIDECAR_VERSION);
    sidecar_flags sf;
    reg_flags fl;
    sidecar_flags_add(f, &sf, SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE);
    reg_flags_add(f, &fl);
    util_flags_parse_or_exit(f, argc, argv);
    if (sidecar_flags_check(f, &sf) < 0)
        die(util_err_last());
    reg_config cfg;
    int r = reg_flags_check(&fl, getenv("NODE_NAME"), &cfg);
    if (r == REG_EXIT_NOW) {
        /* Old exec liveness probes run the binary in this mode: a no-op. */
        util_flags_free(f);
        return 0;
    }
    if (r < 0)
        die(util_err_last());
    obs_info("Version: %s", SIDECAR_VERSION);
    obs_info("Running node-driver-registrar in mode=%s",
             cfg.direct ? "direct" : (*fl.mode ? fl.mode : "registration"));
    if (fl.connection_timeout != 0)
        obs_warn("--connection-timeout is deprecated and will have no effect");
    if (fl.enable_pprof)
        obs_warn("--enable-pprof is accepted for compatibility; there is no profiler here");

    sidecar_opts so = {.component = "csi-node-driver-registrar",
                       .version = SIDECAR_VERSION,
                       .which = SIDECAR_FLAGS_CSI | (cfg.direct ? SIDECAR_FLAGS_KUBE : 0),
                       .timeout = fl.timeout};
    sidecar *s = NULL;
    if (sidecar_start(&sf, &so, &s) < 0)
        die(util_err_last());
    const char *driver = sidecar_driver_name(s);

    atomic_int exit_code = 0;
    reg_kubelet *kl = NULL;
    reg_direct *dm = NULL;
    nodereg_driver nd = {0};
    char *sock = NULL;
    if (!cfg.direct) {
        sock = reg_socket_path(fl.plugin_registration_path, driver);
        reg_kubelet_opts ko = {.driver = driver,
                               .endpoint = fl.kubelet_registration_path,
                               .socket_path = sock,
                               .on_rejected = rejected,
                               .ud = &exit_code};
        if (reg_kubelet_start(&ko, &kl) < 0)
            die(util_err_last());
    } else {
        Csi__V1__NodeGetInfoResponse *info = NULL;
        csi_status st;
        if (csi_node_get_info(sidecar_csi(s), NODE_GET_INFO_TIMEOUT, &info, &st) < 0) {
            char *msg =
                util_asprintf("NodeGetInfo failed: %s: %s", csi_code_go_name(st.code), st.message);
            die(msg);
        }
        r = nodereg_driver_from_info(driver, info, &nd);
        csi__v1__node_get_info_response__free_unpacked(info, NULL);
        if (r < 0)
            die(util_err_last());
        reg_direct_opts dopts = {.kube = sidecar_kube(s),
                                 .events = sidecar_recorder(s),
                                 .node_name = cfg.node_name,
                                 .driver = &nd};
        if (reg_direct_start(&dopts, &dm) < 0)
            die(util_err_last());
    }

    reg_health health = {
        .csi = sidecar_csi(s), .driver = driver, .socket_path = sock, .timeout = fl.timeout};
    obs_http *http = NULL;
    if (cfg.http_addr) {
        if (obs_http_new(cfg.http_flag, cfg.http_addr, NULL, NULL, &http) < 0 ||
            obs_http_handle(http, "/healthz", reg_healthz, &health) < 0 || obs_http_start(http) < 0)
            die(util_err_last());
        obs_info("Serving /healthz on %s (port %d)", cfg.http_addr, obs_http_port(http));
    }

    wait_signal(&sigs);
    obs_http_free(http);
    reg_kubelet_free(kl); /* removes the socket */
    if (dm && reg_direct_stop(dm, fl.cleanup_on_exit) < 0)
        atomic_store(&exit_code, 1);
    nodereg_driver_clear(&nd);
    free(sock);
    sidecar_free(s);
    reg_config_clear(&cfg);
    util_flags_free(f);
    return atomic_load(&exit_code);
}
