/*
 * The capacity controller (--enable-capacity): keeps one CSIStorageCapacity
 * per (topology segment x wanted StorageClass) in $NAMESPACE, filled from
 * the driver's GetCapacity, and deletes the ones nothing wants any more.
 *
 * Data: the segment set is a sorted array of canonical segment strings,
 * rebuilt from the CSINode and Node caches whenever one of them changes in a
 * way that matters (a Node's labels, our CSINode entry); in node mode it is
 * this node's segment alone, fixed at start. Existing objects
 * live in a label-selected informer with an index by work item key
 * (prov_cap_object_key), so one item's objects are one index lookup.
 *
 * Work: one queue, keyed by work item ("<class>/<segment>"), plus the key
 * TOPOLOGY_KEY for a segment rebuild and "!<name>" for objects no item can
 * want. The queue dedups, so it never holds more than one entry per item
 * however many events and polls arrive (upstream topolvm#1201). A poll
 * queues every wanted item and every existing object's key: its cost is
 * segments x classes + objects. sync() reads the caches, asks the driver,
 * and writes only what differs (prov_cap_diff, prov_cap_decide).
 *
 * Objects this controller created but its informer has not shown yet are
 * remembered briefly (pending), so a refresh in between does not create a
 * duplicate; the informer's ADDED event queues the item again.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/linkhash.h>

#include "provisioner.h"
#include "kobj/kobj.h"

#include "wq/wq.h"

#define TOPOLOGY_KEY  "#topology"
#define INDEX_ITEM    "item"
#define PENDING_GRACE (60 * UTIL_SECOND)
#define CSC_PATH_FMT  "/apis/storage.k8s.io/v1/namespaces/%s/csistoragecapacities"

struct prov_cap {
    prov_cap_opts o;
    prov_cap_config cc;
    kube_informer *cscs, *classes, *nodes, *csinodes;
    wq *q;
    pthread_t *threads;
    int n_threads;
    pthread_t poll_th;
    bool polling;
    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t cv;
    bool stopping;
    char **segments; /* sorted, distinct */
    size_t n_segments;
    struct lh_table *pending; /* item key -> struct pending: created, not yet seen */
    util_duration gauges_at;  /* when the gauges were last computed */
    util_duration trimmed_at; /* last malloc_trim */
    obs_metric *goal, *current, *obsolete;
    char *collection; /* the objects' collection path */
};

/* ---- segments and classes ------------------------------------------------------ */

/* A copy of the segment set (free with prov_cap_keys_free). */
static char **segments_copy(prov_cap *c, size_t *n)
{
    pthread_mutex_lock(&c->mu);
    char **s = util_calloc(c->n_segments + 1, sizeof(*s));
    for (size_t i = 0; i < c->n_segments; i++)
        s[i] = util_strdup(c->segments[i]);
    *n = c->n_segments;
    pthread_mutex_unlock(&c->mu);
    return s;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool has_segment(prov_cap *c, const char *seg)
{
    pthread_mutex_lock(&c->mu);
    bool found = bsearch(&seg, c->segments, c->n_segments, sizeof(char *), str_cmp) != NULL;
    pthread_mutex_unlock(&c->mu);
    return found;
}

struct objs {
    json_object **v;
    size_t n, cap;
};

static void collect(void *ud, json_object *obj)
{
    struct objs *o = ud;
    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 16;
        json_object **bigger = util_calloc(o->cap, sizeof(void *));
        if (o->n)
            memcpy(bigger, o->v, o->n * sizeof(void *));
        free(o->v);
        o->v = bigger;
    }
    o->v[o->n++] = json_object_get(obj);
}

static void objs_clear(struct objs *o)
{
    for (size_t i = 0; i < o->n; i++)
        json_object_put(o->v[i]);
    free(o->v);
    *o = (struct objs){0};
}

/* Every wanted work item now, sorted. */
static void wanted_items(prov_cap *c, char ***keys, size_t *n)
{
    struct objs classes = {0};
    kube_informer_each(c->classes, collect, &classes);
    size_t ns = 0;
    char **segs = segments_copy(c, &ns);
    prov_cap_items(&c->cc, (const char *const *)segs, ns, (const json_object *const *)classes.v,
                   classes.n, keys, n);
    prov_cap_keys_free(segs, ns);
    objs_clear(&classes);
}

