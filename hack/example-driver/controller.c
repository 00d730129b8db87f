/*
 * Controller service: volumes (create, delete, expand, list, get), their
 * publication to nodes, capacity and snapshots, with the CSI spec's
 * idempotency rules and error tables.
 *
 * Every handler checks the request's own fields first (INVALID_ARGUMENT
 * needs no state), then takes the store lock for the rest. Responses point
 * into the model, which is fine because csi_reply_ok packs them before the
 * lock is released.
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"
#include "obs/obs.h"

#define GIB ((int64_t)1 << 30)

/* ---- response building -------------------------------------------------------------- */

/* A Volume message pointing into a drv_volume; do not move it once filled. */
typedef struct vol_msg {
    Csi__V1__Volume vol;
    Csi__V1__Volume__VolumeContextEntry ctx;
    Csi__V1__Volume__VolumeContextEntry *ctxp;
    Csi__V1__VolumeContentSource src;
    Csi__V1__VolumeContentSource__SnapshotSource snap;
    Csi__V1__VolumeContentSource__VolumeSource vsrc;
    drv_topo_msg topo;
    Csi__V1__Topology *topop;
} vol_msg;

static void vol_msg_fill(vol_msg *m, const drv *d, const drv_volume *v)
{
    csi__v1__volume__init(&m->vol);
    m->vol.volume_id = v->id;
    m->vol.capacity_bytes = v->capacity;
    csi__v1__volume__volume_context_entry__init(&m->ctx);
    m->ctx.key = "path";
    m->ctx.value = v->path;
    m->ctxp = &m->ctx;
    m->vol.n_volume_context = 1;
    m->vol.volume_context = &m->ctxp;
    if (v->src_type != DRV_SRC_NONE) {
        csi__v1__volume_content_source__init(&m->src);
        if (v->src_type == DRV_SRC_SNAPSHOT) {
            csi__v1__volume_content_source__snapshot_source__init(&m->snap);
            m->snap.snapshot_id = v->src_id;
            m->src.type_case = CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT;
            m->src.snapshot = &m->snap;
        } else {
            csi__v1__volume_content_source__volume_source__init(&m->vsrc);
            m->vsrc.volume_id = v->src_id;
            m->src.type_case = CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME;
            m->src.volume = &m->vsrc;
        }
        m->vol.content_source = &m->src;
    }
    drv_topo_msg_fill(&m->topo, &v->topology);
    /* The spec allows accessible_topology only with the capability. */
    if (v->topology.n && DRV_PLUGIN_CAP(d, VOLUME_ACCESSIBILITY_CONSTRAINTS)) {
        m->topop = &m->topo.topo;
        m->vol.n_accessible_topology = 1;
        m->vol.accessible_topology = &m->topop;
    }
}

static void vol_msg_done(vol_msg *m)
{
    drv_topo_msg_done(&m->topo);
}

static void reply_volume(csi_reply *reply, const drv *d, const drv_volume *v)
{
    vol_msg m;
    vol_msg_fill(&m, d, v);
    Csi__V1__CreateVolumeResponse r = CSI__V1__CREATE_VOLUME_RESPONSE__INIT;
    r.volume = &m.vol;
    csi_reply_ok(reply, &r.base);
    vol_msg_done(&m);
}

/* Node ids of a volume's publications, as the response wants them. */
static char **published_nodes(const drv_volume *v)
{
    char **ids = util_calloc(v->n_pubs ? v->n_pubs : 1, sizeof(char *));
    for (size_t i = 0; i < v->n_pubs; i++)
        ids[i] = v->pubs[i].node_id;
    return ids;
}

/* Pagination token: a decimal offset. Returns false for a token we did
 * not hand out (or one that no longer fits). */
static bool parse_token(const char *token, size_t n, size_t *start)
{
    *start = 0;
    if (!token || !*token)
        return true;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(token, &end, 10);
    if (errno || *end || token[0] < '0' || token[0] > '9' || v > n)
        return false;
    *start = (size_t)v;
    return true;
}

/* ---- CreateVolume ----------------------------------------------------------------- */

struct create_args {
    const Csi__V1__CreateVolumeRequest *req;
    int access_type;
    int64_t required, limit;
    int src_type;
    const char *src_id;
};

static bool topology_listed(const drv_kvs *have, const Csi__V1__TopologyRequirement *tr)
{
    size_t n = tr->n_requisite + tr->n_preferred;
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        const Csi__V1__Topology *t =
            i < tr->n_requisite ? tr->requisite[i] : tr->preferred[i - tr->n_requisite];
        drv_kvs want = {0};
        drv_kvs_from_topology(&want, t);
        bool same = drv_kvs_equal(have, &want);
        drv_kvs_free(&want);
        if (same)
            return true;
    }
    return false;
}

/* Why an existing volume of the same name does not fit, or NULL. */
static const char *incompatible(const drv_volume *v, const struct create_args *a)
{
    const Csi__V1__CreateVolumeRequest *req = a->req;
    if (a->required && v->capacity < a->required)
        return "its size is below the required bytes";
    if (a->limit && v->capacity > a->limit)
        return "its size is above the limit bytes";
    if (v->src_type != a->src_type ||
        (a->src_type != DRV_SRC_NONE && strcmp(v->src_id, a->src_id) != 0))
        return "it has a different content source";
    if (v->access_type != a->access_type)
        return "it was created for another access type";
    drv_kvs params = {0};
    for (size_t i = 0; i < req->n_parameters; i++)
        drv_kvs_add(&params, req->parameters[i]->key, req->parameters[i]->value);
    bool same = drv_kvs_equal(&params, &v->params);
    drv_kvs_free(&params);
    if (!same)
        return "it has different parameters";
    if (req->accessibility_requirements &&
        !topology_listed(&v->topology, req->accessibility_requirements))
        return "it is not accessible from the requested topology";
    return NULL;
}

