/*
 * The provisioner's controllers: claims (PVC -> CreateVolume -> PV,
 * ctrl_claims.c, with data sources in ctrl_sources.c and --node-deployment
 * in ctrl_node.c) and volumes (released PV -> DeleteVolume -> PV removed,
 * ctrl_volumes.c). This file holds the finalizer helpers they share and the
 * wiring: informers, their filters, queues and workers.
 *
 * Informer events only queue keys ("namespace/name" for claims, the PV name
 * for volumes); workers run ctrl_sync_claim / ctrl_sync_volume, which read the caches,
 * take one step and are safe to rerun after a crash at any line:
 *
 *   - Before its first CreateVolume a claim's intent is written to the
 *     provisioner's intent record (intent.c: one Lease, one write for many
 *     claims): the intent to create a volume lives in the API, not in
 *     memory. Its entry goes once the PV exists; if the claim is deleted
 *     meanwhile, the entry alone lets the same CreateVolume (same name, so
 *     idempotent) be repeated to learn the volume id, and DeleteVolume
 *     removes it. A restart therefore never leaks a volume (upstream #486),
 *     and the claim itself is never written. Claims that still carry the
 *     finalizer PROV_FINALIZER_IN_PROGRESS of an older version are finished
 *     or cleaned up as before, then released.
 *   - Finalizers are removed with a JSON patch test+remove on the exact list
 *     entry, never a merge patch built from a stale cache (upstream #1217).
 */
#include "ctrl_internal.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- finalizers ----------------------------------------------------------------- */

/* Adds `fin`, conditional on the resourceVersion we decided on. */
int ctrl_add_finalizer(prov_ctrl *c, const char *path, const json_object *obj, const char *fin)
{
    char *patch = kobj_patch_add_finalizer(obj, fin, true);
    if (!patch)
        return util_err_set(-EINVAL, "adding finalizer %s to %s: malformed metadata", fin, path);
    kube_resp r = {.skip_body = true};
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_JSON, patch, &r);
    if (rc < 0)
        obs_v(2, "adding finalizer %s to %s: %s", fin, path, r.message);
    kube_resp_clear(&r);
    free(patch);
    return rc;
}

/* ctrl_add_finalizer unless it is there already. */
int ctrl_add_finalizer_idempotent(prov_ctrl *c, const char *path, const json_object *obj,
                                  const char *fin)
{
    return kobj_finalizer_index(obj, fin) >= 0 ? 0 : ctrl_add_finalizer(c, path, obj, fin);
}

static int remove_at(prov_ctrl *c, const char *path, int i, const char *fin, kube_resp *r)
{
    char *patch = kobj_patch_remove_finalizer_at(i, fin);
    if (!patch)
        return -EINVAL;
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_JSON, patch, r);
    free(patch);
    return rc;
}

/*
 * Removes `fin` with test+remove on its exact entry. When the cached object
 * was stale (the test fails), the live object decides: done if the
 * finalizer is gone, else one more try at its current index.
 */
int ctrl_remove_finalizer(prov_ctrl *c, const kube_resource *res, const char *path,
                          const json_object *obj, const char *fin)
{
    int i = kobj_finalizer_index(obj, fin);
    if (i < 0)
        return 0;
    kube_resp r = {.skip_body = true};
    int rc = remove_at(c, path, i, fin, &r);
    if (rc < 0 && r.code == 422) {
        kube_resp_clear(&r);
        /* A garbled answer proves nothing: its finalizers of the wrong
         * type would read as "already removed" (an error, retried). */
        rc = kube_get_object(c->o.kube, res, path, kobj_name(obj), &r);
        if (rc == 0) {
            i = kobj_finalizer_index(r.body, fin);
            kube_resp_clear(&r);
            rc = i < 0 ? 0 : remove_at(c, path, i, fin, &r);
        }
    }
    if (rc < 0 && kube_is_not_found(&r))
        rc = 0;
    if (rc < 0)
        obs_v(2, "removing finalizer %s from %s: %s", fin, path, r.message);
    kube_resp_clear(&r);
    return rc;
}