static void enqueue_class(prov_cap *c, const char *sc_name)
{
    size_t n = 0;
    char **segs = segments_copy(c, &n);
    for (size_t i = 0; i < n; i++) {
        char *key = prov_cap_key(sc_name, segs[i]);
        wq_add(c->q, key);
        free(key);
    }
    prov_cap_keys_free(segs, n);
}

static void enqueue_object(void *ud, json_object *csc)
{
    prov_cap *c = ud;
    char *key = prov_cap_object_key(csc);
    wq_add(c->q, key);
    free(key);
}

/* Queues every wanted item and every existing object's item. */
static void poll_all(prov_cap *c)
{
    char **keys = NULL;
    size_t n = 0;
    wanted_items(c, &keys, &n);
    for (size_t i = 0; i < n; i++)
        wq_add(c->q, keys[i]);
    prov_cap_keys_free(keys, n);
    kube_informer_each(c->cscs, enqueue_object, c);
    obs_v(3, "capacity: poll queued %zu items (queue length %zu)", n, wq_len(c->q));
}

struct seg_build {
    prov_cap *c;
    struct lh_table *set;
};

static void add_node_segment(void *ud, json_object *csinode)
{
    struct seg_build *b = ud;
    json_object *node = kube_informer_get(b->c->nodes, NULL, kobj_name(csinode));
    char *seg = NULL;
    if (prov_cap_node_segment(b->c->cc.driver_name, csinode, node, &seg) == 0) {
        if (lh_table_lookup_entry(b->set, seg))
            free(seg);
        else
            lh_table_insert(b->set, seg, NULL);
    }
    json_object_put(node);
}

static void free_key(struct lh_entry *e)
{
    free(lh_entry_k(e));
}

static void free_key_value(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free(lh_entry_v(e));
}

/* Rebuilds the segment set; queues the items of new segments and of gone
 * ones (their objects are deleted there). */
static int sync_topology(prov_cap *c)
{
    char **segs = NULL;
    size_t n = 0;
    if (c->o.fixed_segment || !c->o.topology) {
        segs = util_calloc(2, sizeof(*segs));
        segs[n++] = util_strdup(c->o.fixed_segment ? c->o.fixed_segment : "");
    } else {
        struct seg_build b = {c, lh_kchar_table_new(256, free_key)};
        kube_informer_each(c->csinodes, add_node_segment, &b);
        segs = util_calloc((size_t)b.set->count + 1, sizeof(*segs));
        struct lh_entry *e, *tmp;
        lh_foreach_safe(b.set, e, tmp)
        {
            segs[n++] = util_strdup(lh_entry_k(e));
        }
        lh_table_free(b.set);
        qsort(segs, n, sizeof(*segs), str_cmp);
    }
    pthread_mutex_lock(&c->mu);
    char **old = c->segments;
    size_t n_old = c->n_segments;
    c->segments = segs;
    c->n_segments = n;
    pthread_mutex_unlock(&c->mu);

    struct objs classes = {0};
    kube_informer_each(c->classes, collect, &classes);
    size_t added = 0, removed = 0;
    /* Both sorted: one merge finds what came and what went. */
    size_t i = 0, j = 0;
    while (i < n || j < n_old) {
        int cmp = i == n ? 1 : j == n_old ? -1 : strcmp(segs[i], old[j]);
        const char *changed = cmp < 0 ? segs[i] : cmp > 0 ? old[j] : NULL;
        if (cmp < 0)
            added++;
        else if (cmp > 0)
            removed++;
        for (size_t k = 0; changed && k < classes.n; k++) {
            if (!kobj_str(classes.v[k], "provisioner") ||
                strcmp(kobj_str(classes.v[k], "provisioner"), c->cc.driver_name) != 0)
                continue;
            char *key = prov_cap_key(kobj_name(classes.v[k]), changed);
            wq_add(c->q, key);
            free(key);
        }
        i += cmp <= 0;
        j += cmp >= 0;
    }
    objs_clear(&classes);
    prov_cap_keys_free(old, n_old);
    if (added || removed)
        obs_v(3, "capacity: topology changed: %zu segments, %zu added, %zu removed", n, added,
              removed);
    return 0;
}