static void create_locked(drv *d, drv_model *m, const struct create_args *a, csi_reply *reply)
{
    const Csi__V1__CreateVolumeRequest *req = a->req;
    drv_volume *old = drv_model_volume_by_name(m, req->name);
    if (old) {
        const char *why = incompatible(old, a);
        if (why)
            csi_reply_error(reply, CSI_ALREADY_EXISTS, "volume \"%s\" exists (%s) but %s",
                            req->name, old->id, why);
        else
            reply_volume(reply, d, old);
        return;
    }

    int64_t src_size = 0;
    if (a->src_type == DRV_SRC_SNAPSHOT) {
        const drv_snapshot *s = drv_model_snapshot(m, a->src_id);
        if (!s) {
            csi_reply_error(reply, CSI_NOT_FOUND, "source snapshot %s does not exist", a->src_id);
            return;
        }
        src_size = s->size;
    } else if (a->src_type == DRV_SRC_VOLUME) {
        const drv_volume *s = drv_model_volume(m, a->src_id);
        if (!s) {
            csi_reply_error(reply, CSI_NOT_FOUND, "source volume %s does not exist", a->src_id);
            return;
        }
        src_size = s->capacity;
    }

    /* Size: the required bytes, else the source's size, else 1 GiB; never
     * above the limit. */
    int64_t size = a->required ? a->required : src_size ? src_size : GIB;
    if (a->limit && size > a->limit)
        size = a->limit;
    if (size < src_size) {
        csi_reply_error(reply, CSI_OUT_OF_RANGE,
                        "capacity limit %lld is below the %lld bytes of the source",
                        (long long)a->limit, (long long)src_size);
        return;
    }
    if (size > d->cfg->capacity) {
        csi_reply_error(reply, CSI_OUT_OF_RANGE, "%lld bytes exceed the pool of %lld bytes",
                        (long long)size, (long long)d->cfg->capacity);
        return;
    }
    if (m->used + size > d->cfg->capacity) {
        csi_reply_error(reply, CSI_RESOURCE_EXHAUSTED,
                        "not enough capacity: %lld bytes wanted, %lld of %lld free",
                        (long long)size, (long long)(d->cfg->capacity - m->used),
                        (long long)d->cfg->capacity);
        return;
    }

    drv_volume *v = util_calloc(1, sizeof(*v));
    v->id = drv_model_new_id(m, "vol");
    v->name = util_strdup(req->name);
    v->path = util_asprintf("%s/volumes/%s", drv_store_dir(d->store), v->id);
    v->capacity = size;
    v->access_type = a->access_type;
    v->src_type = a->src_type;
    v->src_id = a->src_id ? util_strdup(a->src_id) : NULL;
    for (size_t i = 0; i < req->n_parameters; i++)
        drv_kvs_add(&v->params, req->parameters[i]->key, req->parameters[i]->value);
    for (size_t i = 0; i < req->n_mutable_parameters; i++)
        drv_kvs_set(&v->mutable_params, req->mutable_parameters[i]->key,
                    req->mutable_parameters[i]->value);
    if (DRV_PLUGIN_CAP(d, VOLUME_ACCESSIBILITY_CONSTRAINTS)) {
        /* First preferred, else first requisite, else where this node is. */
        const Csi__V1__TopologyRequirement *tr = req->accessibility_requirements;
        if (tr && tr->n_preferred)
            drv_kvs_from_topology(&v->topology, tr->preferred[0]);
        else if (tr && tr->n_requisite)
            drv_kvs_from_topology(&v->topology, tr->requisite[0]);
        else
            drv_kvs_copy(&v->topology, &d->cfg->topology);
    }
    /* A restore or a clone starts with its source's data. */
    char *from = a->src_type == DRV_SRC_SNAPSHOT ? drv_snapshot_dir(d, a->src_id)
                 : a->src_type == DRV_SRC_VOLUME ? util_strdup(drv_model_volume(m, a->src_id)->path)
                                                 : NULL;
    int r = from ? drv_copy_tree(from, v->path) : drvkit_mkdir_p(v->path, 0755);
    free(from);
    if (r < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "cannot create %s: %s", v->path,
                        util_err_last()[0] ? util_err_last() : strerror(-r));
        drv_volume_free(v);
        return;
    }
    drv_model_add_volume(m, v);
    drv_store_changed(d->store, NULL);
    obs_v(2, "created volume %s (%s, %lld bytes)", v->id, v->name, (long long)v->capacity);
    reply_volume(reply, d, v);
}