/* Adds or drops `uid` in one of the uid sets guarded by done_mu. */
void ctrl_uid_mark(prov_ctrl *c, struct lh_table *set, const char *uid, bool on)
{
    if (!uid)
        return;
    pthread_mutex_lock(&c->done_mu);
    if (!on)
        lh_table_delete(set, uid);
    else if (!lh_table_lookup_entry(set, uid))
        lh_table_insert(set, util_strdup(uid), NULL);
    pthread_mutex_unlock(&c->done_mu);
}

bool ctrl_uid_marked(prov_ctrl *c, struct lh_table *set, const char *uid)
{
    if (!uid)
        return false;
    pthread_mutex_lock(&c->done_mu);
    bool yes = lh_table_lookup_entry(set, uid) != NULL;
    pthread_mutex_unlock(&c->done_mu);
    return yes;
}

/* Removes the claim's in-progress finalizer and remembers that we did. */
int ctrl_release_claim(prov_ctrl *c, const char *path, const json_object *pvc)
{
    int rc = ctrl_remove_finalizer(c, &KUBE_PVC, path, pvc, PROV_FINALIZER_IN_PROGRESS);
    if (rc == 0)
        ctrl_uid_mark(c, c->released, kobj_uid(pvc), true);
    return rc;
}

/* True when the cached claim still shows a finalizer we already removed. */
bool ctrl_released_already(prov_ctrl *c, const json_object *pvc)
{
    return ctrl_uid_marked(c, c->released, kobj_uid(pvc));
}

/* ---- wiring ----------------------------------------------------------------------- */

static void claim_changed(void *ud, json_object *obj)
{
    prov_ctrl *c = ud;
    if (kobj_finalizer_index(obj, PROV_FINALIZER_IN_PROGRESS) < 0)
        ctrl_uid_mark(c, c->released, kobj_uid(obj), false);
    /* An intent entry of another uid under this key (a replaced claim) got
     * its sync queued when that claim went (claim_gone). */
    if (prov_claim_sync_idle(obj, c->cfg.driver_name) && !ctrl_intent_has(c, kobj_uid(obj)))
        return;
    char *key = kube_key(obj);
    wq_add(c->claims, key);
    free(key);
}

static void claim_updated(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    claim_changed(ud, obj);
}

/* Gone from the cache (deleted, or bound and no longer cached): nothing of
 * it needs remembering. */
static void claim_gone(void *ud, json_object *obj)
{
    prov_ctrl *c = ud;
    /* Marked: a worker of this process is creating, or created, the PV, and
     * finishes the entry itself (or retries the key when the create fails);
     * the binder often binds the claim before that worker gets the create's
     * answer. */
    bool in_hand = ctrl_uid_marked(c, c->provisioned, kobj_uid(obj));
    ctrl_uid_mark(c, c->released, kobj_uid(obj), false);
    ctrl_uid_mark(c, c->provisioned, kobj_uid(obj), false);
    ctrl_uid_mark(c, c->rescheduled, kobj_uid(obj), false);
    /* A claim deleted while its volume may exist: its entry must be
     * finished or undone. */
    if (!in_hand && ctrl_intent_has(c, kobj_uid(obj))) {
        char *key = kube_key(obj);
        wq_add(c->claims, key);
        free(key);
    }
}

/* A PV this process deleted (DeleteVolume done, the delete sent) whose
 * finalizer its worker is removing: that worker retries on its own if the
 * removal fails, so the deletion's own event needs no second sync. */
static bool volume_in_hand(prov_ctrl *c, const json_object *pv)
{
    const char *name = kobj_name(pv);
    if (!name || !kobj_deleting(pv) || kobj_finalizer_index(pv, PV_FINALIZER) < 0)
        return false;
    pthread_mutex_lock(&c->done_mu);
    bool yes = lh_table_lookup_entry(c->deleted, name) != NULL ||
               lh_table_lookup_entry(c->finalized, name) != NULL;
    pthread_mutex_unlock(&c->done_mu);
    return yes;
}

/*
 * A worker is woken only for a change its sync could act on: most PV events
 * (created, bound, finalizer gone) need nothing, and a wake-up costs more
 * than the check.
 */
