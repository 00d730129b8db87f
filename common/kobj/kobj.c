/*
 * kobj: type-checked reads, writes and finalizer patches on json-c trees.
 * Every json-c call that asserts or dereferences on a wrong type is only
 * reached after the type was checked here.
 */
#include "kobj/kobj.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- typed getters ---------------------------------------------------------- */

json_object *kobj_typed(const json_object *o, json_type t)
{
    /* json-c's getters take non-const pointers; the tree is not modified. */
    return o && json_object_is_type(o, t) ? (json_object *)o : NULL;
}

json_object *kobj_get(const json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!key || !kobj_typed(o, json_type_object) || !json_object_object_get_ex(o, key, &v))
        return NULL;
    return v;
}

json_object *kobj_obj(const json_object *o, const char *key)
{
    return kobj_typed(kobj_get(o, key), json_type_object);
}

json_object *kobj_arr(const json_object *o, const char *key)
{
    return kobj_typed(kobj_get(o, key), json_type_array);
}

const char *kobj_str(const json_object *o, const char *key)
{
    json_object *v = kobj_typed(kobj_get(o, key), json_type_string);
    return v ? json_object_get_string(v) : NULL;
}

bool kobj_bool(const json_object *o, const char *key, bool dflt)
{
    json_object *v = kobj_typed(kobj_get(o, key), json_type_boolean);
    return v ? json_object_get_boolean(v) != 0 : dflt;
}

/* A JSON number that is an int64 as Go decodes one into an int64 field. */
static int int64_of(const json_object *v, int64_t *out)
{
    if (json_object_is_type(v, json_type_int)) {
        int64_t n = json_object_get_int64(v);
        /* json-c keeps values above INT64_MAX as uint64 and clamps them here. */
        if (n == INT64_MAX && json_object_get_uint64(v) > (uint64_t)INT64_MAX)
            return -EINVAL;
        *out = n;
        return 0;
    }
    if (json_object_is_type(v, json_type_double)) {
        double d = json_object_get_double(v);
        /* 2^63 is exact as a double; NaN fails every comparison. */
        if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || (double)(int64_t)d != d)
            return -EINVAL;
        *out = (int64_t)d;
        return 0;
    }
    return -EINVAL;
}

int kobj_int64(const json_object *o, const char *key, int64_t *out)
{
    json_object *v = kobj_get(o, key);
    if (!v)
        return -ENOENT;
    return int64_of(v, out);
}

json_object *kobj_path(const json_object *o, const char *path)
{
    if (!path)
        return NULL;
    char *copy = util_strdup(path);
    json_object *cur = (json_object *)o;
    char *seg = copy;
    for (;;) {
        char *dot = strchr(seg, '.');
        if (dot)
            *dot = '\0';
        cur = kobj_get(cur, seg); /* NULL unless `cur` is an object */
        if (!cur || !dot)
            break;
        seg = dot + 1;
    }
    free(copy);
    return cur;
}

const char *kobj_path_str(const json_object *o, const char *path)
{
    json_object *v = kobj_typed(kobj_path(o, path), json_type_string);
    return v ? json_object_get_string(v) : NULL;
}

size_t kobj_len(const json_object *a)
{
    return kobj_typed(a, json_type_array) ? json_object_array_length(a) : 0;
}

json_object *kobj_at(const json_object *a, size_t i)
{
    if (i >= kobj_len(a))
        return NULL;
    return json_object_array_get_idx(a, i);
}

const char *kobj_str_at(const json_object *a, size_t i)
{
    json_object *v = kobj_typed(kobj_at(a, i), json_type_string);
    return v ? json_object_get_string(v) : NULL;
}

/* ---- field types ----------------------------------------------------------- */

/* No API server stores a name longer than a DNS subdomain (253 bytes) or a
 * namespace longer than a DNS label (63): a longer one is a corrupted or
 * hostile answer. Refused here, at the one place names are read, it is
 * skipped like a missing name instead of becoming a cache key, a URL
 * segment of every retried write and an Event name. */
