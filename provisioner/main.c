/*
 * csi-provisioner: flags with external-provisioner's names and defaults,
 * start-up checks, then the controllers (controller.c) while this replica
 * leads. Misconfiguration exits 1 with one line saying what to fix.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "provisioner.h"
#include "kobj/kobj.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

struct flags {
    sidecar_flags common;
    const char *volume_name_prefix;
    int volume_name_uuid_length;
    util_duration retry_start, retry_max;
    int worker_threads;
    int cloning_protection_threads;
    util_duration snapshot_orphan_sweep_interval;
    int capacity_threads;
    util_duration timeout;
    bool strict_topology, immediate_topology, extra_create_metadata, enable_pprof;
    const char *default_fstype;
    double capacity_qps;
    int capacity_burst;
    bool enable_capacity, capacity_for_immediate_binding;
    util_duration capacity_poll_interval;
    int capacity_ownerref_level;
    bool node_deployment, node_deployment_immediate_binding;
    util_duration node_deployment_base_delay, node_deployment_max_delay;
    bool controller_publish_readonly, prevent_volume_mode_conversion;
    const char *feature_gates;
};

static void die(const char *msg)
{
    fprintf(stderr, "csi-provisioner: %s\n", msg);
    exit(1);
}

static void add_flags(util_flags *f, struct flags *fl)
{
    sidecar_flags_add(f, &fl->common,
                      SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER |
                          SIDECAR_FLAGS_HTTP);
    fl->volume_name_prefix = "pvc";
    fl->volume_name_uuid_length = -1;
    fl->retry_start = UTIL_SECOND;
    fl->retry_max = 5 * UTIL_MINUTE;
    fl->worker_threads = 100;
    fl->cloning_protection_threads = 1;
    fl->snapshot_orphan_sweep_interval = 5 * UTIL_MINUTE;
    fl->capacity_threads = 1;
    fl->timeout = 10 * UTIL_SECOND;
    fl->immediate_topology = true;
    fl->default_fstype = "";
    fl->capacity_qps = 1;
    fl->capacity_burst = 5;
    fl->capacity_poll_interval = UTIL_MINUTE;
    fl->capacity_ownerref_level = 1;
    fl->node_deployment_immediate_binding = true;
    fl->node_deployment_base_delay = 20 * UTIL_SECOND;
    fl->node_deployment_max_delay = 60 * UTIL_SECOND;
    fl->prevent_volume_mode_conversion = true;
    fl->feature_gates = "";
    util_flags_string(f, "master", &fl->common.master,
                      "Master URL to build a client config from. Either this or kubeconfig needs "
                      "to be set if the provisioner is being run out of cluster.");
    util_flags_string(f, "volume-name-prefix", &fl->volume_name_prefix,
                      "Prefix to apply to the name of a created volume.");
    util_flags_int(f, "volume-name-uuid-length", &fl->volume_name_uuid_length,
                   "Truncates generated UUID of a created volume to this length. Defaults behavior "
                   "is to NOT truncate.");
    util_flags_duration(f, "retry-interval-start", &fl->retry_start,
                        "Initial retry interval of failed provisioning or deletion. It doubles "
                        "with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &fl->retry_max,
                        "Maximum retry interval of failed provisioning or deletion.");
    util_flags_int(f, "worker-threads", &fl->worker_threads,
                   "Number of provisioner worker threads, in other words nr. of simultaneous CSI "
                   "calls.");
    util_flags_int(f, "cloning-protection-threads", &fl->cloning_protection_threads,
                   "Number of simultaneously running threads, handling cloning finalizer removal "
                   "(accepted; clone sources are released by the claim workers themselves)");
    util_flags_duration(f, "snapshot-orphan-sweep-interval", &fl->snapshot_orphan_sweep_interval,
                        "Interval of the sweeper that removes orphaned snapshot-source "
                        "finalizers; 0 disables the sweeper.");
    util_flags_int(f, "capacity-threads", &fl->capacity_threads,
                   "Number of simultaneously running threads, handling CSIStorageCapacity objects");
    util_flags_duration(f, "timeout", &fl->timeout,
                        "Timeout for waiting for creation or deletion "
                        "of a volume");
    util_flags_bool(f, "strict-topology", &fl->strict_topology,
                    "Late binding: pass only selected node topology to CreateVolume Request, "
                    "unlike default behavior of passing aggregated cluster topologies that match "
                    "with topology keys of the selected node.");
    util_flags_bool(f, "immediate-topology", &fl->immediate_topology,
                    "Immediate binding: pass aggregated cluster topologies for all nodes where "
                    "the CSI driver is available (enabled, the default) or no topology "
                    "requirements (if disabled).");
    util_flags_bool(f, "extra-create-metadata", &fl->extra_create_metadata,
                    "If set, add pv/pvc metadata to plugin create requests as parameters.");
    util_flags_bool(f, "enable-pprof", &fl->enable_pprof,
                    "Accepted for compatibility; there is no Go profiler here.");
    util_flags_string(f, "default-fstype", &fl->default_fstype,
                      "The default filesystem type of the volume to provision when fstype is "
                      "unspecified in the StorageClass.");
    util_flags_double(f, "kube-api-capacity-qps", &fl->capacity_qps,
                      "QPS to use for storage capacity updates while communicating with the "
                      "kubernetes apiserver.");
    util_flags_int(f, "kube-api-capacity-burst", &fl->capacity_burst,
                   "Burst to use for storage capacity updates while communicating with the "
                   "kubernetes apiserver.");
    util_flags_bool(f, "enable-capacity", &fl->enable_capacity,
                    "This enables producing CSIStorageCapacity objects with capacity information "
                    "from the driver's GetCapacity call.");
    util_flags_bool(f, "capacity-for-immediate-binding", &fl->capacity_for_immediate_binding,
                    "Enables producing capacity information for storage classes with immediate "
                    "binding.");
    util_flags_duration(f, "capacity-poll-interval", &fl->capacity_poll_interval,
                        "How long the external-provisioner waits before checking for storage "
                        "capacity changes.");
    util_flags_int(f, "capacity-ownerref-level", &fl->capacity_ownerref_level,
                   "The level indicates the number of objects that need to be traversed starting "
                   "from the pod identified by the POD_NAME and NAMESPACE environment variables "
                   "to reach the owning object for CSIStorageCapacity objects.");
    util_flags_bool(f, "node-deployment", &fl->node_deployment,
                    "Enables deploying the external-provisioner together with a CSI driver on "
                    "nodes to manage node-local volumes.");
    util_flags_bool(f, "node-deployment-immediate-binding", &fl->node_deployment_immediate_binding,
                    "Determines whether immediate binding is supported when deployed on each "
                    "node.");
    util_flags_duration(f, "node-deployment-base-delay", &fl->node_deployment_base_delay,
                        "Determines how long the external-provisioner sleeps initially before "
                        "trying to own a PVC with immediate binding.");
    util_flags_duration(f, "node-deployment-max-delay", &fl->node_deployment_max_delay,
                        "Determines how long the external-provisioner sleeps at most before "
                        "trying to own a PVC with immediate binding.");
    util_flags_bool(f, "controller-publish-readonly", &fl->controller_publish_readonly,
                    "This option enables PV to be marked as readonly at controller publish volume "
                    "call if PVC accessmode has been set to ROX.");
    util_flags_bool(f, "prevent-volume-mode-conversion", &fl->prevent_volume_mode_conversion,
                    "Prevents an unauthorised user from modifying the volume mode when creating a "
                    "PVC from an existing VolumeSnapshot.");
    util_flags_string(
        f, "feature-gates", &fl->feature_gates,
        "A set of key=value pairs that describe feature gates: Topology=true|false, "
        "VolumeAttributesClass=true|false, CrossNamespaceVolumeDataSource=true|false, "
        "ReleaseLeaderElectionOnExit=true|false.");
}

struct gates {
    bool topology, vac, cross_ns, release;
};

static void parse_gates(const char *s, struct gates *g)
{
    g->topology = true;
    g->vac = true;
    char *copy = util_strdup(s ? s : "");
    for (char *save = NULL, *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            die("--feature-gates: expected key=true|false");
        *eq = '\0';
        bool on;
        if (strcmp(eq + 1, "true") == 0)
            on = true;
        else if (strcmp(eq + 1, "false") == 0)
            on = false;
        else
            die("--feature-gates: values must be true or false");
        if (strcmp(kv, "Topology") == 0)
            g->topology = on;
        else if (strcmp(kv, "VolumeAttributesClass") == 0)
            g->vac = on;
        else if (strcmp(kv, "CrossNamespaceVolumeDataSource") == 0)
            g->cross_ns = on;
        else if (strcmp(kv, "ReleaseLeaderElectionOnExit") == 0)
            g->release = on;
        else {
            char *msg = util_asprintf("--feature-gates: unrecognized feature gate: %s", kv);
            die(msg);
        }
    }
    free(copy);
}

static const char *lock_name(void *ud, const char *driver)
{
    char *n = ud;
    snprintf(n, 256, "%s", driver);
    for (char *p = n; *p; p++)
        if (*p == '/')
            *p = '-';
    return n;
}

struct run_ctx {
    prov_ctrl_opts opts;
    prov_config cfg;
    prov_ctrl *ctrl;
    bool capacity;
    prov_cap_opts cap_opts;
    prov_cap_config cap_cfg;
    prov_cap *cap;
    char *cap_managed_by; /* the label value; node mode names the node */
    char *cap_segment;    /* node mode: this node's segment, else NULL */
};

