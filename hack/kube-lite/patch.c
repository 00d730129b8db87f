/*
 * patch: the three PATCH content types kube-apiserver accepts, applied to
 * json-c trees: RFC 7386 merge patch, RFC 6902 JSON patch and apimachinery's
 * strategic merge patch (driven by the kl_merge_key table of a type).
 *
 * Every function works on a deep copy of `target` and hands the finished
 * copy to the caller, so a failing patch never leaves a half-applied tree
 * behind. Out-of-memory aborts, as in common/util: it is not an input error.
 */
#include "kube-lite/kl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- json helpers ------------------------------------------------------------- */

static void oom(void)
{
    fputs("kube-lite: out of memory\n", stderr);
    abort();
}

static json_object *must(json_object *o)
{
    if (o == NULL)
        oom();
    return o;
}

/* JSON null is a NULL pointer in json-c, which json_object_deep_copy refuses. */
static json_object *jcopy(const json_object *v)
{
    json_object *dst = NULL;

    if (v == NULL)
        return NULL;
    /* json-c takes a non-const source but only reads it. */
    if (json_object_deep_copy((json_object *)v, &dst, NULL) != 0)
        oom();
    return dst;
}

/* Takes ownership of v; replaces (and releases) any value under k. */
static void obj_set(json_object *o, const char *k, json_object *v)
{
    if (json_object_object_add(o, k, v) != 0)
        oom();
}

static void arr_add(json_object *a, json_object *v)
{
    if (json_object_array_add(a, v) != 0)
        oom();
}

static void arr_put(json_object *a, size_t i, json_object *v)
{
    if (json_object_array_put_idx(a, i, v) != 0)
        oom();
}

/* json-c 0.16 has no insert: grow by one and shift the tail right, holding
 * an extra reference on each moved element so put_idx does not free it. */
static void arr_insert(json_object *a, size_t idx, json_object *v)
{
    size_t n = json_object_array_length(a);

    arr_add(a, NULL);
    for (size_t i = n; i > idx; i--)
        arr_put(a, i, json_object_get(json_object_array_get_idx(a, i - 1)));
    arr_put(a, idx, v);
}

static bool is_obj(const json_object *v)
{
    return json_object_is_type(v, json_type_object);
}

static bool is_arr(const json_object *v)
{
    return json_object_is_type(v, json_type_array);
}

static bool is_num(enum json_type t)
{
    return t == json_type_int || t == json_type_double;
}

static bool num_eq(const json_object *a, const json_object *b)
{
    if (json_object_is_type(a, json_type_int) && json_object_is_type(b, json_type_int)) {
        int64_t x = json_object_get_int64(a);
        /* get_int64 saturates values above INT64_MAX (json-c stores them
         * as uint64): compare those unsigned. */
        if (x != json_object_get_int64(b))
            return false;
        return x != INT64_MAX || json_object_get_uint64(a) == json_object_get_uint64(b);
    }
    return json_object_get_double(a) == json_object_get_double(b);
}

/* Semantic equality: 1 == 1.0, object key order does not matter. */
static bool jeq(const json_object *a, const json_object *b)
{
    enum json_type ta = json_object_get_type(a);
    enum json_type tb = json_object_get_type(b);

    if (is_num(ta) && is_num(tb))
        return num_eq(a, b);
    if (ta != tb)
        return false;
    switch (ta) {
    case json_type_null:
        return true;
    case json_type_boolean:
        return json_object_get_boolean(a) == json_object_get_boolean(b);
    case json_type_string: {
        int la = json_object_get_string_len(a);
        return la == json_object_get_string_len(b) &&
               memcmp(json_object_get_string((json_object *)a),
                      json_object_get_string((json_object *)b), (size_t)la) == 0;
    }
    case json_type_array: {
        size_t n = json_object_array_length(a);
        if (n != json_object_array_length(b))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!jeq(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i)))
                return false;
        return true;
    }
    case json_type_object: {
        struct json_object_iter it;
        if (json_object_object_length(a) != json_object_object_length(b))
            return false;
        json_object_object_foreachC(a, it)
        {
            json_object *bv = NULL;
            if (!json_object_object_get_ex(b, it.key, &bv) || !jeq(it.val, bv))
                return false;
        }
        return true;
    }
    default:
        return false;
    }
}

static const char *str_or_empty(const json_object *v)
{
    return json_object_is_type(v, json_type_string) ? json_object_get_string((json_object *)v) : "";
}

/* ---- RFC 7386 merge patch ------------------------------------------------------ */