#define KOBJ_NAME_MAX 253
#define KOBJ_NS_MAX   63
/* The longest text a field can hold: an API server stores no object over
 * etcd's default request limit (1.5 MiB) and validates the fields the
 * sidecars read far below it (annotations 256 KiB in all, class parameters
 * 256 KiB, node ids 192 bytes). A longer value of the right type is a lie
 * that no type check sees: a CSINode whose node id was one stayed in every
 * cache until the next list, and each attach sent it to the driver. */
#define KOBJ_TEXT_MAX ((size_t)3 << 19)

/* RFC 3339 as Go's metav1.Time reads it: 2006-01-02T15:04:05, an optional
 * fraction, then Z or an offset. */
static bool rfc3339(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    for (size_t i = 0; shape[i]; i++) {
        bool digit = s[i] >= '0' && s[i] <= '9';
        if (shape[i] == 'd' ? !digit : s[i] != shape[i])
            return false;
    }
    const char *p = s + sizeof(shape) - 1;
    if (*p == '.') {
        const char *f = ++p;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == f)
            return false;
    }
    if (*p == 'Z' || *p == 'z')
        return p[1] == '\0';
    if (*p != '+' && *p != '-')
        return false;
    return p[1] >= '0' && p[1] <= '9' && p[2] >= '0' && p[2] <= '9' && p[3] == ':' && p[4] >= '0' &&
           p[4] <= '9' && p[5] >= '0' && p[5] <= '9' && p[6] == '\0';
}

static bool text_ok(const json_object *v)
{
    return json_object_is_type(v, json_type_string) &&
           (size_t)json_object_get_string_len(v) <= KOBJ_TEXT_MAX;
}

/* An upper-case rule letter: the lower-case type, and never a null at the
 * field, nor among a map's values or a list's items. */
static bool strict(char t)
{
    return t >= 'A' && t <= 'Z';
}

static bool of_type(const json_object *v, char t)
{
    bool no_null = strict(t);
    switch (no_null ? (char)(t - 'A' + 'a') : t) {
    case 's':
    case 'r':
        return text_ok(v);
    case 'n': {
        /* A name or UID: no API server stores one over 253 bytes. */
        const char *s = json_object_is_type(v, json_type_string)
                            ? json_object_get_string((json_object *)v)
                            : NULL;
        return s && strnlen(s, KOBJ_NAME_MAX + 1) <= KOBJ_NAME_MAX;
    }
    case 't': {
        const char *s = json_object_is_type(v, json_type_string)
                            ? json_object_get_string((json_object *)v)
                            : NULL;
        return s && rfc3339(s);
    }
    case 'b':
        return kobj_typed(v, json_type_boolean) != NULL;
    case 'i': {
        int64_t n;
        return int64_of(v, &n) == 0;
    }
    case 'o':
        return kobj_typed(v, json_type_object) != NULL;
    case 'a':
        return kobj_typed(v, json_type_array) != NULL;
    case 'm': {
        if (!kobj_typed(v, json_type_object))
            return false;
        json_object_object_foreach((json_object *)v, k, val)
        {
            (void)k;
            if (val ? !text_ok(val) : no_null)
                return false;
        }
        return true;
    }
    case 'l': {
        if (!kobj_typed(v, json_type_array))
            return false;
        size_t n = json_object_array_length(v);
        for (size_t i = 0; i < n; i++) {
            const json_object *item = json_object_array_get_idx(v, i);
            if (item ? !text_ok(item) : no_null)
                return false;
        }
        return true;
    }
    default:
        return true;
    }
}

/* The rest of `path` (segments up to a NUL) from `v`: true when every value
 * it reaches is missing, null or of type t. */
