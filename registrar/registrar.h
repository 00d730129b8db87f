/*
 * csi-node-driver-registrar: registers the node's CSI driver.
 *
 *   kubelet mode (default, as upstream): serve pluginregistration.Registration
 *   on <plugin-registration-path>/<driver>-reg.sock; the kubelet calls
 *   GetInfo, talks to the driver itself and reports back through
 *   NotifyRegistrationStatus.
 *
 *   direct mode (--node-registration=direct, the seed design's helper): no
 *   kubelet involved; the registrar calls NodeGetInfo and writes the Node
 *   annotation, topology labels and CSINode entry itself (common/nodereg),
 *   and puts them back when someone removes them.
 *
 * plan.c is the pure part (flag rules, the GetInfo answer, the health
 * verdict); kubelet.c and direct.c do the I/O; module.c wires them as a
 * controller module (common/sidecar); main.c is the standalone binary.
 */
#ifndef CSISIDECAR_REGISTRAR_H
#define CSISIDECAR_REGISTRAR_H

#include <stdbool.h>

#include "csi/csi.h"
#include "kube/kube.h"
#include "nodereg/nodereg.h"
#include "util/util.h"

/* The versions of the kubelet plugin API we speak, as upstream. */
#define REG_SUPPORTED_VERSION "1.0.0"
#define REG_PROBE_MODE        "kubelet-registration-probe"

/* The registrar's own flags (the driver address and logging come from
 * common/sidecar). */
typedef struct reg_flags {
    const char *kubelet_registration_path;
    const char *plugin_registration_path;
    util_duration timeout;
    const char *http_endpoint;
    int health_port;
    const char *mode;
    util_duration connection_timeout;
    bool enable_pprof;
    const char *node_registration; /* "kubelet" or "direct" */
    const char *node_name;
    bool cleanup_on_exit;
} reg_flags;

/* Registers the flags above with upstream's defaults. */
int reg_flags_add(util_flags *f, reg_flags *fl);

/* What the flags resolve to. */
typedef struct reg_config {
    bool direct;
    char *http_addr;       /* NULL: no HTTP server */
    const char *http_flag; /* the flag it came from, for messages */
    const char *node_name; /* direct mode */
} reg_config;

enum { REG_EXIT_NOW = 1 };

/* The registrar as a controller module (module.c; common/sidecar). */
struct sidecar_module;
extern const struct sidecar_module reg_module;

/*
 * Applies upstream's rules: `--mode=kubelet-registration-probe` is
 * REG_EXIT_NOW (exit 0 at once); kubelet mode needs
 * --kubelet-registration-path; --health-port and --http-endpoint exclude
 * each other; direct mode needs a node name (--node-name, else
 * `env_node_name`, i.e. $NODE_NAME). -EINVAL with one line otherwise.
 */
int reg_flags_check(const reg_flags *fl, const char *env_node_name, reg_config *cfg);
void reg_config_clear(reg_config *cfg);

/* "<dir>/<driver>-reg.sock" (malloc'ed), as upstream builds it. */
char *reg_socket_path(const char *dir, const char *driver);

/* The GetInfo answer (borrows the strings; `versions` must outlive it). */
void reg_info_fill(Pluginregistration__PluginInfo *info, const char *driver, const char *endpoint,
                   char **versions);

/*
 * The /healthz verdict from what was observed: 404 "registration socket
 * does not exist" without the socket; 500 with the reason when GetInfo over
 * it failed (`info_err`) or named another driver, or when the driver
 * connection was lost or its check failed (`driver_err`); else 200 "ok".
 * `socket_path` NULL means direct mode (no registration socket).
 */
void reg_health_verdict(const char *socket_path, bool socket_exists, const char *info_err,
                        const char *info_name, const char *driver, const char *driver_err,
                        int *code, char **body);

/* ---- kubelet mode --------------------------------------------------------------- */

typedef struct reg_kubelet reg_kubelet;

typedef struct reg_kubelet_opts {
    const char *driver;      /* GetPluginInfo name */
    const char *endpoint;    /* --kubelet-registration-path */
    const char *socket_path; /* where to serve */
    /* NotifyRegistrationStatus(false): called once, after the answer. */
    void (*on_rejected)(void *ud, const char *error);
    void *ud;
} reg_kubelet_opts;

/* Serves the registration socket (stale socket replaced, owner-only). */
int reg_kubelet_start(const reg_kubelet_opts *opts, reg_kubelet **out);
/* Stops serving and removes the socket; frees. NULL is a no-op. */
void reg_kubelet_free(reg_kubelet *k);

/* ---- health ------------------------------------------------------------------------ */

typedef struct reg_health {
    csi_conn *csi;           /* the driver */
    const char *driver;      /* its name */
    const char *socket_path; /* NULL in direct mode */
    util_duration timeout;   /* per check call (--timeout) */
} reg_health;

/* An obs_http_fn over a reg_health: checks the socket, GetInfo over it and
 * the driver (connection not lost, GetPluginInfo answers). */
void reg_healthz(void *ud, int *code, char **body, const char **ctype);

/* ---- direct mode --------------------------------------------------------------------- */

typedef struct reg_direct reg_direct;

typedef struct reg_direct_opts {
    kube_client *kube;
    kube_recorder *events;
    const char *node_name;
    const nodereg_driver *driver; /* borrowed; outlives the reg_direct */
} reg_direct_opts;

/* Writes the registration now and keeps it in place (watching the Node and
 * CSINode of `node_name` only) until reg_direct_stop. */
int reg_direct_start(const reg_direct_opts *opts, reg_direct **out);
/* True once the registration was written at least once. */
bool reg_direct_registered(reg_direct *d);
/* Stops watching, with `cleanup` removes our entries (nothing else), and
 * frees; NULL is a no-op. Returns the cleanup result. */
int reg_direct_stop(reg_direct *d, bool cleanup);

#endif
