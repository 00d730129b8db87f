/*
 * The one csi_handler_fn every route points at, the Identity service, and
 * the checks the Controller and Node handlers share.
 *
 * Each call goes: count it -> injected delay / crash-before / failure ->
 * capability gate (a capability not advertised answers UNIMPLEMENTED) ->
 * string sanity -> handler -> commit (state and status on disk) ->
 * crash-after -> the reply leaves when this returns. Committing in one place
 * means no handler can forget it, and a reply never reports a state that a
 * crash could still take back.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "obs/obs.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

/* ---- method table ---------------------------------------------------------------- */

static const char *const method_names[DRV_N_METHODS] = {
#define DRV_M_NAME(name) #name,
    DRV_METHODS(DRV_M_NAME)
#undef DRV_M_NAME
};

const char *drv_method_name(drv_method m)
{
    return (int)m >= 0 && m < DRV_N_METHODS ? method_names[m] : "?";
}

const char *const *drv_method_names(void)
{
    return method_names;
}

int drv_method_from_name(const char *name)
{
    for (int i = 0; i < DRV_N_METHODS; i++)
        if (strcmp(method_names[i], name) == 0)
            return i;
    return -1;
}

enum svc { SVC_IDENTITY, SVC_CONTROLLER, SVC_NODE };

static void get_plugin_info(drv *d, const ProtobufCMessage *req, csi_reply *reply);
static void get_plugin_capabilities(drv *d, const ProtobufCMessage *req, csi_reply *reply);
static void probe(drv *d, const ProtobufCMessage *req, csi_reply *reply);

#define CC(t) CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__##t
#define NC(t) CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__##t

/* Handler and the capability that enables it (0: always on). */
static const struct method_def {
    drv_handler fn;
    enum svc svc;
    int cap;
    const char *cap_name;
} defs[DRV_N_METHODS] = {
    [DRV_M_GetPluginInfo] = {get_plugin_info, SVC_IDENTITY, 0, NULL},
    [DRV_M_GetPluginCapabilities] = {get_plugin_capabilities, SVC_IDENTITY, 0, NULL},
    [DRV_M_Probe] = {probe, SVC_IDENTITY, 0, NULL},
    [DRV_M_CreateVolume] = {drv_create_volume, SVC_CONTROLLER, CC(CREATE_DELETE_VOLUME),
                            "CREATE_DELETE_VOLUME"},
    [DRV_M_DeleteVolume] = {drv_delete_volume, SVC_CONTROLLER, CC(CREATE_DELETE_VOLUME),
                            "CREATE_DELETE_VOLUME"},
    [DRV_M_ControllerPublishVolume] = {drv_controller_publish, SVC_CONTROLLER,
                                       CC(PUBLISH_UNPUBLISH_VOLUME), "PUBLISH_UNPUBLISH_VOLUME"},
    [DRV_M_ControllerUnpublishVolume] = {drv_controller_unpublish, SVC_CONTROLLER,
                                         CC(PUBLISH_UNPUBLISH_VOLUME), "PUBLISH_UNPUBLISH_VOLUME"},
    [DRV_M_ValidateVolumeCapabilities] = {drv_validate_volume_capabilities, SVC_CONTROLLER, 0,
                                          NULL},
    [DRV_M_ListVolumes] = {drv_list_volumes, SVC_CONTROLLER, CC(LIST_VOLUMES), "LIST_VOLUMES"},
    [DRV_M_GetCapacity] = {drv_get_capacity, SVC_CONTROLLER, CC(GET_CAPACITY), "GET_CAPACITY"},
    [DRV_M_ControllerGetCapabilities] = {drv_controller_get_capabilities, SVC_CONTROLLER, 0, NULL},
    [DRV_M_CreateSnapshot] = {drv_create_snapshot, SVC_CONTROLLER, CC(CREATE_DELETE_SNAPSHOT),
                              "CREATE_DELETE_SNAPSHOT"},
    [DRV_M_DeleteSnapshot] = {drv_delete_snapshot, SVC_CONTROLLER, CC(CREATE_DELETE_SNAPSHOT),
                              "CREATE_DELETE_SNAPSHOT"},
    [DRV_M_ListSnapshots] = {drv_list_snapshots, SVC_CONTROLLER, CC(LIST_SNAPSHOTS),
                             "LIST_SNAPSHOTS"},
    [DRV_M_GetSnapshot] = {NULL, SVC_CONTROLLER, 0, NULL},
    [DRV_M_ControllerExpandVolume] = {drv_controller_expand, SVC_CONTROLLER, CC(EXPAND_VOLUME),
                                      "EXPAND_VOLUME"},
    [DRV_M_ControllerGetVolume] = {drv_controller_get_volume, SVC_CONTROLLER, CC(GET_VOLUME),
                                   "GET_VOLUME"},
    [DRV_M_ControllerModifyVolume] = {drv_controller_modify, SVC_CONTROLLER, CC(MODIFY_VOLUME),
                                      "MODIFY_VOLUME"},
    [DRV_M_NodeStageVolume] = {drv_node_stage, SVC_NODE, NC(STAGE_UNSTAGE_VOLUME),
                               "STAGE_UNSTAGE_VOLUME"},
    [DRV_M_NodeUnstageVolume] = {drv_node_unstage, SVC_NODE, NC(STAGE_UNSTAGE_VOLUME),
                                 "STAGE_UNSTAGE_VOLUME"},
    [DRV_M_NodePublishVolume] = {drv_node_publish, SVC_NODE, 0, NULL},
    [DRV_M_NodeUnpublishVolume] = {drv_node_unpublish, SVC_NODE, 0, NULL},
    [DRV_M_NodeGetVolumeStats] = {drv_node_get_volume_stats, SVC_NODE, NC(GET_VOLUME_STATS),
                                  "GET_VOLUME_STATS"},
    [DRV_M_NodeExpandVolume] = {drv_node_expand, SVC_NODE, NC(EXPAND_VOLUME), "EXPAND_VOLUME"},
    [DRV_M_NodeGetCapabilities] = {drv_node_get_capabilities, SVC_NODE, 0, NULL},
    [DRV_M_NodeGetInfo] = {drv_node_get_info, SVC_NODE, 0, NULL},
};