static void run(void *ud)
{
    struct run_ctx *r = ud;
    if (r->capacity) {
        if (prov_cap_start(&r->cap_opts, &r->cap_cfg, &r->cap) < 0)
            obs_fatal_exit("cannot start the capacity controller: %s", util_err_last());
        r->opts.volume_changed = prov_cap_volume_changed;
        r->opts.volume_changed_ud = r->cap;
    }
    if (prov_ctrl_start(&r->opts, &r->cfg, &r->ctrl) < 0)
        obs_fatal_exit("cannot start the provisioner: %s", util_err_last());
}

/* Node mode: each node publishes for its own segment only, under its own
 * managed-by value, so no node ever sees (or deletes) another's objects. */
static void setup_capacity_node(struct run_ctx *r, const char *node,
                                const Csi__V1__Topology *topology)
{
    r->cap_managed_by = prov_cap_managed_by(node);
    if (!prov_cap_label_value_ok(r->cap_managed_by)) {
        char *msg = util_asprintf("--enable-capacity: NODE_NAME %s gives managed-by label value "
                                  "%s, which is not a valid label value",
                                  node, r->cap_managed_by);
        die(msg);
    }
    if (prov_cap_fixed_segment(topology, &r->cap_segment) < 0) {
        char *msg = util_asprintf("--enable-capacity: %s", util_err_last());
        die(msg);
    }
    if (!*r->cap_segment)
        /* As upstream: one object per class without nodeTopology, which
         * the scheduler reads as this capacity being on every node. */
        obs_warn("--enable-capacity with --node-deployment: the driver reports no topology for "
                 "this node, so its CSIStorageCapacity objects have no nodeTopology and claim "
                 "this node's capacity for every node");
    obs_info("producing CSIStorageCapacity objects with fixed topology segment {%s}, managed-by %s",
             r->cap_segment, r->cap_managed_by);
}

