/*
 * The volume manager: the pods bound to this node (an informer with the
 * field selector spec.nodeName=<node>) get their CSI volumes, and the
 * volumes go again when the pods do.
 *
 * Informer events only queue pod keys ("ns/name"); a change of this
 * node's VolumeAttachments, of a CSIDriver or of the registered drivers
 * queues every pod. sync(key) is level-triggered:
 *
 *   - publications recorded for an older pod of that name, or for a pod
 *     that is gone, are torn down (the pod vanished);
 *   - a pod with a deletionTimestamp has its volumes torn down, its
 *     volumesInUse entries dropped, and is then deleted with grace period
 *     0 and a precondition on its uid, as the kubelet finishes a
 *     terminating pod; a pod in a terminal phase only loses its volumes;
 *   - otherwise its volumes are read (PVC, PV, CSIDriver), the attachable
 *     ones reported in volumesInUse first, each driven to published
 *     (volume_ops.c), and the pod made Running and Ready once all are.
 *     Pods without CSI volumes are Running at once. A published claim
 *     whose resize waits for the node gets NodeExpandVolume (volume_ops.c);
 *     every pod is looked at again each --sync-frequency (the informer's
 *     resync), as the kubelet re-reads a running pod's claims.
 *
 * Waiting (a claim not bound, a driver not registered, an attachment not
 * attached) comes back after a second; failures come back with
 * exponential backoff (500 ms doubling to a minute) and are logged.
 *
 * Data: the records (publications, stagings) and the per-pod wants are
 * lists under one mutex; the informers cache this node's pods, this
 * node's VolumeAttachments and the CSIDrivers.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kubelet-sim/volumes.h"
#include "obs/obs.h"

#define WAIT_AGAIN    UTIL_SECOND
#define BACKOFF_START (500 * UTIL_MS)
#define BACKOFF_MAX   UTIL_MINUTE

/* ---- wants and volumesInUse ---------------------------------------------------------- */

static void want_free(struct ksim_want *w)
{
    if (!w)
        return;
    free(w->key);
    ksim_strv_free(w->unique, w->n);
    free(w);
}

/* Sets (n > 0) or drops the wants of `key`; takes `unique`. True when
 * `key` wanted volumes before. */
static bool want_set(ksim_volumes *vm, const char *key, char **unique, size_t n)
{
    pthread_mutex_lock(&vm->mu);
    struct ksim_want **wp = &vm->wants;
    while (*wp && strcmp((*wp)->key, key) != 0)
        wp = &(*wp)->next;
    bool had = *wp != NULL;
    if (*wp) {
        struct ksim_want *old = *wp;
        *wp = old->next;
        want_free(old);
    }
    if (n > 0) {
        struct ksim_want *w = util_calloc(1, sizeof(*w));
        w->key = util_strdup(key);
        w->unique = unique;
        w->n = n;
        w->next = vm->wants;
        vm->wants = w;
        unique = NULL;
    }
    pthread_mutex_unlock(&vm->mu);
    ksim_strv_free(unique, n);
    return had;
}

/* Brings volumesInUse up to date. A pod whose volumes need no attaching
 * does not wait for it: the Node's status may be out of reach (RBAC,
 * --register-node=false without a Node) and nothing of its depends on it. */
static int report_in_use(ksim_volumes *vm, const char *key, bool needed)
{
    int r = ksim_node_sync_in_use(vm->node);
    if (r == 0)
        return 0;
    if (!needed) {
        obs_v(2, "pod %s: reporting volumes in use: %s", key, util_err_last());
        return 0;
    }
    obs_error("pod %s: reporting volumes in use: %s (will retry)", key, util_err_last());
    return r;
}

/* Appends a copy of `s` to a growing list. */
static void strv_push(char ***v, size_t *n, size_t *cap, const char *s)
{
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        char **grown = realloc(*v, *cap * sizeof(char *));
        if (!grown)
            abort();
        *v = grown;
    }
    (*v)[(*n)++] = util_strdup(s);
}

