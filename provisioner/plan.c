/*
 * plan: the provisioner's pure planning core, part one. Configuration and
 * classification, volume names, Kubernetes quantities, access modes,
 * StorageClass parameters, and the CreateVolumeRequest itself
 * (prov_build_request, upstream's prepareProvision minus its API calls).
 * Secrets, topology and the PV live in plan_secrets.c, plan_topology.c and
 * plan_pv.c; the helpers they share in plan_util.c.
 *
 * Everything here is a function of its arguments: no I/O, no clock, no
 * randomness, no global state. Whatever upstream fetches from the API or the
 * driver is an input, so the controller decides when to fetch and every rule
 * can be tested as a table row.
 */
#include "plan_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "volcap/volcap.h"

/* ---- configuration ------------------------------------------------------- */

void prov_config_set_caps(prov_config *cfg, const csi_caps *caps, bool gate_topology)
{
    cfg->controller_service =
        CSI_CAP(caps->plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE);
    cfg->topology =
        gate_topology &&
        CSI_CAP(caps->plugin,
                CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS);
    cfg->create_delete_volume = CSI_CAP(
        caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME);
    cfg->create_delete_snapshot =
        CSI_CAP(caps->controller,
                CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_SNAPSHOT);
    cfg->clone_volume =
        CSI_CAP(caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CLONE_VOLUME);
    cfg->modify_volume =
        CSI_CAP(caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__MODIFY_VOLUME);
    cfg->single_node_multi_writer =
        CSI_CAP(caps->controller,
                CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER);
}

char *prov_identity(int64_t unix_ms, int rand4, const char *driver, const char *node)
{
    if (node != NULL && node[0] != '\0')
        return util_asprintf("%" PRId64 "-%d-%s-%s", unix_ms, rand4, driver, node);
    return util_asprintf("%" PRId64 "-%d-%s", unix_ms, rand4, driver);
}

/* ---- classification ------------------------------------------------------ */

const char *prov_state_name(prov_state s)
{
    switch (s) {
    case PROV_FINAL:
        return "Finished";
    case PROV_NO_CHANGE:
        return "NoChange";
    case PROV_IN_BACKGROUND:
        return "InBackground";
    case PROV_RESCHEDULE:
        return "Reschedule";
    }
    return "Unknown";
}

prov_state prov_classify(int grpc_code, bool topology_supported, bool has_selected_node)
{
    switch (grpc_code) {
    case PROV_NOT_GRPC:
        /* Failed before the driver was reached, or so we think: a previous
         * CreateVolume may still be running, so be on the safe side. */
        return PROV_IN_BACKGROUND;
    case CSI_RESOURCE_EXHAUSTED:
        /* Out of space where we asked: another node may do, but only a
         * topology-aware driver with late binding gets a different ask. */
        return topology_supported && has_selected_node ? PROV_RESCHEDULE : PROV_FINAL;
    case CSI_CANCELLED:
    case CSI_DEADLINE_EXCEEDED:
    case CSI_UNAVAILABLE:
    case CSI_ABORTED:
        return PROV_IN_BACKGROUND;
    default:
        return PROV_FINAL;
    }
}

bool prov_is_infeasible(int grpc_code)
{
    return grpc_code == CSI_INVALID_ARGUMENT;
}

/* ---- names --------------------------------------------------------------- */

int prov_volume_name(const prov_config *cfg, const char *pvc_uid, char **out)
{
    *out = NULL;
    const char *prefix = cfg->volume_name_prefix;
    if (prefix == NULL || prefix[0] == '\0')
        return util_err_set(-EINVAL, "volume name prefix cannot be of length 0");
    if (pvc_uid == NULL || pvc_uid[0] == '\0')
        return util_err_set(-EINVAL, "corrupted PVC object, it is missing UID");
    int want = cfg->volume_name_uuid_length;
    if (want == -1) {
        *out = util_asprintf("%s-%s", prefix, pvc_uid);
        return 0;
    }
    char *uid = util_strdup(pvc_uid);
    size_t n = 0;
    for (const char *p = pvc_uid; *p != '\0'; p++)
        if (*p != '-')
            uid[n++] = *p;
    uid[n] = '\0';
    /* Upstream slices without a bounds check and panics; refuse instead. */
    if (want < 0 || (size_t)want > n) {
        free(uid);
        return util_err_set(-EINVAL,
                            "--volume-name-uuid-length %d is out of range: the UID has %zu "
                            "characters without dashes",
                            want, n);
    }
    uid[want] = '\0';
    *out = util_asprintf("%s-%s", prefix, uid);
    free(uid);
    return 0;
}

