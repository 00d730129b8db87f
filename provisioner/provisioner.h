/*
 * provisioner: the external-provisioner sidecar. A PVC of our driver becomes
 * a CreateVolume call and then a PersistentVolume; a released PV with reclaim
 * policy Delete becomes a DeleteVolume call.
 *
 * This header has two parts:
 *
 *   planning    (plan*.c) the pure core. Everything upstream decides from
 *               the PVC, the StorageClass, the driver's capabilities and the
 *               node topology: the volume name, secret references, the
 *               stripped parameters, volume capabilities, topology
 *               requirements, the CreateVolumeRequest, the checks on the
 *               response, the PV object, and what a gRPC error means for the
 *               claim. No I/O, no clock, no randomness, no global state:
 *               whatever upstream fetches or draws at random is an input here,
 *               so every rule is a row in tests/unit/test_prov_plan.c.
 *   controller  (appended below the planning part) the I/O around it.
 *
 * Objects come in as json-c trees exactly as the API server sends them and
 * are only read. Every function returns 0 or a negative errno with the
 * message in util_err_last(); messages a user sees in Events match
 * upstream's texts.
 */
#ifndef CSISIDECAR_PROVISIONER_H
#define CSISIDECAR_PROVISIONER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "csi/csi.h"
#include "kube/kube.h"
#include "util/util.h"

/* ========================================================================== */
/* ==== planning ============================================================ */
/* ========================================================================== */

/* ---- names read and written ---------------------------------------------- */

#define PROV_PARAM_PREFIX "csi.storage.k8s.io/"

#define PROV_ANN_STORAGE_PROVISIONER      "volume.kubernetes.io/storage-provisioner"
#define PROV_ANN_BETA_STORAGE_PROVISIONER "volume.beta.kubernetes.io/storage-provisioner"
#define PROV_ANN_MIGRATED_TO              "pv.kubernetes.io/migrated-to"
#define PROV_ANN_SELECTED_NODE            "volume.kubernetes.io/selected-node"
#define PROV_ANN_ALPHA_SELECTED_NODE      "volume.alpha.kubernetes.io/selected-node"
#define PROV_ANN_BETA_STORAGE_CLASS       "volume.beta.kubernetes.io/storage-class"
#define PROV_ANN_PROVISIONED_BY           "pv.kubernetes.io/provisioned-by"
#define PROV_ANN_DELETION_SECRET_NAME     "volume.kubernetes.io/provisioner-deletion-secret-name"
#define PROV_ANN_DELETION_SECRET_NAMESPACE                                                         \
    "volume.kubernetes.io/provisioner-deletion-secret-namespace"
#define PROV_ANN_MODIFY_SECRET_NAME      "volume.kubernetes.io/controller-modify-secret-name"
#define PROV_ANN_MODIFY_SECRET_NAMESPACE "volume.kubernetes.io/controller-modify-secret-namespace"
#define PROV_PV_FINALIZER                "external-provisioner.volume.kubernetes.io/finalizer"
#define PROV_CLONE_FINALIZER             "provisioner.storage.kubernetes.io/cloning-protection"
#define PROV_IDENTITY_KEY                "storage.kubernetes.io/csiProvisionerIdentity"
#define PROV_PARAM_PVC_NAME              "csi.storage.k8s.io/pvc/name"
#define PROV_PARAM_PVC_NAMESPACE         "csi.storage.k8s.io/pvc/namespace"
#define PROV_PARAM_PV_NAME               "csi.storage.k8s.io/pv/name"

/* The ProvisioningFailed event text of an infeasible (INVALID_ARGUMENT)
 * error is this prefix followed by the error text. */
#define PROV_INFEASIBLE_EVENT_PREFIX                                                               \
    "Volume provisioning failed with infeasible error. Retries will be delayed. "

/* ---- configuration -------------------------------------------------------- */

/* Receives each deprecation warning upstream logs with klog.Warning. */
typedef void (*prov_warn_fn)(void *ud, const char *msg);

typedef struct prov_config {
    const char *driver_name;          /* from GetPluginInfo */
    const char *volume_name_prefix;   /* --volume-name-prefix ("pvc") */
    int volume_name_uuid_length;      /* --volume-name-uuid-length (-1: whole UID) */
    bool extra_create_metadata;       /* --extra-create-metadata */
    const char *default_fstype;       /* --default-fstype ("" or NULL: none) */
    bool strict_topology;             /* --strict-topology */
    bool immediate_topology;          /* --immediate-topology (upstream default true) */
    bool controller_publish_readonly; /* --controller-publish-readonly */
    /* plugin VOLUME_ACCESSIBILITY_CONSTRAINTS and the Topology gate */
    bool topology;
    /* gate VolumeAttributesClass (and the v1 API present) */
    bool vac_enabled;
    /* gate CrossNamespaceVolumeDataSource */
    bool cross_namespace_source;
    /* Driver capabilities checked before provisioning. */
    bool controller_service;       /* plugin CONTROLLER_SERVICE */
    bool create_delete_volume;     /* controller CREATE_DELETE_VOLUME */
    bool create_delete_snapshot;   /* controller CREATE_DELETE_SNAPSHOT */
    bool clone_volume;             /* controller CLONE_VOLUME */
    bool modify_volume;            /* controller MODIFY_VOLUME */
    bool single_node_multi_writer; /* controller SINGLE_NODE_MULTI_WRITER */
    /* Value of storage.kubernetes.io/csiProvisionerIdentity (prov_identity). */
    const char *identity;
    prov_warn_fn warn; /* may be NULL: warnings are dropped */
    void *warn_ud;
} prov_config;