void ksim_volumes_in_use(void *ud, char ***v, size_t *n)
{
    ksim_volumes *vm = ud;
    char **out = NULL;
    size_t k = 0, cap = 0;
    pthread_mutex_lock(&vm->mu);
    /* What pods want, and what is published or staged: an attachable
     * volume stays in use until it is unstaged. */
    for (const struct ksim_want *w = vm->wants; w; w = w->next)
        for (size_t i = 0; i < w->n; i++)
            strv_push(&out, &k, &cap, w->unique[i]);
    for (const ksim_pub *p = vm->pubs; p; p = p->next)
        if (p->attach)
            strv_push(&out, &k, &cap, p->unique);
    for (const ksim_stage *s = vm->stages; s; s = s->next)
        if (s->attach)
            strv_push(&out, &k, &cap, s->unique);
    pthread_mutex_unlock(&vm->mu);
    ksim_strv_sort_unique(out, &k);
    *v = out;
    *n = k;
}

/* ---- queueing ------------------------------------------------------------------------ */

static void queue_obj(void *ud, json_object *obj)
{
    ksim_volumes *vm = ud;
    char *key = kube_key(obj);
    wq_add(vm->q, key);
    free(key);
}

static void pod_update(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    queue_obj(ud, obj);
}

void ksim_volumes_kick(void *ud)
{
    ksim_volumes *vm = ud;
    if (vm->pods)
        kube_informer_each(vm->pods, queue_obj, vm);
    /* Pods that are gone but left publications behind. */
    pthread_mutex_lock(&vm->mu);
    for (const ksim_pub *p = vm->pubs; p; p = p->next) {
        char *key = util_asprintf("%s/%s", p->pod_ns, p->pod_name);
        wq_add(vm->q, key);
        free(key);
    }
    pthread_mutex_unlock(&vm->mu);
}

static void kick_add(void *ud, json_object *obj)
{
    (void)obj;
    ksim_volumes_kick(ud);
}

static void kick_update(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    (void)obj;
    ksim_volumes_kick(ud);
}

/* Only this node's attachments are cached. */
static bool va_ours(void *ud, const json_object *va)
{
    const ksim_volumes *vm = ud;
    const char *node = kobj_path_str(va, "spec.nodeName");
    return node && strcmp(node, vm->o.node) == 0;
}

/* ---- pods ---------------------------------------------------------------------------- */

/* Tears down the publications recorded under `ns`/`name`: those of other
 * uids than `keep_uid` (NULL: all) or, with `only`, those of `keep_uid`
 * alone. *attach (may be NULL) is set when one of them was attachable. */
static int teardown_matching(ksim_volumes *vm, const char *ns, const char *name,
                             const char *keep_uid, bool only, bool *attach)
{
    size_t n = 0, cap = 0, n2 = 0, cap2 = 0;
    char **uids = NULL, **vols = NULL;
    pthread_mutex_lock(&vm->mu);
    for (const ksim_pub *p = vm->pubs; p; p = p->next) {
        if (strcmp(p->pod_ns, ns) != 0 || strcmp(p->pod_name, name) != 0)
            continue;
        bool same = keep_uid && strcmp(p->pod_uid, keep_uid) == 0;
        if (same != only)
            continue;
        strv_push(&uids, &n, &cap, p->pod_uid);
        strv_push(&vols, &n2, &cap2, p->vol_name);
        if (attach && p->attach)
            *attach = true;
    }
    pthread_mutex_unlock(&vm->mu);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        int r = ksim_vm_teardown_pub(vm, uids[i], vols[i]);
        if (r < 0) {
            obs_error("pod %s/%s (%s), volume %s: %s (will retry)", ns, name, uids[i], vols[i],
                      util_err_last());
            if (rc == 0)
                rc = r;
        }
    }
    ksim_strv_free(uids, n);
    ksim_strv_free(vols, n);
    return rc;
}

/* True when every claim or csi volume of `pod` is published: nothing to
 * read from the API. */
static bool all_published(ksim_volumes *vm, const json_object *pod, const ksim_podvol *pv, size_t n)
{
    const char *uid = kobj_uid(pod);
    bool all = true;
    pthread_mutex_lock(&vm->mu);
    for (size_t i = 0; i < n && all; i++) {
        const ksim_pub *p = vm->pubs;
        while (p && !(strcmp(p->pod_uid, uid) == 0 && strcmp(p->vol_name, pv[i].name) == 0))
            p = p->next;
        all = p && p->done && !p->unpublished;
    }
    pthread_mutex_unlock(&vm->mu);
    return all;
}

