/*
 * validate: what kube-apiserver 1.32 checks on create and update of the
 * storage resources, with its field paths and message bodies (apimachinery
 * validation, pkg/apis/core and storage validation, the snapshot CRDs' schema
 * and CEL rules), plus the server-side defaults and the name/label
 * predicates. Everything reads json-c trees and never modifies them, except
 * kl_apply_defaults. Go values in messages are rendered the way Go's %q and
 * %#v print them, since clients show these texts verbatim.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

/* A pointer as %#v prints it; real addresses vary per run, so any fixed
 * heap-looking one is as good as another. */
#define GO_PTR "0xc000100000"

/* ---- small helpers ------------------------------------------------------ */

typedef struct {
    char **v;
    size_t n;
} strs;

static void strs_add(strs *l, char *s)
{
    char **nv = realloc(l->v, (l->n + 1) * sizeof(char *));
    if (nv == NULL) {
        fputs("kube-lite: out of memory\n", stderr);
        abort();
    }
    l->v = nv;
    l->v[l->n++] = s;
}

static void strs_free(strs *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* A string builder that aborts on out-of-memory like util_asprintf. */
typedef struct {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (ns == NULL) {
            fputs("kube-lite: out of memory\n", stderr);
            abort();
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n + 1);
    b->len += n;
}

/* Appends and frees s. */
static void sb_take(sbuf *b, char *s)
{
    sb_add(b, s);
    free(s);
}

static char *sb_done(sbuf *b)
{
    return b->s ? b->s : util_strdup("");
}

/* The string `v` is, or NULL (kobj reads members; this reads values). */
static const char *str(const json_object *v)
{
    json_object *s = kobj_typed(v, json_type_string);
    return s ? json_object_get_string(s) : NULL;
}

static bool empty(const char *s)
{
    return s == NULL || s[0] == '\0';
}

static bool is(const kl_type *t, const char *group, const char *resource)
{
    return strcmp(t->group, group) == 0 && strcmp(t->resource, resource) == 0;
}

/* Compact JSON of a value, for diffs; "nil" when absent. */
static char *json_text(const json_object *v)
{
    if (v == NULL)
        return util_strdup("nil");
    json_object *copy = NULL;
    if (json_object_deep_copy((json_object *)v, &copy, NULL) != 0 || copy == NULL)
        return util_strdup("?");
    char *s = util_strdup(json_object_to_json_string_ext(copy, JSON_C_TO_STRING_PLAIN |
                                                                   JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(copy);
    return s;
}

static bool is_emptyish(const json_object *v)
{
    if (v == NULL)
        return true;
    if (json_object_is_type(v, json_type_object))
        return json_object_object_length(v) == 0;
    if (json_object_is_type(v, json_type_array))
        return json_object_array_length(v) == 0;
    return false;
}

/*
 * Semantic equality as apimachinery's Semantic.DeepEqual sees decoded
 * objects: null, absent, [] and {} are all the same "nil".
 */
static bool jeq(const json_object *a, const json_object *b)
{
    if (is_emptyish(a) || is_emptyish(b))
        return is_emptyish(a) && is_emptyish(b);
    json_type ta = json_object_get_type(a), tb = json_object_get_type(b);
    if (ta != tb) {
        if ((ta == json_type_int || ta == json_type_double) &&
            (tb == json_type_int || tb == json_type_double))
            return json_object_get_double(a) == json_object_get_double(b);
        return false;
    }
    switch (ta) {
    case json_type_object: {
        json_object_object_foreach((json_object *)a, k, va)
        {
            if (!jeq(va, kobj_get(b, k)))
                return false;
        }
        json_object_object_foreach((json_object *)b, k2, vb)
        {
            if (!jeq(kobj_get(a, k2), vb))
                return false;
        }
        return true;
    }
    case json_type_array: {
        size_t n = json_object_array_length(a);
        if (n != json_object_array_length(b))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!jeq(kobj_at(a, i), kobj_at(b, i)))
                return false;
        return true;
    }
    case json_type_string:
        return strcmp(json_object_get_string((json_object *)a),
                      json_object_get_string((json_object *)b)) == 0;
    case json_type_boolean:
        return json_object_get_boolean(a) == json_object_get_boolean(b);
    case json_type_int:
        return json_object_get_int64(a) == json_object_get_int64(b);
    case json_type_double:
        return json_object_get_double(a) == json_object_get_double(b);
    default:
        return true;
    }
}

static json_object *deep_copy(const json_object *v)
{
    json_object *copy = NULL;
    if (v == NULL)
        return NULL;
    if (json_object_deep_copy((json_object *)v, &copy, NULL) != 0) {
        fputs("kube-lite: out of memory\n", stderr);
        abort();
    }
    return copy;
}

/* ---- error helpers (ErrorBody of field.Error) -------------------------- */

static void add_required(kl_errs *e, const char *f, const char *detail)
{
    if (empty(detail))
        kl_errs_add(e, KL_REQUIRED, f, "Required value");
    else
        kl_errs_add(e, KL_REQUIRED, f, "Required value: %s", detail);
}

static void add_forbidden(kl_errs *e, const char *f, const char *detail)
{
    kl_errs_add(e, KL_FORBIDDEN, f, "Forbidden: %s", detail);
}

/* `raw` is the value already rendered as Go prints it. */
static void add_invalid_raw(kl_errs *e, const char *f, const char *raw, const char *detail)
{
    if (empty(detail))
        kl_errs_add(e, KL_INVALID, f, "Invalid value: %s", raw);
    else
        kl_errs_add(e, KL_INVALID, f, "Invalid value: %s: %s", raw, detail);
}

static void add_invalid(kl_errs *e, const char *f, const char *value, const char *detail)
{
    char *q = kl_quote(value);
    add_invalid_raw(e, f, q, detail);
    free(q);
}

static void add_not_supported(kl_errs *e, const char *f, const char *raw,
                              const char *const *supported)
{
    sbuf b = {0};
    for (size_t i = 0; supported[i]; i++) {
        if (i)
            sb_add(&b, ", ");
        sb_take(&b, kl_quote(supported[i]));
    }
    char *list = sb_done(&b);
    kl_errs_add(e, KL_NOT_SUPPORTED, f, "Unsupported value: %s: supported values: %s", raw, list);
    free(list);
}

static void add_not_supported_str(kl_errs *e, const char *f, const char *value,
                                  const char *const *supported)
{
    char *q = kl_quote(value);
    add_not_supported(e, f, q, supported);
    free(q);
}

static void add_duplicate(kl_errs *e, const char *f, const char *value)
{
    char *q = kl_quote(value);
    kl_errs_add(e, KL_DUPLICATE, f, "Duplicate value: %s", q);
    free(q);
}

static void add_too_long(kl_errs *e, const char *f, long max)
{
    kl_errs_add(e, KL_TOO_LONG, f, "Too long: may not be more than %ld byte%s", max,
                max == 1 ? "" : "s");
}

/* ---- names, labels ------------------------------------------------------ */

#define RE_LABEL     "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
#define RE_SUBDOMAIN RE_LABEL "(\\." RE_LABEL ")*"
#define RE_QNAME     "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

#define MSG_SUBDOMAIN                                                                              \
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "   \
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "  \
    "for validation is '" RE_SUBDOMAIN "')"
#define MSG_LABEL                                                                                  \
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "   \
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "     \
    "used for validation is '" RE_LABEL "')"
#define MSG_QNAME                                                                                  \
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "    \
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "         \
    "validation is '" RE_QNAME "')"
#define MSG_LABEL_VALUE                                                                            \
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "    \
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "             \
    "'my_value',  or '12345', regex used for validation is '(" RE_QNAME ")?')"

static bool lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool alnum(char c)
{
    return lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

static bool match_label(const char *s, size_t n)
{
    if (n == 0 || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
        return false;
    for (size_t i = 1; i + 1 < n; i++)
        if (!lower_alnum(s[i]) && s[i] != '-')
            return false;
    return true;
}

static bool match_subdomain(const char *s)
{
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (!match_label(p, n))
            return false;
        if (dot == NULL)
            return true;
        p = dot + 1;
    }
}

static bool match_qname(const char *s, size_t n)
{
    if (n == 0 || !alnum(s[0]) || !alnum(s[n - 1]))
        return false;
    for (size_t i = 1; i + 1 < n; i++)
        if (!alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

static void subdomain_msgs(const char *s, const char *prefix, strs *l)
{
    if (strlen(s) > 253)
        strs_add(l, util_asprintf("%smust be no more than 253 characters", prefix));
    if (!match_subdomain(s))
        strs_add(l, util_asprintf("%s%s", prefix, MSG_SUBDOMAIN));
}

static void label_msgs(const char *s, strs *l)
{
    if (strlen(s) > 63)
        strs_add(l, util_strdup("must be no more than 63 characters"));
    if (!match_label(s, strlen(s)))
        strs_add(l, util_strdup(MSG_LABEL));
}

static void qname_msgs(const char *s, strs *l)
{
    const char *slash = strchr(s, '/');
    const char *name = s;
    if (slash && strchr(slash + 1, '/')) {
        strs_add(l, util_strdup("a qualified name " MSG_QNAME
                                " with an optional DNS subdomain prefix and '/' (e.g. "
                                "'example.com/MyName')"));
        return;
    }
    if (slash) {
        size_t plen = (size_t)(slash - s);
        if (plen == 0) {
            strs_add(l, util_strdup("prefix part must be non-empty"));
        } else {
            char *prefix = util_calloc(plen + 1, 1);
            memcpy(prefix, s, plen);
            subdomain_msgs(prefix, "prefix part ", l);
            free(prefix);
        }
        name = slash + 1;
    }
    size_t n = strlen(name);
    if (n == 0)
        strs_add(l, util_strdup("name part must be non-empty"));
    else if (n > 63)
        strs_add(l, util_strdup("name part must be no more than 63 characters"));
    if (!match_qname(name, n))
        strs_add(l, util_strdup("name part " MSG_QNAME));
}

static void label_value_msgs(const char *s, strs *l)
{
    size_t n = strlen(s);
    if (n > 63)
        strs_add(l, util_strdup("must be no more than 63 characters"));
    if (n > 0 && !match_qname(s, n))
        strs_add(l, util_strdup(MSG_LABEL_VALUE));
}

bool kl_is_dns1123_subdomain(const char *s)
{
    return s && strlen(s) <= 253 && match_subdomain(s);
}

bool kl_is_dns1123_label(const char *s)
{
    return s && strlen(s) <= 63 && match_label(s, strlen(s));
}

bool kl_is_qualified_name(const char *s)
{
    strs l = {0};
    qname_msgs(s ? s : "", &l);
    bool ok = l.n == 0;
    strs_free(&l);
    return ok;
}

bool kl_is_label_value(const char *s)
{
    strs l = {0};
    label_value_msgs(s ? s : "", &l);
    bool ok = l.n == 0;
    strs_free(&l);
    return ok;
}

static char *join(const strs *l, const char *sep)
{
    if (l->n == 0)
        return NULL;
    sbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            sb_add(&b, sep);
        sb_add(&b, l->v[i]);
    }
    return sb_done(&b);
}

char *kl_qualified_name_msgs(const char *s)
{
    strs l = {0};
    qname_msgs(s ? s : "", &l);
    char *r = join(&l, "; ");
    strs_free(&l);
    return r;
}

char *kl_label_value_msgs(const char *s)
{
    strs l = {0};
    label_value_msgs(s ? s : "", &l);
    char *r = join(&l, "; ");
    strs_free(&l);
    return r;
}

/* The object-name rule of a type: RBAC objects take any path segment,
 * namespaces a DNS label, everything else a DNS subdomain. */
static void name_msgs(const kl_type *t, const char *name, bool prefix, strs *l)
{
    if (strcmp(t->group, "rbac.authorization.k8s.io") == 0) {
        if (!prefix && (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)) {
            strs_add(l, util_asprintf("may not be '%s'", name));
            return;
        }
        if (strchr(name, '/'))
            strs_add(l, util_strdup("may not contain '/'"));
        if (strchr(name, '%'))
            strs_add(l, util_strdup("may not contain '%'"));
        return;
    }
    char *masked = util_strdup(name);
    size_t n = strlen(masked);
    if (prefix && n > 1 && masked[n - 1] == '-') {
        /* apimachinery's maskTrailingDash: the last two bytes become "a". */
        masked[n - 2] = 'a';
        masked[n - 1] = '\0';
    }
    if (is(t, "", "namespaces"))
        label_msgs(masked, l);
    else
        subdomain_msgs(masked, "", l);
    free(masked);
}

/* Each message of `l` as an Invalid cause of field f for value v. */
static void add_each_invalid(kl_errs *e, const char *f, const char *v, const strs *l)
{
    for (size_t i = 0; i < l->n; i++)
        add_invalid(e, f, v, l->v[i]);
}

static void check_subdomain(kl_errs *e, const char *f, const char *v)
{
    strs l = {0};
    subdomain_msgs(v, "", &l);
    add_each_invalid(e, f, v, &l);
    strs_free(&l);
}

static void check_qname(kl_errs *e, const char *f, const char *v)
{
    strs l = {0};
    qname_msgs(v, &l);
    add_each_invalid(e, f, v, &l);
    strs_free(&l);
}

/* ValidateCSIDriverName: required, at most 63 bytes, a subdomain when
 * lower-cased. */
static void check_csi_driver_name(kl_errs *e, const char *f, const char *v)
{
    if (v == NULL)
        v = "";
    if (v[0] == '\0')
        add_required(e, f, NULL);
    if (strlen(v) > 63)
        add_too_long(e, f, 63);
    char *lower = util_strdup(v);
    for (char *p = lower; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    strs l = {0};
    subdomain_msgs(lower, "", &l);
    add_each_invalid(e, f, v, &l);
    strs_free(&l);
    free(lower);
}

/* ---- quantities ---------------------------------------------------------- */

/* Quantity.String() of a value that failed a sign check: canonical "0" for
 * zero; other values as written (full canonicalisation is not needed by any
 * client). */
static const char *qty_text(const char *written, int64_t v)
{
    return v == 0 ? "0" : written;
}

/* A quantity that must parse; an Invalid cause when it does not. */
static bool qty_or_error(kl_errs *e, const char *f, const json_object *v, int64_t *out)
{
    const char *s = str(v);
    char buf[32];
    if (s == NULL && v != NULL &&
        (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))) {
        /* A bare JSON number is a valid quantity too. */
        snprintf(buf, sizeof(buf), "%" PRId64, json_object_get_int64(v));
        s = buf;
    }
    if (s == NULL || util_quantity_parse(s, out) < 0) {
        add_invalid(e, f, s ? s : "",
                    "quantities must match the regular expression "
                    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'");
        return false;
    }
    return true;
}

/* ---- Go value rendering (%#v) ------------------------------------------- */

/* []T{"a", "b"} or []T(nil). */
static char *go_strings(const char *type, const json_object *arr)
{
    size_t n = kobj_len(arr);
    if (n == 0 && arr == NULL)
        return util_asprintf("%s(nil)", type);
    sbuf b = {0};
    sb_add(&b, type);
    sb_add(&b, "{");
    for (size_t i = 0; i < n; i++) {
        if (i)
            sb_add(&b, ", ");
        const char *s = str(kobj_at(arr, i));
        sb_take(&b, kl_quote(s ? s : ""));
    }
    sb_add(&b, "}");
    return sb_done(&b);
}

/* map[string]string{"k":"v"} with keys sorted, as fmt prints maps. */
static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static char *go_string_map(const char *type, const json_object *m)
{
    if (m == NULL || !json_object_is_type(m, json_type_object))
        return util_asprintf("%s(nil)", type);
    size_t n = (size_t)json_object_object_length(m), i = 0;
    const char **keys = util_calloc(n ? n : 1, sizeof(char *));
    json_object_object_foreach((json_object *)m, k, v)
    {
        (void)v;
        keys[i++] = k;
    }
    qsort(keys, n, sizeof(char *), cmp_cstr);
    sbuf b = {0};
    sb_add(&b, type);
    sb_add(&b, "{");
    for (i = 0; i < n; i++) {
        if (i)
            sb_add(&b, ", ");
        sb_take(&b, kl_quote(keys[i]));
        sb_add(&b, ":");
        const char *s = str(kobj_get(m, keys[i]));
        sb_take(&b, kl_quote(s ? s : ""));
    }
    sb_add(&b, "}");
    free(keys);
    return sb_done(&b);
}

/* (*T)(nil) or (*T)(0x...). */
static const char *go_ptr(const json_object *v)
{
    return v ? GO_PTR : "nil";
}

static char *go_va_spec(const json_object *spec)
{
    char *attacher =
        kl_quote(kobj_path_str(spec, "attacher") ? kobj_path_str(spec, "attacher") : "");
    char *node = kl_quote(kobj_path_str(spec, "nodeName") ? kobj_path_str(spec, "nodeName") : "");
    char *s = util_asprintf("storage.VolumeAttachmentSpec{Attacher:%s, "
                            "Source:storage.VolumeAttachmentSource{PersistentVolumeName:(*string)(%"
                            "s), InlineVolumeSpec:(*core.PersistentVolumeSpec)(%s)}, NodeName:%s}",
                            attacher, go_ptr(kobj_path(spec, "source.persistentVolumeName")),
                            go_ptr(kobj_path(spec, "source.inlineVolumeSpec")), node);
    free(attacher);
    free(node);
    return s;
}

static char *go_csinode_driver(const json_object *d)
{
    char *name = kl_quote(kobj_path_str(d, "name") ? kobj_path_str(d, "name") : "");
    char *id = kl_quote(kobj_path_str(d, "nodeID") ? kobj_path_str(d, "nodeID") : "");
    char *keys = go_strings("[]string", kobj_get(d, "topologyKeys"));
    char *s = util_asprintf("storage.CSINodeDriver{Name:%s, NodeID:%s, TopologyKeys:%s, "
                            "Allocatable:(*storage.VolumeNodeResources)(%s)}",
                            name, id, keys, go_ptr(kobj_get(d, "allocatable")));
    free(name);
    free(id);
    free(keys);
    return s;
}

static char *go_label_selector(const json_object *sel)
{
    if (sel == NULL)
        return util_strdup("null");
    char *labels = go_string_map("map[string]string", kobj_get(sel, "matchLabels"));
    json_object *exprs = kobj_get(sel, "matchExpressions");
    sbuf b = {0};
    if (exprs == NULL) {
        sb_add(&b, "[]v1.LabelSelectorRequirement(nil)");
    } else {
        sb_add(&b, "[]v1.LabelSelectorRequirement{");
        for (size_t i = 0; i < kobj_len(exprs); i++) {
            json_object *x = kobj_at(exprs, i);
            char *k = kl_quote(kobj_path_str(x, "key") ? kobj_path_str(x, "key") : "");
            char *op = kl_quote(kobj_path_str(x, "operator") ? kobj_path_str(x, "operator") : "");
            char *vals = go_strings("[]string", kobj_get(x, "values"));
            sb_take(&b, util_asprintf("%sv1.LabelSelectorRequirement{Key:%s, Operator:%s, "
                                      "Values:%s}",
                                      i ? ", " : "", k, op, vals));
            free(k);
            free(op);
            free(vals);
        }
        sb_add(&b, "}");
    }
    char *ex = sb_done(&b);
    char *s = util_asprintf("v1.LabelSelector{MatchLabels:%s, MatchExpressions:%s}", labels, ex);
    free(labels);
    free(ex);
    return s;
}

/* A pointer to a named string type: "null" or the quoted value. */
static char *go_opt_str(const json_object *v)
{
    const char *s = str(v);
    return s ? kl_quote(s) : util_strdup("null");
}

/* The Go field name of a JSON key, for diffs. */
static char *go_field(const char *key)
{
    static const char *const acronyms[][2] = {
        {"csi", "CSI"},
        {"nfs", "NFS"},
        {"iscsi", "ISCSI"},
        {"rbd", "RBD"},
        {"fc", "FC"},
        {"cephfs", "CephFS"},
        {"scaleIO", "ScaleIO"},
        {"storageos", "StorageOS"},
        {"hostPath", "HostPath"},
    };
    for (size_t i = 0; i < sizeof(acronyms) / sizeof(acronyms[0]); i++)
        if (strcmp(key, acronyms[i][0]) == 0)
            return util_strdup(acronyms[i][1]);
    char *s = util_strdup(key);
    s[0] = (char)toupper((unsigned char)s[0]);
    return s;
}

/*
 * A go-cmp-shaped report of the top-level members that differ between two
 * objects (go-cmp's exact layout is deliberately unstable, so only its
 * shape is kept): "  T{\n- \tF: old,\n+ \tF: new,\n  }\n".
 */
static char *go_diff(const char *type, const json_object *a, const json_object *b)
{
    sbuf d = {0};
    sb_take(&d, util_asprintf("  %s{\n", type));
    for (int pass = 0; pass < 2; pass++) {
        const json_object *src = pass == 0 ? a : b;
        if (src == NULL || !json_object_is_type(src, json_type_object))
            continue;
        json_object_object_foreach((json_object *)src, k, v)
        {
            (void)v;
            if (pass == 1 && kobj_get(a, k) != NULL)
                continue; /* already reported from a */
            json_object *va = kobj_get(a, k), *vb = kobj_get(b, k);
            if (jeq(va, vb))
                continue;
            char *name = go_field(k);
            if (va) {
                char *t = json_text(va);
                sb_take(&d, util_asprintf("- \t%s: %s,\n", name, t));
                free(t);
            }
            if (vb) {
                char *t = json_text(vb);
                sb_take(&d, util_asprintf("+ \t%s: %s,\n", name, t));
                free(t);
            }
            free(name);
        }
    }
    sb_add(&d, "  }\n");
    return sb_done(&d);
}

/* Go's time.Time.String() of an RFC 3339 UTC timestamp, else the quoted text. */
static char *go_time(const json_object *v)
{
    const char *s = str(v);
    if (s == NULL)
        return util_strdup("null");
    size_t n = strlen(s);
    if (n >= 20 && s[10] == 'T' && s[n - 1] == 'Z') {
        /* Go prints the fraction without trailing zeros. */
        char frac[16] = "";
        if (s[19] == '.') {
            /* '.' and the digits before 'Z', at most nanoseconds. */
            size_t fl = n - 20;
            if (fl > 10)
                fl = 10;
            memcpy(frac, s + 19, fl);
            frac[fl] = '\0';
            size_t l = strlen(frac);
            while (l > 1 && frac[l - 1] == '0')
                frac[--l] = '\0';
            if (l == 1)
                frac[0] = '\0';
        }
        return util_asprintf("%.10s %.8s%s +0000 UTC", s, s + 11, frac);
    }
    return kl_quote(s);
}

/* ---- defaults ------------------------------------------------------------ */

static json_object *ensure_obj(json_object *parent, const char *key)
{
    json_object *v = kobj_get(parent, key);
    if (v == NULL || !json_object_is_type(v, json_type_object)) {
        v = json_object_new_object();
        json_object_object_add(parent, key, v);
    }
    return v;
}

static void set_default(json_object *o, const char *key, json_object *v)
{
    if (kobj_get(o, key) == NULL)
        json_object_object_add(o, key, v);
    else
        json_object_put(v);
}

static char *base64(const char *s, size_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = util_calloc(((n + 2) / 3) * 4 + 1, 1);
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tbl[v & 63] : '=';
    }
    return out;
}

void kl_apply_defaults(const kl_type *t, json_object *obj)
{
    if (obj == NULL || !json_object_is_type(obj, json_type_object))
        return;
    if (is(t, "apiextensions.k8s.io", "customresourcedefinitions")) {
        kl_crd_definition_defaults(obj);
    } else if (is(t, "storage.k8s.io", "storageclasses")) {
        set_default(obj, "reclaimPolicy", json_object_new_string("Delete"));
        set_default(obj, "volumeBindingMode", json_object_new_string("Immediate"));
    } else if (is(t, "storage.k8s.io", "csidrivers")) {
        json_object *spec = ensure_obj(obj, "spec");
        set_default(spec, "attachRequired", json_object_new_boolean(1));
        set_default(spec, "podInfoOnMount", json_object_new_boolean(0));
        set_default(spec, "storageCapacity", json_object_new_boolean(0));
        set_default(spec, "fsGroupPolicy", json_object_new_string("ReadWriteOnceWithFSType"));
        if (kobj_get(spec, "volumeLifecycleModes") == NULL) {
            json_object *modes = json_object_new_array();
            json_object_array_add(modes, json_object_new_string("Persistent"));
            json_object_object_add(spec, "volumeLifecycleModes", modes);
        }
        set_default(spec, "requiresRepublish", json_object_new_boolean(0));
        /* SELinuxMountReadWriteOncePod is beta and on in 1.32, which
         * defaults seLinuxMount too. */
        set_default(spec, "seLinuxMount", json_object_new_boolean(0));
    } else if (is(t, "", "persistentvolumes")) {
        json_object *spec = ensure_obj(obj, "spec");
        set_default(spec, "persistentVolumeReclaimPolicy", json_object_new_string("Retain"));
        set_default(spec, "volumeMode", json_object_new_string("Filesystem"));
    } else if (is(t, "", "persistentvolumeclaims")) {
        json_object *spec = ensure_obj(obj, "spec");
        set_default(spec, "volumeMode", json_object_new_string("Filesystem"));
    } else if (is(t, "", "secrets")) {
        set_default(obj, "type", json_object_new_string("Opaque"));
        json_object *sd = kobj_get(obj, "stringData");
        if (sd != NULL && json_object_is_type(sd, json_type_object)) {
            /* stringData wins over data and is never stored. */
            json_object *data = ensure_obj(obj, "data");
            json_object_object_foreach(sd, k, v)
            {
                const char *s = str(v) ? str(v) : "";
                char *b = base64(s, strlen(s));
                json_object_object_add(data, k, json_object_new_string(b));
                free(b);
            }
        }
        json_object_object_del(obj, "stringData");
    } else if (is(t, "", "namespaces")) {
        /* PrepareForCreate: phase Active and the "kubernetes" finalizer
         * appended when missing. A namespace without status.phase is a new
         * one; on updates (status kept from the stored object) the
         * finalizers are left alone, since the namespace controller removes
         * that finalizer for good. */
        json_object *status = ensure_obj(obj, "status");
        if (kobj_get(status, "phase") == NULL) {
            json_object_object_add(status, "phase", json_object_new_string("Active"));
            json_object *spec = ensure_obj(obj, "spec");
            json_object *fin = kobj_get(spec, "finalizers");
            bool has = false;
            for (size_t i = 0; i < kobj_len(fin); i++)
                has |= str(kobj_at(fin, i)) && strcmp(str(kobj_at(fin, i)), "kubernetes") == 0;
            if (!has) {
                if (fin == NULL || !json_object_is_type(fin, json_type_array)) {
                    fin = json_object_new_array();
                    json_object_object_add(spec, "finalizers", fin);
                }
                json_object_array_add(fin, json_object_new_string("kubernetes"));
            }
        }
        const char *name = kobj_path_str(obj, "metadata.name");
        if (!empty(name)) {
            json_object *labels = ensure_obj(ensure_obj(obj, "metadata"), "labels");
            json_object_object_add(labels, "kubernetes.io/metadata.name",
                                   json_object_new_string(name));
        }
    }
}

/* ---- metadata ------------------------------------------------------------ */

static bool validate_meta(const kl_type *t, const json_object *obj, kl_errs *e)
{
    bool blocking = false;
    json_object *meta = kobj_get(obj, "metadata");
    const char *name = kobj_path_str(meta, "name");
    const char *gen = kobj_path_str(meta, "generateName");
    strs l = {0};

    if (!empty(gen)) {
        name_msgs(t, gen, true, &l);
        add_each_invalid(e, "metadata.generateName", gen, &l);
        strs_free(&l);
    }
    if (empty(name)) {
        if (empty(gen)) {
            add_required(e, "metadata.name", "name or generateName is required");
            blocking = true;
        }
    } else {
        name_msgs(t, name, false, &l);
        add_each_invalid(e, "metadata.name", name, &l);
        strs_free(&l);
    }

    json_object *g = kobj_get(meta, "generation");
    if (g && json_object_get_int64(g) < 0) {
        char *raw = util_asprintf("%" PRId64, json_object_get_int64(g));
        add_invalid_raw(e, "metadata.generation", raw, "must be greater than or equal to 0");
        free(raw);
    }

    json_object *labels = kobj_get(meta, "labels");
    if (labels && json_object_is_type(labels, json_type_object)) {
        json_object_object_foreach(labels, k, v)
        {
            check_qname(e, "metadata.labels", k);
            const char *val = str(v) ? str(v) : "";
            label_value_msgs(val, &l);
            add_each_invalid(e, "metadata.labels", val, &l);
            strs_free(&l);
        }
    }

    json_object *ann = kobj_get(meta, "annotations");
    if (ann && json_object_is_type(ann, json_type_object)) {
        size_t total = 0;
        json_object_object_foreach(ann, k, v)
        {
            /* Annotation keys are qualified names, case-insensitively. */
            char *lower = util_strdup(k);
            for (char *p = lower; *p; p++)
                *p = (char)tolower((unsigned char)*p);
            qname_msgs(lower, &l);
            add_each_invalid(e, "metadata.annotations", k, &l);
            strs_free(&l);
            free(lower);
            total += strlen(k) + (str(v) ? strlen(str(v)) : 0);
        }
        if (total > 262144) {
            add_too_long(e, "metadata.annotations", 262144);
            blocking = true;
        }
    }

    json_object *refs = kobj_get(meta, "ownerReferences");
    for (size_t i = 0; i < kobj_len(refs); i++) {
        json_object *r = kobj_at(refs, i);
        const char *av = kobj_path_str(r, "apiVersion") ? kobj_path_str(r, "apiVersion") : "";
        /* The version is what follows the one optional '/'. */
        const char *slash = strchr(av, '/');
        bool no_version = av[0] == '\0' || (slash && (slash[1] == '\0' || strchr(slash + 1, '/')));
        if (no_version)
            add_invalid(e, "metadata.ownerReferences.apiVersion", av, "version must not be empty");
        if (empty(kobj_path_str(r, "kind")))
            add_invalid(e, "metadata.ownerReferences.kind", "", "kind must not be empty");
        if (empty(kobj_path_str(r, "name")))
            add_invalid(e, "metadata.ownerReferences.name", "", "name must not be empty");
        if (empty(kobj_path_str(r, "uid")))
            add_invalid(e, "metadata.ownerReferences.uid", "", "uid must not be empty");
    }

    json_object *fin = kobj_get(meta, "finalizers");
    bool orphan = false, foreground = false;
    for (size_t i = 0; i < kobj_len(fin); i++) {
        const char *f = str(kobj_at(fin, i)) ? str(kobj_at(fin, i)) : "";
        check_qname(e, "metadata.finalizers", f);
        orphan |= strcmp(f, "orphan") == 0;
        foreground |= strcmp(f, "foregroundDeletion") == 0;
    }
    if (orphan && foreground) {
        char *raw = go_strings("[]string", fin);
        add_invalid_raw(e, "metadata.finalizers", raw,
                        "finalizer orphan and foregroundDeletion cannot be both set");
        free(raw);
    }
    /* Required and TooLong are among the errors that stop CEL rules. */
    return blocking;
}

static void immutable_str(kl_errs *e, const char *f, const json_object *nv, const json_object *ov)
{
    const char *n = str(nv) ? str(nv) : "", *o = str(ov) ? str(ov) : "";
    if (strcmp(n, o) != 0)
        add_invalid(e, f, n, "field is immutable");
}

static void validate_meta_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    json_object *om = kobj_get(old, "metadata"), *nm = kobj_get(obj, "metadata");

    if (kobj_get(om, "deletionTimestamp") != NULL) {
        /* No finalizer may be added while the object is being deleted. */
        json_object *of = kobj_get(om, "finalizers"), *nf = kobj_get(nm, "finalizers");
        const char **extra = util_calloc(kobj_len(nf) + 1, sizeof(char *));
        size_t n_extra = 0;
        for (size_t i = 0; i < kobj_len(nf); i++) {
            const char *f = str(kobj_at(nf, i));
            bool known = f == NULL;
            for (size_t j = 0; j < kobj_len(of) && !known; j++)
                known = str(kobj_at(of, j)) && strcmp(str(kobj_at(of, j)), f) == 0;
            for (size_t j = 0; j < n_extra && !known; j++)
                known = strcmp(extra[j], f) == 0;
            if (!known)
                extra[n_extra++] = f;
        }
        if (n_extra > 0) {
            qsort(extra, n_extra, sizeof(char *), cmp_cstr);
            sbuf b = {0};
            sb_add(&b, "no new finalizers can be added if the object is being deleted, found new "
                       "finalizers []string{");
            for (size_t i = 0; i < n_extra; i++) {
                if (i)
                    sb_add(&b, ", ");
                sb_take(&b, kl_quote(extra[i]));
            }
            sb_add(&b, "}");
            char *msg = sb_done(&b);
            add_forbidden(e, "metadata.finalizers", msg);
            free(msg);
        }
        free(extra);
    }

    json_object *ng = kobj_get(nm, "generation"), *og = kobj_get(om, "generation");
    if (ng && og && json_object_get_int64(ng) < json_object_get_int64(og)) {
        char *raw = util_asprintf("%" PRId64, json_object_get_int64(ng));
        add_invalid_raw(e, "metadata.generation", raw, "must not be decremented");
        free(raw);
    }

    immutable_str(e, "metadata.name", kobj_get(nm, "name"), kobj_get(om, "name"));
    immutable_str(e, "metadata.namespace", kobj_get(nm, "namespace"), kobj_get(om, "namespace"));
    immutable_str(e, "metadata.uid", kobj_get(nm, "uid"), kobj_get(om, "uid"));
    const char *nc = kobj_path_str(nm, "creationTimestamp"),
               *oc = kobj_path_str(om, "creationTimestamp");
    if (strcmp(nc ? nc : "", oc ? oc : "") != 0) {
        char *raw = go_time(kobj_get(nm, "creationTimestamp"));
        if (nc == NULL) {
            free(raw);
            raw = util_strdup("0001-01-01 00:00:00 +0000 UTC");
        }
        add_invalid_raw(e, "metadata.creationTimestamp", raw, "field is immutable");
        free(raw);
    }
    if (!jeq(kobj_get(nm, "deletionTimestamp"), kobj_get(om, "deletionTimestamp"))) {
        char *raw = go_time(kobj_get(nm, "deletionTimestamp"));
        add_invalid_raw(e, "metadata.deletionTimestamp", raw, "field is immutable");
        free(raw);
    }
    json_object *ng2 = kobj_get(nm, "deletionGracePeriodSeconds");
    if (!jeq(ng2, kobj_get(om, "deletionGracePeriodSeconds"))) {
        char *raw =
            ng2 ? util_asprintf("%" PRId64, json_object_get_int64(ng2)) : util_strdup("null");
        add_invalid_raw(e, "metadata.deletionGracePeriodSeconds", raw, "field is immutable");
        free(raw);
    }
}

/* ---- shared spec pieces -------------------------------------------------- */

static const char *const access_modes[] = {"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce",
                                           "ReadWriteOncePod", NULL};
static const char *const volume_modes[] = {"Block", "Filesystem", NULL};

static bool one_of(const char *s, const char *const *set)
{
    for (size_t i = 0; s && set[i]; i++)
        if (strcmp(s, set[i]) == 0)
            return true;
    return false;
}

/* accessModes of a PV or PVC spec; `required_detail` differs between them. */
static void check_access_modes(kl_errs *e, const json_object *spec, const char *required_detail)
{
    json_object *modes = kobj_get(spec, "accessModes");
    if (kobj_len(modes) == 0)
        add_required(e, "spec.accessModes", required_detail);
    bool rwop = false, other = false;
    for (size_t i = 0; i < kobj_len(modes); i++) {
        const char *m = str(kobj_at(modes, i)) ? str(kobj_at(modes, i)) : "";
        if (!one_of(m, access_modes))
            add_not_supported_str(e, "spec.accessModes", m, access_modes);
        if (strcmp(m, "ReadWriteOncePod") == 0)
            rwop = true;
        else if (one_of(m, access_modes))
            other = true;
    }
    if (rwop && other)
        add_forbidden(e, "spec.accessModes",
                      "may not use ReadWriteOncePod with other access modes");
}

static void check_volume_mode(kl_errs *e, const json_object *spec)
{
    const char *vm = kobj_path_str(spec, "volumeMode");
    if (vm && !one_of(vm, volume_modes))
        add_not_supported_str(e, "spec.volumeMode", vm, volume_modes);
}

/* spec.dataSource / spec.dataSourceRef of a PVC. */
static void check_data_source(kl_errs *e, const json_object *ds, const char *path)
{
    if (ds == NULL)
        return;
    char *f;
    if (empty(kobj_path_str(ds, "name"))) {
        f = util_asprintf("%s.name", path);
        add_required(e, f, NULL);
        free(f);
    }
    const char *kind = kobj_path_str(ds, "kind") ? kobj_path_str(ds, "kind") : "";
    if (kind[0] == '\0') {
        f = util_asprintf("%s.kind", path);
        add_required(e, f, NULL);
        free(f);
    }
    const char *group = kobj_path_str(ds, "apiGroup") ? kobj_path_str(ds, "apiGroup") : "";
    if (group[0] == '\0' && strcmp(kind, "PersistentVolumeClaim") != 0)
        add_invalid(e, path, kind,
                    "must be 'PersistentVolumeClaim' when referencing the default "
                    "apiGroup");
    if (group[0] != '\0') {
        f = util_asprintf("%s.apiGroup", path);
        check_subdomain(e, f, group);
        free(f);
    }
}

/* A positive quantity at `f` (ValidatePositiveQuantityValue). */
static void check_positive_qty(kl_errs *e, const char *f, const json_object *v)
{
    int64_t q = 0;
    if (!qty_or_error(e, f, v, &q))
        return;
    if (q <= 0)
        add_invalid(e, f, qty_text(str(v) ? str(v) : "", q), "must be greater than zero");
}

/* ---- per-type create rules ---------------------------------------------- */

static void pvc_spec(const json_object *obj, kl_errs *e)
{
    json_object *spec = kobj_get(obj, "spec");
    check_access_modes(e, spec, "at least 1 access mode is required");
    json_object *storage = kobj_path(spec, "resources.requests.storage");
    if (storage == NULL)
        add_required(e, "spec.resources[storage]", NULL);
    else
        check_positive_qty(e, "spec.resources[storage]", storage);
    const char *sc = kobj_path_str(spec, "storageClassName");
    if (!empty(sc))
        check_subdomain(e, "spec.storageClassName", sc);
    check_volume_mode(e, spec);
    check_data_source(e, kobj_get(spec, "dataSource"), "spec.dataSource");
    check_data_source(e, kobj_get(spec, "dataSourceRef"), "spec.dataSourceRef");
    const char *vac = kobj_path_str(spec, "volumeAttributesClassName");
    if (!empty(vac))
        check_subdomain(e, "spec.volumeAttributesClassName", vac);
}

/* The persistent volume sources, in the order upstream tests them. */
static const char *const pv_sources[] = {"hostPath",
                                         "gcePersistentDisk",
                                         "awsElasticBlockStore",
                                         "glusterfs",
                                         "flocker",
                                         "nfs",
                                         "rbd",
                                         "quobyte",
                                         "cephfs",
                                         "iscsi",
                                         "cinder",
                                         "fc",
                                         "flexVolume",
                                         "azureFile",
                                         "vsphereVolume",
                                         "photonPersistentDisk",
                                         "portworxVolume",
                                         "azureDisk",
                                         "scaleIO",
                                         "local",
                                         "storageos",
                                         "csi",
                                         NULL};

static void csi_source(const json_object *csi, kl_errs *e)
{
    check_csi_driver_name(e, "spec.csi.driver", kobj_path_str(csi, "driver"));
    if (empty(kobj_path_str(csi, "volumeHandle")))
        add_required(e, "spec.csi.volumeHandle", NULL);
    static const char *const refs[] = {"controllerPublishSecretRef", "nodeStageSecretRef",
                                       "nodePublishSecretRef", "controllerExpandSecretRef",
                                       "nodeExpandSecretRef"};
    for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++) {
        json_object *r = kobj_get(csi, refs[i]);
        if (r == NULL)
            continue;
        char *f;
        if (empty(kobj_path_str(r, "name"))) {
            f = util_asprintf("spec.csi.%s.name", refs[i]);
            add_required(e, f, NULL);
            free(f);
        }
        if (empty(kobj_path_str(r, "namespace"))) {
            f = util_asprintf("spec.csi.%s.namespace", refs[i]);
            add_required(e, f, NULL);
            free(f);
        }
    }
}

/* core.ResourceList as %#v would show it (quantities by their text). */
static char *go_resource_list(const json_object *m)
{
    if (m == NULL)
        return util_strdup("core.ResourceList(nil)");
    return go_string_map("core.ResourceList", m);
}

static void pv_spec(const json_object *obj, kl_errs *e)
{
    json_object *spec = kobj_get(obj, "spec");
    check_access_modes(e, spec, NULL);

    json_object *cap = kobj_get(spec, "capacity");
    size_t n_cap = cap && json_object_is_type(cap, json_type_object)
                       ? (size_t)json_object_object_length(cap)
                       : 0;
    if (n_cap == 0)
        add_required(e, "spec.capacity", NULL);
    if (kobj_get(cap, "storage") == NULL || n_cap > 1) {
        static const char *const only_storage[] = {"storage", NULL};
        char *raw = go_resource_list(cap);
        add_not_supported(e, "spec.capacity", raw, only_storage);
        free(raw);
    }
    if (n_cap > 0) {
        json_object_object_foreach(cap, k, v)
        {
            char *f = util_asprintf("spec.capacity[%s]", k);
            int64_t q = 0;
            if (qty_or_error(e, f, v, &q)) {
                if (q < 0) {
                    char *raw = util_asprintf("%" PRId64, q);
                    add_invalid_raw(e, f, raw, "must be a valid resource quantity");
                    free(raw);
                }
                if (q <= 0)
                    add_invalid(e, f, qty_text(str(v) ? str(v) : "", q),
                                "must be greater than zero");
            }
            free(f);
        }
    }

    const char *sc = kobj_path_str(spec, "storageClassName");
    if (!empty(sc))
        check_subdomain(e, "spec.storageClassName", sc);

    static const char *const policies[] = {"Delete", "Recycle", "Retain", NULL};
    const char *rp = kobj_path_str(spec, "persistentVolumeReclaimPolicy");
    if (!empty(rp) && !one_of(rp, policies))
        add_not_supported_str(e, "spec.persistentVolumeReclaimPolicy", rp, policies);

    size_t n_sources = 0;
    for (size_t i = 0; pv_sources[i]; i++) {
        json_object *src = kobj_get(spec, pv_sources[i]);
        if (src == NULL)
            continue;
        if (n_sources++ > 0) {
            char *f = util_asprintf("spec.%s", pv_sources[i]);
            add_forbidden(e, f, "may not specify more than 1 volume type");
            free(f);
            continue;
        }
        if (strcmp(pv_sources[i], "csi") == 0)
            csi_source(src, e);
        else if (strcmp(pv_sources[i], "local") == 0 && kobj_get(spec, "nodeAffinity") == NULL)
            add_required(e, "spec.nodeAffinity", "Local volume requires node affinity");
    }
    if (n_sources == 0)
        add_required(e, "spec", "must specify a volume type");
    check_volume_mode(e, spec);
}

/* ValidateVolumeAttachment's spec part. */
static void va_spec(const json_object *obj, kl_errs *e)
{
    json_object *spec = kobj_get(obj, "spec");
    json_object *pvn = kobj_path(spec, "source.persistentVolumeName");
    json_object *inl = kobj_path(spec, "source.inlineVolumeSpec");

    if (empty(kobj_path_str(spec, "attacher")))
        add_required(e, "spec.attacher", NULL);
    if (pvn == NULL && inl == NULL)
        add_required(e, "spec.source",
                     "must specify exactly one of inlineVolumeSpec and persistentVolumeName");
    else if (pvn != NULL && inl != NULL)
        add_forbidden(e, "spec.source",
                      "must specify exactly one of inlineVolumeSpec and persistentVolumeName");
    else if (pvn != NULL && empty(str(pvn)))
        add_required(e, "spec.source.persistentVolumeName",
                     "must specify non empty persistentVolumeName");
    const char *node = kobj_path_str(spec, "nodeName") ? kobj_path_str(spec, "nodeName") : "";
    check_subdomain(e, "spec.nodeName", node);
}

/* ValidateVolumeAttachmentV1: the attacher as a CSI driver name and the PV
 * name. Its "Required value" for an empty attacher repeats va_spec's and is
 * left out. */
static void va_spec_v1(const json_object *obj, kl_errs *e)
{
    json_object *spec = kobj_get(obj, "spec");
    const char *a = kobj_path_str(spec, "attacher") ? kobj_path_str(spec, "attacher") : "";
    if (strlen(a) > 63)
        add_too_long(e, "spec.attacher", 63);
    char *lower = util_strdup(a);
    for (char *p = lower; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    strs l = {0};
    subdomain_msgs(lower, "", &l);
    add_each_invalid(e, "spec.attacher", a, &l);
    strs_free(&l);
    free(lower);
    json_object *pvn = kobj_path(spec, "source.persistentVolumeName");
    if (pvn != NULL)
        check_subdomain(e, "spec.source.persistentVolumeName", str(pvn) ? str(pvn) : "");
}

/* The VolumeAttachment status limits (kept on /status writes). */
static void va_status(const json_object *obj, kl_errs *e)
{
    json_object *md = kobj_path(obj, "status.attachmentMetadata");
    if (md && json_object_is_type(md, json_type_object)) {
        size_t total = 0;
        json_object_object_foreach(md, k, v)
        {
            total += strlen(k) + (str(v) ? strlen(str(v)) : 0);
        }
        if (total > 262144)
            add_too_long(e, "status.attachmentMetadata", 262144);
    }
    static const char *const which[] = {"attachError", "detachError"};
    for (size_t i = 0; i < 2; i++) {
        char path[64];
        snprintf(path, sizeof(path), "status.%s.message", which[i]);
        const char *m = kobj_path_str(obj, path);
        /* 1.20 to 1.32 check 1024 bytes but word it with 262144 (an upstream
         * slip, fixed later); kube-lite words it as they do. */
        if (m && strlen(m) > 1024)
            add_too_long(e, path, 262144);
    }
}

static void csinode_spec(const json_object *obj, kl_errs *e)
{
    json_object *drivers = kobj_path(obj, "spec.drivers");
    for (size_t i = 0; i < kobj_len(drivers); i++) {
        json_object *d = kobj_at(drivers, i);
        char *base = util_asprintf("spec.drivers[%zu]", i);
        char *f = util_asprintf("%s.name", base);
        const char *name = kobj_path_str(d, "name") ? kobj_path_str(d, "name") : "";
        check_csi_driver_name(e, f, name);

        char *fid = util_asprintf("%s.nodeID", base);
        const char *id = kobj_path_str(d, "nodeID") ? kobj_path_str(d, "nodeID") : "";
        if (id[0] == '\0')
            add_required(e, fid, NULL);
        /* 256: the strategies allow long node IDs since 1.23. */
        if (strlen(id) > 256)
            add_invalid(e, fid, id, "must be 256 characters or less");
        free(fid);

        json_object *count = kobj_path(d, "allocatable.count");
        if (count && json_object_get_int64(count) < 0) {
            char *fc = util_asprintf("%s.allocatable.count", base);
            char *raw = util_asprintf("%" PRId64, json_object_get_int64(count));
            add_invalid_raw(e, fc, raw, "must be greater than or equal to 0");
            free(raw);
            free(fc);
        }

        for (size_t j = 0; j < i; j++) {
            const char *other = kobj_path_str(kobj_at(drivers, j), "name");
            if (other && strcmp(other, name) == 0) {
                add_duplicate(e, f, name);
                break;
            }
        }
        free(f);

        json_object *keys = kobj_get(d, "topologyKeys");
        for (size_t j = 0; j < kobj_len(keys); j++) {
            const char *k = str(kobj_at(keys, j)) ? str(kobj_at(keys, j)) : "";
            if (k[0] == '\0')
                add_required(e, base, NULL);
            for (size_t m = 0; m < j; m++) {
                const char *o = str(kobj_at(keys, m));
                if (o && strcmp(o, k) == 0) {
                    add_duplicate(e, base, k);
                    break;
                }
            }
            /* Reported with the whole list as the value (%#v of []string),
             * as validateCSINodeDriver does. */
            strs l = {0};
            qname_msgs(k, &l);
            char *all = go_strings("[]string", keys);
            for (size_t m = 0; m < l.n; m++)
                add_invalid_raw(e, base, all, l.v[m]);
            free(all);
            strs_free(&l);
        }
        free(base);
    }
}

/* validateProvisioner: a driver name, checked lower-cased as a qualified name. */
static void provisioner_rules(const json_object *obj, const char *key, kl_errs *e)
{
    const char *prov = kobj_path_str(obj, key);
    if (empty(prov)) {
        add_required(e, key, NULL);
    } else {
        char *lower = util_strdup(prov);
        for (char *p = lower; *p; p++)
            *p = (char)tolower((unsigned char)*p);
        strs l = {0};
        qname_msgs(lower, &l);
        add_each_invalid(e, key, prov, &l);
        strs_free(&l);
        free(lower);
    }
}

/* validateParameters: at most 512 keys, none empty, 256 KiB in all; with
 * !allow_empty (VolumeAttributesClass) at least one. */
static void parameters_rules(const json_object *obj, bool allow_empty, kl_errs *e)
{
    json_object *params = kobj_get(obj, "parameters");
    if (!allow_empty && (!params || !json_object_is_type(params, json_type_object) ||
                         json_object_object_length(params) == 0))
        add_required(e, "parameters", "must contain at least one key/value pair");
    if (params && json_object_is_type(params, json_type_object)) {
        if (json_object_object_length(params) > 512) {
            add_too_long(e, "parameters", 512);
        } else {
            size_t total = 0;
            json_object_object_foreach(params, k, v)
            {
                if (k[0] == '\0')
                    add_invalid(e, "parameters", "", "field can not be empty.");
                total += strlen(k) + (str(v) ? strlen(str(v)) : 0);
            }
            if (total > 262144)
                add_too_long(e, "parameters", 262144);
        }
    }
}

/* ValidateVolumeAttributesClass (storage.k8s.io v1 and v1beta1 alike). */
static void vac_rules(const json_object *obj, kl_errs *e)
{
    provisioner_rules(obj, "driverName", e);
    parameters_rules(obj, false, e);
}

/* ValidatePersistentVolumeClaimStatusUpdate's modifyVolumeStatus rule. */
static void pvc_status(const json_object *obj, kl_errs *e)
{
    static const char *const modify[] = {"InProgress", "Infeasible", "Pending", NULL};
    json_object *mvs = kobj_path(obj, "status.modifyVolumeStatus");
    const char *st = kobj_str(mvs, "status");
    if (mvs && json_object_is_type(mvs, json_type_object) && !one_of(st ? st : "", modify))
        add_not_supported_str(e, "status.modifyVolumeStatus.status", st ? st : "", modify);
}

static void storageclass_rules(const json_object *obj, kl_errs *e)
{
    provisioner_rules(obj, "provisioner", e);
    parameters_rules(obj, true, e);
    static const char *const policies[] = {"Delete", "Retain", NULL};
    const char *rp = kobj_path_str(obj, "reclaimPolicy");
    if (!empty(rp) && !one_of(rp, policies))
        add_not_supported_str(e, "reclaimPolicy", rp, policies);
    static const char *const modes[] = {"Immediate", "WaitForFirstConsumer", NULL};
    const char *bm = kobj_path_str(obj, "volumeBindingMode");
    if (bm == NULL)
        add_required(e, "volumeBindingMode", NULL);
    else if (!one_of(bm, modes))
        add_not_supported_str(e, "volumeBindingMode", bm, modes);
}

static void csidriver_spec(const json_object *obj, kl_errs *e)
{
    json_object *spec = kobj_get(obj, "spec");
    /* "attachedRequired" is upstream's spelling of the path. */
    if (kobj_get(spec, "attachRequired") == NULL)
        add_required(e, "spec.attachedRequired", NULL);
    if (kobj_get(spec, "podInfoOnMount") == NULL)
        add_required(e, "spec.podInfoOnMount", NULL);
    if (kobj_get(spec, "storageCapacity") == NULL)
        add_required(e, "spec.storageCapacity", NULL);
    static const char *const fs[] = {"File", "None", "ReadWriteOnceWithFSType", NULL};
    const char *fsg = kobj_path_str(spec, "fsGroupPolicy");
    if (fsg && !one_of(fsg, fs))
        add_not_supported_str(e, "spec.fsGroupPolicy", fsg, fs);
    static const char *const lm[] = {"Persistent", "Ephemeral", NULL};
    json_object *modes = kobj_get(spec, "volumeLifecycleModes");
    for (size_t i = 0; i < kobj_len(modes); i++) {
        const char *m = str(kobj_at(modes, i)) ? str(kobj_at(modes, i)) : "";
        if (!one_of(m, lm))
            add_not_supported_str(e, "spec.volumeLifecycleModes", m, lm);
    }
    if (kobj_get(spec, "seLinuxMount") == NULL)
        add_required(e, "spec.seLinuxMount", NULL);
}

static void capacity_rules(const json_object *obj, kl_errs *e)
{
    const char *sc =
        kobj_path_str(obj, "storageClassName") ? kobj_path_str(obj, "storageClassName") : "";
    check_subdomain(e, "storageClassName", sc);
    json_object *cap = kobj_get(obj, "capacity");
    int64_t q = 0;
    if (cap && qty_or_error(e, "capacity", cap, &q) && q < 0)
        add_invalid(e, "capacity", str(cap) ? str(cap) : "", "must be greater than or equal to 0");
}

/* CEL messages are reported against the value's schema type name, e.g.
 * `spec.source: Invalid value: "object": ...`. */
static void cel(kl_errs *e, const char *f, const char *type, const char *msg)
{
    add_invalid(e, f, type, msg);
}

/* A required/enum failure stops CEL evaluation, and apiextensions says so. */
static void cel_blocked(kl_errs *e)
{
    add_invalid_raw(e, "<nil>", "\"null\"",
                    "some validation rules were not checked because the object was invalid; "
                    "correct the existing errors to complete validation");
}

/* Transition rule `!has(oldSelf.k) || has(self.k)` on the parent object. */
static void cel_required_once(kl_errs *e, const json_object *oparent, const json_object *nparent,
                              const char *parent_path, const char *key)
{
    if (oparent == NULL || nparent == NULL || kobj_get(oparent, key) == NULL ||
        kobj_get(nparent, key))
        return;
    char *m = util_asprintf("%s is required once set", key);
    cel(e, parent_path, "object", m);
    free(m);
}

/* Transition rule `self == oldSelf` on a string present before and after. */
static void cel_immutable(kl_errs *e, const json_object *oparent, const json_object *nparent,
                          const char *parent_path, const char *key)
{
    json_object *ov = kobj_get(oparent, key), *nv = kobj_get(nparent, key);
    if (ov == NULL || nv == NULL || jeq(ov, nv))
        return;
    char *f = util_asprintf("%s.%s", parent_path, key);
    char *m = util_asprintf("%s is immutable", key);
    cel(e, f, "string", m);
    free(m);
    free(f);
}

static const char *const deletion_policies[] = {"Delete", "Retain", NULL};

/* Schema checks of a deletionPolicy; true when they failed (which blocks
 * CEL rules). */
static bool bad_deletion_policy(kl_errs *e, const char *f, const json_object *v)
{
    if (v == NULL) {
        add_required(e, f, NULL);
        return true;
    }
    const char *s = str(v) ? str(v) : "";
    if (!one_of(s, deletion_policies)) {
        add_not_supported_str(e, f, s, deletion_policies);
        return true;
    }
    return false;
}

/* VolumeSnapshot: schema `required`, then the CRD's CEL rules (`old` is
 * NULL on create). `blocked`: earlier errors already stop CEL. */
static void snapshot_rules(const json_object *old, const json_object *obj, bool blocked, kl_errs *e)
{
    json_object *spec = kobj_get(obj, "spec");
    json_object *src = kobj_get(spec, "source");
    if (spec == NULL) {
        add_required(e, "spec", NULL);
        blocked = true;
    } else if (src == NULL) {
        add_required(e, "spec.source", NULL);
        blocked = true;
    }
    if (blocked) {
        cel_blocked(e);
        return;
    }
    json_object *os = kobj_path(old, "spec.source");
    cel_required_once(e, os, src, "spec.source", "persistentVolumeClaimName");
    cel_required_once(e, os, src, "spec.source", "volumeSnapshotContentName");
    if ((kobj_get(src, "persistentVolumeClaimName") != NULL) ==
        (kobj_get(src, "volumeSnapshotContentName") != NULL))
        cel(e, "spec.source", "object",
            "exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set");
    cel_immutable(e, os, src, "spec.source", "persistentVolumeClaimName");
    cel_immutable(e, os, src, "spec.source", "volumeSnapshotContentName");
    const char *cls = kobj_path_str(spec, "volumeSnapshotClassName");
    if (cls && cls[0] == '\0')
        cel(e, "spec.volumeSnapshotClassName", "string",
            "volumeSnapshotClassName must not be the empty string when set");
}

static void content_rules(const json_object *old, const json_object *obj, bool blocked, kl_errs *e)
{
    json_object *spec = kobj_get(obj, "spec");
    if (spec == NULL) {
        add_required(e, "spec", NULL);
        cel_blocked(e);
        return;
    }
    blocked |= bad_deletion_policy(e, "spec.deletionPolicy", kobj_get(spec, "deletionPolicy"));
    static const char *const required[] = {"driver", "source", "volumeSnapshotRef"};
    for (size_t i = 0; i < 3; i++) {
        if (kobj_get(spec, required[i]) == NULL) {
            char *f = util_asprintf("spec.%s", required[i]);
            add_required(e, f, NULL);
            free(f);
            blocked = true;
        }
    }
    if (blocked) {
        cel_blocked(e);
        return;
    }
    json_object *ospec = kobj_get(old, "spec");
    cel_required_once(e, ospec, spec, "spec", "sourceVolumeMode");
    json_object *os = kobj_get(ospec, "source"), *src = kobj_get(spec, "source");
    cel_required_once(e, os, src, "spec.source", "volumeHandle");
    cel_required_once(e, os, src, "spec.source", "snapshotHandle");
    if ((kobj_get(src, "volumeHandle") != NULL) == (kobj_get(src, "snapshotHandle") != NULL))
        cel(e, "spec.source", "object",
            "exactly one of volumeHandle and snapshotHandle must be set");
    cel_immutable(e, os, src, "spec.source", "volumeHandle");
    cel_immutable(e, os, src, "spec.source", "snapshotHandle");
    cel_immutable(e, ospec, spec, "spec", "sourceVolumeMode");
    json_object *ref = kobj_get(spec, "volumeSnapshotRef");
    if (kobj_get(ref, "name") == NULL || kobj_get(ref, "namespace") == NULL)
        cel(e, "spec.volumeSnapshotRef", "object",
            "both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set");
}

/* VolumeSnapshotClass has schema checks only (no CEL rules). */
static void snapshotclass_rules(const json_object *obj, kl_errs *e)
{
    bad_deletion_policy(e, "deletionPolicy", kobj_get(obj, "deletionPolicy"));
    if (kobj_get(obj, "driver") == NULL)
        add_required(e, "driver", NULL);
}

/* The type's own rules on one object (no metadata); `old` is NULL on
 * create. `meta_blocking`: metadata errors that stop a CRD's CEL rules. */
static void type_rules(const kl_type *t, const json_object *old, const json_object *obj,
                       bool status_only, bool meta_blocking, kl_errs *e)
{
    if (is(t, "storage.k8s.io", "volumeattachments")) {
        if (!status_only)
            va_spec(obj, e);
        va_status(obj, e);
        /* The v1 tightening runs on create only. */
        if (old == NULL)
            va_spec_v1(obj, e);
        return;
    }
    if (kl_type_is_crd(t)) {
        /* The whole object against the schema, through /status too. */
        kl_crd_validate(t, obj, e);
        return;
    }
    if (status_only) {
        if (is(t, "", "persistentvolumeclaims"))
            pvc_status(obj, e);
        return;
    }
    if (is(t, "", "persistentvolumeclaims"))
        pvc_spec(obj, e);
    else if (is(t, "", "persistentvolumes"))
        pv_spec(obj, e);
    else if (is(t, "storage.k8s.io", "csinodes"))
        csinode_spec(obj, e);
    else if (is(t, "storage.k8s.io", "storageclasses"))
        storageclass_rules(obj, e);
    else if (is(t, "storage.k8s.io", "volumeattributesclasses"))
        vac_rules(obj, e);
    else if (is(t, "storage.k8s.io", "csidrivers"))
        csidriver_spec(obj, e);
    else if (is(t, "storage.k8s.io", "csistoragecapacities"))
        capacity_rules(obj, e);
    else if (is(t, "snapshot.storage.k8s.io", "volumesnapshots"))
        snapshot_rules(old, obj, meta_blocking, e);
    else if (is(t, "snapshot.storage.k8s.io", "volumesnapshotcontents"))
        content_rules(old, obj, meta_blocking, e);
    else if (is(t, "snapshot.storage.k8s.io", "volumesnapshotclasses"))
        snapshotclass_rules(obj, e);
    else if (is(t, "apiextensions.k8s.io", "customresourcedefinitions"))
        kl_crd_validate_definition(old, obj, e);
}

void kl_validate_create(const kl_type *t, const json_object *obj, kl_errs *errs)
{
    bool blocking = validate_meta(t, obj, errs);
    type_rules(t, NULL, obj, false, blocking, errs);
    kl_validate_core(t, NULL, obj, errs);
}

/* ---- per-type update rules ---------------------------------------------- */

/* A PVC spec copy with its quantities as numbers, so "1Gi" == "1024Mi". */
static json_object *pvc_spec_norm(const json_object *spec)
{
    json_object *c = deep_copy(spec);
    if (c == NULL)
        c = json_object_new_object();
    static const char *const lists[] = {"requests", "limits"};
    for (size_t i = 0; i < 2; i++) {
        json_object *m =
            kobj_path(c, lists[i][0] == 'r' ? "resources.requests" : "resources.limits");
        if (m == NULL || !json_object_is_type(m, json_type_object))
            continue;
        json_object_object_foreach(m, k, v)
        {
            int64_t q = 0;
            if (str(v) && util_quantity_parse(str(v), &q) == 0)
                json_object_object_add(m, k, json_object_new_int64(q));
        }
    }
    return c;
}

static void pvc_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    json_object *os = kobj_get(old, "spec"), *ns = kobj_get(obj, "spec");
    json_object *oc = pvc_spec_norm(os), *nc = pvc_spec_norm(ns);

    /* volumeName may be set once, from empty. */
    if (empty(kobj_path_str(os, "volumeName"))) {
        json_object *vn = kobj_get(nc, "volumeName");
        if (vn)
            json_object_object_add(oc, "volumeName", json_object_get(vn));
        else
            json_object_object_del(oc, "volumeName");
    }
    /* storageClassName may go from unset to set (retroactive default). */
    if (kobj_get(os, "storageClassName") == NULL)
        json_object_object_del(nc, "storageClassName");
    /* A bound claim may change its storage request. */
    const char *phase = kobj_path_str(obj, "status.phase");
    json_object *nreq = kobj_path(nc, "resources.requests");
    if (phase && strcmp(phase, "Bound") == 0 && nreq != NULL) {
        json_object *ost = kobj_path(oc, "resources.requests.storage");
        if (ost)
            json_object_object_add(nreq, "storage", json_object_get(ost));
        else
            json_object_object_del(nreq, "storage");
    }
    /* volumeAttributesClassName is mutable (checked below). */
    json_object_object_del(oc, "volumeAttributesClassName");
    json_object_object_del(nc, "volumeAttributesClassName");

    if (!jeq(oc, nc)) {
        char *diff = go_diff("core.PersistentVolumeClaimSpec", oc, nc);
        char *msg = util_asprintf("spec is immutable after creation except resources.requests and "
                                  "volumeAttributesClassName for bound claims\n%s",
                                  diff);
        add_forbidden(e, "spec", msg);
        free(msg);
        free(diff);
    }
    json_object_put(oc);
    json_object_put(nc);

    /* RecoverVolumeExpansionFailure (beta, on in 1.32): the request may
     * shrink, but not to or below the capacity the claim has. */
    int64_t o_size = 0, n_size = 0, st_size = 0;
    const char *os_s = kobj_path_str(os, "resources.requests.storage");
    const char *ns_s = kobj_path_str(ns, "resources.requests.storage");
    const char *st_s = kobj_path_str(old, "status.capacity.storage");
    if (os_s && util_quantity_parse(os_s, &o_size) < 0)
        o_size = 0;
    if (ns_s && util_quantity_parse(ns_s, &n_size) < 0)
        n_size = 0;
    if (st_s && util_quantity_parse(st_s, &st_size) < 0)
        st_size = 0;
    if (n_size < o_size && n_size <= st_size)
        add_forbidden(e, "spec.resources.requests.storage",
                      "field can not be less than status.capacity");

    /* The field path is upstream's ("volumeMode", not "spec.volumeMode"). */
    if (!jeq(kobj_get(ns, "volumeMode"), kobj_get(os, "volumeMode"))) {
        char *raw = go_opt_str(kobj_get(ns, "volumeMode"));
        add_invalid_raw(e, "volumeMode", raw, "field is immutable");
        free(raw);
    }

    json_object *ov = kobj_get(os, "volumeAttributesClassName"),
                *nv = kobj_get(ns, "volumeAttributesClassName");
    if (ov != NULL && !jeq(ov, nv)) {
        if (nv == NULL)
            add_forbidden(e, "spec.volumeAttributesClassName",
                          "update from non-nil value to nil is forbidden");
        else if (empty(str(nv)))
            add_forbidden(e, "spec.volumeAttributesClassName",
                          "update from non-nil value to an empty string is forbidden");
    }
}

/* Keys of a PV spec that are not its volume source. */
static bool pv_non_source_key(const char *k)
{
    static const char *const keys[] = {"capacity",
                                       "accessModes",
                                       "claimRef",
                                       "persistentVolumeReclaimPolicy",
                                       "storageClassName",
                                       "mountOptions",
                                       "volumeMode",
                                       "nodeAffinity",
                                       "volumeAttributesClassName",
                                       NULL};
    return one_of(k, keys);
}

static json_object *pv_source_of(const json_object *spec)
{
    json_object *src = json_object_new_object();
    if (spec && json_object_is_type(spec, json_type_object)) {
        json_object_object_foreach((json_object *)spec, k, v)
        {
            if (!pv_non_source_key(k) && v != NULL)
                json_object_object_add(src, k, deep_copy(v));
        }
    }
    return src;
}

static void pv_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    json_object *os = kobj_get(old, "spec"), *ns = kobj_get(obj, "spec");
    json_object *osrc = pv_source_of(os), *nsrc = pv_source_of(ns);

    /* controllerExpandSecretRef may be added to a CSI volume. */
    json_object *ocsi = kobj_get(osrc, "csi"), *ncsi = kobj_get(nsrc, "csi");
    if (ocsi && ncsi && kobj_get(ocsi, "controllerExpandSecretRef") == NULL)
        json_object_object_del(ncsi, "controllerExpandSecretRef");

    if (!jeq(osrc, nsrc)) {
        char *diff = go_diff("core.PersistentVolumeSource", osrc, nsrc);
        char *msg =
            util_asprintf("spec.persistentvolumesource is immutable after creation\n%s", diff);
        add_forbidden(e, "spec.persistentvolumesource", msg);
        free(msg);
        free(diff);
    }
    json_object_put(osrc);
    json_object_put(nsrc);

    if (!jeq(kobj_get(ns, "volumeMode"), kobj_get(os, "volumeMode"))) {
        char *raw = go_opt_str(kobj_get(ns, "volumeMode"));
        add_invalid_raw(e, "volumeMode", raw, "field is immutable");
        free(raw);
    }
    json_object *ona = kobj_get(os, "nodeAffinity"), *nna = kobj_get(ns, "nodeAffinity");
    if (ona != NULL && !jeq(ona, nna)) {
        char *raw =
            nna ? util_asprintf("core.VolumeNodeAffinity{Required:(*core.NodeSelector)(%s)}",
                                go_ptr(kobj_get(nna, "required")))
                : util_strdup("null");
        add_invalid_raw(e, "nodeAffinity", raw, "field is immutable");
        free(raw);
    }
    if (kobj_get(os, "volumeAttributesClassName") != NULL &&
        kobj_get(ns, "volumeAttributesClassName") == NULL)
        add_forbidden(e, "spec.volumeAttributesClassName",
                      "update from non-nil value to nil is forbidden");
}

static void va_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    if (!jeq(kobj_get(old, "spec"), kobj_get(obj, "spec"))) {
        char *raw = go_va_spec(kobj_get(obj, "spec"));
        add_invalid_raw(e, "spec", raw, "field is immutable");
        free(raw);
    }
}

