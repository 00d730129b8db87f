/*
 * The driver's state: volumes and snapshots in memory under one mutex, the
 * whole of it written to <state-dir>/state.json after every mutation, and
 * <state-dir>/status.json (the same document plus call counters) after
 * every call, so that tests can read what the driver holds.
 *
 * Durability is by group commit: a call that changed the model (or only
 * counted itself) waits in drv_store_commit() until a writer has put a
 * snapshot at least that new on disk. The first waiter becomes the writer;
 * calls arriving meanwhile share its next write. When the state changed the
 * document is written once, fsync'ed, and hard-linked to both names, so one
 * serialisation and one fsync serve both files.
 *
 * The JSON is produced by hand (json-c's object tree costs too much for a
 * document rewritten thousands of times a second) and read back with json-c.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "driver.h"
#include "kobj/kobj.h"
#include "obs/obs.h"

struct drv_store {
    char *dir;
    char *state_path, *state_tmp;
    char *status_path, *status_tmp;
    bool sync;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    drv_model model;
    int64_t calls[DRV_N_METHODS];
    uint64_t mut_seq, durable_seq; /* mutations made / on disk */
    uint64_t call_seq, status_seq; /* calls counted / in status.json */
    bool writing;                  /* a commit leader is writing */
    size_t doc_hint;               /* size of the last document */
};

/* ---- key/value lists and capabilities -------------------------------------- */

void drv_kvs_add(drv_kvs *k, const char *key, const char *value)
{
    drv_kv *n = realloc(k->items, (k->n + 1) * sizeof(*n));
    if (!n)
        abort();
    k->items = n;
    k->items[k->n].key = util_strdup(key);
    k->items[k->n].value = util_strdup(value);
    k->n++;
}

void drv_kvs_set(drv_kvs *k, const char *key, const char *value)
{
    for (size_t i = 0; i < k->n; i++) {
        if (strcmp(k->items[i].key, key) == 0) {
            free(k->items[i].value);
            k->items[i].value = util_strdup(value);
            return;
        }
    }
    drv_kvs_add(k, key, value);
}

const char *drv_kvs_get(const drv_kvs *k, const char *key)
{
    for (size_t i = 0; i < k->n; i++)
        if (strcmp(k->items[i].key, key) == 0)
            return k->items[i].value;
    return NULL;
}

bool drv_kvs_equal(const drv_kvs *a, const drv_kvs *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        const char *v = drv_kvs_get(b, a->items[i].key);
        if (!v || strcmp(v, a->items[i].value) != 0)
            return false;
    }
    return true;
}

void drv_kvs_copy(drv_kvs *dst, const drv_kvs *src)
{
    for (size_t i = 0; i < src->n; i++)
        drv_kvs_add(dst, src->items[i].key, src->items[i].value);
}

void drv_kvs_free(drv_kvs *k)
{
    for (size_t i = 0; i < k->n; i++) {
        free(k->items[i].key);
        free(k->items[i].value);
    }
    free(k->items);
    k->items = NULL;
    k->n = 0;
}

void drv_cap_copy(drv_cap *dst, const drv_cap *src)
{
    *dst = *src;
    dst->fs_type = util_strdup(src->fs_type ? src->fs_type : "");
}

void drv_cap_free(drv_cap *c)
{
    free(c->fs_type);
    c->fs_type = NULL;
}

bool drv_cap_equal(const drv_cap *a, const drv_cap *b)
{
    return a->access_type == b->access_type && a->mode == b->mode &&
           strcmp(a->fs_type ? a->fs_type : "", b->fs_type ? b->fs_type : "") == 0 &&
           a->flags_hash == b->flags_hash;
}

/* ---- the model ---------------------------------------------------------------- */

drv_volume *drv_model_volume(const drv_model *m, const char *id)
{
    for (size_t i = 0; i < m->n_vols; i++)
        if (strcmp(m->vols[i]->id, id) == 0)
            return m->vols[i];
    return NULL;
}

drv_volume *drv_model_volume_by_name(const drv_model *m, const char *name)
{
    for (size_t i = 0; i < m->n_vols; i++)
        if (strcmp(m->vols[i]->name, name) == 0)
            return m->vols[i];
    return NULL;
}

