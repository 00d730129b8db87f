/*
 * The object store and its watch history.
 *
 * One table per type: a json-c linkhash keyed "namespace/name" (or "name"
 * for cluster-scoped types) holding immutable kl_obj references, plus a
 * sorted array of keys rebuilt lazily when the key set changed, so lists
 * come out in key order (as etcd's do) and pages resume by binary search.
 *
 * One rwlock guards everything: writes are short (the caller parsed and
 * serialized what it could beforehand) and take a single global
 * resourceVersion counter, exactly like an etcd revision. Every write also
 * appends an event to a bounded ring; watches are cursors into that ring and
 * get -ERANGE (HTTP 410) once the ring has moved past them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <json-c/linkhash.h>

#include "kube-lite/kl.h"

struct table {
    struct lh_table *map; /* key -> kl_obj* */
    char **sorted;        /* keys in order; valid unless dirty */
    size_t n_sorted;
    bool dirty;
};

struct watcher {
    kl_watch *w;
    struct watcher *next;
};

struct kl_store {
    pthread_rwlock_t lock;
    uint64_t rv;
    size_t n_types;
    const kl_type *types;
    struct table *tables;
    /* tables of the types CRDs serve, added at run time, kept until the end */
    const kl_type **dyn_types;
    struct table **dyn_tables;
    size_t n_dyn;
    /* event ring */
    kl_event *ring;
    size_t cap, first, count;
    uint64_t compacted; /* events with rv <= compacted are gone */
    /* watches to notify, under their own lock so notifying never holds the store */
    pthread_mutex_t wlock;
    struct watcher *watchers;
    pthread_mutex_t sort_lock;
};

struct kl_watch {
    kl_store *s;
    const kl_type *t;
    uint64_t cursor;
    void (*notify)(void *ud);
    void *ud;
};

/* ---- objects ------------------------------------------------------------------- */

kl_obj *kl_obj_ref(kl_obj *o)
{
    if (o)
        __atomic_add_fetch(&o->refs, 1, __ATOMIC_RELAXED);
    return o;
}

void kl_obj_unref(kl_obj *o)
{
    if (!o || __atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    json_object_put(o->obj);
    json_object_put(o->labels);
    free(o->json);
    free(o->ns);
    free(o->name);
    free(o);
}

json_object *kl_obj_tree(const kl_obj *o)
{
    if (o->obj) {
        /* A copy only reads the shared tree; a reference would race on its
         * count (found as an abort under 1,000 parallel claim patches). */
        json_object *copy = NULL;
        if (json_object_deep_copy(o->obj, &copy, NULL) != 0 || !copy)
            abort(); /* out of memory */
        return copy;
    }
    json_object *t = json_tokener_parse(o->json);
    if (!t)
        abort(); /* we wrote this text ourselves */
    return t;
}

/* Types read on every request and few in number keep their parsed tree. */
static bool keeps_tree(const kl_type *t)
{
    static const char *const kept[] = {
        "roles",          "rolebindings", "clusterroles", "clusterrolebindings",
        "storageclasses", "csidrivers",   "namespaces",   "volumesnapshotclasses"};
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        if (strcmp(t->resource, kept[i]) == 0)
            return true;
    return false;
}

/* Takes `obj`: stamps the resourceVersion, serializes once, keeps the tree
 * only for the kept types. */
static kl_obj *obj_new(const kl_type *t, json_object *obj, uint64_t rv)
{
    kl_obj *o = util_calloc(1, sizeof(*o));
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRIu64, rv);
    json_object *meta = NULL;
    if (!json_object_object_get_ex(obj, "metadata", &meta) ||
        !json_object_is_type(meta, json_type_object)) {
        meta = json_object_new_object();
        json_object_object_add(obj, "metadata", meta);
    }
    json_object_object_add(meta, "resourceVersion", json_object_new_string(buf));
    size_t len = 0;
    const char *text = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    o->json = malloc(len + 1);
    if (!o->json)
        abort();
    memcpy(o->json, text, len + 1);
    o->len = len;
    o->rv = rv;
    o->refs = 1;
    json_object *v = NULL;
    if (json_object_object_get_ex(meta, "namespace", &v) &&
        json_object_is_type(v, json_type_string))
        o->ns = util_strdup(json_object_get_string(v));
    if (json_object_object_get_ex(meta, "name", &v) && json_object_is_type(v, json_type_string))
        o->name = util_strdup(json_object_get_string(v));
    else
        o->name = util_strdup("");
    if (json_object_object_get_ex(meta, "labels", &v) && json_object_is_type(v, json_type_object) &&
        json_object_object_length(v) > 0)
        json_object_deep_copy(v, &o->labels, NULL);
    if (keeps_tree(t))
        o->obj = obj;
    else
        json_object_put(obj);
    return o;
}