static void volume_changed(void *ud, json_object *obj)
{
    prov_ctrl *c = ud;
    if (!prov_pv_sync_idle(obj, c->cfg.driver_name) && !volume_in_hand(c, obj))
        wq_add(c->volumes, kobj_name(obj));
    /* A claim of an older version's in-progress finalizer waits for its PV
     * to release it. A claim this process provisioned does not wait (its
     * own sync released it, or retries), and one no longer cached is bound
     * or gone. */
    json_object *ref = kobj_path(obj, "spec.claimRef");
    const char *ns = kobj_str(ref, "namespace"), *n = kobj_str(ref, "name");
    if (ns && n && !ctrl_uid_marked(c, c->provisioned, kobj_str(ref, "uid")) &&
        kube_informer_has(c->pvcs, ns, n)) {
        char *key = util_asprintf("%s/%s", ns, n);
        wq_add(c->claims, key);
        free(key);
    }
}

static void volume_updated(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    volume_changed(ud, obj);
}

static bool keep_pv(void *ud, const json_object *pv);

static void volume_deleted(void *ud, json_object *obj)
{
    prov_ctrl *c = ud;
    const char *name = kobj_name(obj);
    /* A volume that only left the cache (settled, keep_pv) still exists. */
    if (!name || !keep_pv(c, obj))
        return;
    pthread_mutex_lock(&c->done_mu);
    lh_table_delete(c->deleted, name);
    pthread_mutex_unlock(&c->done_mu);
    ctrl_uid_mark(c, c->finalized, name, false);
    /* A volume deleted before its claim was bound must be made again. */
    ctrl_uid_mark(c, c->provisioned, kobj_path_str(obj, "spec.claimRef.uid"), false);
}

static void free_key(struct lh_entry *e)
{
    free(lh_entry_k(e));
}

static void free_key_value(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free((void *)lh_entry_v(e));
}

static void slim_pvc(void *ud, json_object *obj)
{
    (void)ud;
    json_object *m = kobj_get(obj, "metadata"), *a = kobj_get(m, "annotations");
    kobj_del(m, "managedFields");
    kobj_del(a, "kubectl.kubernetes.io/last-applied-configuration");
    kobj_del(obj, "status");
}

/*
 * Claims worth caching: those waiting for a volume, and those carrying a
 * finalizer this provisioner removes. A bound claim is otherwise never read
 * from the cache (a clone source is fetched when it is not cached), and most
 * of a big cluster's claims are bound.
 */
static bool keep_pvc(void *ud, const json_object *pvc)
{
    (void)ud;
    const char *bound = kobj_path_str(pvc, "spec.volumeName");
    return !bound || !*bound || kobj_finalizer_index(pvc, PROV_FINALIZER_IN_PROGRESS) >= 0 ||
           kobj_finalizer_index(pvc, CLONE_FINALIZER) >= 0;
}

/*
 * Volumes worth caching: our driver's (the others are never ours to
 * delete), and of those only the ones with work ahead. A Bound volume that
 * already has the finalizer its reclaim policy wants waits for its claim to
 * go: the update to Released brings it back as an add. Most volumes of a
 * big cluster are such, so the cache stays small however many there are.
 */
static bool keep_pv(void *ud, const json_object *pv)
{
    const prov_ctrl *c = ud;
    json_object *spec = kobj_get(pv, "spec");
    const char *driver = kobj_path_str(spec, "csi.driver");
    if (!driver || strcmp(driver, c->cfg.driver_name) != 0)
        return false;
    const char *phase = kobj_path_str(pv, "status.phase");
    if (!phase || strcmp(phase, "Bound") != 0 || kobj_deleting(pv))
        return true;
    const char *policy = kobj_str(spec, "persistentVolumeReclaimPolicy");
    bool wants_fin = policy && strcmp(policy, "Delete") == 0;
    return wants_fin != (kobj_finalizer_index(pv, PV_FINALIZER) >= 0);
}