/* Sets the capability fields of `cfg` from the driver's capability masks.
 * `gate_topology` is the Topology feature gate (GA, on by default). */
void prov_config_set_caps(prov_config *cfg, const csi_caps *caps, bool gate_topology);

/*
 * The provisioner identity, "<unix-ms>-<rand>-<driver>[-<node>]", as upstream
 * builds it at start-up (rand is the caller's draw in 0..9999; node NULL or
 * "" outside --node-deployment). Caller frees.
 */
char *prov_identity(int64_t unix_ms, int rand4, const char *driver, const char *node);

/* The provisioner as a controller module (module.c; common/sidecar). */
struct sidecar_module;
extern const struct sidecar_module prov_module;

/* ---- outcome of a provisioning step --------------------------------------- */

/* What a failure means for the claim (lib ProvisioningState). */
typedef enum {
    PROV_FINAL = 0,     /* final failure: nothing in flight; retried with backoff */
    PROV_NO_CHANGE,     /* cannot decide now (missing object, bad secret template): retry */
    PROV_IN_BACKGROUND, /* the driver may still be working on it: must retry, even after
                           the PVC is gone */
    PROV_RESCHEDULE,    /* give the node back: remove the selected-node annotation */
} prov_state;

const char *prov_state_name(prov_state s); /* "Finished", "NoChange", ... */

/* Not a gRPC status (the call failed before reaching the driver). */
#define PROV_NOT_GRPC (-1)

/*
 * Classifies a failed CreateVolume (A1.5 step 6): not a gRPC error,
 * CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE, ABORTED -> IN_BACKGROUND;
 * RESOURCE_EXHAUSTED -> RESCHEDULE when topology is supported and a node was
 * selected, else FINAL; anything else -> FINAL.
 */
prov_state prov_classify(int grpc_code, bool topology_supported, bool has_selected_node);
/* INVALID_ARGUMENT: the lib retries it no sooner than --retry-interval-max. */
bool prov_is_infeasible(int grpc_code);

/* ---- names ------------------------------------------------------------------ */

/*
 * "<prefix>-<uid>", or with a uuid length >= 0 the UID without dashes cut to
 * that many characters. Caller frees *out.
 */
int prov_volume_name(const prov_config *cfg, const char *pvc_uid, char **out);

/* The PVC's selected node (volume.kubernetes.io/selected-node, else the alpha
 * key), or NULL when neither annotation is present. Borrowed from `pvc`. */
const char *prov_selected_node(const json_object *pvc);

/* The PVC's class: the beta annotation, else spec.storageClassName, else "". */
const char *prov_pvc_class(const json_object *pvc);

/* Whether the claim asks for `driver`: its storage-provisioner annotation,
 * else the beta one, names it (shouldProvision, A1.5 step 2). */
bool prov_pvc_wants_driver(const json_object *pvc, const char *driver);

/*
 * Whether a claim sync of this claim, as it stands, would find nothing to do
 * when the controller holds no intent entry for it: it asks for another
 * driver (or none yet) and carries neither the in-progress finalizer of an
 * older version nor the cloning-protection finalizer. The watch handler
 * skips waking a worker for such a change; in a shared cluster that is
 * every claim of every other driver.
 */
bool prov_claim_sync_idle(const json_object *pvc, const char *driver);

/* ---- quantities ------------------------------------------------------------- */

/*
 * Parses a Kubernetes resource.Quantity ("10Gi", "1.5G", "500m", "1e3",
 * "+.5Ki") and gives its value rounded up, away from zero, to a whole number
 * (Quantity.Value()), capped at INT64_MAX. -EINVAL with upstream's message on
 * bad syntax or an unknown suffix.
 */
int prov_quantity_parse(const char *s, int64_t *out);

#define PROV_QUANTITY_MAX 32
/* Formats bytes as a BinarySI quantity the way the API server prints it:
 * "1Gi", "1536Mi", "1500", "1k" (below 1024 the decimal form is used). */
void prov_quantity_format(int64_t v, char *buf, size_t len);

/* spec.resources.requests.storage of a PVC in bytes (0 when not set). */
int prov_pvc_request_bytes(const json_object *pvc, int64_t *out);

/* ---- access modes ------------------------------------------------------------ */

/*
 * Maps a list of Kubernetes access modes to one CSI mode (csi-lib-utils
 * ToCSIAccessMode): volcap_access_mode's rule, with "unsupported
 * AccessMode combination: [a b]" when no mode is known. All errors -EINVAL.
 */
int prov_access_mode(const char *const *modes, size_t n, bool snmw,
                     Csi__V1__VolumeCapability__AccessMode__Mode *out);

/* ---- StorageClass parameters ------------------------------------------------- */

/*
 * The fsType: csi.storage.k8s.io/fstype or the deprecated "fstype" key in
 * any letter case (warns), else --default-fstype, else "". Both set is
 * -EINVAL. `sc_params` may be NULL. Caller frees *out.
 */
int prov_fstype(const prov_config *cfg, const json_object *sc_params, char **out);

/*
 * The parameters sent to the driver: every key without the reserved prefix
 * (deprecated keys included), the known reserved keys dropped, any other
 * reserved key -EINVAL. *out is a new object of strings (json_object_put it).
 */
int prov_strip_parameters(const json_object *sc_params, json_object **out);

/* ---- secrets ------------------------------------------------------------------ */

