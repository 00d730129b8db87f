/*
 * fuzz_kl_proto: kube-lite's protobuf encoding both ways.
 *
 * The input picks a mode by its first byte:
 *   'M' <i> bytes   the bare message of the i-th kind with tables;
 *   'J' <i> JSON    a JSON object typed as the i-th kind, encoded;
 *   'W' lines       a JSON watch stream turned into protobuf frames, each
 *                   frame's WatchEvent decoded back;
 *   anything else   a request body ("k8s\0" envelope), with the last byte
 *                   choosing the endpoint's default type as before.
 * Whatever decodes must be a fixed point: encoding it cannot fail, and
 * decoding that gives the same JSON (a null member counting as absent, as a
 * nil pointer written as null reads back nil). A decoded object of a served
 * kind then goes through the shape check and create validation, as a POST.
 */
#include "kube-lite/kl.h"

#include "kobj/kobj.h"

#include "fuzz.h"

static void validate(json_object *obj)
{
    const char *api = kobj_str(obj, "apiVersion");
    const char *kind = kobj_str(obj, "kind");
    if (api == NULL || kind == NULL)
        return;
    const char *slash = strchr(api, '/');
    char group[128] = "";
    if (slash != NULL && (size_t)(slash - api) < sizeof(group))
        memcpy(group, api, (size_t)(slash - api));
    const kl_type *t = kl_type_by_kind(group, kind);
    if (t == NULL || kl_check_shape(t, obj) != 0)
        return;
    kl_apply_defaults(t, obj);
    kl_errs *errs = kl_errs_new();
    if (errs == NULL)
        return;
    kl_validate_create(t, obj, errs);
    if (kl_errs_count(errs) > 0)
        json_object_put(kl_errs_status(errs, t, kobj_name(obj)));
    kl_errs_free(errs);
}

/* Equal, object members that are null counting as absent. */
static bool same(json_object *a, json_object *b)
{
    if (json_object_is_type(a, json_type_object) && json_object_is_type(b, json_type_object)) {
        json_object_object_foreach(a, k, v)
        {
            json_object *w = kobj_get(b, k);
            if ((v || w) && !same(v, w))
                return false;
        }
        json_object_object_foreach(b, k2, v2)
        {
            if (v2 && !kobj_get(a, k2))
                return false;
        }
        return true;
    }
    if (json_object_is_type(a, json_type_array) && json_object_is_type(b, json_type_array)) {
        size_t n = json_object_array_length(a);
        if (n != json_object_array_length(b))
            return false;
        for (size_t i = 0; i < n; i++)
            if (!same(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i)))
                return false;
        return true;
    }
    return json_object_equal(a, b) != 0;
}

/* A decoded object: encodes, and decodes again to itself. */
static void fixed_point(json_object *y)
{
    char *pb = NULL;
    size_t n = 0;
    if (kl_proto_encode(y, &pb, &n) != 0)
        abort();
    json_object *z = NULL;
    if (kl_proto_decode(pb, n, NULL, NULL, &z) != 0 || !same(y, z))
        abort();
    json_object_put(z);
    free(pb);
}

static const kl_pb_root *root_at(uint8_t i)
{
    return &kl_pb_roots[i % kl_pb_n_roots];
}

static void bare_message(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    const kl_pb_root *r = root_at(data[0]);
    json_object *y = NULL;
    if (kl_proto_msg_decode(r->api_version ? r->api_version : "", r->kind, data + 1, size - 1,
                            &y) == 0) {
        fixed_point(y);
        validate(y);
    }
    json_object_put(y);
}

static void from_json(const uint8_t *data, size_t size)
{
    if (size < 1)
        return;
    const kl_pb_root *r = root_at(data[0]);
    json_object *x = fuzz_json(data + 1, size - 1);
    if (!json_object_is_type(x, json_type_object)) {
        json_object_put(x);
        return;
    }
    json_object_object_add(x, "apiVersion",
                           json_object_new_string(r->api_version ? r->api_version : "v1"));
    json_object_object_add(x, "kind", json_object_new_string(r->kind));
    char *pb = NULL;
    size_t n = 0;
    if (kl_proto_encode(x, &pb, &n) != 0)
        abort();
    json_object *y = NULL;
    /* What JSON holds Go could not have parsed (a bad quantity, a year
     * out of range) may fail to decode; anything else comes back. */
    if (kl_proto_decode(pb, n, NULL, NULL, &y) == 0)
        fixed_point(y);
    json_object_put(y);
    json_object_put(x);
    free(pb);
}

static void watch_lines(const uint8_t *data, size_t size)
{
    char *out = NULL;
    size_t n = 0;
    if (kl_proto_watch_frames((const char *)data, size, &out, &n) != 0)
        return;
    for (size_t off = 0; off + 4 <= n;) {
        const uint8_t *p = (const uint8_t *)out + off;
        size_t len = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
        if (off + 4 + len > n)
            abort();
        char *type = NULL;
        json_object *obj = NULL;
        if (kl_proto_watch_event_decode(p + 4, len, &type, &obj) == 0)
            fixed_point(obj);
        free(type);
        json_object_put(obj);
        off += 4 + len;
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && data[0] == 'M') {
        bare_message(data + 1, size - 1);
        return 0;
    }
    if (size > 0 && data[0] == 'J') {
        from_json(data + 1, size - 1);
        return 0;
    }
    if (size > 0 && data[0] == 'W') {
        watch_lines(data + 1, size - 1);
        return 0;
    }
    static const char *const dflt[][2] = {{NULL, NULL}, {"v1", "Secret"}, {"v1", "ConfigMap"}};
    size_t which = size > 0 ? data[size - 1] % 3 : 0;
    json_object *out = NULL;
    if (kl_proto_decode(data, size, dflt[which][0], dflt[which][1], &out) == 0) {
        fixed_point(out);
        validate(out);
    }
    json_object_put(out);
    return 0;
}
