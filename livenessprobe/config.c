/*
 * livenessprobe's pure rules: its flags with upstream's names and defaults,
 * the checks made before anything starts, and the text of each /healthz
 * answer, which kubelet events and operators' runbooks quote.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "livenessprobe/livenessprobe.h"

int lp_flags_add(util_flags *f, lp_flags *fl)
{
    memset(fl, 0, sizeof(*fl));
    fl->probe_timeout = 3 * UTIL_SECOND;
    fl->csi_address = "/run/csi/socket";
    fl->health_port = LP_DEFAULT_HEALTH_PORT;
    fl->metrics_address = "";
    fl->http_endpoint = "";
    fl->metrics_path = "/metrics";
    int r = 0;
    r |= util_flags_duration(f, "probe-timeout", &fl->probe_timeout,
                             "How long one /healthz may take: reaching the driver and its Probe "
                             "call together.");
    r |= util_flags_string(f, "csi-address", &fl->csi_address,
                           "The CSI driver's unix socket (/path or unix:///path).");
    r |= util_flags_string(f, "health-port", &fl->health_port,
                           "(deprecated) Port for /healthz on every IPv4 interface. Cannot be "
                           "combined with --http-endpoint unless left at its default.");
    r |= util_flags_string(f, "metrics-address", &fl->metrics_address,
                           "(deprecated) host:port of a separate server for the Prometheus "
                           "metrics (example: :8080); empty: no such server. Cannot be combined "
                           "with --http-endpoint.");
    r |= util_flags_string(f, "http-endpoint", &fl->http_endpoint,
                           "host:port of the diagnostics server: /healthz and the metrics "
                           "(example: :9808). Replaces --health-port; empty: /healthz on "
                           "--health-port and no metrics there.");
    r |= util_flags_string(f, "metrics-path", &fl->metrics_path,
                           "Path of the Prometheus metrics on the server that serves them.");
    r |= util_flags_bool(f, "automaxprocs", &fl->automaxprocs,
                         "Accepted for compatibility; no effect here (there is no Go runtime to "
                         "size).");
    r |= obs_log_add_flags(f);
    return r ? -EINVAL : 0;
}

/* A TCP port as Go's listener takes it after "0.0.0.0:": digits, 0-65535. */
static bool is_port(const char *s)
{
    if (!s || !*s || strlen(s) > 5)
        return false;
    long n = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        n = n * 10 + (*p - '0');
    }
    return n <= 65535;
}

int lp_flags_check(const lp_flags *fl, lp_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    bool endpoint = fl->http_endpoint && *fl->http_endpoint;
    bool metrics_addr = fl->metrics_address && *fl->metrics_address;
    /* upstream compares the value, not whether the flag was given: an
     * explicit --health-port=9808 beside --http-endpoint is accepted */
    if (endpoint && strcmp(fl->health_port, LP_DEFAULT_HEALTH_PORT) != 0)
        return util_err_set(-EINVAL, "Only one of `--health-port` and `--http-endpoint` can be "
                                     "explicitly set");
    if (endpoint && metrics_addr)
        return util_err_set(-EINVAL, "Only one of `--metrics-address` and `--http-endpoint` can "
                                     "be explicitly set");
    if (fl->probe_timeout <= 0) {
        char d[32];
        util_duration_format(fl->probe_timeout, d, sizeof(d));
        return util_err_set(-EINVAL,
                            "--probe-timeout must be greater than 0 (got %s): every probe would "
                            "fail",
                            d);
    }
    if (!endpoint && !is_port(fl->health_port))
        return util_err_set(-EINVAL, "--health-port: \"%s\" is not a port number (0-65535)",
                            fl->health_port);
    if ((endpoint || metrics_addr) && fl->metrics_path[0] != '/')
        return util_err_set(-EINVAL, "--metrics-path: \"%s\" must start with /", fl->metrics_path);
    if (endpoint && strcmp(fl->metrics_path, "/healthz") == 0)
        return util_err_set(-EINVAL, "--metrics-path: /healthz is the health check's path");

    char *target = NULL, *path = NULL;
    int r = csi_endpoint_parse("csi-address", fl->csi_address, &target, &path);
    if (r < 0)
        return r;
    free(target);
    cfg->socket_path = path;
    if (endpoint) {
        cfg->http_addr = util_strdup(fl->http_endpoint);
        cfg->http_flag = "http-endpoint";
        cfg->metrics_path = fl->metrics_path;
    } else {
        cfg->http_addr = util_asprintf("%s:%s", LP_HEALTH_HOST, fl->health_port);
        cfg->http_flag = "health-port";
    }
    cfg->metrics_addr = metrics_addr ? fl->metrics_address : NULL;
    return 0;
}

void lp_config_clear(lp_config *cfg)
{
    free(cfg->http_addr);
    free(cfg->socket_path);
    memset(cfg, 0, sizeof(*cfg));
}

/* gRPC core words its own deadline "Deadline Exceeded"; grpc-go, whose text
 * upstream answers with, says what the context said. */
static const char *go_desc(const csi_status *st)
{
    if (st->code == CSI_DEADLINE_EXCEEDED && strcmp(st->message, "Deadline Exceeded") == 0)
        return "context deadline exceeded";
    return st->message;
}

void lp_answer(lp_outcome o, const csi_status *st, int *code, char **body)
{
    switch (o) {
    case LP_READY:
        *code = 200;
        *body = util_strdup("ok");
        return;
    case LP_NOT_READY:
        *code = 500;
        *body = util_strdup("driver responded but is not ready");
        return;
    case LP_CALL_FAILED:
        if (st && st->code != CSI_OK) {
            *code = 500;
            *body = util_asprintf("rpc error: code = %s desc = %s", csi_code_go_name(st->code),
                                  go_desc(st));
            return;
        }
        break;
    case LP_UNREACHABLE:
        break;
    }
    *code = 500;
    *body = util_strdup("context deadline exceeded");
}
