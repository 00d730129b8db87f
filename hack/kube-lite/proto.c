/*
 * Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as
 * kubectl's generator commands send them: the 4 bytes "k8s\0", then a
 * runtime.Unknown {typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2,
 * contentEncoding = 3, contentType = 4} whose `raw` is the object message.
 *
 * A small hand-written decoder: each supported message is a table of field
 * numbers (as in k8s.io/api's generated.proto) to JSON names and kinds, and
 * the result is the JSON object kube-apiserver's JSON encoding of the same
 * Go struct would be (empty singular strings and zero times left out, as
 * omitempty does; repeated strings kept whole, since [""] means the core
 * API group in a PolicyRule). Every length and varint is bounds-checked;
 * wrong wire types for known fields are errors; unknown fields are skipped
 * as kube-apiserver's decoder skips them.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define MAX_DEPTH 32

typedef enum {
    PB_STRING,
    PB_BYTES,  /* base64 in JSON */
    PB_INT,    /* int32 or int64 varint */
    PB_INT_NZ, /* same, left out when 0 (a non-pointer omitempty field) */
    PB_BOOL,
    PB_MSG,
    PB_TIME,     /* metav1.Time {seconds = 1, nanos = 2} as RFC 3339 */
    PB_MAP_STR,  /* map<string, string> */
    PB_MAP_BYTES /* map<string, bytes> */
} pb_kind;

typedef struct pb_msg pb_msg;

typedef struct pb_field {
    uint32_t num;
    const char *json;
    pb_kind kind;
    bool repeated;
    const pb_msg *msg; /* PB_MSG */
} pb_field;

struct pb_msg {
    const char *name; /* for error messages */
    const pb_field *fields;
    size_t n;
};

#define MSG(var, label, ...)                                                                       \
    static const pb_field var##_fields[] = {__VA_ARGS__};                                          \
    static const pb_msg var = {label, var##_fields, sizeof(var##_fields) / sizeof(pb_field)}

/* ---- schemas (field numbers of k8s.io/api and apimachinery generated.proto) ---- */

MSG(owner_ref, "OwnerReference", {1, "kind", PB_STRING, false, NULL},
    {3, "name", PB_STRING, false, NULL}, {4, "uid", PB_STRING, false, NULL},
    {5, "apiVersion", PB_STRING, false, NULL}, {6, "controller", PB_BOOL, false, NULL},
    {7, "blockOwnerDeletion", PB_BOOL, false, NULL});

MSG(object_meta, "ObjectMeta", {1, "name", PB_STRING, false, NULL},
    {2, "generateName", PB_STRING, false, NULL}, {3, "namespace", PB_STRING, false, NULL},
    {4, "selfLink", PB_STRING, false, NULL}, {5, "uid", PB_STRING, false, NULL},
    {6, "resourceVersion", PB_STRING, false, NULL}, {7, "generation", PB_INT_NZ, false, NULL},
    {8, "creationTimestamp", PB_TIME, false, NULL}, {9, "deletionTimestamp", PB_TIME, false, NULL},
    {10, "deletionGracePeriodSeconds", PB_INT, false, NULL},
    {11, "labels", PB_MAP_STR, false, NULL}, {12, "annotations", PB_MAP_STR, false, NULL},
    {13, "ownerReferences", PB_MSG, true, &owner_ref}, {14, "finalizers", PB_STRING, true, NULL});

MSG(namespace_spec, "NamespaceSpec", {1, "finalizers", PB_STRING, true, NULL});
MSG(namespace_cond, "NamespaceCondition", {1, "type", PB_STRING, false, NULL},
    {2, "status", PB_STRING, false, NULL}, {4, "lastTransitionTime", PB_TIME, false, NULL},
    {5, "reason", PB_STRING, false, NULL}, {6, "message", PB_STRING, false, NULL});
MSG(namespace_status, "NamespaceStatus", {1, "phase", PB_STRING, false, NULL},
    {2, "conditions", PB_MSG, true, &namespace_cond});
MSG(namespace_msg, "Namespace", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "spec", PB_MSG, false, &namespace_spec}, {3, "status", PB_MSG, false, &namespace_status});