void drv_create_volume(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__CreateVolumeRequest *req = (const void *)msg;
    struct create_args a = {.req = req};
    if (!req->name || !*req->name) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "name is required");
        return;
    }
    const char *why = drv_name_check(req->name);
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "name %s", why);
        return;
    }
    if (req->n_volume_capabilities == 0) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_capabilities are required");
        return;
    }
    for (size_t i = 0; i < req->n_volume_capabilities; i++) {
        const Csi__V1__VolumeCapability *c = req->volume_capabilities[i];
        why = drv_cap_check(c, DRV_CTRL_CAP(d, SINGLE_NODE_MULTI_WRITER));
        if (why) {
            csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_capabilities[%zu]: %s", i, why);
            return;
        }
        drv_cap cap;
        drv_cap_from_pb(&cap, c);
        drv_cap_free(&cap);
        if (a.access_type && cap.access_type != a.access_type) {
            csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                            "a volume cannot be both a block and a mount volume");
            return;
        }
        a.access_type = cap.access_type;
    }
    if (req->capacity_range) {
        a.required = req->capacity_range->required_bytes;
        a.limit = req->capacity_range->limit_bytes;
    }
    if (a.required < 0 || a.limit < 0) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "capacity_range must not be negative");
        return;
    }
    if (a.limit && a.limit < a.required) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                        "limit_bytes %lld is below required_bytes %lld", (long long)a.limit,
                        (long long)a.required);
        return;
    }
    if (req->accessibility_requirements && !DRV_PLUGIN_CAP(d, VOLUME_ACCESSIBILITY_CONSTRAINTS)) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                        "accessibility_requirements given but VOLUME_ACCESSIBILITY_CONSTRAINTS "
                        "is not advertised");
        return;
    }
    const Csi__V1__VolumeContentSource *src = req->volume_content_source;
    if (src) {
        if (src->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT && src->snapshot) {
            a.src_type = DRV_SRC_SNAPSHOT;
            a.src_id = src->snapshot->snapshot_id;
        } else if (src->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME && src->volume) {
            a.src_type = DRV_SRC_VOLUME;
            a.src_id = src->volume->volume_id;
        }
        if (!a.src_type || !a.src_id || !*a.src_id) {
            csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                            "volume_content_source needs a snapshot or volume id");
            return;
        }
        if (a.src_type == DRV_SRC_SNAPSHOT && !DRV_CTRL_CAP(d, CREATE_DELETE_SNAPSHOT)) {
            csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                            "volumes from snapshots are not supported");
            return;
        }
        if (a.src_type == DRV_SRC_VOLUME && !DRV_CTRL_CAP(d, CLONE_VOLUME)) {
            csi_reply_error(reply, CSI_INVALID_ARGUMENT, "cloning volumes is not supported");
            return;
        }
    }
    drv_model *m = drv_store_lock(d->store);
    create_locked(d, m, &a, reply);
    drv_store_unlock(d->store);
}

/* ---- DeleteVolume ------------------------------------------------------------------ */

static void delete_locked(drv *d, drv_model *m, const char *id, csi_reply *reply)
{
    drv_volume *v = drv_model_volume(m, id);
    Csi__V1__DeleteVolumeResponse r = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
    if (!v) {
        csi_reply_ok(reply, &r.base); /* already gone: success, per spec */
        return;
    }
    if (v->n_pubs) {
        csi_reply_error(reply, CSI_FAILED_PRECONDITION, "volume %s is still published to node %s",
                        id, v->pubs[0].node_id);
        return;
    }
    if (v->staged_path || v->n_npubs) {
        csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                        "volume %s is still staged or published on node %s", id, d->cfg->node_id);
        return;
    }
    int rc = drv_remove_tree(v->path);
    if (rc < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "cannot remove %s: %s", v->path, strerror(-rc));
        return;
    }
    obs_v(2, "deleted volume %s (%s)", v->id, v->name);
    drv_model_remove_volume(m, v);
    drv_store_changed(d->store, NULL);
    csi_reply_ok(reply, &r.base);
}

void drv_delete_volume(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__DeleteVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    delete_locked(d, m, req->volume_id, reply);
    drv_store_unlock(d->store);
}

/* ---- ControllerPublishVolume / ControllerUnpublishVolume -------------------------- */

static void reply_published(csi_reply *reply, const drv_volume *v)
{
    char *dev = drv_device_path(v);
    Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry e =
        CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__PUBLISH_CONTEXT_ENTRY__INIT;
    e.key = "devicePath";
    e.value = dev;
    Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry *ep = &e;
    Csi__V1__ControllerPublishVolumeResponse r = CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__INIT;
    r.n_publish_context = 1;
    r.publish_context = &ep;
    csi_reply_ok(reply, &r.base);
    free(dev);
}

static size_t volumes_on_node(const drv_model *m, const char *node_id)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_vols; i++)
        n += drv_volume_pub(m->vols[i], node_id) != NULL;
    return n;
}