drv_snapshot *drv_model_snapshot(const drv_model *m, const char *id)
{
    for (size_t i = 0; i < m->n_snaps; i++)
        if (strcmp(m->snaps[i]->id, id) == 0)
            return m->snaps[i];
    return NULL;
}

drv_snapshot *drv_model_snapshot_by_name(const drv_model *m, const char *name)
{
    for (size_t i = 0; i < m->n_snaps; i++)
        if (strcmp(m->snaps[i]->name, name) == 0)
            return m->snaps[i];
    return NULL;
}

static void *grow(void *arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return arr;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    void *r = realloc(arr, n * elem);
    if (!r)
        abort();
    *cap = n;
    return r;
}

void drv_model_add_volume(drv_model *m, drv_volume *v)
{
    m->vols = grow(m->vols, &m->cap_vols, m->n_vols + 1, sizeof(void *));
    m->vols[m->n_vols++] = v;
    m->used += v->capacity;
}

void drv_model_add_snapshot(drv_model *m, drv_snapshot *s)
{
    m->snaps = grow(m->snaps, &m->cap_snaps, m->n_snaps + 1, sizeof(void *));
    m->snaps[m->n_snaps++] = s;
}

void drv_model_remove_volume(drv_model *m, drv_volume *v)
{
    for (size_t i = 0; i < m->n_vols; i++) {
        if (m->vols[i] == v) {
            memmove(&m->vols[i], &m->vols[i + 1], (m->n_vols - i - 1) * sizeof(void *));
            m->n_vols--;
            m->used -= v->capacity;
            drv_volume_free(v);
            return;
        }
    }
}

void drv_model_remove_snapshot(drv_model *m, drv_snapshot *s)
{
    for (size_t i = 0; i < m->n_snaps; i++) {
        if (m->snaps[i] == s) {
            memmove(&m->snaps[i], &m->snaps[i + 1], (m->n_snaps - i - 1) * sizeof(void *));
            m->n_snaps--;
            drv_snapshot_free(s);
            return;
        }
    }
}

char *drv_model_new_id(const drv_model *m, const char *prefix)
{
    for (;;) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = (uint64_t)util_now_mono() * 0x9e3779b97f4a7c15ull;
        char *id = util_asprintf("%s-%016" PRIx64, prefix, r);
        if (!drv_model_volume(m, id) && !drv_model_snapshot(m, id))
            return id;
        free(id);
    }
}

void drv_volume_free(drv_volume *v)
{
    if (!v)
        return;
    free(v->id);
    free(v->name);
    free(v->path);
    free(v->src_id);
    drv_kvs_free(&v->params);
    drv_kvs_free(&v->mutable_params);
    drv_kvs_free(&v->topology);
    for (size_t i = 0; i < v->n_pubs; i++) {
        free(v->pubs[i].node_id);
        drv_cap_free(&v->pubs[i].cap);
    }
    free(v->pubs);
    free(v->staged_path);
    drv_cap_free(&v->staged_cap);
    for (size_t i = 0; i < v->n_npubs; i++) {
        free(v->npubs[i].target_path);
        drv_cap_free(&v->npubs[i].cap);
    }
    free(v->npubs);
    free(v->json);
    free(v);
}

void drv_snapshot_free(drv_snapshot *s)
{
    if (!s)
        return;
    free(s->id);
    free(s->name);
    free(s->source_volume_id);
    free(s);
}

drv_pub *drv_volume_pub(const drv_volume *v, const char *node_id)
{
    for (size_t i = 0; i < v->n_pubs; i++)
        if (strcmp(v->pubs[i].node_id, node_id) == 0)
            return &v->pubs[i];
    return NULL;
}

drv_npub *drv_volume_npub(const drv_volume *v, const char *target_path)
{
    for (size_t i = 0; i < v->n_npubs; i++)
        if (strcmp(v->npubs[i].target_path, target_path) == 0)
            return &v->npubs[i];
    return NULL;
}