typedef enum {
    PROV_SECRET_PROVISIONER = 0, /* CreateVolume/DeleteVolume; PV deletion annotations */
    PROV_SECRET_CONTROLLER_PUBLISH,
    PROV_SECRET_NODE_STAGE,
    PROV_SECRET_NODE_PUBLISH,
    PROV_SECRET_CONTROLLER_EXPAND,
    PROV_SECRET_NODE_EXPAND,
    PROV_SECRET_CONTROLLER_MODIFY, /* PV annotations only */
    PROV_SECRET_KINDS
} prov_secret_kind;

/* A resolved reference; both NULL when this kind has no secret. */
typedef struct prov_secret_ref {
    char *name;
    char *namespace;
} prov_secret_ref;

typedef struct prov_secret_refs {
    prov_secret_ref ref[PROV_SECRET_KINDS];
} prov_secret_refs;

/* Upstream's name of a kind in messages: "Provisioner", "NodeStage", ... */
const char *prov_secret_kind_name(prov_secret_kind kind);

/*
 * Resolves one kind from the StorageClass parameters: the prefixed keys or
 * the deprecated csi* keys (warns), else the default secret-name/-namespace;
 * the pair must be complete and non-empty; templates ${pv.name},
 * ${pvc.namespace} (namespace and name) and ${pvc.name},
 * ${pvc.annotations['<key>']} (name only) are expanded like Go's os.Expand;
 * the namespace must be a DNS-1123 label and the name a DNS-1123 subdomain.
 * `pvc` may be NULL (then only ${pv.name} resolves). Errors are -EINVAL with
 * upstream's text; *out is left empty.
 */
int prov_secret_ref_resolve(const prov_config *cfg, prov_secret_kind kind,
                            const json_object *sc_params, const char *pv_name,
                            const json_object *pvc, prov_secret_ref *out);
/* Every kind, in upstream's order; stops at the first error (out cleared). */
int prov_secret_refs_resolve(const prov_config *cfg, const json_object *sc_params,
                             const char *pv_name, const json_object *pvc, prov_secret_refs *out);
void prov_secret_refs_clear(prov_secret_refs *refs);

/* ---- topology ---------------------------------------------------------------- */

/*
 * Inputs of the topology decision (A1.7). Objects are borrowed; the caller
 * gets them from its informers (and may cache them per PVC UID, as upstream
 * does).
 */
typedef struct prov_topology_in {
    const char *selected_node;  /* NULL or "": immediate binding */
    const json_object *node;    /* the selected Node; NULL: it does not exist */
    const json_object *csinode; /* its CSINode; NULL: it does not exist */
    const json_object *nodes;   /* array of every Node (aggregation); may be NULL */
    /* Immediate binding: topologyKeys of one CSINode, picked at random by the
     * caller among those listing the driver with keys (prov_csinode_keys);
     * NULL when none has keys. */
    const json_object *immediate_keys;
    const json_object *allowed_topologies; /* StorageClass.allowedTopologies; may be NULL */
    const char *pvc_name;                  /* for StatefulSet spreading */
} prov_topology_in;

/* spec.drivers[name=driver].topologyKeys of a CSINode (an array), or NULL. */
const json_object *prov_csinode_keys(const json_object *csinode, const char *driver);

/*
 * Requisite and preferred topologies, or *out NULL when there are none
 * (topology not supported, no selected node and --immediate-topology=false,
 * allowedTopologies without values). -ENOENT when the selected node's
 * CSINode does not exist (reschedule); other errors -EINVAL (retry), among
 * them a missing Node, which upstream treats as a node without labels here
 * (prov_build_request reschedules for it first, as the lib does).
 * `nodes` may hold Nodes without the keys: they are skipped.
 * Free *out with prov_topology_free.
 */
int prov_topology(const prov_config *cfg, const prov_topology_in *in,
                  Csi__V1__TopologyRequirement **out);
void prov_topology_free(Csi__V1__TopologyRequirement *t);

/*
 * PV spec.nodeAffinity for a volume's accessible topology: one term per
 * non-empty segment map, an "In [value]" expression per key; expressions
 * sorted by key and terms sorted (upstream's order follows Go map iteration).
 * NULL when no term is left.
 */
json_object *prov_node_affinity(Csi__V1__Topology *const *topologies, size_t n);

/* ---- CreateVolume ----------------------------------------------------------- */

typedef enum {
    PROV_SOURCE_NONE = 0,
    PROV_SOURCE_SNAPSHOT, /* a VolumeSnapshot: id = VolumeSnapshotContent.status.snapshotHandle */
    PROV_SOURCE_VOLUME,   /* a PVC clone: id = the source PV's spec.csi.volumeHandle */
} prov_source_kind;

/* The driver capabilities a request needs (checkDriverCapabilities);
 * -EINVAL naming the missing capability. */
int prov_check_capabilities(const prov_config *cfg, prov_source_kind source, bool vac);

typedef struct prov_request_in {
    const json_object *pvc;
    const json_object *sc;
    /* Node, CSINode, nodes and immediate keys; selected_node,
     * allowed_topologies and pvc_name are taken from the PVC and the class.
     * The Node must be given whenever the PVC has a selected node, even
     * without topology support (the lib looks it up first). */
    prov_topology_in topology;
    prov_source_kind source;
    const char *source_id;
    /* The VolumeAttributesClass the PVC names (when the gate is on), NULL
     * when it names none. */
    const json_object *vac;
} prov_request_in;

/*
 * prepareProvision without its API calls: checks and builds the request in
 * upstream's order. On success *out is the request (free it with
 * prov_request_free) and `refs` (may be NULL) receives every resolved secret
 * reference. The request has no secrets yet: fetch the Secret named by
 * refs->ref[PROV_SECRET_PROVISIONER] and add its data with
 * prov_request_set_secrets. On failure *state (may be NULL) says what it
 * means for the claim: FINAL, NO_CHANGE, or RESCHEDULE when the selected
 * Node or its CSINode is gone.
 */