static void publish_locked(drv *d, drv_model *m, const Csi__V1__ControllerPublishVolumeRequest *req,
                           const drv_cap *cap, csi_reply *reply)
{
    drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
        return;
    }
    if (!drv_node_known(d, req->node_id)) {
        csi_reply_error(reply, CSI_NOT_FOUND, "node %s does not exist", req->node_id);
        return;
    }
    if (cap->access_type != v->access_type) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume %s is a %s volume, not %s", v->id,
                        drv_access_name(v->access_type), drv_access_name(cap->access_type));
        return;
    }
    bool ro = req->readonly;
    drv_pub *same = drv_volume_pub(v, req->node_id);
    if (same) {
        if (same->readonly != ro || !drv_cap_equal(&same->cap, cap))
            csi_reply_error(reply, CSI_ALREADY_EXISTS,
                            "volume %s is published to node %s with another capability or "
                            "readonly flag",
                            v->id, req->node_id);
        else
            reply_published(reply, v);
        return;
    }
    for (size_t i = 0; i < v->n_pubs; i++) {
        const drv_pub *p = &v->pubs[i];
        bool single = drv_mode_single_node(cap->mode) || drv_mode_single_node(p->cap.mode);
        bool two_writers =
            !ro && !p->readonly &&
            (cap->mode == CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER ||
             p->cap.mode ==
                 CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER);
        if (single || two_writers) {
            int mode = drv_mode_single_node(cap->mode) || !single ? cap->mode : p->cap.mode;
            csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                            "volume %s is already published to node %s and %s allows one %s", v->id,
                            p->node_id, drv_mode_name(mode), single ? "node" : "writer");
            return;
        }
    }
    int64_t max = d->cfg->max_volumes_per_node;
    if (max > 0 && (int64_t)volumes_on_node(m, req->node_id) >= max) {
        csi_reply_error(reply, CSI_RESOURCE_EXHAUSTED,
                        "node %s already has the maximum of %lld volumes", req->node_id,
                        (long long)max);
        return;
    }
    drv_pub *np = realloc(v->pubs, (v->n_pubs + 1) * sizeof(*np));
    if (!np)
        abort();
    v->pubs = np;
    drv_pub *p = &v->pubs[v->n_pubs++];
    p->node_id = util_strdup(req->node_id);
    p->readonly = ro;
    drv_cap_copy(&p->cap, cap);
    drv_store_changed(d->store, v);
    obs_v(2, "published volume %s to node %s", v->id, req->node_id);
    reply_published(reply, v);
}

/*
 * --publish-secret key=value: a ControllerPublish/Unpublish that carries
 * secrets must carry this one, so a test can tell that a sidecar passed the
 * Secret's data (and not merely a map) without the driver keeping any of
 * it. Both requests' SecretsEntry types share one layout.
 */
static bool secrets_ok(const drv *d, size_t n,
                       Csi__V1__ControllerPublishVolumeRequest__SecretsEntry *const *e)
{
    const char *want = d->cfg->publish_secret;
    if (!want || !*want || n == 0)
        return true;
    const char *eq = strchr(want, '=');
    size_t klen = eq ? (size_t)(eq - want) : strlen(want);
    for (size_t i = 0; i < n; i++)
        if (e[i] && e[i]->key && strlen(e[i]->key) == klen && strncmp(e[i]->key, want, klen) == 0)
            return e[i]->value && strcmp(e[i]->value, eq ? eq + 1 : "") == 0;
    return false;
}

void drv_controller_publish(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__ControllerPublishVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    if (!req->node_id || !*req->node_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "node_id is required");
        return;
    }
    const char *why =
        drv_cap_check(req->volume_capability, DRV_CTRL_CAP(d, SINGLE_NODE_MULTI_WRITER));
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s", why);
        return;
    }
    if (req->readonly && !DRV_CTRL_CAP(d, PUBLISH_READONLY)) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                        "readonly is set but PUBLISH_READONLY is not advertised");
        return;
    }
    if (!secrets_ok(d, req->n_secrets, req->secrets)) {
        csi_reply_error(reply, CSI_UNAUTHENTICATED, "the secrets do not match --publish-secret");
        return;
    }
    drv_cap cap;
    drv_cap_from_pb(&cap, req->volume_capability);
    drv_model *m = drv_store_lock(d->store);
    publish_locked(d, m, req, &cap, reply);
    drv_store_unlock(d->store);
    drv_cap_free(&cap);
}

/* Drops publication `i` of `v`. */
static void unpublish_at(drv_volume *v, size_t i)
{
    free(v->pubs[i].node_id);
    drv_cap_free(&v->pubs[i].cap);
    memmove(&v->pubs[i], &v->pubs[i + 1], (v->n_pubs - i - 1) * sizeof(*v->pubs));
    v->n_pubs--;
}

static void unpublish_locked(drv *d, drv_model *m,
                             const Csi__V1__ControllerUnpublishVolumeRequest *req, csi_reply *reply)
{
    Csi__V1__ControllerUnpublishVolumeResponse ok =
        CSI__V1__CONTROLLER_UNPUBLISH_VOLUME_RESPONSE__INIT;
    const char *node = req->node_id && *req->node_id ? req->node_id : NULL;
    drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v || (node && !drv_node_known(d, node))) {
        /* CSI v1.12: a plugin SHOULD answer OK when it can regard the volume
         * as unpublished; --unpublish-missing-ok=false gives the error
         * table's NOT_FOUND (the attacher's deleted-node tests need it). */
        if (d->cfg->unpublish_missing_ok)
            csi_reply_ok(reply, &ok.base);
        else if (!v)
            csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
        else
            csi_reply_error(reply, CSI_NOT_FOUND, "node %s does not exist", node);
        return;
    }
    /* This node still uses the volume: detaching now would pull the device
     * from under a mount, which the CO must never ask for. */
    bool here = !node || strcmp(node, d->cfg->node_id) == 0;
    if (here && drv_volume_pub(v, d->cfg->node_id) && (v->staged_path || v->n_npubs)) {
        csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                        "volume %s is still staged or published on node %s", v->id,
                        d->cfg->node_id);
        return;
    }
    size_t before = v->n_pubs;
    for (size_t i = v->n_pubs; i-- > 0;)
        if (!node || strcmp(v->pubs[i].node_id, node) == 0)
            unpublish_at(v, i);
    if (v->n_pubs != before) {
        drv_store_changed(d->store, v);
        obs_v(2, "unpublished volume %s from %s", v->id, node ? node : "every node");
    }
    csi_reply_ok(reply, &ok.base);
}

