/*
 * The REST API: one request in, one response (or a watch stream) out, with
 * kube-apiserver's paths, verbs, status codes and Status bodies. No HTTP
 * here (server.c carries the bytes), so every rule can be exercised directly.
 *
 * Writes are read-modify-write closures run by kl_store_mutate under the
 * store's write lock: resourceVersion preconditions, finalizers and the
 * "last finalizer removed while deleting" rule are decided against the
 * current object atomically.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"
#include "obs/obs.h"

#define MAX_SEGS 10

struct kl_api {
    kl_store *store;
    kl_api_opts opts;
    kl_crds *crds;                             /* the types CRDs serve */
    pthread_mutex_t disc_lock;                 /* guards disc */
    kl_discovery *disc;                        /* rebuilt when the CRD types change */
    unsigned char token_key[KL_TOKEN_KEY_LEN]; /* signs TokenRequest answers */
};

/* ---- small helpers ----------------------------------------------------------- */

/* json-c's copy and compare take non-const pointers but modify nothing. */
static json_object *jcopy(const json_object *src)
{
    json_object *dst = NULL;
    if (src && json_object_deep_copy((json_object *)src, &dst, NULL) != 0)
        abort();
    return dst;
}

static bool jequal(const json_object *a, const json_object *b)
{
    return json_object_equal((json_object *)a, (json_object *)b) != 0;
}

/* metadata, created when absent; bodies were shape-checked, so a metadata
 * of another type only comes from kube-lite itself and is replaced. */
static json_object *meta_of(json_object *obj)
{
    json_object *m = kobj_ensure_obj(obj, "metadata");
    if (!m) {
        m = json_object_new_object();
        kobj_set(obj, "metadata", json_object_get(m));
        json_object_put(m);
    }
    return m;
}

/*
 * kube-apiserver decodes into Go structs whose metadata lists and maps are
 * omitempty: an emptied finalizers list (say, by a JSON patch removing the
 * last entry), labels or annotations map, ownerReferences or managedFields
 * list, and any null member, is not stored and not returned.
 */
static void prune_meta(json_object *obj)
{
    static const char *const lists[] = {"finalizers", "ownerReferences", "managedFields"};
    static const char *const maps[] = {"labels", "annotations"};
    json_object *m = kobj_obj(obj, "metadata");
    if (!m)
        return;
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        json_object *v = kobj_get(m, lists[i]);
        if (json_object_object_get_ex(m, lists[i], NULL) &&
            (!v || (json_object_is_type(v, json_type_array) && kobj_len(v) == 0)))
            json_object_object_del(m, lists[i]);
    }
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        json_object *v = kobj_get(m, maps[i]);
        if (json_object_object_get_ex(m, maps[i], NULL) &&
            (!v || (json_object_is_type(v, json_type_object) && json_object_object_length(v) == 0)))
            json_object_object_del(m, maps[i]);
    }
    /* Other null members (a merge patch's null already deletes). */
    char *drop[32];
    size_t n = 0;
    json_object_object_foreach(m, key, val)
    {
        if (!val && n < 32)
            drop[n++] = key;
    }
    for (size_t i = 0; i < n; i++)
        json_object_object_del(m, drop[i]);
}

static void now_rfc3339(char *buf, size_t len)
{
    util_time_rfc3339(time(NULL), buf, len);
}

static void uuid4(char out[37])
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        abort();
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* The answer `body` as JSON text and a newline. kobj's writer only reads
 * the tree (json-c's printer caches its text in the object), so a document
 * many request threads share, such as discovery's, is written in place. */
static void set_body_shared(kl_response *r, int code, const json_object *body)
{
    size_t len = 0;
    char *text = kobj_to_text(body, &len);
    r->code = code;
    r->body = realloc(text, len + 2);
    if (!r->body)
        abort();
    r->body[len] = '\n';
    r->body[len + 1] = '\0';
    r->len = len + 1;
    r->content_type = "application/json";
}

/* set_body_shared, then `body` put. */
static void set_body(kl_response *r, int code, json_object *body)
{
    set_body_shared(r, code, body);
    json_object_put(body);
}

static void set_raw(kl_response *r, int code, const char *ctype, const char *text, size_t len)
{
    r->code = code;
    r->body = malloc(len + 1);
    if (!r->body)
        abort();
    memcpy(r->body, text, len);
    r->body[len] = '\0';
    r->len = len;
    r->content_type = ctype;
}

static void set_obj(kl_response *r, int code, const kl_obj *o)
{
    set_raw(r, code, "application/json", o->json, o->len);
}

/* A metav1.Status; `t`/`name` fill details as kube-apiserver does. */
static json_object *status_new(int code, const char *reason, const kl_type *t, const char *name,
                               const char *fmt, ...) UTIL_ATTR_PRINTF(5, 6);
static json_object *status_new(int code, const char *reason, const kl_type *t, const char *name,
                               const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_object *st = json_object_new_object();
    json_object_object_add(st, "kind", json_object_new_string("Status"));
    json_object_object_add(st, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(st, "metadata", json_object_new_object());
    json_object_object_add(st, "status", json_object_new_string("Failure"));
    json_object_object_add(st, "message", json_object_new_string(msg));
    if (reason)
        json_object_object_add(st, "reason", json_object_new_string(reason));
    json_object *details = json_object_new_object();
    if (name && *name)
        json_object_object_add(details, "name", json_object_new_string(name));
    if (t) {
        if (t->group[0])
            json_object_object_add(details, "group", json_object_new_string(t->group));
        json_object_object_add(details, "kind", json_object_new_string(t->resource));
    }
    /* Empty details are left out, as kube-apiserver's 401 body has none. */
    if (reason && json_object_object_length(details) > 0)
        json_object_object_add(st, "details", details);
    else
        json_object_put(details);
    json_object_object_add(st, "code", json_object_new_int(code));
    return st;
}

static void fail(kl_response *r, int code, const char *reason, const kl_type *t, const char *name,
                 const char *msg)
{
    set_body(r, code, status_new(code, reason, t, name, "%s", msg));
}

static void not_found_path(kl_response *r)
{
    json_object *st =
        status_new(404, "NotFound", NULL, NULL, "the server could not find the requested resource");
    json_object_object_add(st, "details", json_object_new_object());
    set_body(r, 404, st);
}

static json_object *not_found(const kl_type *t, const char *name)
{
    return status_new(404, "NotFound", t, name, "%s \"%s\" not found", kl_type_qualified(t), name);
}

static json_object *conflict(const kl_type *t, const char *name)
{
    return status_new(409, "Conflict", t, name,
                      "Operation cannot be fulfilled on %s \"%s\": the object has been modified; "
                      "please apply your changes to the latest version and try again",
                      kl_type_qualified(t), name);
}

/* kube-apiserver's answer to a JSON patch that cannot be applied: a generic
 * 422 (NewGenericServerResponse), whose details are present but empty. */
static json_object *rejected(void)
{
    json_object *st = status_new(422, "Invalid", NULL, NULL,
                                 "the server rejected our request due to an error in our request");
    json_object_object_add(st, "details", json_object_new_object());
    return st;
}

static json_object *invalid(const kl_type *t, const char *name, kl_errs *errs)
{
    json_object *st = kl_errs_status(errs, t, name);
    kl_errs_free(errs);
    return st;
}

/* ---- discovery and openapi ------------------------------------------------------- */

/* ---- api object ----------------------------------------------------------------- */

kl_api *kl_api_new(kl_store *store, const kl_api_opts *opts)
{
    kl_api *a = util_calloc(1, sizeof(*a));
    a->store = store;
    if (opts)
        a->opts = *opts;
    if (!a->opts.bookmark_every)
        a->opts.bookmark_every = 60 * UTIL_SECOND;
    if (!a->opts.version_minor)
        a->opts.version_minor = "32";
    if (getrandom(a->token_key, sizeof(a->token_key), 0) != (ssize_t)sizeof(a->token_key))
        abort();
    a->crds = kl_crds_new(store);
    pthread_mutex_init(&a->disc_lock, NULL);
    a->disc = kl_discovery_build(NULL, 0, 0);
    kl_crds_reconcile(a->crds);
    return a;
}

void kl_api_free(kl_api *a)
{
    if (!a)
        return;
    kl_discovery_unref(a->disc);
    pthread_mutex_destroy(&a->disc_lock);
    kl_crds_free(a->crds);
    free(a);
}

kl_store *kl_api_store(kl_api *a)
{
    return a->store;
}

/* ---- routing ---------------------------------------------------------------------- */

struct route {
    const kl_type *t;
    char ns[256];
    char name[256];
    char sub[256];
    bool legacy_watch;
};

static int split(const char *path, char segs[MAX_SEGS][256])
{
    int n = 0;
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (n == MAX_SEGS || len >= 256)
            return -1;
        memcpy(segs[n], p, len);
        segs[n][len] = '\0';
        n++;
        p += len;
    }
    return n;
}

/* 1: a resource path filled into *rt; 0: not a resource path. */
static int parse_route(kl_api *a, const char *path, struct route *rt)
{
    char s[MAX_SEGS][256];
    int n = split(path, s);
    memset(rt, 0, sizeof(*rt));
    if (n < 3)
        return 0;
    const char *group, *version;
    int i;
    if (strcmp(s[0], "api") == 0) {
        group = "";
        version = s[1];
        i = 2;
    } else if (strcmp(s[0], "apis") == 0 && n >= 4) {
        group = s[1];
        version = s[2];
        i = 3;
    } else {
        return 0;
    }
    if (i < n && strcmp(s[i], "watch") == 0) {
        rt->legacy_watch = true;
        i++;
    }
    int left = n - i;
    if (left <= 0)
        return 0;
    /* namespaces/<ns>/<resource>... unless it is a namespace's own path */
    if (strcmp(s[i], "namespaces") == 0 && left >= 3 &&
        (group[0] != '\0' ||
         (strcmp(s[i + 2], "status") != 0 && strcmp(s[i + 2], "finalize") != 0))) {
        snprintf(rt->ns, sizeof(rt->ns), "%s", s[i + 1]);
        i += 2;
        left -= 2;
    }
    if (left > 3)
        return 0;
    rt->t = kl_type_find(group, version, s[i]);
    if (!rt->t)
        rt->t = kl_crds_find(a->crds, group, version, s[i]);
    if (!rt->t)
        return 0;
    if (left >= 2)
        snprintf(rt->name, sizeof(rt->name), "%s", s[i + 1]);
    if (left == 3)
        snprintf(rt->sub, sizeof(rt->sub), "%s", s[i + 2]);
    if (rt->ns[0] && !rt->t->namespaced)
        return 0;
    return 1;
}

static const char *query(const kl_request *req, const char *key)
{
    return req->query ? req->query(req->query_ud, key) : NULL;
}

static bool query_true(const kl_request *req, const char *key)
{
    const char *v = query(req, key);
    return v && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

/* ---- authentication and authorization -------------------------------------------- */

static const kl_user admin_user = {.name = "system:admin", .groups = NULL, .n_groups = 0};

struct rbac_each {
    bool (*fn)(void *fud, const json_object *obj);
    void *fud;
};

static bool rbac_each_adapter(void *ud, const kl_obj *o)
{
    struct rbac_each *e = ud;
    return e->fn(e->fud, o->obj);
}

static void rbac_each(void *ud, const char *resource, const char *ns,
                      bool (*fn)(void *fud, const json_object *obj), void *fud)
{
    kl_api *a = ud;
    const kl_type *t = kl_type_find("rbac.authorization.k8s.io", "v1", resource);
    if (!t)
        return;
    struct rbac_each e = {fn, fud};
    kl_store_each(a->store, t, ns, rbac_each_adapter, &e);
}

/* The view hands out borrowed objects: each one fetched stays referenced
 * until the decision is made, so a concurrent write cannot free it. */
struct rbac_ctx {
    kl_api *a;
    kl_obj **held;
    size_t n_held, cap;
};

static const json_object *rbac_get(void *ud, const char *resource, const char *ns, const char *name)
{
    struct rbac_ctx *c = ud;
    const kl_type *t = kl_type_find("rbac.authorization.k8s.io", "v1", resource);
    if (!t)
        return NULL;
    kl_obj *o = kl_store_get(c->a->store, t, ns, name);
    if (!o)
        return NULL;
    if (c->n_held == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 8;
        kl_obj **grown = realloc(c->held, c->cap * sizeof(kl_obj *));
        if (!grown)
            abort();
        c->held = grown;
    }
    c->held[c->n_held++] = o;
    return o->obj;
}

static void rbac_each_ctx(void *ud, const char *resource, const char *ns,
                          bool (*fn)(void *fud, const json_object *obj), void *fud)
{
    struct rbac_ctx *c = ud;
    rbac_each(c->a, resource, ns, fn, fud);
}

/* A service account's identity from a token kube-lite issued. */
typedef struct sa_ident {
    kl_user u;
    char *groups[3];
} sa_ident;

static void sa_ident_clear(sa_ident *s)
{
    free(s->u.name);
    free(s->groups[1]);
    memset(s, 0, sizeof(*s));
}

/* True when `token` is one of our TokenRequest tokens, unexpired, for a
 * service account that still exists with the same uid. */
static bool sa_token_user(kl_api *a, const char *token, sa_ident *out)
{
    char *ns = NULL, *name = NULL, *uid = NULL;
    if (kl_sa_token_verify(a->token_key, token, (int64_t)time(NULL), &ns, &name, &uid) < 0)
        return false;
    const kl_type *sat = kl_type_find("", "v1", "serviceaccounts");
    kl_obj *o = kl_store_get(a->store, sat, ns, name);
    json_object *tree = o ? kl_obj_tree(o) : NULL;
    const char *cur_uid = kobj_uid(tree);
    bool ok = cur_uid && strcmp(cur_uid, uid) == 0;
    json_object_put(tree);
    kl_obj_unref(o);
    if (ok) {
        out->u.name = util_asprintf("system:serviceaccount:%s:%s", ns, name);
        out->groups[0] = (char *)"system:serviceaccounts";
        out->groups[1] = util_asprintf("system:serviceaccounts:%s", ns);
        out->groups[2] = (char *)"system:authenticated";
        out->u.groups = out->groups;
        out->u.n_groups = 3;
    }
    free(ns);
    free(name);
    free(uid);
    return ok;
}

/* Returns the user, or NULL after filling a 401 response. */
static const kl_user *authenticate(kl_api *a, const kl_request *req, kl_response *r, sa_ident *sa)
{
    if (!a->opts.tokens || req->trusted)
        return &admin_user;
    const char *h = req->authorization;
    const kl_user *u = NULL;
    if (h && strncmp(h, "Bearer ", 7) == 0)
        u = kl_tokens_lookup(a->opts.tokens, h + 7);
    if (!u && h && strncmp(h, "Bearer ", 7) == 0 && sa_token_user(a, h + 7, sa))
        u = &sa->u;
    if (!u) {
        json_object *st = status_new(401, "Unauthorized", NULL, NULL, "Unauthorized");
        set_body(r, 401, st);
    }
    return u;
}

static bool authorize(kl_api *a, const kl_user *u, const kl_attrs *at, const kl_type *t,
                      kl_response *r)
{
    if (!a->opts.rbac || u == &admin_user)
        return true;
    struct rbac_ctx c = {.a = a};
    kl_rbac_view v = {.ud = &c, .each = rbac_each_ctx, .get = rbac_get};
    bool ok = kl_rbac_allows(&v, u, at);
    kl_objs_free(c.held, c.n_held);
    if (!ok) {
        char *msg = kl_forbidden_message(u, at);
        json_object *st = status_new(403, "Forbidden", t, at->name, "%s", msg);
        free(msg);
        set_body(r, 403, st);
    }
    return ok;
}

/* ---- reads ---------------------------------------------------------------------- */

struct filter {
    const char *ns; /* NULL: every namespace */
    kl_labelsel *ls;
    kl_fieldsel *fs;
};

static bool filter_match(void *ud, const kl_obj *o)
{
    const struct filter *f = ud;
    if (f->ns && (!o->ns || strcmp(o->ns, f->ns) != 0))
        return false;
    if (f->ls && !kl_labelsel_match(f->ls, o->labels))
        return false;
    if (f->fs) {
        /* The common case (kubectl get NAME -w, wait, delete) needs no parse. */
        const char *name = kl_fieldsel_name(f->fs);
        if (name && strcmp(name, o->name) != 0)
            return false;
        json_object *tree = kl_obj_tree(o);
        bool ok = kl_fieldsel_match(f->fs, tree);
        json_object_put(tree);
        if (!ok)
            return false;
    }
    return true;
}

static void filter_clear(struct filter *f)
{
    kl_labelsel_free(f->ls);
    kl_fieldsel_free(f->fs);
    memset(f, 0, sizeof(*f));
}

/* Parses the selectors of a list or watch; false after a 400 response. */
static bool filter_init(struct filter *f, const kl_request *req, const struct route *rt,
                        kl_response *r)
{
    memset(f, 0, sizeof(*f));
    f->ns = rt->ns[0] ? rt->ns : NULL;
    const char *ls = query(req, "labelSelector");
    const char *fs = query(req, "fieldSelector");
    if (ls && kl_labelsel_parse(ls, &f->ls) < 0) {
        fail(r, 400, "BadRequest", NULL, NULL, util_err_last());
        return false;
    }
    if (fs && (kl_fieldsel_parse(fs, &f->fs) < 0 || kl_fieldsel_check(f->fs, rt->t) < 0)) {
        fail(r, 400, "BadRequest", NULL, NULL, util_err_last());
        filter_clear(f);
        return false;
    }
    return true;
}

static char *hex_encode(const char *s)
{
    size_t n = strlen(s);
    char *out = util_calloc(2 * n + 1, 1);
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned char)s[i]);
    return out;
}

