/*
 * csi-node-driver-registrar as a module: flags with node-driver-registrar's
 * names and defaults, the driver connection (common/sidecar), then kubelet
 * mode (the registration socket) or direct mode (the registrar writes the
 * Node and CSINode itself), /healthz, and an orderly stop on SIGTERM
 * (socket removed, exit 0) or on the kubelet's NotifyRegistrationStatus(false)
 * (exit 1, so the container restarts and registers again).
 */
#include <errno.h>
#include <stdlib.h>

#include "registrar/registrar.h"
#include "sidecar/sidecar.h"

/* The kubelet's NodeGetInfo bound (direct mode makes the kubelet's call). */
#define NODE_GET_INFO_TIMEOUT (2 * UTIL_MINUTE)

typedef struct reg_module_state {
    reg_flags fl;
    reg_config cfg;
    sidecar *s;
    reg_kubelet *kl;
    reg_direct *dm;
    nodereg_driver nd;
    char *sock;
    reg_health health;
    obs_http *http;
} reg_module_state;

static void *mod_new(util_flags *f, sidecar_flags *common)
{
    (void)common;
    reg_module_state *m = util_calloc(1, sizeof(*m));
    reg_flags_add(f, &m->fl);
    return m;
}

static int mod_configure(void *state, const util_flags *f, sidecar_opts *so)
{
    (void)f;
    reg_module_state *m = state;
    int r = reg_flags_check(&m->fl, getenv("NODE_NAME"), &m->cfg);
    /* Old exec liveness probes run the binary in this mode: a no-op. */
    if (r == REG_EXIT_NOW)
        return SIDECAR_MODULE_DONE;
    if (r < 0)
        return r;
    obs_info("Running node-driver-registrar in mode=%s",
             m->cfg.direct ? "direct" : (*m->fl.mode ? m->fl.mode : "registration"));
    if (m->fl.connection_timeout != 0)
        obs_warn("--connection-timeout is deprecated and will have no effect");
    if (m->fl.enable_pprof)
        obs_warn("--enable-pprof is accepted for compatibility; there is no profiler here");
    so->which = SIDECAR_FLAGS_CSI | (m->cfg.direct ? SIDECAR_FLAGS_KUBE : 0);
    so->timeout = m->fl.timeout;
    return 0;
}

/* NotifyRegistrationStatus(false): the process stops in order, exit 1. */
static void rejected(void *ud, const char *error)
{
    (void)error;
    reg_module_state *m = ud;
    sidecar_shutdown(m->s, 1);
}

static int start_direct(reg_module_state *m, const char *driver)
{
    Csi__V1__NodeGetInfoResponse *info = NULL;
    csi_status st;
    if (csi_node_get_info(sidecar_csi(m->s), NODE_GET_INFO_TIMEOUT, &info, &st) < 0)
        return util_err_set(-EIO, "NodeGetInfo failed: %s: %s", csi_code_go_name(st.code),
                            st.message);
    int r = nodereg_driver_from_info(driver, info, &m->nd);
    csi__v1__node_get_info_response__free_unpacked(info, NULL);
    if (r < 0)
        return r;
    reg_direct_opts dopts = {.kube = sidecar_kube(m->s),
                             .events = sidecar_recorder_for(m->s, reg_module.prog),
                             .node_name = m->cfg.node_name,
                             .driver = &m->nd};
    return reg_direct_start(&dopts, &m->dm);
}

static int mod_prepare(void *state, sidecar *s)
{
    reg_module_state *m = state;
    m->s = s;
    const char *driver = sidecar_driver_name(s);
    int r;
    if (!m->cfg.direct) {
        m->sock = reg_socket_path(m->fl.plugin_registration_path, driver);
        reg_kubelet_opts ko = {.driver = driver,
                               .endpoint = m->fl.kubelet_registration_path,
                               .socket_path = m->sock,
                               .on_rejected = rejected,
                               .ud = m};
        r = reg_kubelet_start(&ko, &m->kl);
    } else {
        r = start_direct(m, driver);
    }
    if (r < 0)
        return r;
    m->health = (reg_health){
        .csi = sidecar_csi(s), .driver = driver, .socket_path = m->sock, .timeout = m->fl.timeout};
    if (m->cfg.http_addr) {
        if (obs_http_new(m->cfg.http_flag, m->cfg.http_addr, NULL, NULL, &m->http) < 0 ||
            obs_http_handle(m->http, "/healthz", reg_healthz, &m->health) < 0 ||
            obs_http_start(m->http) < 0)
            return -EINVAL;
        obs_info("Serving /healthz on %s (port %d)", m->cfg.http_addr, obs_http_port(m->http));
    }
    return 0;
}

/* Everything runs from prepare on: the registrar elects no leader. */
static int mod_start(void *state)
{
    (void)state;
    return 0;
}

static int mod_stop(void *state)
{
    reg_module_state *m = state;
    obs_http_free(m->http);
    m->http = NULL;
    reg_kubelet_free(m->kl); /* removes the socket */
    m->kl = NULL;
    int r = 0;
    if (m->dm && reg_direct_stop(m->dm, m->fl.cleanup_on_exit) < 0)
        r = -EIO;
    m->dm = NULL;
    return r;
}

static void mod_free(void *state)
{
    reg_module_state *m = state;
    nodereg_driver_clear(&m->nd);
    free(m->sock);
    reg_config_clear(&m->cfg);
    free(m);
}

const sidecar_module reg_module = {
    .name = "node-driver-registrar",
    .prog = "csi-node-driver-registrar",
    .title = "the registrar",
    /* The API only in direct mode (configure narrows it). */
    .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE,
    .new = mod_new,
    .configure = mod_configure,
    .prepare = mod_prepare,
    .start = mod_start,
    .stop = mod_stop,
    .free = mod_free,
};