/* ---- one work item ---------------------------------------------------------------- */

static int delete_object(prov_cap *c, const char *name)
{
    char *path = util_asprintf("%s/%s", c->collection, name);
    kube_resp r = {0};
    int rc = kube_delete(c->o.kube, path, NULL, &r);
    if (rc < 0 && kube_is_not_found(&r))
        rc = 0;
    if (rc < 0)
        util_err_set(rc, "delete CSIStorageCapacity %s: %s", name, r.message);
    else
        obs_v(4, "capacity: deleted CSIStorageCapacity %s", name);
    kube_resp_clear(&r);
    free(path);
    return rc;
}

struct pending {
    util_duration at; /* when the create was sent */
    bool again;       /* a sync was skipped meanwhile: run one once it shows */
};

/* True while our create of `key` has not reached the cache (and marks
 * that the item wants another look then). */
static bool pending(prov_cap *c, const char *key)
{
    pthread_mutex_lock(&c->mu);
    void *v = NULL;
    struct pending *p = lh_table_lookup_ex(c->pending, key, &v) ? v : NULL;
    bool fresh = p && util_now_mono() - p->at < PENDING_GRACE;
    if (fresh)
        p->again = true;
    pthread_mutex_unlock(&c->mu);
    return fresh;
}

static void set_pending(prov_cap *c, const char *key, bool on)
{
    pthread_mutex_lock(&c->mu);
    lh_table_delete(c->pending, key);
    if (on) {
        struct pending *p = util_calloc(1, sizeof(*p));
        p->at = util_now_mono();
        lh_table_insert(c->pending, util_strdup(key), p);
    }
    pthread_mutex_unlock(&c->mu);
}

/* Ends the pending state of `key`; true unless the object is our own
 * fresh create that nobody asked about since (it holds what we just
 * learnt: no need to ask the driver again). */
static bool pending_done(prov_cap *c, const char *key)
{
    pthread_mutex_lock(&c->mu);
    void *v = NULL;
    struct pending *p = lh_table_lookup_ex(c->pending, key, &v) ? v : NULL;
    bool look = !p || p->again || util_now_mono() - p->at >= PENDING_GRACE;
    lh_table_delete(c->pending, key);
    pthread_mutex_unlock(&c->mu);
    return look;
}

/* GetCapacity for an item; *has_max says whether *max was reported. */
static int get_capacity(prov_cap *c, const json_object *sc, const char *segment, int64_t *avail,
                        int64_t *max, bool *has_max)
{
    Csi__V1__GetCapacityRequest req = CSI__V1__GET_CAPACITY_REQUEST__INIT;
    /* Upstream sends the class parameters as they are, reserved keys too. */
    json_object *params = kobj_get(sc, "parameters");
    size_t np = params && json_object_is_type(params, json_type_object)
                    ? (size_t)json_object_object_length(params)
                    : 0;
    Csi__V1__GetCapacityRequest__ParametersEntry *entries = util_calloc(np + 1, sizeof(*entries));
    Csi__V1__GetCapacityRequest__ParametersEntry **ptrs = util_calloc(np + 1, sizeof(void *));
    if (np > 0) {
        json_object_object_foreach(params, k, v)
        {
            Csi__V1__GetCapacityRequest__ParametersEntry *e = &entries[req.n_parameters];
            csi__v1__get_capacity_request__parameters_entry__init(e);
            e->key = k;
            /* Go decodes a null value as "", another type not at all. */
            json_object *sv = kobj_typed(v, json_type_string);
            e->value = sv ? (char *)json_object_get_string(sv) : "";
            ptrs[req.n_parameters++] = e;
        }
    }
    req.parameters = ptrs;
    req.accessible_topology = prov_cap_segment_topology(segment);
    Csi__V1__GetCapacityResponse *resp = NULL;
    csi_status st = {0};
    int rc = csi_get_capacity(c->o.csi, &req, c->o.timeout, &resp, &st);
    prov_cap_topology_free(req.accessible_topology);
    free(ptrs);
    free(entries);
    if (rc < 0)
        return util_err_set(rc, "CSI GetCapacity for class %s, segment {%s}: %s: %s", kobj_name(sc),
                            segment, csi_code_name(st.code), st.message);
    *avail = resp->available_capacity;
    *has_max = resp->maximum_volume_size != NULL;
    *max = *has_max ? resp->maximum_volume_size->value : 0;
    csi__v1__get_capacity_response__free_unpacked(resp, NULL);
    return 0;
}