/* Merges object `patch` into the owned object `dst` in place. */
static void merge_obj(json_object *dst, const json_object *patch)
{
    struct json_object_iter it;

    json_object_object_foreachC(patch, it)
    {
        json_object *cur = NULL;

        if (it.val == NULL) {
            json_object_object_del(dst, it.key);
        } else if (!is_obj(it.val)) {
            obj_set(dst, it.key, jcopy(it.val));
        } else if (json_object_object_get_ex(dst, it.key, &cur) && is_obj(cur)) {
            merge_obj(cur, it.val);
        } else {
            /* A new or non-object member starts from {} so that nulls
             * nested in the patch are dropped, as the RFC's recursion does. */
            json_object *fresh = must(json_object_new_object());
            merge_obj(fresh, it.val);
            obj_set(dst, it.key, fresh);
        }
    }
}

int kl_merge_patch(const json_object *target, const json_object *patch, json_object **out)
{
    *out = NULL;
    if (!is_obj(patch)) {
        *out = jcopy(patch);
        return 0;
    }
    json_object *res = is_obj(target) ? jcopy(target) : must(json_object_new_object());
    merge_obj(res, patch);
    *out = res;
    return 0;
}

/* ---- RFC 6902 JSON patch ---------------------------------------------------------- */

/* A parsed JSON pointer: n unescaped reference tokens living in buf. */
typedef struct jptr {
    char *buf;
    char **tok;
    size_t n;
} jptr;

static void jptr_free(jptr *p)
{
    free(p->buf);
    free(p->tok);
    memset(p, 0, sizeof(*p));
}