void drv_controller_unpublish(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__ControllerUnpublishVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    if (!secrets_ok(d, req->n_secrets,
                    (Csi__V1__ControllerPublishVolumeRequest__SecretsEntry *const *)req->secrets)) {
        csi_reply_error(reply, CSI_UNAUTHENTICATED, "the secrets do not match --publish-secret");
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    unpublish_locked(d, m, req, reply);
    drv_store_unlock(d->store);
}

/* ---- ValidateVolumeCapabilities ------------------------------------------------------ */

static void validate_locked(drv *d, drv_model *m,
                            const Csi__V1__ValidateVolumeCapabilitiesRequest *req, csi_reply *reply)
{
    const drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
        return;
    }
    Csi__V1__ValidateVolumeCapabilitiesResponse r =
        CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__INIT;
    char *why = NULL;
    for (size_t i = 0; !why && i < req->n_volume_capabilities; i++) {
        const char *bad =
            drv_cap_check(req->volume_capabilities[i], DRV_CTRL_CAP(d, SINGLE_NODE_MULTI_WRITER));
        drv_cap cap;
        if (bad) {
            why = util_asprintf("volume_capabilities[%zu]: %s", i, bad);
            break;
        }
        drv_cap_from_pb(&cap, req->volume_capabilities[i]);
        if (cap.access_type != v->access_type)
            why = util_asprintf("volume %s is a %s volume", v->id, drv_access_name(v->access_type));
        drv_cap_free(&cap);
    }
    if (!why && req->n_parameters) {
        drv_kvs params = {0};
        for (size_t i = 0; i < req->n_parameters; i++)
            drv_kvs_add(&params, req->parameters[i]->key, req->parameters[i]->value);
        if (!drv_kvs_equal(&params, &v->params))
            why = util_asprintf("parameters differ from those volume %s was created with", v->id);
        drv_kvs_free(&params);
    }
    /* Confirmed echoes what was asked: the CO compares it with its request. */
    Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed c =
        CSI__V1__VALIDATE_VOLUME_CAPABILITIES_RESPONSE__CONFIRMED__INIT;
    if (why) {
        r.message = why;
    } else {
        c.n_volume_context = req->n_volume_context;
        c.volume_context =
            (Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__VolumeContextEntry **)
                req->volume_context;
        c.n_volume_capabilities = req->n_volume_capabilities;
        c.volume_capabilities = req->volume_capabilities;
        c.n_parameters = req->n_parameters;
        c.parameters = (Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__ParametersEntry **)
                           req->parameters;
        c.n_mutable_parameters = req->n_mutable_parameters;
        c.mutable_parameters =
            (Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__MutableParametersEntry **)
                req->mutable_parameters;
        r.confirmed = &c;
    }
    csi_reply_ok(reply, &r.base);
    free(why);
}

void drv_validate_volume_capabilities(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__ValidateVolumeCapabilitiesRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    if (req->n_volume_capabilities == 0) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_capabilities are required");
        return;
    }
    for (size_t i = 0; i < req->n_volume_capabilities; i++) {
        const Csi__V1__VolumeCapability *c = req->volume_capabilities[i];
        if (c->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE__NOT_SET ||
            !c->access_mode) {
            csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                            "volume_capabilities[%zu] needs an access type and an access mode", i);
            return;
        }
    }
    drv_model *m = drv_store_lock(d->store);
    validate_locked(d, m, req, reply);
    drv_store_unlock(d->store);
}

/* ---- ListVolumes / ControllerGetVolume --------------------------------------------- */

static void list_volumes_locked(drv *d, drv_model *m, const Csi__V1__ListVolumesRequest *req,
                                csi_reply *reply)
{
    size_t start;
    if (!parse_token(req->starting_token, m->n_vols, &start)) {
        csi_reply_error(reply, CSI_ABORTED, "invalid starting_token \"%s\"", req->starting_token);
        return;
    }
    size_t n = m->n_vols - start;
    if (req->max_entries > 0 && n > (size_t)req->max_entries)
        n = (size_t)req->max_entries;
    bool with_nodes = DRV_CTRL_CAP(d, LIST_VOLUMES_PUBLISHED_NODES);
    vol_msg *vm = util_calloc(n ? n : 1, sizeof(*vm));
    Csi__V1__ListVolumesResponse__Entry *e = util_calloc(n ? n : 1, sizeof(*e));
    Csi__V1__ListVolumesResponse__Entry **ep = util_calloc(n ? n : 1, sizeof(void *));
    Csi__V1__ListVolumesResponse__VolumeStatus *st = util_calloc(n ? n : 1, sizeof(*st));
    char ***nodes = util_calloc(n ? n : 1, sizeof(*nodes));
    for (size_t i = 0; i < n; i++) {
        const drv_volume *v = m->vols[start + i];
        vol_msg_fill(&vm[i], d, v);
        csi__v1__list_volumes_response__entry__init(&e[i]);
        e[i].volume = &vm[i].vol;
        if (with_nodes) {
            csi__v1__list_volumes_response__volume_status__init(&st[i]);
            nodes[i] = published_nodes(v);
            st[i].n_published_node_ids = v->n_pubs;
            st[i].published_node_ids = nodes[i];
            e[i].status = &st[i];
        }
        ep[i] = &e[i];
    }
    char next[32] = "";
    if (start + n < m->n_vols)
        snprintf(next, sizeof(next), "%zu", start + n);
    Csi__V1__ListVolumesResponse r = CSI__V1__LIST_VOLUMES_RESPONSE__INIT;
    r.n_entries = n;
    r.entries = ep;
    r.next_token = next;
    csi_reply_ok(reply, &r.base);
    for (size_t i = 0; i < n; i++) {
        vol_msg_done(&vm[i]);
        free(nodes[i]);
    }
    free(vm);
    free(e);
    free(ep);
    free(st);
    free(nodes);
}