static int write_item(prov_cap *c, const char *key, const char *segment, const json_object *sc,
                      const json_object *existing)
{
    if (!existing && pending(c, key))
        return 0; /* our create is on its way to the cache; its event requeues us */
    int64_t avail = 0, max = 0;
    bool has_max = false;
    int rc = get_capacity(c, sc, segment, &avail, &max, &has_max);
    if (rc < 0)
        return rc;
    prov_cap_action act;
    char *patch = NULL;
    prov_cap_decide(&c->cc, existing, avail, has_max ? &max : NULL, &act, &patch);
    kube_resp r = {0};
    if (act == PROV_CAP_CREATE) {
        json_object *obj = NULL;
        rc = prov_cap_build(&c->cc, key, avail, has_max ? &max : NULL, &obj);
        /* Marked before the request: its ADDED event may beat our return. */
        set_pending(c, key, rc == 0);
        if (rc == 0)
            rc = kube_create(c->o.kube, c->collection, obj, &r);
        json_object_put(obj);
        if (rc == 0) {
            obs_v(4, "capacity: created %s for %s", kobj_name(r.body), key);
        } else {
            set_pending(c, key, false);
            util_err_set(rc, "create CSIStorageCapacity for %s: %s", key, r.message);
        }
    } else if (act == PROV_CAP_UPDATE) {
        char *path = util_asprintf("%s/%s", c->collection, kobj_name(existing));
        rc = kube_patch(c->o.kube, path, KUBE_PATCH_MERGE, patch, &r);
        if (rc < 0)
            util_err_set(rc, "update CSIStorageCapacity %s for %s: %s", kobj_name(existing), key,
                         r.message);
        else
            obs_v(4, "capacity: updated %s for %s", kobj_name(existing), key);
        free(path);
    }
    kube_resp_clear(&r);
    free(patch);
    return rc;
}

static const json_object *find_name(const struct objs *o, const char *name)
{
    for (size_t i = 0; i < o->n; i++) {
        const char *n = kobj_name(o->v[i]);
        if (n && strcmp(n, name) == 0)
            return o->v[i];
    }
    return NULL;
}

static int sync_item(prov_cap *c, const char *key)
{
    if (strcmp(key, TOPOLOGY_KEY) == 0)
        return sync_topology(c);
    struct objs existing = {0};
    kube_informer_by_index(c->cscs, INDEX_ITEM, key, collect, &existing);
    char *sc_name = NULL, *segment = NULL;
    json_object *sc = NULL;
    bool wanted = prov_cap_key_split(key, &sc_name, &segment) == 0 && has_segment(c, segment) &&
                  (sc = kube_informer_get(c->classes, NULL, sc_name)) != NULL &&
                  prov_cap_class_wanted(&c->cc, sc);
    const char *desired[1] = {key};
    prov_cap_step *steps = NULL;
    size_t n = 0;
    prov_cap_diff(&c->cc, desired, wanted ? 1 : 0, (const json_object *const *)existing.v,
                  existing.n, &steps, &n);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        int r = 0;
        if (steps[i].action == PROV_CAP_DELETE)
            r = delete_object(c, steps[i].name);
        else
            r = write_item(c, key, segment, sc,
                           steps[i].name ? find_name(&existing, steps[i].name) : NULL);
        if (r < 0 && rc == 0) {
            rc = r;
            obs_warn("capacity: %s", util_err_last());
        }
    }
    prov_cap_steps_free(steps, n);
    json_object_put(sc);
    free(sc_name);
    free(segment);
    objs_clear(&existing);
    return rc;
}

/* A round (start, poll, topology change) parses every object once, in the
 * malloc arenas of several threads; once the queue runs dry, hand what it
 * left free back to the system (at most every 10 s). In the 2,000-node
 * benchmark that is ~7 MiB of RSS. */
