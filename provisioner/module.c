/*
 * csi-provisioner as a controller module: flags with external-provisioner's
 * names and defaults, start-up checks, the capabilities (CONTROLLER_SERVICE
 * and CREATE_DELETE_VOLUME are required), node deployment and capacity
 * tracking set up, then the controllers (controller.c, capacity.c) while
 * this replica leads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "kobj/kobj.h"
#include "provisioner.h"
#include "sidecar/sidecar.h"

typedef struct prov_module_state {
    sidecar_flags *common;
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
    bool topology, vac, cross_ns, release; /* gates */
    const char *node;                      /* --node-deployment: $NODE_NAME */
    const char *version;
    prov_ctrl_opts opts;
    prov_config cfg;
    prov_ctrl *ctrl;
    bool capacity;
    prov_cap_opts cap_opts;
    prov_cap_config cap_cfg;
    prov_cap *cap;
    char *cap_managed_by; /* the label value; node mode names the node */
    char *cap_segment;    /* node mode: this node's segment, else NULL */
    kube_client *cap_client;
    json_object *cap_owner;
    char *identity;
    Csi__V1__NodeGetInfoResponse *node_info;
} prov_module_state;

static void *mod_new(util_flags *f, sidecar_flags *common)
{
    prov_module_state *m = util_calloc(1, sizeof(*m));
    m->common = common;
    m->volume_name_prefix = "pvc";
    m->volume_name_uuid_length = -1;
    m->retry_start = UTIL_SECOND;
    m->retry_max = 5 * UTIL_MINUTE;
    m->worker_threads = 100;
    m->cloning_protection_threads = 1;
    m->snapshot_orphan_sweep_interval = 5 * UTIL_MINUTE;
    m->capacity_threads = 1;
    m->timeout = 10 * UTIL_SECOND;
    m->immediate_topology = true;
    m->default_fstype = "";
    m->capacity_qps = 1;
    m->capacity_burst = 5;
    m->capacity_poll_interval = UTIL_MINUTE;
    m->capacity_ownerref_level = 1;
    m->node_deployment_immediate_binding = true;
    m->node_deployment_base_delay = 20 * UTIL_SECOND;
    m->node_deployment_max_delay = 60 * UTIL_SECOND;
    m->prevent_volume_mode_conversion = true;
    m->feature_gates = "";
    util_flags_string(f, "volume-name-prefix", &m->volume_name_prefix,
                      "Prefix to apply to the name of a created volume.");
    util_flags_int(f, "volume-name-uuid-length", &m->volume_name_uuid_length,
                   "Truncates generated UUID of a created volume to this length. Defaults behavior "
                   "is to NOT truncate.");
    util_flags_duration(f, "retry-interval-start", &m->retry_start,
                        "Initial retry interval of failed provisioning or deletion. It doubles "
                        "with each failure, up to retry-interval-max.");
    util_flags_duration(f, "retry-interval-max", &m->retry_max,
                        "Maximum retry interval of failed provisioning or deletion.");
    util_flags_int(f, "worker-threads", &m->worker_threads,
                   "Number of provisioner worker threads, in other words nr. of simultaneous CSI "
                   "calls.");
    util_flags_int(f, "cloning-protection-threads", &m->cloning_protection_threads,
                   "Number of simultaneously running threads, handling cloning finalizer removal "
                   "(accepted; clone sources are released by the claim workers themselves)");
    util_flags_duration(f, "snapshot-orphan-sweep-interval", &m->snapshot_orphan_sweep_interval,
                        "Interval of the sweeper that removes orphaned snapshot-source "
                        "finalizers; 0 disables the sweeper.");
    util_flags_int(f, "capacity-threads", &m->capacity_threads,
                   "Number of simultaneously running threads, handling CSIStorageCapacity objects");
    util_flags_duration(f, "timeout", &m->timeout,
                        "Timeout for waiting for creation or deletion "
                        "of a volume");
    util_flags_bool(f, "strict-topology", &m->strict_topology,
                    "Late binding: pass only selected node topology to CreateVolume Request, "
                    "unlike default behavior of passing aggregated cluster topologies that match "
                    "with topology keys of the selected node.");
    util_flags_bool(f, "immediate-topology", &m->immediate_topology,
                    "Immediate binding: pass aggregated cluster topologies for all nodes where "
                    "the CSI driver is available (enabled, the default) or no topology "
                    "requirements (if disabled).");
    util_flags_bool(f, "extra-create-metadata", &m->extra_create_metadata,
                    "If set, add pv/pvc metadata to plugin create requests as parameters.");
    util_flags_bool(f, "enable-pprof", &m->enable_pprof,
                    "Accepted for compatibility; there is no Go profiler here.");
    util_flags_string(f, "default-fstype", &m->default_fstype,
                      "The default filesystem type of the volume to provision when fstype is "
                      "unspecified in the StorageClass.");
    util_flags_double(f, "kube-api-capacity-qps", &m->capacity_qps,
                      "QPS to use for storage capacity updates while communicating with the "
                      "kubernetes apiserver.");
    util_flags_int(f, "kube-api-capacity-burst", &m->capacity_burst,
                   "Burst to use for storage capacity updates while communicating with the "
                   "kubernetes apiserver.");
    util_flags_bool(f, "enable-capacity", &m->enable_capacity,
                    "This enables producing CSIStorageCapacity objects with capacity information "
                    "from the driver's GetCapacity call.");
    util_flags_bool(f, "capacity-for-immediate-binding", &m->capacity_for_immediate_binding,
                    "Enables producing capacity information for storage classes with immediate "
                    "binding.");
    util_flags_duration(f, "capacity-poll-interval", &m->capacity_poll_interval,
                        "How long the external-provisioner waits before checking for storage "
                        "capacity changes.");
    util_flags_int(f, "capacity-ownerref-level", &m->capacity_ownerref_level,
                   "The level indicates the number of objects that need to be traversed starting "
                   "from the pod identified by the POD_NAME and NAMESPACE environment variables "
                   "to reach the owning object for CSIStorageCapacity objects.");
    util_flags_bool(f, "node-deployment", &m->node_deployment,
                    "Enables deploying the external-provisioner together with a CSI driver on "
                    "nodes to manage node-local volumes.");
    util_flags_bool(f, "node-deployment-immediate-binding", &m->node_deployment_immediate_binding,
                    "Determines whether immediate binding is supported when deployed on each "
                    "node.");
    util_flags_duration(f, "node-deployment-base-delay", &m->node_deployment_base_delay,
                        "Determines how long the external-provisioner sleeps initially before "
                        "trying to own a PVC with immediate binding.");
    util_flags_duration(f, "node-deployment-max-delay", &m->node_deployment_max_delay,
                        "Determines how long the external-provisioner sleeps at most before "
                        "trying to own a PVC with immediate binding.");
    util_flags_bool(f, "controller-publish-readonly", &m->controller_publish_readonly,
                    "This option enables PV to be marked as readonly at controller publish volume "
                    "call if PVC accessmode has been set to ROX.");
    util_flags_bool(f, "prevent-volume-mode-conversion", &m->prevent_volume_mode_conversion,
                    "Prevents an unauthorised user from modifying the volume mode when creating a "
                    "PVC from an existing VolumeSnapshot.");
    util_flags_string(
        f, "feature-gates", &m->feature_gates,
        "A set of key=value pairs that describe feature gates: Topology=true|false, "
        "VolumeAttributesClass=true|false, CrossNamespaceVolumeDataSource=true|false, "
        "ReleaseLeaderElectionOnExit=true|false.");
    return m;
}