/* Capacity tracking's own client (upstream: a separate rate limit) and
 * the owner of its objects, looked up once at start as upstream does. */
static void setup_capacity(sidecar *s, const struct flags *fl, const csi_caps *caps,
                           struct run_ctx *r, kube_client **client, json_object **owner)
{
    char *ua = util_asprintf("external-provisioner/%s", SIDECAR_VERSION);
    kube_client_opts ko = {.qps = fl->capacity_qps,
                           .burst = fl->capacity_burst,
                           .user_agent = ua,
                           .metrics = sidecar_metrics(s)};
    int rc = kube_client_new(sidecar_kube_config(s), &ko, client);
    free(ua);
    if (rc < 0)
        die(util_err_last());
    /* A server without the v1 type (before 1.24) would leave the capacity
     * informer waiting for a sync that never comes. */
    if (prov_cap_check_api(*client) < 0)
        die(util_err_last());
    const char *ns = getenv("NAMESPACE");
    if (fl->capacity_ownerref_level >= 0) {
        if (prov_cap_lookup_owner(*client, ns, getenv("POD_NAME"), fl->capacity_ownerref_level,
                                  owner) < 0)
            die(util_err_last());
        obs_info("using %s/%s %s as owner of CSIStorageCapacity objects",
                 kobj_str(*owner, "apiVersion"), kobj_str(*owner, "kind"),
                 kobj_str(*owner, "name"));
    }
    if (!CSI_CAP(caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY))
        obs_warn("--enable-capacity: the driver does not report GET_CAPACITY; its GetCapacity "
                 "calls will fail and no CSIStorageCapacity gets written");
    r->capacity = true;
    r->cap_cfg =
        (prov_cap_config){.driver_name = r->cfg.driver_name,
                          .managed_by = r->cap_managed_by ? r->cap_managed_by : PROV_CAP_MANAGED_BY,
                          .namespace = ns,
                          .owner = *owner,
                          .immediate_binding = fl->capacity_for_immediate_binding};
    r->cap_opts = (prov_cap_opts){.csi = sidecar_csi(s),
                                  .kube = *client,
                                  .metrics = sidecar_metrics(s),
                                  .timeout = fl->timeout,
                                  .retry_start = fl->retry_start,
                                  .retry_max = fl->retry_max,
                                  .poll_interval = fl->capacity_poll_interval,
                                  .workers = fl->capacity_threads,
                                  .topology = r->cfg.topology,
                                  .fixed_segment = r->cap_segment};
}

