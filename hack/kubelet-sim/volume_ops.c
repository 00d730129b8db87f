/*
 * One volume at a time, as the kubelet's operation executor: set up
 * (wait for the attachment, NodeStageVolume, NodePublishVolume), grown on
 * the node once published (NodeExpandVolume when the claim waits for it,
 * then the claim's resize finished, as the kubelet's node expander), or
 * torn down (NodeUnpublishVolume, NodeUnstageVolume when the last pod on this
 * node let it go). Each pass reads the facts, asks ksim_next_step what to
 * do, does that one step and looks again, so a retry after any failure or
 * restart picks up where things are.
 *
 * A volume is "busy" while a worker calls the driver about it: two pods
 * sharing a volume never stage it twice or unstage it under each other.
 * Records (records.c) are written before a call and dropped after its
 * undo succeeded, publication record last. The driver is dialled per
 * operation, as the kubelet's CSI client does: a driver that restarted is
 * simply dialled again.
 *
 * Secrets are read for each call and go only into the request; nothing
 * here logs a request.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kubelet-sim/volumes.h"
#include "obs/obs.h"

#define CSI_TIMEOUT     (2 * UTIL_MINUTE) /* the kubelet's csiTimeout */
#define CONNECT_TIMEOUT (5 * UTIL_SECOND)

/* ---- busy volumes -------------------------------------------------------------------- */

static bool busy_has(ksim_volumes *vm, const char *unique)
{
    for (struct ksim_busy *b = vm->busy; b; b = b->next)
        if (strcmp(b->unique, unique) == 0)
            return true;
    return false;
}

static void vol_lock(ksim_volumes *vm, const char *unique)
{
    pthread_mutex_lock(&vm->mu);
    while (busy_has(vm, unique))
        pthread_cond_wait(&vm->idle, &vm->mu);
    struct ksim_busy *b = util_calloc(1, sizeof(*b));
    b->unique = util_strdup(unique);
    b->next = vm->busy;
    vm->busy = b;
    pthread_mutex_unlock(&vm->mu);
}

static void vol_unlock(ksim_volumes *vm, const char *unique)
{
    pthread_mutex_lock(&vm->mu);
    for (struct ksim_busy **bp = &vm->busy; *bp; bp = &(*bp)->next) {
        if (strcmp((*bp)->unique, unique) == 0) {
            struct ksim_busy *b = *bp;
            *bp = b->next;
            free(b->unique);
            free(b);
            break;
        }
    }
    pthread_cond_broadcast(&vm->idle);
    pthread_mutex_unlock(&vm->mu);
}

/* ---- records in memory (under vm->mu) ------------------------------------------------ */

static ksim_pub *find_pub(ksim_volumes *vm, const char *uid, const char *vol_name)
{
    for (ksim_pub *p = vm->pubs; p; p = p->next)
        if (strcmp(p->pod_uid, uid) == 0 && strcmp(p->vol_name, vol_name) == 0)
            return p;
    return NULL;
}

static ksim_stage *find_stage(ksim_volumes *vm, const char *unique)
{
    for (ksim_stage *s = vm->stages; s; s = s->next)
        if (strcmp(s->unique, unique) == 0)
            return s;
    return NULL;
}

/* Another publication of the volume than `self` that is not undone. */
static bool other_users(ksim_volumes *vm, const ksim_pub *self, const char *unique)
{
    for (ksim_pub *p = vm->pubs; p; p = p->next)
        if (p != self && !p->unpublished && strcmp(p->unique, unique) == 0)
            return true;
    return false;
}

static void unlink_pub(ksim_volumes *vm, ksim_pub *p)
{
    for (ksim_pub **pp = &vm->pubs; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            return;
        }
}

static void unlink_stage(ksim_volumes *vm, ksim_stage *s)
{
    for (ksim_stage **sp = &vm->stages; *sp; sp = &(*sp)->next)
        if (*sp == s) {
            *sp = s->next;
            return;
        }
}

/* ---- talking to the driver ----------------------------------------------------------- */

typedef struct driver_link {
    const char *driver;
    char *endpoint;
    struct ksim_conn *c;
    bool have_caps;
    bool stage, snmw, expand;
} driver_link;

static bool link_registered(ksim_volumes *vm, driver_link *l)
{
    free(l->endpoint);
    l->endpoint = NULL;
    return ksim_plugins_endpoint(vm->plugins, l->driver, &l->endpoint) == 0;
}