static bool path_ok(const json_object *v, const char *path, char t)
{
    if (!v)
        return t != 'r';
    if (!*path)
        return of_type(v, t);
    const char *end = strchr(path, '.');
    size_t n = end ? (size_t)(end - path) : strlen(path);
    bool each = n >= 2 && path[n - 2] == '[' && path[n - 1] == ']';
    char key[64];
    size_t kl = each ? n - 2 : n;
    if (kl >= sizeof(key))
        return true; /* no rule is that long */
    memcpy(key, path, kl);
    key[kl] = '\0';
    const char *rest = end ? end + 1 : path + n;
    /* A step through a value that is not an object: that value is what
     * has the wrong type, and its own rule says so. */
    json_object *next = kobj_typed(v, json_type_object) ? kobj_get(v, key) : NULL;
    /* Upper case: a null where the field is is refused, not taken as
     * missing. */
    if (!each && !next && strict(t) && !*rest && kobj_typed(v, json_type_object) &&
        json_object_object_get_ex(v, key, NULL))
        return false;
    if (!each)
        return path_ok(next, rest, t);
    if (!next)
        return true;
    if (!kobj_typed(next, json_type_array))
        return false;
    size_t len = json_object_array_length(next);
    for (size_t i = 0; i < len; i++) {
        const json_object *item = json_object_array_get_idx(next, i);
        /* Upper case on the items themselves ("O x[]"): a null item too is
         * refused. */
        if ((!item && strict(t) && !*rest) || !path_ok(item, rest, t))
            return false;
    }
    return true;
}

/* The steps of the last rule walked, for the next one that starts the same
 * way: rules list a parent before its fields ("o spec", "s spec.csi",
 * "s spec.csi.driver"), so with this each step costs one lookup per object
 * checked instead of one per rule that passes through it (this check runs
 * on every object an informer takes in). */
#define WALK_DEPTH 8
struct walk {
    int depth;
    struct {
        const char *seg; /* in the rule's text, not NUL-terminated */
        size_t len;
        const json_object *v; /* what that step reached; NULL: nothing */
    } at[WALK_DEPTH];
};

/* path_ok for a path without "[]", through `w`. */
static bool walk_ok(const json_object *o, const char *path, char t, struct walk *w)
{
    const json_object *v = o;
    const char *p = path;
    for (int i = 0; v && *p; i++) {
        const char *end = strchr(p, '.');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (i >= WALK_DEPTH || n >= 64)
            return path_ok(v, p, t);
        if (i < w->depth && w->at[i].len == n && memcmp(w->at[i].seg, p, n) == 0) {
            v = w->at[i].v;
        } else {
            char key[64];
            memcpy(key, p, n);
            key[n] = '\0';
            /* A step through a value that is not an object: that value is
             * what has the wrong type, and its own rule says so. */
            v = kobj_typed(v, json_type_object) ? kobj_get(v, key) : NULL;
            w->at[i].seg = p;
            w->at[i].len = n;
            w->at[i].v = v;
            w->depth = i + 1;
        }
        p = end ? end + 1 : p + n;
    }
    return v ? of_type(v, t) : t != 'r';
}

int kobj_check(const json_object *o, const char *const *rules)
{
    struct walk w = {0};
    for (size_t i = 0; rules && rules[i]; i++) {
        const char *r = rules[i];
        if (!r[0] || r[1] != ' ')
            continue;
        bool ok = strstr(r + 2, "[]") || strict(r[0]) ? path_ok(o, r + 2, r[0])
                                                      : walk_ok(o, r + 2, r[0], &w);
        if (!ok)
            return util_err_set(-EINVAL, "%s has the wrong type", r + 2);
    }
    return 0;
}

/* ---- metadata ------------------------------------------------------------------ */

json_object *kobj_meta(const json_object *o)
{
    return kobj_obj(o, "metadata");
}

const char *kobj_meta_str(const json_object *o, const char *key)
{
    return kobj_str(kobj_meta(o), key);
}

static const char *bounded(const char *s, size_t max)
{
    return s && strnlen(s, max + 1) <= max ? s : NULL;
}

const char *kobj_name(const json_object *o)
{
    return bounded(kobj_meta_str(o, "name"), KOBJ_NAME_MAX);
}