static void trim_after_round(prov_cap *c)
{
    if (wq_len(c->q) != 0)
        return;
    util_duration now = util_now_mono();
    pthread_mutex_lock(&c->mu);
    bool due = now - c->trimmed_at >= 10 * UTIL_SECOND;
    if (due)
        c->trimmed_at = now;
    pthread_mutex_unlock(&c->mu);
    if (due)
        malloc_trim(0);
}

static void *work(void *arg)
{
    prov_cap *c = arg;
    char *key = NULL;
    util_thread_name("w:capacity");
    while (wq_get(c->q, &key) == 0) {
        if (sync_item(c, key) == 0)
            wq_forget(c->q, key);
        else
            wq_add_rate_limited(c->q, key);
        wq_done(c->q, key);
        free(key);
        trim_after_round(c);
    }
    return NULL;
}

static void *poller(void *arg)
{
    prov_cap *c = arg;
    util_thread_name("capacity-poll");
    for (;;) {
        pthread_mutex_lock(&c->mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        util_duration d = c->o.poll_interval > 0 ? c->o.poll_interval : UTIL_MINUTE;
        until.tv_sec += (time_t)(d / UTIL_SECOND);
        until.tv_nsec += (long)(d % UTIL_SECOND);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!c->stopping)
            if (pthread_cond_timedwait(&c->cv, &c->mu, &until) != 0)
                break;
        bool stop = c->stopping;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            break;
        poll_all(c);
    }
    return NULL;
}

/* ---- events ------------------------------------------------------------------------ */

static void csc_added(void *ud, json_object *obj)
{
    prov_cap *c = ud;
    char *key = prov_cap_object_key(obj);
    if (pending_done(c, key))
        wq_add(c->q, key);
    free(key);
}

static void csc_updated(void *ud, json_object *old, json_object *obj)
{
    prov_cap *c = ud;
    /* The object may have moved to another item: both need a look. */
    enqueue_object(c, old);
    enqueue_object(c, obj);
}

static void class_changed(void *ud, json_object *sc)
{
    prov_cap *c = ud;
    const char *prov = kobj_str(sc, "provisioner");
    if (prov && strcmp(prov, c->cc.driver_name) == 0)
        enqueue_class(c, kobj_name(sc));
}

static void class_updated(void *ud, json_object *old, json_object *sc)
{
    (void)old;
    class_changed(ud, sc);
}

static void topology_changed(void *ud, json_object *obj)
{
    (void)obj;
    wq_add(((prov_cap *)ud)->q, TOPOLOGY_KEY);
}

/* A Node's status (and so its resourceVersion) changes all the time in a
 * real cluster: only its labels, and our entry of a CSINode, matter. */
static void node_updated(void *ud, json_object *old, json_object *obj)
{
    json_object *a = kobj_path(old, "metadata.labels");
    json_object *b = kobj_path(obj, "metadata.labels");
    if (!(a == b || (a && b && json_object_equal(a, b))))
        topology_changed(ud, obj);
}

static void csinode_updated(void *ud, json_object *old, json_object *obj)
{
    json_object *a = kobj_get(old, "spec"), *b = kobj_get(obj, "spec");
    if (!(a == b || (a && b && json_object_equal(a, b))))
        topology_changed(ud, obj);
}

/* ---- slim caches ---------------------------------------------------------------------- */

static void keep_only(json_object *o, const char *const *keep)
{
    if (!o || !json_object_is_type(o, json_type_object))
        return;
    char *drop[64];
    size_t n = 0;
    json_object_object_foreach(o, k, v)
    {
        (void)v;
        bool kept = false;
        for (size_t i = 0; keep[i]; i++)
            kept = kept || strcmp(k, keep[i]) == 0;
        if (!kept && n < sizeof(drop) / sizeof(drop[0]))
            drop[n++] = util_strdup(k);
    }
    for (size_t i = 0; i < n; i++) {
        json_object_object_del(o, drop[i]);
        free(drop[i]);
    }
}

static void slim_node(void *ud, json_object *obj)
{
    (void)ud;
    static const char *const top[] = {"metadata", NULL};
    static const char *const m[] = {"name", "labels", "resourceVersion", NULL};
    keep_only(obj, top);
    keep_only(kobj_get(obj, "metadata"), m);
}