const char *prov_selected_node(const json_object *pvc)
{
    json_object *ann = kobj_path(pvc, "metadata.annotations");
    const char *node = kobj_str(ann, PROV_ANN_SELECTED_NODE);
    if (node == NULL)
        node = kobj_str(ann, PROV_ANN_ALPHA_SELECTED_NODE);
    return node;
}

const char *prov_pvc_class(const json_object *pvc)
{
    const char *cls = kobj_str(kobj_path(pvc, "metadata.annotations"), PROV_ANN_BETA_STORAGE_CLASS);
    if (cls == NULL)
        cls = kobj_path_str(pvc, "spec.storageClassName");
    return cls != NULL ? cls : "";
}

bool prov_pvc_wants_driver(const json_object *pvc, const char *driver)
{
    json_object *ann = kobj_path(pvc, "metadata.annotations");
    const char *want = kobj_str(ann, PROV_ANN_STORAGE_PROVISIONER);
    if (want == NULL)
        want = kobj_str(ann, PROV_ANN_BETA_STORAGE_PROVISIONER);
    return want != NULL && driver != NULL && strcmp(want, driver) == 0;
}

bool prov_claim_sync_idle(const json_object *pvc, const char *driver)
{
    return !prov_pvc_wants_driver(pvc, driver) &&
           kobj_finalizer_index(pvc, PROV_FINALIZER_IN_PROGRESS) < 0 &&
           kobj_finalizer_index(pvc, PROV_CLONE_FINALIZER) < 0;
}

/* ---- quantities ----------------------------------------------------------
 *
 * The parser and formatter live in common/util (one implementation for the
 * sidecars and kube-lite); these names stay for the provisioner's callers.
 */

#define QTY_ERR_FORMAT                                                                             \
    "quantities must match the regular expression "                                                \
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"

int prov_quantity_parse(const char *s, int64_t *out)
{
    return util_quantity_parse(s, out);
}

void prov_quantity_format(int64_t v, char *buf, size_t len)
{
    util_quantity_format(v, buf, len);
}

int prov_pvc_request_bytes(const json_object *pvc, int64_t *out)
{
    *out = 0;
    json_object *q = NULL;
    json_object *req = kobj_path(pvc, "spec.resources.requests");
    if (req == NULL || !json_object_object_get_ex(req, "storage", &q) || q == NULL)
        return 0;
    /* Quantity.UnmarshalJSON takes a JSON string or a bare number and trims
     * spaces around the text. */
    if (!json_object_is_type(q, json_type_string) && !json_object_is_type(q, json_type_int) &&
        !json_object_is_type(q, json_type_double))
        return util_err_set(-EINVAL, QTY_ERR_FORMAT);
    const char *s = json_object_get_string(q);
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    char *t = util_strdup(s);
    t[n] = '\0';
    int r = util_quantity_parse(t, out);
    free(t);
    return r;
}

/* ---- access modes -------------------------------------------------------- */

int prov_access_mode(const char *const *modes, size_t n, bool snmw,
                     Csi__V1__VolumeCapability__AccessMode__Mode *out)
{
    int rc = volcap_access_mode(modes, n, snmw, out);
    if (rc != -ENOTSUP)
        return rc;
    /* fmt's %+v of a []PersistentVolumeAccessMode: "[a b]". */
    plan_buf b = {0};
    plan_buf_add(&b, "unsupported AccessMode combination: [");
    for (size_t i = 0; i < n; i++)
        plan_buf_addf(&b, "%s%s", i > 0 ? " " : "", modes[i] != NULL ? modes[i] : "");
    plan_buf_add(&b, "]");
    int r = util_err_set(-EINVAL, "%s", b.s);
    plan_buf_free(&b);
    return r;
}

/* ---- StorageClass parameters --------------------------------------------- */

#define FSTYPE_KEY PROV_PARAM_PREFIX "fstype"

static void warn(const prov_config *cfg, const char *fmt, ...) UTIL_ATTR_PRINTF(2, 3);
static void warn(const prov_config *cfg, const char *fmt, ...)
{
    if (cfg->warn == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) >= 0) {
        cfg->warn(cfg->warn_ud, msg);
        free(msg);
    }
    va_end(ap);
}

void plan_warn_deprecated(const prov_config *cfg, const char *old_key, const char *new_key)
{
    warn(cfg,
         "\"%s\" is deprecated and will be removed in a future release, please use \"%s\" "
         "instead",
         old_key, new_key);
}