/* -EINVAL (no message) when s is not a JSON pointer. */
static int jptr_parse(const char *s, jptr *p)
{
    memset(p, 0, sizeof(*p));
    if (*s == '\0')
        return 0;
    if (*s != '/')
        return -EINVAL;

    size_t n = 0;
    for (const char *c = s; *c; c++)
        n += *c == '/';
    p->buf = util_strdup(s);
    p->tok = util_calloc(n, sizeof(char *));

    /* Unescape in place: the write cursor never passes the read cursor.
     * Decoding left to right makes "~01" read as "~1", as the RFC wants. */
    char *w = p->buf;
    p->tok[p->n++] = w;
    for (const char *r = s + 1; *r; r++) {
        if (*r == '/') {
            *w++ = '\0';
            p->tok[p->n++] = w;
        } else if (*r == '~') {
            if (r[1] != '0' && r[1] != '1') {
                jptr_free(p);
                return -EINVAL;
            }
            *w++ = r[1] == '0' ? '~' : '/';
            r++;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return 0;
}

/* An array index: decimal, no leading zeros ("0" itself is fine). */
static bool parse_index(const char *t, size_t *out)
{
    size_t v = 0;

    if (t[0] == '\0' || (t[0] == '0' && t[1] != '\0'))
        return false;
    for (; *t; t++) {
        if (*t < '0' || *t > '9' || v > (SIZE_MAX - 9) / 10)
            return false;
        v = v * 10 + (size_t)(*t - '0');
    }
    *out = v;
    return true;
}

/* The value at the first `depth` tokens of p (borrowed; may be JSON null). */
static int jp_walk(json_object *doc, const jptr *p, size_t depth, const char *path,
                   json_object **at)
{
    json_object *cur = doc;

    for (size_t i = 0; i < depth; i++) {
        json_object *next = NULL;
        size_t idx = 0;

        if (is_obj(cur)) {
            if (!json_object_object_get_ex(cur, p->tok[i], &next))
                return util_err_set(-ECANCELED, "path \"%s\" does not exist", path);
        } else if (is_arr(cur)) {
            if (!parse_index(p->tok[i], &idx) || idx >= json_object_array_length(cur))
                return util_err_set(-ECANCELED, "path \"%s\": bad array index \"%s\"", path,
                                    p->tok[i]);
            next = json_object_array_get_idx(cur, idx);
        } else {
            return util_err_set(-ECANCELED, "path \"%s\" does not exist", path);
        }
        cur = next;
    }
    *at = cur;
    return 0;
}

/* Adds (owned) v at p. On error v is released. */
static int jp_add(json_object **doc, const jptr *p, const char *path, json_object *v)
{
    json_object *parent = NULL;
    size_t idx = 0;

    if (p->n == 0) {
        json_object_put(*doc);
        *doc = v;
        return 0;
    }
    int rc = jp_walk(*doc, p, p->n - 1, path, &parent);
    const char *last = p->tok[p->n - 1];
    if (rc == 0 && is_obj(parent)) {
        obj_set(parent, last, v);
        return 0;
    }
    if (rc == 0 && is_arr(parent)) {
        if (strcmp(last, "-") == 0) {
            arr_add(parent, v);
            return 0;
        }
        if (parse_index(last, &idx) && idx <= json_object_array_length(parent)) {
            arr_insert(parent, idx, v);
            return 0;
        }
        rc = util_err_set(-ECANCELED, "path \"%s\": bad array index \"%s\"", path, last);
    } else if (rc == 0) {
        rc = util_err_set(-ECANCELED, "path \"%s\": parent is not an object or array", path);
    }
    json_object_put(v);
    return rc;
}

/* Removes the value at p; hands it to *taken when that is non-NULL. */
static int jp_remove(json_object *doc, const jptr *p, const char *path, json_object **taken)
{
    json_object *parent = NULL, *v = NULL;
    size_t idx = 0;

    if (p->n == 0)
        return util_err_set(-ECANCELED, "cannot remove the whole document");
    int rc = jp_walk(doc, p, p->n - 1, path, &parent);
    if (rc != 0)
        return rc;
    const char *last = p->tok[p->n - 1];
    if (is_obj(parent) && json_object_object_get_ex(parent, last, &v)) {
        if (taken != NULL)
            *taken = json_object_get(v);
        json_object_object_del(parent, last);
        return 0;
    }
    if (is_arr(parent) && parse_index(last, &idx) && idx < json_object_array_length(parent)) {
        if (taken != NULL)
            *taken = json_object_get(json_object_array_get_idx(parent, idx));
        json_object_array_del_idx(parent, idx, 1);
        return 0;
    }
    return util_err_set(-ECANCELED, "path \"%s\" does not exist", path);
}

/* Replaces the existing value at p with (owned) v; releases v on error. */
static int jp_replace(json_object **doc, const jptr *p, const char *path, json_object *v)
{
    json_object *parent = NULL;
    size_t idx = 0;

    if (p->n == 0) {
        json_object_put(*doc);
        *doc = v;
        return 0;
    }
    int rc = jp_walk(*doc, p, p->n - 1, path, &parent);
    if (rc == 0) {
        const char *last = p->tok[p->n - 1];
        if (is_obj(parent) && json_object_object_get_ex(parent, last, NULL)) {
            obj_set(parent, last, v);
            return 0;
        }
        if (is_arr(parent) && parse_index(last, &idx) && idx < json_object_array_length(parent)) {
            arr_put(parent, idx, v);
            return 0;
        }
        rc = util_err_set(-ECANCELED, "path \"%s\" does not exist", path);
    }
    json_object_put(v);
    return rc;
}

typedef enum { OP_ADD, OP_REMOVE, OP_REPLACE, OP_MOVE, OP_COPY, OP_TEST } jp_kind;

typedef struct jp_op {
    jp_kind kind;
    const char *name;
    const char *path;
    const char *from;         /* move, copy */
    const json_object *value; /* add, replace, test; may be JSON null */
} jp_op;

static int jp_pointer_field(const json_object *op, size_t i, const char *opname, const char *field,
                            const char **out)
{
    json_object *v = NULL;
    jptr p;

    if (!json_object_object_get_ex(op, field, &v) || !json_object_is_type(v, json_type_string))
        return util_err_set(-ECANCELED, "json patch operation %zu (%s): missing \"%s\" string", i,
                            opname, field);
    *out = json_object_get_string(v);
    if (*out == NULL || jptr_parse(*out, &p) != 0)
        return util_err_set(-ECANCELED,
                            "json patch operation %zu (%s): invalid JSON pointer \"%s\"", i, opname,
                            *out);
    jptr_free(&p);
    return 0;
}

/* The JSON type as Go's "cannot unmarshal" errors name it. */
static const char *go_json_type(const json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_object:
        return "object";
    case json_type_array:
        return "array";
    case json_type_string:
        return "string";
    case json_type_boolean:
        return "bool";
    default:
        return "number";
    }
}

/* Reads one operation; -EINVAL when it is malformed (400), -ECANCELED when
 * it cannot be applied (422). */
static int jp_decode(const json_object *op, size_t i, jp_op *o)
{
    static const char *const names[] = {"add", "remove", "replace", "move", "copy", "test"};
    json_object *v = NULL;
    size_t k;

    memset(o, 0, sizeof(*o));
    /* As kube-apiserver's json-patch: only an element that does not decode
     * into an operation map is a malformed patch (400, in Go's words);
     * everything else fails when applied (-ECANCELED: 422). */
    if (op != NULL && !is_obj(op))
        return util_err_set(-EINVAL,
                            "json: cannot unmarshal %s into Go value of type "
                            "jsonpatch.Operation",
                            go_json_type(op));
    if (!json_object_object_get_ex(op, "op", &v) || !json_object_is_type(v, json_type_string))
        return util_err_set(-ECANCELED, "json patch operation %zu: missing \"op\" string", i);
    o->name = json_object_get_string(v);
    for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (strcmp(o->name, names[k]) == 0)
            break;
    if (k == sizeof(names) / sizeof(names[0]))
        return util_err_set(-ECANCELED, "json patch operation %zu: unknown op \"%s\"", i, o->name);
    o->kind = (jp_kind)k;

    int rc = jp_pointer_field(op, i, o->name, "path", &o->path);
    if (rc == 0 && (o->kind == OP_MOVE || o->kind == OP_COPY))
        rc = jp_pointer_field(op, i, o->name, "from", &o->from);
    if (rc == 0 && (o->kind == OP_ADD || o->kind == OP_REPLACE || o->kind == OP_TEST)) {
        /* Present-but-null is a value; only absence is an error. */
        if (!json_object_object_get_ex(op, "value", &v))
            return util_err_set(-ECANCELED, "json patch operation %zu (%s): missing \"value\"", i,
                                o->name);
        o->value = v;
    }
    return rc;
}

static bool jptr_is_proper_prefix(const jptr *a, const jptr *b)
{
    if (a->n >= b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->tok[i], b->tok[i]) != 0)
            return false;
    return true;
}

