/*
 * Protobuf to JSON (`application/vnd.kubernetes.protobuf` request bodies):
 * the 4 bytes "k8s\0", then a runtime.Unknown {typeMeta = 1 {apiVersion = 1,
 * kind = 2}, raw = 2, contentEncoding = 3, contentType = 4} whose raw is the
 * object's message.
 *
 * One generic decoder walks the generated tables (proto_tables.c). The JSON
 * it builds is what encoding/json makes of the Go struct the generated
 * unmarshaller would fill: members in Go declaration order; an omitempty
 * scalar left out when zero, a plain one written zero; a pointer left out
 * (omitempty) or null when the wire did not carry it; a non-pointer struct
 * always written, filled with its own zero values; an empty list or map
 * left out or null; map keys sorted; inline structs' members in the parent.
 * The wire is proto2: a repeated number may come packed or not; a message
 * field seen twice merges; a scalar seen twice keeps the last.
 *
 * Every varint and length is bounds-checked, nesting is limited, a known
 * field with the wrong wire type is an error and unknown fields are skipped
 * (as kube-apiserver's decoder does); a budget caps how many JSON values one
 * body may expand into (an empty message can stand for a whole struct).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define MAX_DEPTH  32
#define MAX_VALUES (1u << 20)
/* 0001-01-01T00:00:00Z: time.Unix of these seconds is Go's zero time. */
#define YEAR1_SECS (-62135596800LL)

typedef struct rd {
    const uint8_t *p;
    size_t left;
} rd;

/* One field's key and its varint or length-delimited bytes. */
typedef struct pb_val {
    uint32_t num;
    unsigned wire;
    uint64_t u;
    const uint8_t *data;
    size_t len;
} pb_val;

typedef struct dctx {
    size_t budget; /* JSON values still allowed */
} dctx;

/* ---- wire reading ------------------------------------------------------------------ */

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