const char *kobj_namespace(const json_object *o)
{
    return bounded(kobj_meta_str(o, "namespace"), KOBJ_NS_MAX);
}

const char *kobj_uid(const json_object *o)
{
    return kobj_meta_str(o, "uid");
}

const char *kobj_rv(const json_object *o)
{
    return kobj_meta_str(o, "resourceVersion");
}

bool kobj_deleting(const json_object *o)
{
    return kobj_get(kobj_meta(o), "deletionTimestamp") != NULL;
}

const char *kobj_annotation(const json_object *o, const char *key)
{
    return kobj_str(kobj_obj(kobj_meta(o), "annotations"), key);
}

const char *kobj_label(const json_object *o, const char *key)
{
    return kobj_str(kobj_obj(kobj_meta(o), "labels"), key);
}

int kobj_finalizer_index(const json_object *o, const char *fin)
{
    json_object *fl = kobj_arr(kobj_meta(o), "finalizers");
    size_t n = kobj_len(fl);
    if (!fin)
        return -1;
    for (size_t i = 0; i < n && i <= (size_t)INT32_MAX; i++) {
        const char *s = kobj_str_at(fl, i);
        if (s && strcmp(s, fin) == 0)
            return (int)i;
    }
    return -1;
}

bool kobj_has_finalizer(const json_object *o, const char *fin)
{
    return kobj_finalizer_index(o, fin) >= 0;
}

/* ---- setters --------------------------------------------------------------------- */

json_object *kobj_ensure_obj(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!key || !kobj_typed(o, json_type_object))
        return NULL;
    if (json_object_object_get_ex(o, key, &v) && v)
        return kobj_typed(v, json_type_object);
    v = json_object_new_object();
    if (!v || json_object_object_add(o, key, v) != 0) {
        json_object_put(v);
        return NULL;
    }
    return v;
}

int kobj_set(json_object *o, const char *key, json_object *val)
{
    if (!key || !kobj_typed(o, json_type_object) || o == val) {
        json_object_put(val);
        return -EINVAL;
    }
    if (json_object_object_add(o, key, val) != 0) {
        json_object_put(val);
        return -ENOMEM;
    }
    return 0;
}

int kobj_set_str(json_object *o, const char *key, const char *s)
{
    if (!s)
        return -EINVAL;
    return kobj_set(o, key, json_object_new_string(s));
}

static int set_meta_map(json_object *o, const char *map, const char *key, const char *value)
{
    json_object *m = kobj_ensure_obj(kobj_ensure_obj(o, "metadata"), map);
    if (!m || !key || !value)
        return -EINVAL;
    return kobj_set_str(m, key, value);
}

int kobj_set_annotation(json_object *o, const char *key, const char *value)
{
    return set_meta_map(o, "annotations", key, value);
}

int kobj_set_label(json_object *o, const char *key, const char *value)
{
    return set_meta_map(o, "labels", key, value);
}

void kobj_del(json_object *o, const char *key)
{
    if (key && kobj_typed(o, json_type_object))
        json_object_object_del(o, key);
}

/* ---- JSON patches ---------------------------------------------------------------- */

/* Appends {"op":op,"path":path[,"value":value]} to `ops`; owns `value`.
 * A JSON null value is written when `with_value` and value == NULL. */
static void patch_op(json_object *ops, const char *op, const char *path, bool with_value,
                     json_object *value)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "op", json_object_new_string(op));
    json_object_object_add(o, "path", json_object_new_string(path));
    if (with_value)
        json_object_object_add(o, "value", value);
    json_object_array_add(ops, o);
}

static char *patch_text(json_object *ops)
{
    char *s = kobj_to_text(ops, NULL);
    json_object_put(ops);
    return s;
}

