/*
 * Informer: list, then watch from the list's resourceVersion, into a cache
 * that handlers and workers read.
 *
 * The cache holds each object as compact JSON text after the transform (a
 * json-c tree is ~10x bigger than its text, and a sidecar caches every PV
 * and PVC of the cluster); readers get a parsed copy. One rwlock guards the
 * cache and its indexes. Handlers run on the informer's thread after the
 * cache is updated, as client-go's do, with parsed objects.
 *
 * A watch that ends cleanly is resumed from the last resourceVersion seen
 * (bookmarks included); 410 Expired or repeated failures lead to a relist,
 * which turns the difference between cache and server into add, update and
 * delete calls, so every object's last handler call sees its final state.
 * Resync (optional) replays on_update(obj, obj) from its own thread.
 *
 * After a burst (HANDOVER_EVENTS events or more, then HANDOVER_QUIET
 * without a byte) the watch ends and goes on from the last resourceVersion
 * on a fresh thread, without a relist: the old thread exits, and glibc
 * hands its malloc cache, which pins pages all over the heap, back only
 * then.
 *
 * A list item or watch object that is not an object (or has no name) is
 * skipped with one -v=2 line and counted in
 * csi_sidecar_malformed_objects_total{resource} on the client's registry,
 * so a misbehaving API server shows on a dashboard, not only in logs.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <json-c/linkhash.h>

#include "kube/kube.h"
#include "kobj/kobj.h"

#define MAX_INDEXES 8
/* Buckets of a new cache and index, and what kube_informer_trim shrinks
 * them to: json-c doubles a table as it fills, and most informers (classes,
 * nodes) hold a handful of objects; 64 buckets are 2.5 KiB, where 1,024
 * were 40 KiB, each, idle and after every trim. */
#define CACHE_TABLE_SIZE 64
#define INDEX_TABLE_SIZE 64
#define HANDOVER_QUIET   (30 * UTIL_SECOND) /* as the work queues' idle workers */
#define HANDOVER_EVENTS  256

/* From client.c: the registry given to the client (NULL: none). */
obs_registry *kube_client__metrics(kube_client *c);

struct entry {
    char *json;
    size_t len;
    char *rv;
    char **ikeys[MAX_INDEXES]; /* per index: NULL-ended list of index keys */
};

struct index {
    char *name;
    kube_index_fn fn;
    struct lh_table *map; /* index key -> struct keyset* */
};

struct keyset {
    char **keys;
    size_t n, cap;
};

struct kube_informer {
    kube_client *c;
    kube_informer_opts o;
    char *path;  /* collection path */
    char *query; /* selectors, URL-encoded, starting with '&' or "" */
    pthread_rwlock_t lock;
    struct lh_table *cache; /* key -> struct entry* */
    struct index idx[MAX_INDEXES];
    int n_idx;
    size_t bytes;
    char *last_rv;
    atomic_bool synced;
    atomic_bool stop;
    kube_watch *watch;
    pthread_t th, resync_th; /* th: the watch thread there now (under mu) */
    bool started;
    bool resume;        /* the next watch thread goes on from last_rv, no list */
    pthread_mutex_t mu; /* for waiting on sync and on stop */
    pthread_cond_t cv;
    obs_metric *m_malformed; /* NULL without a registry */
};

/* ---- cache ------------------------------------------------------------------- */