static int mod_configure(void *state, const util_flags *f, sidecar_opts *so)
{
    (void)f;
    prov_module_state *m = state;
    if (!m->volume_name_prefix || !*m->volume_name_prefix)
        return util_err_set(-EINVAL, "--volume-name-prefix must not be empty");
    if (m->volume_name_uuid_length < -1 || m->volume_name_uuid_length == 0 ||
        m->volume_name_uuid_length > 32)
        return util_err_set(-EINVAL, "--volume-name-uuid-length must be -1 or between 1 and 32");
    if (m->worker_threads < 1)
        return util_err_set(-EINVAL, "--worker-threads must be at least 1");
    const char *node = getenv("NODE_NAME");
    if (m->node_deployment && (!node || !*node))
        return util_err_set(-EINVAL, "The NODE_NAME environment variable must be set when using "
                                     "--node-deployment.");
    m->node = m->node_deployment ? node : NULL;
    if (m->node && m->common->leader_election) {
        /* One lease for every node would leave all nodes but one idle:
         * each node's instance works on its own claims. */
        obs_warn("--leader-election is ignored with --node-deployment: every node runs its "
                 "own provisioner");
        m->common->leader_election = false;
    }
    /* Before connecting anywhere: a missing variable is a deployment mistake. */
    const char *cap_ns = getenv("NAMESPACE"), *cap_pod = getenv("POD_NAME");
    if (m->enable_capacity && (!cap_ns || !*cap_ns))
        return util_err_set(-EINVAL, "need NAMESPACE env variable for CSIStorageCapacity objects "
                                     "(--enable-capacity)");
    if (m->enable_capacity && m->capacity_ownerref_level >= 0 && (!cap_pod || !*cap_pod))
        return util_err_set(-EINVAL,
                            "need POD_NAME env variable to determine CSIStorageCapacity owner "
                            "(--enable-capacity with --capacity-ownerref-level >= 0)");
    if (m->capacity_threads < 1)
        return util_err_set(-EINVAL, "--capacity-threads must be at least 1");
    m->topology = m->vac = true;
    const sidecar_gate gates[] = {{"Topology", &m->topology},
                                  {"VolumeAttributesClass", &m->vac},
                                  {"CrossNamespaceVolumeDataSource", &m->cross_ns},
                                  {"ReleaseLeaderElectionOnExit", &m->release},
                                  {NULL, NULL}};
    if (sidecar_gates_parse(m->feature_gates, gates) < 0)
        return -EINVAL;
    m->version = so->version;
    so->component = "external-provisioner";
    so->timeout = m->timeout;
    so->exit_on_csi_loss = true;
    so->probe = true;
    so->kubeconfig_env = true;
    so->healthz = true;
    so->release_on_exit = m->release;
    return 0;
}