void drv_list_volumes(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__ListVolumesRequest *req = (const void *)msg;
    if (req->max_entries < 0) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "max_entries must not be negative");
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    list_volumes_locked(d, m, req, reply);
    drv_store_unlock(d->store);
}

void drv_controller_get_volume(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__ControllerGetVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    const drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
    } else {
        vol_msg vm;
        vol_msg_fill(&vm, d, v);
        char **nodes = published_nodes(v);
        Csi__V1__ControllerGetVolumeResponse__VolumeStatus st =
            CSI__V1__CONTROLLER_GET_VOLUME_RESPONSE__VOLUME_STATUS__INIT;
        st.n_published_node_ids = v->n_pubs;
        st.published_node_ids = nodes;
        Csi__V1__ControllerGetVolumeResponse r = CSI__V1__CONTROLLER_GET_VOLUME_RESPONSE__INIT;
        r.volume = &vm.vol;
        r.status = &st;
        csi_reply_ok(reply, &r.base);
        free(nodes);
        vol_msg_done(&vm);
    }
    drv_store_unlock(d->store);
}

/* ---- GetCapacity / ControllerGetCapabilities ------------------------------------------ */

void drv_get_capacity(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__GetCapacityRequest *req = (const void *)msg;
    for (size_t i = 0; i < req->n_volume_capabilities; i++) {
        const char *why =
            drv_cap_check(req->volume_capabilities[i], DRV_CTRL_CAP(d, SINGLE_NODE_MULTI_WRITER));
        if (why) {
            csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_capabilities[%zu]: %s", i, why);
            return;
        }
    }
    if (req->accessible_topology && !DRV_PLUGIN_CAP(d, VOLUME_ACCESSIBILITY_CONSTRAINTS)) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT,
                        "accessible_topology given but VOLUME_ACCESSIBILITY_CONSTRAINTS is not "
                        "advertised");
        return;
    }
    /* The pool lives where this node is: a topology naming another value
     * for one of this node's keys sees no capacity. */
    bool here = true;
    if (req->accessible_topology) {
        for (size_t i = 0; i < req->accessible_topology->n_segments; i++) {
            const Csi__V1__Topology__SegmentsEntry *s = req->accessible_topology->segments[i];
            const char *mine = drv_kvs_get(&d->cfg->topology, s->key);
            if (!mine || strcmp(mine, s->value) != 0)
                here = false;
        }
    }
    drv_model *m = drv_store_lock(d->store);
    int64_t avail = d->cfg->capacity - m->used;
    drv_store_unlock(d->store);
    if (avail < 0 || !here)
        avail = 0;
    Google__Protobuf__Int64Value max = GOOGLE__PROTOBUF__INT64_VALUE__INIT;
    max.value = avail;
    Csi__V1__GetCapacityResponse r = CSI__V1__GET_CAPACITY_RESPONSE__INIT;
    r.available_capacity = avail;
    r.maximum_volume_size = &max;
    csi_reply_ok(reply, &r.base);
}

void drv_controller_get_capabilities(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    (void)msg;
    enum { MAX = 64 };
    Csi__V1__ControllerServiceCapability caps[MAX];
    Csi__V1__ControllerServiceCapability__RPC rpc[MAX];
    Csi__V1__ControllerServiceCapability *ptrs[MAX];
    size_t n = 0;
    for (int t = 1; t < MAX; t++) {
        if (!CSI_CAP(d->cfg->controller_caps, t))
            continue;
        csi__v1__controller_service_capability__rpc__init(&rpc[n]);
        rpc[n].type = t;
        csi__v1__controller_service_capability__init(&caps[n]);
        caps[n].type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
        caps[n].rpc = &rpc[n];
        ptrs[n] = &caps[n];
        n++;
    }
    Csi__V1__ControllerGetCapabilitiesResponse r =
        CSI__V1__CONTROLLER_GET_CAPABILITIES_RESPONSE__INIT;
    r.n_capabilities = n;
    r.capabilities = ptrs;
    csi_reply_ok(reply, &r.base);
}

/* ---- ControllerExpandVolume ------------------------------------------------------------ */