MSG(secret_msg, "Secret", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "data", PB_MAP_BYTES, false, NULL}, {3, "type", PB_STRING, false, NULL},
    {4, "stringData", PB_MAP_STR, false, NULL}, {5, "immutable", PB_BOOL, false, NULL});

MSG(configmap_msg, "ConfigMap", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "data", PB_MAP_STR, false, NULL}, {3, "binaryData", PB_MAP_BYTES, false, NULL},
    {4, "immutable", PB_BOOL, false, NULL});

MSG(object_ref, "ObjectReference", {1, "kind", PB_STRING, false, NULL},
    {2, "namespace", PB_STRING, false, NULL}, {3, "name", PB_STRING, false, NULL},
    {4, "uid", PB_STRING, false, NULL}, {5, "apiVersion", PB_STRING, false, NULL},
    {6, "resourceVersion", PB_STRING, false, NULL}, {7, "fieldPath", PB_STRING, false, NULL});
MSG(local_ref, "LocalObjectReference", {1, "name", PB_STRING, false, NULL});
MSG(service_account_msg, "ServiceAccount", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "secrets", PB_MSG, true, &object_ref}, {3, "imagePullSecrets", PB_MSG, true, &local_ref},
    {4, "automountServiceAccountToken", PB_BOOL, false, NULL});

MSG(policy_rule, "PolicyRule", {1, "verbs", PB_STRING, true, NULL},
    {2, "apiGroups", PB_STRING, true, NULL}, {3, "resources", PB_STRING, true, NULL},
    {4, "resourceNames", PB_STRING, true, NULL}, {5, "nonResourceURLs", PB_STRING, true, NULL});
MSG(selector_req, "LabelSelectorRequirement", {1, "key", PB_STRING, false, NULL},
    {2, "operator", PB_STRING, false, NULL}, {3, "values", PB_STRING, true, NULL});
MSG(label_selector, "LabelSelector", {1, "matchLabels", PB_MAP_STR, false, NULL},
    {2, "matchExpressions", PB_MSG, true, &selector_req});
MSG(aggregation_rule, "AggregationRule",
    {1, "clusterRoleSelectors", PB_MSG, true, &label_selector});
MSG(role_msg, "Role", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "rules", PB_MSG, true, &policy_rule});
MSG(cluster_role_msg, "ClusterRole", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "rules", PB_MSG, true, &policy_rule},
    {3, "aggregationRule", PB_MSG, false, &aggregation_rule});
MSG(subject, "Subject", {1, "kind", PB_STRING, false, NULL},
    {2, "apiGroup", PB_STRING, false, NULL}, {3, "name", PB_STRING, false, NULL},
    {4, "namespace", PB_STRING, false, NULL});
MSG(role_ref, "RoleRef", {1, "apiGroup", PB_STRING, false, NULL},
    {2, "kind", PB_STRING, false, NULL}, {3, "name", PB_STRING, false, NULL});
MSG(role_binding_msg, "RoleBinding", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "subjects", PB_MSG, true, &subject}, {3, "roleRef", PB_MSG, false, &role_ref});
MSG(cluster_role_binding_msg, "ClusterRoleBinding", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "subjects", PB_MSG, true, &subject}, {3, "roleRef", PB_MSG, false, &role_ref});

MSG(bound_ref, "BoundObjectReference", {1, "kind", PB_STRING, false, NULL},
    {2, "apiVersion", PB_STRING, false, NULL}, {3, "name", PB_STRING, false, NULL},
    {4, "uid", PB_STRING, false, NULL});
MSG(token_spec, "TokenRequestSpec", {1, "audiences", PB_STRING, true, NULL},
    {3, "boundObjectRef", PB_MSG, false, &bound_ref},
    {4, "expirationSeconds", PB_INT, false, NULL});
MSG(token_status, "TokenRequestStatus", {1, "token", PB_STRING, false, NULL},
    {2, "expirationTimestamp", PB_TIME, false, NULL});
MSG(token_request_msg, "TokenRequest", {1, "metadata", PB_MSG, false, &object_meta},
    {2, "spec", PB_MSG, false, &token_spec}, {3, "status", PB_MSG, false, &token_status});