/* Upstream's lease: the driver name with '/' made '-'. */
static char *lock_name(const char *driver)
{
    char *n = util_strdup(driver);
    for (char *p = n; *p; p++)
        if (*p == '/')
            *p = '-';
    return n;
}

/* Node mode: each node publishes for its own segment only, under its own
 * managed-by value, so no node ever sees (or deletes) another's objects. */
static int setup_capacity_node(prov_module_state *m, const Csi__V1__Topology *topology)
{
    m->cap_managed_by = prov_cap_managed_by(m->node);
    if (!prov_cap_label_value_ok(m->cap_managed_by))
        return util_err_set(-EINVAL,
                            "--enable-capacity: NODE_NAME %s gives managed-by label value %s, "
                            "which is not a valid label value",
                            m->node, m->cap_managed_by);
    if (prov_cap_fixed_segment(topology, &m->cap_segment) < 0)
        return util_err_set(-EINVAL, "--enable-capacity: %s", util_err_last());
    if (!*m->cap_segment)
        /* As upstream: one object per class without nodeTopology, which
         * the scheduler reads as this capacity being on every node. */
        obs_warn("--enable-capacity with --node-deployment: the driver reports no topology for "
                 "this node, so its CSIStorageCapacity objects have no nodeTopology and claim "
                 "this node's capacity for every node");
    obs_info("producing CSIStorageCapacity objects with fixed topology segment {%s}, managed-by %s",
             m->cap_segment, m->cap_managed_by);
    return 0;
}

/* Capacity tracking's own client (upstream: a separate rate limit) and
 * the owner of its objects, looked up once at start as upstream does. */