static void expand_locked(drv *d, drv_model *m, const Csi__V1__ControllerExpandVolumeRequest *req,
                          csi_reply *reply)
{
    drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
        return;
    }
    int64_t required = req->capacity_range->required_bytes;
    int64_t limit = req->capacity_range->limit_bytes;
    int64_t want = required ? required : limit;
    if (limit && v->capacity > limit) {
        csi_reply_error(reply, CSI_OUT_OF_RANGE,
                        "volume %s has %lld bytes, above the limit: volumes only grow", v->id,
                        (long long)v->capacity);
        return;
    }
    if (want > v->capacity) {
        bool in_use = v->n_pubs || v->staged_path || v->n_npubs;
        if (in_use &&
            d->cfg->expansion == CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__OFFLINE) {
            csi_reply_error(reply, CSI_FAILED_PRECONDITION,
                            "volume %s is in use and this driver expands offline only", v->id);
            return;
        }
        if (want > d->cfg->capacity) {
            csi_reply_error(reply, CSI_OUT_OF_RANGE, "%lld bytes exceed the pool of %lld bytes",
                            (long long)want, (long long)d->cfg->capacity);
            return;
        }
        if (m->used - v->capacity + want > d->cfg->capacity) {
            csi_reply_error(reply, CSI_RESOURCE_EXHAUSTED,
                            "not enough capacity to grow volume %s to %lld bytes", v->id,
                            (long long)want);
            return;
        }
        m->used += want - v->capacity;
        v->capacity = want;
        drv_store_changed(d->store, v);
        obs_v(2, "expanded volume %s to %lld bytes", v->id, (long long)want);
    }
    /* A file system must grow on the node too; a raw block device not. */
    int access = v->access_type;
    if (req->volume_capability)
        access = req->volume_capability->access_type_case ==
                         CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK
                     ? DRV_ACCESS_BLOCK
                     : DRV_ACCESS_MOUNT;
    Csi__V1__ControllerExpandVolumeResponse r = CSI__V1__CONTROLLER_EXPAND_VOLUME_RESPONSE__INIT;
    r.capacity_bytes = v->capacity;
    r.node_expansion_required = access == DRV_ACCESS_MOUNT && DRV_NODE_CAP(d, EXPAND_VOLUME);
    csi_reply_ok(reply, &r.base);
}

void drv_controller_expand(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__ControllerExpandVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    const Csi__V1__CapacityRange *cr = req->capacity_range;
    if (!cr || (!cr->required_bytes && !cr->limit_bytes)) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "capacity_range is required");
        return;
    }
    if (cr->required_bytes < 0 || cr->limit_bytes < 0 ||
        (cr->limit_bytes && cr->limit_bytes < cr->required_bytes)) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "capacity_range is invalid");
        return;
    }
    if (req->volume_capability) {
        const char *why =
            drv_cap_check(req->volume_capability, DRV_CTRL_CAP(d, SINGLE_NODE_MULTI_WRITER));
        if (why) {
            csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s", why);
            return;
        }
    }
    drv_model *m = drv_store_lock(d->store);
    expand_locked(d, m, req, reply);
    drv_store_unlock(d->store);
}

/* ---- ControllerModifyVolume ------------------------------------------------------------ */

/* The volume takes the new values; keys not named keep theirs. Nothing is
 * checked beyond the volume's existence: a backend's refusals are played
 * with fault injection (INVALID_ARGUMENT for an infeasible class). */
void drv_controller_modify(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__ControllerModifyVolumeRequest *req = (const void *)msg;
    if (!req->volume_id || !*req->volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "volume_id is required");
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    drv_volume *v = drv_model_volume(m, req->volume_id);
    if (!v) {
        drv_store_unlock(d->store);
        csi_reply_error(reply, CSI_NOT_FOUND, "volume %s does not exist", req->volume_id);
        return;
    }
    for (size_t i = 0; i < req->n_mutable_parameters; i++)
        drv_kvs_set(&v->mutable_params, req->mutable_parameters[i]->key,
                    req->mutable_parameters[i]->value);
    drv_store_changed(d->store, v);
    drv_store_unlock(d->store);
    obs_v(2, "modified volume %s (%zu mutable parameters)", req->volume_id,
          req->n_mutable_parameters);
    Csi__V1__ControllerModifyVolumeResponse r = CSI__V1__CONTROLLER_MODIFY_VOLUME_RESPONSE__INIT;
    csi_reply_ok(reply, &r.base);
}

/* ---- snapshots ------------------------------------------------------------------------ */

char *drv_snapshot_dir(const drv *d, const char *id)
{
    return util_asprintf("%s/snapshots/%s", drv_store_dir(d->store), id);
}

typedef struct snap_msg {
    Csi__V1__Snapshot snap;
    Google__Protobuf__Timestamp ts;
} snap_msg;

static void snap_msg_fill(snap_msg *m, const drv_snapshot *s)
{
    csi__v1__snapshot__init(&m->snap);
    google__protobuf__timestamp__init(&m->ts);
    m->ts.seconds = s->created_ns / 1000000000;
    m->ts.nanos = (int32_t)(s->created_ns % 1000000000);
    m->snap.snapshot_id = s->id;
    m->snap.source_volume_id = s->source_volume_id;
    m->snap.size_bytes = s->size;
    m->snap.creation_time = &m->ts;
    m->snap.ready_to_use = 1; /* nothing to post-process here */
}

static void reply_snapshot(csi_reply *reply, const drv_snapshot *s)
{
    snap_msg sm;
    snap_msg_fill(&sm, s);
    Csi__V1__CreateSnapshotResponse r = CSI__V1__CREATE_SNAPSHOT_RESPONSE__INIT;
    r.snapshot = &sm.snap;
    csi_reply_ok(reply, &r.base);
}