static void vac_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    if (!jeq(kobj_get(old, "driverName"), kobj_get(obj, "driverName")))
        add_forbidden(e, "driverName", "updates to driverName are forbidden.");
    if (!jeq(kobj_get(old, "parameters"), kobj_get(obj, "parameters")))
        add_forbidden(e, "parameters", "updates to parameters are forbidden.");
}

static void storageclass_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    if (!jeq(kobj_get(old, "parameters"), kobj_get(obj, "parameters")))
        add_forbidden(e, "parameters", "updates to parameters are forbidden.");
    if (!jeq(kobj_get(old, "provisioner"), kobj_get(obj, "provisioner")))
        add_forbidden(e, "provisioner", "updates to provisioner are forbidden.");
    if (!jeq(kobj_get(old, "reclaimPolicy"), kobj_get(obj, "reclaimPolicy")))
        add_forbidden(e, "reclaimPolicy", "updates to reclaimPolicy are forbidden.");
    if (!jeq(kobj_get(old, "volumeBindingMode"), kobj_get(obj, "volumeBindingMode"))) {
        char *raw = go_opt_str(kobj_get(obj, "volumeBindingMode"));
        add_invalid_raw(e, "volumeBindingMode", raw, "field is immutable");
        free(raw);
    }
}

static void csidriver_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    json_object *oa = kobj_path(old, "spec.attachRequired"),
                *na = kobj_path(obj, "spec.attachRequired");
    if (!jeq(oa, na))
        add_invalid_raw(e, "spec.attachedRequired",
                        na ? (json_object_get_boolean(na) ? "true" : "false") : "null",
                        "field is immutable");
    json_object *om = kobj_path(old, "spec.volumeLifecycleModes"),
                *nm = kobj_path(obj, "spec.volumeLifecycleModes");
    if (!jeq(om, nm)) {
        char *raw = go_strings("[]storage.VolumeLifecycleMode", nm);
        add_invalid_raw(e, "spec.volumeLifecycleModes", raw, "field is immutable");
        free(raw);
    }
}

