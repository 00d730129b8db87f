/*
 * example-csi-driver: flags, start-up and shutdown.
 *
 * main owns everything: the configuration, the store, the fault table and
 * the server; handlers reach them through the drv context passed as the
 * routes' user data. SIGTERM/SIGINT stop the server gracefully (in-flight
 * calls finish, the socket is removed) and the process exits 0.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "obs/obs.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

#define PROG "example-csi-driver"

static const char DEFAULT_CONTROLLER_CAPS[] =
    "CREATE_DELETE_VOLUME,PUBLISH_UNPUBLISH_VOLUME,LIST_VOLUMES,GET_CAPACITY,EXPAND_VOLUME,"
    "CREATE_DELETE_SNAPSHOT,LIST_SNAPSHOTS,CLONE_VOLUME,PUBLISH_READONLY,"
    "LIST_VOLUMES_PUBLISHED_NODES,GET_VOLUME,SINGLE_NODE_MULTI_WRITER";
static const char DEFAULT_PLUGIN_CAPS[] =
    "CONTROLLER_SERVICE,VOLUME_ACCESSIBILITY_CONSTRAINTS,ONLINE";
static const char DEFAULT_NODE_CAPS[] =
    "STAGE_UNSTAGE_VOLUME,GET_VOLUME_STATS,EXPAND_VOLUME,SINGLE_NODE_MULTI_WRITER";

/* Bytes with Kubernetes quantity suffixes: Ki..Ei (binary), k..E (decimal). */
static int parse_bytes(const char *s, int64_t *out)
{
    static const struct {
        const char *suffix;
        int64_t mult;
    } units[] = {
        {"Ki", 1LL << 10},
        {"Mi", 1LL << 20},
        {"Gi", 1LL << 30},
        {"Ti", 1LL << 40},
        {"Pi", 1LL << 50},
        {"Ei", 1LL << 60},
        {"k", 1000LL},
        {"M", 1000000LL},
        {"G", 1000000000LL},
        {"T", 1000000000000LL},
        {"P", 1000000000000000LL},
        {"E", 1000000000000000000LL},
        {"", 1},
    };
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v <= 0 || s[0] == '-' || s[0] == '+')
        return util_err_set(-EINVAL, "\"%s\" is not a positive size", s);
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].suffix) != 0)
            continue;
        if (v > INT64_MAX / units[i].mult)
            return util_err_set(-ERANGE, "\"%s\" is too large", s);
        *out = v * units[i].mult;
        return 0;
    }
    return util_err_set(-EINVAL, "\"%s\": unknown suffix \"%s\" (Ki, Mi, Gi, Ti, ...)", s, end);
}

/* "A,B,C" of enum value names into a bit mask. `alt` (may be NULL) is a
 * second enum whose one chosen value goes to *alt_value. */
static int parse_caps(const char *flag, const char *list, const ProtobufCEnumDescriptor *desc,
                      uint64_t *mask, const ProtobufCEnumDescriptor *alt, int *alt_value)
{
    *mask = 0;
    if (alt_value)
        *alt_value = 0;
    char *copy = util_strdup(list);
    char *save = NULL;
    int r = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ')
            tok++;
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value_by_name(desc, tok);
        if (v && v->value > 0 && v->value < 64) {
            *mask |= 1ull << v->value;
            continue;
        }
        v = alt ? protobuf_c_enum_descriptor_get_value_by_name(alt, tok) : NULL;
        if (v && v->value > 0 && (!*alt_value || *alt_value == v->value)) {
            *alt_value = v->value;
            continue;
        }
        r = util_err_set(-EINVAL, "--%s: unknown or conflicting capability \"%s\"", flag, tok);
        break;
    }
    free(copy);
    return r;
}

/* The spec's rule for a driver name: DNS-like, at most 63 characters. */
static bool driver_name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > 63)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = n[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (!alnum && ((c != '-' && c != '.') || i == 0 || i == len - 1))
            return false;
    }
    return true;
}

static int split_list(const char *text, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    char *copy = util_strdup(text);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char **grown = realloc(*out, (*n + 1) * sizeof(char *));
        if (!grown)
            abort();
        *out = grown;
        (*out)[(*n)++] = util_strdup(tok);
    }
    free(copy);
    return 0;
}

static void config_free(drv_config *cfg)
{
    drv_kvs_free(&cfg->topology);
    for (size_t i = 0; i < cfg->n_known_nodes; i++)
        free(cfg->known_nodes[i]);
    free(cfg->known_nodes);
}