int prov_fstype(const prov_config *cfg, const json_object *sc_params, char **out)
{
    size_t n = 0, found = 0;
    const char *fs = "";
    const char **keys = plan_sorted_keys(sc_params, &n);

    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        bool deprecated = strcasecmp(keys[i], "fstype") == 0;
        if (deprecated || strcmp(keys[i], FSTYPE_KEY) == 0) {
            const char *v = kobj_str(sc_params, keys[i]);
            fs = v != NULL ? v : "";
            found++;
        }
        if (deprecated)
            plan_warn_deprecated(cfg, "fstype", FSTYPE_KEY);
    }
    free(keys);
    if (found > 1)
        return util_err_set(-EINVAL,
                            "fstype specified in parameters with both \"fstype\" and \"%s\" keys",
                            FSTYPE_KEY);
    if (fs[0] == '\0' && cfg->default_fstype != NULL)
        fs = cfg->default_fstype;
    *out = util_strdup(fs);
    return 0;
}

/* The reserved keys upstream knows; the rest of the prefix is an error. */
static bool known_reserved(const char *key)
{
    static const char *const known[] = {
        "fstype",
        "provisioner-secret-name",
        "provisioner-secret-namespace",
        "controller-publish-secret-name",
        "controller-publish-secret-namespace",
        "node-stage-secret-name",
        "node-stage-secret-namespace",
        "node-publish-secret-name",
        "node-publish-secret-namespace",
        "controller-expand-secret-name",
        "controller-expand-secret-namespace",
        "node-expand-secret-name",
        "node-expand-secret-namespace",
        "controller-modify-secret-name",
        "controller-modify-secret-namespace",
        "secret-name",
        "secret-namespace",
    };
    const char *rest = key + strlen(PROV_PARAM_PREFIX);
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(rest, known[i]) == 0)
            return true;
    return false;
}

int prov_strip_parameters(const json_object *sc_params, json_object **out)
{
    size_t n = 0;
    const char **keys = plan_sorted_keys(sc_params, &n);
    json_object *params = json_object_new_object();

    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        if (util_has_prefix(keys[i], PROV_PARAM_PREFIX)) {
            if (known_reserved(keys[i]))
                continue;
            /* Sorted keys: the first bad key is reported, not a random one. */
            int r = util_err_set(-EINVAL,
                                 "found unknown parameter key \"%s\" with reserved namespace %s",
                                 keys[i], PROV_PARAM_PREFIX);
            free(keys);
            json_object_put(params);
            return r;
        }
        const char *v = kobj_str(sc_params, keys[i]);
        json_object_object_add(params, keys[i], json_object_new_string(v != NULL ? v : ""));
    }
    free(keys);
    *out = params;
    return 0;
}

/* ---- capabilities -------------------------------------------------------- */

int prov_check_capabilities(const prov_config *cfg, prov_source_kind source, bool vac)
{
    if (!cfg->controller_service)
        return util_err_set(-EINVAL, "CSI driver does not support dynamic provisioning: plugin "
                                     "CONTROLLER_SERVICE capability is not reported");
    if (!cfg->create_delete_volume)
        return util_err_set(-EINVAL, "CSI driver does not support dynamic provisioning: "
                                     "controller CREATE_DELETE_VOLUME capability is not reported");
    if (source == PROV_SOURCE_SNAPSHOT && !cfg->create_delete_snapshot)
        return util_err_set(-EINVAL, "CSI driver does not support snapshot restore: controller "
                                     "CREATE_DELETE_SNAPSHOT capability is not reported");
    if (source == PROV_SOURCE_VOLUME && !cfg->clone_volume)
        return util_err_set(-EINVAL, "CSI driver does not support clone operations: controller "
                                     "CLONE_VOLUME capability is not reported");
    if (vac && !cfg->modify_volume)
        return util_err_set(-EINVAL, "CSI driver does not support VolumeAttributesClass: "
                                     "controller MODIFY_VOLUME capability is not reported");
    return 0;
}

/* ---- CreateVolumeRequest ------------------------------------------------- */

/* The request's string maps, filled in sorted key order. */
static void fill_parameters(Csi__V1__CreateVolumeRequest *req, const json_object *obj)
{
    size_t n = 0;
    const char **keys = plan_sorted_keys(obj, &n);
    req->parameters = util_calloc(n, sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        Csi__V1__CreateVolumeRequest__ParametersEntry *e = util_calloc(1, sizeof(*e));
        csi__v1__create_volume_request__parameters_entry__init(e);
        const char *v = kobj_str(obj, keys[i]);
        e->key = util_strdup(keys[i]);
        e->value = util_strdup(v != NULL ? v : "");
        req->parameters[req->n_parameters++] = e;
    }
    free(keys);
}