static int setup_capacity(prov_module_state *m, sidecar *s, const csi_caps *caps)
{
    char *ua = util_asprintf("external-provisioner/%s", m->version);
    kube_client_opts ko = {.qps = m->capacity_qps,
                           .burst = m->capacity_burst,
                           .user_agent = ua,
                           .metrics = sidecar_metrics(s)};
    int rc = kube_client_new(sidecar_kube_config(s), &ko, &m->cap_client);
    free(ua);
    if (rc < 0)
        return rc;
    /* A server without the v1 type (before 1.24) would leave the capacity
     * informer waiting for a sync that never comes. */
    rc = prov_cap_check_api(m->cap_client);
    if (rc < 0)
        return rc;
    const char *ns = getenv("NAMESPACE");
    if (m->capacity_ownerref_level >= 0) {
        rc = prov_cap_lookup_owner(m->cap_client, ns, getenv("POD_NAME"),
                                   m->capacity_ownerref_level, &m->cap_owner);
        if (rc < 0)
            return rc;
        obs_info("using %s/%s %s as owner of CSIStorageCapacity objects",
                 kobj_str(m->cap_owner, "apiVersion"), kobj_str(m->cap_owner, "kind"),
                 kobj_str(m->cap_owner, "name"));
    }
    if (!CSI_CAP(caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY))
        obs_warn("--enable-capacity: the driver does not report GET_CAPACITY; its GetCapacity "
                 "calls will fail and no CSIStorageCapacity gets written");
    m->capacity = true;
    m->cap_cfg =
        (prov_cap_config){.driver_name = m->cfg.driver_name,
                          .managed_by = m->cap_managed_by ? m->cap_managed_by : PROV_CAP_MANAGED_BY,
                          .namespace = ns,
                          .owner = m->cap_owner,
                          .immediate_binding = m->capacity_for_immediate_binding};
    m->cap_opts = (prov_cap_opts){.csi = sidecar_csi(s),
                                  .kube = m->cap_client,
                                  .metrics = sidecar_metrics(s),
                                  .timeout = m->timeout,
                                  .retry_start = m->retry_start,
                                  .retry_max = m->retry_max,
                                  .poll_interval = m->capacity_poll_interval,
                                  .workers = m->capacity_threads,
                                  .topology = m->cfg.topology,
                                  .fixed_segment = m->cap_segment};
    return 0;
}

static void setup_node(prov_module_state *m, const csi_caps *caps)
{
    const Csi__V1__NodeGetInfoResponse *ni = m->node_info;
    m->opts.node = (prov_node_opts){
        .name = m->node,
        .node_id = ni->node_id,
        .topology = ni->accessible_topology,
        .immediate_binding = m->node_deployment_immediate_binding,
        .base_delay = m->node_deployment_base_delay,
        .max_delay = m->node_deployment_max_delay,
        .get_capacity = CSI_CAP(caps->controller,
                                CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY),
    };
    obs_info("node deployment for node %s (driver node id %s)", m->node, ni->node_id);
    /* Without a node segment a PV's nodeAffinity cannot say which node
     * holds it: every node would try to delete every released PV. */
    if (!m->cfg.topology || !ni->accessible_topology || ni->accessible_topology->n_segments == 0)
        obs_warn("--node-deployment: the driver reports no topology for this node, so every "
                 "node treats every PV as its own; node-local drivers should report "
                 "VOLUME_ACCESSIBILITY_CONSTRAINTS and a per-node segment");
}