static void free_strv(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static void entry_free(struct entry *e)
{
    if (!e)
        return;
    free(e->json);
    free(e->rv);
    for (int i = 0; i < MAX_INDEXES; i++)
        free_strv(e->ikeys[i]);
    free(e);
}

static void cache_entry_free(struct lh_entry *le)
{
    free(lh_entry_k(le));
    entry_free((struct entry *)lh_entry_v(le));
}

static void keyset_entry_free(struct lh_entry *le)
{
    struct keyset *ks = (struct keyset *)lh_entry_v(le);
    free(lh_entry_k(le));
    if (ks) {
        for (size_t i = 0; i < ks->n; i++)
            free(ks->keys[i]);
        free(ks->keys);
        free(ks);
    }
}

struct collect {
    char **v;
    size_t n, cap;
};

static void collect_key(void *ctx, const char *key)
{
    struct collect *c = ctx;
    if (c->n + 2 > c->cap) {
        c->cap = c->cap ? 2 * c->cap : 4;
        char **nv = realloc(c->v, c->cap * sizeof(char *));
        if (!nv)
            abort();
        c->v = nv;
    }
    c->v[c->n++] = util_strdup(key);
    c->v[c->n] = NULL;
}

static void index_add(struct index *ix, const char *ikey, const char *okey)
{
    struct keyset *ks = NULL;
    if (!lh_table_lookup_ex(ix->map, ikey, (void **)&ks)) {
        ks = util_calloc(1, sizeof(*ks));
        lh_table_insert(ix->map, util_strdup(ikey), ks);
    }
    if (ks->n == ks->cap) {
        ks->cap = ks->cap ? 2 * ks->cap : 2;
        char **nk = realloc(ks->keys, ks->cap * sizeof(char *));
        if (!nk)
            abort();
        ks->keys = nk;
    }
    ks->keys[ks->n++] = util_strdup(okey);
}

static void index_del(struct index *ix, const char *ikey, const char *okey)
{
    struct keyset *ks = NULL;
    if (!lh_table_lookup_ex(ix->map, ikey, (void **)&ks))
        return;
    for (size_t i = 0; i < ks->n; i++) {
        if (strcmp(ks->keys[i], okey) == 0) {
            free(ks->keys[i]);
            ks->keys[i] = ks->keys[--ks->n];
            break;
        }
    }
    if (ks->n == 0)
        lh_table_delete(ix->map, ikey);
}

static size_t entry_bytes(const struct entry *e, const char *key)
{
    size_t b = sizeof(*e) + e->len + 1 + strlen(key) + 1 + (e->rv ? strlen(e->rv) + 1 : 0);
    for (int i = 0; i < MAX_INDEXES; i++)
        for (size_t k = 0; e->ikeys[i] && e->ikeys[i][k]; k++)
            b += 2 * (strlen(e->ikeys[i][k]) + 1) + strlen(key) + 1;
    return b;
}

/* Removes `key` from cache and indexes; returns the old entry (caller frees). */
static struct entry *cache_take(kube_informer *inf, const char *key)
{
    struct entry *old = NULL;
    if (!lh_table_lookup_ex(inf->cache, key, (void **)&old))
        return NULL;
    for (int i = 0; i < inf->n_idx; i++)
        for (size_t k = 0; old->ikeys[i] && old->ikeys[i][k]; k++)
            index_del(&inf->idx[i], old->ikeys[i][k], key);
    inf->bytes -= entry_bytes(old, key);
    /* Detach the value so the table's free function leaves it to us. */
    struct lh_entry *le = lh_table_lookup_entry(inf->cache, key);
    lh_entry_set_val(le, NULL);
    lh_table_delete(inf->cache, key);
    return old;
}

static struct entry *cache_put(kube_informer *inf, const char *key, json_object *obj)
{
    struct entry *e = util_calloc(1, sizeof(*e));
    e->json = kobj_to_text(obj, &e->len);
    e->rv = util_strdup(kobj_rv(obj));
    for (int i = 0; i < inf->n_idx; i++) {
        struct collect c = {0};
        inf->idx[i].fn(obj, collect_key, &c);
        e->ikeys[i] = c.v;
        for (size_t k = 0; c.v && c.v[k]; k++)
            index_add(&inf->idx[i], c.v[k], key);
    }
    lh_table_insert(inf->cache, util_strdup(key), e);
    inf->bytes += entry_bytes(e, key);
    return e;
}

static json_object *parse_entry(const struct entry *e)
{
    return e ? kobj_parse_text(e->json, e->len) : NULL;
}

/* ---- public reads -------------------------------------------------------------- */

/* The cache key: "namespace/name", or the name of a cluster object. */
static char *key_of(const char *ns, const char *name)
{
    return ns && *ns ? util_asprintf("%s/%s", ns, name) : util_strdup(name);
}

char *kube_key(const json_object *obj)
{
    const char *n = kobj_name(obj);
    return key_of(kobj_namespace(obj), n ? n : "");
}

json_object *kube_informer_get(kube_informer *inf, const char *ns, const char *name)
{
    char *key = key_of(ns, name);
    pthread_rwlock_rdlock(&inf->lock);
    struct entry *e = NULL;
    json_object *obj = NULL;
    if (lh_table_lookup_ex(inf->cache, key, (void **)&e))
        obj = parse_entry(e);
    pthread_rwlock_unlock(&inf->lock);
    free(key);
    return obj;
}

bool kube_informer_has(kube_informer *inf, const char *ns, const char *name)
{
    char *key = key_of(ns, name);
    pthread_rwlock_rdlock(&inf->lock);
    bool found = lh_table_lookup_entry(inf->cache, key) != NULL;
    pthread_rwlock_unlock(&inf->lock);
    free(key);
    return found;
}

/* Copies the texts under the lock, parses and calls outside it, so a
 * callback may read the informer again. */
static void call_each(char **texts, size_t n, void (*fn)(void *ud, json_object *obj), void *ud)
{
    for (size_t i = 0; i < n; i++) {
        json_object *obj = kobj_parse_text(texts[i], strlen(texts[i]));
        if (obj)
            fn(ud, obj);
        json_object_put(obj);
        free(texts[i]);
    }
    free(texts);
}

void kube_informer_each(kube_informer *inf, void (*fn)(void *ud, json_object *obj), void *ud)
{
    pthread_rwlock_rdlock(&inf->lock);
    size_t n = (size_t)inf->cache->count, i = 0;
    char **texts = util_calloc(n ? n : 1, sizeof(char *));
    for (struct lh_entry *le = inf->cache->head; le; le = le->next)
        texts[i++] = util_strdup(((const struct entry *)lh_entry_v(le))->json);
    pthread_rwlock_unlock(&inf->lock);
    call_each(texts, i, fn, ud);
}

int kube_informer_by_index(kube_informer *inf, const char *name, const char *key,
                           void (*fn)(void *ud, json_object *obj), void *ud)
{
    int which = -1;
    for (int i = 0; i < inf->n_idx; i++)
        if (strcmp(inf->idx[i].name, name) == 0)
            which = i;
    if (which < 0)
        return util_err_set(-ENOENT, "informer %s has no index %s", inf->o.res->resource, name);
    pthread_rwlock_rdlock(&inf->lock);
    struct keyset *ks = NULL;
    char **texts = NULL;
    size_t n = 0;
    if (lh_table_lookup_ex(inf->idx[which].map, key, (void **)&ks) && ks->n) {
        texts = util_calloc(ks->n, sizeof(char *));
        for (size_t i = 0; i < ks->n; i++) {
            struct entry *e = NULL;
            if (lh_table_lookup_ex(inf->cache, ks->keys[i], (void **)&e))
                texts[n++] = util_strdup(e->json);
        }
    }
    pthread_rwlock_unlock(&inf->lock);
    call_each(texts, n, fn, ud);
    return 0;
}

size_t kube_informer_count(kube_informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    size_t n = (size_t)inf->cache->count;
    pthread_rwlock_unlock(&inf->lock);
    return n;
}

size_t kube_informer_bytes(kube_informer *inf)
{
    pthread_rwlock_rdlock(&inf->lock);
    size_t n = inf->bytes;
    pthread_rwlock_unlock(&inf->lock);
    return n;
}

/* ---- applying changes ---------------------------------------------------------- */

static void slim(kube_informer *inf, json_object *obj)
{
    if (inf->o.transform) {
        inf->o.transform(inf->o.transform_ud, obj);
        return;
    }
    kobj_del(kobj_meta(obj), "managedFields");
}

static void set_last_rv(kube_informer *inf, const char *rv)
{
    if (!rv || !*rv)
        return;
    pthread_rwlock_wrlock(&inf->lock);
    free(inf->last_rv);
    inf->last_rv = util_strdup(rv);
    pthread_rwlock_unlock(&inf->lock);
}

static const char *obj_rv(json_object *obj)
{
    return kobj_rv(obj);
}

/*
 * Only objects with a name can be cached (the name is the key). Anything
 * else in a list or a watch is skipped, not trusted: json-c asserts on the
 * wrong type, and upstream's decoder rejects such an item too.
 */
static void count_malformed(const kube_informer *inf)
{
    const char *const v[] = {inf->o.res->resource, NULL};
    obs_counter_add(inf->m_malformed, v, 1);
}

static bool usable(const kube_informer *inf, const char *from, json_object *obj)
{
    if (kube_object_check(inf->o.res, obj, NULL) < 0) {
        obs_v(2, "%s: skipping it: %s", from, util_err_last());
        count_malformed(inf);
        return false;
    }
    /* An informer of one namespace is told only about that namespace: an
     * object of another would be cached under a key no sync asks for. */
    const char *ns = kobj_namespace(obj);
    if (inf->o.res->namespaced && inf->o.ns && *inf->o.ns && strcmp(ns, inf->o.ns) != 0) {
        obs_v(2, "%s: skipping %s/%s: not of namespace %s", from, ns, kobj_name(obj), inf->o.ns);
        count_malformed(inf);
        return false;
    }
    return true;
}

static void apply_delete(kube_informer *inf, json_object *obj);

/*
 * Stores `obj` (transformed in place) and calls the handlers. With
 * `quiet_if_same`, an object whose cached copy is byte for byte the same
 * calls no handler (a relist's unchanged items).
 */
static void apply_upsert(kube_informer *inf, json_object *obj, bool quiet_if_same)
{
    if (inf->o.keep && !inf->o.keep(inf->o.transform_ud, obj)) {
        apply_delete(inf, obj);
        return;
    }
    slim(inf, obj);
    char *key = kube_key(obj);
    pthread_rwlock_wrlock(&inf->lock);
    struct entry *old = cache_take(inf, key);
    struct entry *now = cache_put(inf, key, obj);
    pthread_rwlock_unlock(&inf->lock);
    const kube_handlers *h = &inf->o.handlers;
    if (quiet_if_same && old && old->len == now->len &&
        memcmp(old->json, now->json, now->len) == 0) {
        /* Nothing to tell. */
    } else if (old) {
        if (h->on_update) {
            json_object *prev = h->old_unused ? NULL : parse_entry(old);
            h->on_update(h->ud, prev, obj);
            json_object_put(prev);
        }
    } else if (h->on_add) {
        h->on_add(h->ud, obj);
    }
    entry_free(old);
    free(key);
}

static void apply_delete(kube_informer *inf, json_object *obj)
{
    char *key = kube_key(obj);
    pthread_rwlock_wrlock(&inf->lock);
    struct entry *old = cache_take(inf, key);
    pthread_rwlock_unlock(&inf->lock);
    const kube_handlers *h = &inf->o.handlers;
    if (old && h->on_delete) {
        /* The final state as the server sent it, slimmed like the cache. */
        slim(inf, obj);
        h->on_delete(h->ud, obj);
    }
    entry_free(old);
    free(key);
}

/* ---- list ------------------------------------------------------------------------ */

static char *url_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = util_calloc(3 * n + 1, 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~') {
            out[j++] = (char)ch;
        } else {
            out[j++] = '%';
            out[j++] = hex[ch >> 4];
            out[j++] = hex[ch & 15];
        }
    }
    return out;
}

