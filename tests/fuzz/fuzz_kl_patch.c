/*
 * fuzz_kl_patch: kube-lite's request bodies. The input is one JSON object
 * {"t": the stored object, "p": the patch, "k": a type index}: the patch is
 * applied as a JSON patch, a merge patch and a strategic merge patch (with
 * the merge keys of type k), and each result goes through what a PATCH does
 * next: the shape check, defaults and validation as an update of "t". "t"
 * alone is also validated as a create.
 */
#include "kube-lite/kl.h"

#include "kobj/kobj.h"

#include "fuzz.h"

static void after(const kl_type *t, const json_object *old, json_object *obj, bool status)
{
    if (kl_check_shape(t, obj) != 0 || !json_object_is_type(obj, json_type_object))
        return;
    kl_apply_defaults(t, obj);
    kl_errs *errs = kl_errs_new();
    if (errs == NULL)
        return;
    kl_validate_update(t, old, obj, status, errs);
    if (kl_errs_count(errs) > 0)
        json_object_put(kl_errs_status(errs, t, kobj_name(obj)));
    kl_errs_free(errs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *in = fuzz_json(data, size);
    if (in == NULL)
        return 0;
    size_t n_types = 0;
    const kl_type *types = kl_types(&n_types);
    int64_t k = 0;
    (void)kobj_int64(in, "k", &k);
    const kl_type *t = &types[(size_t)(k < 0 ? -(k + 1) : k) % n_types];
    const json_object *target = kobj_get(in, "t");
    const json_object *patch = kobj_get(in, "p");

    json_object *out = NULL;
    if (kl_json_patch(target, patch, &out) == 0)
        after(t, target, out, (k & 0x100) != 0);
    json_object_put(out);
    out = NULL;
    if (kl_merge_patch(target, patch, &out) == 0)
        after(t, target, out, (k & 0x100) != 0);
    json_object_put(out);
    out = NULL;
    if (kl_strategic_merge_patch(target, patch, t->merge_keys, t->n_merge_keys, &out) == 0)
        after(t, target, out, (k & 0x100) != 0);
    json_object_put(out);

    if (json_object_is_type(target, json_type_object) && kl_check_shape(t, target) == 0) {
        json_object *copy = NULL;
        if (json_object_deep_copy((json_object *)target, &copy, NULL) == 0 && copy != NULL) {
            kl_apply_defaults(t, copy);
            kl_errs *errs = kl_errs_new();
            if (errs != NULL) {
                kl_validate_create(t, copy, errs);
                if (kl_errs_count(errs) > 0)
                    json_object_put(kl_errs_status(errs, t, kobj_name(copy)));
                kl_errs_free(errs);
            }
        }
        json_object_put(copy);
    }
    json_object_put(in);
    return 0;
}