char *kobj_patch_add_finalizer(const json_object *o, const char *fin, bool test_rv)
{
    json_object *meta = kobj_meta(o);
    json_object *fl = kobj_get(meta, "finalizers");
    const char *rv = kobj_rv(o);
    if (!meta || !fin || (fl && !json_object_is_type(fl, json_type_array)) || (test_rv && !rv))
        return NULL;
    json_object *ops = json_object_new_array();
    if (test_rv)
        patch_op(ops, "test", "/metadata/resourceVersion", true, json_object_new_string(rv));
    if (fl) {
        patch_op(ops, "add", "/metadata/finalizers/-", true, json_object_new_string(fin));
    } else {
        if (!test_rv)
            patch_op(ops, "test", "/metadata/finalizers", true, NULL);
        json_object *list = json_object_new_array();
        json_object_array_add(list, json_object_new_string(fin));
        patch_op(ops, "add", "/metadata/finalizers", true, list);
    }
    return patch_text(ops);
}

char *kobj_patch_remove_finalizer_at(int i, const char *fin)
{
    if (i < 0 || !fin)
        return NULL;
    char path[64];
    snprintf(path, sizeof(path), "/metadata/finalizers/%d", i);
    json_object *ops = json_object_new_array();
    patch_op(ops, "test", path, true, json_object_new_string(fin));
    patch_op(ops, "remove", path, false, NULL);
    return patch_text(ops);
}

char *kobj_patch_remove_finalizer(const json_object *o, const char *fin)
{
    return kobj_patch_remove_finalizer_at(kobj_finalizer_index(o, fin), fin);
}

char *kobj_patch_set_annotation(const json_object *o, const char *key, const char *value,
                                bool test_rv)
{
    json_object *meta = kobj_meta(o);
    json_object *ann = kobj_get(meta, "annotations");
    const char *rv = kobj_rv(o);
    if (!meta || !key || !value || (ann && !json_object_is_type(ann, json_type_object)) ||
        (test_rv && !rv))
        return NULL;
    json_object *ops = json_object_new_array();
    if (test_rv)
        patch_op(ops, "test", "/metadata/resourceVersion", true, json_object_new_string(rv));
    if (ann) {
        char *seg = kobj_pointer_escape(key);
        char *path = util_asprintf("/metadata/annotations/%s", seg);
        patch_op(ops, "add", path, true, json_object_new_string(value));
        free(path);
        free(seg);
    } else {
        json_object *map = json_object_new_object();
        json_object_object_add(map, key, json_object_new_string(value));
        patch_op(ops, "add", "/metadata/annotations", true, map);
    }
    return patch_text(ops);
}

char *kobj_pointer_escape(const char *segment)
{
    if (!segment)
        return NULL;
    size_t n = strlen(segment), extra = 0;
    for (size_t i = 0; i < n; i++)
        extra += segment[i] == '~' || segment[i] == '/';
    char *out = util_calloc(n + extra + 1, 1);
    char *p = out;
    for (size_t i = 0; i < n; i++) {
        if (segment[i] == '~') {
            *p++ = '~';
            *p++ = '0';
        } else if (segment[i] == '/') {
            *p++ = '~';
            *p++ = '1';
        } else {
            *p++ = segment[i];
        }
    }
    return out;
}

void kobj_table_shrink(struct lh_table *t, int min_size)
{
    if (!t)
        return;
    /* Half full at most, as json-c grows it at two thirds. */
    int want = min_size > 16 ? min_size : 16;
    while (want <= INT_MAX / 4 && t->count >= want / 2)
        want *= 2;
    if (want <= t->size / 2)
        (void)lh_table_resize(t, want); /* on failure the old table stays */
}

/* Decimal strings of any length: leading zeros skipped, then the longer
 * is larger, then byte order. */
int kobj_rv_cmp(const char *a, const char *b)
{
    if (!a || !b || !*a || !*b)
        return -2;
    for (const char *p = a; *p; p++)
        if (*p < '0' || *p > '9')
            return -2;
    for (const char *p = b; *p; p++)
        if (*p < '0' || *p > '9')
            return -2;
    while (*a == '0' && a[1])
        a++;
    while (*b == '0' && b[1])
        b++;
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb)
        return la < lb ? -1 : 1;
    int c = strcmp(a, b);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
}