static void model_clear(drv_model *m)
{
    for (size_t i = 0; i < m->n_vols; i++)
        drv_volume_free(m->vols[i]);
    for (size_t i = 0; i < m->n_snaps; i++)
        drv_snapshot_free(m->snaps[i]);
    free(m->vols);
    free(m->snaps);
    memset(m, 0, sizeof(*m));
}

/* ---- JSON output ------------------------------------------------------------------ */

typedef struct jbuf {
    char *p;
    size_t len, cap;
} jbuf;

static void jb_raw(jbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->len + n + 1)
            c *= 2;
        char *np = realloc(b->p, c);
        if (!np)
            abort();
        b->p = np;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void jb_lit(jbuf *b, const char *s)
{
    jb_raw(b, s, strlen(s));
}

/* A JSON string. Requests are checked for valid UTF-8 before they reach the
 * model, so only quotes, backslashes and control characters need escapes. */
static void jb_str(jbuf *b, const char *s)
{
    jb_raw(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jb_raw(b, run, (size_t)(s - run));
        char esc[8];
        if (c == '"' || c == '\\')
            snprintf(esc, sizeof(esc), "\\%c", c);
        else
            snprintf(esc, sizeof(esc), "\\u%04x", c);
        jb_lit(b, esc);
        run = s + 1;
    }
    jb_raw(b, run, (size_t)(s - run));
    jb_raw(b, "\"", 1);
}

static void jb_key(jbuf *b, bool *first, const char *key)
{
    if (!*first)
        jb_raw(b, ",", 1);
    *first = false;
    jb_str(b, key);
    jb_raw(b, ":", 1);
}

static void jb_kstr(jbuf *b, bool *first, const char *key, const char *value)
{
    jb_key(b, first, key);
    jb_str(b, value);
}

static void jb_ki64(jbuf *b, bool *first, const char *key, int64_t v)
{
    char num[32];
    snprintf(num, sizeof(num), "%" PRId64, v);
    jb_key(b, first, key);
    jb_lit(b, num);
}

static void jb_kbool(jbuf *b, bool *first, const char *key, bool v)
{
    jb_key(b, first, key);
    jb_lit(b, v ? "true" : "false");
}

static void jb_kvs(jbuf *b, const drv_kvs *k)
{
    bool first = true;
    jb_raw(b, "{", 1);
    for (size_t i = 0; i < k->n; i++)
        jb_kstr(b, &first, k->items[i].key, k->items[i].value);
    jb_raw(b, "}", 1);
}

static void jb_cap_fields(jbuf *b, bool *first, const drv_cap *c)
{
    char hash[24];
    jb_kstr(b, first, "access_type", drv_access_name(c->access_type));
    jb_kstr(b, first, "access_mode", drv_mode_name(c->mode));
    jb_kstr(b, first, "fs_type", c->fs_type ? c->fs_type : "");
    snprintf(hash, sizeof(hash), "%016" PRIx64, c->flags_hash);
    jb_kstr(b, first, "mount_flags_hash", hash);
}

