/*
 * fuzz_kl_proto: kube-lite's protobuf body decoder ("k8s\0" + runtime.Unknown
 * envelope, the kinds kubectl's generators send) fed arbitrary bytes, with
 * and without default apiVersion/kind. A decoded object then goes through
 * the shape check and create validation of its type, as a POST would.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const dflt[][2] = {{NULL, NULL}, {"v1", "Secret"}, {"v1", "ConfigMap"}};
    size_t which = size > 0 ? data[size - 1] % 3 : 0;
    json_object *out = NULL;
    if (kl_proto_decode(data, size, dflt[which][0], dflt[which][1], &out) == 0)
        validate(out);
    json_object_put(out);
    return 0;
}