kl_obj *kl_obj_restamp(const kl_type *t, const kl_obj *o, uint64_t rv)
{
    /* kl_obj_tree hands out a tree of our own (a copy of a kept one). */
    return obj_new(t, kl_obj_tree(o), rv);
}

void kl_objs_free(kl_obj **items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kl_obj_unref(items[i]);
    free(items);
}

void kl_event_clear(kl_event *e)
{
    kl_obj_unref(e->obj);
    kl_obj_unref(e->old);
    memset(e, 0, sizeof(*e));
}

/* ---- store --------------------------------------------------------------------- */

static void entry_free(struct lh_entry *e)
{
    free(lh_entry_k(e));
    kl_obj_unref((kl_obj *)lh_entry_v(e));
}

kl_store *kl_store_new(size_t history)
{
    kl_store *s = util_calloc(1, sizeof(*s));
    pthread_rwlock_init(&s->lock, NULL);
    pthread_mutex_init(&s->wlock, NULL);
    pthread_mutex_init(&s->sort_lock, NULL);
    s->types = kl_types(&s->n_types);
    s->tables = util_calloc(s->n_types, sizeof(*s->tables));
    for (size_t i = 0; i < s->n_types; i++)
        s->tables[i].map = lh_kchar_table_new(64, entry_free);
    s->cap = history ? history : 1;
    s->ring = util_calloc(s->cap, sizeof(*s->ring));
    return s;
}

void kl_store_free(kl_store *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_types; i++) {
        lh_table_free(s->tables[i].map);
        free(s->tables[i].sorted);
    }
    free(s->tables);
    for (size_t i = 0; i < s->n_dyn; i++) {
        lh_table_free(s->dyn_tables[i]->map);
        free(s->dyn_tables[i]->sorted);
        free(s->dyn_tables[i]);
    }
    free(s->dyn_types);
    free(s->dyn_tables);
    for (size_t i = 0; i < s->count; i++)
        kl_event_clear(&s->ring[(s->first + i) % s->cap]);
    free(s->ring);
    while (s->watchers) {
        struct watcher *n = s->watchers->next;
        free(s->watchers);
        s->watchers = n;
    }
    pthread_mutex_destroy(&s->wlock);
    pthread_mutex_destroy(&s->sort_lock);
    pthread_rwlock_destroy(&s->lock);
    free(s);
}

uint64_t kl_store_rv(kl_store *s)
{
    pthread_rwlock_rdlock(&s->lock);
    uint64_t rv = s->rv;
    pthread_rwlock_unlock(&s->lock);
    return rv;
}

static struct table *table_of(kl_store *s, const kl_type *t)
{
    uintptr_t p = (uintptr_t)t, lo = (uintptr_t)s->types;
    if (p >= lo && p < lo + s->n_types * sizeof(*t))
        return &s->tables[t - s->types];
    for (size_t i = 0; i < s->n_dyn; i++)
        if (s->dyn_types[i] == t)
            return s->dyn_tables[i];
    abort(); /* a type never added: a bug */
}

void kl_store_add_type(kl_store *s, const kl_type *t)
{
    struct table *tb = util_calloc(1, sizeof(*tb));
    tb->map = lh_kchar_table_new(64, entry_free);
    pthread_rwlock_wrlock(&s->lock);
    s->dyn_types = realloc(s->dyn_types, (s->n_dyn + 1) * sizeof(const kl_type *));
    s->dyn_tables = realloc(s->dyn_tables, (s->n_dyn + 1) * sizeof(struct table *));
    if (!s->dyn_types || !s->dyn_tables)
        abort();
    s->dyn_types[s->n_dyn] = t;
    s->dyn_tables[s->n_dyn] = tb;
    s->n_dyn++;
    pthread_rwlock_unlock(&s->lock);
}

static void make_key(const kl_type *t, const char *ns, const char *name, char *buf, size_t len)
{
    if (t->namespaced)
        snprintf(buf, len, "%s/%s", ns ? ns : "", name);
    else
        snprintf(buf, len, "%s", name);
}