static void jb_volume(jbuf *b, const drv_volume *v)
{
    bool f = true;
    jb_raw(b, "{", 1);
    jb_kstr(b, &f, "id", v->id);
    jb_kstr(b, &f, "name", v->name);
    jb_ki64(b, &f, "capacity_bytes", v->capacity);
    jb_kstr(b, &f, "path", v->path);
    jb_kstr(b, &f, "access_type", drv_access_name(v->access_type));
    jb_key(b, &f, "parameters");
    jb_kvs(b, &v->params);
    if (v->mutable_params.n) {
        jb_key(b, &f, "mutable_parameters");
        jb_kvs(b, &v->mutable_params);
    }
    if (v->src_type != DRV_SRC_NONE) {
        bool sf = true;
        jb_key(b, &f, "source");
        jb_raw(b, "{", 1);
        jb_kstr(b, &sf, "type", v->src_type == DRV_SRC_SNAPSHOT ? "snapshot" : "volume");
        jb_kstr(b, &sf, "id", v->src_id);
        jb_raw(b, "}", 1);
    }
    if (v->topology.n) {
        jb_key(b, &f, "topology");
        jb_kvs(b, &v->topology);
    }
    jb_key(b, &f, "published_nodes");
    jb_raw(b, "[", 1);
    for (size_t i = 0; i < v->n_pubs; i++) {
        if (i)
            jb_raw(b, ",", 1);
        jb_str(b, v->pubs[i].node_id);
    }
    jb_raw(b, "]", 1);
    jb_key(b, &f, "publications");
    jb_raw(b, "[", 1);
    for (size_t i = 0; i < v->n_pubs; i++) {
        bool pf = true;
        jb_lit(b, i ? ",{" : "{");
        jb_kstr(b, &pf, "node_id", v->pubs[i].node_id);
        jb_kbool(b, &pf, "readonly", v->pubs[i].readonly);
        jb_cap_fields(b, &pf, &v->pubs[i].cap);
        jb_raw(b, "}", 1);
    }
    jb_raw(b, "]", 1);
    if (v->staged_path) {
        bool sf = true;
        jb_key(b, &f, "staged");
        jb_raw(b, "{", 1);
        jb_kstr(b, &sf, "staging_target_path", v->staged_path);
        jb_cap_fields(b, &sf, &v->staged_cap);
        jb_raw(b, "}", 1);
    }
    jb_key(b, &f, "node_publications");
    jb_raw(b, "[", 1);
    for (size_t i = 0; i < v->n_npubs; i++) {
        bool pf = true;
        jb_lit(b, i ? ",{" : "{");
        jb_kstr(b, &pf, "target_path", v->npubs[i].target_path);
        jb_kbool(b, &pf, "readonly", v->npubs[i].readonly);
        jb_cap_fields(b, &pf, &v->npubs[i].cap);
        jb_raw(b, "}", 1);
    }
    jb_raw(b, "]}", 2);
}

static void jb_snapshot(jbuf *b, const drv_snapshot *s)
{
    bool f = true;
    jb_raw(b, "{", 1);
    jb_kstr(b, &f, "id", s->id);
    jb_kstr(b, &f, "name", s->name);
    jb_kstr(b, &f, "source_volume_id", s->source_volume_id);
    jb_ki64(b, &f, "size_bytes", s->size);
    jb_ki64(b, &f, "creation_time_ns", s->created_ns);
    jb_raw(b, "}", 1);
}

/* The whole document; the caller holds the lock. Each volume's JSON is
 * kept until drv_store_changed() says it changed, so a write copies
 * fragments instead of re-rendering thousands of unchanged volumes. */
static void serialize(drv_store *s, jbuf *b)
{
    bool f = true;
    /* Sized like the last one: no regrowing a multi-megabyte buffer. */
    if (s->doc_hint && !b->p) {
        b->cap = s->doc_hint + s->doc_hint / 8 + 4096;
        b->p = malloc(b->cap);
        if (!b->p)
            abort();
    }
    jb_lit(b, "{\"version\":1,\"calls\":{");
    for (int i = 0; i < DRV_N_METHODS; i++)
        if (s->calls[i])
            jb_ki64(b, &f, drv_method_name((drv_method)i), s->calls[i]);
    jb_lit(b, "},\n\"volumes\":[");
    for (size_t i = 0; i < s->model.n_vols; i++) {
        drv_volume *v = s->model.vols[i];
        if (!v->json) {
            jbuf one = {0};
            jb_volume(&one, v);
            v->json = one.p;
            v->json_len = one.len;
        }
        jb_lit(b, i ? ",\n" : "\n");
        jb_raw(b, v->json, v->json_len);
    }
    jb_lit(b, "],\n\"snapshots\":[");
    for (size_t i = 0; i < s->model.n_snaps; i++) {
        jb_lit(b, i ? ",\n" : "\n");
        jb_snapshot(b, s->model.snaps[i]);
    }
    jb_lit(b, "]}\n");
    s->doc_hint = b->len;
}

/* ---- files ---------------------------------------------------------------------- */