static void fill_mutable(Csi__V1__CreateVolumeRequest *req, const json_object *obj)
{
    size_t n = 0;
    const char **keys = plan_sorted_keys(obj, &n);
    req->mutable_parameters = util_calloc(n, sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        Csi__V1__CreateVolumeRequest__MutableParametersEntry *e = util_calloc(1, sizeof(*e));
        csi__v1__create_volume_request__mutable_parameters_entry__init(e);
        const char *v = kobj_str(obj, keys[i]);
        e->key = util_strdup(keys[i]);
        e->value = util_strdup(v != NULL ? v : "");
        req->mutable_parameters[req->n_mutable_parameters++] = e;
    }
    free(keys);
}

void prov_request_free(Csi__V1__CreateVolumeRequest *req)
{
    /* Every member was malloc'ed here (empty strings are protobuf-c's
     * static default, which free_unpacked skips). */
    if (req != NULL)
        protobuf_c_message_free_unpacked(&req->base, NULL);
}

static bool pvc_is_block(const json_object *pvc)
{
    const char *mode = kobj_path_str(pvc, "spec.volumeMode");
    return mode != NULL && strcmp(mode, "Block") == 0;
}

/* One capability per PVC access mode, each mapped on its own (F3). */
static int add_capabilities(const prov_config *cfg, const json_object *pvc, const json_object *sc,
                            const char *fs_type, Csi__V1__CreateVolumeRequest *req)
{
    json_object *modes = kobj_typed(kobj_path(pvc, "spec"), json_type_object);
    json_object *list = NULL;
    if (modes != NULL)
        json_object_object_get_ex(modes, "accessModes", &list);
    list = kobj_typed(list, json_type_array);
    size_t n = list != NULL ? json_object_array_length(list) : 0;
    json_object *mount_options = kobj_typed(kobj_path(sc, "mountOptions"), json_type_array);
    size_t n_flags = mount_options != NULL ? json_object_array_length(mount_options) : 0;
    bool block = pvc_is_block(pvc);

    req->volume_capabilities = util_calloc(n, sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        json_object *m = kobj_at(list, i);
        const char *mode =
            json_object_is_type(m, json_type_string) ? json_object_get_string(m) : "";
        Csi__V1__VolumeCapability__AccessMode__Mode csi_mode;
        int r = prov_access_mode(&mode, 1, cfg->single_node_multi_writer, &csi_mode);
        if (r < 0)
            return r;
        Csi__V1__VolumeCapability *cap = util_calloc(1, sizeof(*cap));
        csi__v1__volume_capability__init(cap);
        req->volume_capabilities[req->n_volume_capabilities++] = cap;
        cap->access_mode = util_calloc(1, sizeof(*cap->access_mode));
        csi__v1__volume_capability__access_mode__init(cap->access_mode);
        cap->access_mode->mode = csi_mode;
        if (block) {
            cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
            cap->block = util_calloc(1, sizeof(*cap->block));
            csi__v1__volume_capability__block_volume__init(cap->block);
            continue;
        }
        cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
        Csi__V1__VolumeCapability__MountVolume *mv = util_calloc(1, sizeof(*mv));
        csi__v1__volume_capability__mount_volume__init(mv);
        cap->mount = mv;
        mv->fs_type = util_strdup(fs_type);
        mv->mount_flags = util_calloc(n_flags, sizeof(*mv->mount_flags));
        for (size_t j = 0; j < n_flags; j++) {
            json_object *f = kobj_at(mount_options, j);
            mv->mount_flags[mv->n_mount_flags++] = util_strdup(
                json_object_is_type(f, json_type_string) ? json_object_get_string(f) : "");
        }
    }
    return 0;
}

static void set_content_source(Csi__V1__CreateVolumeRequest *req, prov_source_kind kind,
                               const char *id)
{
    if (kind == PROV_SOURCE_NONE)
        return;
    Csi__V1__VolumeContentSource *cs = util_calloc(1, sizeof(*cs));
    csi__v1__volume_content_source__init(cs);
    if (kind == PROV_SOURCE_SNAPSHOT) {
        cs->type_case = CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT;
        cs->snapshot = util_calloc(1, sizeof(*cs->snapshot));
        csi__v1__volume_content_source__snapshot_source__init(cs->snapshot);
        cs->snapshot->snapshot_id = util_strdup(id != NULL ? id : "");
    } else {
        cs->type_case = CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME;
        cs->volume = util_calloc(1, sizeof(*cs->volume));
        csi__v1__volume_content_source__volume_source__init(cs->volume);
        cs->volume->volume_id = util_strdup(id != NULL ? id : "");
    }
    req->volume_content_source = cs;
}