int prov_build_request(const prov_config *cfg, const prov_request_in *in,
                       Csi__V1__CreateVolumeRequest **out, prov_secret_refs *refs,
                       prov_state *state);
/* Copies a Secret's `data` (base64 values) into req->secrets as strings;
 * NULL data clears them. -EINVAL for a value that is not base64. */
int prov_request_set_secrets(Csi__V1__CreateVolumeRequest *req, const json_object *secret_data);
void prov_request_free(Csi__V1__CreateVolumeRequest *req);

/*
 * Checks a CreateVolume response (A1.5 step 7). *capacity gets the size to
 * record: capacity_bytes, or the requested size when the driver says 0.
 * Failures are IN_BACKGROUND: -ERANGE (smaller than requested) and -ENODATA
 * (the PVC has a data source, the volume has no content source) mean the
 * caller must DeleteVolume the new volume (upstream tries 5 times);
 * -EPROTO means there is no volume in the response at all.
 */
int prov_check_response(const prov_config *cfg, const json_object *pvc,
                        const Csi__V1__CreateVolumeRequest *req,
                        const Csi__V1__CreateVolumeResponse *resp, int64_t *capacity);
/* The error text after a failed cleanup of a rejected volume, upstream's
 * "<check error>. Cleanup of volume <pv> failed, volume is orphaned: <err>"
 * (-ENODATA says "cleanup"). Caller frees. */
char *prov_orphan_message(int check_rc, const char *check_msg, const char *pv_name,
                          const char *cleanup_err);

/* ---- PersistentVolume ------------------------------------------------------- */

/*
 * The PV to create for a checked response (A1.6 plus what the lib adds):
 * claimRef with uid and resourceVersion, the finalizer, provisioned-by, the
 * deletion-secret annotations (always, "" for none), the modify-secret
 * annotations (when set), capacity as a BinarySI quantity, reclaim policy,
 * volume mode, VAC name, sorted nodeAffinity, csi.readOnly per
 * --controller-publish-readonly. *out is a new object (json_object_put it).
 */
int prov_build_pv(const prov_config *cfg, const json_object *pvc, const json_object *sc,
                  const Csi__V1__CreateVolumeRequest *req,
                  const Csi__V1__CreateVolumeResponse *resp, const prov_secret_refs *refs,
                  json_object **out);

/*
 * Whether a sync of this PV by the volume controller would find nothing to
 * do whatever else it looked at: not provisioned by `driver`; a Retain or
 * Recycle volume without our finalizer; a Delete volume being deleted
 * without our finalizer (its volume was deleted: upstream's shouldDelete);
 * or a Delete volume that is not Released and already has the finalizer.
 * The watch handler skips waking a worker for such a change.
 */
bool prov_pv_sync_idle(const json_object *pv, const char *driver);

/* ---- node deployment (nodedeploy.c) ------------------------------------------- */

/*
 * --node-deployment: one provisioner per node, next to that node's driver.
 * Each instance provisions only claims whose selected node is its own node,
 * may claim an Immediate claim for its node (after a jittered delay and a
 * capacity check), and deletes only PVs whose node affinity its node
 * satisfies. The decisions are here; the waiting, GetCapacity and the
 * annotation patch are the controller's.
 */

/* What a claim is to this node (upstream checkNode). */
typedef enum {
    PROV_NODE_OURS = 0,  /* selected node is this node: provision as usual */
    PROV_NODE_OTHER,     /* another node is selected: not ours, not even to delete */
    PROV_NODE_CANDIDATE, /* Immediate, no node selected, immediate binding on: try to
                            become the owner after a delay */
    PROV_NODE_WAIT,      /* no node selected and not ours to take (WaitForFirstConsumer,
                            immediate binding off, class unknown): wait for a node */
} prov_node_claim;

const char *prov_node_claim_name(prov_node_claim e); /* "ours", "other", ... */

/*
 * Eligibility from the claim's volume.kubernetes.io/selected-node (the alpha
 * key is not read, as upstream) and its class's volumeBindingMode: only an
 * explicit "Immediate" makes a candidate. `sc` may be NULL (class missing).
 */
prov_node_claim prov_node_eligibility(const json_object *pvc, const json_object *sc,
                                      const char *node_name, bool immediate_binding);

/*
 * How long to wait before trying to own an Immediate claim, as upstream's
 * rate limiter with jitter computes it: base * 2^requeues capped at max,
 * minus base * rnd (rnd in [0, 1), the caller's draw), never below 0. So the
 * first attempt waits between 0 and base.
 */
util_duration prov_node_delay(util_duration base, util_duration max, int requeues, double rnd);

/* This node's labels as upstream fakes them: the NodeGetInfo segments as an
 * object of strings, or NULL when the driver reports no topology. */
json_object *prov_node_labels(const Csi__V1__Topology *accessible_topology);

/*
 * The static Node and CSINode upstream uses in node mode instead of
 * watching every node: Node `node_name` with the segments as labels; its
 * CSINode listing `driver` with `node_id` and the segment keys (sorted) as
 * topologyKeys. New objects (json_object_put them).
 */
void prov_node_local_objects(const char *node_name, const char *driver, const char *node_id,
                             const Csi__V1__Topology *accessible_topology, json_object **node,
                             json_object **csinode);