struct seen {
    struct lh_table *keys; /* keys present in the new list */
};

static void seen_free_entry(struct lh_entry *le)
{
    free(lh_entry_k(le));
}

/*
 * A full list, applied as a diff against the cache. Returns 0 and sets the
 * last resourceVersion, or a negative error.
 */
/*
 * Lists everything and applies it to the cache. Returns 0, a negative error
 * (nothing applied), or 1 when items had to be skipped as malformed: the
 * rest is applied, nothing is taken as deleted (a skipped item may be a
 * cached object), and the caller lists again after a backoff until a whole
 * list comes, so a corrupted answer never leaves the cache short for good.
 */
static int relist(kube_informer *inf)
{
    struct lh_table *seen = lh_kchar_table_new(1024, seen_free_entry);
    char *cont = NULL;
    char *list_rv = NULL;
    int rc = 0;
    size_t skipped = 0;
    int page = inf->o.page_size > 0 ? inf->o.page_size : 500;
    for (;;) {
        char *ec = cont ? url_escape(cont) : NULL;
        char *path = util_asprintf("%s?limit=%d%s%s%s", inf->path, page, inf->query,
                                   ec ? "&continue=" : "", ec ? ec : "");
        free(ec);
        kube_resp r = {0};
        rc = kube_get(inf->c, path, &r);
        free(path);
        if (rc < 0) {
            obs_v(2, "list %s: %s", inf->o.res->resource, r.message);
            kube_resp_clear(&r);
            break;
        }
        json_object *items = kobj_get(r.body, "items");
        if (!kobj_typed(items, json_type_array)) {
            /* Not a list: applying it as an empty one would delete the
             * cache, and the watch would go on from this list's version,
             * so the objects would stay missing until each changed. An API
             * server writes an empty list as "items": [], never null or
             * without the field. */
            rc = util_err_set(-EIO, "list %s: items is not an array", inf->o.res->resource);
            obs_v(2, "%s", util_err_last());
            kube_resp_clear(&r);
            break;
        }
        /* The watch goes on from the list's version. Without one it would
         * go on from the last event seen before this list, and the server
         * would replay every change since then over the newer state the
         * list just cached: objects deleted meanwhile would come back for a
         * while, and a sync could act on them (recreate what their
         * deletion removed). A continue token of another type would end
         * the list early and take the rest as deleted. */
        const char *page_rv = kobj_rv(r.body);
        json_object *next_v = kobj_get(kobj_meta(r.body), "continue");
        if (!page_rv || !*page_rv || (next_v && !kobj_typed(next_v, json_type_string))) {
            rc = util_err_set(-EIO, "list %s: no usable metadata.resourceVersion or continue",
                              inf->o.res->resource);
            obs_v(2, "%s", util_err_last());
            count_malformed(inf);
            kube_resp_clear(&r);
            break;
        }
        if (!list_rv)
            list_rv = util_strdup(page_rv);
        free(cont);
        const char *next = kobj_meta_str(r.body, "continue");
        cont = next && *next ? util_strdup(next) : NULL;
        for (size_t i = 0; i < kobj_len(items); i++) {
            json_object *item = kobj_at(items, i);
            if (!usable(inf, "list", item)) {
                skipped++;
                continue;
            }
            /* Lists of built-in types omit kind and apiVersion on items. */
            if (!kobj_get(item, "kind")) {
                kobj_set_str(item, "kind", inf->o.res->kind);
                char *av = inf->o.res->group[0]
                               ? util_asprintf("%s/%s", inf->o.res->group, inf->o.res->version)
                               : util_strdup(inf->o.res->version);
                kobj_set_str(item, "apiVersion", av);
                free(av);
            }
            char *key = kube_key(item);
            lh_table_insert(seen, key, NULL);
            /* An unchanged object (same resourceVersion) needs no handler
             * call, but its copy is still replaced when the bytes differ:
             * a corrupted answer cached earlier must not outlive the next
             * list only because the object has not changed since. */
            pthread_rwlock_rdlock(&inf->lock);
            struct entry *e = NULL;
            bool same_rv = lh_table_lookup_ex(inf->cache, key, (void **)&e) && e->rv &&
                           obj_rv(item) && strcmp(e->rv, obj_rv(item)) == 0;
            pthread_rwlock_unlock(&inf->lock);
            apply_upsert(inf, item, same_rv);
        }
        kube_resp_clear(&r);
        if (!cont || atomic_load(&inf->stop))
            break;
    }
    free(cont);
    if (rc == 0 && skipped == 0) {
        /* Whatever the cache holds that the server no longer has was deleted. */
        struct collect gone = {0};
        pthread_rwlock_rdlock(&inf->lock);
        for (struct lh_entry *le = inf->cache->head; le; le = le->next)
            if (!lh_table_lookup_entry(seen, lh_entry_k(le)))
                collect_key(&gone, lh_entry_k(le));
        pthread_rwlock_unlock(&inf->lock);
        for (size_t i = 0; i < gone.n; i++) {
            pthread_rwlock_rdlock(&inf->lock);
            struct entry *e = NULL;
            json_object *last =
                lh_table_lookup_ex(inf->cache, gone.v[i], (void **)&e) ? parse_entry(e) : NULL;
            pthread_rwlock_unlock(&inf->lock);
            if (last)
                apply_delete(inf, last);
            json_object_put(last);
        }
        free_strv(gone.v);
        set_last_rv(inf, list_rv);
    }
    if (rc == 0) {
        /* Synced even when partial: the sidecar works with what it has
         * while it lists again. */
        if (!atomic_load(&inf->synced)) {
            pthread_mutex_lock(&inf->mu);
            atomic_store(&inf->synced, true);
            pthread_cond_broadcast(&inf->cv);
            pthread_mutex_unlock(&inf->mu);
        }
    }
    free(list_rv);
    lh_table_free(seen);
    if (rc == 0 && skipped > 0) {
        obs_v(2, "list %s: %zu malformed item(s) skipped; listing again", inf->o.res->resource,
              skipped);
        rc = 1;
    }
    return rc;
}

