/*
 * sidecar: the start-up kit the three binaries share, so flags, logging,
 * the driver connection, the API client, leader election and the HTTP
 * endpoint behave the same in all of them, with upstream's names and
 * defaults (csi-lib-utils and the sidecars' common flags).
 *
 * A binary registers the common flags plus its own, parses, then calls
 * sidecar_start: it connects to the driver (probe until ready, driver name),
 * builds the API client, starts the HTTP endpoint and, when enabled, leader
 * election, and blocks SIGTERM/SIGINT so sidecar_wait can wait for them.
 */
#ifndef CSISIDECAR_SIDECAR_H
#define CSISIDECAR_SIDECAR_H

#include <stdbool.h>

#include "csi/csi.h"
#include "kube/kube.h"
#include "obs/obs.h"
#include "util/util.h"

/* Which groups of common flags a binary takes. */
enum {
    SIDECAR_FLAGS_CSI = 1 << 0,    /* --csi-address */
    SIDECAR_FLAGS_KUBE = 1 << 1,   /* --kubeconfig, --kube-api-qps/-burst */
    SIDECAR_FLAGS_LEADER = 1 << 2, /* --leader-election* */
    SIDECAR_FLAGS_HTTP = 1 << 3,   /* --http-endpoint, --metrics-address, --metrics-path */
    SIDECAR_FLAGS_COSI = 1 << 4,   /* --driver-addr: a COSI driver (name from DriverGetInfo) */
};

typedef struct sidecar_flags {
    const char *csi_address;
    const char *driver_addr; /* COSI */
    const char *kubeconfig;
    const char *master; /* only for binaries that register it themselves */
    double kube_api_qps;
    int kube_api_burst;
    bool leader_election;
    const char *leader_election_namespace;
    util_duration lease_duration;
    util_duration renew_deadline;
    util_duration retry_period;
    const char *leader_election_labels;
    const char *http_endpoint;
    const char *metrics_address;
    const char *metrics_path;
    bool automaxprocs;
} sidecar_flags;

/* Fills upstream's defaults and registers the groups in `which`, plus the
 * logging flags. */
int sidecar_flags_add(util_flags *f, sidecar_flags *sf, unsigned which);
/* Checks the common flags after parsing (and applies the logging flags);
 * -EINVAL with one line naming the flag to fix. */
int sidecar_flags_check(const util_flags *f, const sidecar_flags *sf);

/* One feature gate a binary knows: its name and where its value goes
 * (NULL: accepted as upstream does, changes nothing here). */
typedef struct sidecar_gate {
    const char *name;
    bool *value;
} sidecar_gate;

/*
 * --feature-gates "Key=true,Other=false" against `gates` (ended by a NULL
 * name): each named gate's value set. 0, or -EINVAL with one line naming
 * the flag and what is wrong (an unknown gate, as upstream: "unrecognized
 * feature gate: X").
 */
int sidecar_gates_parse(const char *text, const sidecar_gate *gates);

typedef struct sidecar sidecar;

typedef struct sidecar_opts {
    const char *component; /* "csi-provisioner" ... (User-Agent, events) */
    const char *version;
    unsigned which;        /* the flag groups in use */
    util_duration timeout; /* per-call CSI timeout (--timeout) */
    bool exit_on_csi_loss; /* provisioner, attacher: upstream's exit on connection loss */
    bool probe;            /* probe until ready at start */
    bool kubeconfig_env;   /* honour $KUBECONFIG (the provisioner does) */
    bool healthz;          /* serve a plain /healthz "ok" (the registrar has its own) */
    bool release_on_exit;  /* release the lease at stop (upstream: ReleaseLeaderElectionOnExit) */
    size_t max_log_len;    /* cut CSI responses logged at -v=5 (0: no cut) */
    /* Leader election lock name (before sanitizing); NULL: none. */
    const char *(*lock_name)(void *ud, const char *driver_name);
    void *ud;
} sidecar_opts;

/*
 * Connects to the driver (30 s bound), probes until ready when asked, reads
 * the driver name (GetPluginInfo, or DriverGetInfo for a COSI driver); loads the kube config and
 * makes the clients; prepares the metrics registry and HTTP endpoint. Errors are
 * -EINVAL/-ETIMEDOUT/... with one line in util_err_last(): the binary prints it and exits 1.
 */
int sidecar_start(const sidecar_flags *sf, const sidecar_opts *opts, sidecar **out);
/* Waits for the `run` function of sidecar_serve to return (the binary stops
 * its controllers first), releases everything. */
void sidecar_free(sidecar *s);

csi_conn *sidecar_csi(sidecar *s);
const char *sidecar_driver_name(sidecar *s);
kube_client *sidecar_kube(sidecar *s);
kube_config *sidecar_kube_config(sidecar *s);
obs_registry *sidecar_metrics(sidecar *s);
kube_recorder *sidecar_recorder(sidecar *s);

/* The HTTP endpoint's port (0 without one); useful with port 0. */
int sidecar_http_port(sidecar *s);
/* Adds an HTTP path (before sidecar_serve). */
int sidecar_http_handle(sidecar *s, const char *path, obs_http_fn fn, void *ud);
/*
 * Starts the HTTP endpoint and, with --leader-election, the election; runs
 * `run(ud)` once this replica leads (at once without leader election) on a
 * thread of its own, and returns. Losing the lease logs "Stopped leading"
 * and exits 1, as upstream does.
 */
int sidecar_serve(sidecar *s, void (*run)(void *ud), void *ud);
/* Blocks until SIGTERM or SIGINT. When `run` has not returned yet (the
 * controllers are still starting, or this replica does not lead yet) the
 * process exits 0 right here. */
void sidecar_wait(sidecar *s);

/* The common/csi call hook feeding csi_sidecar_operations_seconds. */
void sidecar_csi_hook(void *ud, const char *method, const char *code_name, util_duration took);

#endif