json_object *ksim_vm_get_obj(ksim_volumes *vm, const kube_resource *res, const char *ns,
                             const char *name, int *rc)
{
    char *path = kube_path(res, ns, name, NULL);
    kube_resp r = {0};
    *rc = kube_get(vm->kube, path, &r);
    free(path);
    json_object *o = NULL;
    if (*rc == 0)
        o = json_object_get(r.body);
    else if (kube_is_not_found(&r))
        *rc = 0;
    else
        *rc = util_err_set(*rc, "cannot read %s %s: %d %s", res->kind, name, r.code, r.message);
    kube_resp_clear(&r);
    return o;
}

/* One pod volume as a CSI volume: 0 (in *v), KSIM_NOT_CSI, -EAGAIN to
 * wait, or another -errno. */
static int resolve(ksim_volumes *vm, const json_object *pod, const ksim_podvol *pv, ksim_vol *v,
                   ksim_driver_info *di)
{
    int r = 0;
    if (pv->kind == KSIM_VOL_INLINE) {
        r = ksim_vol_inline(pod, pv, v);
    } else {
        json_object *pvc = ksim_vm_get_obj(vm, &KUBE_PVC, kobj_namespace(pod), pv->claim, &r);
        const char *vn = kobj_path_str(pvc, "spec.volumeName");
        json_object *pvo = r == 0 && vn && *vn ? ksim_vm_get_obj(vm, &KUBE_PV, NULL, vn, &r) : NULL;
        if (r == 0)
            r = ksim_vol_from_claim(pv, pvc, pvo, v);
        json_object_put(pvc);
        json_object_put(pvo);
    }
    if (r != 0)
        return r;
    json_object *d = kube_informer_get(vm->drivers, NULL, v->driver);
    ksim_driver_info_of(d, di);
    json_object_put(d);
    if (v->kind == KSIM_VOL_INLINE && !di->ephemeral) {
        r = util_err_set(-EINVAL, "volume %s: CSIDriver %s does not allow Ephemeral volumes",
                         v->name, v->driver);
        ksim_vol_clear(v);
    }
    return r;
}

static int make_running(ksim_volumes *vm, const json_object *pod)
{
    char *patch = ksim_pod_running_patch(pod, time(NULL));
    if (!patch)
        return 0;
    char *path = kube_path(&KUBE_POD, kobj_namespace(pod), kobj_name(pod), "status");
    kube_resp r = {.skip_body = true};
    int rc = kube_patch(vm->kube, path, KUBE_PATCH_STRATEGIC, patch, &r);
    if (rc == 0)
        obs_info("pod %s/%s is Running", kobj_namespace(pod), kobj_name(pod));
    else if (kube_is_not_found(&r))
        rc = 0; /* gone: its delete event follows */
    else
        rc = util_err_set(rc, "pod %s/%s status: %d %s", kobj_namespace(pod), kobj_name(pod),
                          r.code, r.message);
    if (rc < 0)
        obs_error("%s (will retry)", util_err_last());
    kube_resp_clear(&r);
    free(path);
    free(patch);
    return rc;
}

