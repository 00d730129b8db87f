/*
 * What the Bucket and BucketAccess decisions share: names, the driver
 * ownership test, resourceVersion order, error texts and the guarded merge
 * patches. Pure: no I/O, no clock, no global state.
 *
 * Patches are built as json-c trees and written by kobj_to_text, so no
 * value is ever pasted into JSON text by hand.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cosi/sidecar/cosisidecar.h"
#include "kobj/kobj.h"

/* ---- UTF-8 --------------------------------------------------------------------------------- */

/* ---- names --------------------------------------------------------------------------------- */

char *csc_lease_name(const char *driver)
{
    char *lock = util_asprintf("%s%s", driver ? driver : "", CSC_LOCK_SUFFIX);
    char *name = cosi_lease_name(lock);
    free(lock);
    return name;
}

static unsigned ascii_lower(unsigned r)
{
    return r >= 'A' && r <= 'Z' ? r - 'A' + 'a' : r;
}

/* The ASCII letter a non-ASCII rune folds to under Go's simple folding, or
 * 0: only these two leave ASCII's case orbits. */
static unsigned fold_to_ascii(unsigned r)
{
    if (r == 0x212a)
        return 'k';
    if (r == 0x17f)
        return 's';
    return 0;
}

static bool rune_fold_equal(unsigned a, unsigned b)
{
    if (a == b)
        return true;
    if (a < 0x80 && b < 0x80)
        return ascii_lower(a) == ascii_lower(b) && ascii_lower(a) >= 'a' && ascii_lower(a) <= 'z';
    if (a < 0x80)
        return fold_to_ascii(b) == ascii_lower(a);
    if (b < 0x80)
        return fold_to_ascii(a) == ascii_lower(b);
    return false;
}

bool csc_equal_fold(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    size_t la = strlen(a), lb = strlen(b), i = 0, j = 0;
    while (i < la && j < lb) {
        unsigned ra, rb;
        size_t na = util_utf8_decode(a + i, la - i, &ra);
        size_t nb = util_utf8_decode(b + j, lb - j, &rb);
        /* Go decodes an invalid byte as U+FFFD, one byte long. */
        if (na == 0)
            na = 1, ra = 0xfffd;
        if (nb == 0)
            nb = 1, rb = 0xfffd;
        if (!rune_fold_equal(ra, rb))
            return false;
        i += na;
        j += nb;
    }
    return i == la && j == lb;
}

/* ---- texts --------------------------------------------------------------------------------- */

char *csc_rpc_error(const char *prefix, const csi_status *st)
{
    char *text = csi_status_text(st);
    if (!prefix || !*prefix)
        return text;
    char *msg = util_asprintf("%s: %s", prefix, text);
    free(text);
    return msg;
}

char *csc_not_found(const kube_resource *res, const char *name)
{
    if (res->group && *res->group)
        return util_asprintf("%s.%s \"%s\" not found", res->resource, res->group, name ? name : "");
    return util_asprintf("%s \"%s\" not found", res->resource, name ? name : "");
}

/* ---- patches ------------------------------------------------------------------------------- */

/* {"metadata":{"resourceVersion":rv}}, or NULL without one. */
static json_object *guarded(const json_object *obj)
{
    const char *rv = kobj_rv(obj);
    if (!rv || !*rv)
        return NULL;
    json_object *p = json_object_new_object();
    json_object *md = json_object_new_object();
    json_object_object_add(md, "resourceVersion", json_object_new_string(rv));
    json_object_object_add(p, "metadata", md);
    return p;
}

static int finish(json_object *patch, char **out)
{
    *out = kobj_to_text(patch, NULL);
    json_object_put(patch);
    return 0;
}

static json_object *copy(const json_object *o)
{
    json_object *c = NULL;
    if (json_object_deep_copy((json_object *)o, &c, NULL) != 0)
        return NULL;
    return c;
}

/* The patch `p` sets obj's finalizers with `fin` appended. */
static void put_finalizers_with(json_object *p, const json_object *obj, const char *fin)
{
    json_object *list = json_object_new_array();
    json_object *cur = kobj_arr(kobj_meta(obj), "finalizers");
    for (size_t i = 0; i < kobj_len(cur); i++) {
        json_object *item = kobj_at(cur, i);
        json_object_array_add(list, item ? copy(item) : NULL);
    }
    json_object_array_add(list, json_object_new_string(fin));
    json_object_object_add(kobj_obj(p, "metadata"), "finalizers", list);
}

int csc_patch_access_intent(const json_object *access, const char *bucket_id, char **out)
{
    *out = NULL;
    if (!bucket_id || !*bucket_id)
        return util_err_set(-EINVAL, "no bucket id to record");
    bool has = kobj_has_finalizer(access, COSI_FINALIZER_ACCESS);
    const char *rec = csc_access_recorded_bucket_id(access);
    if (has && rec && strcmp(rec, bucket_id) == 0)
        return 0;
    json_object *p = guarded(access);
    if (!p)
        return util_err_set(-EINVAL, "%s has no resourceVersion",
                            kobj_name(access) ? kobj_name(access) : "the object");
    if (!has)
        put_finalizers_with(p, access, COSI_FINALIZER_ACCESS);
    json_object *ann = json_object_new_object();
    json_object_object_add(ann, COSI_ANN_BUCKET_ID, json_object_new_string(bucket_id));
    json_object_object_add(kobj_obj(p, "metadata"), "annotations", ann);
    return finish(p, out);
}

