/*
 * livenessprobe: the HTTP end of a CSI driver container's livenessProbe.
 *
 * The kubelet GETs /healthz on this sidecar; each request becomes one
 * Identity.Probe to the driver, bounded by --probe-timeout, and the answer is
 * 200 "ok" or 500 with the reason, worded as upstream's Go sidecar words it.
 * At start the sidecar waits (for ever) for the driver and asks its name with
 * GetPluginInfo; the HTTP port opens only after that, so a kubelet probing a
 * driver that never came up sees "connection refused".
 *
 * config.c is the pure part (flags, their rules, the answer for a probe
 * result); probe.c does the I/O of one /healthz; main.c wires them. No
 * Kubernetes API, no kubeconfig.
 */
#ifndef CSISIDECAR_LIVENESSPROBE_H
#define CSISIDECAR_LIVENESSPROBE_H

#include <stdbool.h>

#include "csi/csi.h"
#include "obs/obs.h"
#include "util/util.h"

#define LP_DEFAULT_HEALTH_PORT "9808"
/* Where /healthz goes with --health-port: every IPv4 interface, as upstream. */
#define LP_HEALTH_HOST "0.0.0.0"

/* upstream's flags, with its defaults; --health-port is a string there too */
typedef struct lp_flags {
    util_duration probe_timeout;
    const char *csi_address;
    const char *health_port;
    const char *metrics_address;
    const char *http_endpoint;
    const char *metrics_path;
    bool automaxprocs;
} lp_flags;

/* Registers the flags above and the logging flags, with upstream's defaults. */
int lp_flags_add(util_flags *f, lp_flags *fl);

/* What the flags resolve to. */
typedef struct lp_config {
    char *http_addr;          /* where /healthz is served (host:port) */
    const char *http_flag;    /* the flag it came from, for messages */
    const char *metrics_path; /* served beside /healthz; NULL: not there */
    const char *metrics_addr; /* --metrics-address's own server; NULL: none */
    char *socket_path;        /* the driver socket's file */
} lp_config;

/*
 * Applies upstream's rules (--health-port other than 9808 and
 * --http-endpoint exclude each other, as do --metrics-address and
 * --http-endpoint) plus what upstream only finds out later or never: a
 * --csi-address that is not a unix socket, a --health-port that is not a
 * port, a --probe-timeout that would fail every probe, a --metrics-path that
 * cannot be served. -EINVAL with one line in util_err_last().
 */
int lp_flags_check(const lp_flags *fl, lp_config *cfg);
void lp_config_clear(lp_config *cfg);

/* How one /healthz ended. */
typedef enum {
    LP_READY,       /* Probe answered ready (or left readiness unset) */
    LP_NOT_READY,   /* Probe answered ready = false */
    LP_CALL_FAILED, /* Probe ended with a gRPC status (in `st`) */
    LP_UNREACHABLE, /* no Probe could be sent before the timeout */
} lp_outcome;

/*
 * The HTTP answer: 200 "ok", or 500 with upstream's text: "driver responded
 * but is not ready", grpc-go's "rpc error: code = <Code> desc = <message>",
 * or "context deadline exceeded" (what upstream's dial says when the driver
 * cannot be reached in time). *body is malloc'ed.
 */
void lp_answer(lp_outcome o, const csi_status *st, int *code, char **body);

/* ---- metrics ---------------------------------------------------------------------- */

/* upstream's (csi-lib-utils) metric families */
typedef struct lp_metrics {
    obs_metric *seconds; /* csi_sidecar_operations_seconds */
    obs_metric *start;   /* process_start_time_seconds */
} lp_metrics;

int lp_metrics_register(obs_registry *r, double start_time, lp_metrics *m);
/* One observation; `driver` NULL is upstream's "unknown-driver". */
void lp_metrics_observe(const lp_metrics *m, const char *driver, const char *method, int code,
                        util_duration took);

/* ---- /healthz ---------------------------------------------------------------------- */

typedef struct lp_probe {
    const char *endpoint;    /* --csi-address, for a fresh dial */
    const char *socket_path; /* its file */
    const char *driver;
    util_duration timeout;
    const lp_metrics *metrics;
    csi_conn *csi;     /* the connection in use (start-up's first) */
    csi_conn *retired; /* the one it replaced, freed at the next replacement */
    bool stale;        /* its last call was UNAVAILABLE: dial afresh */
} lp_probe;

/*
 * One probe within `timeout`: the socket file must be there (a driver whose
 * socket was removed fails even while the old connection still works, as
 * upstream's dial per request does; a missing socket is looked for until
 * the time is up), then Identity.Probe over the kept connection. UNAVAILABLE
 * over it is asked again over a fresh connection, dialled within the time
 * left (as upstream's dial waits), which then replaces the old one;
 * UNAVAILABLE over a fresh connection is the driver's own answer.
 */
void lp_probe_run(lp_probe *p, lp_outcome *o, csi_status *st);
/* Frees the connections. */
void lp_probe_clear(lp_probe *p);

/* An obs_http_fn over an lp_probe. */
void lp_healthz(void *ud, int *code, char **body, const char **ctype);

#endif
