/*
 * The registrar's pure rules: its flags with upstream's names, defaults and
 * checks, the socket path, the GetInfo answer and the /healthz verdict.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "registrar/registrar.h"

int reg_flags_add(util_flags *f, reg_flags *fl)
{
    memset(fl, 0, sizeof(*fl));
    fl->kubelet_registration_path = "";
    fl->plugin_registration_path = "/registration";
    fl->timeout = UTIL_SECOND;
    fl->http_endpoint = "";
    fl->mode = "";
    fl->node_registration = "kubelet";
    fl->node_name = "";
    int r = 0;
    r |= util_flags_string(f, "kubelet-registration-path", &fl->kubelet_registration_path,
                           "Path of the CSI driver socket on the Kubernetes host machine.");
    r |= util_flags_string(f, "plugin-registration-path", &fl->plugin_registration_path,
                           "Path to Kubernetes plugin registration directory.");
    r |= util_flags_duration(f, "timeout", &fl->timeout,
                             "Timeout for waiting for communication with driver");
    r |= util_flags_string(
        f, "http-endpoint", &fl->http_endpoint,
        "The TCP network address where the HTTP server for diagnostics, including the health "
        "check indicating whether the registration socket exists and the driver answers, will "
        "listen (example: `:8080`). The default is empty string, which means the server is "
        "disabled. Only one of `--health-port` and `--http-endpoint` can be set.");
    r |= util_flags_int(f, "health-port", &fl->health_port,
                        "(deprecated) TCP port for healthz requests. Set to 0 to disable the "
                        "healthz server. Only one of --health-port and --http-endpoint can be "
                        "set.");
    r |= util_flags_string(f, "mode", &fl->mode,
                           "(deprecated) \"kubelet-registration-probe\" exits 0 at once (kept for "
                           "old exec liveness probes); anything else runs the registrar.");
    r |= util_flags_duration(f, "connection-timeout", &fl->connection_timeout,
                             "The --connection-timeout flag is deprecated");
    r |= util_flags_bool(f, "enable-pprof", &fl->enable_pprof,
                         "Accepted for compatibility; there is no Go profiler here.");
    r |= util_flags_string(f, "node-registration", &fl->node_registration,
                           "Who writes the node's registration: \"kubelet\" (the kubelet, through "
                           "the plugin registration socket) or \"direct\" (this sidecar writes "
                           "the Node annotation and labels and the CSINode entry itself; needs "
                           "API access and a node name).");
    r |= util_flags_string(f, "node-name", &fl->node_name,
                           "Direct mode: the name of this node (default: $NODE_NAME).");
    r |= util_flags_bool(f, "cleanup-on-exit", &fl->cleanup_on_exit,
                         "Direct mode: on SIGTERM remove this driver's Node annotation entry and "
                         "CSINode entry (topology labels stay).");
    return r ? -EINVAL : 0;
}

int reg_flags_check(const reg_flags *fl, const char *env_node_name, reg_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    if (fl->mode && strcmp(fl->mode, REG_PROBE_MODE) == 0)
        return REG_EXIT_NOW;
    const char *nr = fl->node_registration ? fl->node_registration : "";
    if (strcmp(nr, "direct") == 0)
        cfg->direct = true;
    else if (strcmp(nr, "kubelet") != 0)
        return util_err_set(-EINVAL,
                            "--node-registration must be \"kubelet\" or \"direct\", not "
                            "\"%s\"",
                            nr);
    if (!cfg->direct && (!fl->kubelet_registration_path || !*fl->kubelet_registration_path))
        return util_err_set(-EINVAL, "kubelet-registration-path is a required parameter");
    if (!cfg->direct && (!fl->plugin_registration_path || !*fl->plugin_registration_path))
        return util_err_set(-EINVAL, "--plugin-registration-path must not be empty");
    if (fl->health_port > 0 && fl->http_endpoint && *fl->http_endpoint)
        return util_err_set(-EINVAL,
                            "only one of `--health-port` and `--http-endpoint` can be set.");
    if (fl->health_port < 0 || fl->health_port > 65535)
        return util_err_set(-EINVAL, "--health-port must be between 0 and 65535");
    if (fl->timeout <= 0)
        return util_err_set(-EINVAL, "--timeout must be positive");
    if (cfg->direct) {
        const char *n = fl->node_name && *fl->node_name ? fl->node_name : env_node_name;
        if (!n || !*n)
            return util_err_set(-EINVAL, "--node-registration=direct needs the node name: set "
                                         "--node-name or the NODE_NAME environment variable");
        cfg->node_name = n;
    } else if (fl->cleanup_on_exit) {
        return util_err_set(-EINVAL, "--cleanup-on-exit needs --node-registration=direct (with "
                                     "the kubelet, removing the socket deregisters the driver)");
    }
    if (fl->health_port > 0) {
        cfg->http_addr = util_asprintf(":%d", fl->health_port);
        cfg->http_flag = "health-port";
    } else if (fl->http_endpoint && *fl->http_endpoint) {
        cfg->http_addr = util_strdup(fl->http_endpoint);
        cfg->http_flag = "http-endpoint";
    }
    return 0;
}

void reg_config_clear(reg_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->http_addr);
    memset(cfg, 0, sizeof(*cfg));
}

char *reg_socket_path(const char *dir, const char *driver)
{
    return util_asprintf("%s/%s-reg.sock", dir, driver);
}

void reg_info_fill(Pluginregistration__PluginInfo *info, const char *driver, const char *endpoint,
                   char **versions)
{
    pluginregistration__plugin_info__init(info);
    info->type = (char *)"CSIPlugin";
    info->name = (char *)driver;
    info->endpoint = (char *)endpoint;
    versions[0] = (char *)REG_SUPPORTED_VERSION;
    info->supported_versions = versions;
    info->n_supported_versions = 1;
}

void reg_health_verdict(const char *socket_path, bool socket_exists, const char *info_err,
                        const char *info_name, const char *driver, const char *driver_err,
                        int *code, char **body)
{
    if (socket_path && !socket_exists) {
        *code = 404;
        *body = util_strdup("registration socket does not exist");
    } else if (socket_path && info_err) {
        *code = 500;
        *body = util_asprintf("error getting info from node-registrar socket %s: %s", socket_path,
                              info_err);
    } else if (socket_path && (!info_name || strcmp(info_name, driver) != 0)) {
        *code = 500;
        *body = util_asprintf("invalid driver name %s", info_name ? info_name : "");
    } else if (driver_err) {
        *code = 500;
        *body = util_asprintf("CSI driver %s: %s", driver, driver_err);
    } else {
        *code = 200;
        *body = util_strdup("ok");
    }
}