static char *hex_decode(const char *s)
{
    size_t n = strlen(s);
    if (n % 2)
        return NULL;
    char *out = util_calloc(n / 2 + 1, 1);
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v = 0;
        if (sscanf(s + 2 * i, "%2x", &v) != 1 || v == 0) {
            free(out);
            return NULL;
        }
        out[i] = (char)v;
    }
    return out;
}

static bool parse_rv(const char *s, uint64_t *rv)
{
    if (!s || !*s)
        return false;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || s[0] == '-')
        return false;
    *rv = v;
    return true;
}

/* 422 on the list options, as meta.k8s.io's ListOptions validation words it. */
static json_object *list_options_invalid(const char *msg)
{
    static const kl_type list_options = {.group = "meta.k8s.io", .kind = "ListOptions"};
    kl_errs *e = kl_errs_new();
    kl_errs_add(e, KL_FORBIDDEN, "resourceVersionMatch", "%s", msg);
    return invalid(&list_options, "", e);
}

/* 400 for a resourceVersion that is no number (storage's ParseResourceVersion). */
static void bad_rv(kl_response *r, const char *rvs)
{
    char *q = kl_quote(rvs);
    json_object *st = status_new(400, "BadRequest", NULL, NULL,
                                 "invalid resource version: resourceVersion: Invalid value: %s: "
                                 "strconv.ParseUint: parsing %s: invalid syntax",
                                 q, q);
    free(q);
    set_body(r, 400, st);
}

/* The Table answer of a list or get: rows for `items`, the list's
 * resourceVersion and continue token in its metadata. */
static void answer_table(kl_response *r, const kl_request *req, const kl_type *t, int version,
                         kl_obj *const *items, size_t n, uint64_t rv, const char *cont)
{
    int include = kl_table_include(query(req, "includeObject"));
    if (include < 0) {
        fail(r, 400, "BadRequest", NULL, NULL,
             "includeObject must be one of None, Metadata or Object");
        return;
    }
    json_object *tab = kl_table_new(t, version, !query_true(req, "noHeaders"));
    json_object *meta = NULL;
    json_object_object_get_ex(tab, "metadata", &meta);
    if (rv) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%" PRIu64, rv);
        json_object_object_add(meta, "resourceVersion", json_object_new_string(buf));
    }
    if (cont)
        json_object_object_add(meta, "continue", json_object_new_string(cont));
    int64_t now = (int64_t)time(NULL);
    for (size_t i = 0; i < n; i++) {
        json_object *tree = kl_obj_tree(items[i]);
        kl_table_add_row(tab, t, tree, version, include, now);
        json_object_put(tree);
    }
    set_body(r, 200, tab);
}

static void do_list(kl_api *a, const kl_request *req, const struct route *rt, kl_response *r)
{
    struct filter f;
    if (!filter_init(&f, req, rt, r))
        return;
    const char *rvs = query(req, "resourceVersion");
    const char *match = query(req, "resourceVersionMatch");
    const char *cont = query(req, "continue");
    const char *lim = query(req, "limit");
    size_t limit = lim ? (size_t)strtoull(lim, NULL, 10) : 0;
    uint64_t want = 0, now = kl_store_rv(a->store);
    char *after = NULL;
    uint64_t pinned = 0;

    if (match && *match && !(rvs && *rvs)) {
        set_body(r, 422,
                 list_options_invalid("Forbidden: resourceVersionMatch is forbidden unless "
                                      "resourceVersion is provided"));
        filter_clear(&f);
        return;
    }
    if (rvs && *rvs && strcmp(rvs, "0") != 0) {
        if (!parse_rv(rvs, &want)) {
            bad_rv(r, rvs);
            filter_clear(&f);
            return;
        }
        if (match && strcmp(match, "Exact") == 0 && want != now) {
            fail(r, 410, "Expired", NULL, NULL,
                 "The resourceVersion for the provided list is too old.");
            filter_clear(&f);
            return;
        }
        if (want > now) {
            json_object *st = status_new(
                504, "Timeout", NULL, NULL,
                "Timeout: Too large resource version: %" PRIu64 ", current: %" PRIu64, want, now);
            set_body(r, 504, st);
            filter_clear(&f);
            return;
        }
    }
    if (cont && *cont) {
        char *tok = hex_decode(cont);
        char *nl = tok ? strchr(tok, '\n') : NULL;
        if (!nl || !parse_rv((*nl = '\0', tok), &pinned)) {
            free(tok);
            fail(r, 400, "BadRequest", NULL, NULL, "continue key is not valid");
            filter_clear(&f);
            return;
        }
        after = util_strdup(nl + 1);
        free(tok);
    }

    kl_obj **items = NULL;
    size_t n = 0;
    uint64_t rv = 0;
    char *next = NULL;
    kl_store_list(a->store, rt->t, f.ns, after, limit, filter_match, &f, &items, &n, &rv, &next);
    /* Later pages report the first page's resourceVersion, as a paginated
     * list is one snapshot to its reader. */
    if (pinned)
        rv = pinned;

    size_t total = 256;
    for (size_t i = 0; i < n; i++)
        total += items[i]->len + 1;
    char *tok = NULL;
    char remaining[64] = "";
    if (next) {
        char *raw = util_asprintf("%" PRIu64 "\n%s", rv, next);
        tok = hex_encode(raw);
        free(raw);
        total += strlen(tok);
        /* etcd counts what is left, for unfiltered lists only. */
        if (!f.ls && !f.fs) {
            kl_obj **rest = NULL;
            size_t n_rest = 0;
            uint64_t rrv = 0;
            char *rnext = NULL;
            kl_store_list(a->store, rt->t, f.ns, next, 0, NULL, NULL, &rest, &n_rest, &rrv, &rnext);
            kl_objs_free(rest, n_rest);
            free(rnext);
            snprintf(remaining, sizeof(remaining), ",\"remainingItemCount\":%zu", n_rest);
        }
    }
    int table = kl_table_accept(req->accept);
    if (table) {
        answer_table(r, req, rt->t, table, items, n, rv, tok);
        kl_objs_free(items, n);
        free(next);
        free(tok);
        free(after);
        filter_clear(&f);
        return;
    }
    char *buf = malloc(total + 64);
    if (!buf)
        abort();
    int off = snprintf(
        buf, total,
        "{\"kind\":\"%s\",\"apiVersion\":\"%s\",\"metadata\":{\"resourceVersion\":\"%" PRIu64
        "\"%s%s%s%s},\"items\":[",
        rt->t->list_kind, kl_type_api_version(rt->t), rv, tok ? ",\"continue\":\"" : "",
        tok ? tok : "", tok ? "\"" : "", remaining);
    size_t pos = (size_t)off;
    /* Items of built-in lists go without kind and apiVersion (the list's
     * kind names them), as kube-apiserver encodes typed lists; custom
     * resources keep them. Stored objects start with both (kind_first). */
    char head[256];
    int hl = snprintf(head, sizeof(head), "{\"kind\":\"%s\",\"apiVersion\":\"%s\",", rt->t->kind,
                      kl_type_api_version(rt->t));
    for (size_t i = 0; i < n; i++) {
        if (i)
            buf[pos++] = ',';
        const char *js = items[i]->json;
        size_t len = items[i]->len;
        if (!rt->t->custom && hl > 0 && len > (size_t)hl && memcmp(js, head, (size_t)hl) == 0) {
            buf[pos++] = '{';
            js += hl;
            len -= (size_t)hl;
        }
        memcpy(buf + pos, js, len);
        pos += len;
    }
    memcpy(buf + pos, "]}\n", 4);
    pos += 3;
    r->code = 200;
    r->body = buf;
    r->len = pos;
    r->content_type = "application/json";
    kl_objs_free(items, n);
    free(next);
    free(tok);
    free(after);
    filter_clear(&f);
}