static const struct {
    const char *api_version;
    const char *kind;
    const pb_msg *msg;
} kinds[] = {
    {"v1", "Namespace", &namespace_msg},
    {"v1", "Secret", &secret_msg},
    {"v1", "ConfigMap", &configmap_msg},
    {"v1", "ServiceAccount", &service_account_msg},
    {"rbac.authorization.k8s.io/v1", "Role", &role_msg},
    {"rbac.authorization.k8s.io/v1", "ClusterRole", &cluster_role_msg},
    {"rbac.authorization.k8s.io/v1", "RoleBinding", &role_binding_msg},
    {"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", &cluster_role_binding_msg},
    {"authentication.k8s.io/v1", "TokenRequest", &token_request_msg},
};

/* ---- wire reading ------------------------------------------------------------------ */

typedef struct rd {
    const uint8_t *p;
    size_t left;
} rd;

static int rd_varint(rd *r, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (r->left == 0)
            return util_err_set(-EINVAL, "truncated varint");
        uint8_t b = *r->p++;
        r->left--;
        if (shift == 63 && b > 1)
            return util_err_set(-EINVAL, "varint overflows 64 bits");
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return util_err_set(-EINVAL, "varint longer than 10 bytes");
}

/* One field's key and, for length-delimited values, its bytes. */
typedef struct pb_val {
    uint32_t num;
    unsigned wire;
    uint64_t u; /* varint */
    const uint8_t *data;
    size_t len;
} pb_val;

static int rd_field(rd *r, pb_val *v)
{
    memset(v, 0, sizeof(*v));
    uint64_t key = 0;
    int rc = rd_varint(r, &key);
    if (rc < 0)
        return rc;
    v->num = (uint32_t)(key >> 3);
    v->wire = (unsigned)(key & 7);
    if (key >> 3 == 0 || key >> 3 > 536870911)
        return util_err_set(-EINVAL, "invalid field number %llu", (unsigned long long)(key >> 3));
    switch (v->wire) {
    case 0:
        return rd_varint(r, &v->u);
    case 1:
    case 5: {
        size_t n = v->wire == 1 ? 8 : 4;
        if (r->left < n)
            return util_err_set(-EINVAL, "truncated fixed-width field %u", v->num);
        r->p += n;
        r->left -= n;
        return 0;
    }
    case 2: {
        uint64_t len = 0;
        rc = rd_varint(r, &len);
        if (rc < 0)
            return rc;
        if (len > r->left)
            return util_err_set(-EINVAL, "field %u: length %llu beyond the message", v->num,
                                (unsigned long long)len);
        v->data = r->p;
        v->len = (size_t)len;
        r->p += len;
        r->left -= (size_t)len;
        return 0;
    }
    default:
        return util_err_set(-EINVAL, "field %u: unsupported wire type %u", v->num, v->wire);
    }
}

/* ---- conversion to JSON ---------------------------------------------------------------- */

static int decode_msg(const pb_msg *m, const uint8_t *p, size_t len, int depth, json_object **out);

static json_object *base64(const uint8_t *p, size_t len)
{
    size_t cap = 4 * ((len + 2) / 3) + 1;
    char *b = util_calloc(cap, 1);
    int n = len ? EVP_EncodeBlock((unsigned char *)b, p, (int)len) : 0;
    json_object *s = json_object_new_string_len(b, n < 0 ? 0 : n);
    free(b);
    return s;
}

static int decode_time(const uint8_t *p, size_t len, json_object **out)
{
    rd r = {p, len};
    int64_t secs = 0;
    while (r.left) {
        pb_val v = {0};
        int rc = rd_field(&r, &v);
        if (rc < 0)
            return rc;
        if (v.num == 1 && v.wire == 0)
            secs = (int64_t)v.u;
        else if (v.num <= 2 && v.wire != 0)
            return util_err_set(-EINVAL, "Time: field %u has wire type %u", v.num, v.wire);
    }
    *out = NULL;
    if (secs == 0)
        return 0;
    /* A time before year 0 or after 9999 cannot be written as RFC 3339. */
    if (secs < -62135596800LL || secs > 253402300799LL)
        return util_err_set(-EINVAL, "Time: seconds %lld out of range", (long long)secs);
    time_t t = (time_t)secs;
    struct tm tm;
    char buf[32];
    gmtime_r(&t, &tm);
    strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
    *out = json_object_new_string(buf);
    return 0;
}

