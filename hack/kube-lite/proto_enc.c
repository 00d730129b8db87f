/*
 * JSON to protobuf (responses and watch frames for clients that accept
 * `application/vnd.kubernetes.protobuf`), byte for byte as the generated Go
 * marshallers write the struct encoding/json would have filled from the
 * JSON: fields in number order; every non-pointer field written even when
 * zero (strings, numbers, bools, nested structs with their own zero
 * fields); pointers, []byte and raw JSON only when set; repeated scalars one
 * key per element (proto2, not packed); map entries sorted by key with both
 * key and value written. JSON members without a field are dropped, as a Go
 * struct drops them; a member of the wrong JSON type counts as absent.
 *
 * A nested message's length is known only after its body: the body is
 * written after a one-byte length slot, which grows (the body moved up) in
 * the rare case it needs more.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define MAX_DEPTH  64
#define YEAR1_SECS (-62135596800LL)

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static void wb_reserve(wbuf *b, size_t n)
{
    if (b->len + n <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    uint8_t *np = realloc(b->p, cap);
    if (!np)
        abort();
    b->p = np;
    b->cap = cap;
}

static void wb_bytes(wbuf *b, const void *p, size_t n)
{
    wb_reserve(b, n);
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p = (uint8_t)v;
}

static void wb_varint(wbuf *b, uint64_t v)
{
    wb_reserve(b, 10);
    put_varint(b->p + b->len, v);
    b->len += varint_len(v);
}

static void wb_key(wbuf *b, uint32_t num, unsigned wire)
{
    wb_varint(b, (uint64_t)num << 3 | wire);
}

static void wb_string(wbuf *b, uint32_t num, const char *s, size_t n)
{
    wb_key(b, num, 2);
    wb_varint(b, n);
    wb_bytes(b, s, n);
}

/* Opens a length-delimited field; wb_end closes it. */
static size_t wb_begin(wbuf *b, uint32_t num)
{
    wb_key(b, num, 2);
    wb_reserve(b, 1);
    b->p[b->len++] = 0;
    return b->len;
}

static void wb_end(wbuf *b, size_t body)
{
    size_t n = b->len - body;
    size_t vl = varint_len(n);
    if (vl > 1) {
        wb_reserve(b, vl - 1);
        memmove(b->p + body + vl - 1, b->p + body, n);
        b->len += vl - 1;
    }
    put_varint(b->p + body - 1, n);
}

/* ---- values ---------------------------------------------------------------------------- */

static const char *jstr(const json_object *v, size_t *n)
{
    if (!kobj_typed(v, json_type_string)) {
        *n = 0;
        return "";
    }
    *n = (size_t)json_object_get_string_len(v);
    return json_object_get_string((json_object *)v);
}

static int64_t jint(const json_object *v)
{
    if (kobj_typed(v, json_type_int) || kobj_typed(v, json_type_double))
        return json_object_get_int64(v);
    return 0;
}

static void time_body(wbuf *b, const json_object *v, bool micro)
{
    int64_t secs = 0;
    int32_t nanos = 0;
    const char *s =
        kobj_typed(v, json_type_string) ? json_object_get_string((json_object *)v) : NULL;
    /* A time Go could not have parsed is its zero time: an empty message. */
    if (!s || kl_pb_time_parse(s, &secs, &nanos) < 0 || (secs == YEAR1_SECS && nanos == 0))
        return;
    wb_key(b, 1, 0);
    wb_varint(b, (uint64_t)secs);
    wb_key(b, 2, 0);
    /* metav1.Time writes whole seconds; MicroTime its nanoseconds, of which
     * its JSON (RFC3339Micro) can only have filled the microseconds. */
    wb_varint(b, micro ? (uint64_t)(nanos / 1000 * 1000) : 0);
}

static void quantity_body(wbuf *b, const json_object *v)
{
    if (kobj_typed(v, json_type_string)) {
        size_t n = 0;
        const char *s = jstr(v, &n);
        wb_string(b, 1, s, n);
    } else if (kobj_typed(v, json_type_int) || kobj_typed(v, json_type_double)) {
        /* A JSON number is a quantity too; its text is the string. */
        char *s = kobj_to_text(v, NULL);
        wb_string(b, 1, s, strlen(s));
        free(s);
    } else {
        wb_string(b, 1, "0", 1);
    }
}