static void create_snapshot_locked(drv *d, drv_model *m, const Csi__V1__CreateSnapshotRequest *req,
                                   csi_reply *reply)
{
    const drv_snapshot *old = drv_model_snapshot_by_name(m, req->name);
    if (old) {
        if (strcmp(old->source_volume_id, req->source_volume_id) != 0)
            csi_reply_error(reply, CSI_ALREADY_EXISTS,
                            "snapshot \"%s\" exists (%s) for another volume (%s)", req->name,
                            old->id, old->source_volume_id);
        else
            reply_snapshot(reply, old);
        return;
    }
    const drv_volume *v = drv_model_volume(m, req->source_volume_id);
    if (!v) {
        csi_reply_error(reply, CSI_NOT_FOUND, "source volume %s does not exist",
                        req->source_volume_id);
        return;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    drv_snapshot *s = util_calloc(1, sizeof(*s));
    s->id = drv_model_new_id(m, "snap");
    s->name = util_strdup(req->name);
    s->source_volume_id = util_strdup(v->id);
    s->size = v->capacity;
    s->created_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    /* The snapshot keeps a copy of the volume's data as it is now. */
    char *dir = drv_snapshot_dir(d, s->id);
    int r = drv_copy_tree(v->path, dir);
    free(dir);
    if (r < 0) {
        csi_reply_error(reply, CSI_INTERNAL, "snapshot of volume %s: %s", v->id, util_err_last());
        drv_snapshot_free(s);
        return;
    }
    drv_model_add_snapshot(m, s);
    drv_store_changed(d->store, NULL);
    obs_v(2, "created snapshot %s (%s) of volume %s", s->id, s->name, v->id);
    reply_snapshot(reply, s);
}

void drv_create_snapshot(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__CreateSnapshotRequest *req = (const void *)msg;
    if (!req->source_volume_id || !*req->source_volume_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "source_volume_id is required");
        return;
    }
    if (!req->name || !*req->name) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "name is required");
        return;
    }
    const char *why = drv_name_check(req->name);
    if (why) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "name %s", why);
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    create_snapshot_locked(d, m, req, reply);
    drv_store_unlock(d->store);
}

void drv_delete_snapshot(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__DeleteSnapshotRequest *req = (const void *)msg;
    if (!req->snapshot_id || !*req->snapshot_id) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "snapshot_id is required");
        return;
    }
    drv_model *m = drv_store_lock(d->store);
    drv_snapshot *s = drv_model_snapshot(m, req->snapshot_id);
    if (s) {
        char *dir = drv_snapshot_dir(d, s->id);
        int r = drv_remove_tree(dir);
        if (r < 0) {
            csi_reply_error(reply, CSI_INTERNAL, "cannot remove %s: %s", dir, strerror(-r));
            free(dir);
            drv_store_unlock(d->store);
            return;
        }
        free(dir);
        obs_v(2, "deleted snapshot %s (%s)", s->id, s->name);
        drv_model_remove_snapshot(m, s);
        drv_store_changed(d->store, NULL);
    }
    Csi__V1__DeleteSnapshotResponse r = CSI__V1__DELETE_SNAPSHOT_RESPONSE__INIT;
    csi_reply_ok(reply, &r.base);
    drv_store_unlock(d->store);
}

static void list_snapshots_locked(const drv_model *m, const Csi__V1__ListSnapshotsRequest *req,
                                  csi_reply *reply)
{
    /* The filtered list first, then the page of it. */
    const drv_snapshot **all = util_calloc(m->n_snaps ? m->n_snaps : 1, sizeof(void *));
    size_t total = 0;
    for (size_t i = 0; i < m->n_snaps; i++) {
        const drv_snapshot *s = m->snaps[i];
        if (req->snapshot_id && *req->snapshot_id && strcmp(s->id, req->snapshot_id) != 0)
            continue;
        if (req->source_volume_id && *req->source_volume_id &&
            strcmp(s->source_volume_id, req->source_volume_id) != 0)
            continue;
        all[total++] = s;
    }
    size_t start;
    if (!parse_token(req->starting_token, total, &start)) {
        csi_reply_error(reply, CSI_ABORTED, "invalid starting_token \"%s\"", req->starting_token);
        free(all);
        return;
    }
    size_t n = total - start;
    if (req->max_entries > 0 && n > (size_t)req->max_entries)
        n = (size_t)req->max_entries;
    snap_msg *sm = util_calloc(n ? n : 1, sizeof(*sm));
    Csi__V1__ListSnapshotsResponse__Entry *e = util_calloc(n ? n : 1, sizeof(*e));
    Csi__V1__ListSnapshotsResponse__Entry **ep = util_calloc(n ? n : 1, sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        snap_msg_fill(&sm[i], all[start + i]);
        csi__v1__list_snapshots_response__entry__init(&e[i]);
        e[i].snapshot = &sm[i].snap;
        ep[i] = &e[i];
    }
    char next[32] = "";
    if (start + n < total)
        snprintf(next, sizeof(next), "%zu", start + n);
    Csi__V1__ListSnapshotsResponse r = CSI__V1__LIST_SNAPSHOTS_RESPONSE__INIT;
    r.n_entries = n;
    r.entries = ep;
    r.next_token = next;
    csi_reply_ok(reply, &r.base);
    free(sm);
    free(e);
    free(ep);
    free(all);
}

void drv_list_snapshots(drv *d, const ProtobufCMessage *msg, csi_reply *reply)
{
    const Csi__V1__ListSnapshotsRequest *req = (const void *)msg;
    if (req->max_entries < 0) {
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "max_entries must not be negative");
        return;
    }
    const drv_model *m = drv_store_lock(d->store);
    list_snapshots_locked(m, req, reply);
    drv_store_unlock(d->store);
}