static int jp_apply(json_object **doc, const jp_op *o)
{
    jptr path, from = {0};
    json_object *v = NULL;
    int rc;

    /* jp_decode checked both pointers; this only keeps the analyzer sure. */
    if (o->path == NULL || ((o->kind == OP_MOVE || o->kind == OP_COPY) && o->from == NULL))
        return util_err_set(-EINVAL, "malformed operation");
    if (jptr_parse(o->path, &path) != 0 || (o->from && jptr_parse(o->from, &from) != 0)) {
        jptr_free(&path);
        return util_err_set(-EINVAL, "invalid JSON pointer");
    }
    switch (o->kind) {
    case OP_ADD:
        rc = jp_add(doc, &path, o->path, jcopy(o->value));
        break;
    case OP_REMOVE:
        rc = jp_remove(*doc, &path, o->path, NULL);
        break;
    case OP_REPLACE:
        rc = jp_replace(doc, &path, o->path, jcopy(o->value));
        break;
    case OP_MOVE:
        rc = jp_walk(*doc, &from, from.n, o->from, &v);
        if (rc != 0 || strcmp(o->from, o->path) == 0)
            break;
        if (jptr_is_proper_prefix(&from, &path)) {
            rc = util_err_set(-ECANCELED, "cannot move \"%s\" into its own child \"%s\"", o->from,
                              o->path);
            break;
        }
        v = NULL;
        rc = jp_remove(*doc, &from, o->from, &v);
        if (rc == 0)
            rc = jp_add(doc, &path, o->path, v);
        break;
    case OP_COPY:
        rc = jp_walk(*doc, &from, from.n, o->from, &v);
        if (rc == 0)
            rc = jp_add(doc, &path, o->path, jcopy(v));
        break;
    case OP_TEST:
    default:
        /* kube-apiserver's json-patch reads a missing member of an existing
         * object as null: `test` with value null passes, any other fails. */
        rc = path.n ? jp_walk(*doc, &path, path.n - 1, o->path, &v) : 0;
        if (rc == 0 && path.n && is_obj(v) &&
            !json_object_object_get_ex(v, path.tok[path.n - 1], NULL))
            v = NULL;
        else if (rc == 0)
            rc = jp_walk(*doc, &path, path.n, o->path, &v);
        if (rc == 0 && !jeq(v, o->value))
            rc = util_err_set(-ECANCELED, "test failed: value at \"%s\" differs", o->path);
        break;
    }
    jptr_free(&path);
    jptr_free(&from);
    return rc;
}