static void conn_free(struct ksim_conn *c)
{
    if (!c)
        return;
    csi_conn_free(c->conn);
    free(c->endpoint);
    free(c);
}

/* Takes the shared connection to `endpoint`, dialled when there is none
 * or the last one lost its driver. */
static struct ksim_conn *conn_take(ksim_volumes *vm, const char *endpoint)
{
    struct ksim_conn *found = NULL, *dead = NULL;
    pthread_mutex_lock(&vm->mu);
    for (struct ksim_conn **cp = &vm->conns; *cp && !found;) {
        struct ksim_conn *c = *cp;
        if (!c->stale && csi_conn_lost(c->conn))
            c->stale = true;
        if (c->stale && c->refs == 0 && !dead) {
            *cp = c->next; /* one at a time: freed outside the lock */
            dead = c;
            continue;
        }
        if (!c->stale && strcmp(c->endpoint, endpoint) == 0) {
            c->refs++;
            found = c;
        }
        cp = &c->next;
    }
    pthread_mutex_unlock(&vm->mu);
    conn_free(dead);
    if (found)
        return found;
    csi_conn_opts co = {.connect_timeout = CONNECT_TIMEOUT};
    csi_conn *conn = NULL;
    if (csi_conn_new(endpoint, &co, &conn) < 0)
        return NULL;
    struct ksim_conn *c = util_calloc(1, sizeof(*c));
    c->endpoint = util_strdup(endpoint);
    c->conn = conn;
    c->refs = 1;
    pthread_mutex_lock(&vm->mu);
    c->next = vm->conns;
    vm->conns = c;
    pthread_mutex_unlock(&vm->mu);
    return c;
}

static void conn_give(ksim_volumes *vm, struct ksim_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&vm->mu);
    c->refs--;
    pthread_mutex_unlock(&vm->mu);
}

void ksim_vm_close_conns(ksim_volumes *vm)
{
    while (vm->conns) {
        struct ksim_conn *c = vm->conns;
        vm->conns = c->next;
        conn_free(c);
    }
}

/* The shared connection of the link, dialled on first use; NULL with the
 * reason in util_err_last(). */
static csi_conn *link_conn(ksim_volumes *vm, driver_link *l)
{
    if (!l->c && l->endpoint)
        l->c = conn_take(vm, l->endpoint);
    if (l->c)
        return l->c->conn;
    util_err_set(-EIO, "cannot connect to driver %s at %s: %s", l->driver,
                 l->endpoint ? l->endpoint : "(not registered)", util_err_last());
    return NULL;
}

/* NodeGetCapabilities, once per operation (the kubelet asks every time). */
static int link_caps(ksim_volumes *vm, driver_link *l)
{
    if (l->have_caps)
        return 0;
    csi_conn *conn = link_conn(vm, l);
    if (!conn)
        return -EIO;
    Csi__V1__NodeGetCapabilitiesResponse *resp = NULL;
    csi_status st;
    if (csi_node_get_capabilities(conn, CSI_TIMEOUT, &resp, &st) < 0) {
        char *text = csi_status_text(&st);
        int e = util_err_set(-EREMOTEIO, "NodeGetCapabilities of %s: %s", l->driver, text);
        free(text);
        return e;
    }
    csi_caps caps = {0};
    csi_caps_from_node(&caps, resp);
    csi__v1__node_get_capabilities_response__free_unpacked(resp, NULL);
    l->stage =
        CSI_CAP(caps.node, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME);
    l->snmw =
        CSI_CAP(caps.node, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER);
    l->expand = CSI_CAP(caps.node, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME);
    l->have_caps = true;
    return 0;
}

static void link_close(ksim_volumes *vm, driver_link *l)
{
    conn_give(vm, l->c);
    free(l->endpoint);
    memset(l, 0, sizeof(*l));
}

/* One Node RPC; -EREMOTEIO with the gRPC error as the kubelet prints it,
 * its code in *code (may be NULL; CSI_OK when the driver did not answer). */