/*
 * Whether this node may delete a PV (upstream VolumeIsAccessible): true
 * without node labels (the driver reports no topology) or without
 * spec.nodeAffinity.required; else whether a node with `labels` (and no
 * name) matches one of the required terms (In, NotIn, Exists,
 * DoesNotExist, Gt, Lt; matchFields on metadata.name). A term that does not
 * parse matches nothing; when no term matches and one did not parse the
 * result is -EINVAL, as upstream reports it.
 */
int prov_node_pv_accessible(const json_object *pv, const json_object *labels, bool *out);

/*
 * The capacity check before owning a claim: one GetCapacity per requisite
 * topology of the planned CreateVolume request, or one without topology.
 * prov_node_capacity_request fills the i-th (0 <= i < count) with pointers
 * borrowed from `req` (parameters, capabilities); enough room is
 * available_capacity >= the requested bytes in any answer.
 */
size_t prov_node_capacity_count(const Csi__V1__CreateVolumeRequest *req);
void prov_node_capacity_request(const Csi__V1__CreateVolumeRequest *req, size_t i,
                                Csi__V1__GetCapacityRequest *out);

/* ========================================================================== */
/* ==== intent record, pure part (intent_plan.c) ============================ */
/* ========================================================================== */

/*
 * "A CreateVolume for claim X may have made volume V" is made durable in the
 * API before the call, in one record per provisioner: a coordination.k8s.io
 * Lease whose annotation PROV_INTENT_ANNOTATION holds
 * {"entries":[{"claim":{...},"volume":"pvc-..."},...]}. Each entry is enough
 * to repeat the exact CreateVolume (and then DeleteVolume) without the claim
 * object; many workers share one write (group commit, intent.c).
 */
#define PROV_INTENT_ANNOTATION "external-provisioner.volume.kubernetes.io/intents"
#define PROV_INTENT_ENTRY_MAX  4096                  /* bytes of one entry's text */
#define PROV_INTENT_BYTES_MAX  ((size_t)192 * 1024)  /* the record's text: well under 256 KiB */
#define PROV_INTENT_TEXT_MAX   ((size_t)1024 * 1024) /* a longer record text is not parsed */
#define PROV_INTENT_NAME_MAX   253

/* One entry as read back; strings and `claim` are borrowed from the JSON. */
typedef struct prov_intent {
    const char *uid, *ns, *name; /* the claim's */
    const char *volume;          /* the CSI volume name (prov_volume_name) */
    /* The claim cut down to what planning reads: metadata (name,
     * namespace, uid, kept annotations) and spec. */
    const json_object *claim;
} prov_intent;

/*
 * The entry text for `pvc` (its class `sc`, may be NULL): the metadata and
 * annotations planning reads (selected node, class, provisioner), the ones
 * the class's secret templates use (${pvc.annotations['k']}), the spec
 * fields of the request, and `volume`. At most PROV_INTENT_ENTRY_MAX bytes
 * (template annotations are left out when they do not fit; -E2BIG when even
 * that is too big). Caller frees.
 */
int prov_intent_encode(const json_object *pvc, const json_object *sc, const char *volume,
                       char **text);
/* Checks one entry object (types, non-empty bounded strings); -EINVAL for
 * an entry nothing can be done with. `out` borrows from `e`. */
int prov_intent_decode(const json_object *e, prov_intent *out);
/* A new claim object (json_object_put it) for planning the repeat. */
json_object *prov_intent_claim(const prov_intent *in);

/* The record's name: the driver (lower case, [^a-z0-9] -> "-") +
 * "-provisioner-intents", with a node "-<node>"; over 253 characters cut
 * and ended with "-<FNV-1a of the whole>". Caller frees. */
char *prov_intent_record_name(const char *driver, const char *node);

typedef enum {
    PROV_INTENT_DURABLE = 0, /* the record holds it: CreateVolume may go */
    PROV_INTENT_PENDING,     /* waits for a write */
    PROV_INTENT_FAILED,      /* the write that carried it failed */
    PROV_INTENT_FULL,        /* no room: wait until entries are done */
    PROV_INTENT_INVALID,     /* unknown uid, or an entry that does not decode */
} prov_intent_status;

/*
 * The in-memory set and its group commit. Not thread-safe: the caller
 * holds one lock around every call. A flush writes every wanted entry;
 * entries are dropped only after a successful write left them out.
 */
typedef struct prov_intent_set prov_intent_set;

/* Bounds for joiners: at most `max_entries` wanted entries of at most
 * `max_bytes` of text together. */
prov_intent_set *prov_intent_set_new(size_t max_entries, size_t max_bytes);
void prov_intent_set_free(prov_intent_set *s);
/* Adds the entry `text` (or finds it by uid; a done one is wanted again). */
prov_intent_status prov_intent_set_join(prov_intent_set *s, const char *text);
/* DURABLE, PENDING, FAILED (*err: the error of a flush started after
 * `since`, a prov_intent_set_seq value) or INVALID (unknown or done). */
prov_intent_status prov_intent_set_status(const prov_intent_set *s, const char *uid, uint64_t since,
                                          int *err);
uint64_t prov_intent_set_seq(const prov_intent_set *s);
bool prov_intent_set_flushing(const prov_intent_set *s);
/* The volume exists as a PV, or was cleaned up: leaves with the next write. */
void prov_intent_set_done(prov_intent_set *s, const char *uid);
/* Whether a wanted entry of that uid exists. */
bool prov_intent_set_has(const prov_intent_set *s, const char *uid);
/* Work for a flush: entries waiting to be written, done entries the
 * record may still hold. */
