/*
 * Kubelet mode: the pluginregistration.Registration server on
 * <dir>/<driver>-reg.sock, and the /healthz check of the registrar.
 *
 * The kubelet finds the socket in its plugins_registry directory, asks
 * GetInfo, does the registration itself and reports the outcome with
 * NotifyRegistrationStatus; a failure is handed to the caller (main exits
 * 1 so the container restarts and tries again, as upstream).
 *
 * /healthz goes further than upstream (#139): besides the socket and a
 * GetInfo over it, the driver must still answer. A registrar whose driver
 * went away turns red, and the liveness probe restarts it instead of it
 * staying registered but dead.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "obs/obs.h"
#include "registrar/registrar.h"

#define REG_METHOD_GETINFO "/pluginregistration.Registration/GetInfo"

struct reg_kubelet {
    reg_kubelet_opts o;
    csi_server *srv;
    atomic_bool rejected;
};

/*
 * Whether a NotifyRegistrationStatus is the first rejection (the kubelet
 * may repeat it; the caller reports it once, after answering). Pure, so
 * tests/fuzz/fuzz_registrar.c drives it with whatever a kubelet could send;
 * not in registrar.h because nothing else needs it.
 */
bool reg_kubelet__first_rejection(atomic_bool *rejected,
                                  const Pluginregistration__RegistrationStatus *st);
bool reg_kubelet__first_rejection(atomic_bool *rejected,
                                  const Pluginregistration__RegistrationStatus *st)
{
    return !st->plugin_registered && !atomic_exchange(rejected, true);
}

static void on_call(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply)
{
    reg_kubelet *k = ud;
    if (strcmp(method, REG_METHOD_GETINFO) == 0) {
        obs_info("Received GetInfo call");
        Pluginregistration__PluginInfo info;
        char *versions[1];
        reg_info_fill(&info, k->o.driver, k->o.endpoint, versions);
        csi_reply_ok(reply, &info.base);
        return;
    }
    const Pluginregistration__RegistrationStatus *st =
        (const Pluginregistration__RegistrationStatus *)req;
    obs_info("Received NotifyRegistrationStatus call: plugin_registered=%s error=\"%s\"",
             st->plugin_registered ? "true" : "false", st->error ? st->error : "");
    Pluginregistration__RegistrationStatusResponse resp =
        PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    csi_reply_ok(reply, &resp.base);
    if (reg_kubelet__first_rejection(&k->rejected, st)) {
        obs_error("Registration process failed with error: %s, restarting registration container.",
                  st->error ? st->error : "");
        if (k->o.on_rejected)
            k->o.on_rejected(k->o.ud, st->error ? st->error : "");
    } else if (st->plugin_registered) {
        obs_info("Driver %s registered with the kubelet", k->o.driver);
    }
}

int reg_kubelet_start(const reg_kubelet_opts *opts, reg_kubelet **out)
{
    *out = NULL;
    reg_kubelet *k = util_calloc(1, sizeof(*k));
    k->o = *opts;
    /* Two threads: the kubelet makes one call at a time, /healthz another. */
    csi_server_opts so = {.threads = 2, .owner_only = true};
    int r = csi_server_new(opts->socket_path, &so, &k->srv);
    if (r == 0)
        r = csi_server_handle_all(k->srv, &pluginregistration__registration__descriptor, on_call,
                                  k);
    if (r == 0) {
        obs_info("Starting Registration Server at %s", opts->socket_path);
        r = csi_server_start(k->srv);
    }
    if (r < 0) {
        reg_kubelet_free(k);
        return r;
    }
    obs_info("Registration Server started at %s", opts->socket_path);
    *out = k;
    return 0;
}

void reg_kubelet_free(reg_kubelet *k)
{
    if (!k)
        return;
    csi_server_stop(k->srv, UTIL_SECOND);
    csi_server_free(k->srv);
    free(k);
}

/* ---- /healthz -------------------------------------------------------------------- */

/* GetInfo over our own socket, as the kubelet would: a fresh connection
 * each time, so a socket replaced or unlinked underneath is noticed. */
static char *check_socket(const reg_health *h, char **name)
{
    *name = NULL;
    csi_conn_opts co = {.connect_timeout = h->timeout, .progress_every = UTIL_HOUR};
    csi_conn *c = NULL;
    if (csi_conn_new(h->socket_path, &co, &c) < 0)
        return util_asprintf("cannot connect: %s", util_err_last());
    Pluginregistration__InfoRequest req = PLUGINREGISTRATION__INFO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    csi_status st;
    char *err = NULL;
    if (csi_call(c, REG_METHOD_GETINFO, &req.base, &pluginregistration__plugin_info__descriptor,
                 h->timeout, &resp, &st) < 0) {
        err = util_asprintf("%s: %s", csi_code_go_name(st.code), st.message);
    } else {
        const Pluginregistration__PluginInfo *info = (const Pluginregistration__PluginInfo *)resp;
        *name = util_strdup(info->name ? info->name : "");
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    csi_conn_free(c);
    return err;
}

static char *check_driver(const reg_health *h)
{
    if (csi_conn_lost(h->csi))
        return util_asprintf("lost connection to the driver at %s", csi_conn_endpoint(h->csi));
    Csi__V1__GetPluginInfoResponse *info = NULL;
    csi_status st;
    if (csi_get_plugin_info(h->csi, h->timeout, &info, &st) < 0)
        return util_asprintf("GetPluginInfo failed: %s: %s", csi_code_go_name(st.code), st.message);
    char *err = NULL;
    if (!info->name || strcmp(info->name, h->driver) != 0)
        err = util_asprintf("the driver now calls itself \"%s\"", info->name ? info->name : "");
    csi__v1__get_plugin_info_response__free_unpacked(info, NULL);
    return err;
}

void reg_healthz(void *ud, int *code, char **body, const char **ctype)
{
    const reg_health *h = ud;
    struct stat st;
    bool exists = h->socket_path && lstat(h->socket_path, &st) == 0 && S_ISSOCK(st.st_mode);
    char *info_err = NULL, *name = NULL, *drv_err = NULL;
    if (exists)
        info_err = check_socket(h, &name);
    if (!h->socket_path || (exists && !info_err))
        drv_err = check_driver(h);
    reg_health_verdict(h->socket_path, exists, info_err, name, h->driver, drv_err, code, body);
    if (*code == 200)
        obs_v(5, "Health check succeeded");
    else
        obs_error("Health check failed: %s", *body);
    *ctype = "text/plain; charset=utf-8";
    free(info_err);
    free(name);
    free(drv_err);
}