/* ---- watch ------------------------------------------------------------------------ */

static int on_event(void *ud, const char *type, json_object *obj)
{
    kube_informer *inf = ud;
    if (atomic_load(&inf->stop))
        return -ECANCELED;
    const char *rv = obj_rv(obj);
    bool change =
        strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0 || strcmp(type, "DELETED") == 0;
    if (change && !usable(inf, type, obj)) {
        /* The watch ends without moving past this event: the relist that
         * follows brings the object's state again. */
        return -EBADMSG;
    }
    if (!change && strcmp(type, "BOOKMARK") != 0) {
        /* An unknown type may stand for a change this client cannot read:
         * going past it would lose that change for good. The watch ends
         * here and the next one resumes before it, as client-go's decoder
         * refuses such an event. */
        obs_v(2, "%s: refusing a watch event of unknown type %.32s", inf->o.res->resource, type);
        count_malformed(inf);
        return -EBADMSG;
    }
    if (!change && !kobj_typed(obj, json_type_object)) {
        /* A BOOKMARK carries no name, but its object is still an object. */
        obs_v(2, "%s %s: skipping an event whose object is not an object", inf->o.res->resource,
              type);
        count_malformed(inf);
        return 0;
    }
    /* The event's object is ours to change until the watch frees the
     * event after this call: it is slimmed in place, not copied (a copy
     * and its free cost about a tenth of the provisioner's instructions).
     * The slimming may drop the resourceVersion, so it is kept apart. */
    char *kept_rv = util_strdup(rv);
    if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0)
        apply_upsert(inf, obj, false);
    else if (strcmp(type, "DELETED") == 0)
        apply_delete(inf, obj);
    set_last_rv(inf, kept_rv);
    free(kept_rv);
    return 0;
}