struct flag_values {
    const char *capacity, *topology, *known_nodes;
    const char *controller_caps, *plugin_caps, *node_caps;
    const char *fault;
    int64_t max_volumes;
};

static int build_config(drv_config *cfg, const struct flag_values *fv)
{
    int r;
    if (!cfg->state_dir || !*cfg->state_dir)
        return util_err_set(-EINVAL, "--state-dir is required");
    if (!driver_name_ok(cfg->driver_name))
        return util_err_set(-EINVAL,
                            "--drivername \"%s\": want at most 63 alphanumerics, '-' and '.', "
                            "starting and ending alphanumeric",
                            cfg->driver_name);
    if (cfg->backend_dir && !*cfg->backend_dir)
        cfg->backend_dir = NULL;
    if (!cfg->node_id || !*cfg->node_id)
        return util_err_set(-EINVAL, "--nodeid must not be empty");
    if ((r = parse_bytes(fv->capacity, &cfg->capacity)) < 0)
        return util_err_set(r, "--capacity: %s", util_err_last());
    if ((r = drv_kvs_parse(fv->topology, &cfg->topology)) < 0)
        return util_err_set(r, "--topology: %s", util_err_last());
    if (fv->max_volumes < 0)
        return util_err_set(-EINVAL, "--max-volumes-per-node must not be negative");
    cfg->max_volumes_per_node = fv->max_volumes;
    split_list(fv->known_nodes, &cfg->known_nodes, &cfg->n_known_nodes);
    if ((r = parse_caps("controller-caps", fv->controller_caps,
                        &csi__v1__controller_service_capability__rpc__type__descriptor,
                        &cfg->controller_caps, NULL, NULL)) < 0)
        return r;
    if ((r = parse_caps("plugin-caps", fv->plugin_caps,
                        &csi__v1__plugin_capability__service__type__descriptor, &cfg->plugin_caps,
                        &csi__v1__plugin_capability__volume_expansion__type__descriptor,
                        &cfg->expansion)) < 0)
        return r;
    return parse_caps("node-caps", fv->node_caps,
                      &csi__v1__node_service_capability__rpc__type__descriptor, &cfg->node_caps,
                      NULL, NULL);
}