static int node_call_code(ksim_volumes *vm, driver_link *l, const char *rpc,
                          const ProtobufCMessage *req, const ProtobufCMessageDescriptor *resp_desc,
                          int *code)
{
    if (code)
        *code = CSI_OK;
    csi_conn *conn = link_conn(vm, l);
    if (!conn)
        return -EIO;
    char *method = util_asprintf("/csi.v1.Node/%s", rpc);
    ProtobufCMessage *resp = NULL;
    csi_status st;
    int r = csi_call(conn, method, req, resp_desc, CSI_TIMEOUT, &resp, &st);
    free(method);
    if (r < 0 && code)
        *code = st.code;
    if (r < 0) {
        char *text = csi_status_text(&st);
        r = util_err_set(-EREMOTEIO, "%s: %s", rpc, text);
        free(text);
        return r;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

static int node_call(ksim_volumes *vm, driver_link *l, const char *rpc, const ProtobufCMessage *req,
                     const ProtobufCMessageDescriptor *resp_desc)
{
    return node_call_code(vm, l, rpc, req, resp_desc, NULL);
}

static int read_secret(ksim_volumes *vm, const char *ns, const char *name, ksim_map *out)
{
    if (!name)
        return 0;
    char *path = kube_path(&KUBE_SECRET, ns, name, NULL);
    kube_resp r = {0};
    int rc = kube_get(vm->kube, path, &r);
    free(path);
    if (rc < 0)
        rc = util_err_set(rc, "cannot read secret %s/%s: %d %s", ns, name, r.code, r.message);
    else
        rc = ksim_secret_data(r.body, out);
    kube_resp_clear(&r);
    return rc;
}

/* ---- attachment ---------------------------------------------------------------------- */

struct va_find {
    const char *pv;
    bool attached;
    json_object *metadata; /* status.attachmentMetadata of the attached one */
};

static void va_match(void *ud, json_object *va)
{
    struct va_find *f = ud;
    const char *pv = kobj_path_str(va, "spec.source.persistentVolumeName");
    if (f->attached || !pv || strcmp(pv, f->pv) != 0 || kobj_deleting(va))
        return;
    if (kobj_bool(kobj_obj(va, "status"), "attached", false)) {
        f->attached = true;
        f->metadata = json_object_get(kobj_path(va, "status.attachmentMetadata"));
    }
}

/* Whether a VolumeAttachment of `pv` on this node says attached; its
 * attachmentMetadata goes into `pub_ctx`. The informer holds this node's
 * attachments only, found by what they name rather than by their name. */
static bool attached(ksim_volumes *vm, const char *pv, ksim_map *pub_ctx)
{
    struct va_find f = {.pv = pv};
    kube_informer_each(vm->vas, va_match, &f);
    if (f.attached) {
        ksim_map_clear(pub_ctx);
        if (ksim_map_add_json(pub_ctx, f.metadata, "attachmentMetadata") < 0)
            obs_warn("VolumeAttachment of %s: %s", pv, util_err_last());
    }
    json_object_put(f.metadata);
    return f.attached;
}

/* ---- set up -------------------------------------------------------------------------- */

/* The publication record of (pod, volume), made and written when missing. */
static int ensure_pub(ksim_volumes *vm, const json_object *pod, const ksim_vol *v,
                      const char *target, const char *staging, bool attach)
{
    const char *uid = kobj_uid(pod);
    pthread_mutex_lock(&vm->mu);
    ksim_pub *p = find_pub(vm, uid, v->name);
    bool fresh = !p;
    if (fresh) {
        p = util_calloc(1, sizeof(*p));
        p->pod_uid = util_strdup(uid);
        p->pod_ns = util_strdup(kobj_namespace(pod));
        p->pod_name = util_strdup(kobj_name(pod));
        p->vol_name = util_strdup(v->name);
        p->spec_name = util_strdup(v->spec_name);
        p->driver = util_strdup(v->driver);
        p->handle = util_strdup(v->handle);
        p->unique = util_strdup(v->unique);
        p->target = util_strdup(target);
        p->staging = staging ? util_strdup(staging) : NULL;
        p->attach = attach;
    }
    int r = ksim_record_put_pub(vm->o.root, vm->o.node, p);
    if (fresh && r == 0) {
        p->next = vm->pubs;
        vm->pubs = p;
    } else if (fresh) {
        ksim_pub_free(p);
    }
    pthread_mutex_unlock(&vm->mu);
    return r;
}

static int ensure_stage(ksim_volumes *vm, const ksim_vol *v, const char *staging, bool attach)
{
    pthread_mutex_lock(&vm->mu);
    int r = 0;
    if (!find_stage(vm, v->unique)) {
        ksim_stage *s = util_calloc(1, sizeof(*s));
        s->driver = util_strdup(v->driver);
        s->handle = util_strdup(v->handle);
        s->unique = util_strdup(v->unique);
        s->spec_name = util_strdup(v->spec_name);
        s->staging = util_strdup(staging);
        s->attach = attach;
        r = ksim_record_put_stage(vm->o.root, vm->o.node, s);
        if (r == 0) {
            s->next = vm->stages;
            vm->stages = s;
        } else {
            ksim_stage_free(s);
        }
    }
    pthread_mutex_unlock(&vm->mu);
    return r;
}

static int stage(ksim_volumes *vm, const json_object *pod, const ksim_vol *v, driver_link *l,
                 const char *staging, const char *target, const ksim_map *pub_ctx, bool attach)
{
    int r = ensure_pub(vm, pod, v, target, staging, attach);
    if (r == 0)
        r = ensure_stage(vm, v, staging, attach);
    if (r == 0)
        r = ksim_mkdir_p(staging, 0750); /* the CO makes the staging directory */
    ksim_map secrets = {0};
    if (r == 0)
        r = read_secret(vm, v->stage_secret_ns, v->stage_secret_name, &secrets);
    Csi__V1__NodeStageVolumeRequest *req = NULL;
    if (r == 0)
        r = ksim_stage_request(v, staging, pub_ctx, &secrets, l->snmw, &req);
    ksim_map_clear(&secrets);
    if (r == 0)
        r = node_call(vm, l, "NodeStageVolume", &req->base,
                      &csi__v1__node_stage_volume_response__descriptor);
    ksim_request_free(req);
    if (r < 0)
        return r;
    pthread_mutex_lock(&vm->mu);
    ksim_stage *s = find_stage(vm, v->unique);
    if (s)
        s->done = true;
    pthread_mutex_unlock(&vm->mu);
    obs_info("NodeStageVolume: %s staged at %s", v->unique, staging);
    return 0;
}

static int publish(ksim_volumes *vm, const json_object *pod, const ksim_vol *v, driver_link *l,
                   const char *staging, const char *target, const ksim_map *pub_ctx,
                   const ksim_driver_info *di, bool attach)
{
    int r = ensure_pub(vm, pod, v, target, staging, attach);
    /* The SP makes the target; its parent is the CO's. */
    char *parent = util_strdup(target);
    char *slash = strrchr(parent, '/');
    if (slash)
        *slash = '\0';
    if (r == 0)
        r = ksim_mkdir_p(parent, 0750);
    free(parent);
    ksim_map secrets = {0}, vol_ctx = {0};
    if (r == 0)
        r = read_secret(vm, v->pub_secret_ns, v->pub_secret_name, &secrets);
    ksim_publish_volume_context(v, pod, di, &vol_ctx);
    Csi__V1__NodePublishVolumeRequest *req = NULL;
    if (r == 0)
        r = ksim_publish_request(v, staging, target, pub_ctx, &secrets, &vol_ctx, l->snmw, &req);
    ksim_map_clear(&secrets);
    ksim_map_clear(&vol_ctx);
    if (r == 0)
        r = node_call(vm, l, "NodePublishVolume", &req->base,
                      &csi__v1__node_publish_volume_response__descriptor);
    ksim_request_free(req);
    if (r < 0)
        return r;
    pthread_mutex_lock(&vm->mu);
    ksim_pub *p = find_pub(vm, kobj_uid(pod), v->name);
    if (p)
        p->done = true;
    pthread_mutex_unlock(&vm->mu);
    obs_info("NodePublishVolume: %s published at %s for pod %s/%s", v->unique, target,
             kobj_namespace(pod), kobj_name(pod));
    return 0;
}

/* ---- node expansion ----------------------------------------------------------------- */

/* A merge patch of the claim's status (the patch text is taken). */
static int patch_claim(ksim_volumes *vm, const json_object *pvc, char *patch, const char *what)
{
    char *path = kube_path(&KUBE_PVC, kobj_namespace(pvc), kobj_name(pvc), "status");
    kube_resp r = {.skip_body = true};
    int rc = kube_patch(vm->kube, path, KUBE_PATCH_MERGE, patch, &r);
    if (rc < 0)
        rc = util_err_set(rc, "claim %s/%s: %s: %d %s", kobj_namespace(pvc), kobj_name(pvc), what,
                          r.code, r.message);
    kube_resp_clear(&r);
    free(path);
    free(patch);
    return rc;
}

/* NodeExpandVolume to rs->new_bytes; on a final failure of a claim with
 * the recovery statuses, the NodeResizeError (and maybe infeasible)
 * record on the claim. */
static int node_expand(ksim_volumes *vm, const ksim_vol *v, driver_link *l, const char *staging,
                       const char *target, const json_object *pvc, const ksim_resize *rs)
{
    ksim_map secrets = {0};
    int r = read_secret(vm, v->expand_secret_ns, v->expand_secret_name, &secrets);
    Csi__V1__NodeExpandVolumeRequest *req = NULL;
    if (r == 0)
        r = ksim_expand_request(v, target, staging, rs->new_bytes, &secrets, l->snmw, &req);
    ksim_map_clear(&secrets);
    int code = CSI_OK;
    if (r == 0)
        r = node_call_code(vm, l, "NodeExpandVolume", &req->base,
                           &csi__v1__node_expand_volume_response__descriptor, &code);
    ksim_request_free(req);
    if (r == 0 || !rs->recover)
        return r;
    char *err = util_strdup(util_err_last());
    char *patch = ksim_resize_failed_patch(pvc, code, err, time(NULL));
    if (patch && patch_claim(vm, pvc, patch, "mark node expansion failed") < 0)
        obs_warn("%s", util_err_last());
    util_err_set(r, "%s", err);
    free(err);
    return r;
}

/* Grows a published volume on the node as its claim asks: marks the
 * claim's node expansion in progress (recovery statuses), calls
 * NodeExpandVolume, then finishes the claim's resize. Each step reads the
 * claim and its PV afresh, so a retry resumes where the last one ended. */
static int expand(ksim_volumes *vm, const json_object *pod, const ksim_vol *v, driver_link *l,
                  const char *staging, const char *target)
{
    int r = 0;
    bool done = false;
    /* Mark, expand: a pass each; a third is a bug's guard, not a retry. */
    for (int pass = 0; r == 0 && !done && pass < 3; pass++) {
        json_object *pvc = ksim_vm_get_obj(vm, &KUBE_PVC, kobj_namespace(pod), v->claim, &r);
        json_object *pv =
            r == 0 && pvc ? ksim_vm_get_obj(vm, &KUBE_PV, NULL, v->spec_name, &r) : NULL;
        ksim_resize rs = {.step = KSIM_RESIZE_NONE};
        if (pvc && pv)
            ksim_resize_plan(pvc, pv, v->readonly, &rs);
        if (r < 0 || rs.step == KSIM_RESIZE_NONE) {
            done = true; /* nothing (more) for this node to do, or a failed read */
        } else if (rs.step == KSIM_RESIZE_MARK) {
            r = patch_claim(vm, pvc, ksim_resize_in_progress_patch(pvc),
                            "mark node expansion in progress");
        } else {
            r = node_expand(vm, v, l, staging, target, pvc, &rs);
            if (r == 0)
                r = patch_claim(vm, pvc, ksim_resize_finished_patch(pvc, rs.new_size),
                                "mark file system resize finished");
            if (r == 0)
                obs_info("NodeExpandVolume: %s grown to %s at %s; claim %s/%s resized", v->unique,
                         rs.new_size, target, kobj_namespace(pod), v->claim);
            done = true;
        }
        json_object_put(pvc);
        json_object_put(pv);
    }
    return r;
}

/* The record facts of a volume for `uid` (under vm->mu). */
static void record_facts(ksim_volumes *vm, const char *uid, const char *vol_name,
                         const char *unique, const char *staging, ksim_facts *f)
{
    const ksim_pub *p = find_pub(vm, uid, vol_name);
    const ksim_stage *s = find_stage(vm, unique);
    f->published = p && p->done && !p->unpublished;
    f->staged = s && s->done && staging && strcmp(s->staging, staging) == 0;
}

int ksim_vm_setup_volume(ksim_volumes *vm, const json_object *pod, const ksim_vol *v,
                         const ksim_driver_info *di)
{
    const char *uid = kobj_uid(pod);
    char *staging = NULL, *target = NULL;
    int r = ksim_target_path(vm->o.root, uid, v, &target);
    if (r == 0 && v->kind == KSIM_VOL_PVC)
        r = ksim_staging_path(vm->o.root, v, &staging);
    if (r < 0) {
        free(target);
        return r;
    }
    driver_link l = {.driver = v->driver};
    ksim_map pub_ctx = {0};
    ksim_facts f = {.attach_required = di->attach_required && v->kind == KSIM_VOL_PVC,
                    .in_use_reported = true}; /* the pod's sync reported it first */
    vol_lock(vm, v->unique);
    /* One step per pass (report, stage, publish, expand); more passes than
     * steps is a bug's guard, not a retry. */
    bool finished = false;
    f.resize = v->resize && v->kind == KSIM_VOL_PVC;
    for (int pass = 0; r == 0 && !finished && pass < 6; pass++) {
        pthread_mutex_lock(&vm->mu);
        record_facts(vm, uid, v->name, v->unique, staging, &f);
        pthread_mutex_unlock(&vm->mu);
        f.driver_registered = (f.published && !f.resize) || link_registered(vm, &l);
        f.attached = f.attach_required && attached(vm, v->spec_name, &pub_ctx);
        bool mountable = !f.published && (!f.attach_required || f.attached);
        if (f.driver_registered && (mountable || (f.published && f.resize))) {
            r = link_caps(vm, &l);
            /* The kubelet stages only volumes of PVs; inline ones are published. */
            f.stage_cap = l.stage && v->kind == KSIM_VOL_PVC;
            f.expand_cap = l.expand;
        }
        if (r < 0)
            break;
        ksim_step step = ksim_next_step(&f);
        switch (step) {
        case KSIM_READY:
            finished = true;
            break;
        case KSIM_WAIT_DRIVER:
            obs_v(3, "%s: %s", v->unique, util_err_last());
            r = 1;
            break;
        case KSIM_WAIT_ATTACH:
            obs_v(3, "%s: waiting for its VolumeAttachment on node %s to be attached", v->unique,
                  vm->o.node);
            r = 1;
            break;
        case KSIM_REPORT_IN_USE:
            r = ksim_node_sync_in_use(vm->node);
            f.in_use_reported = r == 0;
            break;
        case KSIM_STAGE:
            r = stage(vm, pod, v, &l, staging, target, &pub_ctx, f.attach_required);
            break;
        case KSIM_PUBLISH:
            r = publish(vm, pod, v, &l, f.stage_cap ? staging : NULL, target, &pub_ctx, di,
                        f.attach_required);
            break;
        case KSIM_EXPAND:
            /* The kubelet hands a PV's volume its device (staging) path
             * whether or not the driver stages. */
            r = expand(vm, pod, v, &l, staging, target);
            f.resize = r != 0;
            break;
        default: /* teardown steps: never asked of a set up */
            r = util_err_set(-EINVAL, "%s: unexpected step %s", v->unique, ksim_step_name(step));
            break;
        }
    }
    if (r == 0 && !finished)
        r = util_err_set(-EAGAIN, "setting up %s did not settle", v->unique);
    vol_unlock(vm, v->unique);
    link_close(vm, &l);
    ksim_map_clear(&pub_ctx);
    free(staging);
    free(target);
    return r;
}

/* ---- tear down ----------------------------------------------------------------------- */

/* What a teardown pass reads of the records, copied out of the lists
 * (they may change while the driver is called). */
struct teardown_view {
    ksim_facts f;
    char *handle, *target, *stage_handle, *staging;
};

static void teardown_view_read(ksim_volumes *vm, const char *uid, const char *vol_name,
                               const char *unique, struct teardown_view *t)
{
    memset(t, 0, sizeof(*t));
    t->f.teardown = true;
    pthread_mutex_lock(&vm->mu);
    const ksim_pub *p = find_pub(vm, uid, vol_name);
    const ksim_stage *s = find_stage(vm, unique);
    if (p) {
        t->handle = util_strdup(p->handle);
        t->target = util_strdup(p->target);
    }
    if (s) {
        t->stage_handle = util_strdup(s->handle);
        t->staging = util_strdup(s->staging);
    }
    t->f.has_pub_record = p && !p->unpublished;
    t->f.has_stage_record = s != NULL;
    t->f.other_users = other_users(vm, p, unique);
    pthread_mutex_unlock(&vm->mu);
}

static void teardown_view_clear(struct teardown_view *t)
{
    free(t->handle);
    free(t->target);
    free(t->stage_handle);
    free(t->staging);
}

static int unpublish(ksim_volumes *vm, driver_link *l, const char *uid, const char *vol_name,
                     const char *unique, const struct teardown_view *t)
{
    Csi__V1__NodeUnpublishVolumeRequest req = CSI__V1__NODE_UNPUBLISH_VOLUME_REQUEST__INIT;
    req.volume_id = t->handle;
    req.target_path = t->target;
    int r = node_call(vm, l, "NodeUnpublishVolume", &req.base,
                      &csi__v1__node_unpublish_volume_response__descriptor);
    if (r < 0)
        return r;
    obs_info("NodeUnpublishVolume: %s unpublished from %s", unique, t->target);
    pthread_mutex_lock(&vm->mu);
    ksim_pub *p = find_pub(vm, uid, vol_name);
    if (p)
        p->unpublished = true;
    pthread_mutex_unlock(&vm->mu);
    return 0;
}

static int unstage(ksim_volumes *vm, driver_link *l, const char *unique,
                   const struct teardown_view *t)
{
    Csi__V1__NodeUnstageVolumeRequest req = CSI__V1__NODE_UNSTAGE_VOLUME_REQUEST__INIT;
    req.volume_id = t->stage_handle;
    req.staging_target_path = t->staging;
    int r = node_call(vm, l, "NodeUnstageVolume", &req.base,
                      &csi__v1__node_unstage_volume_response__descriptor);
    if (r < 0)
        return r;
    obs_info("NodeUnstageVolume: %s unstaged from %s", unique, t->staging);
    pthread_mutex_lock(&vm->mu);
    ksim_stage *s = find_stage(vm, unique);
    if (s) {
        ksim_record_drop_stage(vm->o.root, s);
        unlink_stage(vm, s);
        ksim_stage_free(s);
    }
    pthread_mutex_unlock(&vm->mu);
    return 0;
}

/* The publication record goes last: until here a restart finds it. */
static void forget_pub(ksim_volumes *vm, const char *uid, const char *vol_name)
{
    pthread_mutex_lock(&vm->mu);
    ksim_pub *p = find_pub(vm, uid, vol_name);
    if (p) {
        ksim_record_drop_pub(vm->o.root, p);
        unlink_pub(vm, p);
        ksim_pub_free(p);
    }
    pthread_mutex_unlock(&vm->mu);
}

int ksim_vm_teardown_pub(ksim_volumes *vm, const char *uid, const char *vol_name)
{
    pthread_mutex_lock(&vm->mu);
    const ksim_pub *p = find_pub(vm, uid, vol_name);
    char *unique = p ? util_strdup(p->unique) : NULL;
    char *driver = p ? util_strdup(p->driver) : NULL;
    pthread_mutex_unlock(&vm->mu);
    if (!unique)
        return 0;
    driver_link l = {.driver = driver};
    int r = 0;
    bool finished = false;
    vol_lock(vm, unique);
    /* Each pass does one step: unpublish, unstage, forget; a few more
     * passes than steps is a bug's guard, not a retry. */
    for (int pass = 0; r == 0 && !finished && pass < 6; pass++) {
        struct teardown_view t;
        teardown_view_read(vm, uid, vol_name, unique, &t);
        bool work = t.f.has_pub_record || (t.f.has_stage_record && !t.f.other_users);
        t.f.driver_registered = work && link_registered(vm, &l);
        switch (ksim_next_step(&t.f)) {
        case KSIM_UNPUBLISH:
            r = unpublish(vm, &l, uid, vol_name, unique, &t);
            break;
        case KSIM_UNSTAGE:
            r = unstage(vm, &l, unique, &t);
            break;
        case KSIM_WAIT_DRIVER:
            r = util_err_set(-ENOENT, "cannot tear down %s: %s", unique, util_err_last());
            break;
        default: /* KSIM_GONE */
            forget_pub(vm, uid, vol_name);
            finished = true;
            break;
        }
        teardown_view_clear(&t);
    }
    vol_unlock(vm, unique);
    link_close(vm, &l);
    free(unique);
    free(driver);
    if (r == 0 && !finished)
        r = util_err_set(-EAGAIN, "tearing down %s did not settle", vol_name);
    return r;
}