static void do_get(kl_api *a, const kl_request *req, const struct route *rt, kl_response *r)
{
    kl_obj *o = kl_store_get(a->store, rt->t, rt->ns, rt->name);
    if (!o) {
        set_body(r, 404, not_found(rt->t, rt->name));
        return;
    }
    int table = kl_table_accept(req->accept);
    if (table)
        answer_table(r, req, rt->t, table, &o, 1, o->rv, NULL);
    else
        set_obj(r, 200, o);
    kl_obj_unref(o);
}

/* ---- watch streams ---------------------------------------------------------------- */

struct kl_stream {
    kl_api *a;
    const kl_type *t;
    char ns[256]; /* the filter's namespace: the request's copy outlives it */
    struct filter f;
    uint64_t from; /* the resourceVersion asked for, for the 410 message */
    kl_watch *w;
    kl_obj **init; /* synthetic ADDED events still to send */
    size_t n_init, i_init;
    bool initial_end_bookmark;
    int table;        /* KL_TABLE_*: events carry Tables (kubectl get -w) */
    int include;      /* KL_INCLUDE_* for the Table rows */
    bool sent_header; /* the column definitions went out with the first event */
    bool proto;       /* protobuf frames (proto_answer), not JSON lines */
    bool bookmarks;
    bool expired;
    bool ended;
    util_duration end_at;
    util_duration next_bookmark;
    pthread_mutex_t mu;
    void (*wake)(void *ud);
    void *wake_ud;
};

static void stream_notify(void *ud)
{
    kl_stream *st = ud;
    pthread_mutex_lock(&st->mu);
    void (*fn)(void *) = st->wake;
    void *wud = st->wake_ud;
    pthread_mutex_unlock(&st->mu);
    if (fn)
        fn(wud);
}

void kl_stream_set_wakeup(kl_stream *st, void (*fn)(void *ud), void *ud)
{
    pthread_mutex_lock(&st->mu);
    st->wake = fn;
    st->wake_ud = ud;
    pthread_mutex_unlock(&st->mu);
}

util_duration kl_stream_deadline(const kl_stream *st)
{
    util_duration d = st->end_at;
    if (st->bookmarks && st->next_bookmark < d)
        d = st->next_bookmark;
    return d;
}