void prov_intent_set_pending(const prov_intent_set *s, size_t *joiners, size_t *done);
size_t prov_intent_set_count(const prov_intent_set *s); /* wanted entries */
/* After a burst: the lookup tables shrink to fit the entries held now. */
void prov_intent_set_trim(prov_intent_set *s);
/* Starts a flush: *text is the whole record text of every wanted entry
 * (caller frees), *seq its number. -EBUSY while one is under way. */
int prov_intent_set_flush_begin(prov_intent_set *s, char **text, uint64_t *seq);
/* The text again for the flush under way (after merging a re-read record:
 * every wanted entry now, all carried by this flush). -EINVAL without one. */
int prov_intent_set_flush_text(prov_intent_set *s, char **text);
/* Ends flush `seq`: err 0 means written. */
void prov_intent_set_flush_end(prov_intent_set *s, uint64_t seq, int err);
/*
 * Adds the entries of a record text (as read from the API) that the set
 * does not know, as durable, and calls fn for each; malformed entries, a
 * text over PROV_INTENT_TEXT_MAX or one that is no record are counted in
 * *skipped. Returns how many were added.
 */
size_t prov_intent_set_merge(prov_intent_set *s, const char *text, size_t *skipped,
                             void (*fn)(void *ud, const prov_intent *in), void *ud);
/* Calls fn for each wanted entry of claim ns/name (NULL: any); the count. */
int prov_intent_set_each(const prov_intent_set *s, const char *ns, const char *name,
                         void (*fn)(void *ud, const prov_intent *in), void *ud);

/* What recovery does with an entry. */
typedef enum {
    PROV_INTENT_SYNC = 0,   /* the claim waits for its volume: the normal sync */
    PROV_INTENT_DONE,       /* the PV exists (or the claim is bound to it): drop */
    PROV_INTENT_CLEANUP,    /* repeat CreateVolume, DeleteVolume, then drop */
    PROV_INTENT_WAIT_CLASS, /* cleanup needs the StorageClass, which is gone: keep, retry */
} prov_intent_action;

typedef struct prov_intent_facts {
    bool pv_exists;             /* a PV named after the entry's volume */
    bool claim_alive;           /* a claim with the entry's uid exists */
    const char *claim_bound_to; /* its spec.volumeName ("" or NULL: unbound) */
    const char *volume;         /* the entry's volume */
    bool class_exists;          /* the claim's StorageClass is known */
} prov_intent_facts;

prov_intent_action prov_intent_recover(const prov_intent_facts *f);
const char *prov_intent_action_name(prov_intent_action a);

/* ========================================================================== */
/* ==== controller ========================================================== */
/* ========================================================================== */

/*
 * The finalizer that records, in the API, that a volume may exist for a
 * claim before its PV does (our fix for upstream's volume leak #486).
 */
#define PROV_FINALIZER_IN_PROGRESS                                                                 \
    "external-provisioner.volume.kubernetes.io/provisioning-in-progress"

typedef struct prov_ctrl prov_ctrl;

/* --node-deployment (name NULL outside it). */
typedef struct prov_node_opts {
    const char *name;                  /* $NODE_NAME */
    const char *node_id;               /* NodeGetInfo node_id */
    const Csi__V1__Topology *topology; /* NodeGetInfo accessible_topology; may be NULL */
    bool immediate_binding;            /* --node-deployment-immediate-binding */
    util_duration base_delay;          /* --node-deployment-base-delay */
    util_duration max_delay;           /* --node-deployment-max-delay */
    bool get_capacity;                 /* the driver has GET_CAPACITY: check before owning */
} prov_node_opts;

typedef struct prov_ctrl_opts {
    csi_conn *csi;
    kube_client *kube;
    kube_recorder *recorder;
    obs_registry *metrics;
    util_duration timeout;     /* --timeout, per CSI call */
    util_duration retry_start; /* --retry-interval-start */
    util_duration retry_max;   /* --retry-interval-max */
    int workers;               /* --worker-threads: that many claim and volume workers */
    bool publish_unpublish;    /* the driver has PUBLISH_UNPUBLISH_VOLUME: check attachments */
    bool prevent_volume_mode_conversion; /* --prevent-volume-mode-conversion */
    util_duration sweep_interval;        /* --snapshot-orphan-sweep-interval (0: off) */
    prov_node_opts node;                 /* --node-deployment */
    /* --leader-election-namespace: where the intent record lives (NULL or
     * "": $POD_NAMESPACE, the service account's namespace, "default"). */
    const char *intent_namespace;
    /* Called after a CreateVolume or DeleteVolume that may have changed free
     * space (capacity tracking refreshes it): `pv` is the volume's PV, NULL
     * after a failed CreateVolume. May be NULL. */
    void (*volume_changed)(void *ud, const char *sc_name, const json_object *pv);
    void *volume_changed_ud;
} prov_ctrl_opts;

/* Starts informers (waits for their first sync) and workers. */
int prov_ctrl_start(const prov_ctrl_opts *opts, const prov_config *cfg, prov_ctrl **out);
/* Stops taking work, lets each worker finish its current key, frees. */
void prov_ctrl_stop(prov_ctrl *c);

/* ========================================================================== */
/* ==== storage capacity (capacity_plan.c) ================================== */
/* ========================================================================== */

/*
 * CSIStorageCapacity objects (--enable-capacity, upstream A1.9): one per
 * (topology segment x StorageClass of this driver). Pure decisions here; the
 * I/O is in capacity.c.
 *
 * A segment is kept as canonical text: its "key=value" pairs sorted by key
 * and joined with ","; "" is the empty segment (a driver without topology,
 * or a node whose driver reports no keys), which matches every node. Label
 * keys and values can hold neither "=" nor ",", so the text is unambiguous.
 * A work item's key is "<class>/<segment>": class names hold no "/".
 */