static int mod_prepare(void *state, sidecar *s)
{
    prov_module_state *m = state;
    csi_caps caps = {0};
    csi_status st;
    if (sidecar_caps(s, SIDECAR_CAPS_PLUGIN, &caps, &st) < 0)
        return util_err_set(-EIO, "error getting CSI driver capabilities: %s", st.message);
    if (sidecar_caps(s, SIDECAR_CAPS_PLUGIN | SIDECAR_CAPS_CONTROLLER, &caps, &st) < 0)
        return util_err_set(-EIO, "error getting CSI driver controller capabilities: %s",
                            st.message);
    /* Node mode: this node's id and topology come from the local driver. */
    if (m->node && csi_node_get_info(sidecar_csi(s), m->timeout, &m->node_info, &st) < 0)
        return util_err_set(-EIO, "failed to get node info from CSI driver: %s", st.message);
    if (!CSI_CAP(caps.plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE) ||
        !CSI_CAP(caps.controller,
                 CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME))
        return util_err_set(-ENOTSUP,
                            "CSI driver does not support dynamic provisioning: plugin "
                            "CONTROLLER_SERVICE or controller CREATE_DELETE_VOLUME capability is "
                            "not reported");

    m->cfg.driver_name = sidecar_driver_name(s);
    m->cfg.volume_name_prefix = m->volume_name_prefix;
    m->cfg.volume_name_uuid_length = m->volume_name_uuid_length;
    m->cfg.extra_create_metadata = m->extra_create_metadata;
    m->cfg.default_fstype = m->default_fstype;
    m->cfg.strict_topology = m->strict_topology;
    m->cfg.immediate_topology = m->immediate_topology;
    m->cfg.controller_publish_readonly = m->controller_publish_readonly;
    m->cfg.cross_namespace_source = m->cross_ns;
    m->cfg.vac_enabled = m->vac;
    prov_config_set_caps(&m->cfg, &caps, m->topology);
    unsigned rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    m->identity = prov_identity((int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000,
                                (int)(rnd % 10000), m->cfg.driver_name, m->node);
    m->cfg.identity = m->identity;
    m->opts = (prov_ctrl_opts){
        .csi = sidecar_csi(s),
        .kube = sidecar_kube(s),
        .recorder = sidecar_recorder_for(s, prov_module.prog),
        .metrics = sidecar_metrics(s),
        .timeout = m->timeout,
        .retry_start = m->retry_start,
        .retry_max = m->retry_max,
        .workers = m->worker_threads,
        .prevent_volume_mode_conversion = m->prevent_volume_mode_conversion,
        .sweep_interval = m->snapshot_orphan_sweep_interval,
        .intent_namespace = m->common->leader_election_namespace,
        .publish_unpublish =
            CSI_CAP(caps.controller,
                    CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME),
    };
    if (m->node)
        setup_node(m, &caps);
    if (m->enable_capacity && m->node &&
        setup_capacity_node(m, m->node_info->accessible_topology) < 0)
        return -EINVAL;
    if (m->enable_capacity && setup_capacity(m, s, &caps) < 0)
        return -EIO;
    return 0;
}

static int mod_start(void *state)
{
    prov_module_state *m = state;
    if (m->capacity) {
        int r = prov_cap_start(&m->cap_opts, &m->cap_cfg, &m->cap);
        if (r < 0)
            return util_err_set(r, "the capacity controller: %s", util_err_last());
        m->opts.volume_changed = prov_cap_volume_changed;
        m->opts.volume_changed_ud = m->cap;
    }
    return prov_ctrl_start(&m->opts, &m->cfg, &m->ctrl);
}

static int mod_stop(void *state)
{
    prov_module_state *m = state;
    prov_ctrl_stop(m->ctrl);
    prov_cap_stop(m->cap);
    m->ctrl = NULL;
    m->cap = NULL;
    return 0;
}

static void mod_free(void *state)
{
    prov_module_state *m = state;
    kube_client_free(m->cap_client);
    json_object_put(m->cap_owner);
    free(m->identity);
    free(m->cap_managed_by);
    free(m->cap_segment);
    if (m->node_info)
        csi__v1__node_get_info_response__free_unpacked(m->node_info, NULL);
    free(m);
}

const sidecar_module prov_module = {
    .name = "provisioner",
    .prog = "csi-provisioner",
    .title = "the provisioner",
    .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_MASTER | SIDECAR_FLAGS_LEADER |
             SIDECAR_FLAGS_HTTP,
    /* After a burst of claims each arena keeps pages pinned by a few live
     * chunks. Two: private dirty after 1,000 claims and 60 s of quiet 7.4 ->
     * 5.8 MiB at the same CPU per volume (bench_provision.sh, QUIET_S=60);
     * one, as the attacher uses, would make 100 workers queue on its lock. */
    .malloc_arenas = 2,
    .new = mod_new,
    .configure = mod_configure,
    .lock_name = lock_name,
    .prepare = mod_prepare,
    .start = mod_start,
    .stop = mod_stop,
    .free = mod_free,
};