/* NULL when the method may run, else why it answers UNIMPLEMENTED. */
static const char *gate(const drv *d, const struct method_def *def)
{
    if (!def->fn)
        return "not implemented by this driver";
    if (def->svc == SVC_CONTROLLER && !DRV_PLUGIN_CAP(d, CONTROLLER_SERVICE))
        return "the controller service is disabled (CONTROLLER_SERVICE not advertised)";
    if (!def->cap)
        return NULL;
    uint64_t mask = def->svc == SVC_NODE ? d->cfg->node_caps : d->cfg->controller_caps;
    return CSI_CAP(mask, def->cap) ? NULL : def->cap_name;
}

/* ---- dispatch ---------------------------------------------------------------------- */

static void injected_delay(drv *d, util_duration delay)
{
    /* In slices, so that SIGTERM does not wait for a long delay. */
    util_duration end = util_now_mono() + delay;
    while (!atomic_load(&d->stopping)) {
        util_duration left = end - util_now_mono();
        if (left <= 0)
            break;
        util_sleep(left < 50 * UTIL_MS ? left : 50 * UTIL_MS);
    }
}

void drv_dispatch(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply)
{
    drv *d = ud;
    const char *slash = strrchr(method, '/');
    int m = drv_method_from_name(slash ? slash + 1 : method);
    if (m < 0) {
        csi_reply_error(reply, CSI_UNIMPLEMENTED, "unknown method %s", method);
        return;
    }
    const char *name = method_names[m];
    if (obs_log_enabled(5, __FILE__)) {
        char *text = csi_msg_to_text(req, 2048); /* secrets come out stripped */
        obs_v(5, "%s %s", name, text);
        free(text);
    }
    drv_store_count_call(d->store, (drv_method)m);
    drvkit_fault_action fa;
    drvkit_faults_on_call(d->faults, m, &fa);
    if (fa.delay > 0)
        injected_delay(d, fa.delay);
    if (fa.crash_before) {
        obs_warn("fault injection: exiting before %s takes effect", name);
        _exit(137);
    }
    const char *off = gate(d, &defs[m]);
    if (fa.fail_code != CSI_OK)
        csi_reply_error(reply, fa.fail_code, "%s", fa.fail_msg);
    else if (off)
        csi_reply_error(reply, CSI_UNIMPLEMENTED, "%s: %s%s", name, off,
                        defs[m].cap && off == defs[m].cap_name ? " capability not advertised" : "");
    else if (!drvkit_strings_valid(req))
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s: a string field is not valid UTF-8", name);
    else
        defs[m].fn(d, req, reply);
    drv_store_commit(d->store);
    if (fa.crash_after) {
        obs_warn("fault injection: exiting after %s took effect, before replying", name);
        _exit(137);
    }
}