#define PROV_CAP_LABEL_DRIVER     "csi.storage.k8s.io/drivername"
#define PROV_CAP_LABEL_MANAGED_BY "csi.storage.k8s.io/managed-by"
#define PROV_CAP_MANAGED_BY       "external-provisioner"
#define PROV_CAP_GENERATE_NAME    "csisc-"
#define PROV_CAP_LABEL_MAX        63 /* a label value's length limit */

typedef struct prov_cap_config {
    const char *driver_name;
    const char *managed_by; /* prov_cap_managed_by */
    const char *namespace;  /* $NAMESPACE: where the objects live */
    /* The ownerReference every object carries (prov_cap_owner_step), or NULL
     * with --capacity-ownerref-level=-1. */
    const json_object *owner;
    bool immediate_binding; /* --capacity-for-immediate-binding */
} prov_cap_config;

/* Whether `sc` gets objects: its provisioner is the driver and its binding
 * mode is WaitForFirstConsumer, or any mode (unset means Immediate) with
 * --capacity-for-immediate-binding. */
bool prov_cap_class_wanted(const prov_cap_config *cc, const json_object *sc);

/*
 * The segment a node contributes: the driver's topologyKeys from its CSINode
 * with the values of the Node's labels. -ENOENT when it contributes none:
 * the driver is not on the CSINode, the Node is NULL, or a key is not (yet)
 * a label of the Node. No keys gives the empty segment "". Caller frees.
 */
int prov_cap_node_segment(const char *driver, const json_object *csinode, const json_object *node,
                          char **out);

/*
 * --node-deployment: the one segment this node's controller serves, from
 * NodeGetInfo's accessible_topology ("" for none or NULL, as upstream's
 * fixed topology: an object without nodeTopology). -EINVAL when a key is
 * empty or a key or value holds "=" or ",". Caller frees.
 */
int prov_cap_fixed_segment(const Csi__V1__Topology *t, char **out);

/*
 * The csi.storage.k8s.io/managed-by value: PROV_CAP_MANAGED_BY, or with a
 * node (--node-deployment) "external-provisioner-<node>". Longer than
 * PROV_CAP_LABEL_MAX it is shortened as upstream does: a node name of up
 * to 52 characters stays whole behind the base cut to fit and the FNV-1a
 * hash of the base ("external-p-53f40b57-<node>"); a longer one is replaced
 * by the hash of the whole name ("external-provisioner-<hash>"). Each node
 * gets its own value, and so its own objects. Caller frees.
 */
char *prov_cap_managed_by(const char *node);

/* Whether `v` may be a label value: at most 63 characters, alphanumerics
 * with "-", "_" or "." inside; "" is one. */
bool prov_cap_label_value_ok(const char *v);

/* "<class>/<segment>" (caller frees), and back: -EINVAL when `key` has no
 * class (the key of an object no item can want). */
char *prov_cap_key(const char *sc_name, const char *segment);
int prov_cap_key_split(const char *key, char **sc_name, char **segment);

/*
 * Every work item wanted: the keys of segments x wanted classes, sorted.
 * `segments` holds distinct segments. *keys is an array of *n strings
 * (free with prov_cap_keys_free).
 */
int prov_cap_items(const prov_cap_config *cc, const char *const *segments, size_t n_segments,
                   const json_object *const *classes, size_t n_classes, char ***keys, size_t *n);
void prov_cap_keys_free(char **keys, size_t n);

/* True when an object carries our labels (driver and managed-by). */
bool prov_cap_is_managed(const prov_cap_config *cc, const json_object *csc);

/*
 * The work item key an existing object stands for, from storageClassName
 * and nodeTopology. An object no item can want (no class, a selector with
 * matchExpressions or a value no segment can have) gets "!<name>", which
 * prov_cap_key_split rejects. Caller frees.
 */
char *prov_cap_object_key(const json_object *csc);

/*
 * The segments a PV is in: one per term of spec.nodeAffinity.required whose
 * expressions are all "In" with one value (upstream's termToSegment; other
 * terms are skipped). *segs (sorted, distinct) is freed with
 * prov_cap_keys_free; *n 0 when there is none.
 */
int prov_cap_affinity_segments(const json_object *pv, char ***segs, size_t *n);

/* nodeTopology for a segment: {"matchLabels": {...}}, or {} for "". */
json_object *prov_cap_node_topology(const char *segment);

/* The CSI topology for GetCapacity: NULL for the empty segment (no
 * accessible_topology is sent), else its map. Free with
 * prov_cap_topology_free. */
Csi__V1__Topology *prov_cap_segment_topology(const char *segment);
void prov_cap_topology_free(Csi__V1__Topology *t);

typedef enum {
    PROV_CAP_NONE = 0, /* the object is up to date: no write */
    PROV_CAP_CREATE,   /* a wanted item has no object */
    PROV_CAP_UPDATE,   /* capacity, maximumVolumeSize or owner differ */
    PROV_CAP_KEEP,     /* the item's object: refresh it (GetCapacity decides) */
    PROV_CAP_DELETE,   /* obsolete (item not wanted) or a duplicate */
} prov_cap_action;

const char *prov_cap_action_name(prov_cap_action a);

typedef struct prov_cap_step {
    prov_cap_action action; /* CREATE, KEEP or DELETE */
    char *key;
    char *name; /* the object (KEEP, DELETE); NULL for CREATE */
} prov_cap_step;

