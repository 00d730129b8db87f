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
    SIDECAR_FLAGS_MASTER = 1 << 5, /* --master (the provisioner's and the resizer's) */
};

typedef struct sidecar_flags {
    const char *csi_address;
    const char *driver_addr; /* COSI */
    const char *kubeconfig;
    const char *master; /* SIDECAR_FLAGS_MASTER */
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
/* COSI's binaries elect always, with upstream's longer terms (on,
 * 150 s / 120 s / 60 s): after sidecar_flags_add with SIDECAR_FLAGS_LEADER. */
void sidecar_flags_cosi_leader(util_flags *f, sidecar_flags *sf);
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
/* The recorder whose events name `component` as their source: a module's
 * events carry its standalone binary's name in csi-sidecars too. The
 * process's own when the names match; else one made on first use, owned by
 * `s`. NULL without the API client. Call before sidecar_serve. */
kube_recorder *sidecar_recorder_for(sidecar *s, const char *component);

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
/* Blocks until SIGTERM or SIGINT, or sidecar_shutdown; returns the exit
 * code asked for (0 on a signal). When `run` has not returned yet (the
 * controllers are still starting, or this replica does not lead yet) the
 * process exits right here. */
int sidecar_wait(sidecar *s);
/* Asks sidecar_wait to return `code` (any thread; the first ask wins). */
void sidecar_shutdown(sidecar *s, int code);

/*
 * One controller of the family as a module: what its standalone binary and
 * (later) the all-in-one process need to know of it. The module keeps its
 * flags and state behind `state`; the runner owns the order:
 *   new (register flags) -> parse -> sidecar_flags_check -> configure ->
 *   "Version:" -> sidecar_start -> prepare -> [lead] start -> SIGTERM ->
 *   stop -> free -> sidecar_free.
 * Every function but `new` and `free` may fail with -errno and one line in
 * util_err_last(); the runner prints "<prog>: <line>" and exits 1.
 */
typedef struct sidecar_module {
    const char *name;  /* "attacher": its name among controllers */
    const char *prog;  /* "csi-attacher": the standalone binary */
    const char *title; /* "the attacher": in "cannot start the attacher: ..." */
    unsigned which;    /* the common flag groups it takes */
    int malloc_arenas; /* M_ARENA_MAX of its binary (0: glibc's default) */
    /* Its flags with upstream's defaults; may change `common`'s defaults. */
    void *(*new)(util_flags *f, sidecar_flags *common);
    /* After parsing: its own checks, and what sidecar_start needs in `so`
     * (component, which, timeout, probe, release_on_exit ...).
     * SIDECAR_MODULE_DONE: nothing to run, the binary exits 0. */
    int (*configure)(void *state, const util_flags *f, sidecar_opts *so);
    /* The lease's name for a driver (caller frees); NULL: so->component. */
    char *(*lock_name)(const char *driver);
    /* Connected: reads the driver's capabilities, builds its configuration. */
    int (*prepare)(void *state, sidecar *s);
    /* On the controllers' thread, once this replica leads. */
    int (*start)(void *state);
    /* After SIGTERM or sidecar_shutdown, once `start` has returned; < 0:
     * the stop went wrong and the binary exits 1. */
    int (*stop)(void *state);
    void (*free)(void *state);
} sidecar_module;

enum { SIDECAR_MODULE_DONE = 1 };

/* A standalone binary: runs `m` as above; returns the exit code. */
int sidecar_module_main(const sidecar_module *m, const char *version, int argc, char **argv);

/* Several modules in one process (csi-sidecars): --controllers= picks
 * them; each module's flags are also --<name>-<flag>; one driver
 * connection, API client, lease and HTTP endpoint. Returns the exit code. */
int sidecar_multi_main(const char *prog, const sidecar_module *const *mods, size_t n,
                       const char *version, int argc, char **argv);

/* Which capabilities sidecar_caps reads. */
enum {
    SIDECAR_CAPS_PLUGIN = 1 << 0,     /* GetPluginCapabilities */
    SIDECAR_CAPS_CONTROLLER = 1 << 1, /* ControllerGetCapabilities */
    SIDECAR_CAPS_NODE = 1 << 2,       /* NodeGetCapabilities */
};

/*
 * The driver's capabilities of the kinds in `which`, each asked once per
 * process and kept: controllers sharing one driver connection ask it once.
 * 0 with *caps filled (kinds not asked stay 0), or -EIO with the failed
 * call's status in *st (the caller words the message, as upstream does).
 */
int sidecar_caps(sidecar *s, unsigned which, csi_caps *caps, csi_status *st);

/* The common/csi call hook feeding csi_sidecar_operations_seconds. */
void sidecar_csi_hook(void *ud, const char *method, const char *code_name, util_duration took);

#endif