static int rd_field(rd *r, pb_val *v)
{
    memset(v, 0, sizeof(*v));
    uint64_t key = 0;
    int rc = rd_varint(r, &key);
    if (rc < 0)
        return rc;
    if (key >> 3 == 0 || key >> 3 > 536870911)
        return util_err_set(-EINVAL, "invalid field number %llu", (unsigned long long)(key >> 3));
    v->num = (uint32_t)(key >> 3);
    v->wire = (unsigned)(key & 7);
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

static const kl_pb_field *field_of(const kl_pb_msg *m, uint32_t num)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const kl_pb_field *f = &kl_pb_fields[m->first + mid];
        if (f->num == num)
            return f;
        if (f->num < num)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static bool varint_kind(uint8_t kind)
{
    return kind == KL_PB_BOOL || kind == KL_PB_INT32 || kind == KL_PB_INT64;
}

static int spend(dctx *c)
{
    if (c->budget == 0)
        return util_err_set(-E2BIG, "the message expands into more than %u values", MAX_VALUES);
    c->budget--;
    return 0;
}

/* ---- scalar values ----------------------------------------------------------------- */

/* The length of the valid UTF-8 sequence at p[0..len), 0 when invalid
 * (overlong forms, surrogates and values past U+10FFFF included). */
static size_t utf8_seq(const uint8_t *p, size_t len)
{
    uint8_t b = p[0];
    size_t n = b < 0x80             ? 1
               : (b & 0xe0) == 0xc0 ? 2
               : (b & 0xf0) == 0xe0 ? 3
               : (b & 0xf8) == 0xf0 ? 4
                                    : 0;
    if (n == 0 || n > len)
        return 0;
    uint32_t cp = n == 1 ? b : (uint32_t)(b & (0x7f >> n));
    for (size_t k = 1; k < n; k++) {
        if ((p[k] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[k] & 0x3f);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return n;
}

/* A string as encoding/json writes it: each invalid byte becomes U+FFFD. */
static json_object *utf8_string(const uint8_t *p, size_t len)
{
    size_t i = 0, n = 0;
    while (i < len && (n = utf8_seq(p + i, len - i)) > 0)
        i += n;
    if (i == len)
        return json_object_new_string_len((const char *)p, (int)len);
    char *fixed = util_calloc(len * 3 + 1, 1);
    memcpy(fixed, p, i);
    size_t o = i;
    while (i < len) {
        n = utf8_seq(p + i, len - i);
        if (n) {
            memcpy(fixed + o, p + i, n);
            o += n;
            i += n;
        } else {
            static const uint8_t replacement[] = {0xef, 0xbf, 0xbd};
            memcpy(fixed + o, replacement, sizeof(replacement));
            o += sizeof(replacement);
            i++;
        }
    }
    json_object *s = json_object_new_string_len(fixed, (int)o);
    free(fixed);
    return s;
}

static int time_value(const pb_val *v, bool micro, json_object **out)
{
    *out = NULL;
    if (v->len == 0)
        return 0; /* the zero time: null */
    rd r = {v->data, v->len};
    int64_t secs = 0;
    int64_t nanos = 0;
    while (r.left) {
        pb_val e;
        int rc = rd_field(&r, &e);
        if (rc < 0)
            return rc;
        if ((e.num == 1 || e.num == 2) && e.wire != 0)
            return util_err_set(-EINVAL, "Time: field %u has wire type %u", e.num, e.wire);
        if (e.num == 1)
            secs = (int64_t)e.u;
        else if (e.num == 2)
            nanos = (int32_t)(uint32_t)e.u;
    }
    /* metav1.Time keeps whole seconds (its JSON never had more). */
    if (!micro)
        nanos = 0;
    /* Far outside what RFC 3339 can write (checked exactly below); keeps
     * the normalization from overflowing. */
    if (secs < YEAR1_SECS * 2 || secs > -YEAR1_SECS * 5)
        return util_err_set(-EINVAL, "Time: seconds %lld out of range", (long long)secs);
    secs += nanos / 1000000000;
    nanos %= 1000000000;
    if (nanos < 0) {
        nanos += 1000000000;
        secs--;
    }
    if (secs == YEAR1_SECS && nanos == 0)
        return 0;
    char buf[40];
    int rc = kl_pb_time_format(secs, (int32_t)nanos, micro, buf, sizeof(buf));
    if (rc < 0)
        return rc;
    *out = json_object_new_string(buf);
    return 0;
}

/* Fields 1..n of a small message (Quantity, IntOrString, RawExtension,
 * FieldsV1) into got[0..n), each with its wire type checked, the last
 * occurrence winning; got[i].num is 0 for a field the wire did not carry. */
static int small_fields(const pb_val *v, const char *what, const unsigned *wires, pb_val *got,
                        size_t n)
{
    rd r = {v->data, v->len};
    for (size_t i = 0; i < n; i++)
        got[i].num = 0;
    while (r.left) {
        pb_val e;
        int rc = rd_field(&r, &e);
        if (rc < 0)
            return rc;
        if (e.num > n)
            continue;
        if (e.wire != wires[e.num - 1])
            return util_err_set(-EINVAL, "%s: field %u has wire type %u", what, e.num, e.wire);
        got[e.num - 1] = e;
    }
    return 0;
}

static int quantity_value(const pb_val *v, json_object **out)
{
    static const unsigned wires[] = {2};
    pb_val s;
    int rc = small_fields(v, "Quantity", wires, &s, 1);
    if (rc < 0)
        return rc;
    if (!s.num) {
        *out = json_object_new_string("0");
        return 0;
    }
    /* Kept as written: Go clients send the canonical form already, and
     * kube-lite keeps quantities as their JSON clients wrote them. What Go's
     * decoder cannot parse is refused, as there. */
    char *text = util_calloc(s.len + 1, 1);
    memcpy(text, s.data, s.len);
    int64_t ignored = 0;
    rc = strlen(text) == s.len ? util_quantity_parse(text, &ignored)
                               : util_err_set(-EINVAL, "quantity with a NUL byte");
    if (rc == 0)
        *out = json_object_new_string(text);
    free(text);
    return rc < 0 ? -EINVAL : 0;
}

static int intorstr_value(const pb_val *v, json_object **out)
{
    static const unsigned wires[] = {0, 0, 2};
    pb_val f[3];
    int rc = small_fields(v, "IntOrString", wires, f, 3);
    if (rc < 0)
        return rc;
    uint64_t type = f[0].num ? f[0].u : 0;
    if (type == 0)
        *out = json_object_new_int((int32_t)(uint32_t)(f[1].num ? f[1].u : 0));
    else if (type == 1)
        *out = f[2].num ? utf8_string(f[2].data, f[2].len) : json_object_new_string("");
    else
        return util_err_set(-EINVAL, "impossible IntOrString.Type %llu", (unsigned long long)type);
    return 0;
}

/* RawExtension and FieldsV1: their bytes are JSON text, written as is. */
static int raw_json_value(const pb_val *v, const char *what, json_object **out)
{
    static const unsigned wires[] = {2};
    pb_val raw;
    *out = NULL;
    int rc = small_fields(v, what, wires, &raw, 1);
    if (rc < 0 || !raw.num)
        return rc;
    size_t used = 0;
    rc = kobj_parse((const char *)raw.data, raw.len, &used, out);
    while (rc == 0 && used < raw.len &&
           (raw.data[used] == ' ' || raw.data[used] == '\t' || raw.data[used] == '\r' ||
            raw.data[used] == '\n'))
        used++;
    if (rc == 0 && used != raw.len) {
        json_object_put(*out);
        *out = NULL;
        rc = -EINVAL;
    }
    if (rc < 0)
        return util_err_set(-EINVAL, "%s: raw is not JSON", what);
    return 0;
}

/* ---- messages ------------------------------------------------------------------------ */

static int decode_fields(dctx *c, const kl_pb_msg *m, const uint8_t *p, size_t len, int depth,
                         json_object *obj);
static int finish(dctx *c, const kl_pb_msg *m, json_object *raw, int depth, json_object **out);

/* One value of kind `f->kind` from its wire form (a varint or bytes). */
static int decode_value(dctx *c, const kl_pb_field *f, const pb_val *v, int depth,
                        json_object **out)
{
    *out = NULL;
    int rc = spend(c);
    if (rc < 0)
        return rc;
    switch (f->kind) {
    case KL_PB_STRING:
        if (v->len > INT32_MAX / 4)
            return util_err_set(-EINVAL, "%s: string too long", f->json);
        *out = utf8_string(v->data, v->len);
        return 0;
    case KL_PB_BYTES: {
        size_t n = 0;
        char *s = kl_pb_base64(v->data, v->len, &n);
        *out = json_object_new_string_len(s, (int)n);
        free(s);
        return 0;
    }
    case KL_PB_BOOL:
        *out = json_object_new_boolean(v->u != 0);
        return 0;
    case KL_PB_INT32:
        *out = json_object_new_int((int32_t)(uint32_t)v->u);
        return 0;
    case KL_PB_INT64:
        *out = json_object_new_int64((int64_t)v->u);
        return 0;
    case KL_PB_TIME:
    case KL_PB_MICROTIME:
        return time_value(v, f->kind == KL_PB_MICROTIME, out);
    case KL_PB_QUANTITY:
        return quantity_value(v, out);
    case KL_PB_INTORSTR:
        return intorstr_value(v, out);
    case KL_PB_RAWEXT:
        return raw_json_value(v, "RawExtension", out);
    case KL_PB_FIELDSV1:
        return raw_json_value(v, "FieldsV1", out);
    default: {
        const kl_pb_msg *sub = &kl_pb_msgs[f->msg];
        json_object *raw = json_object_new_object();
        rc = decode_fields(c, sub, v->data, v->len, depth + 1, raw);
        if (rc == 0)
            rc = finish(c, sub, raw, depth + 1, out);
        json_object_put(raw);
        return rc;
    }
    }
}

/* The container a repeated or map field's values go into. */
static json_object *slot(json_object *obj, const kl_pb_field *f, json_type t)
{
    json_object *cur = kobj_get(obj, f->json);
    if (!cur || !json_object_is_type(cur, t)) {
        cur = t == json_type_array ? json_object_new_array() : json_object_new_object();
        json_object_object_add(obj, f->json, cur);
    }
    return cur;
}

static int decode_map_entry(dctx *c, const kl_pb_field *f, const pb_val *v, int depth,
                            json_object *obj)
{
    rd r = {v->data, v->len};
    pb_val key = {0}, val = {0};
    bool have_val = false;
    unsigned vwire = varint_kind(f->kind) ? 0 : 2;
    while (r.left) {
        pb_val e;
        int rc = rd_field(&r, &e);
        if (rc < 0)
            return rc;
        if ((e.num == 1 && e.wire != 2) || (e.num == 2 && e.wire != vwire))
            return util_err_set(-EINVAL, "%s: map entry field %u has wire type %u", f->json, e.num,
                                e.wire);
        if (e.num == 1)
            key = e;
        else if (e.num == 2) {
            val = e;
            have_val = true;
        }
    }
    /* Keys are C strings in json-c: one with a NUL byte is refused. */
    if (key.len && memchr(key.data, '\0', key.len))
        return util_err_set(-EINVAL, "%s: map key with a NUL byte", f->json);
    json_object *k = utf8_string(key.data ? key.data : (const uint8_t *)"", key.len);
    json_object *jv = NULL;
    int rc = 0;
    if (have_val) {
        rc = decode_value(c, f, &val, depth, &jv);
    } else {
        pb_val empty = {.num = 2, .wire = vwire, .data = (const uint8_t *)"", .len = 0};
        rc = decode_value(c, f, &empty, depth, &jv);
    }
    if (rc == 0)
        json_object_object_add(slot(obj, f, json_type_object), json_object_get_string(k), jv);
    json_object_put(k);
    return rc;
}

static int decode_field(dctx *c, const kl_pb_msg *m, const kl_pb_field *f, const pb_val *v,
                        int depth, json_object *obj)
{
    bool packed = varint_kind(f->kind) && (f->flags & KL_PBF_REPEATED) && v->wire == 2;
    unsigned want = varint_kind(f->kind) && !(f->flags & KL_PBF_MAP) ? 0 : 2;
    if (v->wire != want && !packed)
        return util_err_set(-EINVAL, "%s.%s: wire type %u, want %u", m->name, f->json, v->wire,
                            want);
    if (f->flags & KL_PBF_MAP)
        return decode_map_entry(c, f, v, depth, obj);
    if (f->flags & KL_PBF_INLINE)
        return decode_fields(c, &kl_pb_msgs[f->msg], v->data, v->len, depth + 1, obj);
    if (packed) {
        rd r = {v->data, v->len};
        json_object *arr = slot(obj, f, json_type_array);
        while (r.left) {
            pb_val e = {.num = v->num, .wire = 0};
            json_object *jv = NULL;
            int rc = rd_varint(&r, &e.u);
            if (rc == 0)
                rc = decode_value(c, f, &e, depth, &jv);
            if (rc < 0)
                return rc;
            json_object_array_add(arr, jv);
        }
        return 0;
    }
    if (f->flags & KL_PBF_REPEATED) {
        json_object *jv = NULL;
        int rc = decode_value(c, f, v, depth, &jv);
        if (rc == 0)
            json_object_array_add(slot(obj, f, json_type_array), jv);
        return rc;
    }
    if (f->kind == KL_PB_MSG) {
        /* A message seen again merges into what came before. */
        const kl_pb_msg *sub = &kl_pb_msgs[f->msg];
        json_object *prev = kobj_obj(obj, f->json);
        json_object *raw = prev ? json_object_get(prev) : json_object_new_object();
        json_object *done = NULL;
        int rc = spend(c);
        if (rc == 0)
            rc = decode_fields(c, sub, v->data, v->len, depth + 1, raw);
        if (rc == 0)
            rc = finish(c, sub, raw, depth + 1, &done);
        json_object_put(raw);
        if (rc == 0)
            json_object_object_add(obj, f->json, done);
        return rc;
    }
    json_object *jv = NULL;
    int rc = decode_value(c, f, v, depth, &jv);
    if (rc == 0)
        json_object_object_add(obj, f->json, jv);
    return rc;
}

static int decode_fields(dctx *c, const kl_pb_msg *m, const uint8_t *p, size_t len, int depth,
                         json_object *obj)
{
    if (depth > MAX_DEPTH)
        return util_err_set(-EINVAL, "messages nested deeper than %d", MAX_DEPTH);
    rd r = {p, len};
    while (r.left) {
        pb_val v;
        int rc = rd_field(&r, &v);
        if (rc < 0)
            return rc;
        const kl_pb_field *f = field_of(m, v.num);
        if (f)
            rc = decode_field(c, m, f, &v, depth, obj);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- JSON shape ---------------------------------------------------------------------- */

static bool zero_scalar(uint8_t kind, const json_object *v)
{
    switch (kind) {
    case KL_PB_STRING:
    case KL_PB_BYTES:
        return json_object_get_string_len(v) == 0;
    case KL_PB_BOOL:
        return !json_object_get_boolean(v);
    case KL_PB_INT32:
    case KL_PB_INT64:
        return json_object_get_int64(v) == 0;
    case KL_PB_TIME:
    case KL_PB_MICROTIME:
        return v == NULL;
    default:
        return false;
    }
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* encoding/json writes map keys sorted. */
static json_object *sorted_map(json_object *m)
{
    size_t n = (size_t)json_object_object_length(m), i = 0;
    const char **keys = util_calloc(n ? n : 1, sizeof(*keys));
    json_object_object_foreach(m, k, v)
    {
        (void)v;
        keys[i++] = k;
    }
    qsort(keys, n, sizeof(*keys), cmp_keys);
    json_object *out = json_object_new_object();
    for (i = 0; i < n; i++)
        json_object_object_add(out, keys[i], json_object_get(json_object_object_get(m, keys[i])));
    free(keys);
    return out;
}

/* What encoding/json writes for field `f` absent from the wire: *add false
 * when nothing. */
static int zero_value(dctx *c, const kl_pb_field *f, int depth, json_object **out, bool *add)
{
    bool omit = (f->flags & (KL_PBF_OMITEMPTY | KL_PBF_OMITZERO)) != 0;
    *out = NULL;
    *add = true;
    if (f->flags & KL_PBF_GONE) {
        *add = false;
        return 0;
    }
    if (f->flags & (KL_PBF_REPEATED | KL_PBF_MAP | KL_PBF_PTR)) {
        *add = !(f->flags & KL_PBF_OMITEMPTY);
        return 0;
    }
    switch (f->kind) {
    case KL_PB_STRING:
        *add = !omit;
        *out = *add ? json_object_new_string("") : NULL;
        return 0;
    case KL_PB_BOOL:
        *add = !omit;
        *out = *add ? json_object_new_boolean(0) : NULL;
        return 0;
    case KL_PB_INT32:
    case KL_PB_INT64:
        *add = !omit;
        *out = *add ? json_object_new_int(0) : NULL;
        return 0;
    case KL_PB_BYTES:
        *add = !(f->flags & KL_PBF_OMITEMPTY);
        return 0;
    case KL_PB_TIME:
    case KL_PB_MICROTIME:
        *add = !(f->flags & KL_PBF_OMITZERO);
        return 0;
    case KL_PB_QUANTITY:
        *out = json_object_new_string("0");
        return 0;
    case KL_PB_INTORSTR:
        *out = json_object_new_int(0);
        return 0;
    case KL_PB_RAWEXT:
    case KL_PB_FIELDSV1:
        return 0;
    default: {
        json_object *raw = json_object_new_object();
        int rc = finish(c, &kl_pb_msgs[f->msg], raw, depth + 1, out);
        json_object_put(raw);
        return rc;
    }
    }
}

static int finish_into(dctx *c, const kl_pb_msg *m, json_object *raw, int depth, json_object *out)
{
    if (depth > MAX_DEPTH)
        return util_err_set(-EINVAL, "messages nested deeper than %d", MAX_DEPTH);
    for (size_t i = 0; i < m->n; i++) {
        const kl_pb_field *f = &kl_pb_fields[m->first + kl_pb_order[m->order + i]];
        if (f->flags & KL_PBF_INLINE) {
            int rc = finish_into(c, &kl_pb_msgs[f->msg], raw, depth + 1, out);
            if (rc < 0)
                return rc;
            continue;
        }
        json_object *v = NULL;
        bool present = json_object_object_get_ex(raw, f->json, &v);
        json_object *res = NULL;
        bool add = true;
        int rc = spend(c);
        if (rc < 0)
            return rc;
        if (f->flags & (KL_PBF_REPEATED | KL_PBF_MAP)) {
            /* From the wire a list or map is never present and empty. */
            if (present && v && (f->flags & KL_PBF_MAP))
                res = sorted_map(v);
            else if (present && v)
                res = json_object_get(v);
            else
                add = !(f->flags & KL_PBF_OMITEMPTY);
        } else if (present && (f->flags & KL_PBF_PTR)) {
            res = json_object_get(v);
        } else if (present) {
            bool omit = ((f->flags & KL_PBF_OMITEMPTY) || (f->flags & KL_PBF_OMITZERO)) &&
                        zero_scalar(f->kind, v);
            if (omit && (f->kind == KL_PB_TIME || f->kind == KL_PB_MICROTIME))
                omit = (f->flags & KL_PBF_OMITZERO) != 0;
            add = !omit;
            res = add ? json_object_get(v) : NULL;
        } else {
            rc = zero_value(c, f, depth, &res, &add);
            if (rc < 0)
                return rc;
        }
        if (add)
            json_object_object_add(out, f->json, res);
    }
    return 0;
}

static int finish(dctx *c, const kl_pb_msg *m, json_object *raw, int depth, json_object **out)
{
    *out = json_object_new_object();
    int rc = finish_into(c, m, raw, depth, *out);
    if (rc < 0) {
        json_object_put(*out);
        *out = NULL;
    }
    return rc;
}

/* ---- entry points ---------------------------------------------------------------------- */

static int decode_root(const kl_pb_msg *m, const char *api_version, const char *kind,
                       const uint8_t *p, size_t len, json_object **out)
{
    dctx c = {.budget = MAX_VALUES};
    json_object *raw = json_object_new_object();
    json_object *done = NULL;
    int rc = decode_fields(&c, m, p, len, 0, raw);
    if (rc == 0)
        rc = finish(&c, m, raw, 0, &done);
    json_object_put(raw);
    if (rc < 0)
        return rc;
    /* TypeMeta first, as the Go structs declare it. */
    json_object *obj = json_object_new_object();
    json_object_object_add(obj, "kind", json_object_new_string(kind));
    json_object_object_add(obj, "apiVersion", json_object_new_string(api_version));
    json_object_object_foreach(done, k, v)
    {
        json_object_object_add(obj, k, json_object_get(v));
    }
    json_object_put(done);
    *out = obj;
    return 0;
}

int kl_proto_msg_decode(const char *api_version, const char *kind, const void *msg, size_t len,
                        json_object **out)
{
    *out = NULL;
    const kl_pb_msg *m = kl_pb_root_msg(api_version, kind);
    if (!m)
        return util_err_set(-ENOTSUP, "no protobuf decoding for %s %s here; send JSON",
                            api_version && *api_version ? api_version : "(no apiVersion)",
                            kind && *kind ? kind : "(no kind)");
    return decode_root(m, api_version ? api_version : "", kind, msg, len, out);
}

static char *dup_len(const uint8_t *p, size_t len)
{
    char *s = util_calloc(len + 1, 1);
    if (len)
        memcpy(s, p, len);
    return s;
}

static int read_type_meta(const pb_val *v, char **api_version, char **kind)
{
    rd t = {v->data, v->len};
    while (t.left) {
        pb_val tv;
        int rc = rd_field(&t, &tv);
        if (rc < 0)
            return rc;
        if ((tv.num == 1 || tv.num == 2) && tv.wire != 2)
            return util_err_set(-EINVAL, "TypeMeta: field %u has wire type %u", tv.num, tv.wire);
        char **dst = tv.num == 1 ? api_version : tv.num == 2 ? kind : NULL;
        if (dst) {
            free(*dst);
            *dst = dup_len(tv.data, tv.len);
        }
    }
    return 0;
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
        pb_val v;
        rc = rd_field(&r, &v);
        if (rc < 0)
            break;
        if (v.num >= 1 && v.num <= 4 && v.wire != 2) {
            rc = util_err_set(-EINVAL, "Unknown: field %u has wire type %u", v.num, v.wire);
        } else if (v.num == 1) {
            rc = read_type_meta(&v, &api_version, &kind);
        } else if (v.num == 2) {
            raw = v.data;
            raw_len = v.len;
        } else if (v.num == 3 && v.len > 0) {
            rc = util_err_set(-EINVAL, "content encoding %.*s is not supported", (int)v.len,
                              (const char *)v.data);
        }
    }
    /* A type left out is the endpoint's, as kube-apiserver fills a partial
     * group/version/kind from the one the URL names. */
    if (rc == 0 && (!kind || !*kind) && dflt_kind) {
        free(kind);
        kind = util_strdup(dflt_kind);
    }
    if (rc == 0 && (!api_version || !*api_version) && dflt_api_version) {
        free(api_version);
        api_version = util_strdup(dflt_api_version);
    }
    if (rc == 0)
        rc = kl_proto_msg_decode(api_version, kind, raw ? raw : (const uint8_t *)"", raw_len, out);
    free(api_version);
    free(kind);
    return rc;
}

int kl_proto_watch_event_decode(const void *msg, size_t len, char **type, json_object **obj)
{
    *type = NULL;
    *obj = NULL;
    rd r = {msg, len};
    pb_val object = {0};
    while (r.left) {
        pb_val v;
        int rc = rd_field(&r, &v);
        if (rc == 0 && (v.num == 1 || v.num == 2) && v.wire != 2)
            rc = util_err_set(-EINVAL, "WatchEvent: field %u has wire type %u", v.num, v.wire);
        if (rc < 0) {
            free(*type);
            *type = NULL;
            return rc;
        }
        if (v.num == 1) {
            free(*type);
            *type = dup_len(v.data, v.len);
        } else if (v.num == 2) {
            object = v;
        }
    }
    static const unsigned wires[] = {2};
    pb_val raw = {0};
    int rc = object.num ? small_fields(&object, "RawExtension", wires, &raw, 1) : 0;
    if (rc == 0)
        rc = kl_proto_decode(raw.num ? raw.data : (const uint8_t *)"", raw.len, NULL, NULL, obj);
    if (rc < 0) {
        free(*type);
        *type = NULL;
    }
    return rc;
}