/* The PVC's VolumeAttributesClass name when the gate is on, else NULL. */
static const char *pvc_vac_name(const prov_config *cfg, const json_object *pvc)
{
    const char *vac = kobj_path_str(pvc, "spec.volumeAttributesClassName");
    return cfg->vac_enabled && vac != NULL && vac[0] != '\0' ? vac : NULL;
}

/* Fails with `state`; keeps the message already set by util_err_set. */
static int fail(prov_state *state, prov_state s, int r)
{
    *state = s;
    return r;
}

/* Re-sets the current message behind a prefix, as upstream's fmt.Errorf. */
static int wrap(int r, const char *prefix)
{
    char *msg = util_strdup(util_err_last());
    r = util_err_set(r, "%s%s", prefix, msg);
    free(msg);
    return r;
}

static int build_topology(const prov_config *cfg, const prov_request_in *in, const char *selected,
                          Csi__V1__CreateVolumeRequest *req, prov_state *state)
{
    prov_topology_in t = in->topology;
    t.selected_node = selected;
    t.allowed_topologies = kobj_path(in->sc, "allowedTopologies");
    t.pvc_name = kobj_path_str(in->pvc, "metadata.name");
    int r = prov_topology(cfg, &t, &req->accessibility_requirements);
    if (r == -ENOENT)
        return fail(state, PROV_RESCHEDULE, r);
    if (r < 0)
        return fail(state, PROV_NO_CHANGE,
                    wrap(r, "error generating accessibility requirements: "));
    return 0;
}

static int finish_request(const prov_config *cfg, const prov_request_in *in, const char *pv_name,
                          Csi__V1__CreateVolumeRequest *req, prov_state *state)
{
    const json_object *params = kobj_path(in->sc, "parameters");
    json_object *stripped = NULL;
    int r = prov_strip_parameters(params, &stripped);
    if (r < 0)
        return fail(state, PROV_FINAL,
                    wrap(r, "failed to strip CSI Parameters of prefixed keys: "));
    if (cfg->extra_create_metadata) {
        const char *name = kobj_path_str(in->pvc, "metadata.name");
        const char *ns = kobj_path_str(in->pvc, "metadata.namespace");
        json_object_object_add(stripped, PROV_PARAM_PVC_NAME,
                               json_object_new_string(name != NULL ? name : ""));
        json_object_object_add(stripped, PROV_PARAM_PVC_NAMESPACE,
                               json_object_new_string(ns != NULL ? ns : ""));
        json_object_object_add(stripped, PROV_PARAM_PV_NAME, json_object_new_string(pv_name));
    }
    fill_parameters(req, stripped);
    json_object_put(stripped);

    const char *vac_name = pvc_vac_name(cfg, in->pvc);
    if (vac_name == NULL)
        return 0;
    if (in->vac == NULL)
        return fail(state, PROV_NO_CHANGE,
                    util_err_set(-ENOENT, "volumeattributesclasses.storage.k8s.io \"%s\" not found",
                                 vac_name));
    const char *vac_driver = kobj_path_str(in->vac, "driverName");
    if (vac_driver == NULL || cfg->driver_name == NULL || strcmp(vac_driver, cfg->driver_name) != 0)
        return fail(state, PROV_FINAL,
                    util_err_set(-EINVAL,
                                 "VAC %s referenced in PVC is for driver %s which does not match "
                                 "driver name %s",
                                 vac_name, vac_driver != NULL ? vac_driver : "",
                                 cfg->driver_name != NULL ? cfg->driver_name : ""));
    fill_mutable(req, kobj_path(in->vac, "parameters"));
    return 0;
}