static void sleep_unless_stopped(kube_informer *inf, util_duration d)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(d / UTIL_SECOND);
    until.tv_nsec += (long)(d % UTIL_SECOND);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&inf->mu);
    while (!atomic_load(&inf->stop))
        if (pthread_cond_timedwait(&inf->cv, &inf->mu, &until) != 0)
            break;
    pthread_mutex_unlock(&inf->mu);
}

/* "<role>:<the kind's capitals>": watch:PVC, watch:PV, resync:VA. */
static void name_thread(const kube_informer *inf, const char *role)
{
    char caps[8];
    size_t n = 0;
    for (const char *k = inf->o.res->kind; k && *k && n + 1 < sizeof(caps); k++)
        if (*k >= 'A' && *k <= 'Z')
            caps[n++] = *k;
    caps[n] = '\0';
    util_thread_name("%s:%s", role, caps);
}

/*
 * The watch went quiet after a burst: a fresh thread goes on from the last
 * resourceVersion and this one leaves. False when stopping (the stop joins
 * this thread) or no thread could be started (this one goes on).
 */
static void *run(void *arg);

static bool hand_over(kube_informer *inf)
{
    pthread_mutex_lock(&inf->mu);
    bool ok = false;
    if (!atomic_load(&inf->stop)) {
        inf->resume = true;
        pthread_t th;
        ok = pthread_create(&th, NULL, run, inf) == 0;
        if (ok) {
            inf->th = th;
            obs_v(4, "watch %s: quiet after a burst, going on on a fresh thread",
                  inf->o.res->resource);
        } else {
            inf->resume = false;
        }
    }
    pthread_mutex_unlock(&inf->mu);
    /* Nothing of inf is touched from here: a stop may free it at once. */
    if (ok)
        util_thread_leave_trimmed();
    return ok;
}