/* state.json (when `state` is set) and status.json, each replaced whole. */
static int write_docs(const drv_store *s, const jbuf *doc, bool state)
{
    int r;
    if (!state) {
        r = drvkit_write_file(s->status_tmp, doc->p, doc->len, false);
        if (r == 0 && rename(s->status_tmp, s->status_path) < 0)
            r = util_err_set(-errno, "cannot rename %s: %m", s->status_tmp);
        return r;
    }
    r = drvkit_write_file(s->state_tmp, doc->p, doc->len, s->sync);
    if (r < 0)
        return r;
    /* The same inode under the status name: no second write. */
    if (unlink(s->status_tmp) < 0 && errno != ENOENT)
        return util_err_set(-errno, "cannot remove %s: %m", s->status_tmp);
    if (link(s->state_tmp, s->status_tmp) < 0)
        return util_err_set(-errno, "cannot link %s: %m", s->status_tmp);
    if (rename(s->state_tmp, s->state_path) < 0)
        return util_err_set(-errno, "cannot rename %s: %m", s->state_tmp);
    if (rename(s->status_tmp, s->status_path) < 0)
        obs_warn("cannot rename %s: %m", s->status_tmp);
    return s->sync ? drvkit_sync_dir(s->dir) : 0;
}

/* ---- loading -------------------------------------------------------------------- */

/* A missing or mistyped number reads as 0, as Go's zero value. */
static int64_t ji64(json_object *o, const char *key)
{
    int64_t v = 0;
    return kobj_int64(o, key, &v) == 0 ? v : 0;
}

static void load_kvs(json_object *o, const char *key, drv_kvs *out)
{
    json_object *m = kobj_obj(o, key);
    if (!m)
        return;
    json_object_object_foreach(m, k, v)
    {
        if (json_object_is_type(v, json_type_string))
            drv_kvs_add(out, k, json_object_get_string(v));
    }
}

static void load_cap(json_object *o, drv_cap *c)
{
    const char *fs = kobj_str(o, "fs_type");
    const char *hash = kobj_str(o, "mount_flags_hash");
    c->access_type = drv_access_from_name(kobj_str(o, "access_type"));
    c->mode = drv_mode_from_name(kobj_str(o, "access_mode"));
    c->fs_type = util_strdup(fs ? fs : "");
    c->flags_hash = hash ? strtoull(hash, NULL, 16) : 0;
}

/* The controller publications of the volume document `o` into `v` (none yet). */
static void load_pubs(json_object *o, drv_volume *v)
{
    json_object *arr = kobj_arr(o, "publications");
    size_t n = kobj_len(arr);
    if (!arr)
        return;
    v->pubs = util_calloc(n ? n : 1, sizeof(*v->pubs));
    for (size_t i = 0; i < n; i++) {
        json_object *p = kobj_at(arr, i);
        const char *node = kobj_str(p, "node_id");
        if (!node)
            continue;
        drv_pub *pub = &v->pubs[v->n_pubs++];
        pub->node_id = util_strdup(node);
        pub->readonly = kobj_bool(p, "readonly", false);
        load_cap(p, &pub->cap);
    }
}

static int load_volume(drv_store *s, json_object *o)
{
    const char *id = kobj_str(o, "id"), *name = kobj_str(o, "name");
    if (!id || !name || strchr(id, '/') || id[0] == '.')
        return util_err_set(-EINVAL, "a volume without a valid id or name");
    drv_volume *v = util_calloc(1, sizeof(*v));
    v->id = util_strdup(id);
    v->name = util_strdup(name);
    v->path = util_asprintf("%s/volumes/%s", s->dir, id);
    v->capacity = ji64(o, "capacity_bytes");
    v->access_type = drv_access_from_name(kobj_str(o, "access_type"));
    load_kvs(o, "parameters", &v->params);
    load_kvs(o, "mutable_parameters", &v->mutable_params);
    load_kvs(o, "topology", &v->topology);
    json_object *src = kobj_obj(o, "source"), *arr, *st;
    if (kobj_str(src, "id")) {
        const char *type = kobj_str(src, "type");
        v->src_type = type && strcmp(type, "snapshot") == 0 ? DRV_SRC_SNAPSHOT : DRV_SRC_VOLUME;
        v->src_id = util_strdup(kobj_str(src, "id"));
    }
    load_pubs(o, v);
    if ((st = kobj_obj(o, "staged")) != NULL && kobj_str(st, "staging_target_path")) {
        v->staged_path = util_strdup(kobj_str(st, "staging_target_path"));
        load_cap(st, &v->staged_cap);
    }
    if ((arr = kobj_arr(o, "node_publications")) != NULL) {
        size_t n = kobj_len(arr);
        v->npubs = util_calloc(n ? n : 1, sizeof(*v->npubs));
        for (size_t i = 0; i < n; i++) {
            json_object *p = kobj_at(arr, i);
            const char *target = kobj_str(p, "target_path");
            if (!target)
                continue;
            drv_npub *np = &v->npubs[v->n_npubs++];
            np->target_path = util_strdup(target);
            np->readonly = kobj_bool(p, "readonly", false);
            load_cap(p, &np->cap);
        }
    }
    /* A crash between removing a volume's directory and persisting the
     * removal leaves the volume without storage: give it back. */
    int r = drvkit_mkdir_p(v->path, 0755);
    if (r < 0) {
        drv_volume_free(v);
        return util_err_set(r, "cannot create %s/volumes/%s: %s", s->dir, id, strerror(-r));
    }
    drv_model_add_volume(&s->model, v);
    return 0;
}