/*
 * Desired items vs existing objects: CREATE for each wanted key without an
 * object, KEEP for the one object kept per wanted key (one owned by us when
 * there is a choice, then the first name), DELETE for every other object of
 * ours. Objects without our labels are left alone. `desired` must be
 * sorted (prov_cap_items). Steps come CREATE/KEEP by key, then DELETE by
 * name. Free with prov_cap_steps_free.
 */
int prov_cap_diff(const prov_cap_config *cc, const char *const *desired, size_t n_desired,
                  const json_object *const *existing, size_t n_existing, prov_cap_step **steps,
                  size_t *n_steps);
void prov_cap_steps_free(prov_cap_step *steps, size_t n);

/*
 * The object to create for `key` (generateName csisc-, our labels, the
 * owner, storageClassName, nodeTopology, capacity and, when `max_size` is
 * not NULL, maximumVolumeSize as BinarySI quantities). -EINVAL for a key
 * without class. *out is new (json_object_put it).
 */
int prov_cap_build(const prov_cap_config *cc, const char *key, int64_t capacity,
                   const int64_t *max_size, json_object **out);

/*
 * What a GetCapacity answer means for the item's object `existing` (NULL:
 * none): CREATE, NONE when capacity and maximumVolumeSize have the same
 * values and the owner (if any) controls it, else UPDATE with *patch a JSON
 * merge patch (caller frees) that sets both sizes (null removes the
 * maximum), adds the owner reference and carries the cached
 * resourceVersion as a precondition.
 */
int prov_cap_decide(const prov_cap_config *cc, const json_object *existing, int64_t capacity,
                    const int64_t *max_size, prov_cap_action *action, char **patch);

/*
 * One step of upstream's owner walk (--capacity-ownerref-level) over `obj`,
 * an object of `api_version`/`kind` as read from the API: with levels 0 the
 * reference to `obj` itself; with 1 its controlling owner's reference, taken
 * from `obj` without reading the owner (so RBAC needs no GET on it); with 2
 * or more *next_path is the owner's API path (prov_cap_owner_path) to read
 * next with levels - 1, and *next_api_version and *next_kind its type. A
 * reference is {apiVersion, kind, name, uid, controller: true}. -ENOENT with
 * upstream's message when there is no controlling owner. Caller frees all.
 */
int prov_cap_owner_step(const json_object *obj, const char *api_version, const char *kind,
                        int levels, json_object **ref, char **next_path, char **next_api_version,
                        char **next_kind);

/* API path of a namespaced object from its apiVersion and kind, the plural
 * made the way Kubernetes names the built-in workloads (lower case + "s";
 * "es" after s/x/z/ch/sh; consonant + "y" -> "ies"). Caller frees. */
char *prov_cap_owner_path(const char *api_version, const char *kind, const char *ns,
                          const char *name);

/* The group and version of the CSIStorageCapacity objects written (storage.k8s.io/v1:
 * Kubernetes 1.24 or newer). */
#define PROV_CAP_GROUP_VERSION "storage.k8s.io/v1"

/* Whether `resource_list`, the API server's discovery document (APIResourceList) of
 * PROV_CAP_GROUP_VERSION, lists the csistoragecapacities resource of kind CSIStorageCapacity. */
bool prov_cap_api_served(const json_object *resource_list);

/* ---- the capacity controller (capacity.c) ---- */

typedef struct prov_cap prov_cap;

typedef struct prov_cap_opts {
    csi_conn *csi;
    kube_client *kube; /* its own client (--kube-api-capacity-qps/-burst) */
    obs_registry *metrics;
    util_duration timeout;       /* --timeout, per GetCapacity */
    util_duration retry_start;   /* --retry-interval-start */
    util_duration retry_max;     /* --retry-interval-max */
    util_duration poll_interval; /* --capacity-poll-interval */
    int workers;                 /* --capacity-threads */
    bool topology;               /* the driver reports VOLUME_ACCESSIBILITY_CONSTRAINTS */
    /* --node-deployment: this node's segment (prov_cap_fixed_segment), the
     * only one served; no Node or CSINode is watched. NULL otherwise. */
    const char *fixed_segment;
} prov_cap_opts;

/* Starts informers (waits for their first sync), the workers and the poll.
 * `cc` is copied; the strings and the owner it points to must outlive it. */
int prov_cap_start(const prov_cap_opts *opts, const prov_cap_config *cc, prov_cap **out);
/*
 * A prov_ctrl_opts.volume_changed callback (thread-safe): refreshes soon
 * the objects of every wanted class in the segments of the PV's nodeAffinity
 * (prov_cap_affinity_segments), as upstream does; without a PV, or when no
 * known segment matches, every object of class `sc_name`.
 */
void prov_cap_volume_changed(void *cap, const char *sc_name, const json_object *pv);
/* Stops the poll, informers and workers; frees. NULL is a no-op. */
void prov_cap_stop(prov_cap *c);

/*
 * Upstream's owner lookup at start-up: reads the pod `pod` in `ns` and walks
 * `levels` controlling owners up (prov_cap_owner_step). *ref is new.
 */
int prov_cap_lookup_owner(kube_client *kube, const char *ns, const char *pod, int levels,
                          json_object **ref);

/*
 * The start-up check of --enable-capacity: reads the API server's discovery of
 * PROV_CAP_GROUP_VERSION and fails (-ENOTSUP, or the request's error) with one line
 * saying what the server lacks when it does not serve CSIStorageCapacity there
 * (prov_cap_api_served): without it the informer would wait for a sync that never comes.
 */
int prov_cap_check_api(kube_client *kube);

#endif