static void *run(void *arg)
{
    kube_informer *inf = arg;
    name_thread(inf, "watch");
    util_duration backoff = 0;
    pthread_mutex_lock(&inf->mu);
    bool need_list = !inf->resume;
    inf->resume = false;
    pthread_mutex_unlock(&inf->mu);
    while (!atomic_load(&inf->stop)) {
        if (backoff > 0)
            sleep_unless_stopped(inf, backoff);
        if (atomic_load(&inf->stop))
            break;
        if (need_list) {
            int lrc = relist(inf);
            if (lrc != 0) { /* failed, or partial (1): again after a backoff */
                backoff = backoff ? backoff * 2 : 800 * UTIL_MS;
                if (backoff > 30 * UTIL_SECOND)
                    backoff = 30 * UTIL_SECOND;
                continue;
            }
            need_list = false;
        }
        pthread_rwlock_rdlock(&inf->lock);
        char *rv = util_strdup(inf->last_rv ? inf->last_rv : "");
        pthread_rwlock_unlock(&inf->lock);
        unsigned int rnd = 0;
        if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
            rnd = 0;
        char *ev = url_escape(rv);
        char *path = util_asprintf("%s?watch=true&allowWatchBookmarks=true&resourceVersion=%s&"
                                   "timeoutSeconds=%u%s",
                                   inf->path, ev, 300 + rnd % 300, inf->query);
        free(ev);
        free(rv);
        util_duration start = util_now_mono();
        int rc = kube_watch_run(inf->watch, path, on_event, inf);
        free(path);
        if (rc == -ECANCELED || atomic_load(&inf->stop))
            break;
        if (rc == KUBE_WATCH_QUIET) {
            if (hand_over(inf))
                return NULL;
            backoff = 0;
        } else if (rc == -ERANGE) {
            obs_v(2, "watch %s: resourceVersion too old, relisting", inf->o.res->resource);
            need_list = true;
            backoff = 0;
        } else if (rc == 0 && util_now_mono() - start > UTIL_SECOND) {
            backoff = 0; /* a normal end (timeout): resume */
        } else {
            /* Failures and very short watches back off, then relist once
             * failures repeat, as client-go's reflector does. */
            obs_v(2, "watch %s ended (%d), backing off", inf->o.res->resource, rc);
            backoff = backoff ? backoff * 2 : 800 * UTIL_MS;
            if (backoff > 30 * UTIL_SECOND)
                backoff = 30 * UTIL_SECOND;
            if (rc != 0)
                need_list = true;
        }
    }
    return NULL;
}