static void csinode_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    json_object *od = kobj_path(old, "spec.drivers"), *nd = kobj_path(obj, "spec.drivers");
    for (size_t i = 0; i < kobj_len(od); i++) {
        const char *on = kobj_path_str(kobj_at(od, i), "name");
        for (size_t j = 0; on && j < kobj_len(nd); j++) {
            const char *nn = kobj_path_str(kobj_at(nd, j), "name");
            if (nn && strcmp(on, nn) == 0 && !jeq(kobj_at(od, i), kobj_at(nd, j))) {
                /* 1.32 reports the whole entry under the path "CSINodeDriver"
                 * (spec.drivers from 1.33). */
                char *raw = go_csinode_driver(kobj_at(nd, j));
                add_invalid_raw(e, "CSINodeDriver", raw, "field is immutable");
                free(raw);
            }
        }
    }
}

static void capacity_update(const json_object *old, const json_object *obj, kl_errs *e)
{
    if (!jeq(kobj_get(old, "nodeTopology"), kobj_get(obj, "nodeTopology"))) {
        char *raw = go_label_selector(kobj_get(obj, "nodeTopology"));
        add_invalid_raw(e, "nodeTopology", raw, "field is immutable");
        free(raw);
    }
    immutable_str(e, "storageClassName", kobj_get(obj, "storageClassName"),
                  kobj_get(old, "storageClassName"));
}