int main(int argc, char **argv)
{
    char host[HOST_NAME_MAX + 1] = "node";
    if (gethostname(host, sizeof(host)) < 0)
        snprintf(host, sizeof(host), "node");
    host[sizeof(host) - 1] = '\0';
    const char *env_ep = getenv("CSI_ENDPOINT");

    drv_config cfg = {
        .endpoint = env_ep && *env_ep ? env_ep : "unix:///tmp/csi.sock",
        .driver_name = "hostpath.csi.example.com",
        .node_id = host,
        .sync = true,
        .unpublish_missing_ok = true,
    };
    struct flag_values fv = {
        .capacity = "100Gi",
        .topology = "",
        .known_nodes = "",
        .controller_caps = DEFAULT_CONTROLLER_CAPS,
        .plugin_caps = DEFAULT_PLUGIN_CAPS,
        .node_caps = DEFAULT_NODE_CAPS,
        .fault = "",
    };

    util_flags *f = util_flags_new(PROG, SIDECAR_VERSION);
    util_flags_string(f, "endpoint", &cfg.endpoint,
                      "CSI endpoint to serve (unix:///path or /path); default $CSI_ENDPOINT");
    util_flags_string(f, "drivername", &cfg.driver_name, "name of the driver");
    util_flags_string(f, "nodeid", &cfg.node_id, "this node's id");
    util_flags_string(f, "state-dir", &cfg.state_dir,
                      "directory holding the volumes, state.json, status.json and faults.json "
                      "(required)");
    util_flags_string(f, "capacity", &fv.capacity,
                      "total bytes of the pool; plain or with a suffix Ki, Mi, Gi, Ti");
    util_flags_string(f, "topology", &fv.topology,
                      "this node's topology segments, key=value,...; empty: none");
    util_flags_int64(f, "max-volumes-per-node", &fv.max_volumes,
                     "volumes one node may have published; 0: no limit");
    util_flags_string(f, "known-nodes", &fv.known_nodes,
                      "other node ids ControllerPublishVolume accepts, a,b,c");
    util_flags_string(f, "controller-caps", &fv.controller_caps,
                      "controller capabilities to advertise (ControllerServiceCapability.RPC "
                      "names); one not advertised turns its RPCs UNIMPLEMENTED");
    util_flags_string(f, "plugin-caps", &fv.plugin_caps,
                      "plugin capabilities: CONTROLLER_SERVICE, "
                      "VOLUME_ACCESSIBILITY_CONSTRAINTS and ONLINE or OFFLINE expansion");
    util_flags_string(f, "node-caps", &fv.node_caps,
                      "node capabilities (NodeServiceCapability.RPC names)");
    util_flags_string(f, "fault", &fv.fault,
                      "fault injection, Method:rule;... with rules delay=<duration>, "
                      "fail=<n>:<CODE>[:<message>], crash=<n>[:before|:after]");
    util_flags_string(f, "backend-dir", &cfg.backend_dir,
                      "state directory of the process serving this driver's controller: "
                      "NodeStageVolume and NodePublishVolume find volumes this process does not "
                      "hold there, as the node of a networked backend would; empty: none");
    util_flags_bool(f, "mount", &cfg.mount,
                    "NodeStageVolume and NodePublishVolume bind-mount the volume's folder (a "
                    "block volume's backing file) for real, so that a workload's data lands in "
                    "the volume; needs CAP_SYS_ADMIN. false: only the target folders are made");
    util_flags_bool(f, "sync", &cfg.sync,
                    "fsync state.json after every change (false only for benchmarks)");
    util_flags_bool(f, "unpublish-missing-ok", &cfg.unpublish_missing_ok,
                    "ControllerUnpublishVolume of an unknown volume or node answers OK, as CSI "
                    "v1.12 says a plugin SHOULD; false answers NOT_FOUND (the spec's error "
                    "table)");
    util_flags_string(f, "publish-secret", &cfg.publish_secret,
                      "key=value: ControllerPublish/Unpublish calls that carry secrets must "
                      "carry this one (UNAUTHENTICATED otherwise)");
    obs_log_add_flags(f);
    int first = util_flags_parse_or_exit(f, argc, argv);

    int rc = 1;
    drv d = {.cfg = &cfg};
    csi_server *srv = NULL;
    char *faults_file = NULL;
    sigset_t sigs;

    if (first < argc) {
        fprintf(stderr, "%s: unexpected argument \"%s\"\n", PROG, argv[first]);
        goto out;
    }
    if (obs_log_apply() < 0 || build_config(&cfg, &fv) < 0) {
        fprintf(stderr, "%s: %s\n", PROG, util_err_last());
        goto out;
    }
    faults_file = util_asprintf("%s/faults.json", cfg.state_dir);
    if (drvkit_faults_new(drv_method_names(), DRV_N_METHODS, fv.fault, faults_file, &d.faults) <
        0) {
        fprintf(stderr, "%s: --fault: %s\n", PROG, util_err_last());
        goto out;
    }
    if (drv_store_new(cfg.state_dir, cfg.sync, &d.store) < 0) {
        fprintf(stderr, "%s: %s\n", PROG, util_err_last());
        goto out;
    }

    /* Threads started from here on inherit the blocked signals. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    csi_server_opts opts = {.threads = 16};
    if (csi_server_new(cfg.endpoint, &opts, &srv) < 0 ||
        csi_server_handle_all(srv, &csi__v1__identity__descriptor, drv_dispatch, &d) < 0 ||
        csi_server_handle_all(srv, &csi__v1__controller__descriptor, drv_dispatch, &d) < 0 ||
        csi_server_handle_all(srv, &csi__v1__node__descriptor, drv_dispatch, &d) < 0 ||
        csi_server_start(srv) < 0) {
        fprintf(stderr, "%s: %s\n", PROG, util_err_last());
        goto out;
    }
    obs_info("%s %s serving on %s (node %s, state in %s)", cfg.driver_name, SIDECAR_VERSION,
             cfg.endpoint, cfg.node_id, cfg.state_dir);

    int sig = 0;
    sigwait(&sigs, &sig);
    obs_info("signal %d: stopping", sig);
    atomic_store(&d.stopping, true);
    csi_server_stop(srv, 2 * UTIL_SECOND);
    rc = 0;

out:
    csi_server_free(srv);
    drv_store_free(d.store);
    drvkit_faults_free(d.faults);
    free(faults_file);
    config_free(&cfg);
    util_flags_free(f);
    return rc;
}