int kl_json_patch(const json_object *target, const json_object *patch, json_object **out)
{
    int rc = 0;

    *out = NULL;
    if (patch == NULL) {
        /* null decodes into an empty patch. */
        *out = jcopy(target);
        return 0;
    }
    if (!is_arr(patch))
        return util_err_set(-EINVAL,
                            "json: cannot unmarshal %s into Go value of type jsonpatch.Patch",
                            go_json_type(patch));
    size_t n = json_object_array_length(patch);
    jp_op *ops = util_calloc(n, sizeof(*ops));
    /* Decode everything first: a malformed patch is a 400 even when an
     * earlier operation would also have failed to apply. */
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = jp_decode(json_object_array_get_idx(patch, i), i, &ops[i]);
    if (rc != 0) {
        free(ops);
        return rc;
    }

    json_object *doc = jcopy(target);
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = jp_apply(&doc, &ops[i]);
        if (rc != 0)
            rc = util_err_set(rc, "json patch operation %zu (%s): %s", i, ops[i].name,
                              util_err_last());
    }
    free(ops);
    if (rc != 0) {
        json_object_put(doc);
        return rc;
    }
    *out = doc;
    return 0;
}

/* ---- strategic merge patch ---------------------------------------------------------- */

#define DIR_PATCH      "$patch"
#define DIR_RETAIN     "$retainKeys"
#define DIR_DELETE_PFX "$deleteFromPrimitiveList/"
#define DIR_ORDER_PFX  "$setElementOrder/"

typedef struct smp {
    const kl_merge_key *keys;
    size_t n_keys;
} smp;

static bool is_directive(const char *k)
{
    return strcmp(k, DIR_PATCH) == 0 || strcmp(k, DIR_RETAIN) == 0 ||
           util_has_prefix(k, DIR_DELETE_PFX) || util_has_prefix(k, DIR_ORDER_PFX);
}

static const kl_merge_key *smp_list_key(const smp *s, const char *path)
{
    for (size_t i = 0; i < s->n_keys; i++)
        if (s->keys[i].path != NULL && strcmp(s->keys[i].path, path) == 0)
            return &s->keys[i];
    return NULL;
}

static char *child_path(const char *path, const char *k)
{
    return *path ? util_asprintf("%s.%s", path, k) : util_strdup(k);
}

/* True when list element el carries merge key `key` equal to that of p. */
static bool key_match(const json_object *el, const json_object *p, const char *key)
{
    json_object *a = NULL, *b = NULL;

    return is_obj(el) && json_object_object_get_ex(el, key, &a) &&
           json_object_object_get_ex(p, key, &b) && jeq(a, b);
}

static bool arr_contains(const json_object *a, const json_object *v, size_t upto)
{
    for (size_t i = 0; i < upto; i++)
        if (jeq(json_object_array_get_idx(a, i), v))
            return true;
    return false;
}

static int smp_value(json_object *cur, const json_object *patch, const char *path, const smp *s,
                     json_object **out);

/* True when list `a` holds the string s. */
static bool str_listed(const json_object *a, const char *s)
{
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *v = json_object_array_get_idx(a, i);
        if (json_object_is_type(v, json_type_string) && strcmp(json_object_get_string(v), s) == 0)
            return true;
    }
    return false;
}

/* Checks a list patch before anything is changed; sets *replace when one
 * element is {"$patch": "replace"}. */
static int smp_list_check(const json_object *patch, const char *key, const char *path,
                          bool *replace)
{
    size_t n = json_object_array_length(patch);

    *replace = false;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(patch, i), *d = NULL;

        if (is_obj(e) && json_object_object_get_ex(e, DIR_PATCH, &d)) {
            const char *dir = str_or_empty(d);
            if (strcmp(dir, "replace") == 0)
                *replace = true;
            else if (strcmp(dir, "delete") == 0 && key != NULL &&
                     json_object_object_get_ex(e, key, NULL))
                continue;
            else if (strcmp(dir, "merge") != 0)
                return util_err_set(-EINVAL, "%s: invalid $patch directive in list element %zu",
                                    path, i);
        } else if (key != NULL && !(is_obj(e) && json_object_object_get_ex(e, key, NULL))) {
            return util_err_set(-EINVAL,
                                "%s: list element %zu does not contain declared merge key: %s",
                                path, i, key);
        }
    }
    return 0;
}

static void arr_dedupe(json_object *a)
{
    for (size_t i = 1; i < json_object_array_length(a);) {
        if (arr_contains(a, json_object_array_get_idx(a, i), i))
            json_object_array_del_idx(a, i, 1);
        else
            i++;
    }
}

/* Index of `el` in list `a` (by merge key, or by value when key is NULL),
 * skipping "$patch" directive entries; -1 when absent. */
static long smp_index(const json_object *a, const json_object *el, const char *key)
{
    long k = 0;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *x = json_object_array_get_idx(a, i);
        if (is_obj(x) && json_object_object_get_ex(x, DIR_PATCH, NULL))
            continue;
        if (key != NULL ? key_match(x, el, key) : jeq(x, el))
            return k;
        k++;
    }
    return -1;
}