static void replay(void *ud, json_object *obj)
{
    kube_informer *inf = ud;
    if (inf->o.handlers.on_update)
        inf->o.handlers.on_update(inf->o.handlers.ud, obj, obj);
}

static void *resync_run(void *arg)
{
    kube_informer *inf = arg;
    name_thread(inf, "resync");
    while (!atomic_load(&inf->stop)) {
        sleep_unless_stopped(inf, inf->o.resync);
        if (atomic_load(&inf->stop))
            break;
        if (atomic_load(&inf->synced))
            kube_informer_each(inf, replay, inf);
    }
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------- */

int kube_informer_new(kube_client *c, const kube_informer_opts *opts, kube_informer **out)
{
    *out = NULL;
    if (!opts || !opts->res)
        return util_err_set(-EINVAL, "informer: no resource given");
    kube_informer *inf = util_calloc(1, sizeof(*inf));
    inf->c = c;
    inf->o = *opts;
    inf->path = kube_path(opts->res, opts->ns, NULL, NULL);
    char *ls = opts->label_selector ? url_escape(opts->label_selector) : NULL;
    char *fs = opts->field_selector ? url_escape(opts->field_selector) : NULL;
    inf->query = util_asprintf("%s%s%s%s", ls ? "&labelSelector=" : "", ls ? ls : "",
                               fs ? "&fieldSelector=" : "", fs ? fs : "");
    free(ls);
    free(fs);
    pthread_rwlock_init(&inf->lock, NULL);
    pthread_mutex_init(&inf->mu, NULL);
    pthread_cond_init(&inf->cv, NULL);
    inf->cache = lh_kchar_table_new(CACHE_TABLE_SIZE, cache_entry_free);
    inf->watch = kube_watch_new(c);
    kube_watch_end_when_quiet(inf->watch, HANDOVER_QUIET, HANDOVER_EVENTS);
    obs_registry *reg = kube_client__metrics(c);
    if (reg) {
        static const char *const labels[] = {"resource", NULL};
        inf->m_malformed = obs_counter_new(reg, "csi_sidecar_malformed_objects_total",
                                           "Number of list items and watch objects skipped "
                                           "because they were not objects with a name, "
                                           "partitioned by resource.",
                                           labels);
        /* The series exists from the start, at 0, for rate() and alerts. */
        const char *const v[] = {opts->res->resource, NULL};
        obs_counter_add(inf->m_malformed, v, 0);
    }
    *out = inf;
    return 0;
}

void kube_informer_trim(kube_informer *inf)
{
    if (!inf)
        return;
    pthread_rwlock_wrlock(&inf->lock);
    kobj_table_shrink(inf->cache, CACHE_TABLE_SIZE);
    for (int i = 0; i < inf->n_idx; i++)
        kobj_table_shrink(inf->idx[i].map, INDEX_TABLE_SIZE);
    pthread_rwlock_unlock(&inf->lock);
}

int kube_informer_add_index(kube_informer *inf, const char *name, kube_index_fn fn)
{
    if (inf->started)
        return util_err_set(-EBUSY, "informer: indexes must be added before start");
    if (inf->n_idx == MAX_INDEXES)
        return util_err_set(-ENOSPC, "informer: at most %d indexes", MAX_INDEXES);
    struct index *ix = &inf->idx[inf->n_idx++];
    ix->name = util_strdup(name);
    ix->fn = fn;
    ix->map = lh_kchar_table_new(INDEX_TABLE_SIZE, keyset_entry_free);
    return 0;
}

int kube_informer_start(kube_informer *inf)
{
    if (inf->started)
        return util_err_set(-EALREADY, "informer already started");
    pthread_t th;
    pthread_mutex_lock(&inf->mu);
    int prc = pthread_create(&th, NULL, run, inf);
    if (prc == 0)
        inf->th = th;
    pthread_mutex_unlock(&inf->mu);
    if (prc != 0)
        return util_err_set(-EAGAIN, "cannot start the informer thread");
    inf->started = true;
    if (inf->o.resync > 0 && pthread_create(&inf->resync_th, NULL, resync_run, inf) != 0)
        inf->o.resync = 0;
    return 0;
}

/* Tests only (not in kube.h), before kube_informer_start: when the watch
 * hands over to a fresh thread. */
void kube_informer__set_handover(kube_informer *inf, util_duration quiet, size_t min_events)
{
    kube_watch_end_when_quiet(inf->watch, quiet, min_events);
}

bool kube_informer_has_synced(kube_informer *inf)
{
    return atomic_load(&inf->synced);
}

int kube_informer_wait_for_sync(kube_informer *inf, util_duration timeout)
{
    util_duration end = util_now_mono() + timeout;
    pthread_mutex_lock(&inf->mu);
    while (!atomic_load(&inf->synced) && !atomic_load(&inf->stop)) {
        util_duration left = end - util_now_mono();
        if (left <= 0)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        util_duration step = left < 100 * UTIL_MS ? left : 100 * UTIL_MS;
        until.tv_nsec += (long)step;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&inf->cv, &inf->mu, &until);
    }
    bool ok = atomic_load(&inf->synced);
    pthread_mutex_unlock(&inf->mu);
    return ok ? 0
              : util_err_set(-ETIMEDOUT, "timed out waiting for the %s cache to sync",
                             inf->o.res->resource);
}