void kl_validate_update(const kl_type *t, const json_object *old, const json_object *obj,
                        bool status_only, kl_errs *errs)
{
    /* Metadata errors of an update are checked apart from a CRD's schema,
     * so they never block its CEL rules. */
    validate_meta(t, obj, errs);
    validate_meta_update(old, obj, errs);
    type_rules(t, old, obj, status_only, false, errs);
    /* ValidateUpdate of VolumeAttachments runs ValidateVolumeAttachment
     * twice (itself and inside ValidateVolumeAttachmentUpdate): each status
     * error is reported twice, on /status too. */
    if (is(t, "storage.k8s.io", "volumeattachments"))
        va_status(obj, errs);
    if (status_only)
        return;
    kl_validate_core(t, old, obj, errs);
    if (is(t, "", "persistentvolumeclaims"))
        pvc_update(old, obj, errs);
    else if (is(t, "", "persistentvolumes"))
        pv_update(old, obj, errs);
    else if (is(t, "storage.k8s.io", "volumeattachments"))
        va_update(old, obj, errs);
    else if (is(t, "storage.k8s.io", "storageclasses"))
        storageclass_update(old, obj, errs);
    else if (is(t, "storage.k8s.io", "volumeattributesclasses"))
        vac_update(old, obj, errs);
    else if (is(t, "storage.k8s.io", "csidrivers"))
        csidriver_update(old, obj, errs);
    else if (is(t, "storage.k8s.io", "csinodes"))
        csinode_update(old, obj, errs);
    else if (is(t, "storage.k8s.io", "csistoragecapacities"))
        capacity_update(old, obj, errs);
}