int main(int argc, char **argv)
{
    /* glibc gives each busy thread its own arena, up to 8 per core; after a
     * burst of claims each arena keeps pages pinned by a few live chunks.
     * Two arenas: private dirty after 1,000 claims and 60 s of quiet 7.4 ->
     * 5.8 MiB at the same CPU per volume (bench_provision.sh, QUIET_S=60);
     * one, as the attacher uses, would make 100 workers queue on its lock. */
    mallopt(M_ARENA_MAX, 2);
    util_flags *f = util_flags_new("csi-provisioner", SIDECAR_VERSION);
    struct flags fl = {0};
    add_flags(f, &fl);
    util_flags_parse_or_exit(f, argc, argv);
    if (sidecar_flags_check(f, &fl.common) < 0)
        die(util_err_last());
    if (!fl.volume_name_prefix || !*fl.volume_name_prefix)
        die("--volume-name-prefix must not be empty");
    if (fl.volume_name_uuid_length < -1 || fl.volume_name_uuid_length == 0 ||
        fl.volume_name_uuid_length > 32)
        die("--volume-name-uuid-length must be -1 or between 1 and 32");
    if (fl.worker_threads < 1)
        die("--worker-threads must be at least 1");
    const char *node = getenv("NODE_NAME");
    if (fl.node_deployment && (!node || !*node))
        die("The NODE_NAME environment variable must be set when using --node-deployment.");
    if (!fl.node_deployment)
        node = NULL;
    if (node && fl.common.leader_election) {
        /* One lease for every node would leave all nodes but one idle:
         * each node's instance works on its own claims. */
        obs_warn("--leader-election is ignored with --node-deployment: every node runs its "
                 "own provisioner");
        fl.common.leader_election = false;
    }
    /* Before connecting anywhere: a missing variable is a deployment mistake. */
    const char *cap_ns = getenv("NAMESPACE"), *cap_pod = getenv("POD_NAME");
    if (fl.enable_capacity && (!cap_ns || !*cap_ns))
        die("need NAMESPACE env variable for CSIStorageCapacity objects (--enable-capacity)");
    if (fl.enable_capacity && fl.capacity_ownerref_level >= 0 && (!cap_pod || !*cap_pod))
        die("need POD_NAME env variable to determine CSIStorageCapacity owner "
            "(--enable-capacity with --capacity-ownerref-level >= 0)");
    if (fl.capacity_threads < 1)
        die("--capacity-threads must be at least 1");
    struct gates g = {0};
    parse_gates(fl.feature_gates, &g);
    obs_info("Version: %s", SIDECAR_VERSION);

    char lock[256];
    sidecar_opts so = {.component = "external-provisioner",
                       .version = SIDECAR_VERSION,
                       .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER |
                                SIDECAR_FLAGS_HTTP,
                       .timeout = fl.timeout,
                       .exit_on_csi_loss = true,
                       .probe = true,
                       .kubeconfig_env = true,
                       .healthz = true,
                       .release_on_exit = g.release,
                       .lock_name = lock_name,
                       .ud = lock};
    sidecar *s = NULL;
    if (sidecar_start(&fl.common, &so, &s) < 0)
        die(util_err_last());

    csi_caps caps = {0};
    csi_status st;
    Csi__V1__GetPluginCapabilitiesResponse *pc = NULL;
    Csi__V1__ControllerGetCapabilitiesResponse *cc = NULL;
    if (csi_get_plugin_capabilities(sidecar_csi(s), fl.timeout, &pc, &st) < 0) {
        fprintf(stderr, "csi-provisioner: error getting CSI driver capabilities: %s\n", st.message);
        return 1;
    }
    csi_caps_from_plugin(&caps, pc);
    csi__v1__get_plugin_capabilities_response__free_unpacked(pc, NULL);
    if (csi_controller_get_capabilities(sidecar_csi(s), fl.timeout, &cc, &st) < 0) {
        fprintf(stderr, "csi-provisioner: error getting CSI driver controller capabilities: %s\n",
                st.message);
        return 1;
    }
    csi_caps_from_controller(&caps, cc);
    csi__v1__controller_get_capabilities_response__free_unpacked(cc, NULL);
    /* Node mode: this node's id and topology come from the local driver. */
    Csi__V1__NodeGetInfoResponse *ni = NULL;
    if (node && csi_node_get_info(sidecar_csi(s), fl.timeout, &ni, &st) < 0) {
        fprintf(stderr, "csi-provisioner: failed to get node info from CSI driver: %s\n",
                st.message);
        return 1;
    }
    if (!CSI_CAP(caps.plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE) ||
        !CSI_CAP(caps.controller,
                 CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME))
        die("CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE or "
            "controller CREATE_DELETE_VOLUME capability is not reported");

    struct run_ctx r = {0};
    r.cfg.driver_name = sidecar_driver_name(s);
    r.cfg.volume_name_prefix = fl.volume_name_prefix;
    r.cfg.volume_name_uuid_length = fl.volume_name_uuid_length;
    r.cfg.extra_create_metadata = fl.extra_create_metadata;
    r.cfg.default_fstype = fl.default_fstype;
    r.cfg.strict_topology = fl.strict_topology;
    r.cfg.immediate_topology = fl.immediate_topology;
    r.cfg.controller_publish_readonly = fl.controller_publish_readonly;
    r.cfg.cross_namespace_source = g.cross_ns;
    r.cfg.vac_enabled = g.vac;
    prov_config_set_caps(&r.cfg, &caps, g.topology);
    unsigned rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char *identity = prov_identity((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000,
                                   (int)(rnd % 10000), r.cfg.driver_name, node);
    r.cfg.identity = identity;
    r.opts = (prov_ctrl_opts){
        .csi = sidecar_csi(s),
        .kube = sidecar_kube(s),
        .recorder = sidecar_recorder(s),
        .metrics = sidecar_metrics(s),
        .timeout = fl.timeout,
        .retry_start = fl.retry_start,
        .retry_max = fl.retry_max,
        .workers = fl.worker_threads,
        .prevent_volume_mode_conversion = fl.prevent_volume_mode_conversion,
        .sweep_interval = fl.snapshot_orphan_sweep_interval,
        .intent_namespace = fl.common.leader_election_namespace,
        .publish_unpublish =
            CSI_CAP(caps.controller,
                    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME),
    };
    if (node) {
        r.opts.node = (prov_node_opts){
            .name = node,
            .node_id = ni->node_id,
            .topology = ni->accessible_topology,
            .immediate_binding = fl.node_deployment_immediate_binding,
            .base_delay = fl.node_deployment_base_delay,
            .max_delay = fl.node_deployment_max_delay,
            .get_capacity = CSI_CAP(
                caps.controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY),
        };
        obs_info("node deployment for node %s (driver node id %s)", node, ni->node_id);
        /* Without a node segment a PV's nodeAffinity cannot say which node
         * holds it: every node would try to delete every released PV. */
        if (!r.cfg.topology || !ni->accessible_topology || ni->accessible_topology->n_segments == 0)
            obs_warn("--node-deployment: the driver reports no topology for this node, so every "
                     "node treats every PV as its own; node-local drivers should report "
                     "VOLUME_ACCESSIBILITY_CONSTRAINTS and a per-node segment");
    }
    kube_client *cap_client = NULL;
    json_object *cap_owner = NULL;
    if (fl.enable_capacity && node)
        setup_capacity_node(&r, node, ni->accessible_topology);
    if (fl.enable_capacity)
        setup_capacity(s, &fl, &caps, &r, &cap_client, &cap_owner);
    if (sidecar_serve(s, run, &r) < 0)
        die(util_err_last());
    sidecar_wait(s);
    prov_ctrl_stop(r.ctrl);
    prov_cap_stop(r.cap);
    sidecar_free(s);
    kube_client_free(cap_client);
    json_object_put(cap_owner);
    free(identity);
    free(r.cap_managed_by);
    free(r.cap_segment);
    if (ni)
        csi__v1__node_get_info_response__free_unpacked(ni, NULL);
    util_flags_free(f);
    return 0;
}