void kube_informer_stop(kube_informer *inf)
{
    if (!inf || !inf->started)
        return;
    pthread_mutex_lock(&inf->mu);
    atomic_store(&inf->stop, true);
    pthread_cond_broadcast(&inf->cv);
    pthread_mutex_unlock(&inf->mu);
    kube_watch_cancel(inf->watch);
    /* Read after stop is set: no hand-over changes it any more. */
    pthread_mutex_lock(&inf->mu);
    pthread_t th = inf->th;
    pthread_mutex_unlock(&inf->mu);
    pthread_join(th, NULL);
    if (inf->o.resync > 0)
        pthread_join(inf->resync_th, NULL);
    inf->started = false;
}

void kube_informer_free(kube_informer *inf)
{
    if (!inf)
        return;
    kube_informer_stop(inf);
    kube_watch_free(inf->watch);
    lh_table_free(inf->cache);
    for (int i = 0; i < inf->n_idx; i++) {
        free(inf->idx[i].name);
        lh_table_free(inf->idx[i].map);
    }
    free(inf->path);
    free(inf->query);
    free(inf->last_rv);
    pthread_rwlock_destroy(&inf->lock);
    pthread_mutex_destroy(&inf->mu);
    pthread_cond_destroy(&inf->cv);
    free(inf);
}