/*
 * The order apimachinery's mergeSlice leaves a merged list in
 * (normalizeElementOrder): the elements the patch names, in the patch's
 * order, interleaved with the server-only ones (in the original order);
 * a patch element goes before a server-only one unless both were in the
 * original and the server-only one came first. So a new element lands at the
 * front, and an updated one keeps its place. Replaces *merged.
 */
static void smp_order(json_object **merged, const json_object *patch, const json_object *orig,
                      const char *key)
{
    size_t n = json_object_array_length(*merged), np = 0, ns = 0;
    json_object **pi = util_calloc(n + 1, sizeof(json_object *)),
                **so = util_calloc(n + 1, sizeof(json_object *));
    long *pidx = util_calloc(n + 1, sizeof(*pidx));
    for (size_t i = 0; i < n; i++) {
        json_object *el = json_object_array_get_idx(*merged, i);
        long at = smp_index(patch, el, key);
        if (at < 0) {
            so[ns++] = el;
            continue;
        }
        /* A stable insertion by the patch position. */
        size_t j = np++;
        while (j > 0 && pidx[j - 1] > at) {
            pi[j] = pi[j - 1];
            pidx[j] = pidx[j - 1];
            j--;
        }
        pi[j] = el;
        pidx[j] = at;
    }
    json_object *res = must(json_object_new_array());
    size_t i = 0, j = 0;
    while (i < ns || j < np) {
        bool left = j >= np;
        if (i < ns && j < np) {
            long li = smp_index(orig, so[i], key), ri = smp_index(orig, pi[j], key);
            left = li >= 0 && ri >= 0 && li < ri;
        }
        arr_add(res, json_object_get(left ? so[i++] : pi[j++]));
    }
    free(pi);
    free(so);
    free(pidx);
    json_object_put(*merged);
    *merged = res;
}

/*
 * Merges list patch into the owned `cur` (consumed, may be anything) for a
 * list named in the merge keys. Keyed lists: deletions first (every match,
 * as apimachinery does), then each element merges into the first element
 * with the same key or is appended. Primitive lists: set union. Both end in
 * smp_order's order.
 */
static int smp_list(json_object *cur, const json_object *patch, const kl_merge_key *mk,
                    const char *path, const smp *s, json_object **out)
{
    size_t n = json_object_array_length(patch);
    bool replace = false;

    *out = NULL;
    int rc = smp_list_check(patch, mk->key, path, &replace);
    if (rc != 0) {
        json_object_put(cur);
        return rc;
    }
    if (replace || !is_arr(cur)) {
        json_object_put(cur);
        cur = must(json_object_new_array());
    }

    if (mk->key == NULL) {
        json_object *orig = jcopy(cur);
        arr_dedupe(cur);
        for (size_t i = 0; i < n; i++) {
            json_object *e = json_object_array_get_idx(patch, i);
            if (is_obj(e) && json_object_object_get_ex(e, DIR_PATCH, NULL))
                continue;
            if (!arr_contains(cur, e, json_object_array_length(cur)))
                arr_add(cur, jcopy(e));
        }
        /* The union, ordered as mergeSlice orders it for keyed lists too:
         * new values first. */
        smp_order(&cur, patch, orig, NULL);
        json_object_put(orig);
        *out = cur;
        return 0;
    }

    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(patch, i), *d = NULL;
        if (!json_object_object_get_ex(e, DIR_PATCH, &d) || strcmp(str_or_empty(d), "delete") != 0)
            continue;
        for (size_t j = json_object_array_length(cur); j-- > 0;)
            if (key_match(json_object_array_get_idx(cur, j), e, mk->key))
                json_object_array_del_idx(cur, j, 1);
    }

    json_object *orig = jcopy(cur);
    char *epath = util_asprintf("%s[]", path);
    for (size_t i = 0; i < n && rc == 0; i++) {
        json_object *e = json_object_array_get_idx(patch, i), *res = NULL;
        size_t len = json_object_array_length(cur), j;

        if (json_object_object_get_ex(e, DIR_PATCH, NULL))
            continue;
        for (j = 0; j < len; j++)
            if (key_match(json_object_array_get_idx(cur, j), e, mk->key))
                break;
        if (j == len) {
            rc = smp_value(NULL, e, epath, s, &res);
            if (rc == 0 && res != NULL)
                arr_add(cur, res);
            continue;
        }
        /* smp_value consumes its first argument: lend it a reference of
         * its own so the array's reference stays valid until put back. */
        rc = smp_value(json_object_get(json_object_array_get_idx(cur, j)), e, epath, s, &res);
        if (rc == 0 && res != NULL)
            arr_put(cur, j, res);
        else if (rc == 0)
            json_object_array_del_idx(cur, j, 1);
    }
    free(epath);
    if (rc == 0)
        smp_order(&cur, patch, orig, mk->key);
    json_object_put(orig);
    if (rc != 0) {
        json_object_put(cur);
        return rc;
    }
    *out = cur;
    return 0;
}