void kl_stream_free(kl_stream *st)
{
    if (!st)
        return;
    kl_watch_free(st->w);
    for (size_t i = st->i_init; i < st->n_init; i++)
        kl_obj_unref(st->init[i]);
    free(st->init);
    filter_clear(&st->f);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            abort();
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_event(kl_stream *st, sbuf *b, const char *type, const kl_obj *o)
{
    char head[48];
    int n = snprintf(head, sizeof(head), "{\"type\":\"%s\",\"object\":", type);
    sb_add(b, head, (size_t)n);
    if (st->table) {
        /* One row per event; the columns only with the first, as
         * kube-apiserver sends them. */
        json_object *tab = kl_table_new(st->t, st->table, !st->sent_header);
        st->sent_header = true;
        json_object *meta = NULL;
        json_object_object_get_ex(tab, "metadata", &meta);
        char rv[32];
        snprintf(rv, sizeof(rv), "%" PRIu64, o->rv);
        json_object_object_add(meta, "resourceVersion", json_object_new_string(rv));
        json_object *tree = kl_obj_tree(o);
        kl_table_add_row(tab, st->t, tree, st->table, st->include, (int64_t)time(NULL));
        json_object_put(tree);
        size_t len = 0;
        const char *text = json_object_to_json_string_length(
            tab, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        sb_add(b, text, len);
        json_object_put(tab);
    } else {
        sb_add(b, o->json, o->len);
    }
    sb_add(b, "}\n", 2);
}

static void sb_bookmark(sbuf *b, const kl_type *t, uint64_t rv, bool initial_end)
{
    char line[512];
    int n = snprintf(
        line, sizeof(line),
        "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"%s\",\"apiVersion\":\"%s\","
        "\"metadata\":{\"resourceVersion\":\"%" PRIu64 "\",\"creationTimestamp\":null%s}}}\n",
        t->kind, kl_type_api_version(t), rv,
        initial_end ? ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}" : "");
    sb_add(b, line, (size_t)n);
}

static void sb_expired(sbuf *b, const kl_type *t, uint64_t from, uint64_t now)
{
    char line[512], msg[128];
    /* kube-apiserver watches Events straight from etcd (their watch cache
     * is off by default), which words the 410 its own way. */
    if (strcmp(t->resource, "events") == 0)
        snprintf(msg, sizeof(msg), "The resourceVersion for the provided watch is too old.");
    else
        snprintf(msg, sizeof(msg), "too old resource version: %" PRIu64 " (%" PRIu64 ")", from,
                 now);
    int n = snprintf(line, sizeof(line),
                     "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                     "\"metadata\":{},\"status\":\"Failure\",\"message\":\"%s\",\"reason\":"
                     "\"Expired\",\"code\":410}}\n",
                     msg);
    sb_add(b, line, (size_t)n);
}

int kl_stream_next(kl_stream *st, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    if (st->ended)
        return -1;
    sbuf b = {0};
    if (st->expired) {
        sb_expired(&b, st->t, st->from, kl_store_rv(st->a->store));
        st->ended = true;
        goto out;
    }
    while (st->i_init < st->n_init && b.len < (size_t)256 * 1024) {
        kl_obj *o = st->init[st->i_init++];
        sb_event(st, &b, "ADDED", o);
        kl_obj_unref(o);
    }
    if (b.len)
        goto out;
    if (st->initial_end_bookmark) {
        st->initial_end_bookmark = false;
        sb_bookmark(&b, st->t, kl_watch_cursor(st->w), true);
        goto out;
    }
    util_duration now = util_now_mono();
    if (now >= st->end_at) {
        st->ended = true;
        return -1;
    }
    kl_event ev[64];
    for (;;) {
        int n = kl_watch_next(st->w, ev, 64);
        if (n < 0) {
            sb_expired(&b, st->t, kl_watch_cursor(st->w), kl_store_rv(st->a->store));
            st->ended = true;
            goto out;
        }
        for (int i = 0; i < n; i++) {
            bool now_in = filter_match(&st->f, ev[i].obj);
            bool was_in = ev[i].old && filter_match(&st->f, ev[i].old);
            if (ev[i].type == KL_ADDED && now_in)
                sb_event(st, &b, "ADDED", ev[i].obj);
            else if (ev[i].type == KL_MODIFIED && now_in)
                sb_event(st, &b, was_in ? "MODIFIED" : "ADDED", ev[i].obj);
            else if (ev[i].type == KL_MODIFIED && was_in) {
                /* Left the selection: the watch cache (and etcd3's
                 * watcher) send the last state that matched, under the
                 * event's resourceVersion. */
                kl_obj *last = kl_obj_restamp(st->t, ev[i].old, ev[i].rv);
                sb_event(st, &b, "DELETED", last);
                kl_obj_unref(last);
            } else if (ev[i].type == KL_DELETED && (now_in || was_in))
                sb_event(st, &b, "DELETED", ev[i].obj);
            kl_event_clear(&ev[i]);
        }
        if (n < 64 || b.len > (size_t)256 * 1024)
            break;
    }
    if (!b.len && st->bookmarks && now >= st->next_bookmark) {
        sb_bookmark(&b, st->t, kl_watch_cursor(st->w), false);
        st->next_bookmark = now + st->a->opts.bookmark_every;
    }
out:
    if (!b.len)
        return 0;
    if (st->proto) {
        char *pb = NULL;
        size_t n = 0;
        int rc = kl_proto_watch_frames(b.p, b.len, &pb, &n);
        free(b.p);
        if (rc < 0) {
            obs_error("watch %s: %s", st->t->resource, util_err_last());
            st->ended = true;
            return -1;
        }
        b.p = pb;
        b.len = n;
    }
    *buf = b.p;
    *len = b.len;
    return 1;
}

static void do_watch(kl_api *a, const kl_request *req, const struct route *rt, kl_response *r)
{
    kl_stream *st = util_calloc(1, sizeof(*st));
    pthread_mutex_init(&st->mu, NULL);
    st->a = a;
    st->t = rt->t;
    if (!filter_init(&st->f, req, rt, r)) {
        kl_stream_free(st);
        return;
    }
    snprintf(st->ns, sizeof(st->ns), "%s", rt->ns);
    st->f.ns = st->ns[0] ? st->ns : NULL;
    const char *rvs = query(req, "resourceVersion");
    bool initial = query_true(req, "sendInitialEvents");
    const char *match = query(req, "resourceVersionMatch");
    if (match && *match && !initial) {
        set_body(r, 422,
                 list_options_invalid("Forbidden: resourceVersionMatch is forbidden for watch "
                                      "unless sendInitialEvents is provided"));
        kl_stream_free(st);
        return;
    }
    if (initial && (!match || strcmp(match, "NotOlderThan") != 0)) {
        set_body(r, 422,
                 list_options_invalid("Forbidden: sendInitialEvents requires setting "
                                      "resourceVersionMatch to NotOlderThan"));
        kl_stream_free(st);
        return;
    }
    uint64_t from = 0;
    bool synthetic = !rvs || !*rvs || strcmp(rvs, "0") == 0 || initial;
    if (!synthetic && !parse_rv(rvs, &from)) {
        bad_rv(r, rvs);
        kl_stream_free(st);
        return;
    }
    if (synthetic) {
        /* A snapshot, then changes after it: the synthetic ADDED events. */
        uint64_t snap = 0;
        char *next = NULL;
        kl_store_list(a->store, rt->t, st->f.ns, NULL, 0, filter_match, &st->f, &st->init,
                      &st->n_init, &snap, &next);
        free(next);
        from = snap;
        st->initial_end_bookmark = initial;
    }
    st->from = from;
    int rc = kl_store_watch(a->store, rt->t, from, stream_notify, st, &st->w);
    if (rc == -ERANGE) {
        /* 200, then the 410 ERROR event, then the end (as the watch cache does). */
        kl_store_watch(a->store, rt->t, kl_store_rv(a->store), stream_notify, st, &st->w);
        st->expired = true;
    }
    st->table = kl_table_accept(req->accept);
    st->include = kl_table_include(query(req, "includeObject"));
    if (st->include < 0)
        st->include = KL_INCLUDE_METADATA;
    st->bookmarks = query_true(req, "allowWatchBookmarks");
    util_duration now = util_now_mono();
    const char *ts = query(req, "timeoutSeconds");
    util_duration timeout = 0;
    if (ts && *ts)
        timeout = (util_duration)strtoll(ts, NULL, 10) * UTIL_SECOND;
    if (timeout <= 0) {
        unsigned int rnd = 0;
        if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
            rnd = 0;
        timeout = (1800 + (util_duration)(rnd % 1800)) * UTIL_SECOND;
    }
    util_duration close_after = __atomic_load_n(&a->opts.watch_close_after, __ATOMIC_RELAXED);
    if (close_after > 0 && close_after < timeout)
        timeout = close_after;
    st->end_at = now + timeout;
    st->next_bookmark = now + a->opts.bookmark_every;
    r->code = 200;
    r->content_type = "application/json";
    r->stream = st;
}

/* ---- writes ------------------------------------------------------------------------ */

enum patch_type { PATCH_NONE, PATCH_MERGE, PATCH_JSON, PATCH_STRATEGIC, PATCH_APPLY };

struct write_ctx {
    kl_api *a;
    const struct route *rt;
    const kl_type *t;
    const char *name;
    json_object *body; /* create/update: the object; patch: the patch; delete: options */
    enum patch_type patch;
    bool status_only;
    bool dry_run;
    int ok_code;
    bool removed;      /* the object is gone (not just marked for deletion) */
    json_object *last; /* update/patch that removed it: the answer (the new state) */
    bool may_expand;   /* PVC: its class allows volume expansion */
};

static bool has_finalizers(const json_object *obj)
{
    return kobj_len(kobj_arr(kobj_obj(obj, "metadata"), "finalizers")) > 0;
}

static void copy_field(json_object *dst, const json_object *src, const char *key)
{
    json_object *v = NULL;
    if (json_object_object_get_ex(src, key, &v)) {
        json_object *c = jcopy(v);
        json_object_object_add(dst, key, c);
    } else {
        json_object_object_del(dst, key);
    }
}

/* Equal apart from metadata.resourceVersion and managedFields. */
static bool same_object(const json_object *a, json_object *b)
{
    json_object *ma = kobj_obj(a, "metadata"), *mb = kobj_obj(b, "metadata");
    json_object *rv = NULL, *mf = NULL;
    if (mb && json_object_object_get_ex(mb, "resourceVersion", &rv))
        json_object_get(rv);
    if (mb && json_object_object_get_ex(mb, "managedFields", &mf))
        json_object_get(mf);
    if (mb) {
        json_object_object_del(mb, "resourceVersion");
        json_object_object_del(mb, "managedFields");
    }
    json_object *ca = jcopy(a);
    json_object *cma = kobj_obj(ca, "metadata");
    if (cma) {
        json_object_object_del(cma, "resourceVersion");
        json_object_object_del(cma, "managedFields");
    }
    bool eq = jequal(ca, b);
    json_object_put(ca);
    if (mb && rv)
        json_object_object_add(mb, "resourceVersion", rv);
    if (mb && mf)
        json_object_object_add(mb, "managedFields", mf);
    (void)ma;
    return eq;
}

/* Everything outside metadata (and status when it has its own endpoint). */
static bool spec_changed(const kl_type *t, const json_object *a, const json_object *b)
{
    json_object *ca = jcopy(a), *cb = jcopy(b);
    json_object_object_del(ca, "metadata");
    json_object_object_del(cb, "metadata");
    if (t->has_status) {
        json_object_object_del(ca, "status");
        json_object_object_del(cb, "status");
    }
    bool changed = !jequal(ca, cb);
    json_object_put(ca);
    json_object_put(cb);
    return changed;
}

static void mut_error(kl_mut *m, json_object *status)
{
    json_object *code = NULL;
    json_object_object_get_ex(status, "code", &code);
    m->kind = KL_MUT_ERROR;
    m->code = json_object_get_int(code);
    m->status = status;
}

/*
 * kind and apiVersion first, as kube-apiserver's encoding writes them: list
 * answers then drop them from items (do_list) by skipping that prefix of
 * the stored text.
 */
static json_object *kind_first(json_object *obj)
{
    json_object *res = json_object_new_object();
    json_object *v = NULL;
    if (json_object_object_get_ex(obj, "kind", &v))
        json_object_object_add(res, "kind", json_object_get(v));
    if (json_object_object_get_ex(obj, "apiVersion", &v))
        json_object_object_add(res, "apiVersion", json_object_get(v));
    json_object_object_foreach(obj, key, val)
    {
        if (strcmp(key, "kind") != 0 && strcmp(key, "apiVersion") != 0)
            json_object_object_add(res, key, json_object_get(val));
    }
    json_object_put(obj);
    return res;
}

/* Dry runs answer with what would have been stored, and store nothing. */
static void mut_put(struct write_ctx *c, kl_mut *m, json_object *obj)
{
    obj = kind_first(obj);
    if (c->dry_run) {
        m->kind = KL_MUT_ERROR;
        m->code = c->ok_code;
        m->status = obj;
        return;
    }
    m->kind = KL_MUT_PUT;
    m->obj = obj;
}

/* True when an update raises a claim's requested storage. */
static bool pvc_grows(const kl_type *t, const json_object *old, const json_object *obj)
{
    if (t->group[0] || strcmp(t->resource, "persistentvolumeclaims") != 0)
        return false;
    const char *o = kobj_path_str(old, "spec.resources.requests.storage");
    const char *n = kobj_path_str(obj, "spec.resources.requests.storage");
    int64_t ov = 0, nv = 0;
    return o && n && util_quantity_parse(o, &ov) == 0 && util_quantity_parse(n, &nv) == 0 &&
           nv > ov;
}

/*
 * The shared tail of update and patch: `obj` (owned) is the requested new
 * state of `cur`. Applies the subresource split, keeps what a client may not
 * change, validates, and decides between storing, deleting (last finalizer
 * gone during deletion) and nothing.
 */
static void finish_update(struct write_ctx *c, const kl_obj *cur, json_object *obj, bool check_rv,
                          kl_mut *m)
{
    const kl_type *t = c->t;
    json_object *old = cur->obj;
    json_object *meta = meta_of(obj);
    const char *want_rv = kobj_str(meta, "resourceVersion");
    const char *cur_rv = kobj_str(kobj_obj(old, "metadata"), "resourceVersion");
    if (check_rv && want_rv && *want_rv && strcmp(want_rv, cur_rv ? cur_rv : "") != 0) {
        json_object_put(obj);
        mut_error(m, conflict(t, c->name));
        return;
    }
    if (check_rv && (!want_rv || !*want_rv) && c->patch == PATCH_NONE &&
        (t->custom || strcmp(t->resource, "volumeattachments") == 0)) {
        json_object_put(obj);
        kl_errs *e = kl_errs_new();
        kl_errs_add(e, KL_INVALID, "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update");
        /* kube-apiserver's store.Update names the resource here, not the
         * Kind as other Invalid errors do: so does this one. */
        mut_error(m, kl_errs_status_as(e, t->group, t->resource, c->name));
        kl_errs_free(e);
        return;
    }
    const char *body_name = kobj_str(meta, "name");
    if (body_name && strcmp(body_name, c->name) != 0) {
        /* The message quotes body_name, which lives in obj: build it first. */
        mut_error(m,
                  status_new(400, "BadRequest", NULL, NULL,
                             "the name of the object (%s) does not match the name on the URL (%s)",
                             body_name, c->name));
        json_object_put(obj);
        return;
    }
    json_object_object_add(meta, "name", json_object_new_string(c->name));
    if (t->namespaced)
        json_object_object_add(meta, "namespace", json_object_new_string(c->rt->ns));
    json_object_object_add(obj, "kind", json_object_new_string(t->kind));
    json_object_object_add(obj, "apiVersion", json_object_new_string(kl_type_api_version(t)));

    if (c->status_only) {
        /* Only status changes through /status. */
        json_object *merged = jcopy(old);
        copy_field(merged, obj, "status");
        json_object_put(obj);
        obj = merged;
        meta = meta_of(obj);
    } else if (t->has_status) {
        copy_field(obj, old, "status");
    }
    /* System fields are the server's. */
    json_object *old_meta = kobj_obj(old, "metadata");
    copy_field(meta, old_meta, "uid");
    copy_field(meta, old_meta, "creationTimestamp");
    copy_field(meta, old_meta, "deletionTimestamp");
    copy_field(meta, old_meta, "deletionGracePeriodSeconds");
    copy_field(meta, old_meta, "generation");
    if ((t->custom || t->generation) && spec_changed(t, old, obj)) {
        json_object *g = NULL;
        int64_t gen =
            json_object_object_get_ex(old_meta, "generation", &g) ? json_object_get_int64(g) : 1;
        json_object_object_add(meta, "generation", json_object_new_int64(gen + 1));
    }
    if (!c->status_only)
        kl_apply_defaults(t, obj);
    if (kl_type_is_crd(t))
        kl_crd_admit(t, obj);
    prune_meta(obj);

    kl_errs *errs = kl_errs_new();
    kl_validate_update(t, old, obj, c->status_only, errs);
    if (kl_errs_count(errs)) {
        json_object_put(obj);
        mut_error(m, invalid(t, c->name, errs));
        return;
    }
    kl_errs_free(errs);
    if (!c->status_only && !c->may_expand && pvc_grows(t, old, obj)) {
        /* The PersistentVolumeClaimResize admission, after validation. */
        json_object_put(obj);
        mut_error(m, status_new(403, "Forbidden", t, c->name,
                                "%s \"%s\" is forbidden: only dynamically provisioned pvc can be "
                                "resized and the storageclass that provisions the pvc must "
                                "support resize",
                                kl_type_qualified(t), c->name));
        return;
    }
    kl_go_fill(t, obj);

    if (kobj_str(old_meta, "deletionTimestamp") && !has_finalizers(obj)) {
        /* Answered with the state the update asked for; watchers see the
         * last stored one deleted (store.go deleteWithoutFinalizers). */
        c->last = kind_first(obj);
        if (c->dry_run) {
            m->kind = KL_MUT_NOOP;
            return;
        }
        m->kind = KL_MUT_DELETE;
        c->removed = true;
        return;
    }
    if (same_object(old, obj)) {
        json_object_put(obj);
        m->kind = KL_MUT_NOOP;
        return;
    }
    mut_put(c, m, obj);
}

static void mutate_update(void *ud, const kl_obj *cur, kl_mut *m)
{
    struct write_ctx *c = ud;
    if (!cur) {
        mut_error(m, not_found(c->t, c->name));
        return;
    }
    json_object *obj = jcopy(c->body);
    finish_update(c, cur, obj, true, m);
}

static void mutate_patch(void *ud, const kl_obj *cur, kl_mut *m)
{
    struct write_ctx *c = ud;
    if (!cur) {
        mut_error(m, not_found(c->t, c->name));
        return;
    }
    json_object *out = NULL;
    int rc;
    switch (c->patch) {
    case PATCH_JSON:
        rc = kl_json_patch(cur->obj, c->body, &out);
        break;
    case PATCH_STRATEGIC:
        rc =
            kl_strategic_merge_patch(cur->obj, c->body, c->t->merge_keys, c->t->n_merge_keys, &out);
        break;
    default:
        rc = kl_merge_patch(cur->obj, c->body, &out);
        break;
    }
    if (rc == -ECANCELED) {
        mut_error(m, rejected());
        return;
    }
    if (rc < 0) {
        mut_error(m, status_new(400, "BadRequest", NULL, NULL, "%s", util_err_last()));
        return;
    }
    if (!json_object_is_type(out, json_type_object)) {
        json_object_put(out);
        mut_error(m, rejected());
        return;
    }
    if (kl_check_shape(c->t, out) < 0) {
        json_object_put(out);
        mut_error(m, status_new(400, "BadRequest", NULL, NULL,
                                "%s in version \"%s\" cannot be handled as a %s: %s", c->t->kind,
                                c->t->version, c->t->kind, util_err_last()));
        return;
    }
    /* A resourceVersion in the patch is a precondition; otherwise none. */
    const char *prv =
        c->patch == PATCH_JSON ? NULL : kobj_str(kobj_obj(c->body, "metadata"), "resourceVersion");
    const char *cur_rv = kobj_str(kobj_obj(cur->obj, "metadata"), "resourceVersion");
    if (prv && strcmp(prv, cur_rv ? cur_rv : "") != 0) {
        json_object_put(out);
        mut_error(m, conflict(c->t, c->name));
        return;
    }
    if (c->patch == PATCH_JSON) {
        const char *orv = kobj_str(kobj_obj(out, "metadata"), "resourceVersion");
        if (orv && strcmp(orv, cur_rv ? cur_rv : "") != 0) {
            json_object_put(out);
            mut_error(m, conflict(c->t, c->name));
            return;
        }
    }
    finish_update(c, cur, out, false, m);
}

/* Fills a new object's server-side metadata; NULL or a Status to answer. */
static json_object *prepare_create(struct write_ctx *c, json_object *obj, const char *name)
{
    const kl_type *t = c->t;
    json_object *meta = meta_of(obj);
    json_object_object_add(meta, "name", json_object_new_string(name));
    if (t->namespaced)
        json_object_object_add(meta, "namespace", json_object_new_string(c->rt->ns));
    else
        json_object_object_del(meta, "namespace");
    json_object_object_add(obj, "kind", json_object_new_string(t->kind));
    json_object_object_add(obj, "apiVersion", json_object_new_string(kl_type_api_version(t)));
    char uid[37], ts[32];
    uuid4(uid);
    now_rfc3339(ts, sizeof(ts));
    json_object_object_add(meta, "uid", json_object_new_string(uid));
    json_object_object_add(meta, "creationTimestamp", json_object_new_string(ts));
    json_object_object_del(meta, "deletionTimestamp");
    json_object_object_del(meta, "deletionGracePeriodSeconds");
    json_object_object_del(meta, "managedFields");
    if (t->custom || t->generation)
        json_object_object_add(meta, "generation", json_object_new_int64(1));
    else
        json_object_object_del(meta, "generation");
    if (t->has_status && !t->group[0]) {
        const char *res = t->resource;
        if (strcmp(res, "persistentvolumes") == 0 || strcmp(res, "persistentvolumeclaims") == 0 ||
            strcmp(res, "pods") == 0) {
            json_object *st = json_object_new_object();
            json_object_object_add(st, "phase", json_object_new_string("Pending"));
            json_object_object_add(obj, "status", st);
        }
    } else if (strcmp(t->resource, "volumeattachments") == 0) {
        json_object *st = json_object_new_object();
        json_object_object_add(st, "attached", json_object_new_boolean(0));
        json_object_object_add(obj, "status", st);
    } else if ((t->custom || t->generation) && t->has_status) {
        /* The workload controllers' status starts empty. */
        json_object_object_del(obj, "status");
    }
    kl_apply_defaults(t, obj);
    if (kl_type_is_crd(t))
        kl_crd_admit(t, obj);
    prune_meta(obj);
    kl_errs *errs = kl_errs_new();
    kl_validate_create(t, obj, errs);
    if (kl_errs_count(errs))
        return invalid(t, name, errs);
    kl_errs_free(errs);
    kl_go_fill(t, obj);
    return NULL;
}

struct create_ctx {
    struct write_ctx *c;
    json_object *obj;
};

static void mutate_create(void *ud, const kl_obj *cur, kl_mut *m)
{
    struct create_ctx *cc = ud;
    if (cur) {
        mut_error(m,
                  status_new(409, "AlreadyExists", cc->c->t, cc->c->name,
                             "%s \"%s\" already exists", kl_type_qualified(cc->c->t), cc->c->name));
        return;
    }
    json_object *obj = jcopy(cc->obj);
    mut_put(cc->c, m, obj);
}

static void generate_name(const char *prefix, char *out, size_t len)
{
    static const char alphabet[] = "bcdfghjklmnpqrstvwxz2456789";
    unsigned char rnd[5];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        abort();
    char suffix[6];
    for (int i = 0; i < 5; i++)
        suffix[i] = alphabet[rnd[i] % (sizeof(alphabet) - 1)];
    suffix[5] = '\0';
    snprintf(out, len, "%.58s%s", prefix, suffix);
}

static void answer_write(kl_response *r, kl_mut_kind kind, kl_obj *res, int code,
                         json_object *status, int ok_code)
{
    if (kind == KL_MUT_ERROR) {
        set_body(r, code, status);
        return;
    }
    set_obj(r, ok_code, res);
    kl_obj_unref(res);
}

static json_object *parse_body(const kl_request *req, kl_response *r, const kl_type *t)
{
    /* Protobuf for every built-in kind; custom resources get 415, as
     * kube-apiserver's CRD endpoints accept JSON and YAML only. */
    if (req->content_type && util_has_prefix(req->content_type, KL_PROTO_TYPE)) {
        json_object *obj = NULL;
        char *apiv =
            t ? util_asprintf("%s%s%s", t->group, t->group[0] ? "/" : "", t->version) : NULL;
        int rc = kl_proto_decode(req->body, req->body_len, apiv, t ? t->kind : NULL, &obj);
        free(apiv);
        if (rc == -ENOTSUP) {
            fail(r, 415, "UnsupportedMediaType", NULL, NULL,
                 "the body of the request was in an unknown format - accepted media types "
                 "include: application/json, application/yaml");
        } else if (rc < 0) {
            json_object *st = status_new(400, "BadRequest", NULL, NULL,
                                         "%s in version \"%s\" cannot be handled as a %s: %s",
                                         t ? t->kind : "object", t ? t->version : "v1",
                                         t ? t->kind : "object", util_err_last());
            set_body(r, 400, st);
        }
        return obj;
    }
    enum json_tokener_error jerr = json_tokener_success;
    json_object *body =
        req->body && req->body_len ? json_tokener_parse_verbose(req->body, &jerr) : NULL;
    if (!body) {
        json_object *st = status_new(
            400, "BadRequest", NULL, NULL, "%s in version \"%s\" cannot be handled as a %s: %s",
            t ? t->kind : "object", t ? t->version : "v1", t ? t->kind : "object",
            req->body_len ? json_tokener_error_desc(jerr) : "empty request body");
        set_body(r, 400, st);
    }
    return body;
}

/* False after a 400 when `obj` has a field of the wrong JSON type. */
static bool shape_ok(const kl_type *t, const json_object *obj, kl_response *r)
{
    if (kl_check_shape(t, obj) == 0)
        return true;
    json_object *st = status_new(400, "BadRequest", NULL, NULL,
                                 "%s in version \"%s\" cannot be handled as a %s: %s", t->kind,
                                 t->version, t->kind, util_err_last());
    set_body(r, 400, st);
    return false;
}

static bool namespace_exists(kl_api *a, const char *ns)
{
    const kl_type *nst = kl_type_find("", "v1", "namespaces");
    kl_obj *o = kl_store_get(a->store, nst, NULL, ns);
    kl_obj_unref(o);
    return o != NULL;
}

/* The DefaultStorageClass admission: a claim created without
 * spec.storageClassName (absent, not "") and without the beta class
 * annotation gets the class annotated as default; the newest one when
 * several are (then the first by name). */
static void default_storage_class(kl_api *a, json_object *pvc)
{
    json_object *spec = kobj_obj(pvc, "spec");
    if (!spec || json_object_object_get_ex(spec, "storageClassName", NULL) ||
        kobj_annotation(pvc, "volume.beta.kubernetes.io/storage-class"))
        return;
    const kl_type *sct = kl_type_find("storage.k8s.io", "v1", "storageclasses");
    kl_obj **items = NULL;
    size_t n = 0;
    uint64_t rv = 0;
    char *next = NULL;
    kl_store_list(a->store, sct, NULL, NULL, 0, NULL, NULL, &items, &n, &rv, &next);
    char *best = NULL, *best_ts = NULL;
    for (size_t i = 0; i < n; i++) {
        json_object *sc = kl_obj_tree(items[i]);
        const char *ga = kobj_annotation(sc, "storageclass.kubernetes.io/is-default-class");
        const char *beta = kobj_annotation(sc, "storageclass.beta.kubernetes.io/is-default-class");
        const char *ts = kobj_meta_str(sc, "creationTimestamp");
        if (((ga && strcmp(ga, "true") == 0) || (beta && strcmp(beta, "true") == 0)) &&
            kobj_name(sc)) {
            /* RFC 3339 UTC timestamps order as text; the list is in name order. */
            if (!best || strcmp(ts ? ts : "", best_ts) > 0) {
                free(best);
                free(best_ts);
                best = util_strdup(kobj_name(sc));
                best_ts = util_strdup(ts ? ts : "");
            }
        }
        json_object_put(sc);
    }
    kl_objs_free(items, n);
    free(next);
    if (best)
        kobj_set_str(spec, "storageClassName", best);
    free(best);
    free(best_ts);
}

/* The Go package of a group's internal types (pkg/apis/<pkg>), as
 * conversion errors name them. */
static const char *internal_pkg(const kl_type *t, char *buf, size_t len)
{
    if (!t->group[0] || strcmp(t->group, "events.k8s.io") == 0)
        return "core";
    const char *dot = strchr(t->group, '.');
    snprintf(buf, len, "%.*s", dot ? (int)(dot - t->group) : (int)strlen(t->group), t->group);
    return buf;
}

static void do_create(kl_api *a, const kl_request *req, const struct route *rt, kl_response *r)
{
    const kl_type *t = rt->t;
    json_object *obj = parse_body(req, r, t);
    if (!obj)
        return;
    if (!json_object_is_type(obj, json_type_object)) {
        json_object_put(obj);
        fail(r, 400, "BadRequest", NULL, NULL, "the request body must be a JSON object");
        return;
    }
    if (!shape_ok(t, obj, r)) {
        json_object_put(obj);
        return;
    }
    const char *kind = kobj_str(obj, "kind");
    const char *apiv = kobj_str(obj, "apiVersion");
    if ((kind && strcmp(kind, t->kind) != 0) ||
        (apiv && strcmp(apiv, kl_type_api_version(t)) != 0)) {
        json_object *st = status_new(400, "BadRequest", NULL, NULL,
                                     "the API version in the data (%s) does not match the expected "
                                     "API version (%s)",
                                     apiv ? apiv : "", kl_type_api_version(t));
        if (kind && strcmp(kind, t->kind) != 0) {
            json_object_put(st);
            const kl_type *other = kl_type_by_kind(t->group, kind);
            char pkg[64];
            if (other && !t->custom && (!apiv || strcmp(apiv, kl_type_api_version(t)) == 0))
                /* Another kind of the same group version: the scheme has it,
                 * and converting it into the endpoint's type fails. */
                st = status_new(400, "BadRequest", NULL, NULL,
                                "%s in version \"%s\" cannot be handled as a %s: converting "
                                "(%s.%s) to (%s.%s): unknown conversion",
                                kind, t->version, t->kind, t->version, kind,
                                internal_pkg(t, pkg, sizeof(pkg)), t->kind);
            else
                st = status_new(400, "BadRequest", NULL, NULL,
                                "the kind in the data (%s) does not match the expected kind (%s)",
                                kind, t->kind);
        }
        set_body(r, 400, st);
        json_object_put(obj);
        return;
    }
    json_object *meta = meta_of(obj);
    const char *bns = kobj_str(meta, "namespace");
    if (t->namespaced && bns && *bns && strcmp(bns, rt->ns) != 0) {
        fail(r, 400, "BadRequest", NULL, NULL,
             "the namespace of the provided object does not match the namespace sent on the "
             "request");
        json_object_put(obj);
        return;
    }
    const char *brv = kobj_str(meta, "resourceVersion");
    if (brv && *brv) {
        fail(r, 500, NULL, NULL, NULL,
             "resourceVersion should not be set on objects to be created");
        json_object_put(obj);
        return;
    }
    if (t->namespaced && !namespace_exists(a, rt->ns)) {
        set_body(r, 404, not_found(kl_type_find("", "v1", "namespaces"), rt->ns));
        json_object_put(obj);
        return;
    }
    /* Copies: prepare_create replaces metadata.name in the tree. */
    char *name = util_strdup(kobj_str(meta, "name"));
    char *gen = util_strdup(kobj_str(meta, "generateName"));
    if ((!name || !*name) && (!gen || !*gen)) {
        kl_errs *e = kl_errs_new();
        kl_errs_add(e, KL_REQUIRED, "metadata.name",
                    "Required value: name or generateName is required");
        set_body(r, 422, invalid(t, "", e));
        json_object_put(obj);
        free(name);
        free(gen);
        return;
    }
    if (strcmp(t->resource, "persistentvolumeclaims") == 0 && !t->group[0])
        default_storage_class(a, obj);
    struct write_ctx c = {
        .a = a, .rt = rt, .t = t, .ok_code = 201, .dry_run = query(req, "dryRun") != NULL};
    /* A generated name that clashes is retried, as kube-apiserver 1.32 does. */
    for (int attempt = 0; attempt < 8; attempt++) {
        char genname[254];
        char *fixed = name && *name ? util_strdup(name) : NULL;
        if (!fixed) {
            generate_name(gen, genname, sizeof(genname));
            fixed = util_strdup(genname);
        }
        c.name = fixed;
        json_object *st = prepare_create(&c, obj, fixed);
        if (st) {
            set_body(r, 422, st);
            free(fixed);
            break;
        }
        struct create_ctx cc = {&c, obj};
        kl_obj *res = NULL;
        int code = 0;
        json_object *status = NULL;
        kl_mut_kind k =
            kl_store_mutate(a->store, t, rt->ns, fixed, mutate_create, &cc, &res, &code, &status);
        bool retry = k == KL_MUT_ERROR && code == 409 && !(name && *name) && attempt < 7;
        if (!retry)
            answer_write(r, k, res, code, status, 201);
        else
            json_object_put(status);
        free(fixed);
        if (!retry)
            break;
    }
    json_object_put(obj);
    free(name);
    free(gen);
}

/*
 * POST serviceaccounts/<name>/token: a token kube-lite's authentication
 * then accepts as that service account (until it expires, the account is
 * deleted, or kube-lite restarts). Answers the TokenRequest with
 * status.token and status.expirationTimestamp, as kube-apiserver does.
 */
static void do_token_request(kl_api *a, const kl_request *req, const struct route *rt,
                             kl_response *r)
{
    static const kl_type token_type = {.group = "authentication.k8s.io",
                                       .version = "v1",
                                       .resource = "tokenrequests",
                                       .kind = "TokenRequest",
                                       .namespaced = true};
    json_object *body = parse_body(req, r, &token_type);
    if (!body)
        return;
    const char *kind = kobj_str(body, "kind");
    json_object *spec = kobj_get(body, "spec");
    kl_errs *errs = kl_errs_new();
    if (!kobj_typed(body, json_type_object) || (kind && strcmp(kind, "TokenRequest") != 0) ||
        (spec && !kobj_typed(spec, json_type_object))) {
        kl_errs_free(errs);
        json_object_put(body);
        fail(r, 400, "BadRequest", NULL, NULL, "the request body must be a TokenRequest");
        return;
    }
    int64_t secs = 3600;
    int rc = kobj_int64(spec, "expirationSeconds", &secs);
    if (rc == -EINVAL)
        kl_errs_add(errs, KL_INVALID, "spec.expirationSeconds",
                    "Invalid value: must be an integer");
    else if (secs < 600)
        kl_errs_add(errs, KL_INVALID, "spec.expirationSeconds",
                    "Invalid value: %lld: may not specify a duration less than 10 minutes",
                    (long long)secs);
    else if (secs > ((int64_t)1 << 32))
        kl_errs_add(errs, KL_INVALID, "spec.expirationSeconds",
                    "Invalid value: %lld: may not specify a duration larger than 2^32 seconds",
                    (long long)secs);
    json_object *auds = kobj_get(spec, "audiences");
    if (auds && !kobj_typed(auds, json_type_array))
        kl_errs_add(errs, KL_INVALID, "spec.audiences", "Invalid value: must be a list");
    for (size_t i = 0; i < kobj_len(auds); i++)
        if (!kobj_str_at(auds, i))
            kl_errs_add(errs, KL_INVALID, "spec.audiences", "Invalid value: must be strings");
    if (kl_errs_count(errs)) {
        set_body(r, 422, invalid(&token_type, rt->name, errs));
        json_object_put(body);
        return;
    }
    kl_errs_free(errs);
    kl_obj *o = kl_store_get(a->store, rt->t, rt->ns, rt->name);
    if (!o) {
        set_body(r, 404, not_found(rt->t, rt->name));
        json_object_put(body);
        return;
    }
    json_object *sa = kl_obj_tree(o);
    kl_obj_unref(o);
    json_object *aud = json_object_new_array();
    for (size_t i = 0; i < kobj_len(auds); i++)
        json_object_array_add(aud, json_object_new_string(kobj_str_at(auds, i)));
    if (!kobj_len(aud))
        json_object_array_add(
            aud, json_object_new_string("https://kubernetes.default.svc.cluster.local"));
    int64_t now = (int64_t)time(NULL);
    const char *uid = kobj_uid(sa);
    char *token =
        kl_sa_token_mint(a->token_key, rt->ns, rt->name, uid ? uid : "", aud, now, now + secs);
    json_object_put(sa);
    json_object *ans = json_object_new_object();
    json_object_object_add(ans, "kind", json_object_new_string("TokenRequest"));
    json_object_object_add(ans, "apiVersion", json_object_new_string("authentication.k8s.io/v1"));
    json_object *meta = json_object_new_object();
    json_object_object_add(meta, "name", json_object_new_string(rt->name));
    json_object_object_add(meta, "namespace", json_object_new_string(rt->ns));
    json_object_object_add(meta, "creationTimestamp", NULL);
    json_object_object_add(ans, "metadata", meta);
    json_object *nspec = json_object_new_object();
    json_object_object_add(nspec, "audiences", aud);
    json_object_object_add(nspec, "expirationSeconds", json_object_new_int64(secs));
    json_object_object_add(nspec, "boundObjectRef", NULL);
    json_object_object_add(ans, "spec", nspec);
    json_object *st = json_object_new_object();
    json_object_object_add(st, "token", json_object_new_string(token));
    time_t exp = (time_t)(now + secs);
    char ts[UTIL_TIME_RFC3339_LEN];
    util_time_rfc3339(exp, ts, sizeof(ts));
    json_object_object_add(st, "expirationTimestamp", json_object_new_string(ts));
    json_object_object_add(ans, "status", st);
    free(token);
    json_object_put(body);
    set_body(r, 201, ans);
}

/* Whether the claim at `rt` belongs to a class with allowVolumeExpansion
 * (read before the write: the store's lock is not reentrant; the class name
 * of a claim is immutable). */
static bool may_expand(kl_api *a, const struct route *rt)
{
    if (rt->t->group[0] || strcmp(rt->t->resource, "persistentvolumeclaims") != 0)
        return false;
    kl_obj *o = kl_store_get(a->store, rt->t, rt->ns, rt->name);
    json_object *pvc = o ? kl_obj_tree(o) : NULL;
    kl_obj_unref(o);
    const char *cls = kobj_path_str(pvc, "spec.storageClassName");
    const kl_type *sct = kl_type_find("storage.k8s.io", "v1", "storageclasses");
    kl_obj *so = cls && *cls ? kl_store_get(a->store, sct, NULL, cls) : NULL;
    json_object *sc = so ? kl_obj_tree(so) : NULL;
    kl_obj_unref(so);
    bool ok = false;
    json_object *allow = NULL;
    if (sc && json_object_object_get_ex(sc, "allowVolumeExpansion", &allow))
        ok = json_object_get_boolean(allow);
    json_object_put(sc);
    json_object_put(pvc);
    return ok;
}

/* The answer of an update or patch; `c->last` when it removed the object
 * (the state asked for, under the deletion's resourceVersion). */
static void answer_update(kl_response *r, struct write_ctx *c, kl_mut_kind k, kl_obj *res, int code,
                          json_object *status)
{
    if (c->last && k != KL_MUT_ERROR) {
        json_object *meta = meta_of(c->last);
        if (res) {
            char rv[32];
            snprintf(rv, sizeof(rv), "%" PRIu64, res->rv);
            json_object_object_add(meta, "resourceVersion", json_object_new_string(rv));
            kl_obj_unref(res);
        }
        set_body(r, 200, c->last);
        c->last = NULL;
        return;
    }
    json_object_put(c->last);
    c->last = NULL;
    answer_write(r, k, res, code, status, 200);
}

static void do_update(kl_api *a, const kl_request *req, const struct route *rt, kl_response *r)
{
    json_object *obj = parse_body(req, r, rt->t);
    if (!obj)
        return;
    if (!json_object_is_type(obj, json_type_object)) {
        json_object_put(obj);
        fail(r, 400, "BadRequest", NULL, NULL, "the request body must be a JSON object");
        return;
    }
    if (!shape_ok(rt->t, obj, r)) {
        json_object_put(obj);
        return;
    }
    struct write_ctx c = {.a = a,
                          .rt = rt,
                          .t = rt->t,
                          .name = rt->name,
                          .body = obj,
                          .status_only = strcmp(rt->sub, "status") == 0,
                          .ok_code = 200,
                          .dry_run = query(req, "dryRun") != NULL,
                          .may_expand = may_expand(a, rt)};
    kl_obj *res = NULL;
    int code = 0;
    json_object *status = NULL;
    kl_mut_kind k =
        kl_store_mutate(a->store, rt->t, rt->ns, rt->name, mutate_update, &c, &res, &code, &status);
    answer_update(r, &c, k, res, code, status);
    json_object_put(obj);
}

static void do_patch(kl_api *a, const kl_request *req, const struct route *rt, kl_response *r)
{
    const char *ct = req->content_type ? req->content_type : "";
    enum patch_type pt = PATCH_NONE;
    if (util_has_prefix(ct, "application/merge-patch+json"))
        pt = PATCH_MERGE;
    else if (util_has_prefix(ct, "application/json-patch+json"))
        pt = PATCH_JSON;
    else if (util_has_prefix(ct, "application/strategic-merge-patch+json") && !rt->t->custom)
        pt = PATCH_STRATEGIC;
    else if (util_has_prefix(ct, "application/apply-patch+yaml"))
        pt = PATCH_APPLY;
    if (pt == PATCH_NONE && !rt->t->custom) {
        /* Built-in routes are go-restful's, which refuses the content type
         * itself (its text, in a generic Status with empty details). */
        json_object *st =
            status_new(415, "UnsupportedMediaType", NULL, NULL, "415: Unsupported Media Type");
        json_object_object_add(st, "details", json_object_new_object());
        set_body(r, 415, st);
        return;
    }
    if (pt == PATCH_NONE) {
        fail(r, 415, "UnsupportedMediaType", NULL, NULL,
             "the body of the request was in an unknown format - accepted media types include: "
             "application/json-patch+json, application/merge-patch+json, "
             "application/apply-patch+yaml");
        return;
    }
    json_object *patch = parse_body(req, r, rt->t);
    if (!patch)
        return;
    struct write_ctx c = {.a = a,
                          .rt = rt,
                          .t = rt->t,
                          .name = rt->name,
                          .body = patch,
                          .patch = pt,
                          .status_only = strcmp(rt->sub, "status") == 0,
                          .ok_code = 200,
                          .dry_run = query(req, "dryRun") != NULL,
                          .may_expand = may_expand(a, rt)};
    kl_obj *res = NULL;
    int code = 0;
    json_object *status = NULL;
    kl_mut_kind k =
        kl_store_mutate(a->store, rt->t, rt->ns, rt->name, mutate_patch, &c, &res, &code, &status);
    /* Server-side apply of a missing object creates it. */
    if (pt == PATCH_APPLY && k == KL_MUT_ERROR && code == 404 && !c.status_only) {
        json_object_put(status);
        kl_request creq = *req;
        struct route crt = *rt;
        crt.name[0] = '\0';
        do_create(a, &creq, &crt, r);
        json_object_put(patch);
        return;
    }
    answer_update(r, &c, k, res, code, status);
    json_object_put(patch);
}

/* ---- delete ------------------------------------------------------------------------ */

struct delete_opts {
    const char *uid;
    const char *rv;
    bool dry_run;
};

/*
 * The 409 of a DeleteOptions precondition the object fails, or NULL:
 * rest.BeforeDelete checks the uid, then the resourceVersion, before the
 * storage layer would, and qualifies its Conflict by Kind ("PersistentVolume",
 * "VolumeAttachment.storage.k8s.io"; details.kind the Kind), as it builds the
 * GroupResource from the object's GroupVersionKind.
 */
static json_object *precondition_failed(const kl_type *t, const char *name,
                                        const struct delete_opts *o, const char *uid,
                                        const char *rv)
{
    char what[160];
    if (t->group[0])
        snprintf(what, sizeof(what), "%s.%s", t->kind, t->group);
    else
        snprintf(what, sizeof(what), "%s", t->kind);
    json_object *st = NULL;
    if (o->uid && strcmp(o->uid, uid) != 0)
        st = status_new(409, "Conflict", NULL, name,
                        "Operation cannot be fulfilled on %s \"%s\": the UID in the precondition "
                        "(%s) does not match the UID in record (%s). The object might have been "
                        "deleted and then recreated",
                        what, name, o->uid, uid);
    else if (o->rv && strcmp(o->rv, rv) != 0)
        st = status_new(409, "Conflict", NULL, name,
                        "Operation cannot be fulfilled on %s \"%s\": the ResourceVersion in the "
                        "precondition (%s) does not match the ResourceVersion in record (%s). The "
                        "object might have been modified",
                        what, name, o->rv, rv);
    if (!st)
        return NULL;
    json_object *d = kobj_obj(st, "details");
    if (t->group[0])
        json_object_object_add(d, "group", json_object_new_string(t->group));
    json_object_object_add(d, "kind", json_object_new_string(t->kind));
    return st;
}

static void mutate_delete(void *ud, const kl_obj *cur, kl_mut *m)
{
    struct write_ctx *c = ud;
    const struct delete_opts *o = (const struct delete_opts *)c->body;
    if (!cur) {
        mut_error(m, not_found(c->t, c->name));
        return;
    }
    json_object *meta = kobj_obj(cur->obj, "metadata");
    const char *uid = kobj_str(meta, "uid"), *rv = kobj_str(meta, "resourceVersion");
    json_object *pre = precondition_failed(c->t, c->name, o, uid ? uid : "", rv ? rv : "");
    if (pre) {
        mut_error(m, pre);
        return;
    }
    bool is_ns = strcmp(c->t->resource, "namespaces") == 0 && !c->t->group[0];
    if (has_finalizers(cur->obj) || is_ns) {
        if (kobj_str(meta, "deletionTimestamp")) {
            m->kind = KL_MUT_NOOP;
            return;
        }
        json_object *obj = jcopy(cur->obj);
        json_object *nm = meta_of(obj);
        char ts[32];
        now_rfc3339(ts, sizeof(ts));
        json_object_object_add(nm, "deletionTimestamp", json_object_new_string(ts));
        json_object_object_add(nm, "deletionGracePeriodSeconds", json_object_new_int64(0));
        json_object *g = NULL;
        if (json_object_object_get_ex(nm, "generation", &g))
            json_object_object_add(nm, "generation",
                                   json_object_new_int64(json_object_get_int64(g) + 1));
        if (is_ns) {
            json_object *st = kobj_obj(obj, "status");
            if (!st) {
                st = json_object_new_object();
                json_object_object_add(obj, "status", st);
            }
            json_object_object_add(st, "phase", json_object_new_string("Terminating"));
        }
        mut_put(c, m, obj);
        return;
    }
    if (o->dry_run) {
        m->kind = KL_MUT_NOOP;
        return;
    }
    m->kind = KL_MUT_DELETE;
    c->removed = true;
}

static void delete_answer(kl_response *r, const struct write_ctx *c, kl_mut_kind k, kl_obj *res,
                          int code, json_object *status)
{
    if (k == KL_MUT_ERROR) {
        set_body(r, code, status);
        return;
    }
    if (c->removed && !c->t->return_deleted) {
        json_object *st = json_object_new_object();
        json_object_object_add(st, "kind", json_object_new_string("Status"));
        json_object_object_add(st, "apiVersion", json_object_new_string("v1"));
        json_object_object_add(st, "metadata", json_object_new_object());
        json_object_object_add(st, "status", json_object_new_string("Success"));
        json_object *d = json_object_new_object();
        json_object_object_add(d, "name", json_object_new_string(c->name));
        if (c->t->group[0])
            json_object_object_add(d, "group", json_object_new_string(c->t->group));
        json_object_object_add(d, "kind", json_object_new_string(c->t->resource));
        json_object *tree = res ? kl_obj_tree(res) : NULL;
        const char *uid = kobj_str(kobj_obj(tree, "metadata"), "uid");
        if (uid)
            json_object_object_add(d, "uid", json_object_new_string(uid));
        json_object_put(tree);
        json_object_object_add(st, "details", d);
        set_body(r, 200, st);
    } else {
        set_obj(r, 200, res);
    }
    kl_obj_unref(res);
}

static void read_delete_opts(const kl_request *req, json_object **holder, struct delete_opts *o)
{
    memset(o, 0, sizeof(*o));
    *holder = NULL;
    if (req->body && req->body_len && req->content_type &&
        util_has_prefix(req->content_type, KL_PROTO_TYPE)) {
        /* client-go sends DeleteOptions typed with the endpoint's version
         * or meta.k8s.io/v1; anything else is no DeleteOptions (400). */
        int rc =
            kl_proto_decode(req->body, req->body_len, "meta.k8s.io/v1", "DeleteOptions", holder);
        const char *kind = rc == 0 ? kobj_str(*holder, "kind") : NULL;
        if (rc == 0 && (!kind || strcmp(kind, "DeleteOptions") != 0)) {
            json_object_put(*holder);
            *holder = NULL;
        }
    } else if (req->body && req->body_len) {
        *holder = json_tokener_parse(req->body);
    }
    json_object *pre = kobj_obj(*holder, "preconditions");
    o->uid = kobj_str(pre, "uid");
    o->rv = kobj_str(pre, "resourceVersion");
    o->dry_run = query(req, "dryRun") != NULL || kobj_len(kobj_arr(*holder, "dryRun")) > 0;
}

/* DeleteOptions' fields as metav1.DeleteOptions decodes them; NULL or the
 * reason the body is refused (400). */
static const char *bad_delete_opts(const kl_request *req, const json_object *holder)
{
    if (!req->body || !req->body_len)
        return NULL;
    if (!kobj_typed(holder, json_type_object))
        return "the body of a DELETE must be a DeleteOptions object";
    static const struct {
        const char *key;
        json_type type;
    } fields[] = {{"kind", json_type_string},
                  {"apiVersion", json_type_string},
                  {"propagationPolicy", json_type_string},
                  {"preconditions", json_type_object},
                  {"dryRun", json_type_array},
                  {"orphanDependents", json_type_boolean}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        json_object *v = kobj_get(holder, fields[i].key);
        if (v && !json_object_is_type(v, fields[i].type))
            return "DeleteOptions: a field has the wrong JSON type";
    }
    int64_t grace = 0;
    json_object *pre = kobj_obj(holder, "preconditions");
    if (kobj_int64(holder, "gracePeriodSeconds", &grace) == -EINVAL ||
        (kobj_get(pre, "uid") && !kobj_str(pre, "uid")) ||
        (kobj_get(pre, "resourceVersion") && !kobj_str(pre, "resourceVersion")))
        return "DeleteOptions: a field has the wrong JSON type";
    for (size_t i = 0; i < kobj_len(kobj_arr(holder, "dryRun")); i++)
        if (!kobj_str_at(kobj_arr(holder, "dryRun"), i))
            return "DeleteOptions: dryRun must be a list of strings";
    return NULL;
}

static void delete_one(kl_api *a, const struct route *rt, const char *name,
                       const struct delete_opts *o, kl_response *r)
{
    struct write_ctx c = {.a = a,
                          .rt = rt,
                          .t = rt->t,
                          .name = name,
                          .body = (json_object *)(const void *)o,
                          .ok_code = 200,
                          .dry_run = o->dry_run};
    kl_obj *res = NULL;
    int code = 0;
    json_object *status = NULL;
    kl_mut_kind k =
        kl_store_mutate(a->store, rt->t, rt->ns, name, mutate_delete, &c, &res, &code, &status);
    if (r)
        delete_answer(r, &c, k, res, code, status);
    else if (k == KL_MUT_ERROR)
        json_object_put(status);
    else
        kl_obj_unref(res);
}

static void do_delete(kl_api *a, const kl_request *req, const struct route *rt, kl_response *r)
{
    json_object *holder = NULL;
    struct delete_opts o;
    read_delete_opts(req, &holder, &o);
    const char *bad = bad_delete_opts(req, holder);
    if (bad)
        fail(r, 400, "BadRequest", NULL, NULL, bad);
    else
        delete_one(a, rt, rt->name, &o, r);
    json_object_put(holder);
}

static void do_delete_collection(kl_api *a, const kl_request *req, const struct route *rt,
                                 kl_response *r)
{
    struct filter f;
    if (!filter_init(&f, req, rt, r))
        return;
    json_object *holder = NULL;
    struct delete_opts o;
    read_delete_opts(req, &holder, &o);
    const char *bad = bad_delete_opts(req, holder);
    if (bad) {
        fail(r, 400, "BadRequest", NULL, NULL, bad);
        json_object_put(holder);
        filter_clear(&f);
        return;
    }
    kl_obj **items = NULL;
    size_t n = 0;
    uint64_t rv = 0;
    char *next = NULL;
    kl_store_list(a->store, rt->t, f.ns, NULL, 0, filter_match, &f, &items, &n, &rv, &next);
    for (size_t i = 0; i < n; i++) {
        struct route one = *rt;
        snprintf(one.ns, sizeof(one.ns), "%s", items[i]->ns ? items[i]->ns : "");
        delete_one(a, &one, items[i]->name, &o, NULL);
    }
    kl_objs_free(items, n);
    free(next);
    json_object_put(holder);
    filter_clear(&f);
    json_object *st = json_object_new_object();
    json_object_object_add(st, "kind", json_object_new_string("Status"));
    json_object_object_add(st, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(st, "metadata", json_object_new_object());
    json_object_object_add(st, "status", json_object_new_string("Success"));
    set_body(r, 200, st);
}

/* ---- dispatch ------------------------------------------------------------------------ */

static void method_not_allowed(kl_response *r)
{
    fail(r, 405, "MethodNotAllowed", NULL, NULL,
         "the server does not allow this method on the requested resource");
}

static bool non_resource_in(kl_api *a, const kl_discovery *d, const kl_request *req, kl_response *r)
{
    char s[MAX_SEGS][256];
    int n = split(req->path, s);
    if (n == 1 && strcmp(s[0], "api") == 0) {
        set_raw(r, 200, "application/json", d->api, strlen(d->api));
    } else if (n == 1 && strcmp(s[0], "apis") == 0) {
        set_raw(r, 200, "application/json", d->apis, strlen(d->apis));
    } else if ((n == 2 && strcmp(s[0], "api") == 0) || (n == 3 && strcmp(s[0], "apis") == 0)) {
        char key[800];
        if (n == 2)
            snprintf(key, sizeof(key), "api/%s", s[1]);
        else
            snprintf(key, sizeof(key), "apis/%s/%s", s[1], s[2]);
        json_object *l = NULL;
        if (!json_object_object_get_ex(d->gv_lists, key, &l))
            return false;
        set_body_shared(r, 200, l);
    } else if (n == 2 && strcmp(s[0], "apis") == 0) {
        json_object *g = NULL;
        if (!json_object_object_get_ex(d->gv_groups, s[1], &g))
            return false;
        set_body_shared(r, 200, g);
    } else if (n == 1 && strcmp(s[0], "version") == 0) {
        char *v = util_asprintf(
            "{\"major\":\"1\",\"minor\":\"%s\",\"gitVersion\":\"v1.%s.0\",\"gitCommit\":"
            "\"kube-lite\",\"gitTreeState\":\"clean\",\"buildDate\":\"2026-01-01T00:00:00Z\","
            "\"goVersion\":\"go1.23.4\",\"compiler\":\"gc\",\"platform\":\"linux/amd64\"}\n",
            a->opts.version_minor, a->opts.version_minor);
        set_raw(r, 200, "application/json", v, strlen(v));
        free(v);
    } else if (n == 1 && (strcmp(s[0], "healthz") == 0 || strcmp(s[0], "readyz") == 0 ||
                          strcmp(s[0], "livez") == 0)) {
        set_raw(r, 200, "text/plain; charset=utf-8", "ok", 2);
    } else if (n == 2 && strcmp(s[0], "openapi") == 0 && strcmp(s[1], "v2") == 0) {
        /* An empty document: kubectl then skips client-side validation. */
        set_raw(r, 200, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf", "", 0);
    } else if (n == 2 && strcmp(s[0], "openapi") == 0 && strcmp(s[1], "v3") == 0) {
        set_raw(r, 200, "application/json", d->openapi_root, strlen(d->openapi_root));
    } else if (n >= 4 && strcmp(s[0], "openapi") == 0 && strcmp(s[1], "v3") == 0) {
        char key[800];
        if (n == 4)
            snprintf(key, sizeof(key), "%s/%s", s[2], s[3]);
        else
            snprintf(key, sizeof(key), "%s/%s/%s", s[2], s[3], s[4]);
        json_object *doc = NULL;
        if (!json_object_object_get_ex(d->openapi_gv, key, &doc))
            return false;
        set_body_shared(r, 200, doc);
    } else {
        return false;
    }
    return true;
}

/* The discovery documents for the types served now (a reference). */
static kl_discovery *discovery(kl_api *a)
{
    pthread_mutex_lock(&a->disc_lock);
    uint64_t gen = kl_crds_generation(a->crds);
    if (a->disc->gen != gen) {
        size_t n = 0;
        const kl_type **extra = kl_crds_list(a->crds, &n, &gen);
        kl_discovery_unref(a->disc);
        a->disc = kl_discovery_build(extra, n, gen);
        free(extra);
    }
    kl_discovery *d = kl_discovery_ref(a->disc);
    pthread_mutex_unlock(&a->disc_lock);
    return d;
}

/* Non-resource paths: discovery, OpenAPI, version and health. */
static bool non_resource(kl_api *a, const kl_request *req, kl_response *r)
{
    if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0)
        return false;
    kl_discovery *d = discovery(a);
    bool ok = non_resource_in(a, d, req, r);
    kl_discovery_unref(d);
    return ok;
}

static const char *verb_of(const kl_request *req, const struct route *rt)
{
    const char *m = req->method;
    bool named = rt->name[0] != '\0';
    if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0) {
        if (!named && (rt->legacy_watch || query_true(req, "watch")))
            return "watch";
        if (named && rt->legacy_watch)
            return "watch";
        return named ? "get" : "list";
    }
    if (strcmp(m, "POST") == 0)
        return "create";
    if (strcmp(m, "PUT") == 0)
        return "update";
    if (strcmp(m, "PATCH") == 0)
        return "patch";
    if (strcmp(m, "DELETE") == 0)
        return named ? "delete" : "deletecollection";
    return NULL;
}

static void handle_as(kl_api *a, const kl_request *req, kl_response *r, const kl_user *u);

/*
 * The protobuf answer, when the Accept header prefers it (client-go with
 * ContentType protobuf): objects, lists and watch events of built-in types,
 * and the Status of any resource path (kube-apiserver encodes errors with
 * every serializer, while custom resources' objects stay JSON: their
 * endpoints do not offer protobuf). Discovery and OpenAPI stay JSON, which
 * clients read by the Content-Type. Handlers build JSON as always; it is
 * re-encoded here.
 */
static void proto_answer(kl_api *a, const kl_request *req, kl_response *r)
{
    struct route rt;
    if (!kl_proto_accepts(req->accept) || parse_route(a, req->path, &rt) != 1)
        return;
    if (r->stream) {
        if (!rt.t->custom && !r->stream->table) {
            r->stream->proto = true;
            r->content_type = KL_PROTO_WATCH_TYPE;
        }
        return;
    }
    if (!r->body || !r->content_type || strcmp(r->content_type, "application/json") != 0)
        return;
    json_object *obj = kobj_parse_text(r->body, r->len);
    const char *kind = kobj_str(obj, "kind");
    char *pb = NULL;
    size_t len = 0;
    if (kind && (!rt.t->custom || strcmp(kind, "Status") == 0) &&
        kl_proto_encode(obj, &pb, &len) == 0) {
        free(r->body);
        r->body = pb;
        r->len = len;
        r->content_type = KL_PROTO_TYPE;
    }
    json_object_put(obj);
}

void kl_api_handle(kl_api *a, const kl_request *req, kl_response *r)
{
    memset(r, 0, sizeof(*r));
    r->verb = req->method;
    r->resource = "";
    sa_ident sa;
    memset(&sa, 0, sizeof(sa));
    const kl_user *u = authenticate(a, req, r, &sa);
    if (u)
        handle_as(a, req, r, u);
    sa_ident_clear(&sa);
    proto_answer(a, req, r);
}

static void handle_as(kl_api *a, const kl_request *req, kl_response *r, const kl_user *u)
{
    struct route rt;
    if (parse_route(a, req->path, &rt) != 1) {
        kl_attrs at = {.resource_request = false, .path = req->path};
        char verb[16];
        snprintf(verb, sizeof(verb), "%s", req->method);
        for (char *p = verb; *p; p++)
            *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        at.verb = verb;
        if (!authorize(a, u, &at, NULL, r))
            return;
        if (!non_resource(a, req, r))
            not_found_path(r);
        return;
    }
    const kl_type *t = rt.t;
    r->resource = t->resource;
    const char *verb = verb_of(req, &rt);
    if (!verb) {
        method_not_allowed(r);
        return;
    }
    r->verb = verb;
    bool token_req =
        strcmp(rt.sub, "token") == 0 && !t->group[0] && strcmp(t->resource, "serviceaccounts") == 0;
    if (rt.sub[0] && !(strcmp(rt.sub, "status") == 0 && t->has_status) && !token_req) {
        not_found_path(r);
        return;
    }
    if (token_req && strcmp(verb, "create") != 0) {
        method_not_allowed(r);
        return;
    }
    /* A list or watch narrowed to one name is authorized as that name. */
    const char *authz_name = rt.name;
    kl_fieldsel *fs = NULL;
    const char *fsq = query(req, "fieldSelector");
    if (!rt.name[0] && fsq && kl_fieldsel_parse(fsq, &fs) == 0 && kl_fieldsel_name(fs))
        authz_name = kl_fieldsel_name(fs);
    kl_attrs at = {.resource_request = true,
                   .verb = verb,
                   .group = t->group,
                   .resource = t->resource,
                   .subresource = rt.sub[0] ? rt.sub : NULL,
                   .ns = rt.ns,
                   .name = authz_name,
                   .path = req->path};
    bool ok = authorize(a, u, &at, t, r);
    kl_fieldsel_free(fs);
    if (!ok)
        return;
    if (strcmp(verb, "watch") == 0) {
        if (rt.name[0]) {
            /* /watch/<res>/<name>: a watch narrowed to the name. */
            not_found_path(r);
            return;
        }
        do_watch(a, req, &rt, r);
    } else if (strcmp(verb, "list") == 0) {
        if (rt.sub[0])
            method_not_allowed(r);
        else
            do_list(a, req, &rt, r);
    } else if (strcmp(verb, "get") == 0) {
        do_get(a, req, &rt, r);
    } else if (strcmp(verb, "create") == 0) {
        if (token_req)
            do_token_request(a, req, &rt, r);
        else if (rt.name[0])
            method_not_allowed(r);
        else
            do_create(a, req, &rt, r);
    } else if (strcmp(verb, "update") == 0) {
        if (!rt.name[0])
            method_not_allowed(r);
        else
            do_update(a, req, &rt, r);
    } else if (strcmp(verb, "patch") == 0) {
        if (!rt.name[0])
            method_not_allowed(r);
        else
            do_patch(a, req, &rt, r);
    } else if (strcmp(verb, "delete") == 0) {
        if (rt.sub[0])
            method_not_allowed(r);
        else
            do_delete(a, req, &rt, r);
    } else {
        do_delete_collection(a, req, &rt, r);
    }
    /* kube-apiserver's CRD controllers, run in line: serve, follow or retire
     * the types of the stored CRDs. */
    if (r->code < 300 && strcmp(t->group, "apiextensions.k8s.io") == 0 &&
        strcmp(verb, "get") != 0 && strcmp(verb, "list") != 0 && strcmp(verb, "watch") != 0)
        kl_crds_reconcile(a->crds);
}

void kl_api_set_watch_close_after(kl_api *a, util_duration d)
{
    __atomic_store_n(&a->opts.watch_close_after, d, __ATOMIC_RELAXED);
}

static const char *no_query(void *ud, const char *key)
{
    (void)ud;
    (void)key;
    return NULL;
}

int kl_api_call(kl_api *a, const char *method, const char *path, const char *content_type,
                const char *body, json_object **answer)
{
    kl_request req = {.method = method,
                      .path = path,
                      .query = no_query,
                      .content_type = content_type,
                      .body = body,
                      .body_len = body ? strlen(body) : 0,
                      .trusted = true};
    kl_response r;
    kl_api_handle(a, &req, &r);
    if (answer)
        *answer = r.body ? json_tokener_parse(r.body) : NULL;
    free(r.body);
    kl_stream_free(r.stream);
    return r.code;
}

int kl_api_create_json(kl_api *a, const char *path, const char *json)
{
    json_object *ans = NULL;
    int code = kl_api_call(a, "POST", path, "application/json", json, &ans);
    if (code >= 300)
        util_err_set(-EIO, "POST %s: %d %s", path, code,
                     ans ? json_object_to_json_string(ans) : "");
    json_object_put(ans);
    return code < 300 ? 0 : -EIO;
}

void kl_api_bootstrap(kl_api *a)
{
    /* The namespaces every cluster starts with. */
    static const char *const names[] = {"default", "kube-system", "kube-public", "kube-node-lease"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char *body = util_asprintf("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{"
                                   "\"name\":\"%s\"}}",
                                   names[i]);
        if (kl_api_create_json(a, "/api/v1/namespaces", body) < 0)
            obs_error("bootstrap: %s", util_err_last());
        free(body);
    }
}