/* ---- Identity ------------------------------------------------------------------------ */

static void get_plugin_info(drv *d, const ProtobufCMessage *req, csi_reply *reply)
{
    (void)req;
    Csi__V1__GetPluginInfoResponse r = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;
    r.name = (char *)d->cfg->driver_name;
    r.vendor_version = SIDECAR_VERSION;
    csi_reply_ok(reply, &r.base);
}

static void get_plugin_capabilities(drv *d, const ProtobufCMessage *req, csi_reply *reply)
{
    (void)req;
    enum { MAX = 8 };
    Csi__V1__PluginCapability caps[MAX];
    Csi__V1__PluginCapability *ptrs[MAX];
    Csi__V1__PluginCapability__Service svc[MAX];
    Csi__V1__PluginCapability__VolumeExpansion exp =
        CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__INIT;
    size_t n = 0;
    for (int t = 1; t < MAX - 1; t++) {
        if (!CSI_CAP(d->cfg->plugin_caps, t))
            continue;
        csi__v1__plugin_capability__service__init(&svc[n]);
        svc[n].type = t;
        csi__v1__plugin_capability__init(&caps[n]);
        caps[n].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
        caps[n].service = &svc[n];
        ptrs[n] = &caps[n];
        n++;
    }
    if (d->cfg->expansion) {
        exp.type = d->cfg->expansion;
        csi__v1__plugin_capability__init(&caps[n]);
        caps[n].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
        caps[n].volume_expansion = &exp;
        ptrs[n] = &caps[n];
        n++;
    }
    Csi__V1__GetPluginCapabilitiesResponse r = CSI__V1__GET_PLUGIN_CAPABILITIES_RESPONSE__INIT;
    r.n_capabilities = n;
    r.capabilities = ptrs;
    csi_reply_ok(reply, &r.base);
}

static void probe(drv *d, const ProtobufCMessage *req, csi_reply *reply)
{
    (void)d;
    (void)req;
    Google__Protobuf__BoolValue ready = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;
    ready.value = 1;
    Csi__V1__ProbeResponse r = CSI__V1__PROBE_RESPONSE__INIT;
    r.ready = &ready;
    csi_reply_ok(reply, &r.base);
}

/* ---- shared checks ---------------------------------------------------------------- */

const char *drv_cap_check(const Csi__V1__VolumeCapability *c, bool multi_writer_ok)
{
    if (!c)
        return "volume_capability is required";
    if (c->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK &&
        c->access_type_case != CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT)
        return "a volume capability needs an access type (block or mount)";
    if (!c->access_mode)
        return "a volume capability needs an access_mode";
    int mode = (int)c->access_mode->mode;
    if (mode <= 0 || mode > CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER)
        return "unknown or unset access mode";
    if (!multi_writer_ok &&
        (mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER ||
         mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER))
        return "SINGLE_NODE_SINGLE_WRITER/SINGLE_NODE_MULTI_WRITER need the "
               "SINGLE_NODE_MULTI_WRITER capability";
    return NULL;
}