static int decode_map_entry(const pb_val *v, bool bytes, json_object *map)
{
    rd r = {v->data, v->len};
    const uint8_t *k = NULL, *val = NULL;
    size_t klen = 0, vlen = 0;
    while (r.left) {
        pb_val e = {0};
        int rc = rd_field(&r, &e);
        if (rc < 0)
            return rc;
        if ((e.num == 1 || e.num == 2) && e.wire != 2)
            return util_err_set(-EINVAL, "map entry: field %u has wire type %u", e.num, e.wire);
        if (e.num == 1) {
            k = e.data;
            klen = e.len;
        } else if (e.num == 2) {
            val = e.data;
            vlen = e.len;
        }
    }
    /* Keys are C strings in json-c: one with a NUL byte is refused. */
    if (k && memchr(k, '\0', klen))
        return util_err_set(-EINVAL, "map key with a NUL byte");
    char *key = util_calloc(klen + 1, 1);
    if (k && klen)
        memcpy(key, k, klen);
    json_object *jv = bytes ? base64(val, vlen)
                            : json_object_new_string_len(val ? (const char *)val : "", (int)vlen);
    json_object_object_add(map, key, jv);
    free(key);
    return 0;
}

static const pb_field *field_of(const pb_msg *m, uint32_t num)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->fields[i].num == num)
            return &m->fields[i];
    return NULL;
}

static unsigned wire_of(pb_kind k)
{
    return k == PB_INT || k == PB_INT_NZ || k == PB_BOOL ? 0 : 2;
}

/* The container a field's values go into, created on first use. */
static json_object *slot(json_object *obj, const pb_field *f, json_type t)
{
    json_object *cur = kobj_get(obj, f->json);
    if (!cur || !json_object_is_type(cur, t)) {
        cur = t == json_type_array ? json_object_new_array() : json_object_new_object();
        json_object_object_add(obj, f->json, cur);
    }
    return cur;
}

static int decode_field(const pb_field *f, const pb_val *v, int depth, json_object *obj)
{
    json_object *val = NULL;
    int rc = 0;
    switch (f->kind) {
    case PB_STRING:
        if (v->len > INT32_MAX)
            return util_err_set(-EINVAL, "%s: string too long", f->json);
        if (!f->repeated && v->len == 0) {
            json_object_object_del(obj, f->json); /* last one wins, empty = unset */
            return 0;
        }
        val = json_object_new_string_len((const char *)v->data, (int)v->len);
        break;
    case PB_BYTES:
        val = base64(v->data, v->len);
        break;
    case PB_INT:
    case PB_INT_NZ:
        if (f->kind == PB_INT_NZ && v->u == 0)
            return 0;
        val = json_object_new_int64((int64_t)v->u);
        break;
    case PB_BOOL:
        val = json_object_new_boolean(v->u != 0);
        break;
    case PB_TIME:
        rc = decode_time(v->data, v->len, &val);
        if (rc < 0)
            return rc;
        if (!val)
            return 0;
        break;
    case PB_MAP_STR:
    case PB_MAP_BYTES:
        return decode_map_entry(v, f->kind == PB_MAP_BYTES, slot(obj, f, json_type_object));
    case PB_MSG:
    default:
        rc = decode_msg(f->msg, v->data, v->len, depth + 1, &val);
        if (rc < 0)
            return rc;
        break;
    }
    if (f->repeated)
        json_object_array_add(slot(obj, f, json_type_array), val);
    else
        json_object_object_add(obj, f->json, val);
    return 0;
}