/* Drops every member of `o` not named in `keys` (NULL-ended). */
static void keep_only(json_object *o, const char *const *keys)
{
    if (!o || !json_object_is_type(o, json_type_object))
        return;
    const char *drop[64];
    size_t n = 0;
    json_object_object_foreach(o, k, v)
    {
        (void)v;
        bool keep = false;
        for (size_t i = 0; keys[i] && !keep; i++)
            keep = strcmp(k, keys[i]) == 0;
        if (!keep && n < sizeof(drop) / sizeof(drop[0]))
            drop[n++] = k;
    }
    for (size_t i = 0; i < n; i++)
        json_object_object_del(o, drop[i]);
}

/*
 * A PV keeps what the volume sync, the claim release, events about it and
 * node-local deletion read: a cached volume costs a few hundred bytes.
 */
static void slim_pv(void *ud, json_object *obj)
{
    (void)ud;
    static const char *const top[] = {"apiVersion", "kind", "metadata", "spec", "status", NULL};
    static const char *const m[] = {
        "name", "uid", "resourceVersion", "annotations", "finalizers", "deletionTimestamp", NULL};
    static const char *const ann[] = {ANN_PROVISIONED_BY, ANN_DELETE_SECRET_NAME,
                                      ANN_DELETE_SECRET_NS, NULL};
    static const char *const spec[] = {
        "capacity",         "claimRef",     "csi", "persistentVolumeReclaimPolicy",
        "storageClassName", "nodeAffinity", NULL};
    static const char *const ref[] = {"namespace", "name", "uid", NULL};
    static const char *const csi[] = {"driver", "volumeHandle", NULL};
    static const char *const status[] = {"phase", NULL};
    keep_only(obj, top);
    json_object *md = kobj_get(obj, "metadata"), *sp = kobj_get(obj, "spec");
    keep_only(md, m);
    keep_only(kobj_get(md, "annotations"), ann);
    keep_only(sp, spec);
    keep_only(kobj_get(sp, "claimRef"), ref);
    keep_only(kobj_get(sp, "csi"), csi);
    keep_only(kobj_get(obj, "status"), status);
}

static void slim_meta(void *ud, json_object *obj)
{
    (void)ud;
    kobj_del(kobj_get(obj, "metadata"), "managedFields");
}

/* A detached volume may now be deleted: look at its PV again. */
static void attachment_deleted(void *ud, json_object *va)
{
    prov_ctrl *c = ud;
    const char *pv = kobj_path_str(va, "spec.source.persistentVolumeName");
    if (pv)
        wq_add(c->volumes, pv);
}

static void va_by_pv(const json_object *obj, void (*add)(void *ctx, const char *key), void *ctx)
{
    const char *pv = kobj_path_str(obj, "spec.source.persistentVolumeName");
    if (pv)
        add(ctx, pv);
}

static int claim_work(void *ud, const char *key)
{
    return ctrl_sync_claim(ud, key);
}

static int volume_work(void *ud, const char *key)
{
    return ctrl_sync_volume(ud, key);
}

/* A burst is over: connections and completion queues opened for it are
 * closed (two of each stay for the next requests), and the hash tables it
 * grew shrink to what they hold now (json-c's never do on their own: 1,000
 * claims left five tables of 2,048 buckets), so none pins the allocator's
 * pages. */
static void ctrl_quiet(void *ud)
{
    prov_ctrl *c = ud;
    kube_client_trim(c->o.kube, 2);
    csi_conn_trim(c->o.csi, 2);
    pthread_mutex_lock(&c->done_mu);
    struct lh_table *sets[] = {c->deleted, c->released, c->rescheduled, c->provisioned,
                               c->finalized};
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++)
        kobj_table_shrink(sets[i], 64);
    pthread_mutex_unlock(&c->done_mu);
    ctrl_intent_trim(c);
    kube_informer *infs[] = {c->pvcs, c->pvs, c->classes, c->nodes, c->csinodes, c->vas};
    for (size_t i = 0; i < sizeof(infs) / sizeof(infs[0]); i++)
        kube_informer_trim(infs[i]);
}

static int informer(prov_ctrl *c, const kube_resource *res, void (*slim)(void *, json_object *),
                    bool (*keep)(void *, const json_object *), kube_handlers h, kube_informer **out)
{
    kube_informer_opts o = {
        .res = res, .transform = slim, .transform_ud = c, .keep = keep, .handlers = h};
    return kube_informer_new(c->o.kube, &o, out);
}