static void intorstr_body(wbuf *b, const json_object *v)
{
    bool str = kobj_typed(v, json_type_string) != NULL;
    size_t n = 0;
    const char *s = str ? jstr(v, &n) : "";
    wb_key(b, 1, 0);
    wb_varint(b, str ? 1 : 0);
    wb_key(b, 2, 0);
    wb_varint(b, str ? 0 : (uint64_t)(int64_t)(int32_t)jint(v));
    wb_string(b, 3, s, n);
}

static int encode_msg(const kl_pb_msg *m, const json_object *obj, wbuf *b, int depth);

/* One value of field `f` as field number `num` (2 inside a map entry). */
static int encode_one(const kl_pb_field *f, uint32_t num, const json_object *v, wbuf *b, int depth)
{
    size_t n = 0, body = 0;
    const char *s = NULL;
    int rc = 0;
    switch (f->kind) {
    case KL_PB_STRING:
        s = jstr(v, &n);
        wb_string(b, num, s, n);
        return 0;
    case KL_PB_BYTES: {
        uint8_t *raw = NULL;
        size_t raw_len = 0;
        s = jstr(v, &n);
        if (kl_pb_unbase64(s, n, &raw, &raw_len) < 0)
            raw_len = 0;
        wb_key(b, num, 2);
        wb_varint(b, raw_len);
        wb_bytes(b, raw, raw_len);
        free(raw);
        return 0;
    }
    case KL_PB_BOOL:
        wb_key(b, num, 0);
        wb_varint(b, kobj_typed(v, json_type_boolean) && json_object_get_boolean(v) ? 1 : 0);
        return 0;
    case KL_PB_INT32:
        /* Go widens an int32 to 64 bits, sign and all, before the varint. */
        wb_key(b, num, 0);
        wb_varint(b, (uint64_t)(int64_t)(int32_t)jint(v));
        return 0;
    case KL_PB_INT64:
        wb_key(b, num, 0);
        wb_varint(b, (uint64_t)jint(v));
        return 0;
    default:
        break;
    }
    body = wb_begin(b, num);
    switch (f->kind) {
    case KL_PB_TIME:
    case KL_PB_MICROTIME:
        time_body(b, v, f->kind == KL_PB_MICROTIME);
        break;
    case KL_PB_QUANTITY:
        quantity_body(b, v);
        break;
    case KL_PB_INTORSTR:
        intorstr_body(b, v);
        break;
    case KL_PB_RAWEXT:
    case KL_PB_FIELDSV1:
        if (v) {
            char *text = kobj_to_text(v, &n);
            wb_string(b, 1, text, n);
            free(text);
        }
        break;
    default:
        rc = encode_msg(&kl_pb_msgs[f->msg], kobj_typed(v, json_type_object), b, depth + 1);
        break;
    }
    wb_end(b, body);
    return rc;
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int encode_map(const kl_pb_field *f, const json_object *map, wbuf *b, int depth)
{
    size_t n = (size_t)json_object_object_length((json_object *)map), i = 0;
    const char **keys = util_calloc(n ? n : 1, sizeof(*keys));
    json_object_object_foreach((json_object *)map, k, val)
    {
        (void)val;
        keys[i++] = k;
    }
    /* The generated marshallers sort the keys, so equal maps are equal bytes. */
    qsort(keys, n, sizeof(*keys), cmp_keys);
    int rc = 0;
    for (i = 0; i < n && rc == 0; i++) {
        size_t body = wb_begin(b, f->num);
        wb_string(b, 1, keys[i], strlen(keys[i]));
        json_object *v = kobj_get(map, keys[i]);
        /* A null []byte value is a nil slice: the entry carries the key only. */
        if (v || f->kind != KL_PB_BYTES)
            rc = encode_one(f, 2, v, b, depth);
        wb_end(b, body);
    }
    free(keys);
    return rc;
}

static int encode_msg(const kl_pb_msg *m, const json_object *obj, wbuf *b, int depth)
{
    if (depth > MAX_DEPTH)
        return util_err_set(-ELOOP, "objects nested deeper than %d", MAX_DEPTH);
    for (size_t i = 0; i < m->n; i++) {
        const kl_pb_field *f = &kl_pb_fields[m->first + i];
        int rc = 0;
        if (f->flags & KL_PBF_INLINE) {
            size_t body = wb_begin(b, f->num);
            rc = encode_msg(&kl_pb_msgs[f->msg], obj, b, depth + 1);
            wb_end(b, body);
            if (rc < 0)
                return rc;
            continue;
        }
        json_object *v = kobj_get(obj, f->json);
        if (f->flags & KL_PBF_MAP) {
            if (kobj_typed(v, json_type_object))
                rc = encode_map(f, v, b, depth);
        } else if (f->flags & KL_PBF_REPEATED) {
            for (size_t k = 0; kobj_typed(v, json_type_array) && k < kobj_len(v) && rc == 0; k++)
                rc = encode_one(f, f->num, json_object_array_get_idx(v, k), b, depth);
        } else if (v || !(f->flags & (KL_PBF_PTR | KL_PBF_GONE))) {
            /* A nil []byte and raw JSON that is null are not written. */
            bool nil = !v && (f->kind == KL_PB_BYTES);
            if (!nil)
                rc = encode_one(f, f->num, v, b, depth);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- envelopes and streams ---------------------------------------------------------------- */

static const kl_pb_msg *msg_of(const char *api_version, const char *kind)
{
    const kl_pb_msg *m = kl_pb_root_msg(api_version, kind);
    if (!m)
        util_err_set(-ENOTSUP, "no protobuf encoding for %s %s", api_version ? api_version : "",
                     kind ? kind : "(no kind)");
    return m;
}

/* "k8s\0" + runtime.Unknown as the Go serializer writes it: typeMeta, raw,
 * and the empty contentEncoding and contentType. */
static int envelope(wbuf *b, const json_object *obj)
{
    const char *api_version = kobj_str(obj, "apiVersion");
    const char *kind = kobj_str(obj, "kind");
    const kl_pb_msg *m = msg_of(api_version, kind);
    if (!m)
        return -ENOTSUP;
    wb_bytes(b, "k8s", 4);
    size_t tm = wb_begin(b, 1);
    wb_string(b, 1, api_version ? api_version : "", api_version ? strlen(api_version) : 0);
    wb_string(b, 2, kind, strlen(kind));
    wb_end(b, tm);
    size_t raw = wb_begin(b, 2);
    int rc = encode_msg(m, obj, b, 0);
    wb_end(b, raw);
    wb_string(b, 3, "", 0);
    wb_string(b, 4, "", 0);
    return rc;
}

static int finish_buf(wbuf *b, int rc, char **out, size_t *len)
{
    if (rc < 0) {
        free(b->p);
        *out = NULL;
        *len = 0;
        return rc;
    }
    wb_reserve(b, 1);
    *out = (char *)b->p;
    *len = b->len;
    return 0;
}

int kl_proto_encode(const json_object *obj, char **out, size_t *len)
{
    wbuf b = {0};
    return finish_buf(&b, envelope(&b, obj), out, len);
}

int kl_proto_msg_encode(const char *api_version, const char *kind, const json_object *obj,
                        char **out, size_t *len)
{
    const kl_pb_msg *m = msg_of(api_version, kind);
    wbuf b = {0};
    return finish_buf(&b, m ? encode_msg(m, obj, &b, 0) : -ENOTSUP, out, len);
}

int kl_proto_watch_frames(const char *lines, size_t len, char **out, size_t *out_len)
{
    wbuf b = {0};
    int rc = 0;
    for (size_t at = 0; at < len && rc == 0;) {
        const char *nl = memchr(lines + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (lines + at)) : len - at;
        json_object *ev = n ? kobj_parse_text(lines + at, n) : NULL;
        at += n + 1;
        if (!n)
            continue;
        if (!ev) {
            rc = util_err_set(-EINVAL, "watch event is not JSON: %s", util_err_last());
            break;
        }
        /* The frame: its length, then metav1.WatchEvent{type, object =
         * RawExtension{raw = the object's envelope}}. */
        size_t frame = b.len;
        wb_bytes(&b, "\0\0\0\0", 4);
        const char *type = kobj_str(ev, "type");
        wb_string(&b, 1, type ? type : "", type ? strlen(type) : 0);
        size_t object = wb_begin(&b, 2);
        size_t raw = wb_begin(&b, 1);
        rc = envelope(&b, kobj_obj(ev, "object"));
        wb_end(&b, raw);
        wb_end(&b, object);
        size_t flen = b.len - frame - 4;
        b.p[frame] = (uint8_t)(flen >> 24);
        b.p[frame + 1] = (uint8_t)(flen >> 16);
        b.p[frame + 2] = (uint8_t)(flen >> 8);
        b.p[frame + 3] = (uint8_t)flen;
        json_object_put(ev);
    }
    return finish_buf(&b, rc, out, out_len);
}
