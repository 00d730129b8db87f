/*
 * Structural OpenAPI v3 schemas of CustomResourceDefinition versions: what
 * kube-apiserver does to a custom object with its version's
 * openAPIV3Schema, in its order: pruning of unknown fields (decoding),
 * defaulting, then validation.
 *
 * The schema is read as stored (a json-c tree, never modified here). Only
 * the keywords CRDs of this project use are known: type, properties,
 * required, enum, items, additionalProperties, nullable, default,
 * x-kubernetes-preserve-unknown-fields and x-kubernetes-int-or-string.
 * x-kubernetes-map-type (COSI's Bucket has one) changes nothing here: it
 * only tells server-side apply how to merge. Formats, patterns, bounds and
 * CEL rules are not checked.
 *
 * Messages follow kube-apiserver 1.20, which converts go-openapi's errors
 * to field errors: a missing property is "Required value", a value of the
 * wrong type "Invalid value: \"integer\": spec.a in body must be of type
 * string: \"integer\"", a value outside the enum "Unsupported value". An
 * object's missing required properties come after its members' errors, as
 * there. Array items are named by index (spec.a[1]) as in newer releases;
 * 1.20 names the array itself.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

static bool preserves_unknown(const json_object *schema)
{
    return kobj_bool(schema, "x-kubernetes-preserve-unknown-fields", false);
}

/* additionalProperties as a schema, or NULL (absent or a boolean). */
static json_object *additional_schema(const json_object *schema)
{
    return kobj_obj(schema, "additionalProperties");
}

static bool additional_allowed(const json_object *schema)
{
    json_object *a = kobj_get(schema, "additionalProperties");
    return a && (json_object_is_type(a, json_type_object) ||
                 (json_object_is_type(a, json_type_boolean) && json_object_get_boolean(a)));
}

/* The schema of member `key` of an object, or NULL when the schema does not
 * specify it. */
static json_object *member_schema(const json_object *schema, const char *key)
{
    json_object *p = kobj_obj(kobj_obj(schema, "properties"), key);
    return p ? p : additional_schema(schema);
}

static bool is_root_meta(const char *key)
{
    return strcmp(key, "apiVersion") == 0 || strcmp(key, "kind") == 0 ||
           strcmp(key, "metadata") == 0;
}

void kl_schema_prune(const json_object *schema, json_object *obj, bool root)
{
    if (!schema || !obj)
        return;
    if (json_object_is_type(obj, json_type_array)) {
        json_object *items = kobj_obj(schema, "items");
        for (size_t i = 0; items && i < json_object_array_length(obj); i++)
            kl_schema_prune(items, json_object_array_get_idx(obj, i), false);
        return;
    }
    if (!json_object_is_type(obj, json_type_object))
        return;
    bool keep_unknown = preserves_unknown(schema) || additional_allowed(schema);
    /* Deleting while iterating a json-c object is not safe: collect first. */
    size_t n = 0, cap = (size_t)json_object_object_length(obj);
    const char **drop = util_calloc(cap ? cap : 1, sizeof(*drop));
    json_object_object_foreach(obj, key, val)
    {
        if (root && is_root_meta(key))
            continue;
        json_object *sub = member_schema(schema, key);
        if (sub)
            kl_schema_prune(sub, val, false);
        else if (!keep_unknown)
            drop[n++] = key;
    }
    for (size_t i = 0; i < n; i++)
        json_object_object_del(obj, drop[i]);
    free(drop);
}

void kl_schema_default(const json_object *schema, json_object *obj)
{
    if (!schema || !obj)
        return;
    if (json_object_is_type(obj, json_type_array)) {
        json_object *items = kobj_obj(schema, "items");
        for (size_t i = 0; items && i < json_object_array_length(obj); i++)
            kl_schema_default(items, json_object_array_get_idx(obj, i));
        return;
    }
    if (!json_object_is_type(obj, json_type_object))
        return;
    /* Nulls of fields that are not nullable go (or take the default). */
    size_t n = 0, cap = (size_t)json_object_object_length(obj);
    const char **nulls = util_calloc(cap ? cap : 1, sizeof(*nulls));
    json_object_object_foreach(obj, key, val)
    {
        json_object *sub = member_schema(schema, key);
        if (!val && sub && !kobj_bool(sub, "nullable", false))
            nulls[n++] = key;
    }
    for (size_t i = 0; i < n; i++)
        json_object_object_del(obj, nulls[i]);
    free(nulls);
    json_object *props = kobj_obj(schema, "properties");
    if (props) {
        json_object_object_foreach(props, pkey, psub)
        {
            json_object *dflt = kobj_get(psub, "default");
            if (dflt && !kobj_get(obj, pkey)) {
                json_object *copy = NULL;
                if (json_object_deep_copy(dflt, &copy, NULL) == 0)
                    json_object_object_add(obj, pkey, copy);
            }
        }
    }
    json_object_object_foreach(obj, k2, v2)
    {
        json_object *sub = member_schema(schema, k2);
        if (sub && v2)
            kl_schema_default(sub, v2);
    }
}