static kl_obj *lookup(struct table *tb, const char *key)
{
    void *v = NULL;
    if (lh_table_lookup_ex(tb->map, key, &v))
        return v;
    return NULL;
}

kl_obj *kl_store_get(kl_store *s, const kl_type *t, const char *ns, const char *name)
{
    char key[512];
    make_key(t, ns, name, key, sizeof(key));
    pthread_rwlock_rdlock(&s->lock);
    kl_obj *o = kl_obj_ref(lookup(table_of(s, t), key));
    pthread_rwlock_unlock(&s->lock);
    return o;
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Rebuilds the sorted key array under the read lock; sort_lock keeps two
 * readers from rebuilding it at once. */
static void ensure_sorted(kl_store *s, struct table *tb)
{
    pthread_mutex_lock(&s->sort_lock);
    if (tb->dirty || (!tb->sorted && tb->map->count > 0)) {
        free(tb->sorted);
        tb->n_sorted = (size_t)tb->map->count;
        tb->sorted = util_calloc(tb->n_sorted ? tb->n_sorted : 1, sizeof(char *));
        size_t i = 0;
        for (struct lh_entry *e = (tb->map)->head; e; e = e->next)
            tb->sorted[i++] = (char *)lh_entry_k(e);
        qsort(tb->sorted, tb->n_sorted, sizeof(char *), cmp_keys);
        tb->dirty = false;
    }
    pthread_mutex_unlock(&s->sort_lock);
}

/* First index whose key is > `after` (or >= `prefix` when after is NULL). */
static size_t lower_bound(struct table *tb, const char *key, bool strictly_after)
{
    size_t lo = 0, hi = tb->n_sorted;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(tb->sorted[mid], key);
        if (c < 0 || (strictly_after && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void kl_store_list(kl_store *s, const kl_type *t, const char *ns, const char *after, size_t limit,
                   kl_filter_fn filter, void *ud, kl_obj ***items, size_t *n, uint64_t *rv,
                   char **next)
{
    *items = NULL;
    *n = 0;
    *next = NULL;
    char prefix[300] = "";
    if (t->namespaced && ns && *ns)
        snprintf(prefix, sizeof(prefix), "%s/", ns);
    size_t plen = strlen(prefix);

    pthread_rwlock_rdlock(&s->lock);
    struct table *tb = table_of(s, t);
    ensure_sorted(s, tb);
    *rv = s->rv;
    size_t i = after && strcmp(after, prefix) > 0 ? lower_bound(tb, after, true)
                                                  : lower_bound(tb, prefix, false);
    size_t cap = 16, count = 0;
    kl_obj **out = util_calloc(cap, sizeof(kl_obj *));
    for (; i < tb->n_sorted; i++) {
        const char *key = tb->sorted[i];
        if (plen && strncmp(key, prefix, plen) != 0)
            break;
        kl_obj *o = lookup(tb, key);
        if (!o || (filter && !filter(ud, o)))
            continue;
        if (limit && count == limit) {
            *next = util_strdup(tb->sorted[i - 1]);
            break;
        }
        if (count == cap) {
            cap *= 2;
            kl_obj **grown = realloc(out, cap * sizeof(kl_obj *));
            if (!grown)
                abort();
            out = grown;
        }
        out[count++] = kl_obj_ref(o);
    }
    pthread_rwlock_unlock(&s->lock);
    *items = out;
    *n = count;
}

void kl_store_each(kl_store *s, const kl_type *t, const char *ns,
                   bool (*fn)(void *ud, const kl_obj *o), void *ud)
{
    pthread_rwlock_rdlock(&s->lock);
    struct table *tb = table_of(s, t);
    size_t plen = ns ? strlen(ns) : 0;
    for (struct lh_entry *e = (tb->map)->head; e; e = e->next) {
        const char *key = lh_entry_k(e);
        if (t->namespaced && ns && (strncmp(key, ns, plen) != 0 || key[plen] != '/'))
            continue;
        if (fn(ud, lh_entry_v(e)))
            break;
    }
    pthread_rwlock_unlock(&s->lock);
}

/* ---- writes -------------------------------------------------------------------- */

static void append_event(kl_store *s, int type, const kl_type *t, kl_obj *obj, kl_obj *old)
{
    if (s->count == s->cap) {
        kl_event *oldest = &s->ring[s->first];
        s->compacted = oldest->rv;
        kl_event_clear(oldest);
        s->first = (s->first + 1) % s->cap;
        s->count--;
    }
    kl_event *e = &s->ring[(s->first + s->count) % s->cap];
    e->type = type;
    e->t = t;
    e->obj = kl_obj_ref(obj);
    e->old = kl_obj_ref(old);
    e->rv = obj->rv;
    s->count++;
}

static void notify_watchers(kl_store *s, const kl_type *t)
{
    pthread_mutex_lock(&s->wlock);
    for (struct watcher *w = s->watchers; w; w = w->next)
        if (w->w->t == t && w->w->notify)
            w->w->notify(w->w->ud);
    pthread_mutex_unlock(&s->wlock);
}

kl_mut_kind kl_store_mutate(kl_store *s, const kl_type *t, const char *ns, const char *name,
                            kl_mutate_fn fn, void *ud, kl_obj **result, int *code,
                            json_object **status)
{
    char key[512];
    make_key(t, ns, name, key, sizeof(key));
    *result = NULL;
    kl_mut m = {0};

    pthread_rwlock_wrlock(&s->lock);
    struct table *tb = table_of(s, t);
    kl_obj *cur = lookup(tb, key);
    /* fn reads the object as a tree: a private parse when none is kept. */
    kl_obj view = {0};
    if (cur) {
        view = *cur;
        view.obj = kl_obj_tree(cur);
    }
    fn(ud, cur ? &view : NULL, &m);
    switch (m.kind) {
    case KL_MUT_ERROR:
        *code = m.code;
        *status = m.status;
        break;
    case KL_MUT_NOOP:
        *result = kl_obj_ref(cur);
        json_object_put(m.obj);
        break;
    case KL_MUT_PUT: {
        kl_obj *o = obj_new(t, m.obj, ++s->rv);
        if (cur) {
            struct lh_entry *e = lh_table_lookup_entry(tb->map, key);
            append_event(s, KL_MODIFIED, t, o, cur);
            kl_obj_unref(cur);
            lh_entry_set_val(e, o);
        } else {
            lh_table_insert(tb->map, util_strdup(key), o);
            tb->dirty = true;
            append_event(s, KL_ADDED, t, o, NULL);
        }
        *result = kl_obj_ref(o);
        break;
    }
    case KL_MUT_DELETE: {
        json_object_put(m.obj);
        if (!cur) {
            m.kind = KL_MUT_NOOP;
            break;
        }
        /* The shared object is immutable: the last state is a copy that
         * carries the deletion's resourceVersion, as etcd3 watchers show. */
        json_object *copy = NULL;
        json_object_deep_copy(view.obj, &copy, NULL);
        kl_obj *last = obj_new(t, copy, ++s->rv);
        append_event(s, KL_DELETED, t, last, cur);
        *result = last;
        lh_table_delete(tb->map, key);
        tb->dirty = true;
        break;
    }
    }
    pthread_rwlock_unlock(&s->lock);
    json_object_put(view.obj);
    if (m.kind == KL_MUT_PUT || m.kind == KL_MUT_DELETE)
        notify_watchers(s, t);
    return m.kind;
}

/* ---- watches ------------------------------------------------------------------- */

int kl_store_watch(kl_store *s, const kl_type *t, uint64_t from, void (*notify)(void *ud), void *ud,
                   kl_watch **out)
{
    *out = NULL;
    pthread_rwlock_rdlock(&s->lock);
    bool expired = from < s->compacted;
    pthread_rwlock_unlock(&s->lock);
    if (expired)
        return -ERANGE;
    kl_watch *w = util_calloc(1, sizeof(*w));
    w->s = s;
    w->t = t;
    w->cursor = from;
    w->notify = notify;
    w->ud = ud;
    struct watcher *node = util_calloc(1, sizeof(*node));
    node->w = w;
    pthread_mutex_lock(&s->wlock);
    node->next = s->watchers;
    s->watchers = node;
    pthread_mutex_unlock(&s->wlock);
    *out = w;
    return 0;
}

int kl_watch_next(kl_watch *w, kl_event *out, size_t max)
{
    kl_store *s = w->s;
    int n = 0;
    pthread_rwlock_rdlock(&s->lock);
    if (w->cursor < s->compacted) {
        pthread_rwlock_unlock(&s->lock);
        return -ERANGE;
    }
    /* Events are in rv order: binary search for the first one after the cursor. */
    size_t lo = 0, hi = s->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ring[(s->first + mid) % s->cap].rv <= w->cursor)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < s->count && (size_t)n < max; i++) {
        const kl_event *e = &s->ring[(s->first + i) % s->cap];
        w->cursor = e->rv;
        if (e->t != w->t)
            continue;
        out[n] = *e;
        kl_obj_ref(out[n].obj);
        kl_obj_ref(out[n].old);
        n++;
    }
    pthread_rwlock_unlock(&s->lock);
    return n;
}

uint64_t kl_watch_cursor(const kl_watch *w)
{
    return w->cursor;
}

void kl_watch_free(kl_watch *w)
{
    if (!w)
        return;
    kl_store *s = w->s;
    pthread_mutex_lock(&s->wlock);
    for (struct watcher **p = &s->watchers; *p; p = &(*p)->next) {
        if ((*p)->w == w) {
            struct watcher *dead = *p;
            *p = dead->next;
            free(dead);
            break;
        }
    }
    pthread_mutex_unlock(&s->wlock);
    free(w);
}

void kl_store_compact(kl_store *s)
{
    pthread_rwlock_wrlock(&s->lock);
    for (size_t i = 0; i < s->count; i++)
        kl_event_clear(&s->ring[(s->first + i) % s->cap]);
    s->first = 0;
    s->count = 0;
    s->compacted = s->rv;
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_lock(&s->wlock);
    for (struct watcher *w = s->watchers; w; w = w->next)
        if (w->w->notify)
            w->w->notify(w->w->ud);
    pthread_mutex_unlock(&s->wlock);
}

/* ---- persistence ----------------------------------------------------------------- */

int kl_store_save(kl_store *s, const char *path)
{
    char *tmp = util_asprintf("%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        free(tmp);
        return util_err_set(-e, "cannot write %s: %s", path, strerror(e));
    }
    pthread_rwlock_rdlock(&s->lock);
    for (size_t i = 0; i < s->n_types; i++) {
        const kl_type *t = &s->types[i];
        for (struct lh_entry *e = (s->tables[i].map)->head; e; e = e->next) {
            const kl_obj *o = lh_entry_v(e);
            fprintf(f, "%s\t%s\t%s\t%s\n", t->group[0] ? t->group : "core", t->version, t->resource,
                    o->json);
        }
    }
    pthread_rwlock_unlock(&s->lock);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        free(tmp);
        return util_err_set(-e, "cannot write %s: %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}

struct load_ctx {
    json_object *obj;
};

static void load_put(void *ud, const kl_obj *cur, kl_mut *m)
{
    (void)cur;
    struct load_ctx *l = ud;
    m->kind = KL_MUT_PUT;
    m->obj = l->obj;
    l->obj = NULL;
}

int kl_store_load(kl_store *s, const char *path, size_t *n_loaded)
{
    *n_loaded = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : util_err_set(-errno, "cannot read %s: %m", path);
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        char group[128], version[32], resource[128];
        int off = 0;
        if (sscanf(line, "%127[^\t]\t%31[^\t]\t%127[^\t]\t%n", group, version, resource, &off) !=
                3 ||
            off == 0) {
            rc = util_err_set(-EINVAL, "%s:%d: not a saved object", path, lineno);
            break;
        }
        const kl_type *t = kl_type_find(strcmp(group, "core") == 0 ? "" : group, version, resource);
        json_object *obj = json_tokener_parse(line + off);
        json_object *meta = NULL;
        if (!t || !obj || !json_object_object_get_ex(obj, "metadata", &meta)) {
            json_object_put(obj);
            rc = util_err_set(-EINVAL, "%s:%d: not a saved object", path, lineno);
            break;
        }
        json_object *ns = NULL, *name = NULL;
        json_object_object_get_ex(meta, "namespace", &ns);
        json_object_object_get_ex(meta, "name", &name);
        struct load_ctx l = {obj};
        kl_obj *res = NULL;
        int code = 0;
        json_object *st = NULL;
        kl_store_mutate(s, t, ns ? json_object_get_string(ns) : NULL, json_object_get_string(name),
                        load_put, &l, &res, &code, &st);
        json_object_put(l.obj);
        json_object_put(st);
        kl_obj_unref(res);
        (*n_loaded)++;
    }
    free(line);
    fclose(f);
    return rc;
}