drv_volume *drv_store_import(drv_store *s, drv_model *m, const char *backend_dir, const char *id)
{
    drv_volume *v = drv_model_volume(m, id);
    char *path = util_asprintf("%s/state.json", backend_dir);
    json_object *root = json_object_from_file(path);
    json_object *arr = kobj_arr(root, "volumes"), *found = NULL;
    for (size_t i = 0; !found && i < kobj_len(arr); i++) {
        const char *vid = kobj_str(kobj_at(arr, i), "id");
        if (vid && strcmp(vid, id) == 0)
            found = kobj_at(arr, i);
    }
    const char *name = kobj_str(found, "name");
    if (found && name && !strchr(id, '/') && id[0] != '.') {
        if (!v) {
            v = util_calloc(1, sizeof(*v));
            v->id = util_strdup(id);
            v->name = util_strdup(name);
            v->capacity = ji64(found, "capacity_bytes");
            v->access_type = drv_access_from_name(kobj_str(found, "access_type"));
            load_kvs(found, "parameters", &v->params);
            load_kvs(found, "mutable_parameters", &v->mutable_params);
            load_kvs(found, "topology", &v->topology);
            drv_model_add_volume(m, v);
            obs_v(2, "volume %s found in %s", id, path);
        } else {
            /* The size is the backend's too: ControllerExpandVolume grew
             * it there since. */
            int64_t cap = ji64(found, "capacity_bytes");
            m->used += cap - v->capacity;
            v->capacity = cap;
        }
        /* The storage and the controller publications are the backend's:
         * the device path ControllerPublish returned names its folder. */
        free(v->path);
        v->path = util_asprintf("%s/volumes/%s", backend_dir, id);
        for (size_t i = 0; i < v->n_pubs; i++) {
            free(v->pubs[i].node_id);
            drv_cap_free(&v->pubs[i].cap);
        }
        free(v->pubs);
        v->pubs = NULL;
        v->n_pubs = 0;
        load_pubs(found, v);
        drv_store_changed(s, v);
    }
    json_object_put(root);
    free(path);
    return v;
}

static int load_state(drv_store *s)
{
    if (access(s->state_path, F_OK) < 0)
        return errno == ENOENT ? 0 : util_err_set(-errno, "cannot read %s: %m", s->state_path);
    json_object *root = json_object_from_file(s->state_path);
    if (!root || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return util_err_set(-EINVAL, "%s is not a JSON object; move it away to start empty",
                            s->state_path);
    }
    int r = 0;
    json_object *arr = kobj_arr(root, "volumes");
    for (size_t i = 0; r == 0 && i < kobj_len(arr); i++)
        r = load_volume(s, kobj_at(arr, i));
    arr = kobj_arr(root, "snapshots");
    if (r == 0) {
        for (size_t i = 0; i < kobj_len(arr); i++) {
            json_object *o = kobj_at(arr, i);
            const char *id = kobj_str(o, "id"), *name = kobj_str(o, "name");
            const char *src = kobj_str(o, "source_volume_id");
            if (!id || !name || !src)
                continue;
            drv_snapshot *sn = util_calloc(1, sizeof(*sn));
            sn->id = util_strdup(id);
            sn->name = util_strdup(name);
            sn->source_volume_id = util_strdup(src);
            sn->size = ji64(o, "size_bytes");
            sn->created_ns = ji64(o, "creation_time_ns");
            drv_model_add_snapshot(&s->model, sn);
        }
    }
    json_object_put(root);
    if (r < 0)
        return util_err_set(r, "%s: %s", s->state_path, util_err_last());
    return 0;
}