int prov_ctrl_start(const prov_ctrl_opts *opts, const prov_config *cfg, prov_ctrl **out)
{
    *out = NULL;
    prov_ctrl *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    c->cfg = *cfg;
    pthread_mutex_init(&c->done_mu, NULL);
    pthread_mutex_init(&c->sweep_mu, NULL);
    pthread_cond_init(&c->sweep_cv, NULL);
    c->deleted = lh_kchar_table_new(64, free_key);
    c->released = lh_kchar_table_new(64, free_key_value);
    c->rescheduled = lh_kchar_table_new(64, free_key_value);
    c->provisioned = lh_kchar_table_new(64, free_key_value);
    c->finalized = lh_kchar_table_new(64, free_key_value);
    if (opts->node.name) {
        prov_node_local_objects(opts->node.name, cfg->driver_name, opts->node.node_id,
                                opts->node.topology, &c->local_node, &c->local_csinode);
        c->local_labels = prov_node_labels(opts->node.topology);
        c->owning = lh_kchar_table_new(64, ctrl_node_free_owning);
    }
    obs_registry *m = opts->metrics;
    static const char *const cls[] = {"class", NULL};
    static const double buckets[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};
    c->provision_total = obs_counter_new(m, "controller_persistentvolumeclaim_provision_total",
                                         "Total number of persistent volumes provisioned "
                                         "successfully, by storage class.",
                                         cls);
    c->provision_failed =
        obs_counter_new(m, "controller_persistentvolumeclaim_provision_failed_total",
                        "Total number of failed provisioning attempts, by storage class.", cls);
    c->provision_seconds = obs_histogram_new(
        m, "controller_persistentvolumeclaim_provision_duration_seconds",
        "Time to provision a volume, from the first attempt, in seconds, by storage class.", cls,
        buckets, sizeof(buckets) / sizeof(buckets[0]));
    c->delete_total = obs_counter_new(m, "controller_persistentvolume_delete_total",
                                      "Total number of persistent volumes deleted successfully, "
                                      "by storage class.",
                                      cls);
    c->delete_failed =
        obs_counter_new(m, "controller_persistentvolume_delete_failed_total",
                        "Total number of failed delete attempts, by storage class.", cls);
    c->delete_seconds = obs_histogram_new(m, "controller_persistentvolume_delete_duration_seconds",
                                          "Time to delete a volume, in seconds, by storage class.",
                                          cls, buckets, sizeof(buckets) / sizeof(buckets[0]));

    wq_opts qo = {.name = "claims",
                  .base_delay = opts->retry_start,
                  .max_delay = opts->retry_max,
                  .metrics = m};
    c->claims = wq_new(&qo);
    qo.name = "volumes";
    c->volumes = wq_new(&qo);

    int rc = informer(c, &KUBE_PVC, slim_pvc, keep_pvc,
                      (kube_handlers){claim_changed, claim_updated, claim_gone, c, true}, &c->pvcs);
    if (rc == 0)
        rc = informer(c, &KUBE_PV, slim_pv, keep_pv,
                      (kube_handlers){volume_changed, volume_updated, volume_deleted, c, true},
                      &c->pvs);
    if (rc == 0)
        rc = informer(c, &KUBE_STORAGECLASS, slim_meta, NULL, (kube_handlers){0}, &c->classes);
    if (rc == 0 && cfg->topology && !c->local_node) {
        rc = informer(c, &KUBE_NODE, slim_meta, NULL, (kube_handlers){0}, &c->nodes);
        if (rc == 0)
            rc = informer(c, &KUBE_CSINODE, slim_meta, NULL, (kube_handlers){0}, &c->csinodes);
    }
    if (rc == 0 && opts->publish_unpublish) {
        rc = informer(c, &KUBE_VOLUMEATTACHMENT, slim_meta, NULL,
                      (kube_handlers){NULL, NULL, attachment_deleted, c, false}, &c->vas);
        if (rc == 0)
            rc = kube_informer_add_index(c->vas, "pv", va_by_pv);
    }
    kube_informer *all[] = {c->classes, c->nodes, c->csinodes, c->vas, c->pvs, c->pvcs};
    for (size_t i = 0; rc == 0 && i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            rc = kube_informer_start(all[i]);
    for (size_t i = 0; rc == 0 && i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            rc = kube_informer_wait_for_sync(all[i], 5 * UTIL_MINUTE);
    if (rc < 0) {
        prov_ctrl_stop(c);
        return rc;
    }
    /* Before any worker: what a predecessor left in the record is read
     * (and queued once the workers run). */
    ctrl_intents_start(c);
    int n = opts->workers > 0 ? opts->workers : 1;
    /* --worker-threads is a maximum per queue: idle, none (a thread kept
     * idle would keep the malloc cache of its burst work); a burst grows the
     * pool, a quiet half minute shrinks it to none (upstream keeps them all,
     * each with its stack). */
    wq_pool_opts po = {.max_workers = n,
                       .min_workers = 0,
                       .idle_exit = WORKER_IDLE_EXIT,
                       .slow_delay = opts->retry_max,
                       .sync = claim_work,
                       .ud = c,
                       .quiet = ctrl_quiet};
    rc = wq_pool_start(c->claims, &po);
    if (rc == 0) {
        c->claims_pool = true;
        po.sync = volume_work;
        rc = wq_pool_start(c->volumes, &po);
    }
    if (rc == 0) {
        c->volumes_pool = true;
        ctrl_intents_workers_started(c);
    }
    if (rc < 0) {
        util_err_set(rc, "starting the worker threads failed");
        prov_ctrl_stop(c);
        return rc;
    }
    if (opts->sweep_interval > 0 && cfg->create_delete_snapshot &&
        pthread_create(&c->sweep_th, NULL, ctrl_sweeper, c) == 0)
        c->sweeping = true;
    if (c->local_node)
        obs_info("node deployment: provisioning for node %s", opts->node.name);
    /* The first lists parsed every object of the cluster, cached or not:
     * give those pages back rather than carry them for the process's life. */
    malloc_trim(0);
    obs_info("provisioner started: up to %d claim and %d volume workers", n, n);
    obs_v(2, "cached: %zu claims (%zu bytes), %zu volumes (%zu bytes)",
          kube_informer_count(c->pvcs), kube_informer_bytes(c->pvcs), kube_informer_count(c->pvs),
          kube_informer_bytes(c->pvs));
    *out = c;
    return 0;
}

void prov_ctrl_stop(prov_ctrl *c)
{
    if (!c)
        return;
    if (c->sweeping) {
        pthread_mutex_lock(&c->sweep_mu);
        c->stopping = true;
        pthread_cond_broadcast(&c->sweep_cv);
        pthread_mutex_unlock(&c->sweep_mu);
        pthread_join(c->sweep_th, NULL);
    }
    /* Stop the sources first, then let the workers finish what they hold. */
    kube_informer *all[] = {c->pvcs, c->pvs, c->classes, c->nodes, c->csinodes, c->vas};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        kube_informer_stop(all[i]);
    wq_shutdown(c->claims, false);
    wq_shutdown(c->volumes, false);
    ctrl_intents_stop(c);
    if (c->claims_pool)
        wq_pool_join(c->claims);
    if (c->volumes_pool)
        wq_pool_join(c->volumes);
    ctrl_intents_free(c);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        kube_informer_free(all[i]);
    wq_free(c->claims);
    wq_free(c->volumes);
    lh_table_free(c->deleted);
    lh_table_free(c->released);
    lh_table_free(c->rescheduled);
    lh_table_free(c->provisioned);
    lh_table_free(c->finalized);
    if (c->owning)
        lh_table_free(c->owning);
    json_object_put(c->local_node);
    json_object_put(c->local_csinode);
    json_object_put(c->local_labels);
    pthread_mutex_destroy(&c->done_mu);
    pthread_mutex_destroy(&c->sweep_mu);
    pthread_cond_destroy(&c->sweep_cv);
    free(c);
}