/* Validates the directives of map patch before it is applied. */
static int smp_map_check(const json_object *patch, const char *path)
{
    struct json_object_iter it;
    json_object *retain = NULL;

    if (json_object_object_get_ex(patch, DIR_RETAIN, &retain)) {
        if (!is_arr(retain))
            return util_err_set(-EINVAL, "%s: $retainKeys must be a list", *path ? path : ".");
        for (size_t i = 0; i < json_object_array_length(retain); i++)
            if (!json_object_is_type(json_object_array_get_idx(retain, i), json_type_string))
                return util_err_set(-EINVAL, "%s: $retainKeys must be a list of strings",
                                    *path ? path : ".");
    }
    json_object_object_foreachC(patch, it)
    {
        const char *field = NULL;

        if (util_has_prefix(it.key, DIR_DELETE_PFX))
            field = it.key + strlen(DIR_DELETE_PFX);
        else if (util_has_prefix(it.key, DIR_ORDER_PFX))
            field = it.key + strlen(DIR_ORDER_PFX);
        if (field != NULL && (*field == '\0' || !is_arr(it.val)))
            return util_err_set(-EINVAL, "%s: directive \"%s\" must name a field and hold a list",
                                *path ? path : ".", it.key);
        /* As apimachinery: every field the patch sets must be retained. */
        if (retain != NULL && field == NULL && it.val != NULL && !is_directive(it.key) &&
            !str_listed(retain, it.key))
            return util_err_set(-EINVAL, "%s: field \"%s\" is not listed in $retainKeys",
                                *path ? path : ".", it.key);
    }
    return 0;
}

/* "$deleteFromPrimitiveList/<f>": drops every listed value from list f. */
static void smp_delete_from_list(json_object *map, const char *field, const json_object *vals)
{
    json_object *list = NULL;

    if (!json_object_object_get_ex(map, field, &list) || !is_arr(list))
        return;
    for (size_t i = json_object_array_length(list); i-- > 0;)
        if (arr_contains(vals, json_object_array_get_idx(list, i), json_object_array_length(vals)))
            json_object_array_del_idx(list, i, 1);
}

/*
 * "$setElementOrder/<f>": elements named in `order` (merge-key maps, or
 * primitives when key is NULL) first, in that order; the rest keep their
 * relative order after them. Entries naming nothing are ignored.
 */