void drv_cap_from_pb(drv_cap *out, const Csi__V1__VolumeCapability *c)
{
    memset(out, 0, sizeof(*out));
    out->access_type = c->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK
                           ? DRV_ACCESS_BLOCK
                           : DRV_ACCESS_MOUNT;
    out->mode = c->access_mode ? (int)c->access_mode->mode : 0;
    const Csi__V1__VolumeCapability__MountVolume *mv =
        out->access_type == DRV_ACCESS_MOUNT ? c->mount : NULL;
    out->fs_type = util_strdup(mv && mv->fs_type ? mv->fs_type : "");
    /* FNV-1a over the flags, each ended by a NUL. */
    uint64_t h = 0;
    if (mv && mv->n_mount_flags) {
        h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < mv->n_mount_flags; i++) {
            for (const char *p = mv->mount_flags[i];; p++) {
                h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
                if (!*p)
                    break;
            }
        }
    }
    out->flags_hash = h;
}

bool drv_mode_single_node(int mode)
{
    return mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER ||
           mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY ||
           mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER ||
           mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER;
}

const char *drv_mode_name(int mode)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
        &csi__v1__volume_capability__access_mode__mode__descriptor, mode);
    return v ? v->name : "UNKNOWN";
}

int drv_mode_from_name(const char *name)
{
    const ProtobufCEnumValue *v =
        name ? protobuf_c_enum_descriptor_get_value_by_name(
                   &csi__v1__volume_capability__access_mode__mode__descriptor, name)
             : NULL;
    return v ? v->value : 0;
}

const char *drv_access_name(int access_type)
{
    return access_type == DRV_ACCESS_BLOCK   ? "block"
           : access_type == DRV_ACCESS_MOUNT ? "mount"
                                             : "";
}

int drv_access_from_name(const char *name)
{
    if (name && strcmp(name, "block") == 0)
        return DRV_ACCESS_BLOCK;
    if (name && strcmp(name, "mount") == 0)
        return DRV_ACCESS_MOUNT;
    return DRV_ACCESS_NONE;
}

const char *drv_name_check(const char *name)
{
    if (strlen(name) > 128)
        return "is longer than 128 bytes";
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')
            return "holds a control character";
        if (*p == 0x7f)
            return "holds a control character";
        /* U+0080..U+009F are C2 80..C2 9F in UTF-8. */
        if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            return "holds a control character";
    }
    return NULL;
}

bool drv_node_known(const drv *d, const char *node_id)
{
    if (strcmp(node_id, d->cfg->node_id) == 0)
        return true;
    for (size_t i = 0; i < d->cfg->n_known_nodes; i++)
        if (strcmp(node_id, d->cfg->known_nodes[i]) == 0)
            return true;
    return false;
}

int drv_kvs_parse(const char *text, drv_kvs *out)
{
    char *copy = util_strdup(text ? text : "");
    char *save = NULL;
    int r = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) {
            r = util_err_set(-EINVAL, "\"%s\" is not key=value", tok);
            break;
        }
        *eq = '\0';
        if (drv_kvs_get(out, tok)) {
            r = util_err_set(-EINVAL, "key \"%s\" given twice", tok);
            break;
        }
        drv_kvs_add(out, tok, eq + 1);
    }
    free(copy);
    return r;
}

char *drv_device_path(const drv_volume *v)
{
    return util_strdup(v->path);
}

void drv_topo_msg_fill(drv_topo_msg *t, const drv_kvs *k)
{
    csi__v1__topology__init(&t->topo);
    size_t n = k->n ? k->n : 1;
    t->seg = util_calloc(n, sizeof(*t->seg));
    t->segp = util_calloc(n, sizeof(void *));
    for (size_t i = 0; i < k->n; i++) {
        csi__v1__topology__segments_entry__init(&t->seg[i]);
        t->seg[i].key = k->items[i].key;
        t->seg[i].value = k->items[i].value;
        t->segp[i] = &t->seg[i];
    }
    t->topo.n_segments = k->n;
    t->topo.segments = t->segp;
}

void drv_topo_msg_done(drv_topo_msg *t)
{
    free(t->seg);
    free(t->segp);
    t->seg = NULL;
    t->segp = NULL;
}

void drv_kvs_from_topology(drv_kvs *out, const Csi__V1__Topology *t)
{
    for (size_t i = 0; t && i < t->n_segments; i++)
        drv_kvs_add(out, t->segments[i]->key, t->segments[i]->value);
}