/* The OpenAPI type name of a JSON value (integral numbers are integers,
 * as go-openapi reads them). */
static const char *type_name(const json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null:
        return "null";
    case json_type_boolean:
        return "boolean";
    case json_type_int:
        return "integer";
    case json_type_double: {
        double d = json_object_get_double(v);
        return d == floor(d) && isfinite(d) ? "integer" : "number";
    }
    case json_type_string:
        return "string";
    case json_type_array:
        return "array";
    case json_type_object:
        return "object";
    }
    return "null";
}

static bool type_ok(const json_object *schema, const char *want, const char *have)
{
    if (kobj_bool(schema, "x-kubernetes-int-or-string", false))
        return strcmp(have, "integer") == 0 || strcmp(have, "string") == 0;
    if (!want)
        return true;
    if (strcmp(want, have) == 0)
        return true;
    return strcmp(want, "number") == 0 && strcmp(have, "integer") == 0;
}

static char *child(const char *path, const char *key)
{
    return *path ? util_asprintf("%s.%s", path, key) : util_strdup(key);
}

/* The value of a field error: strings quoted, anything else as JSON. */
static char *value_text(const json_object *v)
{
    if (json_object_is_type(v, json_type_string))
        return kl_quote(json_object_get_string((json_object *)v));
    return util_strdup(json_object_to_json_string_ext((json_object *)v, JSON_C_TO_STRING_PLAIN));
}

static void check_enum(const json_object *schema, const json_object *v, const char *path,
                       kl_errs *e)
{
    json_object *en = kobj_arr(schema, "enum");
    if (!en)
        return;
    for (size_t i = 0; i < kobj_len(en); i++)
        if (json_object_equal(kobj_at(en, i), (json_object *)v))
            return;
    size_t len = 0;
    char *list = NULL;
    for (size_t i = 0; i < kobj_len(en); i++) {
        json_object *a = kobj_at(en, i);
        /* The schema is shared by the request threads: kobj's writer only
         * reads it (json-c's printer caches its text in the object). */
        char *t = json_object_is_type(a, json_type_string) ? NULL : kobj_to_text(a, NULL);
        char *q = kl_quote(t ? t : json_object_get_string(a));
        free(t);
        char *next = util_asprintf("%s%s%s", list ? list : "", len ? ", " : "", q);
        free(list);
        free(q);
        list = next;
        len++;
    }
    char *val = value_text(v);
    kl_errs_add(e, KL_NOT_SUPPORTED, path, "Unsupported value: %s: supported values: %s", val,
                list ? list : "");
    free(val);
    free(list);
}

void kl_schema_validate(const json_object *schema, const json_object *obj, const char *path,
                        kl_errs *e)
{
    if (!schema)
        return;
    bool root = !*path;
    const char *have = type_name(obj);
    if (!obj && kobj_bool(schema, "nullable", false))
        return;
    if (!type_ok(schema, kobj_str(schema, "type"), have)) {
        kl_errs_add(e, KL_INVALID, path,
                    "Invalid value: \"%s\": %s in body must be of type %s: \"%s\"", have, path,
                    kobj_str(schema, "type"), have);
        return;
    }
    check_enum(schema, obj, path, e);
    if (json_object_is_type(obj, json_type_array)) {
        json_object *items = kobj_obj(schema, "items");
        for (size_t i = 0; items && i < json_object_array_length(obj); i++) {
            char *p = util_asprintf("%s[%zu]", path, i);
            kl_schema_validate(items, json_object_array_get_idx(obj, i), p, e);
            free(p);
        }
        return;
    }
    if (!json_object_is_type(obj, json_type_object))
        return;
    json_object_object_foreach((json_object *)obj, key, val)
    {
        if (root && is_root_meta(key))
            continue;
        json_object *sub = member_schema(schema, key);
        if (!sub)
            continue;
        char *p = child(path, key);
        kl_schema_validate(sub, val, p, e);
        free(p);
    }
    /* After the members' errors, in the order of the list: go-openapi's
     * object validator checks required last. */
    json_object *req = kobj_arr(schema, "required");
    for (size_t i = 0; i < kobj_len(req); i++) {
        const char *rkey = kobj_str_at(req, i);
        if (rkey && !kobj_get(obj, rkey)) {
            char *p = child(path, rkey);
            kl_errs_add(e, KL_REQUIRED, p, "Required value");
            free(p);
        }
    }
}