/* The pod's volumes set up; 0 when all are published, 1 to wait. */
static int setup_pod(ksim_volumes *vm, const char *key, const json_object *pod)
{
    ksim_podvol *pv = NULL;
    size_t n = 0;
    int rc = ksim_pod_volumes(pod, &pv, &n);
    if (rc < 0) {
        obs_error("pod %s: %s (will retry)", key, util_err_last());
        return rc;
    }
    /* Nothing to read from the API for a pod whose volumes are all
     * published, unless one is a claim: its resize is looked at. */
    bool claims = false;
    for (size_t i = 0; i < n; i++)
        claims = claims || pv[i].kind == KSIM_VOL_PVC;
    if (!claims && all_published(vm, pod, pv, n)) {
        ksim_podvols_free(pv, n);
        return make_running(vm, pod);
    }
    ksim_vol *vols = util_calloc(n ? n : 1, sizeof(*vols));
    ksim_driver_info *dis = util_calloc(n ? n : 1, sizeof(*dis));
    bool *use = util_calloc(n ? n : 1, sizeof(bool));
    char **attachable = util_calloc(n ? n : 1, sizeof(char *));
    size_t n_att = 0;
    bool wait = false;
    for (size_t i = 0; i < n; i++) {
        int r = resolve(vm, pod, &pv[i], &vols[i], &dis[i]);
        if (r == -EAGAIN) {
            obs_v(3, "pod %s: %s", key, util_err_last());
            wait = true;
        } else if (r < 0) {
            obs_error("pod %s: %s (will retry)", key, util_err_last());
            rc = rc < 0 ? rc : r;
        } else if (r == 0) {
            use[i] = true;
            if (dis[i].attach_required && vols[i].kind == KSIM_VOL_PVC)
                attachable[n_att++] = util_strdup(vols[i].unique);
        }
    }
    /* Reported in use before anything waits for attachment or mounts. */
    bool needed = n_att > 0;
    want_set(vm, key, attachable, n_att);
    int r = report_in_use(vm, key, needed);
    if (r < 0)
        rc = rc < 0 ? rc : r;
    for (size_t i = 0; i < n && r == 0; i++) {
        if (!use[i])
            continue;
        int vr = ksim_vm_setup_volume(vm, pod, &vols[i], &dis[i]);
        if (vr > 0)
            wait = true;
        if (vr < 0) {
            obs_error("pod %s, volume %s: %s (will retry)", key, vols[i].name, util_err_last());
            rc = rc < 0 ? rc : vr;
        }
    }
    for (size_t i = 0; i < n; i++)
        ksim_vol_clear(&vols[i]);
    free(vols);
    free(dis);
    free(use);
    ksim_podvols_free(pv, n);
    if (rc < 0)
        return rc;
    if (wait)
        return 1;
    return make_running(vm, pod);
}

static int delete_pod(ksim_volumes *vm, const json_object *pod)
{
    char *opts = ksim_pod_delete_options(kobj_uid(pod));
    char *path = kube_path(&KUBE_POD, kobj_namespace(pod), kobj_name(pod), NULL);
    kube_resp r = {.skip_body = true};
    int rc = kube_delete(vm->kube, path, opts, &r);
    if (rc == 0)
        obs_info("pod %s/%s (%s) deleted: its volumes are torn down", kobj_namespace(pod),
                 kobj_name(pod), kobj_uid(pod));
    else if (kube_is_not_found(&r) || kube_is_conflict(&r))
        rc = 0; /* gone, or another pod of that name: not ours to delete */
    else
        rc = util_err_set(rc, "cannot delete pod %s/%s: %d %s", kobj_namespace(pod), kobj_name(pod),
                          r.code, r.message);
    if (rc < 0)
        obs_error("%s (will retry)", util_err_last());
    kube_resp_clear(&r);
    free(path);
    free(opts);
    return rc;
}

static int sync_pod(ksim_volumes *vm, const char *key)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = strndup(key, (size_t)(slash - key));
    if (!ns)
        abort();
    const char *name = slash + 1;
    json_object *pod = kube_informer_get(vm->pods, ns, name);
    const char *uid = kobj_uid(pod);
    /* Whatever an older pod of this name (or a vanished one) left. */
    bool attach = false;
    int rc = teardown_matching(vm, ns, name, uid, false, &attach);
    if (rc == 0 && !pod) {
        attach = want_set(vm, key, NULL, 0) || attach;
        rc = report_in_use(vm, key, attach);
    } else if (rc == 0) {
        ksim_pod_action act = ksim_pod_action_of(pod);
        if (act == KSIM_POD_SETUP) {
            rc = setup_pod(vm, key, pod);
        } else {
            /* volumesInUse loses the pod's volumes before the pod goes. */
            attach = want_set(vm, key, NULL, 0) || attach;
            rc = teardown_matching(vm, ns, name, uid, true, &attach);
            if (rc == 0)
                rc = report_in_use(vm, key, attach);
            if (rc == 0 && act == KSIM_POD_FINISH)
                rc = delete_pod(vm, pod);
        }
    }
    json_object_put(pod);
    free(ns);
    return rc;
}

static int sync_key(void *ud, const char *key)
{
    ksim_volumes *vm = ud;
    /* Decisions need this node's pods, attachments and drivers as they are. */
    if (!kube_informer_has_synced(vm->pods) || !kube_informer_has_synced(vm->vas) ||
        !kube_informer_has_synced(vm->drivers))
        return 1;
    return sync_pod(vm, key);
}