static int smp_set_order(json_object *map, const char *field, const json_object *order,
                         const char *key, const char *path)
{
    json_object *list = NULL;
    size_t m = json_object_array_length(order);

    if (!json_object_object_get_ex(map, field, &list) || !is_arr(list))
        return 0;
    for (size_t k = 0; key != NULL && k < m; k++) {
        json_object *o = json_object_array_get_idx(order, k);
        if (!is_obj(o) || !json_object_object_get_ex(o, key, NULL))
            return util_err_set(-EINVAL, "%s: $setElementOrder/%s entry %zu has no merge key %s",
                                *path ? path : ".", field, k, key);
    }

    size_t n = json_object_array_length(list);
    bool *used = util_calloc(n, sizeof(bool));
    json_object *res = must(json_object_new_array());
    for (size_t k = 0; k < m; k++) {
        json_object *o = json_object_array_get_idx(order, k);
        for (size_t i = 0; i < n; i++) {
            json_object *el = json_object_array_get_idx(list, i);
            if (!used[i] && (key != NULL ? key_match(el, o, key) : jeq(el, o))) {
                used[i] = true;
                arr_add(res, json_object_get(el));
                break;
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        if (!used[i])
            arr_add(res, json_object_get(json_object_array_get_idx(list, i)));
    free(used);
    obj_set(map, field, res); /* releases the old list; res holds the elements */
    return 0;
}

/* "$retainKeys": a copy of map without the keys the list does not name. */
static json_object *smp_retain(json_object *map, const json_object *retain)
{
    struct json_object_iter it;
    json_object *res = must(json_object_new_object());

    json_object_object_foreachC(map, it)
    {
        if (str_listed(retain, it.key))
            obj_set(res, it.key, json_object_get(it.val));
    }
    json_object_put(map);
    return res;
}

/* The directives applied after the members are merged. */
static int smp_map_finish(json_object **cur, const json_object *patch, const char *path,
                          const smp *s)
{
    struct json_object_iter it;
    json_object *retain = NULL;

    json_object_object_foreachC(patch, it)
    {
        if (util_has_prefix(it.key, DIR_DELETE_PFX))
            smp_delete_from_list(*cur, it.key + strlen(DIR_DELETE_PFX), it.val);
    }
    json_object_object_foreachC(patch, it)
    {
        if (!util_has_prefix(it.key, DIR_ORDER_PFX))
            continue;
        const char *field = it.key + strlen(DIR_ORDER_PFX);
        char *fpath = child_path(path, field);
        const kl_merge_key *mk = smp_list_key(s, fpath);
        free(fpath);
        /* Atomic lists keep the order the patch gave them. */
        if (mk == NULL)
            continue;
        int rc = smp_set_order(*cur, field, it.val, mk->key, path);
        if (rc != 0)
            return rc;
    }
    if (json_object_object_get_ex(patch, DIR_RETAIN, &retain))
        *cur = smp_retain(*cur, retain);
    return 0;
}

/*
 * Merges map patch into `cur` (consumed; anything, NULL when absent).
 * *out is the result, or NULL when the patch says "$patch": "delete".
 */
static int smp_map(json_object *cur, const json_object *patch, const char *path, const smp *s,
                   json_object **out)
{
    struct json_object_iter it;
    json_object *d = NULL;

    *out = NULL;
    if (json_object_object_get_ex(patch, DIR_PATCH, &d)) {
        const char *dir = str_or_empty(d);
        if (strcmp(dir, "delete") == 0) {
            json_object_put(cur);
            return 0;
        }
        if (strcmp(dir, "replace") == 0) {
            json_object_put(cur);
            cur = NULL;
        } else if (strcmp(dir, "merge") != 0) {
            json_object_put(cur);
            return util_err_set(-EINVAL, "%s: unknown $patch directive %s", *path ? path : ".",
                                json_object_to_json_string(d));
        }
    }
    int rc = smp_map_check(patch, path);
    if (rc != 0) {
        json_object_put(cur);
        return rc;
    }
    if (!is_obj(cur)) {
        json_object_put(cur);
        cur = must(json_object_new_object());
    }

    json_object_object_foreachC(patch, it)
    {
        json_object *child = NULL, *res = NULL;

        if (is_directive(it.key))
            continue;
        if (it.val == NULL) {
            json_object_object_del(cur, it.key);
            continue;
        }
        /* Lend the child its own reference (smp_value consumes one);
         * obj_set below drops the map's old reference. */
        if (json_object_object_get_ex(cur, it.key, &child))
            json_object_get(child);
        char *cpath = child_path(path, it.key);
        rc = smp_value(child, it.val, cpath, s, &res);
        free(cpath);
        if (rc != 0)
            break;
        if (res == NULL)
            json_object_object_del(cur, it.key);
        else
            obj_set(cur, it.key, res);
    }
    if (rc == 0)
        rc = smp_map_finish(&cur, patch, path, s);
    if (rc != 0) {
        json_object_put(cur);
        return rc;
    }
    *out = cur;
    return 0;
}

/*
 * Merges any patch value into `cur` (consumed). Maps merge, lists named in
 * the merge keys merge, everything else (atomic lists, scalars) replaces.
 */
static int smp_value(json_object *cur, const json_object *patch, const char *path, const smp *s,
                     json_object **out)
{
    if (is_obj(patch))
        return smp_map(cur, patch, path, s, out);
    if (is_arr(patch)) {
        const kl_merge_key *mk = smp_list_key(s, path);
        if (mk != NULL)
            return smp_list(cur, patch, mk, path, s, out);
    }
    json_object_put(cur);
    *out = jcopy(patch);
    return 0;
}

int kl_strategic_merge_patch(const json_object *target, const json_object *patch,
                             const kl_merge_key *keys, size_t n_keys, json_object **out)
{
    const smp s = {.keys = keys, .n_keys = n_keys};
    json_object *res = NULL;

    *out = NULL;
    if (!is_obj(patch))
        return util_err_set(-EINVAL, "strategic merge patch must be a JSON object");
    int rc = smp_map(is_obj(target) ? jcopy(target) : NULL, patch, "", &s, &res);
    if (rc != 0)
        return rc;
    /* A root "$patch": "delete" leaves an empty object, as apimachinery. */
    *out = res != NULL ? res : must(json_object_new_object());
    return 0;
}