static void slim_csinode(void *ud, json_object *obj)
{
    prov_cap *c = ud;
    static const char *const top[] = {"metadata", "spec", NULL};
    static const char *const m[] = {"name", "resourceVersion", NULL};
    keep_only(obj, top);
    keep_only(kobj_get(obj, "metadata"), m);
    json_object *drivers = kobj_arr(kobj_get(obj, "spec"), "drivers");
    if (!drivers)
        return;
    json_object *ours = json_object_new_array();
    for (size_t i = 0; i < kobj_len(drivers); i++) {
        json_object *d = kobj_at(drivers, i);
        const char *name = kobj_str(d, "name");
        if (name && strcmp(name, c->cc.driver_name) == 0)
            json_object_array_add(ours, json_object_get(d));
    }
    kobj_set(kobj_get(obj, "spec"), "drivers", ours);
}

static void slim_class(void *ud, json_object *obj)
{
    (void)ud;
    static const char *const top[] = {"metadata", "provisioner", "parameters", "volumeBindingMode",
                                      NULL};
    static const char *const m[] = {"name", "resourceVersion", NULL};
    keep_only(obj, top);
    keep_only(kobj_get(obj, "metadata"), m);
}

/* What sync and the diff read; the rest (managedFields, timestamps, uid,
 * generateName) would only fill the cache: ~40% of each object. */
static void slim_csc(void *ud, json_object *obj)
{
    (void)ud;
    static const char *const top[] = {"metadata", "storageClassName",  "nodeTopology",
                                      "capacity", "maximumVolumeSize", NULL};
    static const char *const m[] = {"name",   "namespace",       "resourceVersion",
                                    "labels", "ownerReferences", NULL};
    keep_only(obj, top);
    keep_only(kobj_get(obj, "metadata"), m);
}

static void index_item(const json_object *obj, void (*add)(void *ctx, const char *key), void *ctx)
{
    char *key = prov_cap_object_key(obj);
    add(ctx, key);
    free(key);
}

/* ---- metrics ---------------------------------------------------------------------------- */

struct counting {
    const prov_cap_config *cc;
    char **keys;
    size_t n;
    bool *present;
    size_t obsolete;
};

static void count_object(void *ud, json_object *csc)
{
    struct counting *k = ud;
    if (!prov_cap_is_managed(k->cc, csc))
        return;
    char *key = prov_cap_object_key(csc);
    char **hit = bsearch(&key, k->keys, k->n, sizeof(char *), str_cmp);
    if (hit)
        k->present[hit - k->keys] = true;
    else
        k->obsolete++;
    free(key);
}

/* Upstream's three gauges, computed when /metrics is read; at most once a
 * second, as it walks every object. */
static void collect_gauges(void *ud)
{
    prov_cap *c = ud;
    util_duration now = util_now_mono();
    pthread_mutex_lock(&c->mu);
    bool fresh = c->gauges_at != 0 && now - c->gauges_at < UTIL_SECOND;
    if (!fresh)
        c->gauges_at = now;
    pthread_mutex_unlock(&c->mu);
    if (fresh)
        return;
    struct counting k = {.cc = &c->cc};
    wanted_items(c, &k.keys, &k.n);
    k.present = util_calloc(k.n + 1, sizeof(bool));
    kube_informer_each(c->cscs, count_object, &k);
    size_t current = 0;
    for (size_t i = 0; i < k.n; i++)
        current += k.present[i];
    obs_gauge_set(c->goal, NULL, (double)k.n);
    obs_gauge_set(c->current, NULL, (double)current);
    obs_gauge_set(c->obsolete, NULL, (double)k.obsolete);
    free(k.present);
    prov_cap_keys_free(k.keys, k.n);
}

/* ---- start and stop --------------------------------------------------------------------- */

static int informer(prov_cap *c, const kube_resource *res, const char *ns, const char *selector,
                    void (*slim)(void *, json_object *), kube_handlers h, kube_informer **out)
{
    kube_informer_opts o = {.res = res,
                            .ns = ns,
                            .label_selector = selector,
                            .transform = slim,
                            .transform_ud = c,
                            .handlers = h};
    return kube_informer_new(c->o.kube, &o, out);
}