/* ---- life ---------------------------------------------------------------------------- */

int ksim_volumes_new(kube_client *kube, ksim_plugins *plugins, ksim_node *nd,
                     const ksim_volumes_opts *o, ksim_volumes **out)
{
    ksim_volumes *vm = util_calloc(1, sizeof(*vm));
    vm->kube = kube;
    vm->plugins = plugins;
    vm->node = nd;
    vm->o = *o;
    if (vm->o.workers < 1)
        vm->o.workers = 4;
    pthread_mutex_init(&vm->mu, NULL);
    pthread_cond_init(&vm->idle, NULL);
    wq_opts qo = {.name = "pods", .base_delay = BACKOFF_START, .max_delay = BACKOFF_MAX};
    vm->q = wq_new(&qo);
    ksim_records_load(vm->o.root, vm->o.node, &vm->pubs, &vm->stages);
    *out = vm;
    return 0;
}

int ksim_volumes_start(ksim_volumes *vm)
{
    char *sel = util_asprintf("spec.nodeName=%s", vm->o.node);
    kube_informer_opts po = {.res = &KUBE_POD,
                             .field_selector = sel,
                             .resync = vm->o.sync_frequency,
                             .handlers = {.on_add = queue_obj,
                                          .on_update = pod_update,
                                          .on_delete = queue_obj,
                                          .ud = vm,
                                          .old_unused = true}};
    int rc = kube_informer_new(vm->kube, &po, &vm->pods);
    free(sel);
    kube_informer_opts vo = {.res = &KUBE_VOLUMEATTACHMENT,
                             .keep = va_ours,
                             .transform_ud = vm,
                             .handlers = {.on_add = kick_add,
                                          .on_update = kick_update,
                                          .on_delete = kick_add,
                                          .ud = vm,
                                          .old_unused = true}};
    if (rc == 0)
        rc = kube_informer_new(vm->kube, &vo, &vm->vas);
    kube_informer_opts dopt = {.res = &KUBE_CSIDRIVER,
                               .handlers = {.on_add = kick_add,
                                            .on_update = kick_update,
                                            .on_delete = kick_add,
                                            .ud = vm,
                                            .old_unused = true}};
    if (rc == 0)
        rc = kube_informer_new(vm->kube, &dopt, &vm->drivers);
    if (rc == 0)
        rc = kube_informer_start(vm->pods);
    if (rc == 0)
        rc = kube_informer_start(vm->vas);
    if (rc == 0)
        rc = kube_informer_start(vm->drivers);
    wq_pool_opts wo = {.max_workers = vm->o.workers,
                       .min_workers = 1,
                       .slow_delay = WAIT_AGAIN,
                       .sync = sync_key,
                       .ud = vm};
    if (rc == 0)
        rc = wq_pool_start(vm->q, &wo);
    vm->pool_started = rc == 0;
    /* What a restart left behind is looked at first. */
    if (rc == 0)
        ksim_volumes_kick(vm);
    return rc;
}

void ksim_volumes_free(ksim_volumes *vm)
{
    if (!vm)
        return;
    wq_shutdown(vm->q, false);
    if (vm->pool_started)
        wq_pool_join(vm->q);
    kube_informer_free(vm->pods);
    kube_informer_free(vm->vas);
    kube_informer_free(vm->drivers);
    wq_free(vm->q);
    ksim_vm_close_conns(vm);
    while (vm->pubs) {
        ksim_pub *p = vm->pubs;
        vm->pubs = p->next;
        ksim_pub_free(p);
    }
    while (vm->stages) {
        ksim_stage *s = vm->stages;
        vm->stages = s->next;
        ksim_stage_free(s);
    }
    while (vm->wants) {
        struct ksim_want *w = vm->wants;
        vm->wants = w->next;
        want_free(w);
    }
    while (vm->busy) {
        struct ksim_busy *b = vm->busy;
        vm->busy = b->next;
        free(b->unique);
        free(b);
    }
    pthread_cond_destroy(&vm->idle);
    pthread_mutex_destroy(&vm->mu);
    free(vm);
}