static int build_request(const prov_config *cfg, const prov_request_in *in, const char *pv_name,
                         Csi__V1__CreateVolumeRequest *req, prov_secret_refs *refs,
                         prov_state *state)
{
    const char *selected = prov_selected_node(in->pvc);
    if (selected != NULL && selected[0] == '\0')
        selected = NULL;
    const json_object *params = kobj_path(in->sc, "parameters");

    char *fs_type = NULL;
    int r = prov_fstype(cfg, params, &fs_type);
    if (r < 0)
        return fail(state, PROV_FINAL, r);
    req->name = util_strdup(pv_name);
    req->capacity_range = util_calloc(1, sizeof(*req->capacity_range));
    csi__v1__capacity_range__init(req->capacity_range);
    r = prov_pvc_request_bytes(in->pvc, &req->capacity_range->required_bytes);
    if (r == 0)
        r = add_capabilities(cfg, in->pvc, in->sc, fs_type, req);
    free(fs_type);
    if (r < 0)
        return fail(state, PROV_FINAL, r);
    set_content_source(req, in->source, in->source_id);

    if (cfg->topology) {
        r = build_topology(cfg, in, selected, req, state);
        if (r < 0)
            return r;
    }
    r = prov_secret_refs_resolve(cfg, params, pv_name, in->pvc, refs);
    if (r < 0)
        return fail(state, PROV_NO_CHANGE, r);
    return finish_request(cfg, in, pv_name, req, state);
}

int prov_build_request(const prov_config *cfg, const prov_request_in *in,
                       Csi__V1__CreateVolumeRequest **out, prov_secret_refs *refs,
                       prov_state *state)
{
    prov_secret_refs local = {0};
    prov_secret_refs *r_out = refs != NULL ? refs : &local;
    prov_state ignored = PROV_FINAL;
    if (state == NULL)
        state = &ignored;
    *out = NULL;
    memset(r_out, 0, sizeof(*r_out));
    *state = PROV_FINAL;

    /* The lib looks up the selected Node before anything else; a Node that
     * is gone means the scheduler must pick another one. */
    const char *selected = prov_selected_node(in->pvc);
    if (selected != NULL && selected[0] != '\0' && in->topology.node == NULL)
        return fail(state, PROV_RESCHEDULE,
                    util_err_set(-ENOENT, "node \"%s\" not found", selected));
    if (in->sc == NULL)
        return fail(state, PROV_FINAL, util_err_set(-EINVAL, "storage class was nil"));
    int r = prov_check_capabilities(cfg, in->source, pvc_vac_name(cfg, in->pvc) != NULL);
    if (r < 0)
        return fail(state, PROV_FINAL, r);
    json_object *sel = NULL;
    json_object *spec = kobj_path(in->pvc, "spec");
    if (spec != NULL && json_object_object_get_ex(spec, "selector", &sel) && sel != NULL)
        return fail(state, PROV_FINAL, util_err_set(-EINVAL, "claim Selector is not supported"));
    char *pv_name = NULL;
    r = prov_volume_name(cfg, kobj_path_str(in->pvc, "metadata.uid"), &pv_name);
    if (r < 0)
        return fail(state, PROV_FINAL, r);

    Csi__V1__CreateVolumeRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__create_volume_request__init(req);
    r = build_request(cfg, in, pv_name, req, r_out, state);
    free(pv_name);
    if (r < 0) {
        prov_request_free(req);
        prov_secret_refs_clear(r_out);
        return r;
    }
    if (refs == NULL)
        prov_secret_refs_clear(&local);
    *out = req;
    return 0;
}

int prov_request_set_secrets(Csi__V1__CreateVolumeRequest *req, const json_object *secret_data)
{
    for (size_t i = 0; i < req->n_secrets; i++)
        protobuf_c_message_free_unpacked(&req->secrets[i]->base, NULL);
    free(req->secrets);
    req->secrets = NULL;
    req->n_secrets = 0;

    size_t n = 0;
    const char **keys = plan_sorted_keys(secret_data, &n);
    /* No array for no secrets: calloc(0) still allocates, and clearing
     * (secret_data NULL) must leave nothing behind. */
    req->secrets = n > 0 ? util_calloc(n, sizeof(void *)) : NULL;
    for (size_t i = 0; i < n; i++) {
        const char *v = kobj_str(secret_data, keys[i]);
        char *decoded = NULL;
        if (util_base64_decode(v != NULL ? v : "", &decoded) < 0) {
            int r = util_err_set(-EINVAL, "secret data for key \"%s\" is not base64 text", keys[i]);
            free(keys);
            return r;
        }
        Csi__V1__CreateVolumeRequest__SecretsEntry *e = util_calloc(1, sizeof(*e));
        csi__v1__create_volume_request__secrets_entry__init(e);
        e->key = util_strdup(keys[i]);
        e->value = decoded;
        req->secrets[req->n_secrets++] = e;
    }
    free(keys);
    return 0;
}