int prov_cap_start(const prov_cap_opts *opts, const prov_cap_config *cc, prov_cap **out)
{
    *out = NULL;
    prov_cap *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    c->cc = *cc;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->pending = lh_kchar_table_new(64, free_key_value);
    c->collection = util_asprintf(CSC_PATH_FMT, cc->namespace);
    c->goal = obs_gauge_new(opts->metrics, "csistoragecapacities_desired_goal",
                            "[ALPHA] Number of CSIStorageCapacity objects that are supposed to "
                            "be managed automatically.",
                            NULL);
    c->current = obs_gauge_new(opts->metrics, "csistoragecapacities_desired_current",
                               "[ALPHA] Number of CSIStorageCapacity objects that exist and are "
                               "supposed to be managed automatically.",
                               NULL);
    c->obsolete = obs_gauge_new(
        opts->metrics, "csistoragecapacities_obsolete",
        "[ALPHA] Number of CSIStorageCapacity objects that exist and will be deleted "
        "automatically. Objects that exist and may need an update are not considered obsolete "
        "and therefore not included in this value.",
        NULL);
    wq_opts qo = {.name = "csistoragecapacity",
                  .base_delay = opts->retry_start,
                  .max_delay = opts->retry_max,
                  .metrics = opts->metrics};
    c->q = wq_new(&qo);

    char *selector = util_asprintf("%s=%s,%s=%s", PROV_CAP_LABEL_DRIVER, cc->driver_name,
                                   PROV_CAP_LABEL_MANAGED_BY, cc->managed_by);
    int rc = informer(c, &KUBE_CSISTORAGECAPACITY, cc->namespace, selector, slim_csc,
                      (kube_handlers){csc_added, csc_updated, enqueue_object, c, false}, &c->cscs);
    free(selector);
    if (rc == 0)
        rc = kube_informer_add_index(c->cscs, INDEX_ITEM, index_item);
    if (rc == 0)
        rc = informer(c, &KUBE_STORAGECLASS, NULL, NULL, slim_class,
                      (kube_handlers){class_changed, class_updated, class_changed, c, true},
                      &c->classes);
    /* Node mode serves its own node's segment only: watching every Node
     * on every node would cost the API server N x N. */
    if (rc == 0 && opts->topology && !opts->fixed_segment) {
        rc = informer(c, &KUBE_NODE, NULL, NULL, slim_node,
                      (kube_handlers){topology_changed, node_updated, topology_changed, c, false},
                      &c->nodes);
        if (rc == 0)
            rc = informer(
                c, &KUBE_CSINODE, NULL, NULL, slim_csinode,
                (kube_handlers){topology_changed, csinode_updated, topology_changed, c, false},
                &c->csinodes);
    }
    kube_informer *all[] = {c->classes, c->nodes, c->csinodes, c->cscs};
    for (size_t i = 0; rc == 0 && i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            rc = kube_informer_start(all[i]);
    for (size_t i = 0; rc == 0 && i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            rc = kube_informer_wait_for_sync(all[i], 5 * UTIL_MINUTE);
    if (rc < 0) {
        prov_cap_stop(c);
        return rc;
    }
    /* The caches are complete: know the segments before the first poll. */
    sync_topology(c);
    poll_all(c);
    obs_registry_on_render(opts->metrics, collect_gauges, c);
    int n = opts->workers > 0 ? opts->workers : 1;
    c->threads = util_calloc((size_t)n, sizeof(pthread_t));
    for (int i = 0; i < n; i++) {
        if (pthread_create(&c->threads[i], NULL, work, c) != 0)
            break;
        c->n_threads++;
    }
    if (pthread_create(&c->poll_th, NULL, poller, c) == 0)
        c->polling = true;
    size_t segs = 0;
    char **s = segments_copy(c, &segs);
    prov_cap_keys_free(s, segs);
    obs_info("capacity controller started: %d workers, %zu topology segments, poll every %llds",
             c->n_threads, segs, (long long)(opts->poll_interval / UTIL_SECOND));
    obs_v(2, "capacity caches: %zu objects in %zu B, %zu classes in %zu B, %zu nodes in %zu B",
          kube_informer_count(c->cscs), kube_informer_bytes(c->cscs),
          kube_informer_count(c->classes), kube_informer_bytes(c->classes),
          c->nodes ? kube_informer_count(c->nodes) : 0,
          c->nodes ? kube_informer_bytes(c->nodes) + kube_informer_bytes(c->csinodes) : 0);
    *out = c;
    return 0;
}

void prov_cap_volume_changed(void *cap, const char *sc_name, const json_object *pv)
{
    prov_cap *c = cap;
    if (!c)
        return;
    char **segs = NULL;
    size_t n = 0, known = 0;
    prov_cap_affinity_segments(pv, &segs, &n);
    struct objs classes = {0};
    for (size_t i = 0; i < n; i++) {
        if (!has_segment(c, segs[i]))
            continue;
        if (known++ == 0)
            kube_informer_each(c->classes, collect, &classes);
        /* Only the volume's segments, for every class: in a cluster of
         * 2,000 single-node segments that is 1/2,000 of a class round. */
        for (size_t k = 0; k < classes.n; k++) {
            if (!prov_cap_class_wanted(&c->cc, classes.v[k]))
                continue;
            char *key = prov_cap_key(kobj_name(classes.v[k]), segs[i]);
            wq_add(c->q, key);
            free(key);
        }
    }
    objs_clear(&classes);
    prov_cap_keys_free(segs, n);
    if (known == 0 && sc_name && *sc_name)
        enqueue_class(c, sc_name);
}

void prov_cap_stop(prov_cap *c)
{
    if (!c)
        return;
    if (c->polling) {
        pthread_mutex_lock(&c->mu);
        c->stopping = true;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->poll_th, NULL);
    }
    obs_registry_off_render(c->o.metrics, collect_gauges, c);
    kube_informer *all[] = {c->cscs, c->classes, c->nodes, c->csinodes};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        kube_informer_stop(all[i]);
    wq_shutdown(c->q, false);
    for (int i = 0; i < c->n_threads; i++)
        pthread_join(c->threads[i], NULL);
    free(c->threads);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        kube_informer_free(all[i]);
    wq_free(c->q);
    prov_cap_keys_free(c->segments, c->n_segments);
    lh_table_free(c->pending);
    free(c->collection);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* ---- owner ---------------------------------------------------------------------------------- */

int prov_cap_lookup_owner(kube_client *kube, const char *ns, const char *pod, int levels,
                          json_object **ref)
{
    *ref = NULL;
    char *path = kube_path(&KUBE_POD, ns, pod, NULL);
    char *av = util_strdup("v1"), *kind = util_strdup("Pod");
    int rc = 0;
    for (;;) {
        kube_resp r = {0};
        rc = kube_get(kube, path, &r);
        if (rc < 0) {
            rc = util_err_set(rc, "look up owner(s) of pod: get %s: %s", path, r.message);
            kube_resp_clear(&r);
            break;
        }
        char *next = NULL, *nav = NULL, *nkind = NULL;
        rc = prov_cap_owner_step(r.body, av, kind, levels, ref, &next, &nav, &nkind);
        kube_resp_clear(&r);
        if (rc < 0) {
            char *why = util_strdup(util_err_last());
            rc = util_err_set(rc, "look up owner(s) of pod: %s", why);
            free(why);
            break;
        }
        if (*ref)
            break;
        free(path);
        free(av);
        free(kind);
        path = next;
        av = nav;
        kind = nkind;
        levels--;
    }
    free(path);
    free(av);
    free(kind);
    return rc;
}

int prov_cap_check_api(kube_client *kube)
{
    static const char *const lacks =
        "--enable-capacity: the API server does not serve " PROV_CAP_GROUP_VERSION
        " CSIStorageCapacity (Kubernetes 1.24 or newer)";
    kube_resp r = {0};
    int rc = kube_get(kube, "/apis/" PROV_CAP_GROUP_VERSION, &r);
    /* NotFound: the server does not serve the group version at all */
    bool lacking = rc < 0 ? kube_is_not_found(&r) : !prov_cap_api_served(r.body);
    if (lacking)
        rc = util_err_set(-ENOTSUP, "%s", lacks);
    else if (rc < 0)
        rc = util_err_set(rc, "--enable-capacity: cannot read the API server's discovery of %s: %s",
                          PROV_CAP_GROUP_VERSION, r.message);
    kube_resp_clear(&r);
    return rc;
}