int csc_patch_add_finalizer(const json_object *obj, const char *fin, const json_object *params,
                            char **out)
{
    *out = NULL;
    bool has = kobj_has_finalizer(obj, fin);
    if (has && !params)
        return 0;
    json_object *p = guarded(obj);
    if (!p)
        return util_err_set(-EINVAL, "%s has no resourceVersion",
                            kobj_name(obj) ? kobj_name(obj) : "the object");
    if (!has)
        put_finalizers_with(p, obj, fin);
    if (params) {
        json_object *spec = json_object_new_object();
        json_object_object_add(spec, "parameters", copy(params));
        json_object_object_add(p, "spec", spec);
    }
    return finish(p, out);
}

static bool listed(const char *s, const char *const *fins)
{
    for (size_t k = 0; s && fins[k]; k++)
        if (strcmp(s, fins[k]) == 0)
            return true;
    return false;
}

int csc_patch_remove_finalizers(const json_object *obj, const char *const *fins, char **out)
{
    *out = NULL;
    json_object *cur = kobj_arr(kobj_meta(obj), "finalizers");
    size_t n = kobj_len(cur), removed = 0;
    for (size_t i = 0; i < n; i++)
        if (listed(kobj_str_at(cur, i), fins))
            removed++;
    if (removed == 0)
        return 0;
    json_object *p = guarded(obj);
    if (!p)
        return util_err_set(-EINVAL, "%s has no resourceVersion",
                            kobj_name(obj) ? kobj_name(obj) : "the object");
    json_object *list = NULL;
    if (removed < n) {
        list = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
            json_object *item = kobj_at(cur, i);
            if (!listed(kobj_str_at(cur, i), fins))
                json_object_array_add(list, item ? copy(item) : NULL);
        }
    }
    json_object_object_add(kobj_obj(p, "metadata"), "finalizers", list);
    return finish(p, out);
}

/* A status patch of two fields, unless the status says so already. */
static int status_patch(const json_object *obj, const char *bool_key, const char *str_key,
                        const char *value, char **out)
{
    *out = NULL;
    json_object *st = kobj_obj(obj, "status");
    const char *have = kobj_str(st, str_key);
    if (kobj_bool(st, bool_key, false) && have && value && strcmp(have, value) == 0)
        return 0;
    json_object *p = guarded(obj);
    if (!p)
        return util_err_set(-EINVAL, "%s has no resourceVersion",
                            kobj_name(obj) ? kobj_name(obj) : "the object");
    json_object *s = json_object_new_object();
    json_object_object_add(s, bool_key, json_object_new_boolean(1));
    json_object_object_add(s, str_key, json_object_new_string(value ? value : ""));
    json_object_object_add(p, "status", s);
    return finish(p, out);
}

int csc_patch_bucket_ready(const json_object *bucket, const char *bucket_id, char **out)
{
    return status_patch(bucket, "bucketReady", "bucketID", bucket_id, out);
}

int csc_patch_claim_ready(const json_object *claim, const char *bucket_name, char **out)
{
    return status_patch(claim, "bucketReady", "bucketName", bucket_name, out);
}

int csc_patch_access_granted(const json_object *access, const char *account_id, char **out)
{
    return status_patch(access, "accessGranted", "accountID", account_id, out);
}

/* ---- requests ------------------------------------------------------------------------------ */

void *csc_map_entries(const json_object *params, const ProtobufCMessageDescriptor *d, size_t *n)
{
    *n = 0;
    json_object *o = kobj_typed(params, json_type_object);
    size_t cap = o ? (size_t)json_object_object_length(o) : 0;
    const ProtobufCFieldDescriptor *fk = protobuf_c_message_descriptor_get_field_by_name(d, "key");
    const ProtobufCFieldDescriptor *fv =
        protobuf_c_message_descriptor_get_field_by_name(d, "value");
    if (cap == 0 || !fk || !fv)
        return NULL;
    void **v = util_calloc(cap, sizeof(void *));
    json_object_object_foreach(o, key, val)
    {
        if (!json_object_is_type(val, json_type_string))
            continue; /* a wrong type reads as missing */
        char *e = util_calloc(1, d->sizeof_message);
        protobuf_c_message_init(d, e);
        *(char **)(void *)(e + fk->offset) = util_strdup(key);
        *(char **)(void *)(e + fv->offset) = util_strdup(json_object_get_string(val));
        v[(*n)++] = e;
    }
    return v;
}

void csc_request_free(ProtobufCMessage *req)
{
    /* protobuf-c skips its static empty string; everything else was
     * malloc'ed by the builders. */
    if (req)
        protobuf_c_message_free_unpacked(req, NULL);
}