static int decode_msg(const pb_msg *m, const uint8_t *p, size_t len, int depth, json_object **out)
{
    *out = NULL;
    if (depth > MAX_DEPTH)
        return util_err_set(-EINVAL, "messages nested deeper than %d", MAX_DEPTH);
    json_object *obj = json_object_new_object();
    rd r = {p, len};
    while (r.left) {
        pb_val v = {0};
        int rc = rd_field(&r, &v);
        const pb_field *f = rc == 0 ? field_of(m, v.num) : NULL;
        if (rc == 0 && f && v.wire != wire_of(f->kind))
            rc = util_err_set(-EINVAL, "%s.%s: wire type %u, want %u", m->name, f->json, v.wire,
                              wire_of(f->kind));
        if (rc == 0 && f)
            rc = decode_field(f, &v, depth, obj);
        if (rc < 0) {
            json_object_put(obj);
            return rc;
        }
    }
    *out = obj;
    return 0;
}

/* ---- envelope -------------------------------------------------------------------------- */

static char *dup_len(const uint8_t *p, size_t len)
{
    char *s = util_calloc(len + 1, 1);
    if (len)
        memcpy(s, p, len);
    return s;
}

int kl_proto_decode(const void *body, size_t len, const char *dflt_api_version,
                    const char *dflt_kind, json_object **out)
{
    static const uint8_t magic[4] = {'k', '8', 's', 0};
    *out = NULL;
    if (len < 4 || memcmp(body, magic, 4) != 0)
        return util_err_set(-EINVAL, "protobuf body without the k8s magic prefix");
    rd r = {(const uint8_t *)body + 4, len - 4};
    const uint8_t *raw = NULL;
    size_t raw_len = 0;
    char *api_version = NULL, *kind = NULL;
    int rc = 0;
    while (rc == 0 && r.left) {
        pb_val v = {0};
        rc = rd_field(&r, &v);
        if (rc < 0)
            break;
        if (v.num >= 1 && v.num <= 4 && v.wire != 2) {
            rc = util_err_set(-EINVAL, "Unknown: field %u has wire type %u", v.num, v.wire);
        } else if (v.num == 1) {
            rd t = {v.data, v.len};
            while (rc == 0 && t.left) {
                pb_val tv = {0};
                rc = rd_field(&t, &tv);
                if (rc == 0 && (tv.num == 1 || tv.num == 2) && tv.wire != 2)
                    rc = util_err_set(-EINVAL, "TypeMeta: field %u has wire type %u", tv.num,
                                      tv.wire);
                else if (rc == 0 && tv.num == 1) {
                    free(api_version);
                    api_version = dup_len(tv.data, tv.len);
                } else if (rc == 0 && tv.num == 2) {
                    free(kind);
                    kind = dup_len(tv.data, tv.len);
                }
            }
        } else if (v.num == 2) {
            raw = v.data;
            raw_len = v.len;
        } else if (v.num == 3 && v.len > 0) {
            rc = util_err_set(-EINVAL, "content encoding %.*s is not supported", (int)v.len,
                              (const char *)v.data);
        }
    }
    /* An envelope without a type is read as the type the URL names, as
     * kube-apiserver decodes into the endpoint's kind. */
    if (rc == 0 && (!api_version || !*api_version) && (!kind || !*kind) && dflt_api_version &&
        dflt_kind) {
        free(api_version);
        free(kind);
        api_version = util_strdup(dflt_api_version);
        kind = util_strdup(dflt_kind);
    }
    const pb_msg *m = NULL;
    for (size_t i = 0; rc == 0 && i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (api_version && kind && strcmp(kinds[i].api_version, api_version) == 0 &&
            strcmp(kinds[i].kind, kind) == 0)
            m = kinds[i].msg;
    if (rc == 0 && !m)
        rc = util_err_set(-ENOTSUP, "no protobuf decoding for %s %s here; send JSON",
                          api_version && *api_version ? api_version : "(no apiVersion)",
                          kind && *kind ? kind : "(no kind)");
    json_object *obj = NULL;
    if (rc == 0)
        rc = decode_msg(m, raw, raw_len, 0, &obj);
    if (rc == 0) {
        json_object_object_add(obj, "apiVersion", json_object_new_string(api_version));
        json_object_object_add(obj, "kind", json_object_new_string(kind));
        *out = obj;
    }
    free(api_version);
    free(kind);
    return rc;
}