/* ---- the store ---------------------------------------------------------------------- */

int drv_store_new(const char *state_dir, bool sync, drv_store **out)
{
    *out = NULL;
    drv_store *s = util_calloc(1, sizeof(*s));
    s->dir = util_strdup(state_dir);
    s->state_path = util_asprintf("%s/state.json", state_dir);
    s->state_tmp = util_asprintf("%s/.state.json.tmp", state_dir);
    s->status_path = util_asprintf("%s/status.json", state_dir);
    s->status_tmp = util_asprintf("%s/.status.json.tmp", state_dir);
    s->sync = sync;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    int r = 0;
    for (int i = 0; r == 0 && i < 2; i++) {
        const char *sub = i == 0 ? "volumes" : "snapshots";
        char *dir = util_asprintf("%s/%s", state_dir, sub);
        r = drvkit_mkdir_p(dir, 0755);
        free(dir);
        if (r < 0)
            r = util_err_set(r, "cannot create %s/%s: %s", state_dir, sub, strerror(-r));
    }
    if (r == 0)
        r = load_state(s);
    if (r == 0) {
        /* Tests read status.json as soon as the socket is up. */
        jbuf doc = {0};
        serialize(s, &doc);
        r = write_docs(s, &doc, false);
        free(doc.p);
    }
    if (r < 0) {
        drv_store_free(s);
        return r;
    }
    obs_info("state: %zu volumes, %zu snapshots from %s", s->model.n_vols, s->model.n_snaps,
             s->state_path);
    *out = s;
    return 0;
}

void drv_store_free(drv_store *s)
{
    if (!s)
        return;
    model_clear(&s->model);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cond);
    free(s->dir);
    free(s->state_path);
    free(s->state_tmp);
    free(s->status_path);
    free(s->status_tmp);
    free(s);
}

drv_model *drv_store_lock(drv_store *s)
{
    pthread_mutex_lock(&s->mu);
    return &s->model;
}

void drv_store_unlock(drv_store *s)
{
    pthread_mutex_unlock(&s->mu);
}

void drv_store_changed(drv_store *s, drv_volume *v)
{
    if (v) {
        free(v->json);
        v->json = NULL;
    }
    s->mut_seq++;
}

void drv_store_count_call(drv_store *s, drv_method m)
{
    pthread_mutex_lock(&s->mu);
    s->calls[m]++;
    s->call_seq++;
    pthread_mutex_unlock(&s->mu);
}

const char *drv_store_dir(const drv_store *s)
{
    return s->dir;
}

void drv_store_commit(drv_store *s)
{
    pthread_mutex_lock(&s->mu);
    /* Everything this call may have seen or done is at or below these. */
    uint64_t want_mut = s->mut_seq, want_call = s->call_seq;
    while (s->durable_seq < want_mut || s->status_seq < want_call) {
        if (s->writing) {
            pthread_cond_wait(&s->cond, &s->mu);
            continue;
        }
        s->writing = true;
        uint64_t mut = s->mut_seq, call = s->call_seq;
        bool state = s->durable_seq < mut;
        jbuf doc = {0};
        serialize(s, &doc);
        pthread_mutex_unlock(&s->mu);

        int r = write_docs(s, &doc, state);
        free(doc.p);
        if (r < 0 && state) {
            /* Callers were promised nothing yet; dying keeps it that way. */
            obs_error("cannot persist the driver state, exiting: %s", util_err_last());
            _exit(2);
        }
        if (r < 0)
            obs_warn("cannot write status: %s", util_err_last());

        pthread_mutex_lock(&s->mu);
        if (state)
            s->durable_seq = mut;
        s->status_seq = call;
        s->writing = false;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->mu);
}
